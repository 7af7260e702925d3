//! A lock's changes as its server announces them: the module publishes
//! every grant and every new value of a hold that carries a value on the
//! channel `__redislock@DB__:KEY` (`grant|proclaim TOKEN OWNER-LENGTH OWNER
//! VALUE`; `handoff` too, a grant to a waiter, on a key the server's
//! `redislock.notify` names; its other kinds, ends of holds, are not
//! holdings and are skipped). An observer subscribes on a connection of its own (RESP3, so
//! the same connection is identified first and reads the lock after the
//! subscription took effect: nothing between the two is missed).

use redis::{ProtocolVersion, PushInfo, PushKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::*;

/// The channel `key`'s changes in `db` are published on.
pub fn changes_channel(db: i64, key: &str) -> String {
    format!("__redislock@{db}__:{key}")
}

/// An announcement as a holding; `None` when it is not one.
fn announced(message: &[u8]) -> Option<Holding> {
    let mut fields = message.splitn(4, |b| *b == b' ');
    let kind = fields.next()?;
    if kind != b"grant" && kind != b"handoff" && kind != b"proclaim" {
        return None;
    }
    let token: i64 = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let owner_len: usize = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let rest = fields.next()?;
    let owner = rest.get(..owner_len)?;
    let value = match rest.get(owner_len..)? {
        [] => None,
        [b' ', value @ ..] => Some(value),
        _ => return None,
    };
    Some(Holding {
        owner: String::from_utf8_lossy(owner).into_owned(),
        token: Some(token),
        value: value.filter(|v| !v.is_empty()).map(|v| String::from_utf8_lossy(v).into_owned()),
    })
}

/// A live subscription to one lock's changes on one server.
pub struct Changes {
    /// Kept so the connection (and with it the subscription) lives.
    _link: Link,
    pushes: UnboundedReceiver<PushInfo>,
}

impl Changes {
    /// The next change announced: `Some` each grant or new value, `None`
    /// once the connection is lost (what is announced from then on is
    /// not heard: subscribe again).
    pub async fn next(&mut self) -> Option<Holding> {
        loop {
            let push = self.pushes.recv().await?;
            match push.kind {
                PushKind::Disconnection => return None,
                PushKind::Message => {
                    let Some(Value::BulkString(message)) = push.data.get(1) else { continue };
                    if let Some(holding) = announced(message) {
                        return Some(holding);
                    }
                }
                _ => {}
            }
        }
    }
}

impl Instance {
    /// Subscribes to `key`'s announced changes, then reads who holds it now
    /// (`None`: nobody, or a holder without a token) on the same
    /// connection. A server that cannot tell (no module, ACL without the
    /// channel) answers the error that says so.
    pub async fn changes(&self, key: &str) -> Result<(Option<Holding>, Changes), Outcome> {
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
            Ok::<_, Outcome>((holding_of(now), link))
        };
        let budget = self.connect_timeout.saturating_add(self.request_timeout.saturating_mul(3));
        match tokio::time::timeout(budget, connecting).await {
            Ok(Ok((now, link))) => Ok((now, Changes { _link: link, pushes })),
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
    fn the_channel_names_db_and_key() {
        assert_eq!(changes_channel(3, "redlock:election:x"), "__redislock@3__:redlock:election:x");
    }
}
