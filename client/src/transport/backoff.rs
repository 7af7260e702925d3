//! New connections to a server that does not answer, spaced out: after a
//! connection attempt that ended before the server answered a command
//! (refused, reset or closed while connecting, during the TLS handshake,
//! AUTH/HELLO/SELECT or the identifying `INFO server`, or timed out), the
//! next attempt of any connection to that entry (the shared one, the
//! waits', the observers', the Sentinel look-ups made for them) waits a
//! pause that grows with each failure in a row, with jitter: at least
//! `FIRST_PAUSE`, at most `LONGEST_PAUSE`. Meanwhile requests fail at once
//! for that server (`Outcome::Unreachable`, saying so), and one attempt at
//! a time probes it. The pause ends when a connection is identified (its
//! server answered); and when a connection to another entry of the list
//! answers after failing (`Recoveries`: the client's own network is back,
//! most likely), each entry backing off tries once at once.
//!
//! Without it a proxy whose server is down (HAProxy, Envoy, a TLS
//! terminator, a cloud load balancer, a Kubernetes port-forward: each
//! accepts, then closes) was reconnected to by every request: a waiting
//! client made hundreds of connections a second to it, and a few waiting
//! clients exhausted its descriptors.
//!
//! The pauses double with each failure in a row, from `FIRST_PAUSE` up to
//! `LONGEST_PAUSE`, and each is drawn at random in the upper half of its
//! step (50–100 ms, 100–200 ms, ... 500 ms–1 s; "equal jitter"): the
//! random half spreads out clients that lost a server together, so they
//! do not come back in step; the fixed half keeps every client to at most
//! two attempts a second to a failing server (and one per recovery of
//! another entry), which full jitter (pauses down to zero) does not, and
//! it reaches the longest pause in five failures, where decorrelated
//! jitter (each pause drawn up to three times the last, as likely to fall
//! back as to climb) still made up to 23 attempts in the first four
//! seconds. `FIRST_PAUSE` is a few round trips
//! of a loaded machine: one failure (a server that restarts, a reset)
//! costs little. `LONGEST_PAUSE`: a server that comes back is tried again
//! within a second, while a dead one costs its proxy one or two
//! connections a second per client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::outcome::{Outcome, UnreachableCause};

/// The pause after one failed connection, and the least of any.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between two connection attempts to a failing server.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// How many times a connection to an entry of one server list answered
/// after failing, shared by the list's entries. A link that flaps (the
/// client's own network, dropping every few hundred ms) fails every entry
/// at once and comes back for all of them at once: the first entry found
/// back lets the others try at once rather than each waiting out its
/// pause, which would cost such a client most of the time its link is up.
/// A server that stays down costs one more attempt per recovery of
/// another.
#[derive(Default)]
pub struct Recoveries {
    count: AtomicU64,
    /// Woken at each recovery: work waiting for the link (a release sent
    /// again) goes at once, not at its next turn.
    recovered: tokio::sync::Notify,
}

impl Recoveries {
    fn now(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Resolves at the next recovery of an entry of the list (made before
    /// the wait it bounds begins, so that none is missed).
    pub fn next(&self) -> tokio::sync::futures::Notified<'_> {
        self.recovered.notified()
    }
}

/// One server entry's pacing of new connections, shared by every
/// connection made to it.
pub(super) struct Backoff {
    state: Mutex<State>,
    /// Its list's (see `Recoveries`).
    list: Arc<Recoveries>,
}

#[derive(Debug, Default)]
struct State {
    /// Connection attempts in a row that ended before the server answered.
    failures: u32,
    /// No attempt before this (set while `failures` > 0).
    until: Option<Instant>,
    /// An attempt is under way while failing: the others wait for it.
    probing: bool,
    /// The list's recoveries at the last failure: another one since ends
    /// the pause.
    recoveries: u64,
    /// What the last failed attempt came to.
    last: Option<Outcome>,
}

/// An attempt let through (`Backoff::admit`); ended by `Backoff::ended`,
/// or dropped unfinished (a caller that gave up), which counts for
/// nothing.
pub(super) struct Admitted<'a> {
    backoff: &'a Backoff,
    probe: bool,
    ended: bool,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.probe && !self.ended {
            self.backoff.state().probing = false;
        }
    }
}

impl Backoff {
    pub(super) fn new(list: Arc<Recoveries>) -> Backoff {
        Backoff { state: Mutex::default(), list }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets an attempt to connect through now, or fails it at once (the
    /// outcome says why) while the server's pause runs or another attempt
    /// probes it.
    pub(super) fn admit(&self) -> Result<Admitted<'_>, Outcome> {
        let probe = self.state().admit(Instant::now(), self.list.now())?;
        Ok(Admitted { backoff: self, probe, ended: false })
    }

    /// Records how the attempt `admitted` ended: `Ok` once its connection
    /// was identified; `Err` with the failure.
    pub(super) fn ended(&self, mut admitted: Admitted<'_>, result: Result<(), &Outcome>) {
        admitted.ended = true;
        let mut state = self.state();
        let recovered = result.is_ok() && state.failures > 0;
        if recovered {
            self.list.count.fetch_add(1, Ordering::SeqCst);
        }
        state.ended(Instant::now(), admitted.probe, result, self.list.now());
        drop(state);
        if recovered {
            self.list.recovered.notify_waiters();
        }
    }

    /// How long until the next connection attempt may go: `None` when the
    /// entry is not failing, or while an attempt probes it (its end is not
    /// a time); zero when one may go now.
    pub(super) fn paused_for(&self) -> Option<Duration> {
        let state = self.state();
        (state.failures > 0 && !state.probing)
            .then(|| state.until.map_or(Duration::ZERO, |until| until.saturating_duration_since(Instant::now())))
    }
}

impl State {
    /// `Ok(probe)`: go ahead, the one attempt of a failing server when
    /// `probe`; `Err`: not now. `recoveries`: the list's now.
    fn admit(&mut self, now: Instant, recoveries: u64) -> Result<bool, Outcome> {
        if self.failures == 0 {
            return Ok(false);
        }
        let left = self.until.map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
        if self.probing || (!left.is_zero() && recoveries == self.recoveries) {
            return Err(self.backing_off(left));
        }
        self.probing = true;
        Ok(true)
    }

    fn ended(&mut self, now: Instant, probe: bool, result: Result<(), &Outcome>, recoveries: u64) {
        if probe {
            self.probing = false;
        }
        match result {
            Err(failure) if !answered(failure) => {
                self.failures = self.failures.saturating_add(1);
                self.until = now.checked_add(pause_after(self.failures, &mut rand::rng()));
                self.last = Some(failure.clone());
                self.recoveries = recoveries;
            }
            // Identified, or an error reply: the server answered.
            _ => *self = State::default(),
        }
    }

    /// A request's outcome while backing off: the last failure, named as
    /// one the client is backing off after.
    fn backing_off(&self, left: Duration) -> Outcome {
        let plural = if self.failures == 1 { "" } else { "s" };
        let next = if self.probing {
            "a connection is being tried".to_string()
        } else {
            format!("next attempt in {} ms", left.as_millis().max(1))
        };
        let note = format!("backing off after {} failed connection{plural} ({next})", self.failures);
        match &self.last {
            Some(Outcome::Unreachable { cause, detail }) => Outcome::Unreachable { cause: *cause, detail: format!("{note}: {detail}") },
            Some(Outcome::TlsFailed(text)) => Outcome::TlsFailed(format!("{text} ({note})")),
            // A connection or its identification not done in time.
            _ => Outcome::Unreachable { cause: UnreachableCause::ConnectTimeout, detail: format!("{note}: no answer in time") },
        }
    }
}

/// Whether a failed connection attempt got an answer from its server (an
/// error reply: credentials, SELECT, a server listed twice, ...): it is
/// there, and reconnecting to it is no storm.
fn answered(failure: &Outcome) -> bool {
    !matches!(failure, Outcome::Unreachable { .. } | Outcome::Timeout | Outcome::TlsFailed(_))
}

/// The pause after `failures` failures in a row (1 or more): drawn in the
/// upper half of `FIRST_PAUSE` × 2^failures, at most `LONGEST_PAUSE`.
fn pause_after(failures: u32, rng: &mut impl Rng) -> Duration {
    let step = FIRST_PAUSE.saturating_mul(1 << failures.clamp(1, 16)).min(LONGEST_PAUSE);
    rng.random_range(step / 2..=step)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Outcome {
        Outcome::Unreachable { cause: UnreachableCause::ConnectionRefused, detail: "Connection refused (os error 111)".into() }
    }

    #[test]
    fn pauses_double_from_the_first_to_the_longest_each_in_its_upper_half() {
        let mut rng = rand::rng();
        let ms = Duration::from_millis;
        let steps = [(1, ms(50), ms(100)), (2, ms(100), ms(200)), (3, ms(200), ms(400)), (4, ms(400), ms(800)), (5, ms(500), ms(1000))];
        for (failures, least, most) in steps.into_iter().chain([(6, ms(500), ms(1000)), (u32::MAX, ms(500), ms(1000))]) {
            let drawn: Vec<Duration> = (0..500).map(|_| pause_after(failures, &mut rng)).collect();
            assert!(drawn.iter().all(|p| (least..=most).contains(p)), "{failures}: {drawn:?}");
            // Jitter: spread over the step, not one value.
            let (low, high) = (drawn.iter().min().copied(), drawn.iter().max().copied());
            assert!(low.zip(high).is_some_and(|(l, h)| h - l >= (most - least) / 2), "{failures}: {low:?}..{high:?}");
        }
        // However long it fails: at most two attempts a second, each within
        // a second of the last.
        assert_eq!((FIRST_PAUSE, LONGEST_PAUSE), (ms(50), ms(1000)));
    }

    #[test]
    fn a_failing_server_is_tried_once_per_pause_and_by_one_attempt() {
        let start = Instant::now();
        let mut s = State::default();
        assert_eq!(s.admit(start, 0), Ok(false), "a healthy server: every attempt goes, none probes");
        s.ended(start, false, Err(&refused()), 0);
        assert_eq!(s.failures, 1);
        let until = s.until.expect("a pause");
        assert!(until >= start + FIRST_PAUSE && until <= start + FIRST_PAUSE * 2, "{:?}", until - start);
        assert_eq!(s.admit(until - Duration::from_millis(1), 0).map_err(|_| ()), Err(()), "not before the pause ends");
        let failed = s.admit(start, 0).expect_err("no attempt during the pause");
        match failed {
            Outcome::Unreachable { cause: UnreachableCause::ConnectionRefused, detail } => {
                assert!(detail.starts_with("backing off after 1 failed connection (next attempt in "), "{detail}");
                assert!(detail.ends_with(": Connection refused (os error 111)"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // After the pause one attempt probes; the others fail meanwhile.
        assert_eq!(s.admit(until, 0), Ok(true));
        let meanwhile = s.admit(until, 0).expect_err("one probe at a time");
        assert!(meanwhile.to_string().contains("connection refused"), "{meanwhile}");
        match meanwhile {
            Outcome::Unreachable { detail, .. } => assert!(detail.contains("a connection is being tried"), "{detail}"),
            other => panic!("{other:?}"),
        }
        let closed = Outcome::Unreachable { cause: UnreachableCause::Io, detail: "broken pipe".into() };
        s.ended(until, true, Err(&closed), 0);
        assert_eq!((s.failures, s.probing), (2, false));
        match s.admit(until, 0).expect_err("a second pause") {
            Outcome::Unreachable { cause: UnreachableCause::Io, detail } => {
                assert!(detail.starts_with("backing off after 2 failed connections"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        // Identified: every attempt goes again.
        let again = s.until.expect("a pause");
        assert_eq!(s.admit(again, 0), Ok(true));
        s.ended(again, true, Ok(()), 0);
        assert_eq!(s.admit(again, 0), Ok(false));
        assert_eq!((s.failures, s.until, s.probing), (0, None, false));
    }

    #[test]
    fn an_answer_ends_the_pause_and_a_timeout_or_tls_failure_counts() {
        let now = Instant::now();
        let mut s = State::default();
        s.ended(now, false, Err(&Outcome::Timeout), 0);
        let late = s.until.expect("a pause");
        match s.admit(now, 0).expect_err("backing off") {
            Outcome::Unreachable { cause: UnreachableCause::ConnectTimeout, detail } => assert!(detail.ends_with("no answer in time")),
            other => panic!("{other:?}"),
        }
        s.ended(late, false, Err(&Outcome::TlsFailed("handshake".into())), 0);
        assert_eq!(s.failures, 2);
        assert!(matches!(s.admit(late, 0), Err(Outcome::TlsFailed(text)) if text.starts_with("handshake (backing off after 2")));
        // An error reply while connecting is an answer: no pause.
        s.ended(late, false, Err(&Outcome::AuthFailed("WRONGPASS".into())), 0);
        assert_eq!(s.admit(late, 0), Ok(false));
    }

    #[test]
    fn an_attempt_dropped_unfinished_lets_the_next_one_probe() {
        let backoff = Backoff::new(Arc::default());
        backoff.state().ended(Instant::now() - LONGEST_PAUSE, false, Err(&refused()), 0);
        let probe = backoff.admit().expect("the pause is over");
        assert!(backoff.admit().is_err(), "one probe at a time");
        drop(probe);
        let next = backoff.admit().expect("the probe gave up: the next one goes");
        backoff.ended(next, Err(&refused()));
        assert_eq!(backoff.state().failures, 2);
        assert!(!backoff.state().probing);
    }

    #[test]
    fn an_entry_found_back_lets_the_others_try_once_at_once() {
        let list = Arc::new(Recoveries::default());
        let (a, b, c) = (Backoff::new(Arc::clone(&list)), Backoff::new(Arc::clone(&list)), Backoff::new(Arc::clone(&list)));
        for entry in [&a, &b, &c] {
            let attempt = entry.admit().expect("healthy");
            entry.ended(attempt, Err(&refused()));
            assert!(entry.admit().is_err(), "backing off");
        }
        // A back (its pause over, here by hand): B and C try at once, once.
        a.state().until = Some(Instant::now());
        let probe = a.admit().expect("the pause is over");
        a.ended(probe, Ok(()));
        let retry = b.admit().expect("another entry is back: B tries at once");
        b.ended(retry, Err(&refused()));
        assert!(b.admit().is_err(), "failed again: B's pause stands, until the next recovery");
        assert_eq!(b.state().failures, 2);
        let retry = c.admit().expect("C tries at once too");
        assert!(c.admit().is_err(), "one attempt at a time");
        c.ended(retry, Ok(()));
        // C back counts as one more recovery: B tries again.
        assert!(b.admit().is_ok());
    }
}
