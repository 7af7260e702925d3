//! `redlock serve` end to end: the endpoint started as users start it, in
//! front of real module servers, spoken to over the Redis protocol by the
//! `redis` crate, by `redis-cli` when installed, and byte by byte.

use crate::common;

use std::time::{Duration, Instant};

use common::history::History;
use common::{eventually, Cluster};
use redis::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::serve_endpoint::{endpoint, endpoint_with, token_of, Raw, REPLY};

/// The client's owner of an owner the servers list: the endpoint holds
/// each acquisition under the client's owner, `:`, 16 hex digits.
fn client_owner(stored: &str) -> &str {
    match stored.rsplit_once(':') {
        Some((owner, random)) if random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit()) => owner,
        _ => panic!("{stored:?} is no owner the endpoint names"),
    }
}

/// Servers whose LOCK.INFO of `key` counts `n` waiters or more.
async fn waiting_on(c: &Cluster, key: &str, n: i64) -> usize {
    c.infos(key).await.iter().filter(|i| i.as_ref().is_some_and(|i| i.waiters >= n)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_takes_releases_and_extends_through_the_quorum() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;

    // The redis crate's handshake (HELLO 3, CLIENT SETINFO) is accepted.
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", e.port)).expect("client");
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(REPLY));
    let mut con = client.get_multiplexed_async_connection_with_config(&config).await.expect("connect with HELLO 3");
    let _: () = redis::cmd("CLIENT").arg("SETNAME").arg("worker-1").query_async(&mut con).await.expect("setname");
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query_async(&mut con).await.expect("getname");
    assert_eq!(name, "worker-1");
    let count: i64 = redis::cmd("COMMAND").arg("COUNT").query_async(&mut con).await.expect("command count");
    assert!(count >= 4, "COMMAND COUNT {count}");

    let token: i64 = redis::cmd("LOCK.ACQUIRE").arg("orders").arg("a").arg(10_000).query_async(&mut con).await.expect("acquire");
    let infos = c.infos("orders").await;
    for (i, info) in infos.iter().enumerate() {
        let info = info.as_ref().unwrap_or_else(|| panic!("server {i} does not hold the lock"));
        assert_eq!((client_owner(&info.owner), info.token), ("a", Some(token)), "server {i}");
    }
    let refused: Value = redis::cmd("LOCK.ACQUIRE").arg("orders").arg("b").arg(10_000).query_async(&mut con).await.expect("acquire b");
    assert_eq!(refused, Value::Nil, "a second owner is refused while a holds");
    let again: i64 = redis::cmd("LOCK.ACQUIRE").arg("orders").arg("a").arg(10_000).query_async(&mut con).await.expect("re-grant");
    assert_eq!(again, token, "the same owner's re-grant keeps its token");

    // The endpoint's LOCK.INFO, RESP3 map and RESP2 flat array alike.
    let info = common::parse_info(redis::cmd("LOCK.INFO").arg("orders").query_async(&mut con).await.expect("info")).expect("held");
    assert_eq!((info.owner.as_str(), info.token), ("a", Some(token)));
    let mut raw = Raw::connect(e.port).await;
    let flat = raw.call(&["LOCK.INFO", "orders"]).await;
    assert!(flat.starts_with("*18\r\n$5\r\nowner\r\n$1\r\na\r\n$5\r\ntoken\r\n"), "{flat:?}");

    let pttl_before = c.servers[0].pttl("orders").await;
    assert_eq!(raw.call(&["LOCK.EXTEND", "orders", "b", "60000"]).await, ":0\r\n", "not b's to extend");
    assert_eq!(raw.call(&["LOCK.EXTEND", "orders", "a", "60000"]).await, ":1\r\n");
    assert!(c.servers[0].pttl("orders").await > pttl_before.max(10_000), "extended on the servers");
    assert_eq!(raw.call(&["LOCK.RELEASE", "orders", "b"]).await, ":0\r\n", "not b's to release");
    assert_eq!(raw.call(&["LOCK.RELEASE", "orders", "a"]).await, ":1\r\n");
    assert_eq!(c.infos("orders").await, vec![None; 5], "released on every server");
    assert_eq!(raw.call(&["LOCK.INFO", "orders"]).await, "$-1\r\n");
    let next = token_of(&raw.call(&["lock.acquire", "orders", "b", "5000", "shared"]).await);
    assert!(next > token, "the next holder's token {next} is above {token}");

    // Errors name what is wrong.
    assert_eq!(
        raw.call(&["GET", "x"]).await,
        "-ERR unknown command 'GET': this endpoint (redlock serve) serves the LOCK.* commands only\r\n"
    );
    assert_eq!(raw.call(&["LOCK.ACQUIRE", "k", "o", "100", "LIMIT", "3"]).await, "-ERR syntax error: LIMIT needs SHARED\r\n");
    assert_eq!(raw.call(&["LOCK.ACQUIRE", "k", "o", "0"]).await, "-ERR ttl must be a positive integer (milliseconds)\r\n");
    assert_eq!(raw.call(&["LOCK.ACQUIRE", "k", "o", "10", "NX"]).await, "-ERR unknown option 'NX'\r\n");
    assert_eq!(raw.call(&["LOCK.RELEASE", "k"]).await, "-ERR wrong number of arguments for 'lock.release' command\r\n");
    assert!(raw.call(&["SELECT", "1"]).await.starts_with("-ERR DB index is out of range"));
    assert_eq!(raw.call(&["SELECT", "0"]).await, "+OK\r\n");
    let info = raw.call(&["INFO"]).await;
    assert!(info.contains("# redlock\r\nservers:5\r\nservers_reachable:5\r\nquorum:3\r\n"), "{info}");

    if let Ok(out) = std::process::Command::new("redis-cli").args(["-p", &e.port.to_string(), "LOCK.ACQUIRE", "cli", "o", "5000"]).output()
    {
        let printed = String::from_utf8_lossy(&out.stdout);
        let token: i64 =
            printed.trim().trim_start_matches("(integer) ").parse().unwrap_or_else(|_| panic!("redis-cli printed {printed:?}"));
        assert_eq!(c.servers[0].info("cli").await.and_then(|i| i.token), Some(token));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_wait_blocks_its_own_client_only_and_a_leaver_leaves_the_line() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut holder = Raw::connect(e.port).await;
    let held = token_of(&holder.call(&["LOCK.ACQUIRE", "job", "holder", "30000"]).await);

    // A waiter that goes away gives its wait up on the servers at once
    // (not when its 20 s WAIT would end).
    let mut leaver = Raw::connect(e.port).await;
    leaver.send(&["LOCK.ACQUIRE", "job", "leaver", "30000", "WAIT", "20000"]).await;
    eventually(REPLY, "the leaver waiting on a quorum", || async { waiting_on(&c, "job", 1).await >= 3 }).await;
    let mut other = Raw::connect(e.port).await;
    let asked = Instant::now();
    assert_eq!(other.call(&["PING"]).await, "+PONG\r\n", "another client is served while one waits");
    assert!(asked.elapsed() < Duration::from_secs(5), "PING took {:?}", asked.elapsed());
    drop(leaver);
    eventually(Duration::from_secs(5), "the leaver's waits to end on every server", || async { waiting_on(&c, "job", 1).await == 0 }).await;

    // A waiter is granted when the holder releases.
    let mut waiter = Raw::connect(e.port).await;
    waiter.send(&["LOCK.ACQUIRE", "job", "waiter", "30000", "WAIT", "20000"]).await;
    eventually(REPLY, "the waiter waiting on a quorum", || async { waiting_on(&c, "job", 1).await >= 3 }).await;
    assert_eq!(holder.call(&["LOCK.RELEASE", "job", "holder"]).await, ":1\r\n");
    let granted = token_of(&waiter.reply().await);
    assert!(granted > held, "the waiter's token {granted} is above the holder's {held}");
    let infos = c.infos("job").await;
    let owners = infos.iter().flatten().filter(|i| client_owner(&i.owner) == "waiter" && i.token == Some(granted)).count();
    assert!(owners >= 3, "a quorum holds it for the waiter: {infos:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_clients_contending_never_hold_together() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let history = History::new();
    let mut tasks = Vec::new();
    for client in 0..3 {
        let (history, port) = (history.clone(), e.port);
        tasks.push(tokio::spawn(async move {
            let mut raw = Raw::connect(port).await;
            let owner = format!("client-{client}");
            for _ in 0..15 {
                let token = token_of(&raw.call(&["LOCK.ACQUIRE", "counter", &owner, "10000", "WAIT", "10000"]).await);
                let granted = Instant::now();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let released = Instant::now();
                assert_eq!(raw.call(&["LOCK.RELEASE", "counter", &owner]).await, ":1\r\n");
                history.record(owner.clone(), token, granted, released);
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(25), t).await.expect("a client stuck").expect("a client failed");
    }
    assert_eq!(history.holds().len(), 45);
    history.check().assert_exclusive("three clients through redlock serve");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_requires_its_password_and_cuts_off_only_a_broken_client() {
    let c = Cluster::start(3);
    let e = endpoint(&c, &[("REDLOCK_SERVE_PASSWORD", "s3cret")]).await;
    let mut raw = Raw::connect(e.port).await;
    assert_eq!(raw.call(&["PING"]).await, "-NOAUTH Authentication required.\r\n");
    assert_eq!(raw.call(&["LOCK.ACQUIRE", "k", "o", "1000"]).await, "-NOAUTH Authentication required.\r\n");
    assert_eq!(c.infos("k").await, vec![None; 3], "nothing taken before AUTH");
    assert_eq!(raw.call(&["AUTH", "wrong"]).await, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    assert_eq!(raw.call(&["AUTH", "someone", "s3cret"]).await, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    assert_eq!(raw.call(&["AUTH", "s3cret"]).await, "+OK\r\n");
    // Pipelined requests, inline ones among them, answered in order.
    raw.send_bytes(b"*2\r\n$4\r\nECHO\r\n$3\r\none\r\nPING two\r\n*1\r\n$4\r\nPING\r\n").await;
    assert_eq!(raw.reply().await, "$3\r\none\r\n");
    assert_eq!(raw.reply().await, "$3\r\ntwo\r\n");
    assert_eq!(raw.reply().await, "+PONG\r\n");

    let mut resp3 = Raw::connect(e.port).await;
    let hello = resp3.call(&["HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "n1"]).await;
    assert!(hello.starts_with("%7\r\n$6\r\nserver\r\n"), "{hello:?}");
    assert!(hello.contains("$5\r\nproto\r\n:3\r\n"), "{hello:?}");
    assert_eq!(resp3.call(&["LOCK.INFO", "k"]).await, "_\r\n", "RESP3 nil after HELLO 3");

    // An oversized bulk string, then garbage: each answered with an error
    // and its connection closed; the other clients keep being served.
    let mut big = Raw::connect(e.port).await;
    big.send(&["AUTH", "s3cret"]).await;
    big.send_bytes(b"*2\r\n$4\r\nECHO\r\n$2000000\r\n").await;
    assert_eq!(big.reply().await, "+OK\r\n");
    assert!(big.reply().await.starts_with("-ERR Protocol error: invalid bulk length"));
    assert!(big.closed().await, "the oversized request's connection is closed");
    let mut garbage = Raw::connect(e.port).await;
    garbage.send_bytes(b"*1\r\n+nonsense\r\n").await;
    assert!(garbage.reply().await.starts_with("-ERR Protocol error"));
    assert!(garbage.closed().await, "the broken client's connection is closed");
    assert_eq!(raw.call(&["PING"]).await, "+PONG\r\n");
    assert!(token_of(&resp3.call(&["LOCK.ACQUIRE", "k", "o", "1000"]).await) > 0);
    // RESET logs out and goes back to RESP2; QUIT answers, then closes.
    assert_eq!(resp3.call(&["RESET"]).await, "+RESET\r\n");
    assert_eq!(resp3.call(&["LOCK.INFO", "k"]).await, "-NOAUTH Authentication required.\r\n");
    assert_eq!(resp3.call(&["QUIT"]).await, "+OK\r\n");
    assert!(resp3.closed().await, "QUIT closes the connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_listens_on_a_unix_socket_with_its_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("redlock.sock");
    let socket = path.to_str().expect("a UTF-8 path");
    let _e = endpoint_with(&c, &[], &["--unixsocket", socket, "--unixsocketperm", "700"]).await;
    let mode = std::fs::metadata(&path).expect("the socket exists").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the socket's permissions: {mode:o}");
    let mut stream = tokio::net::UnixStream::connect(&path).await.expect("connect to the socket");
    stream.write_all(b"*4\r\n$12\r\nLOCK.ACQUIRE\r\n$1\r\nu\r\n$1\r\no\r\n$4\r\n5000\r\n").await.expect("write");
    let mut line = String::new();
    tokio::time::timeout(REPLY, BufReader::new(&mut stream).read_line(&mut line)).await.expect("a reply in time").expect("read");
    let token = token_of(&line);
    assert!(c.infos("u").await.iter().all(|i| i.as_ref().and_then(|i| i.token) == Some(token)), "held on every server with {token}");
}

/// A holder that asks for its lock again (a refresh) while most servers
/// are frozen gets nil, and keeps its hold: the failed round undoes
/// nothing it held before. (Granted under the client's own owner, a failed
/// round's undo released the owner's earlier hold on the servers that
/// answered, and the release sent again to the frozen ones released it
/// there once they woke: another client was then granted while the
/// holder still held.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_a_holder_asking_again_in_a_failed_round_keeps_its_hold() {
    let mut c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut holder = Raw::connect(e.port).await;
    let token = token_of(&holder.call(&["LOCK.ACQUIRE", "ledger", "x", "30000"]).await);
    let held = c.infos("ledger").await;
    assert!(held.iter().all(|i| i.as_ref().and_then(|i| i.token) == Some(token)), "held everywhere with {token}: {held:?}");

    for s in 2..5 {
        c.servers[s].freeze();
    }
    assert_eq!(holder.call(&["LOCK.ACQUIRE", "ledger", "x", "30000"]).await, "$-1\r\n", "no quorum answers the refresh");
    for (s, info) in held.iter().enumerate().take(2) {
        let now = c.servers[s].info("ledger").await.map(|i| (i.owner, i.token));
        assert_eq!(now, info.clone().map(|i| (i.owner, i.token)), "server {s} still holds the lock as granted");
    }
    for s in 2..5 {
        c.servers[s].thaw();
    }

    // Mutual exclusion stands once every server answers again; the
    // holder's refresh then renews its hold and keeps its token.
    let mut other = Raw::connect(e.port).await;
    assert_eq!(other.call(&["LOCK.ACQUIRE", "ledger", "y", "30000"]).await, "$-1\r\n", "y is refused while x holds");
    let infos = c.infos("ledger").await;
    assert_eq!(infos.iter().filter(|i| i.is_some()).count(), 5, "x's hold stands on every server: {infos:?}");
    // Its connections to the woken servers may be backing off a moment.
    let deadline = Instant::now() + REPLY;
    let refreshed = loop {
        let reply = holder.call(&["LOCK.ACQUIRE", "ledger", "x", "30000"]).await;
        if reply.starts_with(':') || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(token_of(&refreshed), token, "the refresh keeps the token");
}

/// A client's hold is found on the servers by its owner, through any
/// endpoint: asked again there it is refreshed with its token (in its own
/// mode only), and released there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_finds_a_clients_hold_through_another_endpoint() {
    let c = Cluster::start(3);
    let (first, second) = (endpoint(&c, &[]).await, endpoint(&c, &[]).await);
    let mut one = Raw::connect(first.port).await;
    let mut two = Raw::connect(second.port).await;
    let token = token_of(&one.call(&["LOCK.ACQUIRE", "report", "r", "30000", "SHARED"]).await);
    assert_eq!(
        two.call(&["LOCK.ACQUIRE", "report", "r", "30000"]).await,
        "-ERR r holds report shared: release it before asking for it exclusive\r\n"
    );
    assert_eq!(token_of(&two.call(&["LOCK.ACQUIRE", "report", "r", "30000", "SHARED"]).await), token, "refreshed with its token");
    let info = two.call(&["LOCK.INFO", "report"]).await;
    assert!(info.contains("$7\r\nholders\r\n*1\r\n*6\r\n$1\r\nr\r\n"), "the one holder shown as the client names it: {info:?}");
    assert_eq!(two.call(&["LOCK.RELEASE", "report", "r"]).await, ":1\r\n");
    assert_eq!(c.infos("report").await, vec![None; 3], "released on every server");
    assert_eq!(one.call(&["LOCK.RELEASE", "report", "r"]).await, ":0\r\n", "nothing left to release");
}

/// An endpoint releases and extends a hold it granted without looking it
/// up first, and asks for an exclusive hold without `WAIT` at once: what
/// it remembers is a shortcut, never the answer. A hold granted through
/// one endpoint is refreshed (same token) and released through another;
/// the first endpoint, which still remembers it, then neither releases
/// nor extends the next holder's hold, and answers as a module server
/// would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_remembers_its_grants_but_answers_what_the_servers_hold() {
    let c = Cluster::start(3);
    // The second on a runtime of two threads (the first on the default
    // one): requests of one endpoint served side by side too.
    let (first, second) = (endpoint(&c, &[]).await, endpoint_with(&c, &[], &["--threads", "2"]).await);
    let mut one = Raw::connect(first.port).await;
    let mut two = Raw::connect(second.port).await;
    // Granted and extended through the first, which remembers it.
    let token = token_of(&one.call(&["LOCK.ACQUIRE", "job", "a", "30000"]).await);
    assert_eq!(one.call(&["LOCK.EXTEND", "job", "a", "40000"]).await, ":1\r\n");
    // Asked again through the second, which does not: refused where the
    // hold stands, found, refreshed with its token.
    assert_eq!(token_of(&two.call(&["LOCK.ACQUIRE", "job", "a", "30000"]).await), token, "a refresh, not a second hold");
    assert_eq!(two.call(&["LOCK.ACQUIRE", "job", "b", "30000"]).await, "$-1\r\n", "held by a");
    assert_eq!(two.call(&["LOCK.RELEASE", "job", "a"]).await, ":1\r\n");
    let next = token_of(&two.call(&["LOCK.ACQUIRE", "job", "b", "30000"]).await);
    assert!(next > token);
    // The first still remembers a's hold: its release and extension find
    // nothing of a's, and b's hold stands.
    assert_eq!(one.call(&["LOCK.EXTEND", "job", "a", "30000"]).await, ":0\r\n");
    assert_eq!(one.call(&["LOCK.RELEASE", "job", "a"]).await, ":0\r\n");
    let holders: Vec<String> = c.infos("job").await.iter().flatten().map(|i| i.owner.clone()).collect();
    assert_eq!(holders.len(), 3, "b holds on every server: {holders:?}");
    assert!(holders.iter().all(|o| client_owner(o) == "b"), "{holders:?}");
    // And a asks anew through the first: refused while b holds.
    assert_eq!(one.call(&["LOCK.ACQUIRE", "job", "a", "30000"]).await, "$-1\r\n");
    assert_eq!(two.call(&["LOCK.RELEASE", "job", "b"]).await, ":1\r\n");
    assert_eq!(c.infos("job").await, vec![None; 3], "released on every server");
}

/// `FENCE` with `WAIT`: a waiter asks for at least the token it names,
/// and is granted one at least that high when its turn comes; a `FENCE`
/// no server takes (beyond `redislock.max-token-lead`) is an answer at
/// once, not a wait to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_a_waiter_gets_at_least_the_token_it_fences() {
    let c = Cluster::start(3);
    let e = endpoint(&c, &[]).await;
    let mut holder = Raw::connect(e.port).await;
    let mut waiter = Raw::connect(e.port).await;
    let first = token_of(&holder.call(&["LOCK.ACQUIRE", "fenced", "a", "30000"]).await);
    let least = first + 1_000;
    waiter.send(&["LOCK.ACQUIRE", "fenced", "b", "30000", "FENCE", &least.to_string(), "WAIT", "20000"]).await;
    eventually(Duration::from_secs(10), "b waiting on the servers", || async { waiting_on(&c, "fenced", 1).await >= 2 }).await;
    assert_eq!(holder.call(&["LOCK.RELEASE", "fenced", "a"]).await, ":1\r\n");
    let granted = token_of(&waiter.reply().await);
    assert!(granted >= least, "granted token {granted}, asked at least {least}");
    assert_eq!(waiter.call(&["LOCK.RELEASE", "fenced", "b"]).await, ":1\r\n");
    let started = Instant::now();
    let beyond = (granted + 1_000_000_000_000_000).to_string();
    let refused = waiter.call(&["LOCK.ACQUIRE", "fenced", "b", "30000", "FENCE", &beyond, "WAIT", "20000"]).await;
    assert!(refused.starts_with('-') || refused == "$-1\r\n", "a FENCE beyond every server's bound: {refused:?}");
    assert!(started.elapsed() < Duration::from_secs(15), "answered before the wait's end, in {:?}", started.elapsed());
}

/// Clients asking without `WAIT` (the endpoint asks for an exclusive
/// hold at once and remembers what it granted) through two endpoints,
/// each releasing every other hold through the endpoint it did not take
/// it through (so the taker's record goes stale): every hold recorded,
/// none overlapping, one endpoint on one thread and one on two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_clients_asking_at_once_through_two_endpoints_never_hold_together() {
    let c = Cluster::start(5);
    // The second on a runtime of two threads (the first on the default
    // one): requests of one endpoint served side by side too.
    let (first, second) = (endpoint(&c, &[]).await, endpoint_with(&c, &[], &["--threads", "2"]).await);
    let history = History::new();
    let mut tasks = Vec::new();
    for client in 0..4 {
        let (history, ports) = (history.clone(), [first.port, second.port]);
        tasks.push(tokio::spawn(async move {
            let mut via = [Raw::connect(ports[0]).await, Raw::connect(ports[1]).await];
            let owner = format!("client-{client}");
            let mut held = 0;
            while held < 8 {
                let taker = (client + held) % 2;
                let reply = via[taker].call(&["LOCK.ACQUIRE", "counter", &owner, "10000"]).await;
                if reply == "$-1\r\n" {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let token = token_of(&reply);
                let granted = Instant::now();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let released = Instant::now();
                let releaser = if held % 2 == 0 { taker } else { 1 - taker };
                assert_eq!(via[releaser].call(&["LOCK.RELEASE", "counter", &owner]).await, ":1\r\n", "{owner} releases");
                history.record(owner.clone(), token, granted, released);
                held += 1;
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t).await.expect("a client stuck").expect("a client failed");
    }
    assert_eq!(history.holds().len(), 32);
    history.check().assert_exclusive("four clients asking at once through two endpoints");
}
