//! Following a leader through `redlock serve`: `LOCK.PROCLAIM` (a holder's
//! value, stored on a quorum) and `SUBSCRIBE __redislock@0__:KEY`, whose
//! messages are the module's announcements (`KIND TOKEN OWNER-LENGTH OWNER
//! VALUE`), each sent once a quorum of servers announced it, in term order,
//! never twice: the crate's observer (`redlock::election::observe_lock`,
//! the one `Election::observe` and the bindings use) decides that.
//!
//! Each subscribed channel is one observer task, which its connection's
//! `Subscriptions` aborts when the channel is unsubscribed or the
//! connection ends; its messages reach the connection through a bounded
//! queue, so a client that does not read holds its observer back instead
//! of growing the endpoint's memory.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::StreamExt;
use redlock::election::{observe_lock, DEFAULT_OBSERVE_INTERVAL};
use redlock::{Error, Rejection};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::args::{failed, owner_of, text};
use super::lock::{lookup, shown};
use super::resp::{printable, wrong_arity, Reply};
use super::state::Shared;

/// The most channels one connection may follow at once: each is an
/// observer with a connection to every server.
pub const MAX_CHANNELS: usize = 64;

/// Messages queued for one connection before its observers wait for it.
const QUEUED: usize = 256;

/// The channels a lock's changes are announced on, as the module names
/// them in database 0 (the endpoint's only one).
const PREFIX: &[u8] = b"__redislock@0__:";

/// `LOCK.PROCLAIM key owner text`, as the module answers it: 1 when a
/// quorum now stores `text` with `owner`'s hold (exclusive, or its own
/// as one of a shared lock's holders), 0 when `owner`
/// holds no such hold on a quorum.
pub async fn proclaim(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    proclaimed(shared, args).await.unwrap_or_else(|e| e)
}

async fn proclaimed(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key, owner, value] = args else { return Err(wrong_arity("lock.proclaim")) };
    let (key, owner, value) = (text(key, "key")?, owner_of(owner)?, text(value, "value")?);
    let Some(hold) = lookup(shared, &key, &owner).await.holds.into_iter().next() else { return Ok(Reply::Int(0)) };
    match shared.redlock.proclaim_owner(&key, &hold.stored, &value).await {
        Ok(()) => Ok(Reply::Int(1)),
        // The module's words for a value over its bound.
        Err(Error::Rejected { rejection: Rejection::OwnerTooLong, .. }) => {
            Err(Reply::error("ERR value is longer than redislock.max-owner-len (the servers' bound on every text a lock stores)"))
        }
        // Not held (any more) by `owner` on a quorum, as the module's 0.
        Err(Error::NoQuorum { outcomes, .. }) if outcomes.iter().filter(|o| o.outcome.answered()).count() >= shared.redlock.quorum() => {
            Ok(Reply::Int(0))
        }
        Err(e) => Err(failed(&e)),
    }
}

/// One message for a connection: from the observer of subscription `id`.
struct Message {
    id: u64,
    channel: Vec<u8>,
    payload: Vec<u8>,
}

/// One subscribed channel: its observer, aborted when dropped.
struct Channel {
    name: Vec<u8>,
    id: u64,
    observer: JoinHandle<()>,
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.observer.abort();
    }
}

/// A connection's subscribed channels, in the order subscribed.
pub struct Subscriptions {
    shared: Arc<Shared>,
    channels: Vec<Channel>,
    next_id: u64,
    sender: mpsc::Sender<Message>,
    receiver: mpsc::Receiver<Message>,
}

impl Subscriptions {
    pub fn new(shared: &Arc<Shared>) -> Subscriptions {
        let (sender, receiver) = mpsc::channel(QUEUED);
        Subscriptions { shared: Arc::clone(shared), channels: Vec::new(), next_id: 1, sender, receiver }
    }

    /// Channels subscribed now; more than 0: the connection is in
    /// subscribe mode.
    pub fn count(&self) -> usize {
        self.channels.len()
    }

    /// The next message of a channel still subscribed, as a `message`
    /// push; pends while there is none. Cancel-safe (a `select!` arm).
    pub async fn next(&mut self) -> Reply {
        loop {
            // The sender is kept here: the queue never closes.
            let Some(m) = self.receiver.recv().await else { return std::future::pending().await };
            // A message its observer queued before the channel was
            // unsubscribed (or subscribed anew) is not sent.
            if self.channels.iter().any(|c| c.id == m.id) {
                return Reply::Push(vec![Reply::bulk("message"), Reply::Bulk(m.channel), Reply::Bulk(m.payload)]);
            }
        }
    }

    /// `SUBSCRIBE channel [channel ...]`: one confirmation per channel.
    /// Every channel is checked before any is subscribed. Confirmed once
    /// each new channel's observer is subscribed on a quorum of servers
    /// (from then on no change is missed), or has had the time to try
    /// every server once (it then reads the holder at an interval).
    pub async fn subscribe(&mut self, names: &[Vec<u8>]) -> Reply {
        if names.is_empty() {
            return wrong_arity("subscribe");
        }
        let mut keys = Vec::with_capacity(names.len());
        for name in names {
            match key_of(name) {
                Ok(key) => keys.push(key),
                Err(e) => return e,
            }
        }
        let new = names.iter().filter(|n| !self.channels.iter().any(|c| &c.name == *n)).count();
        if self.channels.len().saturating_add(new) > MAX_CHANNELS {
            return Reply::error(format!("ERR redlock serve follows at most {MAX_CHANNELS} channels per connection"));
        }
        let was = self.count();
        let mut replies = Vec::with_capacity(names.len());
        let mut started = Vec::new();
        for (name, key) in names.iter().zip(keys) {
            if !self.channels.iter().any(|c| &c.name == name) {
                let id = self.next_id;
                self.next_id = self.next_id.saturating_add(1);
                let subscribed = CancellationToken::new();
                let observer =
                    tokio::spawn(observe(Arc::clone(&self.shared), key, name.clone(), id, self.sender.clone(), subscribed.clone()));
                self.channels.push(Channel { name: name.clone(), id, observer });
                started.push(subscribed);
            }
            replies.push(confirmation("subscribe", Reply::Bulk(name.clone()), self.count()));
        }
        self.counted(was);
        let settings = self.shared.redlock.settings();
        // One subscription attempt's budget (`Instance::changes`).
        let budget = settings.connect_timeout.saturating_add(settings.request_timeout.saturating_mul(3));
        let _ = tokio::time::timeout(budget, futures::future::join_all(started.iter().map(CancellationToken::cancelled))).await;
        Reply::Several(replies)
    }

    /// `UNSUBSCRIBE [channel ...]`: the channels named, or every one; one
    /// confirmation per channel (one with a nil channel when none was).
    pub fn unsubscribe(&mut self, names: &[Vec<u8>]) -> Reply {
        let was = self.count();
        let names: Vec<Vec<u8>> = if names.is_empty() { self.channels.iter().map(|c| c.name.clone()).collect() } else { names.to_vec() };
        if names.is_empty() {
            return Reply::Several(vec![confirmation("unsubscribe", Reply::Nil, 0)]);
        }
        let mut replies = Vec::with_capacity(names.len());
        for name in names {
            // Dropping the channel aborts its observer.
            self.channels.retain(|c| c.name != name);
            replies.push(confirmation("unsubscribe", Reply::Bulk(name), self.count()));
        }
        self.counted(was);
        Reply::Several(replies)
    }

    /// `PUNSUBSCRIBE [pattern ...]`: no pattern is ever subscribed here.
    pub fn punsubscribe(&self, patterns: &[Vec<u8>]) -> Reply {
        let count = self.count();
        if patterns.is_empty() {
            return Reply::Several(vec![confirmation("punsubscribe", Reply::Nil, count)]);
        }
        Reply::Several(patterns.iter().map(|p| confirmation("punsubscribe", Reply::Bulk(p.clone()), count)).collect())
    }

    /// Every channel unsubscribed (RESET), without confirmations.
    pub fn clear(&mut self) {
        let was = self.count();
        self.channels.clear();
        self.counted(was);
    }

    /// Keeps the endpoint's count of subscribed connections after a change
    /// from `was` channels.
    fn counted(&self, was: usize) {
        match (was, self.count()) {
            (0, n) if n > 0 => self.shared.subscribers.fetch_add(1, Ordering::Relaxed),
            (w, 0) if w > 0 => self.shared.subscribers.fetch_sub(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        // The connection ended: its observers are aborted with `channels`.
        self.clear();
    }
}

/// `PSUBSCRIBE`'s refusal: a pattern would need an observer per lock it
/// might match.
pub fn psubscribe_refused() -> Reply {
    Reply::error("ERR PSUBSCRIBE is not served by this endpoint (redlock serve): SUBSCRIBE to each lock's channel, __redislock@0__:KEY")
}

/// A `subscribe`/`unsubscribe`/`punsubscribe` confirmation.
fn confirmation(kind: &str, channel: Reply, count: usize) -> Reply {
    Reply::Push(vec![Reply::bulk(kind), channel, Reply::Int(i64::try_from(count).unwrap_or(i64::MAX))])
}

/// The lock whose changes `channel` announces, or the error that says
/// which channels this endpoint serves.
fn key_of(channel: &[u8]) -> Result<String, Reply> {
    let refused = || {
        Reply::error(format!(
            "ERR redlock serve serves the channels __redislock@0__:KEY only (a lock's announced changes), not '{}'",
            printable(channel)
        ))
    };
    let Some(key) = channel.strip_prefix(PREFIX) else {
        if channel.starts_with(b"__redislock@") {
            return Err(Reply::error(format!(
                "ERR redlock serve has database 0 only: subscribe to __redislock@0__:KEY, not '{}'",
                printable(channel)
            )));
        }
        return Err(refused());
    };
    if key.is_empty() {
        return Err(refused());
    }
    text(key, "key")
}

/// Counts a running observer while it lives (aborted included).
struct Running(Arc<Shared>);

impl Running {
    fn new(shared: Arc<Shared>) -> Running {
        shared.observers.fetch_add(1, Ordering::Relaxed);
        Running(shared)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.observers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Subscription `id`'s observer of `key` (`subscribed` cancelled once it
/// is subscribed on a quorum): each change the crate's observer reports, as the module's announcement (`grant` for a new term,
/// `proclaim` for a new value of the same term), until the connection's
/// queue closes or the task is aborted.
async fn observe(
    shared: Arc<Shared>,
    key: String,
    channel: Vec<u8>,
    id: u64,
    sender: mpsc::Sender<Message>,
    subscribed: CancellationToken,
) {
    let running = Running::new(shared);
    let changes = observe_lock(&running.0.redlock, &key, DEFAULT_OBSERVE_INTERVAL, subscribed);
    futures::pin_mut!(changes);
    let mut term = None;
    while let Some((owner, leader)) = changes.next().await {
        let kind = if term == Some(leader.term) { "proclaim" } else { "grant" };
        term = Some(leader.term);
        let owner = shown(&owner);
        let payload = format!("{kind} {} {} {owner} {}", leader.term, owner.len(), leader.value).into_bytes();
        if sender.send(Message { id, channel: channel.clone(), payload }).await.is_err() {
            return;
        }
    }
}

/// Observers running now, for INFO.
pub fn observers(shared: &Shared) -> usize {
    shared.observers.load(Ordering::Relaxed)
}

/// Connections subscribed to a channel now, for INFO.
pub fn subscribers(shared: &Shared) -> usize {
    shared.subscribers.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_database_0s_lock_channels_are_served() {
        assert_eq!(key_of(b"__redislock@0__:jobs"), Ok("jobs".to_string()));
        assert_eq!(key_of(b"__redislock@0__:a:b c"), Ok("a:b c".to_string()));
        for refused in [&b"news"[..], b"__redislock@0__:", b"__redislock@1__:jobs", b"__keyspace@0__:jobs", b"__redislock@0__:\xff"] {
            assert!(matches!(key_of(refused), Err(Reply::Error(_))), "{refused:?}");
        }
    }
}
