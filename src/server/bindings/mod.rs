//! Holds bound to the connection that was granted them: `LOCK.ACQUIRE ...
//! SESSION [DELAY ms]`. The server's memory of its connections, below every
//! flow: `change` binds and unbinds holds here, and `crate::session`
//! (the flow above the changes) ends a closed connection's holds.
//!
//! A binding names the hold (database, key, owner) and the client id of
//! the connection that was granted it, by the command itself or by a
//! WAIT handoff. When that connection closes (the client quits, is
//! killed, times out, CLIENT KILL), every hold still bound to it ends:
//! at once, or `DELAY` ms after the disconnect (a lock-delay, as in
//! Chubby: a holder cut off by the network may still be running, so the
//! lock stays unavailable that long and the fencing token covers the
//! rest). The lease still bounds every hold.
//!
//! Only the connection a hold is bound to may extend it: a holder that
//! lost its connection and reconnected must not restart, on the new one,
//! a lease the server is cutting to its lock-delay (or has cut), nor
//! leave a hold bound to a dead connection running on. From the
//! disconnect until its lease ends, such a hold is extended by nobody; a
//! re-grant to its owner (LOCK.ACQUIRE, which may bind it anew) is the
//! way back, and a release by owner still ends it from anywhere.
//!
//! The binding is this server's memory of a connection, so it never
//! outlives it: it is not persisted or replicated, and after a restart, an
//! AOF load or a failover the lease alone governs the hold. A grant to the
//! same owner since (a re-grant on any connection, with SESSION or not)
//! replaces the binding; a release by owner ends it. So a disconnect never
//! ends a hold that was granted again on another connection, and never one
//! that moved to another owner (`session::disconnect` checks the owner before it
//! ends anything). Nor does a binding outlive its hold: each carries the
//! lease end last granted or extended, and `session::disconnect` drops it once that
//! has passed and the key confirms the hold is gone.
//!
//! Everything here is O(1) or O(log n) per hold, so that no single call
//! walks a connection's holds: a closed connection's holds are handed over
//! as one list and ended by `session::disconnect` a slice at a time.
//!
//! Nothing here costs a command without SESSION anything but one load
//! while no hold is tracked.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// A held lock: database, key, owner.
pub type Hold = (c_int, Box<[u8]>, Box<[u8]>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// Bound to its client: listed under it while the connection is open;
    /// once it closed, in `closing` until `session::disconnect` ends it.
    Bound,
    /// Its connection closed and its lease was cut to the lock-delay (or
    /// ended by then anyway): remembered until it ends, so that no EXTEND
    /// revives it.
    Cut,
}

struct Entry {
    client: u64,
    delay_ms: i64,
    /// When the hold's lease ends (monotonic ms), as last granted,
    /// extended or cut; the key has the last word (`verified`).
    end: i64,
    status: Status,
    /// Its place in `by_client[client]`, while its connection is open.
    listed_at: usize,
    /// Its key in `ends`, while it is there.
    queued: (i64, u64),
}

/// A closed connection's holds, handed over whole by the disconnect.
struct Closing {
    client: u64,
    /// When it closed (monotonic ms).
    at: i64,
    holds: Vec<Arc<Hold>>,
}

/// A closed connection's hold to end now.
pub struct Ending {
    pub hold: Arc<Hold>,
    client: u64,
    /// When it must end (monotonic ms): the disconnect plus its lock-delay.
    pub end: i64,
}

/// What ending a closed connection's hold came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Released, or nothing of it is left here: forgotten.
    Gone,
    /// Still held until the end it was cut to (or an earlier one): no
    /// EXTEND until then.
    Cut,
}

/// Every binding and cut mark of the server. Each hold is stored once and
/// shared by the lists that find it: by connection (to end them when it
/// closes) and by lease end (to forget them when it passes).
#[derive(Default)]
pub struct Sessions {
    entries: HashMap<Arc<Hold>, Entry>,
    /// Holds bound to each open connection.
    by_client: HashMap<u64, Vec<Arc<Hold>>>,
    /// Every entry by the end it is due at, then a sequence number.
    ends: BTreeMap<(i64, u64), Arc<Hold>>,
    /// Closed connections' holds not ended yet, oldest first.
    closing: VecDeque<Closing>,
    next_seq: u64,
    /// Holds bound to an open connection: the lengths of `by_client`'s lists.
    live: usize,
}

/// Room kept in a map or list that emptied: beyond it, memory is given
/// back when it is three quarters empty.
const KEPT_ROOM: usize = 64;

fn shrink_map<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>) {
    if m.capacity() > KEPT_ROOM && m.len().saturating_mul(4) < m.capacity() {
        m.shrink_to(m.len().saturating_mul(2));
    }
}

fn shrink_list<T>(v: &mut Vec<T>) {
    if v.capacity() > KEPT_ROOM && v.len().saturating_mul(4) < v.capacity() {
        v.shrink_to(v.len().saturating_mul(2));
    }
}

impl Sessions {
    fn seq(&mut self) -> u64 {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_seq
    }

    /// Puts `hold` in `ends` at its entry's end, in place of where it was.
    fn requeue(&mut self, hold: &Arc<Hold>) {
        let seq = self.seq();
        let Some(entry) = self.entries.get_mut(hold) else { return };
        self.ends.remove(&entry.queued);
        entry.queued = (entry.end, seq);
        self.ends.insert(entry.queued, Arc::clone(hold));
    }

    /// Queues `hold` again if it is not in `ends` (taken out by `due`) or
    /// is queued later than its end; a later end waits for the earlier one
    /// to pass (`due`).
    fn schedule(&mut self, hold: &Arc<Hold>) {
        let Some(entry) = self.entries.get(hold) else { return };
        if entry.end < entry.queued.0 || !self.ends.contains_key(&entry.queued) {
            self.requeue(hold);
        }
    }

    /// Whether `hold`'s entry is listed under its open connection.
    fn is_listed(&self, hold: &Arc<Hold>, entry: &Entry) -> bool {
        entry.status == Status::Bound
            && self.by_client.get(&entry.client).and_then(|l| l.get(entry.listed_at)).is_some_and(|h| Arc::ptr_eq(h, hold))
    }

    /// Takes `hold` off its open connection's list, if it is on one.
    fn unlist(&mut self, hold: &Arc<Hold>) {
        let Some(entry) = self.entries.get(hold) else { return };
        if !self.is_listed(hold, entry) {
            return;
        }
        let (client, at) = (entry.client, entry.listed_at);
        let Some(list) = self.by_client.get_mut(&client) else { return };
        if at >= list.len() {
            return;
        }
        list.swap_remove(at);
        let moved = list.get(at).cloned();
        if list.is_empty() {
            self.by_client.remove(&client);
            shrink_map(&mut self.by_client);
        } else {
            shrink_list(list);
        }
        self.live = self.live.saturating_sub(1);
        if let Some(e) = moved.as_ref().and_then(|m| self.entries.get_mut(m)) {
            e.listed_at = at;
        }
    }

    /// Lists `hold` under connection `client`.
    fn list(&mut self, hold: &Arc<Hold>, client: u64) {
        let list = self.by_client.entry(client).or_default();
        let at = list.len();
        list.push(Arc::clone(hold));
        self.live = self.live.saturating_add(1);
        if let Some(entry) = self.entries.get_mut(hold) {
            entry.listed_at = at;
        }
    }

    fn forget(&mut self, hold: &Hold) {
        let Some(shared) = self.entries.get_key_value(hold).map(|(k, _)| Arc::clone(k)) else { return };
        self.unlist(&shared);
        if let Some(entry) = self.entries.remove(&shared) {
            self.ends.remove(&entry.queued);
        }
        shrink_map(&mut self.entries);
    }

    /// `hold` was granted (a new hold, a re-grant, a handoff): bound to
    /// connection `client` with a lock-delay of `delay_ms` until `end`
    /// (`session`), or to nothing (`None`: a grant without SESSION ends an
    /// earlier binding, since a re-grant's terms are the hold's). Either
    /// way a cut mark is gone: the owner was granted the hold again.
    pub fn granted(&mut self, hold: Hold, session: Option<(u64, i64)>, end: i64) {
        let Some((client, delay_ms)) = session else {
            return self.forget(&hold);
        };
        let shared = match self.entries.get_key_value(&hold) {
            Some((k, _)) => Arc::clone(k),
            None => {
                let shared = Arc::new(hold);
                let entry = Entry { client, delay_ms, end, status: Status::Bound, listed_at: 0, queued: (end, 0) };
                self.entries.insert(Arc::clone(&shared), entry);
                self.requeue(&shared);
                self.list(&shared, client);
                return;
            }
        };
        self.unlist(&shared);
        let Some(entry) = self.entries.get_mut(&shared) else { return };
        *entry = Entry { client, delay_ms, end, status: Status::Bound, ..*entry };
        self.schedule(&shared);
        self.list(&shared, client);
    }

    /// `hold` was released by its owner.
    pub fn released(&mut self, hold: &Hold) {
        self.forget(hold);
    }

    /// Whether connection `client` may extend `hold`: any may, unless it
    /// is bound to another connection, its connection closed, or it was
    /// cut to its lock-delay.
    pub fn may_extend(&self, hold: &Hold, client: u64) -> bool {
        match self.entries.get_key_value(hold) {
            None => true,
            Some((k, e)) => e.client == client && self.is_listed(k, e),
        }
    }

    /// Connection `client` asks to extend `hold` to `end`: whether it may
    /// (`may_extend`); when the hold is bound to it, its binding now lasts
    /// until `end` too.
    pub fn extending(&mut self, hold: &Hold, client: u64, end: i64) -> bool {
        if !self.may_extend(hold, client) {
            return false;
        }
        self.extended(hold, client, end);
        true
    }

    /// `hold` was extended by connection `client` to end at `end`.
    fn extended(&mut self, hold: &Hold, client: u64, end: i64) {
        let Some((shared, entry)) = self.entries.get_key_value(hold) else { return };
        if entry.client != client || !self.is_listed(shared, entry) {
            return;
        }
        let shared = Arc::clone(shared);
        if let Some(entry) = self.entries.get_mut(&shared) {
            entry.end = end;
        }
        self.schedule(&shared);
    }

    /// Connection `client` closed at `at`: its list is handed over whole,
    /// to be ended a slice at a time (`closing_slice`). True if it had any.
    pub fn connection_closed(&mut self, client: u64, at: i64) -> bool {
        let Some(holds) = self.by_client.remove(&client) else { return false };
        self.live = self.live.saturating_sub(holds.len());
        self.closing.push_back(Closing { client, at, holds });
        shrink_map(&mut self.by_client);
        true
    }

    /// Up to `limit` closed connections' holds (fewer when some were
    /// granted again or ended since: the grant wins), each with when it
    /// must end. Each stays bound to its closed connection, refused every
    /// EXTEND, until `closed_hold_ended` says how it ended.
    pub fn closing_slice(&mut self, limit: usize) -> Vec<Ending> {
        let mut out = Vec::new();
        for _ in 0..limit {
            let Some(front) = self.closing.front_mut() else { break };
            let Some(hold) = front.holds.pop() else {
                self.closing.pop_front();
                continue;
            };
            let client = front.client;
            let at = front.at;
            if let Some(entry) = self.entries.get(&hold).filter(|e| e.status == Status::Bound && e.client == client) {
                out.push(Ending { hold, client, end: at.saturating_add(entry.delay_ms) });
            }
        }
        if self.closing.front().is_some_and(|c| c.holds.is_empty()) {
            self.closing.pop_front();
        }
        out
    }

    /// Whether `ending`'s hold is still bound to its closed connection:
    /// not granted again, released or forgotten since it was handed out.
    pub fn is_closing(&self, ending: &Ending) -> bool {
        self.entries.get(&ending.hold).is_some_and(|e| e.status == Status::Bound && e.client == ending.client)
    }

    /// How ending a closed connection's hold went (nothing changes if it
    /// was granted again meanwhile).
    pub fn closed_hold_ended(&mut self, ending: &Ending, ended: Ended) {
        let Some(entry) = self.entries.get_mut(&ending.hold) else { return };
        if entry.status != Status::Bound || entry.client != ending.client {
            return;
        }
        match ended {
            Ended::Gone => self.forget(&ending.hold),
            Ended::Cut => {
                entry.status = Status::Cut;
                entry.end = entry.end.min(ending.end);
                self.schedule(&ending.hold);
            }
        }
    }

    /// Whether closed connections' holds wait to be ended.
    pub fn closing_left(&self) -> bool {
        !self.closing.is_empty()
    }

    /// Up to `limit` holds whose lease end, as known here, passed by
    /// `now`, taken out of `ends` for the caller to check against the key
    /// (`verified`). Those extended since are queued again at their end.
    pub fn due(&mut self, now: i64, limit: usize) -> Vec<Arc<Hold>> {
        let mut out = Vec::new();
        for _ in 0..limit {
            match self.ends.first_key_value() {
                Some((at, _)) if at.0 <= now => {}
                _ => break,
            }
            let Some((_, hold)) = self.ends.pop_first() else { break };
            match self.entries.get(&hold) {
                Some(e) if e.end > now => self.requeue(&hold),
                Some(_) => out.push(hold),
                None => {}
            }
        }
        out
    }

    /// Whether any known lease end has passed by `now`.
    pub fn any_due(&self, now: i64) -> bool {
        self.ends.first_key_value().is_some_and(|(at, _)| at.0 <= now)
    }

    /// What the key says of a hold `due` returned: `end`, when the hold
    /// still runs (its lease was made longer than known here), or `None`:
    /// its binding or cut mark ends with it.
    pub fn verified(&mut self, hold: &Arc<Hold>, end: Option<i64>, now: i64) {
        let Some(entry) = self.entries.get_mut(hold) else { return };
        match end {
            Some(end) if end > now => {
                entry.end = end;
                self.requeue(hold);
            }
            // Granted or extended meanwhile: due later.
            _ if entry.end > now => self.requeue(hold),
            _ => self.forget(hold),
        }
    }

    /// Whether `hold` is bound to an open connection.
    pub fn is_bound(&self, hold: &Hold) -> bool {
        self.entries.get_key_value(hold).is_some_and(|(k, e)| self.is_listed(k, e))
    }

    /// Holds bound to an open connection.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Bindings and cut marks.
    pub fn tracked(&self) -> usize {
        self.entries.len()
    }
}

static STATE: LazyLock<Mutex<Sessions>> = LazyLock::new(|| Mutex::new(Sessions::default()));
/// Bindings and cut marks: lets every grant, release and extension skip
/// the maps while there are none.
static TRACKED: AtomicUsize = AtomicUsize::new(0);
/// Holds bound to an open connection (INFO).
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn with_state<R>(f: impl FnOnce(&mut Sessions) -> R) -> Option<R> {
    crate::server::reentry::with(&STATE, |s| {
        let r = f(s);
        TRACKED.store(s.tracked(), Ordering::Relaxed);
        LIVE.store(s.live(), Ordering::Relaxed);
        r
    })
}

/// Whether any hold is bound or cut: one load.
#[inline]
pub fn any() -> bool {
    TRACKED.load(Ordering::Relaxed) != 0
}

/// Holds bound to an open connection now (for INFO).
pub fn bound() -> i64 {
    i64::try_from(LIVE.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

fn hold(db: c_int, key: &[u8], owner: &[u8]) -> Hold {
    (db, key.into(), owner.into())
}

/// `owner` was granted the lock at `key` in `db` until `end` (monotonic
/// ms): bound to connection `client` with a lock-delay of `delay_ms`
/// (`SESSION`), or to none (`None`).
pub fn granted(db: c_int, key: &[u8], owner: &[u8], session: Option<(u64, i64)>, end: i64) {
    if session.is_none() && !any() {
        return;
    }
    with_state(|s| s.granted(hold(db, key, owner), session, end));
}

/// `owner` released the lock at `key` in `db`.
pub fn released(db: c_int, key: &[u8], owner: &[u8]) {
    if any() {
        with_state(|s| s.released(&hold(db, key, owner)));
    }
}

/// Whether connection `client` may extend `owner`'s hold at `key` in `db`
/// to `end` (monotonic ms); see `Sessions::extending`.
pub fn extending(db: c_int, key: &[u8], owner: &[u8], client: u64, end: i64) -> bool {
    !any() || with_state(|s| s.extending(&hold(db, key, owner), client, end)).unwrap_or(true)
}

/// Whether connection `client` may act for `owner`'s hold at `key` in
/// `db` without extending it (LOCK.PROCLAIM): as for an extension
/// (`Sessions::may_extend`), and nothing changes.
pub fn may_act(db: c_int, key: &[u8], owner: &[u8], client: u64) -> bool {
    !any() || with_state(|s| s.may_extend(&hold(db, key, owner), client)).unwrap_or(true)
}

/// Connection `client` closed at `now_mono`: its holds are handed over
/// for `session::disconnect` to end. True if it had any.
pub fn connection_closed(client: u64, now_mono: i64) -> bool {
    LIVE.load(Ordering::Relaxed) != 0 && with_state(|s| s.connection_closed(client, now_mono)).unwrap_or(false)
}

/// See `Sessions::closing_slice`.
pub fn closing_slice(limit: usize) -> Vec<Ending> {
    with_state(|s| s.closing_slice(limit)).unwrap_or_default()
}

/// See `Sessions::is_closing`.
pub fn is_closing(ending: &Ending) -> bool {
    with_state(|s| s.is_closing(ending)).unwrap_or(false)
}

/// See `Sessions::closed_hold_ended`.
pub fn closed_hold_ended(ending: &Ending, ended: Ended) {
    with_state(|s| s.closed_hold_ended(ending, ended));
}

/// Whether closed connections' holds wait to be ended.
pub fn closing_left() -> bool {
    any() && with_state(|s| s.closing_left()).unwrap_or(false)
}

/// See `Sessions::due`.
pub fn due(now_mono: i64, limit: usize) -> Vec<Arc<Hold>> {
    with_state(|s| s.due(now_mono, limit)).unwrap_or_default()
}

/// Whether any known lease end has passed by `now_mono`.
pub fn has_due(now_mono: i64) -> bool {
    any() && with_state(|s| s.any_due(now_mono)).unwrap_or(false)
}

/// Whether there is anything for `session::disconnect` to do at `now_mono`.
pub fn has_work(now_mono: i64) -> bool {
    any() && with_state(|s| s.closing_left() || s.any_due(now_mono)).unwrap_or(false)
}

/// See `Sessions::verified`.
pub fn verified(hold: &Arc<Hold>, end: Option<i64>, now_mono: i64) {
    with_state(|s| s.verified(hold, end, now_mono));
}

/// This node became a replica, or its data was replaced: no binding
/// stands (a replica grants nothing to its own clients).
pub fn forget_all() {
    with_state(|s| *s = Sessions::default());
}

/// Whether `owner`'s hold at `key` in `db` is bound to an open
/// connection (for LOCK.INFO).
pub fn is_bound(db: c_int, key: &[u8], owner: &[u8]) -> bool {
    LIVE.load(Ordering::Relaxed) != 0 && with_state(|s| s.is_bound(&hold(db, key, owner))).unwrap_or(false)
}

#[cfg(test)]
mod tests;
