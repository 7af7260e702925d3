//! A Redis Cluster as one of the quorum's instances (`redis+cluster://`
//! seed URL): alone with quorum 1, beside standalone servers as one vote,
//! and through a reshard of a held lock's slot.
// Each test holds `one_cluster_at_a_time` across its awaits on purpose.
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::history::History;
use common::*;
use redis::Value;
use redlock::{Outcome, Redlock};

/// Three cluster nodes and their buses per test: one cluster at a time.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// Held for a whole test, across its awaits on purpose: it keeps the other
/// tests of this binary (on their own runtimes and threads) from starting
/// a cluster meanwhile.
fn one_cluster_at_a_time() -> MutexGuard<'static, ()> {
    ONE_CLUSTER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Three module-equipped masters joined into a cluster covering all slots.
struct RedisCluster {
    nodes: Vec<Server>,
}

impl RedisCluster {
    async fn start() -> RedisCluster {
        Self::start_with(Opts::default(), &[]).await
    }

    /// Over TLS only (the cluster bus too), with the certificates of `certs`.
    async fn start_tls(certs: &common::tls::Certs) -> RedisCluster {
        let path = |name: &str| certs.path(name).display().to_string();
        let cli = [
            "--tls".to_string(),
            "--cacert".into(),
            path("ca.crt"),
            "--cert".into(),
            path("client.crt"),
            "--key".into(),
            path("client.key"),
        ];
        Self::start_with(certs.server("server"), &cli).await
    }

    /// Three nodes as `opts` say; `cli`: redis-cli's options to reach them.
    /// `redis-cli --cluster create` waits for ever for a node that never
    /// joins (seen once: a node that learned of no other): it is given
    /// `CREATE_WITHIN`, then the nodes are stopped and three new ones, on
    /// other ports, tried, up to `CREATE_ATTEMPTS` times.
    async fn start_with(opts: Opts, cli: &[String]) -> RedisCluster {
        const CREATE_WITHIN: Duration = Duration::from_secs(60);
        const CREATE_ATTEMPTS: usize = 3;
        let mut failures = Vec::new();
        let nodes = loop {
            let nodes: Vec<Server> = (0..3).map(|_| Server::start_opts(Opts { cluster_node: true, ..opts.clone() })).collect();
            let create = tokio::process::Command::new("redis-cli")
                .args(cli)
                .args(["--cluster", "create"])
                .args(nodes.iter().map(Server::addr))
                .args(["--cluster-replicas", "0", "--cluster-yes"])
                .kill_on_drop(true)
                .output();
            match tokio::time::timeout(CREATE_WITHIN, create).await {
                Ok(Ok(out)) if out.status.success() => break nodes,
                Ok(Ok(out)) => failures.push(format!("failed:\n{}", String::from_utf8_lossy(&out.stdout))),
                Ok(Err(e)) => panic!("run redis-cli --cluster create (package redis-tools): {e}"),
                Err(_) => failures.push(format!("no cluster within {CREATE_WITHIN:?}")),
            }
            assert!(failures.len() < CREATE_ATTEMPTS, "redis-cli --cluster create, {CREATE_ATTEMPTS} times: {failures:?}");
        };
        let cluster = RedisCluster { nodes };
        for node in &cluster.nodes {
            eventually(Duration::from_secs(30), "cluster_state:ok on every node", || async {
                matches!(node.cmd(redis::cmd("CLUSTER").arg("INFO")).await, Ok(Value::BulkString(b)) if String::from_utf8_lossy(&b).contains("cluster_state:ok"))
            })
            .await;
        }
        cluster
    }

    /// Two of the three nodes as seeds: the client finds the third itself.
    fn url(&self) -> String {
        let scheme = if self.nodes[0].opts.tls.is_some() { "rediss+cluster" } else { "redis+cluster" };
        format!("{scheme}://{},{}", self.nodes[0].addr(), self.nodes[1].addr())
    }

    /// The node holding `key` now.
    async fn node_of(&self, key: &str) -> Option<usize> {
        for (i, n) in self.nodes.iter().enumerate() {
            if n.cmd(redis::cmd("EXISTS").arg(key)).await == Ok(Value::Int(1)) {
                return Some(i);
            }
        }
        None
    }
}

async fn node_id(node: &Server) -> String {
    match node.ok(redis::cmd("CLUSTER").arg("MYID")).await {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("CLUSTER MYID: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_alone_is_one_instance_and_keeps_its_holders_apart() {
    let _serial = one_cluster_at_a_time();
    let cluster = RedisCluster::start().await;
    let handle = Redlock::new(&[cluster.url()], relaxed()).expect("a cluster URL is one instance");
    assert_eq!((handle.servers().len(), handle.quorum()), (1, 1));

    // Eight separate clients on four resources spread over the nodes, for
    // two seconds: each resource's holds never overlap, tokens increase.
    let resources = ["order:1", "order:2", "invoice:7", "batch:nightly"];
    let histories: Vec<History> = resources.iter().map(|_| History::new()).collect();
    let stop = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for client in 0..8 {
        let url = cluster.url();
        let histories = histories.clone();
        tasks.push(tokio::spawn(async move {
            let lock = Redlock::new(&[url], relaxed()).expect("handle");
            let mut i = client;
            while Instant::now() < stop {
                i += 1;
                let r = i % resources.len();
                if let Ok(held) = lock.try_lock(resources[r], Duration::from_secs(2)).await {
                    let granted = Instant::now();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let released = Instant::now();
                    histories[r].record(format!("client-{client}"), held.token.expect("module token"), granted, released);
                    lock.release(&held).await.expect("release");
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let mut total = 0;
    for (r, history) in resources.iter().zip(&histories) {
        let verdict = history.check();
        eprintln!("cluster as the only instance, {r}: {} grants, {} overlaps", verdict.grants, verdict.overlaps.len());
        verdict.assert_exclusive(r);
        total += verdict.grants;
    }
    assert!(total >= 40, "{total} grants in 2 s is too few to show anything");

    // The resources really live on different masters.
    let mut nodes = std::collections::BTreeSet::new();
    for r in resources {
        let held = handle.try_lock(r, Duration::from_secs(10)).await.expect("free now");
        nodes.insert(cluster.node_of(r).await.expect("the lock is on some node"));
        handle.release(&held).await.expect("release");
    }
    assert!(nodes.len() >= 2, "four resources on {} node(s)", nodes.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_counts_as_one_vote_beside_standalone_servers() {
    let _serial = one_cluster_at_a_time();
    let cluster = RedisCluster::start().await;
    let mut standalone = Cluster::start(2);
    let mut urls = vec![cluster.url()];
    urls.extend(standalone.urls());
    let handle = Redlock::new(&urls, relaxed()).expect("handle");
    assert_eq!(handle.quorum(), 2);

    let held = handle.try_lock("report", Duration::from_secs(10)).await.expect("granted everywhere");
    assert!(held.instances.iter().all(|i| matches!(i.outcome, Outcome::Granted { .. })), "{:?}", held.instances);
    assert!(held.instances[0].server.starts_with("cluster:"), "named as a cluster: {}", held.instances[0].server);
    handle.release(&held).await.expect("release");

    // With both standalone servers gone, the cluster alone is one vote of
    // three: no quorum, however many nodes it has.
    for s in &mut standalone.servers {
        s.kill9();
    }
    let refused = handle.try_lock("report", Duration::from_secs(10)).await;
    assert!(refused.is_err(), "one vote of three must not be a quorum: {refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_follows_its_slot_to_another_node() {
    let _serial = one_cluster_at_a_time();
    let cluster = RedisCluster::start().await;
    let handle = Redlock::new(&[cluster.url()], relaxed()).expect("handle");
    let resource = "moving";
    let held = handle.try_lock(resource, Duration::from_secs(30)).await.expect("granted");
    let src = cluster.node_of(resource).await.expect("on a node");
    let dst = (src + 1) % cluster.nodes.len();
    let slot = match cluster.nodes[src].ok(redis::cmd("CLUSTER").arg("KEYSLOT").arg(resource)).await {
        Value::Int(s) => s,
        other => panic!("CLUSTER KEYSLOT: {other:?}"),
    };
    let (src_id, dst_id) = (node_id(&cluster.nodes[src]).await, node_id(&cluster.nodes[dst]).await);
    cluster.nodes[dst].ok(redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("IMPORTING").arg(&src_id)).await;
    cluster.nodes[src].ok(redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("MIGRATING").arg(&dst_id)).await;
    let migrate =
        redis::cmd("MIGRATE").arg("127.0.0.1").arg(cluster.nodes[dst].port).arg("").arg(0).arg(5000).arg("KEYS").arg(resource).clone();
    assert_eq!(cluster.nodes[src].ok(&migrate).await, Value::Okay);
    for node in &cluster.nodes {
        node.ok(redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("NODE").arg(&dst_id)).await;
    }
    assert_eq!(cluster.node_of(resource).await, Some(dst));

    // The handle's slot map is stale: MOVED takes it to the new node.
    let other = Redlock::new(&[cluster.url()], relaxed()).expect("handle");
    assert!(other.try_lock(resource, Duration::from_secs(1)).await.is_err(), "still held after the move");
    let extended = handle.extend(&held, Duration::from_secs(30)).await.expect("extended on the new node");
    assert_eq!(extended.token, held.token);
    let released = handle.release(&extended).await.expect("released on the new node");
    assert_eq!(released.released, 1);
    let next = other.try_lock(resource, Duration::from_secs(1)).await.expect("free after the release");
    assert!(next.token > held.token, "{:?} after {:?}", next.token, held.token);
}

/// `top` on a cluster instance asks every master: contended locks on
/// different nodes all come back, as one instance's list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_asks_every_master_of_a_cluster_instance() {
    let _serial = one_cluster_at_a_time();
    let cluster = RedisCluster::start().await;
    let handle = Redlock::new(&[cluster.url()], relaxed()).expect("a cluster URL is one instance");
    let resources = ["order:1", "order:2", "invoice:7", "batch:nightly"];
    let mut held = Vec::new();
    let mut nodes = std::collections::BTreeSet::new();
    let mut waiters = Vec::new();
    for r in resources {
        held.push(handle.try_lock(r, Duration::from_secs(30)).await.expect("free"));
        let node = cluster.node_of(r).await.expect("the lock is on some node");
        nodes.insert(node);
        // One waiter on the node that has it.
        let mut conn = cluster.nodes[node].conn().await;
        waiters.push(tokio::spawn(async move {
            redis::cmd("LOCK.ACQUIRE").arg(r).arg("waiter").arg(1000).arg("WAIT").arg(20_000).query_async::<Value>(&mut conn).await
        }));
        eventually(Duration::from_secs(10), "the waiter queued", || async {
            cluster.nodes[node].info(r).await.is_some_and(|i| i.waiters == 1)
        })
        .await;
    }
    assert!(nodes.len() >= 2, "four resources on {} node(s)", nodes.len());
    let tops = handle.top(10).await;
    assert_eq!(tops.len(), 1, "one instance");
    assert!(tops[0].reachable && tops[0].error.is_none(), "{:?}", tops[0]);
    let mut keys: Vec<&str> = tops[0].locks.iter().map(|l| l.key.as_str()).collect();
    keys.sort();
    let mut expected = resources.to_vec();
    expected.sort();
    assert_eq!(keys, expected, "every master's contended locks: {:?}", tops[0].locks);
    assert!(tops[0].locks.iter().all(|l| l.waiters == 1 && l.holders == 1), "{:?}", tops[0].locks);
    for lock in &held {
        handle.release(lock).await.expect("release");
    }
    for w in waiters {
        let _ = w.await;
    }
}

/// A cluster over TLS (`rediss+cluster://`, the bus too), nodes asking for
/// client certificates by a private CA: one instance whose every node is
/// reached over TLS (the third found by the cluster client itself), and
/// a wrong CA named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_is_one_instance() {
    let _serial = one_cluster_at_a_time();
    let certs = common::tls::Certs::make();
    let cluster = RedisCluster::start_tls(&certs).await;
    assert!(cluster.url().starts_with("rediss+cluster://"), "{}", cluster.url());
    let handle = Redlock::new(&[cluster.url()], certs.settings()).expect("a TLS cluster URL is one instance");
    let mut nodes = std::collections::BTreeSet::new();
    for r in ["order:1", "order:2", "invoice:7", "batch:nightly"] {
        let held = handle.try_lock(r, Duration::from_secs(10)).await.expect("granted over TLS");
        assert!(held.token.is_some());
        nodes.insert(cluster.node_of(r).await.expect("the lock is on some node"));
        handle.release(&held).await.expect("release");
        assert_eq!(cluster.node_of(r).await, None, "{r} released");
    }
    assert!(nodes.len() >= 2, "four resources on {} node(s): every node reached over TLS", nodes.len());

    let tls = redlock::TlsSettings { ca_cert: Some(redlock::Pem::File(certs.path("other-ca.crt"))), ..certs.tls() };
    let wrong = Redlock::new(&[cluster.url()], redlock::Settings { tls, retry_count: 0, ..relaxed() }).expect("client");
    let err = wrong.try_lock("order:1", Duration::from_secs(10)).await.expect_err("an unknown CA");
    assert!(err.to_string().contains("not signed by a CA this client trusts"), "{err}");
}

/// A set on a cluster instance is one request to one slot: members that
/// share a hash tag are taken whole (and wait in their lines, whose keys
/// share the tag too); members of several slots are refused with the
/// server's CROSSSLOT, as a request error, not as a lock held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_on_a_cluster_instance_needs_one_hash_tag() {
    let _serial = one_cluster_at_a_time();
    let cluster = RedisCluster::start().await;
    let handle = Redlock::new(&[cluster.url()], relaxed()).expect("a cluster URL is one instance");
    let ttl = Duration::from_secs(10);
    let tagged = redlock::Resources::of(&["{order:7}:lines", "{order:7}:stock"]).expect("set");
    let lock = handle.try_lock_all(&tagged, ttl).await.expect("one slot: granted whole");
    assert!(handle.try_lock("{order:7}:stock", ttl).await.is_err(), "a member is held");
    // A waiter for the set is granted the moment the holder releases.
    let waiter = handle.clone();
    let wait = tokio::spawn(async move {
        let tagged = redlock::Resources::of(&["{order:7}:lines", "{order:7}:stock"]).expect("set");
        waiter.lock_all_until(&tagged, ttl, Some(Instant::now() + Duration::from_secs(10))).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.release(&lock).await.expect("release");
    let second = wait.await.expect("task").expect("the waiting set is granted");
    assert!(second.token > lock.token, "a larger token for the next holder of the set");
    handle.release(&second).await.expect("release");

    let spread = redlock::Resources::of(&["order:1", "order:2", "order:3", "order:4"]).expect("set");
    match handle.try_lock_all(&spread, ttl).await {
        Err(e) => assert!(e.to_string().contains("CROSSSLOT"), "the server's reason is given: {e}"),
        Ok(l) => panic!("keys of several slots granted as one set: {l:?}"),
    }
}
