//! `Redlock::watch`: a lock's changes as a quorum of servers announced
//! them. Every server is subscribed to the lock's channel (`heard`), what
//! each announces is counted per hold (`count`), and a change is
//! delivered once a quorum of servers announced it. docs/client.md,
//! "Watching a lock", says what is delivered when.

use std::time::Duration;

use futures::stream::{unfold, Stream, StreamExt};
use futures::FutureExt;
use redis_glob::Glob;

use crate::error::Error;
use crate::redlock::Redlock;
use crate::transport::Barrier;

mod asks;
mod count;
pub(crate) mod heard;

pub(crate) use asks::asks_for;
pub use asks::AskRequest;
use count::Count;
use heard::{every_server, Heard};

pub use crate::transport::ChangeKind;

/// How often `watch` subscribes again to a server it lost unless
/// `watch_every` says otherwise.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// One change of a lock a quorum of servers announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    /// The hold's token: for a grant, the largest t such that a quorum
    /// announced tokens >= t (the lock's token once the client wrote it
    /// back); every later change of the hold, its end included, carries
    /// the same. 0 for a resize.
    pub token: i64,
    /// The hold's owner as the servers store it (a quorum client's hold
    /// named `NAME` is `NAME:` and 16 hex digits); empty for a resize.
    pub owner: String,
    /// A grant's or proclamation's value, a cut's deadline (Unix ms), a
    /// resize's limit; `None` when there is none.
    pub value: Option<String>,
}

impl Redlock {
    /// The changes of `resource` a quorum of servers announced, as they
    /// reach a quorum (see docs/client.md, "Watching a lock"). Ends of
    /// holds are announced only for a key `redislock.notify` names on the
    /// servers: a server whose setting names no key at all is reported
    /// once, as an `Err(Error::Server)` item, and the stream goes on. The
    /// stream never ends by itself; drop it to stop watching.
    pub fn watch(&self, resource: &str) -> impl Stream<Item = Result<Change, Error>> + Send + 'static {
        self.watch_every(resource, DEFAULT_WATCH_INTERVAL)
    }

    /// `watch`, a lost server subscribed again every `every`.
    pub fn watch_every(&self, resource: &str, every: Duration) -> impl Stream<Item = Result<Change, Error>> + Send + 'static {
        self.watching(resource, every).changes()
    }

    /// `watch_every`, returned once a quorum of servers is subscribed (and
    /// has said what it holds, which the stream delivers as grants): a
    /// reader that reads the lock after this misses no change between its
    /// reading and the stream (subscribe, then read, as an election's
    /// observer does). Waits as long as fewer than a quorum answer.
    pub async fn watch_subscribed(&self, resource: &str, every: Duration) -> impl Stream<Item = Result<Change, Error>> + Send + 'static {
        let mut watching = self.watching(resource, every);
        let quorum = self.quorum();
        while watching.barriers.iter().flatten().count() < quorum {
            match watching.heard.next().await {
                Some(heard) => watching.take(heard),
                None => break,
            }
        }
        watching.take_what_arrived().await;
        watching.settle().await;
        watching.changes()
    }

    fn watching(&self, resource: &str, every: Duration) -> Watching {
        let every = every.max(Duration::from_millis(1));
        let servers = self.inner.instances.len();
        Watching {
            heard: Box::pin(every_server(self, resource, every, false, true)),
            count: Count::new(servers, self.quorum()),
            barriers: vec![None; servers],
            ready: std::collections::VecDeque::new(),
            warned: false,
            names: self.inner.instances.iter().map(|i| i.name.clone()).collect(),
            resource: resource.to_string(),
        }
    }
}

impl Watching {
    /// The changes as they reach a quorum (`Redlock::watch`).
    fn changes(self) -> impl Stream<Item = Result<Change, Error>> + Send + 'static {
        unfold(self, |mut w| async move {
            loop {
                if let Some(item) = w.ready.pop_front() {
                    return Some((item, w));
                }
                let first = w.heard.next().await?;
                w.take(first);
                w.take_what_arrived().await;
                w.settle().await;
            }
        })
    }

    /// Makes ready what a quorum announced.
    async fn settle(&mut self) {
        loop {
            let settled = self.count.settle();
            self.ready.extend(settled.changes.into_iter().map(Ok));
            if !settled.waiting {
                return;
            }
            // A change is ready: first hear everything the servers
            // announced before it (see `count`).
            futures::future::join_all(self.barriers.iter().flatten().map(|b| b.pass())).await;
            self.take_what_arrived().await;
            self.count.barrier_passed();
        }
    }
}

impl Watching {
    /// Counts what was heard; a notify report, or a resize a quorum
    /// announced, is ready at once.
    fn take(&mut self, heard: Heard) {
        let changes = match heard {
            Heard::Up(i, now, barrier) => {
                if !self.warned && now.notify.as_ref().is_some_and(|p| !p.iter().any(|p| covers(p, &self.resource))) {
                    self.warned = true;
                    let server = self.names.get(i).cloned().unwrap_or_default();
                    self.ready.push_back(Err(Error::Server {
                        server,
                        message: format!(
                            "redislock.notify names no pattern matching {:?}: its holds' ends are not announced \
                             (CONFIG SET redislock.notify with a pattern that matches it)",
                            self.resource
                        ),
                    }));
                }
                if let Some(slot) = self.barriers.get_mut(i) {
                    *slot = Some(barrier);
                }
                self.count.note_reading(i, &now.holders());
                Vec::new()
            }
            Heard::Said(i, said) => self.count.note(i, said.kind, said.token, &said.owner, said.value),
            Heard::Down(i) => {
                if let Some(slot) = self.barriers.get_mut(i) {
                    *slot = None;
                }
                Vec::new()
            }
            Heard::Tick => Vec::new(),
        };
        self.ready.extend(changes.into_iter().map(Ok));
    }
}

impl Watching {
    /// Counts whatever the servers' connections already received.
    async fn take_what_arrived(&mut self) {
        tokio::task::yield_now().await;
        while let Some(Some(more)) = self.heard.next().now_or_never() {
            self.take(more);
        }
    }
}

struct Watching {
    heard: std::pin::Pin<Box<dyn Stream<Item = Heard> + Send>>,
    count: Count,
    /// Per server subscribed now, its barrier.
    barriers: Vec<Option<Barrier>>,
    ready: std::collections::VecDeque<Result<Change, Error>>,
    /// Whether a server's notify setting was reported.
    warned: bool,
    names: Vec<String>,
    resource: String,
}

/// Whether the `redislock.notify` pattern `pattern` names `key`, read as
/// the module reads it (the same matcher, redis-glob).
fn covers(pattern: &str, key: &str) -> bool {
    Glob::parse(pattern.as_bytes()).matches(key.as_bytes())
}
