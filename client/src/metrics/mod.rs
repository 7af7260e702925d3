//! The quorum client's metrics, one registry per `Redlock` handle: what
//! its acquisitions waited for and got, how long it held, what it lost,
//! how each server answered, and its elections. The quorum logic and the
//! connections only count, through the few methods here: each a relaxed
//! atomic addition or a histogram observation (`histogram`), with nothing
//! allocated or locked per server request (one `Held` per grant; a lock
//! dropped unreleased takes the `dropped` heap's lock once) and no
//! resource name kept, so the labels stay few whatever the application
//! locks. The application reads
//! a `Snapshot` (`Redlock::metrics`) and renders it in Prometheus's text
//! format (`Snapshot::to_prometheus`, in `text`), or feeds its own
//! exporter from the snapshot's fields. `redlock run --metrics` and the
//! other long-running commands serve that text at `/metrics`.

mod histogram;
mod servers;
mod text;

pub use histogram::HistogramSnapshot;
pub use servers::{fields, render as render_server_info, NodeInfo, ServerInfo};
pub use text::CONTENT_TYPE;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use histogram::Histogram;

use crate::outcome::{Outcome, UnreachableCause};

/// What an acquisition asked for (the `kind` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireKind {
    /// One resource, exclusively.
    Exclusive,
    /// A shared hold of a read-write lock.
    Shared,
    /// Permits of a semaphore.
    Permits,
    /// Several resources held whole (`try_lock_all`, `lock_all_until`).
    Set,
}

impl AcquireKind {
    pub const ALL: [AcquireKind; 4] = [AcquireKind::Exclusive, AcquireKind::Shared, AcquireKind::Permits, AcquireKind::Set];

    pub fn label(self) -> &'static str {
        match self {
            AcquireKind::Exclusive => "exclusive",
            AcquireKind::Shared => "shared",
            AcquireKind::Permits => "permits",
            AcquireKind::Set => "set",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How an acquisition ended (the `outcome` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    Granted,
    /// A quorum refused it (held by another, servers in quarantine) and
    /// it had no deadline to wait for, or its retries were used up.
    Refused,
    /// Its deadline passed while it waited.
    TimedOut,
    /// Too few servers answered, a request refused as such (max-ttl,
    /// NOPERM, a server listed twice, ...), or a bad argument.
    Error,
    /// Its caller gave it up (the future was dropped) before it ended.
    Cancelled,
}

impl AcquireOutcome {
    pub const ALL: [AcquireOutcome; 5] =
        [AcquireOutcome::Granted, AcquireOutcome::Refused, AcquireOutcome::TimedOut, AcquireOutcome::Error, AcquireOutcome::Cancelled];

    pub fn label(self) -> &'static str {
        match self {
            AcquireOutcome::Granted => "granted",
            AcquireOutcome::Refused => "refused",
            AcquireOutcome::TimedOut => "timed_out",
            AcquireOutcome::Error => "error",
            AcquireOutcome::Cancelled => "cancelled",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a kept hold (`LockGuard`, a leadership) was lost (the `cause` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossCause {
    /// Its validity ran out before an extension confirmed it.
    Expired,
    /// A quorum refused its extension: the servers no longer keep it
    /// for this owner (its lease ran out there, it was released or taken).
    Refused,
    /// Too few servers answered its extension.
    Unreachable,
    /// An operator took it away (`LOCK.REVOKE`, `redlock revoke`): a
    /// server answered its extension that the hold was revoked, and too
    /// few extended it.
    Revoked,
}

impl LossCause {
    pub const ALL: [LossCause; 4] = [LossCause::Expired, LossCause::Refused, LossCause::Unreachable, LossCause::Revoked];

    pub fn label(self) -> &'static str {
        match self {
            LossCause::Expired => "expired",
            LossCause::Refused => "refused",
            LossCause::Unreachable => "unreachable",
            LossCause::Revoked => "revoked",
        }
    }
}

/// A failed request to one server, by kind (the `kind` label of
/// `redlock_server_errors_total`): the stable names of `Outcome::kind`.
const SERVER_ERRORS: [&str; 9] = [
    "timeout",
    "connection_refused",
    "dns_failure",
    "connect_timeout",
    "unreachable",
    "auth_failed",
    "tls_failed",
    "module_missing",
    "error",
];

/// The place of a failed outcome in `SERVER_ERRORS`; `None` for an answer.
fn server_error(outcome: &Outcome) -> Option<usize> {
    Some(match outcome {
        Outcome::Timeout => 0,
        Outcome::Unreachable { cause: UnreachableCause::ConnectionRefused, .. } => 1,
        Outcome::Unreachable { cause: UnreachableCause::Dns, .. } => 2,
        Outcome::Unreachable { cause: UnreachableCause::ConnectTimeout, .. } => 3,
        Outcome::Unreachable { cause: UnreachableCause::Io, .. } => 4,
        Outcome::AuthFailed(_) => 5,
        Outcome::TlsFailed(_) => 6,
        Outcome::ModuleMissing => 7,
        Outcome::Failed(_) => 8,
        Outcome::Granted { .. }
        | Outcome::Refused
        | Outcome::Done
        | Outcome::Quarantine { .. }
        | Outcome::Duplicate { .. }
        | Outcome::Revoked { .. } => return None,
    })
}

/// One server's counts, kept by its connection (`transport::Instance`).
pub struct ServerMetrics {
    /// Counting at all (`Settings::metrics`).
    on: bool,
    index: usize,
    /// The entry as errors name it (`host:port`, `cluster:...`,
    /// `sentinel:...`), never with credentials.
    address: String,
    round_trip: Histogram,
    errors: [AtomicU64; SERVER_ERRORS.len()],
    identity_refusals: AtomicU64,
    quarantines: AtomicU64,
}

impl ServerMetrics {
    /// The counts of entry `index` of the server list, named `name`;
    /// none are counted unless `on`.
    pub fn new(index: usize, name: &str, on: bool) -> ServerMetrics {
        ServerMetrics {
            on,
            index,
            address: redacted(name),
            round_trip: Histogram::new(histogram::ROUND_TRIP),
            errors: Default::default(),
            identity_refusals: AtomicU64::new(0),
            quarantines: AtomicU64::new(0),
        }
    }

    /// A request that got a reply (of any kind) after `took`.
    pub fn answered(&self, took: Duration) {
        if !self.on {
            return;
        }
        self.round_trip.observe(took);
    }

    /// What the server did with a lock request: a failure counts by kind,
    /// a restart quarantine as one seen.
    pub fn outcome(&self, outcome: &Outcome) {
        if !self.on {
            return;
        }
        match outcome {
            Outcome::Quarantine { .. } => {
                self.quarantines.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                if let Some(e) = server_error(other).and_then(|i| self.errors.get(i)) {
                    e.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The server behind this entry was found to be another entry's
    /// (one `run_id`): not counted, never used.
    pub fn identity_refused(&self) {
        if !self.on {
            return;
        }
        self.identity_refusals.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> ServerSnapshot {
        ServerSnapshot {
            index: self.index,
            address: self.address.clone(),
            round_trip: self.round_trip.snapshot(),
            errors: SERVER_ERRORS.iter().zip(&self.errors).map(|(k, n)| (*k, n.load(Ordering::Relaxed))).collect(),
            identity_refusals: self.identity_refusals.load(Ordering::Relaxed),
            quarantines: self.quarantines.load(Ordering::Relaxed),
        }
    }
}

/// `name` without anything that could be a credential: the part before an
/// `@` of each comma-separated host (the entries' names carry none today;
/// this keeps it so if one ever does).
pub(crate) fn redacted(name: &str) -> String {
    name.split(',').map(|part| part.rsplit_once('@').map_or(part, |(_, host)| host)).collect::<Vec<_>>().join(",")
}

/// The metrics of one `Redlock` handle (and of its clones).
pub struct Metrics {
    /// Counting at all (`Settings::metrics`): off, every count is skipped.
    pub(crate) on: bool,
    /// Wait times by kind, then outcome: each histogram's count is the
    /// number of acquisitions that ended so.
    waits: [[Histogram; AcquireOutcome::ALL.len()]; AcquireKind::ALL.len()],
    /// Hold times by kind, from the grant to the release or the loss (or
    /// the end of the lease of a lock dropped unreleased).
    holds: [Histogram; AcquireKind::ALL.len()],
    held: AtomicI64,
    waiting: AtomicI64,
    extensions_ok: AtomicU64,
    extensions_failed: AtomicU64,
    lost: [AtomicU64; LossCause::ALL.len()],
    servers: Vec<Arc<ServerMetrics>>,
    leading: AtomicI64,
    term: AtomicI64,
    leader_changes: AtomicU64,
    /// Locks dropped unreleased while their lease ran, by the end of the
    /// lease: each ends when its lease does, settled at the next drop or
    /// snapshot (no task or timer per lock; as many as such leases run).
    dropped: Mutex<BinaryHeap<Reverse<Dropped>>>,
}

/// A hold dropped unreleased that the servers keep until `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dropped {
    end: Instant,
    since: Instant,
    kind: AcquireKind,
}

impl Ord for Dropped {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.end.cmp(&other.end).then(self.since.cmp(&other.since))
    }
}

impl PartialOrd for Dropped {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").field("servers", &self.servers.len()).finish_non_exhaustive()
    }
}

impl Metrics {
    /// A registry over the servers' own counts, in list order.
    pub fn new(servers: Vec<Arc<ServerMetrics>>, on: bool) -> Metrics {
        Metrics {
            on,
            waits: std::array::from_fn(|_| std::array::from_fn(|_| Histogram::new(histogram::WAIT))),
            holds: std::array::from_fn(|_| Histogram::new(histogram::HOLD)),
            held: AtomicI64::new(0),
            waiting: AtomicI64::new(0),
            extensions_ok: AtomicU64::new(0),
            extensions_failed: AtomicU64::new(0),
            lost: Default::default(),
            servers,
            leading: AtomicI64::new(0),
            term: AtomicI64::new(0),
            leader_changes: AtomicU64::new(0),
            dropped: Mutex::new(BinaryHeap::new()),
        }
    }

    /// An acquisition of `kind` begins: it waits until `Waiting::ended`
    /// (or, dropped before that, counts as cancelled).
    pub fn waiting(&self, kind: AcquireKind) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting { metrics: self, kind, started: Instant::now(), ended: false }
    }

    /// A lock of `kind` granted now: held until `Held::end`, or the end
    /// of its validity (`Held::valid_until`) once its last copy is dropped.
    pub fn held(self: &Arc<Self>, kind: AcquireKind) -> Arc<Held> {
        self.held.fetch_add(1, Ordering::Relaxed);
        Arc::new(Held { metrics: Arc::clone(self), kind, since: Instant::now(), until: AtomicU64::new(0), ended: AtomicBool::new(false) })
    }

    /// A hold of `kind` granted at `since` ended now.
    fn hold_ended(&self, kind: AcquireKind, since: Instant) {
        self.hold_ended_at(kind, since, Instant::now());
    }

    /// A hold of `kind` granted at `since` ended at `end`.
    fn hold_ended_at(&self, kind: AcquireKind, since: Instant, end: Instant) {
        self.held.fetch_sub(1, Ordering::Relaxed);
        if let Some(h) = self.holds.get(kind.index()) {
            h.observe(end.saturating_duration_since(since));
        }
    }

    /// A hold dropped unreleased: ended at `end`, or when `end` comes.
    /// Every dropped hold whose lease has ended by now is settled too.
    fn hold_dropped(&self, hold: Dropped) {
        let now = Instant::now();
        let mut dropped = self.dropped.lock().unwrap_or_else(|p| p.into_inner());
        if hold.end > now {
            dropped.push(Reverse(hold));
        } else {
            self.hold_ended_at(hold.kind, hold.since, hold.end);
        }
        self.settle(&mut dropped, now);
    }

    /// Ends the dropped holds whose lease ended by `now`.
    fn settle(&self, dropped: &mut BinaryHeap<Reverse<Dropped>>, now: Instant) {
        while dropped.peek().is_some_and(|Reverse(d)| d.end <= now) {
            if let Some(Reverse(d)) = dropped.pop() {
                self.hold_ended_at(d.kind, d.since, d.end);
            }
        }
    }

    pub fn extended(&self, ok: bool) {
        if !self.on {
            return;
        }
        let counter = if ok { &self.extensions_ok } else { &self.extensions_failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn lost(&self, cause: LossCause) {
        if !self.on {
            return;
        }
        if let Some(n) = self.lost.get(cause as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// This handle won an election's term `term`.
    pub fn leads(&self, term: i64) {
        if !self.on {
            return;
        }
        self.leading.fetch_add(1, Ordering::Relaxed);
        self.term.fetch_max(term, Ordering::Relaxed);
    }

    /// ... and no longer leads it (lost or resigned).
    pub fn leads_no_more(&self) {
        if !self.on {
            return;
        }
        self.leading.fetch_sub(1, Ordering::Relaxed);
    }

    /// An observer of an election saw a new leader of term `term`.
    pub fn leader_seen(&self, term: i64) {
        if !self.on {
            return;
        }
        self.leader_changes.fetch_add(1, Ordering::Relaxed);
        self.term.fetch_max(term, Ordering::Relaxed);
    }

    /// Every count now.
    pub fn snapshot(&self) -> Snapshot {
        self.settle(&mut self.dropped.lock().unwrap_or_else(|p| p.into_inner()), Instant::now());
        let mut acquisitions = Vec::with_capacity(AcquireKind::ALL.len() * AcquireOutcome::ALL.len());
        for kind in AcquireKind::ALL {
            for outcome in AcquireOutcome::ALL {
                if let Some(h) = self.waits.get(kind.index()).and_then(|k| k.get(outcome.index())) {
                    acquisitions.push(Acquisitions { kind: kind.label(), outcome: outcome.label(), wait: h.snapshot() });
                }
            }
        }
        Snapshot {
            acquisitions,
            holds: AcquireKind::ALL.iter().zip(&self.holds).map(|(k, h)| (k.label(), h.snapshot())).collect(),
            held: self.held.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
            extensions_ok: self.extensions_ok.load(Ordering::Relaxed),
            extensions_failed: self.extensions_failed.load(Ordering::Relaxed),
            lost: LossCause::ALL.iter().zip(&self.lost).map(|(c, n)| (c.label(), n.load(Ordering::Relaxed))).collect(),
            servers: self.servers.iter().map(|s| s.snapshot()).collect(),
            leading: self.leading.load(Ordering::Relaxed),
            term: self.term.load(Ordering::Relaxed),
            leader_changes: self.leader_changes.load(Ordering::Relaxed),
        }
    }

    /// Acquisitions of `kind` that ended with `outcome` so far.
    pub fn acquisitions(&self, kind: AcquireKind, outcome: AcquireOutcome) -> u64 {
        self.waits.get(kind.index()).and_then(|k| k.get(outcome.index())).map_or(0, Histogram::count)
    }
}

/// An acquisition under way (see `Metrics::waiting`).
pub struct Waiting<'a> {
    metrics: &'a Metrics,
    kind: AcquireKind,
    started: Instant,
    ended: bool,
}

impl Waiting<'_> {
    pub fn ended(mut self, outcome: AcquireOutcome) {
        self.count(outcome);
    }

    fn count(&mut self, outcome: AcquireOutcome) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
        if let Some(h) = self.metrics.waits.get(self.kind.index()).and_then(|k| k.get(outcome.index())) {
            h.observe(self.started.elapsed());
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count(AcquireOutcome::Cancelled);
    }
}

/// A granted lock, shared by its copies: held until it is released or
/// lost (`end`), or, once its last copy is dropped without either, until
/// its lease as last extended through the handle ends (the servers keep
/// it that long).
pub struct Held {
    metrics: Arc<Metrics>,
    kind: AcquireKind,
    since: Instant,
    /// The end of its validity, in microseconds from `since`.
    until: AtomicU64,
    ended: AtomicBool,
}

impl Held {
    /// Its validity now ends at `end` (granted, extended).
    pub fn valid_until(&self, end: Instant) {
        let micros = u64::try_from(end.saturating_duration_since(self.since).as_micros()).unwrap_or(u64::MAX);
        self.until.store(micros, Ordering::Relaxed);
    }

    /// Released or lost: no longer held (once; later calls do nothing).
    pub fn end(&self) {
        if !self.ended.swap(true, Ordering::Relaxed) {
            self.metrics.hold_ended(self.kind, self.since);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.ended.swap(true, Ordering::Relaxed) {
            return;
        }
        // Dropped while the servers may still hold it: held until they no
        // longer do.
        let until = Duration::from_micros(self.until.load(Ordering::Relaxed));
        let end = self.since.checked_add(until).unwrap_or(self.since);
        self.metrics.hold_dropped(Dropped { end, since: self.since, kind: self.kind });
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held").field("kind", &self.kind).field("since", &self.since).finish_non_exhaustive()
    }
}

/// Acquisitions of one kind that ended one way, with their waits.
#[derive(Clone, Debug, PartialEq)]
pub struct Acquisitions {
    pub kind: &'static str,
    pub outcome: &'static str,
    /// From the call to its end, in seconds; `wait.count` is how many.
    pub wait: HistogramSnapshot,
}

/// One server's counts (the `server` and `address` labels).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSnapshot {
    /// Its place in the server list, from 0.
    pub index: usize,
    pub address: String,
    /// Every request's time from sending to its reply (or failure).
    pub round_trip: HistogramSnapshot,
    /// Failed requests by kind (`timeout`, `connection_refused`, ...).
    pub errors: Vec<(&'static str, u64)>,
    /// Connections found to lead to another entry's server.
    pub identity_refusals: u64,
    /// Lock requests answered with a restart quarantine.
    pub quarantines: u64,
}

/// A handle's metrics at one moment (`Redlock::metrics`).
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Every kind and outcome, also those never seen (count 0).
    pub acquisitions: Vec<Acquisitions>,
    /// Hold times by kind.
    pub holds: Vec<(&'static str, HistogramSnapshot)>,
    /// Locks granted and not yet released or lost (one dropped unreleased
    /// counts until its lease ends).
    pub held: i64,
    /// Acquisitions under way.
    pub waiting: i64,
    pub extensions_ok: u64,
    pub extensions_failed: u64,
    /// Kept holds lost, by cause (`expired`, `refused`, `unreachable`).
    pub lost: Vec<(&'static str, u64)>,
    pub servers: Vec<ServerSnapshot>,
    /// Elections this handle leads now.
    pub leading: i64,
    /// The highest term this handle won or saw a leader with.
    pub term: i64,
    /// New leaders its observers saw.
    pub leader_changes: u64,
}

impl Snapshot {
    /// Acquisitions of `kind` that ended with `outcome`.
    pub fn acquisitions(&self, kind: AcquireKind, outcome: AcquireOutcome) -> u64 {
        self.acquisitions.iter().find(|a| a.kind == kind.label() && a.outcome == outcome.label()).map_or(0, |a| a.wait.count)
    }

    /// Kept holds lost by `cause`.
    pub fn lost(&self, cause: LossCause) -> u64 {
        self.lost.iter().find(|(c, _)| *c == cause.label()).map_or(0, |(_, n)| *n)
    }

    /// The Prometheus text exposition format (0.0.4), every series with
    /// its HELP and TYPE; serve it with `CONTENT_TYPE`.
    pub fn to_prometheus(&self) -> String {
        text::render(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquisition_dropped_while_waiting_counts_as_cancelled_and_waits_no_more() {
        let m = Arc::new(Metrics::new(Vec::new(), true));
        let w = m.waiting(AcquireKind::Shared);
        assert_eq!(m.snapshot().waiting, 1);
        drop(w);
        m.waiting(AcquireKind::Shared).ended(AcquireOutcome::Granted);
        let s = m.snapshot();
        assert_eq!((s.waiting, s.acquisitions(AcquireKind::Shared, AcquireOutcome::Cancelled)), (0, 1));
        assert_eq!(s.acquisitions(AcquireKind::Shared, AcquireOutcome::Granted), 1);
    }

    #[test]
    fn a_hold_ends_once_however_many_copies_end_it() {
        let m = Arc::new(Metrics::new(Vec::new(), true));
        let held = m.held(AcquireKind::Exclusive);
        let copy = Arc::clone(&held);
        held.end();
        copy.end();
        drop((held, copy));
        let s = m.snapshot();
        assert_eq!(s.held, 0);
        assert_eq!(s.holds.first().map(|(_, h)| h.count), Some(1));
    }

    #[test]
    fn a_lock_dropped_unreleased_is_held_until_its_lease_ends() {
        let m = Arc::new(Metrics::new(Vec::new(), true));
        // Leases of seconds: a loaded machine may stall the test for a
        // good part of a second between two lines.
        let held = m.held(AcquireKind::Exclusive);
        held.valid_until(Instant::now() + Duration::from_secs(2));
        drop(held);
        assert_eq!(m.snapshot().held, 1, "the servers still hold it");
        let deadline = Instant::now() + Duration::from_secs(10);
        while m.snapshot().held != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let s = m.snapshot();
        assert_eq!(s.held, 0, "its lease ended");
        let hold = s.holds.first().map(|(_, h)| h.clone());
        assert_eq!(hold.as_ref().map(|h| h.count), Some(1), "one hold time observed");
        // Its lease ended long since (or never ran): ended at the drop,
        // and the dropped ones whose lease ended with it.
        let m = Arc::new(Metrics::new(Vec::new(), true));
        let (first, second) = (m.held(AcquireKind::Shared), m.held(AcquireKind::Shared));
        let lease = Instant::now() + Duration::from_secs(1);
        first.valid_until(lease);
        drop(first);
        assert_eq!(m.held.load(Ordering::Relaxed), 2);
        std::thread::sleep(lease.saturating_duration_since(Instant::now()) + Duration::from_millis(50));
        drop(second);
        assert_eq!(m.held.load(Ordering::Relaxed), 0, "settled at the next drop, without a snapshot");
    }

    #[test]
    fn a_server_address_never_shows_credentials() {
        assert_eq!(redacted("user:secret@10.0.0.1:6379"), "10.0.0.1:6379");
        assert_eq!(redacted("cluster:a:1,p@b:2"), "cluster:a:1,b:2");
    }
}
