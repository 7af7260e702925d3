//! A lock's changes as its server announces them: the module publishes
//! on the channel `__redislock@DB__:KEY` each grant and new value of a
//! hold that carries a value, and every change of a key its
//! `redislock.notify` names (`KIND TOKEN OWNER-LENGTH OWNER VALUE`,
//! docs/commands.md "Announced changes"). An observer subscribes on a
//! connection of its own (RESP3, so the same connection is identified
//! first and reads the lock after the subscription took effect: nothing
//! between the two is missed).

use std::time::Duration;

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{ProtocolVersion, PushInfo, PushKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::*;

/// The channel `key`'s changes in `db` are published on.
pub fn changes_channel(db: i64, key: &str) -> String {
    format!("__redislock@{db}__:{key}")
}

/// One announcement as the module sends it: `KIND TOKEN OWNER-LENGTH
/// OWNER VALUE`. `None` when the message is not one (an unknown kind, a
/// field that does not parse, an owner longer than the message).
pub fn announcement(message: &[u8]) -> Option<Announcement> {
    let mut fields = message.splitn(4, |b| *b == b' ');
    let kind = ChangeKind::from_announced(fields.next()?)?;
    let token: i64 = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let owner_len: usize = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let rest = fields.next()?;
    let owner = rest.get(..owner_len)?;
    let value = match rest.get(owner_len..)? {
        [] => None,
        [b' ', value @ ..] => Some(value),
        _ => return None,
    };
    Some(Announcement {
        kind,
        token,
        owner: String::from_utf8_lossy(owner).into_owned(),
        value: value.filter(|v| !v.is_empty()).map(|v| String::from_utf8_lossy(v).into_owned()),
    })
}

/// One server's announcement of one change of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    pub kind: ChangeKind,
    pub token: i64,
    pub owner: String,
    /// `None` when the message's value is empty.
    pub value: Option<String>,
}

impl Announcement {
    /// The holding a grant, handoff or proclamation names; `None` for the
    /// other kinds (ends of holds, resizes).
    pub fn holding(self) -> Option<Holding> {
        matches!(self.kind, ChangeKind::Grant | ChangeKind::Handoff | ChangeKind::Proclaim).then(|| Holding {
            owner: self.owner,
            token: Some(self.token),
            value: self.value,
        })
    }
}

#[cfg(test)]
fn announced(message: &[u8]) -> Option<Holding> {
    announcement(message)?.holding()
}

/// What happened to a lock, as its servers announce it (the `KIND` of
/// `__redislock@DB__:KEY`'s messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// A hold granted by a command (or, on one server, written back).
    Grant,
    /// A hold granted to a waiter when the holder before it ended.
    Handoff,
    /// The holder released it.
    Release,
    /// Its lease ran out (and, for `watch`, a hold a server no longer had
    /// when it was subscribed again).
    Expire,
    /// A `SESSION DELAY` hold's connection closed: its lease now ends at
    /// the deadline in the value (Unix ms).
    Cut,
    /// A `SESSION` hold ended with its connection.
    Session,
    /// `LOCK.REVOKE` ended the hold.
    Revoke,
    /// A semaphore's limit was set to the value.
    Resize,
    /// The holder stored a new value.
    Proclaim,
    /// `LOCK.ASK` asked the holder to let go (the value: the message);
    /// changes nothing, so a watch's count and an election ignore it.
    Ask,
}

impl ChangeKind {
    /// The kind an announcement names (`grant`, `handoff`, ...).
    pub fn from_announced(word: &[u8]) -> Option<ChangeKind> {
        Some(match word {
            b"grant" => ChangeKind::Grant,
            b"handoff" => ChangeKind::Handoff,
            b"release" => ChangeKind::Release,
            b"expire" => ChangeKind::Expire,
            b"cut" => ChangeKind::Cut,
            b"session" => ChangeKind::Session,
            b"revoke" => ChangeKind::Revoke,
            b"resize" => ChangeKind::Resize,
            b"proclaim" => ChangeKind::Proclaim,
            b"ask" => ChangeKind::Ask,
            _ => return None,
        })
    }

    /// The word the servers announce it by.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Grant => "grant",
            ChangeKind::Handoff => "handoff",
            ChangeKind::Release => "release",
            ChangeKind::Expire => "expire",
            ChangeKind::Cut => "cut",
            ChangeKind::Session => "session",
            ChangeKind::Revoke => "revoke",
            ChangeKind::Resize => "resize",
            ChangeKind::Proclaim => "proclaim",
            ChangeKind::Ask => "ask",
        }
    }

    /// Whether it ends a hold.
    pub fn is_end(self) -> bool {
        matches!(self, ChangeKind::Release | ChangeKind::Expire | ChangeKind::Session | ChangeKind::Revoke)
    }
}

impl std::fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a server said when subscribed: its `LOCK.INFO` reply, and the
/// patterns of `redislock.notify` when asked for and told.
pub struct Reading {
    info: Value,
    pub notify: Option<Vec<String>>,
}

impl Reading {
    /// The exclusive holder, as an election reads it (`None`: nobody, or
    /// shared holders).
    pub fn holding(&self) -> Option<Holding> {
        holding_of(self.info.clone())
    }

    /// Every holder with a token: owner and token.
    pub fn holders(&self) -> Vec<(String, i64)> {
        holders_of(&self.info)
    }
}

/// The setting that makes every change of a key it names announced.
const NOTIFY_SETTING: &str = "redislock.notify";

/// `CONFIG GET redislock.notify`'s patterns (a map in RESP3, a pair in
/// RESP2); `None` when the reply does not name the setting.
fn notify_patterns(reply: Value) -> Option<Vec<String>> {
    let value = match reply {
        Value::Map(pairs) => pairs.into_iter().next()?.1,
        Value::Array(items) => items.into_iter().nth(1)?,
        _ => return None,
    };
    let text = String::from_redis_value(value).ok()?;
    Some(text.split_whitespace().map(str::to_string).collect())
}

/// A live subscription to one lock's changes on one server.
pub struct Changes {
    /// Kept so the connection (and with it the subscription) lives.
    _link: Link,
    pushes: UnboundedReceiver<PushInfo>,
    barrier: Barrier,
}

/// Confirms that every announcement a subscribed server published before
/// now has been received: a PING on the subscription's own connection.
/// The server answers commands and publishes on one connection in the
/// order it executes them, and the connection hands each message on
/// before it answers the command read after it, so once the PONG is in,
/// every earlier announcement is waiting in its `Changes`.
#[derive(Clone)]
pub struct Barrier {
    link: Link,
    /// The subscribed channel: on a Cluster instance the PING goes to the
    /// node subscribed to it. (Messages reach that node over the cluster
    /// bus, which keeps no order with the PING: there the barrier covers
    /// what had reached the node.)
    channel: String,
    budget: Duration,
}

impl Barrier {
    /// Whether the server answered within the request timeout: `false`
    /// when it did not (it is then as good as not heard, and its
    /// subscription is read again once the connection is found lost).
    pub async fn pass(&self) -> bool {
        let mut link = self.link.clone();
        let ping = async {
            match &mut link {
                Link::Single(conn) => redis::cmd("PING").query_async::<Value>(conn).await,
                Link::Cluster(conn) => {
                    let route = Route::with_key(self.channel.as_bytes(), SlotAddr::Master);
                    conn.route_command(redis::cmd("PING"), RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route))).await
                }
            }
        };
        matches!(tokio::time::timeout(self.budget, ping).await, Ok(Ok(_)))
    }
}

impl Changes {
    /// The barrier of this subscription (see `Barrier`).
    pub fn barrier(&self) -> Barrier {
        self.barrier.clone()
    }

    /// The next change announced, of any kind; `None` once the
    /// connection is lost (what is announced from then on is not heard:
    /// subscribe again).
    pub async fn next(&mut self) -> Option<Announcement> {
        loop {
            let push = self.pushes.recv().await?;
            match push.kind {
                PushKind::Disconnection => return None,
                PushKind::Message => {
                    let Some(Value::BulkString(message)) = push.data.get(1) else { continue };
                    if let Some(said) = announcement(message) {
                        return Some(said);
                    }
                }
                _ => {}
            }
        }
    }
}

impl Instance {
    /// Subscribes to `key`'s announced changes, then reads who holds it now
    /// on the same connection (`LOCK.INFO`, and with `notify` the server's
    /// `redislock.notify` patterns: `None` when it does not say, an ACL
    /// without `CONFIG GET` for one). A server that cannot tell (no module,
    /// ACL without the channel) answers the error that says so.
    pub async fn changes(&self, key: &str, notify: bool) -> Result<(Reading, Changes), Outcome> {
        if self.mode == Mode::Script {
            return Err(Outcome::Failed("a lock's announced changes need the redislock module".into()));
        }
        let (sender, pushes) = unbounded_channel();
        let connecting = async {
            let made = async {
                let link = match &self.client {
                    Client::Single(_) | Client::Sentinel(_) => {
                        let client = self.server_client().await.map_err(|e| self.failure(e))?;
                        let info = client.get_connection_info().clone();
                        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
                        let client = redis::Client::open(info.set_redis_settings(settings)).map_err(|e| self.failure(e))?;
                        let config = redis::AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(self.connect_timeout))
                            .set_response_timeout(Some(self.request_timeout))
                            .set_push_sender(sender);
                        Link::Single(client.get_multiplexed_async_connection_with_config(&config).await.map_err(|e| self.failure(e))?)
                    }
                    Client::Cluster(seeds, tls) => {
                        let client = self
                            .cluster_builder(seeds, tls.as_deref(), self.request_timeout)
                            .use_protocol(ProtocolVersion::RESP3)
                            .push_sender(sender)
                            .build()
                            .map_err(|e| self.failure(e))?;
                        Link::Cluster(client.get_async_connection().await.map_err(|e| self.failure(e))?)
                    }
                };
                self.identified(link.clone()).await?;
                Ok::<_, Outcome>(link)
            };
            let mut link = self.paced(made).await?;
            let channel = changes_channel(link.get_db(), key);
            let subscribed = match &mut link {
                Link::Single(conn) => conn.subscribe(&channel).await,
                Link::Cluster(conn) => conn.subscribe(&channel).await,
            };
            subscribed.map_err(|e| self.noted(classify(e)))?;
            let now = redis::cmd("LOCK.INFO").arg(key).query_async::<Value>(&mut link).await.map_err(|e| self.noted(classify(e)))?;
            let patterns = if notify {
                redis::cmd("CONFIG").arg("GET").arg(NOTIFY_SETTING).query_async::<Value>(&mut link).await.ok().and_then(notify_patterns)
            } else {
                None
            };
            Ok::<_, Outcome>((Reading { info: now, notify: patterns }, link, channel))
        };
        let budget = self.connect_timeout.saturating_add(self.request_timeout.saturating_mul(3));
        match tokio::time::timeout(budget, connecting).await {
            Ok(Ok((now, link, channel))) => {
                let barrier = Barrier { link: link.clone(), channel, budget: self.request_timeout };
                Ok((now, Changes { _link: link, pushes, barrier }))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Outcome::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_read_as_holdings() {
        let h = announced(b"grant 42 5 alice host a:1").expect("a grant");
        assert_eq!(h, Holding { owner: "alice".into(), token: Some(42), value: Some("host a:1".into()) });
        // The owner is read by its length: spaces inside it stay.
        let h = announced(b"proclaim 7 3 a b x y").expect("a proclamation");
        assert_eq!((h.owner.as_str(), h.value.as_deref()), ("a b", Some("x y")));
        assert_eq!(announced(b"proclaim 7 1 a").expect("no value").value, None);
        assert_eq!(announced(b"grant 7 9 a v"), None, "an owner longer than the message");
        assert_eq!(announced(b"grant x 1 a v"), None);
        assert_eq!(announced(b"release 7 1 a v"), None);
        assert_eq!(announced(b"expire 7 1 a "), None);
        let h = announced(b"handoff 9 3 bob v").expect("a handoff is a grant");
        assert_eq!(h, Holding { owner: "bob".into(), token: Some(9), value: Some("v".into()) });
        assert_eq!(announced(b"grant 7 1 abv"), None, "no space after the owner");
    }

    #[test]
    fn every_kind_is_read_with_its_token_owner_and_value() {
        let a = announcement(b"revoke 12 5 alice ").expect("a revocation");
        assert_eq!(a, Announcement { kind: ChangeKind::Revoke, token: 12, owner: "alice".into(), value: None });
        let a = announcement(b"resize 0 0  3").expect("a resize has no owner");
        assert_eq!((a.kind, a.owner.as_str(), a.value.as_deref()), (ChangeKind::Resize, "", Some("3")));
        let a = announcement(b"cut 4 1 a 1795774162761").expect("a cut");
        assert_eq!((a.kind, a.value.as_deref()), (ChangeKind::Cut, Some("1795774162761")));
        for word in ["release", "expire", "session"] {
            assert!(announcement(format!("{word} 1 1 a").as_bytes()).is_some_and(|a| a.kind.as_str() == word && a.kind.is_end()));
        }
        assert_eq!(announcement(b"extend 1 1 a"), None, "an unknown kind");
        let a = announcement(b"ask 9 5 alice deploy at 10").expect("an ask");
        assert_eq!(a, Announcement { kind: ChangeKind::Ask, token: 9, owner: "alice".into(), value: Some("deploy at 10".into()) });
        assert!(!a.kind.is_end());
        assert_eq!(a.holding(), None, "an ask is no grant: an election's observer ignores it");
    }

    #[test]
    fn the_channel_names_db_and_key() {
        assert_eq!(changes_channel(3, "redlock:election:x"), "__redislock@3__:redlock:election:x");
    }
}
