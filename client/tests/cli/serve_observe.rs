//! Following a leader through `redlock serve`: `LOCK.PROCLAIM` through the
//! quorum, and `SUBSCRIBE __redislock@0__:KEY`, whose messages are the
//! module's announcements once a quorum announced them, in term order,
//! each once; in RESP2 (subscribe mode) and RESP3 (pushes); with a server
//! of five killed; and nothing left running once a subscriber leaves.

use crate::common;

use std::time::{Duration, Instant};

use common::cli::redlock_with;
use common::{eventually, Cluster};

use crate::serve_endpoint::{endpoint, token_of, Raw};

const JOB: &str = "__redislock@0__:job";

/// The channel and payload of a `message` (an array in RESP2, a push in
/// RESP3), or a panic naming what came instead.
fn message(reply: &str) -> (String, String) {
    let lines: Vec<&str> = reply.split("\r\n").collect();
    match lines.as_slice() {
        [kind, _, "message", _, channel, _, payload, ""] if matches!(*kind, "*3" | ">3") => (channel.to_string(), payload.to_string()),
        _ => panic!("expected a message, got {reply:?}"),
    }
}

/// The next message's payload on `sub`, checked to be on `channel`.
async fn next_on(sub: &mut Raw, channel: &str) -> String {
    let (on, payload) = message(&sub.reply().await);
    assert_eq!(on, channel);
    payload
}

/// A confirmation (`subscribe`, `unsubscribe`, ...) as RESP2 writes it.
fn confirmed(kind: &str, channel: &str, count: usize) -> String {
    format!("*3\r\n${}\r\n{kind}\r\n${}\r\n{channel}\r\n:{count}\r\n", kind.len(), channel.len())
}

/// One of the endpoint's INFO fields.
async fn info_field(conn: &mut Raw, field: &str) -> i64 {
    let info = conn.call(&["INFO"]).await;
    let prefix = format!("{field}:");
    info.split("\r\n")
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO: {info:?}"))
}

/// Subscriptions to `channel` on the module servers still running.
async fn server_subscriptions(c: &Cluster, channel: &str) -> i64 {
    let mut total = 0;
    for s in &c.servers {
        if let Ok(redis::Value::Array(v)) = s.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel)).await {
            if let Some(redis::Value::Int(n)) = v.get(1) {
                total += n;
            }
        }
    }
    total
}

/// A subscriber in RESP2 hears a first holder's term once its value is
/// proclaimed, its new value, and after it releases the next holder's
/// later term: each once, in order (the message after each is the next
/// change, never a repeat). In subscribe mode only the pub/sub commands
/// run, as on redis-server; PING answers as there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_subscriber_follows_each_leader_once_in_term_order() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut sub = Raw::connect(e.port).await;
    let mut a = Raw::connect(e.port).await;
    let mut b = Raw::connect(e.port).await;
    assert_eq!(sub.call(&["SUBSCRIBE", JOB]).await, confirmed("subscribe", JOB, 1));
    assert_eq!(
        sub.call(&["LOCK.INFO", "job"]).await,
        "-ERR Can't execute 'lock.info': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n"
    );
    assert_eq!(sub.call(&["PING"]).await, "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert_eq!(sub.call(&["PING", "hi"]).await, "*2\r\n$4\r\npong\r\n$2\r\nhi\r\n");

    let first = token_of(&a.call(&["LOCK.ACQUIRE", "job", "alice", "30000"]).await);
    assert_eq!(b.call(&["LOCK.PROCLAIM", "job", "bob", "host-b"]).await, ":0\r\n", "not bob's to proclaim");
    assert_eq!(a.call(&["LOCK.PROCLAIM", "job", "alice", "host-a"]).await, ":1\r\n");
    assert_eq!(next_on(&mut sub, JOB).await, format!("grant {first} 5 alice host-a"));
    assert_eq!(a.call(&["LOCK.PROCLAIM", "job", "alice", "host a:2"]).await, ":1\r\n");
    assert_eq!(next_on(&mut sub, JOB).await, format!("proclaim {first} 5 alice host a:2"), "the new value, and no repeat before it");
    assert_eq!(a.call(&["LOCK.RELEASE", "job", "alice"]).await, ":1\r\n");

    let second = token_of(&b.call(&["LOCK.ACQUIRE", "job", "bob", "30000"]).await);
    assert!(second > first, "a later term: {second} after {first}");
    assert_eq!(b.call(&["LOCK.PROCLAIM", "job", "bob", "host-b"]).await, ":1\r\n");
    assert_eq!(next_on(&mut sub, JOB).await, format!("grant {second} 3 bob host-b"));
    assert_eq!(b.call(&["LOCK.PROCLAIM", "job", "bob", "host-b2"]).await, ":1\r\n");
    assert_eq!(next_on(&mut sub, JOB).await, format!("proclaim {second} 3 bob host-b2"), "no change twice");
    assert_eq!(sub.call(&["UNSUBSCRIBE"]).await, confirmed("unsubscribe", JOB, 0));
    assert!(sub.call(&["LOCK.INFO", "job"]).await.starts_with("*"), "out of subscribe mode: any command again");
}

/// `redlock elect`'s leader, followed through the endpoint while one
/// server of five is killed: the four left (a quorum) still announce it,
/// and the message names the term the leader's command was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_subscriber_hears_an_elected_leader_with_a_server_killed() {
    let mut c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let channel = "__redislock@0__:redlock:election:svc";
    let mut sub = Raw::connect(e.port).await;
    assert_eq!(sub.call(&["SUBSCRIBE", channel]).await, confirmed("subscribe", channel, 1));
    eventually(Duration::from_secs(10), "the observer subscribed on every server", || async {
        server_subscriptions(&c, channel).await == 5
    })
    .await;
    c.servers[0].kill9();

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("term");
    let script = format!("echo $REDLOCK_TOKEN > {}; exec sleep 60", file.display());
    let servers = c.urls().join(",");
    let _leader = redlock_with(
        &servers,
        &["--request-timeout", "500ms"],
        &["elect", "svc", "--value", "10.0.0.1:80", "--ttl", "30s", "--", "sh", "-c", &script],
    )
    .spawn()
    .expect("spawn redlock elect");
    let payload = next_on(&mut sub, channel).await;
    let mut term = None;
    eventually(Duration::from_secs(15), "the leader's command to start", || {
        term = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse::<i64>().ok());
        async move { term.is_some() }
    })
    .await;
    let term = term.unwrap_or_default();
    let fields: Vec<&str> = payload.splitn(4, ' ').collect();
    let [kind, announced, owner_len, rest] = fields.as_slice() else { panic!("not an announcement: {payload:?}") };
    assert_eq!((*kind, announced.parse::<i64>().ok()), ("grant", Some(term)), "{payload:?}");
    let owner_len: usize = owner_len.parse().expect("an owner length");
    assert_eq!(rest.get(owner_len..), Some(" 10.0.0.1:80"), "owner, then the value: {payload:?}");
}

/// RESP3: subscription confirmations and messages are pushes, and other
/// commands still run on the subscribed connection (here the leader's own
/// acquisition and proclamation, whose reply and message come in either
/// order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_resp3_subscriber_gets_pushes_and_runs_other_commands() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut conn = Raw::connect(e.port).await;
    assert!(conn.call(&["HELLO", "3"]).await.starts_with('%'));
    assert_eq!(conn.call(&["SUBSCRIBE", JOB]).await, format!(">3\r\n$9\r\nsubscribe\r\n${}\r\n{JOB}\r\n:1\r\n", JOB.len()));
    assert_eq!(conn.call(&["PING"]).await, "+PONG\r\n");
    let token = token_of(&conn.call(&["LOCK.ACQUIRE", "job", "carol", "30000"]).await);
    conn.send(&["LOCK.PROCLAIM", "job", "carol", "h:1"]).await;
    let (one, two) = (conn.reply().await, conn.reply().await);
    let (reply, push) = if one.starts_with('>') { (two, one) } else { (one, two) };
    assert_eq!(reply, ":1\r\n");
    assert!(push.starts_with(">3\r\n"), "a push: {push:?}");
    assert_eq!(message(&push), (JOB.to_string(), format!("grant {token} 5 carol h:1")));

    // The module's refusals: a value over redislock.max-owner-len (256
    // bytes by default), a wrong arity.
    let long = "v".repeat(300);
    let refused = conn.call(&["LOCK.PROCLAIM", "job", "carol", &long]).await;
    assert!(refused.starts_with("-ERR value is longer than redislock.max-owner-len"), "{refused:?}");
    // A shared holder's own value, at its grant and proclaimed, reaches
    // every server's row of it (a group member's, as the module takes it).
    assert!(conn.call(&["LOCK.ACQUIRE", "readers", "dave", "30000", "SHARED", "VALUE", "d:1"]).await.starts_with(':'));
    assert!(conn.call(&["LOCK.ACQUIRE", "readers", "erin", "30000", "SHARED"]).await.starts_with(':'));
    assert_eq!(
        shared_values(&c, "readers").await,
        vec![vec![("dave".to_string(), Some("d:1".to_string())), ("erin".to_string(), None)]; 5]
    );
    assert_eq!(conn.call(&["LOCK.PROCLAIM", "readers", "erin", "e:1"]).await, ":1\r\n");
    assert_eq!(conn.call(&["LOCK.PROCLAIM", "readers", "frank", "f:1"]).await, ":0\r\n", "no such holder");
    assert_eq!(
        shared_values(&c, "readers").await,
        vec![vec![("dave".to_string(), Some("d:1".to_string())), ("erin".to_string(), Some("e:1".to_string()))]; 5]
    );
    assert_eq!(conn.call(&["LOCK.PROCLAIM", "job", "carol"]).await, "-ERR wrong number of arguments for 'lock.proclaim' command\r\n");
}

/// Per server, each holder of `key` (the name it was asked under, before
/// the client's `:` suffix) and the value in its LOCK.INFO row, oldest
/// first.
async fn shared_values(c: &Cluster, key: &str) -> Vec<Vec<(String, Option<String>)>> {
    let mut out = Vec::new();
    for s in &c.servers {
        let reply = s.cmd(redis::cmd("LOCK.INFO").arg(key)).await.expect("LOCK.INFO");
        let items = match reply {
            redis::Value::Array(items) => items,
            redis::Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => panic!("LOCK.INFO {other:?}"),
        };
        let rows = items.chunks(2).find(|kv| matches!(&kv[0], redis::Value::BulkString(b) if b == b"holders")).map(|kv| kv[1].clone());
        let Some(redis::Value::Array(rows)) = rows else { panic!("no holders") };
        let text = |v: &redis::Value| match v {
            redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        };
        out.push(
            rows.iter()
                .map(|row| {
                    let redis::Value::Array(f) = row else { panic!("row {row:?}") };
                    let owner = f.first().and_then(text).unwrap_or_default();
                    let name = owner.rsplit_once(':').map_or(owner.clone(), |(n, _)| n.to_string());
                    (name, f.get(6).and_then(text))
                })
                .collect(),
        );
    }
    out
}

/// Channels other than a lock's in database 0, and patterns, are refused
/// with what is served; UNSUBSCRIBE stops that channel's observer and a
/// subscriber that disconnects stops all of its own at once: the
/// endpoint's counts and the servers' subscriptions go back to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_unsubscribe_and_disconnect_stop_the_observers() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut admin = Raw::connect(e.port).await;
    let mut sub = Raw::connect(e.port).await;
    let refused = sub.call(&["SUBSCRIBE", "news"]).await;
    assert!(refused.starts_with("-ERR redlock serve serves the channels __redislock@0__:KEY only"), "{refused:?}");
    let other_db = sub.call(&["SUBSCRIBE", "__redislock@1__:job"]).await;
    assert!(other_db.starts_with("-ERR redlock serve has database 0 only"), "{other_db:?}");
    let pattern = sub.call(&["PSUBSCRIBE", "__redislock@0__:*"]).await;
    assert!(pattern.starts_with("-ERR PSUBSCRIBE is not served"), "{pattern:?}");
    assert_eq!(sub.call(&["LOCK.INFO", "job"]).await, "$-1\r\n", "refusals leave the connection out of subscribe mode");

    sub.send(&["SUBSCRIBE", JOB, "__redislock@0__:other"]).await;
    assert_eq!(sub.reply().await, confirmed("subscribe", JOB, 1));
    assert_eq!(sub.reply().await, confirmed("subscribe", "__redislock@0__:other", 2));
    assert_eq!(info_field(&mut admin, "subscribers").await, 1);
    assert_eq!(info_field(&mut admin, "observers").await, 2);
    eventually(Duration::from_secs(10), "both observers subscribed on every server", || async {
        server_subscriptions(&c, JOB).await == 5 && server_subscriptions(&c, "__redislock@0__:other").await == 5
    })
    .await;

    assert_eq!(sub.call(&["UNSUBSCRIBE", "__redislock@0__:other"]).await, confirmed("unsubscribe", "__redislock@0__:other", 1));
    let stopped = Instant::now();
    eventually(Duration::from_secs(5), "the unsubscribed channel's observer stopped", || async {
        server_subscriptions(&c, "__redislock@0__:other").await == 0
    })
    .await;
    assert_eq!(info_field(&mut admin, "observers").await, 1);
    assert_eq!(server_subscriptions(&c, JOB).await, 5, "the other channel still followed");

    drop(sub);
    eventually(Duration::from_secs(5), "the leaver's observer stopped", || async {
        let mut admin = Raw::connect(e.port).await;
        info_field(&mut admin, "observers").await == 0 && info_field(&mut admin, "subscribers").await == 0
    })
    .await;
    eventually(Duration::from_secs(5), "the servers' subscriptions closed", || async { server_subscriptions(&c, JOB).await == 0 }).await;
    assert!(stopped.elapsed() < Duration::from_secs(8), "at once, not at some timeout");
}
