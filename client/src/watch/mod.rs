//! `Redlock::watch`: a lock's changes as a quorum of servers announced
//! them. Every server is subscribed to the lock's channel (`heard`), what
//! each announces is counted per hold (`count`), and a change is
//! delivered once a quorum of servers announced it. docs/client.md,
//! "Watching a lock", says what is delivered when.

use std::time::Duration;

use futures::stream::{unfold, Stream, StreamExt};
use futures::FutureExt;

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
                if !self.warned && now.notify.as_ref().is_some_and(|p| !p.iter().any(|p| matches(p, &self.resource))) {
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

/// Whether `pattern` (Redis's glob syntax, as `redislock.notify` reads it,
/// see src/core/glob.rs: `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, `\x`) matches
/// `key`. Backtracks to the last star only: O(pattern × key) at worst.
fn matches(pattern: &str, key: &str) -> bool {
    let (pattern, key) = (pattern.as_bytes(), key.as_bytes());
    let (mut p, mut k) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        let step = pattern.get(p).map(|_| step_at(pattern, p));
        match (step, key.get(k)) {
            (Some((Step::AnyRun, next)), _) => {
                star = Some((next, k));
                p = next;
            }
            (Some((step, next)), Some(&b)) if step.matches(b) => {
                p = next;
                k += 1;
            }
            (None, None) => return true,
            _ => match star {
                Some((after, from)) if from < key.len() => {
                    star = Some((after, from + 1));
                    p = after;
                    k = from + 1;
                }
                _ => return false,
            },
        }
    }
}

enum Step {
    Byte(u8),
    AnyByte,
    AnyRun,
    /// One byte in (or, negated, out of) the inclusive ranges.
    Class(bool, Vec<(u8, u8)>),
}

impl Step {
    fn matches(&self, b: u8) -> bool {
        match self {
            Step::Byte(x) => *x == b,
            Step::AnyByte => true,
            Step::AnyRun => false,
            Step::Class(negated, ranges) => ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&b)) != *negated,
        }
    }
}

/// The step of `pattern` at `i`, and where the next begins.
fn step_at(pattern: &[u8], mut i: usize) -> (Step, usize) {
    let Some(&b) = pattern.get(i) else { return (Step::AnyRun, i) };
    i += 1;
    let step = match b {
        b'*' => Step::AnyRun,
        b'?' => Step::AnyByte,
        b'\\' => match pattern.get(i) {
            Some(&x) => {
                i += 1;
                Step::Byte(x)
            }
            None => Step::Byte(b'\\'),
        },
        b'[' => {
            let negated = pattern.get(i) == Some(&b'^');
            if negated {
                i += 1;
            }
            let mut ranges = Vec::new();
            while let Some(&c) = pattern.get(i) {
                i += 1;
                match c {
                    b']' => break,
                    b'\\' => match pattern.get(i) {
                        Some(&x) => {
                            i += 1;
                            ranges.push((x, x));
                        }
                        None => ranges.push((b'\\', b'\\')),
                    },
                    _ => match (pattern.get(i), pattern.get(i + 1)) {
                        (Some(b'-'), Some(&hi)) => {
                            i += 2;
                            ranges.push((c.min(hi), c.max(hi)));
                        }
                        _ => ranges.push((c, c)),
                    },
                }
            }
            Step::Class(negated, ranges)
        }
        _ => Step::Byte(b),
    };
    (step, i)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn notify_patterns_match_as_the_module_reads_them() {
        assert!(matches("jobs:*", "jobs:a"));
        assert!(!matches("jobs:*", "job"));
        assert!(matches("*", ""));
        assert!(matches("j?b", "jab"));
        assert!(matches("[a-c]x", "bx") && !matches("[^a-c]x", "bx"));
        assert!(matches("[c-a]x", "bx"), "a range either way round");
        assert!(matches("a\\*", "a*") && !matches("a\\*", "ab"));
        assert!(matches("*a*b", "xxaxxb") && !matches("*a*b", "xxaxx"));
        assert!(matches("[ab", "a"), "a class left open runs to the end");
        // Backtracking to the last star only: this answers at once.
        assert!(!matches(&format!("{}b", "*a".repeat(30)), &"a".repeat(200)));
    }
}
