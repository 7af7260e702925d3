//! The Redlock arithmetic, free of I/O: quorum size, clock drift, the
//! validity left after an acquisition, and fencing-token reconciliation.

use std::time::Duration;

use crate::outcome::{InstanceOutcome, Outcome, Rejection};

/// A majority of `n` instances: n/2 + 1.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The token a hold has as a quorum of servers reports it: the largest t
/// such that `quorum` of the `tokens` (one per server that holds it) are
/// t or more, i.e. the quorum-th largest. Once the client wrote its
/// token back this is the lock's token; before, no quorum has a larger
/// one. `None` when fewer than `quorum` servers hold it.
pub fn agreed_token(tokens: impl IntoIterator<Item = i64>, quorum: usize) -> Option<i64> {
    let mut tokens: Vec<i64> = tokens.into_iter().collect();
    tokens.sort_unstable_by(|a, b| b.cmp(a));
    tokens.get(quorum.checked_sub(1)?).copied()
}

/// The clock drift allowed for a lease of `ttl`: `ttl * factor + 2 ms`
/// (the 2 ms cover Redis's millisecond expiry resolution).
pub fn drift(ttl: Duration, factor: f64) -> Duration {
    let scaled = ttl.as_secs_f64() * factor.max(0.0);
    Duration::try_from_secs_f64(scaled).unwrap_or(Duration::MAX).saturating_add(Duration::from_millis(2))
}

/// The validity of a lease of `ttl` granted by a round sent `elapsed` ago,
/// counted from the round's start: `ttl` less the `drift`, since no server
/// can have started the lease before the round was sent; `None` when the
/// round ended after that (never a wrapped-around "huge" validity).
/// Redlock's "validity left", `ttl - elapsed - drift` from the end of the
/// round, is the same instant; counted from the start, it would take the
/// round off twice (a lock granted after 3 s of a waiting round had 4 s of
/// a 10 s ttl, not 7).
pub fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    let validity = ttl.checked_sub(drift).filter(|v| !v.is_zero())?;
    (elapsed < validity).then_some(validity)
}

/// `validity` of a hold bound to its connections: never past `window`
/// (`Settings::session_window`), counted from the round's start as the
/// validity is, since a server may free the lock a lock-delay after the
/// connection closes, and the connection was last known open when the
/// round was sent. `None` when nothing is left of either.
pub fn session_validity(lease: Option<Duration>, window: Option<Duration>, elapsed: Duration) -> Option<Duration> {
    let lease = lease?;
    match window {
        None => Some(lease),
        Some(window) if window > elapsed => Some(lease.min(window)),
        Some(_) => None,
    }
}

/// Fencing reconciliation. Given the tokens the granting instances issued,
/// the token of the lock is their maximum; the instances that issued a
/// smaller one must be raised to it (`LOCK.ACQUIRE ... FENCE max`).
///
/// Why this keeps tokens monotonic across the quorum: a lock counts as
/// taken only when a quorum holds its token T or more (after the
/// write-back), so
/// every instance of that quorum has a counter >= T, and counters never go
/// back (they are persisted, and a node that lost its memory restarts
/// from the wall clock in microseconds, above any token it issued, and is
/// quarantined until old leases ran out). Any later lock is granted by a
/// quorum too, and two quorums share at least one instance; that instance
/// issues a token > T, so the later lock's maximum is > T. Without the
/// write-back, the shared instance could be one that had issued a smaller
/// token for the first lock, and the later token could be smaller than T.
#[derive(Debug, PartialEq, Eq)]
pub struct Reconciliation {
    /// The lock's token.
    pub token: i64,
    /// Indexes (into the input) of the grants to raise to `token`.
    pub behind: Vec<usize>,
}

pub fn reconcile(tokens: &[i64]) -> Option<Reconciliation> {
    let token = *tokens.iter().max()?;
    let behind = tokens.iter().enumerate().filter(|(_, t)| **t < token).map(|(i, _)| i).collect();
    Some(Reconciliation { token, behind })
}

/// Why an acquisition round got no quorum, from its outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotGranted {
    /// Enough servers answered, and too many of them hold the lock for
    /// another owner: it is held (or being contended for).
    Held,
    /// Restart quarantines stand between the client and a quorum: had the
    /// `instances` in quarantine granted, a quorum would have. `ms_left`:
    /// until enough of them are out of it (the shortest wait that can
    /// help; other refusals may still follow).
    Quarantine { ms_left: u64, instances: usize },
    /// Fewer than a quorum of servers answered at all (unreachable,
    /// timeouts, error replies such as authentication or a missing
    /// module): no vote was possible.
    NoQuorum,
    /// A quorum granted, but no validity was left after the round trips
    /// and the drift (or the granters' tokens could not be agreed on).
    NoValidity,
    /// Servers refused the request itself (an error reply no retry fixes:
    /// a ttl over max-ttl, WRONGTYPE, NOPERM, READONLY, no module, ...),
    /// and they stand between the client and a quorum: had the
    /// `instances` that refused granted, a quorum would have. `rejection`
    /// is the most common of their refusals.
    Rejected { rejection: Rejection, instances: usize },
}

impl NotGranted {
    /// A stable name for scripts: `held`, `quarantine`, `no_quorum`,
    /// `no_validity`, `rejected`.
    pub fn kind(&self) -> &'static str {
        match self {
            NotGranted::Held => "held",
            NotGranted::Quarantine { .. } => "quarantine",
            NotGranted::NoQuorum => "no_quorum",
            NotGranted::NoValidity => "no_validity",
            NotGranted::Rejected { .. } => "rejected",
        }
    }
}

/// Why the round with these `outcomes` got no quorum of `quorum`. Servers
/// that refused the request itself (`Outcome::rejection`) are named first
/// when, had they granted, a quorum would have: they answered, and no
/// retry changes their answer. Only the servers that answered the lock
/// question (granted, refused, in quarantine) voted: fewer voters than a
/// quorum is `NoQuorum` whatever they said (two refusals beside three
/// unreachable servers do not show the lock held on a quorum). Otherwise
/// the quarantine is named when it alone stands in the way, and `Held`
/// when refusals do.
pub fn not_granted(outcomes: &[InstanceOutcome], quorum: usize) -> NotGranted {
    let granted = outcomes.iter().filter(|o| matches!(o.outcome, Outcome::Granted { .. })).count();
    if let Some((rejection, instances)) = rejections(outcomes) {
        if granted < quorum && granted + instances >= quorum {
            return NotGranted::Rejected { rejection, instances };
        }
    }
    let held = outcomes.iter().filter(|o| o.outcome == Outcome::Refused).count();
    let mut quarantined: Vec<u64> = outcomes
        .iter()
        .filter_map(|o| match o.outcome {
            Outcome::Quarantine { ms_left } => Some(ms_left),
            _ => None,
        })
        .collect();
    if granted + held + quarantined.len() < quorum {
        return NotGranted::NoQuorum;
    }
    if granted >= quorum {
        return NotGranted::NoValidity;
    }
    if !quarantined.is_empty() && granted + quarantined.len() >= quorum {
        quarantined.sort_unstable();
        let needed = quorum - granted;
        let ms_left = quarantined.get(needed.saturating_sub(1)).copied().unwrap_or(0);
        return NotGranted::Quarantine { ms_left, instances: quarantined.len() };
    }
    NotGranted::Held
}

/// The most common rejection among `outcomes` (the first of equals), and
/// how many outcomes are rejections of any kind.
pub fn rejections(outcomes: &[InstanceOutcome]) -> Option<(Rejection, usize)> {
    let all: Vec<Rejection> = outcomes.iter().filter_map(|o| o.outcome.rejection()).collect();
    let most =
        all.iter().copied().max_by_key(|r| (all.iter().filter(|x| *x == r).count(), std::cmp::Reverse(all.iter().position(|x| x == r))))?;
    Some((most, all.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn majority_of_common_sizes() {
        assert_eq!([1, 2, 3, 4, 5, 6, 7].map(majority), [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(MS(10_000), 0.01), MS(102));
        assert_eq!(drift(MS(100), 0.01), MS(3));
        assert_eq!(drift(MS(100), 0.0), MS(2));
        // A nonsensical factor cannot make the drift negative.
        assert_eq!(drift(MS(100), -1.0), MS(2));
    }

    #[test]
    fn validity_counts_from_the_rounds_start_less_the_drift() {
        // From the round's start: the round's 30 ms are not taken off
        // (they are already behind `acquired_at`).
        assert_eq!(validity(MS(10_000), MS(30), MS(102)), Some(MS(9_898)));
        assert_eq!(validity(MS(10_000), MS(3_000), MS(102)), Some(MS(9_898)));
    }

    #[test]
    fn a_session_window_bounds_the_validity_from_the_rounds_start() {
        // No window: the lease's.
        assert_eq!(session_validity(Some(MS(9_000)), None, MS(30)), Some(MS(9_000)));
        // The window ends first: it is the validity (from the same start).
        assert_eq!(session_validity(Some(MS(9_000)), Some(MS(3_500)), MS(30)), Some(MS(3_500)));
        assert_eq!(session_validity(Some(MS(1_000)), Some(MS(3_500)), MS(30)), Some(MS(1_000)));
        // The round took the whole window (a late grant of a long wait).
        assert_eq!(session_validity(Some(MS(9_000)), Some(MS(3_500)), MS(3_500)), None);
        assert_eq!(session_validity(None, Some(MS(3_500)), MS(30)), None);
    }

    #[test]
    fn validity_is_none_when_nothing_is_left_never_wrapped() {
        assert_eq!(validity(MS(10), MS(8), MS(2)), None);
        assert_eq!(validity(MS(10), MS(9), MS(2)), None);
        assert_eq!(validity(MS(10), MS(50), MS(2)), None);
        assert_eq!(validity(MS(10), MS(7), MS(2)), Some(MS(8)));
        assert_eq!(validity(MS(2), MS(0), MS(2)), None);
    }

    fn round(outcomes: &[Outcome]) -> Vec<InstanceOutcome> {
        outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| InstanceOutcome { server: format!("s{i}"), outcome: o.clone(), latency: MS(1), connection: None })
            .collect()
    }

    #[test]
    fn why_not_granted() {
        use crate::outcome::UnreachableCause::ConnectionRefused;
        let g = Outcome::Granted { token: Some(1) };
        let r = Outcome::Refused;
        let q = |ms| Outcome::Quarantine { ms_left: ms };
        let down = Outcome::Unreachable { cause: ConnectionRefused, detail: String::new() };
        let t = Outcome::Timeout;
        // Two refusals beside three unreachable servers: no vote, not "held".
        assert_eq!(not_granted(&round(&[r.clone(), r.clone(), down.clone(), down.clone(), t.clone()]), 3), NotGranted::NoQuorum);
        assert_eq!(not_granted(&round(&[down.clone(), down.clone(), down.clone()]), 2), NotGranted::NoQuorum);
        assert_eq!(not_granted(&round(&[r.clone(), r.clone(), r.clone(), down.clone(), down.clone()]), 3), NotGranted::Held);
        assert_eq!(not_granted(&round(&[g.clone(), g.clone(), r.clone(), r.clone(), down.clone()]), 3), NotGranted::Held);
        // Every server in quarantine: the third shortest counts (quorum 3).
        let all_q = [q(500), q(60_000), q(59_000), q(58_000), q(57_000)];
        assert_eq!(not_granted(&round(&all_q), 3), NotGranted::Quarantine { ms_left: 58_000, instances: 5 });
        // Two grants: the shortest quarantine is enough.
        assert_eq!(
            not_granted(&round(&[g.clone(), g.clone(), q(9_000), q(4_000), down.clone()]), 3),
            NotGranted::Quarantine { ms_left: 4_000, instances: 2 }
        );
        // Quarantines that could not make a quorum anyway: refusals decide.
        assert_eq!(not_granted(&round(&[r.clone(), r.clone(), r.clone(), q(1_000), g.clone()]), 3), NotGranted::Held);
        // Quarantined voters without a quorum of voters: no quorum.
        assert_eq!(not_granted(&round(&[q(1_000), q(1_000), down.clone(), down.clone(), t]), 3), NotGranted::NoQuorum);
        assert_eq!(not_granted(&round(&[g.clone(), g.clone(), g, r, down]), 3), NotGranted::NoValidity);
        assert_eq!(NotGranted::Quarantine { ms_left: 1, instances: 1 }.kind(), "quarantine");
    }

    #[test]
    fn reconciliation_raises_everyone_below_the_maximum() {
        assert_eq!(reconcile(&[5, 9, 7, 9]), Some(Reconciliation { token: 9, behind: vec![0, 2] }));
        assert_eq!(reconcile(&[4, 4, 4]), Some(Reconciliation { token: 4, behind: vec![] }));
        assert_eq!(reconcile(&[]), None);
    }
}
