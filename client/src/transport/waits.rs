//! The waits (`Instance::wait_for`) running on an instance's own
//! connections, known by owner, so that an acquisition given up can take
//! them out of the server's queue at once (`Instance::abandon_waits`)
//! instead of leaving them queued until their window ends.
//!
//! A wait is ended by `CLIENT KILL ID id ADDR addr` of its connection
//! (both as `CLIENT INFO` gave them when it was made), sent on the
//! shared connection and followed there by the release, in that order:
//! - the kill frees the waiting client within the command, so the module
//!   takes it out of the line then; a wait the server had not read yet dies
//!   unread with its connection;
//! - a grant that came first is held by the time the kill runs, and the
//!   release behind it on the same connection undoes it.
//!
//! `CLIENT UNBLOCK` would keep the connection for reuse, but the module
//! blocks without a Redis timeout callback (on Redis 7.0 a grant and a
//! Redis-side unblock in one event-loop turn leave the client with no
//! reply), so it answers 0 for lock waiters; and it cannot reach a wait
//! its server has not read yet. Closing the connection alone races the
//! release: a release read before the close can precede a grant.
//!
//! A user without the right to `CLIENT KILL` (an `@admin` command), and a
//! cluster instance (whose waits go over the cluster client's node
//! connections), keep the waits as before: queued until their window ends,
//! a late grant released by the round's task.

use super::*;

/// One wait sent, or about to be, on a connection of its own.
struct Running {
    serial: u64,
    owner: String,
    /// Its connection (`ClientRef`) while the wait may be queued there
    /// (`None` once its reply came: the connection may go back to the
    /// pool and carry another owner's wait).
    client: Option<ClientRef>,
    /// Its owner gave the acquisition up: the wait's connection is not kept,
    /// and a grant it brings is not moved to the shared connection.
    abandoned: bool,
}

/// An owner's wait that is not running here: given up before it was sent
/// (`client` `None`: it never is), or dropped before its reply came
/// (its connection closing, still killable until the server sees it).
struct Left {
    owner: String,
    client: Option<ClientRef>,
    since: Instant,
}

/// The waits of one instance.
#[derive(Default)]
pub(super) struct Waits {
    state: std::sync::Mutex<WaitsState>,
    /// A wait ended (its entry left).
    ended: tokio::sync::Notify,
}

#[derive(Default)]
struct WaitsState {
    running: Vec<Running>,
    left: Vec<Left>,
    serials: u64,
}

impl Waits {
    /// The state, with what was left longer ago than `forget_after` (see
    /// `Instance::forget_left_after`) forgotten.
    fn state(&self, forget_after: Duration) -> std::sync::MutexGuard<'_, WaitsState> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.left.retain(|l| l.since.elapsed() < forget_after);
        state
    }

    /// Enters `owner`'s wait on the connection `client`; `None` when the
    /// owner already gave up (nothing is to be sent).
    pub(super) fn enter(&self, owner: &str, client: Option<ClientRef>, forget_after: Duration) -> Option<Entry<'_>> {
        let mut state = self.state(forget_after);
        if let Some(at) = state.left.iter().position(|l| l.owner == owner && l.client.is_none()) {
            state.left.swap_remove(at);
            return None;
        }
        state.serials += 1;
        let serial = state.serials;
        state.running.push(Running { serial, owner: owner.to_string(), client, abandoned: false });
        Some(Entry { waits: self, serial, forget_after })
    }

    /// Marks `owner`'s waits abandoned and returns the ids of the
    /// connections to kill, and whether any still runs; or remembers that
    /// the owner gave up if no wait of its was entered yet.
    fn abandon(&self, owner: &str, forget_after: Duration) -> (Vec<ClientRef>, bool) {
        let mut state = self.state(forget_after);
        let mut ids = Vec::new();
        let mut found = false;
        for wait in state.running.iter_mut().filter(|w| w.owner == owner) {
            wait.abandoned = true;
            found = true;
            ids.extend(wait.client.clone());
        }
        let running = found;
        let (dropped, rest): (Vec<Left>, Vec<Left>) = std::mem::take(&mut state.left).into_iter().partition(|l| l.owner == owner);
        state.left = rest;
        found |= !dropped.is_empty();
        ids.extend(dropped.into_iter().filter_map(|l| l.client));
        if !found {
            state.left.push(Left { owner: owner.to_string(), client: None, since: Instant::now() });
        }
        (ids, running)
    }

    fn runs(&self, owner: &str) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).running.iter().any(|w| w.owner == owner)
    }
}

/// A wait entered in `Waits`, left when dropped (the wait ended, or its
/// future was dropped).
pub(super) struct Entry<'a> {
    waits: &'a Waits,
    serial: u64,
    forget_after: Duration,
}

impl Entry<'_> {
    fn with<T>(&self, f: impl FnOnce(&mut Running) -> T) -> Option<T> {
        self.waits.state(self.forget_after).running.iter_mut().find(|w| w.serial == self.serial).map(f)
    }

    /// Whether its owner gave up.
    pub(super) fn abandoned(&self) -> bool {
        self.with(|w| w.abandoned).unwrap_or(true)
    }

    /// The wait's reply came: its connection is no longer killed for it.
    /// Returns whether its owner gave up (the connection is then not kept).
    pub(super) fn answered(&self) -> bool {
        self.with(|w| {
            w.client = None;
            w.abandoned
        })
        .unwrap_or(true)
    }

    /// The wait moves to connection `client` (the idle one it had was
    /// stale); `false` when its owner gave up meanwhile (nothing is to be
    /// sent).
    pub(super) fn moved_to(&self, client: Option<ClientRef>) -> bool {
        self.with(|w| {
            w.client = client;
            !w.abandoned
        })
        .unwrap_or(false)
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        let mut state = self.waits.state(self.forget_after);
        if let Some(at) = state.running.iter().position(|w| w.serial == self.serial) {
            let wait = state.running.swap_remove(at);
            // Dropped before its reply (a place in line given up with the
            // acquisition): its connection is still killable.
            if let (Some(id), false) = (wait.client.clone(), wait.abandoned) {
                state.left.push(Left { owner: wait.owner, client: Some(id), since: Instant::now() });
            }
        }
        drop(state);
        self.waits.ended.notify_waiters();
    }
}

impl Instance {
    /// Takes `owner`'s waits here out of the server's queue, then releases
    /// whatever `keys` `owner` holds here (a grant that came before): see
    /// the module doc. A wait whose reply was on its way when its
    /// connection was killed was granted or not before the kill; one
    /// between its grant and moving a bound hold to the shared connection
    /// (`wait_for` with `session`) finishes that first, within the request
    /// timeout, so the release comes after it.
    pub async fn abandon_waits(&self, keys: impl Into<Keys<'_>>, owner: &str) -> InstanceOutcome {
        let keys = keys.into();
        let (ids, running) = self.waits.abandon(owner, self.forget_left_after());
        for client in ids {
            // A user without the right keeps the wait queued (see above).
            let mut kill = redis::cmd("CLIENT");
            kill.arg("KILL").arg("ID").arg(client.id).arg("ADDR").arg(&client.addr);
            let _ = self.query::<i64>(&kill).await;
        }
        // Killed, a wait ends at once; one whose reply came may be moving
        // its grant to the shared connection (bounded by the request
        // timeout), and the release must come after that.
        if running {
            let _ = tokio::time::timeout(self.request_timeout, async {
                loop {
                    let ended = self.waits.ended.notified();
                    if !self.waits.runs(owner) {
                        return;
                    }
                    ended.await;
                }
            })
            .await;
        }
        self.release(keys, owner).await
    }

    /// How long a wait that is not running is remembered (`Left`): a wait
    /// is entered once its connection is made and identified, and a
    /// dropped one is abandoned right after, both well within this.
    pub(super) fn forget_left_after(&self) -> Duration {
        self.connect_timeout.saturating_add(self.request_timeout).saturating_mul(2)
    }
}

/// A wait connection as its server knows it: `CLIENT KILL ID id ADDR
/// addr` ends that connection and no other, even on a server that is not
/// the one it was made to (after a failover or a restart a client id is
/// another client's, never with the same address at once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ClientRef {
    id: u64,
    addr: String,
}

/// A new wait connection as its server knows it (`CLIENT INFO`), asked
/// once when it is made; `None` if it does not answer in time (its waits
/// are then not killed).
pub(super) async fn client_ref(conn: &mut MultiplexedConnection, within: Duration) -> Option<ClientRef> {
    let info = tokio::time::timeout(within, redis::cmd("CLIENT").arg("INFO").query_async::<String>(conn)).await.ok()?.ok()?;
    let field = |name: &str| info.split_whitespace().find_map(|f| f.strip_prefix(name)?.strip_prefix('=')).map(str::to_string);
    Some(ClientRef { id: field("id")?.parse().ok()?, addr: field("addr")? })
}
