//! `Redlock::watch` against five module servers whose `redislock.notify`
//! names the watched keys: every kind of change delivered once a quorum
//! announced it, once, in order; subscriptions killed on two servers while
//! the lock changes; a contended lock's grants and ends alternating; and
//! the warning when the setting misses the watched key.

use crate::common;

use std::time::{Duration, Instant};

use common::{relaxed, Cluster};
use futures::StreamExt;
use redlock::{Change, ChangeKind, Redlock};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

const WAIT: Duration = Duration::from_secs(10);

async fn notify_all(c: &Cluster, pattern: &str) {
    for s in &c.servers {
        s.ok(redis::cmd("CONFIG").arg("SET").arg("redislock.notify").arg(pattern)).await;
    }
}

/// Watches `resource` in a task of its own, every change (or error) sent
/// on; returns once every server has the watcher's subscription.
async fn watching(c: &Cluster, rl: &Redlock, resource: &str, every: Duration) -> UnboundedReceiver<Result<Change, String>> {
    let (sender, receiver) = unbounded_channel();
    let mut stream = Box::pin(rl.watch_every(resource, every));
    tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            if sender.send(item.map_err(|e| e.to_string())).is_err() {
                return;
            }
        }
    });
    subscribed(c, resource, c.servers.len()).await;
    receiver
}

/// Waits until `n` servers have a subscriber on `resource`'s channel.
async fn subscribed(c: &Cluster, resource: &str, n: usize) {
    let channel = redlock::transport::changes_channel(0, resource);
    common::eventually(WAIT, "the watcher subscribed", || async {
        let mut count = 0;
        for s in &c.servers {
            let reply = s.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel)).await;
            if let Ok(redis::Value::Array(v)) = reply {
                if matches!(v.get(1), Some(redis::Value::Int(k)) if *k >= 1) {
                    count += 1;
                }
            }
        }
        count >= n
    })
    .await;
}

async fn next(changes: &mut UnboundedReceiver<Result<Change, String>>) -> Change {
    let item = tokio::time::timeout(WAIT, changes.recv()).await.expect("a change in time").expect("the watch goes on");
    item.expect("a change, not an error")
}

/// The next `n` changes as (kind, token, owner).
async fn take(changes: &mut UnboundedReceiver<Result<Change, String>>, n: usize) -> Vec<(ChangeKind, i64, String)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let c = next(changes).await;
        out.push((c.kind, c.token, c.owner));
    }
    out
}

fn token(lock: &redlock::Lock) -> i64 {
    lock.token.expect("module token")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_change_is_delivered_once_in_order() {
    let c = Cluster::start(5);
    notify_all(&c, "watched:*").await;
    let r = "watched:kinds";
    let rl = c.redlock(relaxed());
    let mut changes = watching(&c, &rl, r, Duration::from_millis(200)).await;

    // A grant, then its release.
    let a = rl.lock(r, Duration::from_secs(10)).await.expect("a");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Grant, token(&a), a.owner.clone())]);

    // A waiter is handed the lock when it is released.
    let waiting = c.redlock(relaxed());
    let waiter = {
        let waiting = waiting.clone();
        let r = r.to_string();
        tokio::spawn(async move { waiting.lock_until(&r, Duration::from_secs(10), Some(Instant::now() + WAIT)).await })
    };
    common::eventually(WAIT, "the waiter to wait on every server", || async {
        futures::future::join_all(c.servers.iter().map(|s| s.counter("wait_started"))).await.iter().all(|&n| n >= 1)
    })
    .await;
    rl.release(&a).await.expect("release a");
    let b = tokio::time::timeout(WAIT, waiter).await.expect("in time").expect("task").expect("b granted");
    assert_eq!(
        take(&mut changes, 2).await,
        vec![(ChangeKind::Release, token(&a), a.owner.clone()), (ChangeKind::Handoff, token(&b), b.owner.clone())]
    );
    waiting.release(&b).await.expect("release b");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Release, token(&b), b.owner.clone())]);

    // A lease that runs out.
    let e = rl.lock(r, Duration::from_millis(300)).await.expect("e");
    assert_eq!(
        take(&mut changes, 2).await,
        vec![(ChangeKind::Grant, token(&e), e.owner.clone()), (ChangeKind::Expire, token(&e), e.owner.clone())]
    );

    // A revocation.
    let v = rl.lock(r, Duration::from_secs(10)).await.expect("v");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Grant, token(&v), v.owner.clone())]);
    rl.revoke(r, None).await.expect("revoke");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Revoke, token(&v), v.owner.clone())]);

    // Two shared holders at once.
    let s1 = rl.try_lock_shared(r, Duration::from_secs(10)).await.expect("s1");
    let s2 = rl.try_lock_shared(r, Duration::from_secs(10)).await.expect("s2");
    assert_eq!(
        take(&mut changes, 2).await,
        vec![(ChangeKind::Grant, token(&s1), s1.owner.clone()), (ChangeKind::Grant, token(&s2), s2.owner.clone())]
    );
    rl.release(&s2).await.expect("release s2");
    rl.release(&s1).await.expect("release s1");
    // Ends of two holds decided together come in token order, otherwise
    // as each reached a quorum (s2's release reaches the last servers
    // while s1's runs): each once, in either order.
    let mut ends = take(&mut changes, 2).await;
    ends.sort_by_key(|(_, token, _)| *token);
    assert_eq!(ends, vec![(ChangeKind::Release, token(&s1), s1.owner.clone()), (ChangeKind::Release, token(&s2), s2.owner.clone())]);

    // A last grant: the next change, so nothing was delivered twice before it.
    let last = rl.lock(r, Duration::from_secs(10)).await.expect("last");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Grant, token(&last), last.owner.clone())]);
    assert!(changes.try_recv().is_err(), "nothing more");
}

/// Kills the watcher's subscription connections (`sub=1` in CLIENT LIST)
/// on `server`.
pub(crate) async fn kill_subscriptions(server: &common::Server) -> usize {
    let list = server.cmd(redis::cmd("CLIENT").arg("LIST")).await.expect("client list");
    let text = match list {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        other => panic!("CLIENT LIST {other:?}"),
    };
    let mut killed = 0;
    for line in text.lines().filter(|l| l.split(' ').any(|f| f.starts_with("sub=") && f != "sub=0")) {
        let Some(id) = line.split(' ').find_map(|f| f.strip_prefix("id=")) else { continue };
        server.ok(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id)).await;
        killed += 1;
    }
    killed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_while_two_subscriptions_are_lost_are_delivered_once() {
    let c = Cluster::start(5);
    notify_all(&c, "watched:*").await;
    let r = "watched:killed";
    let rl = c.redlock(relaxed());
    // Subscribed again only a second after a loss: the changes below are
    // made while two servers are not heard.
    let mut changes = watching(&c, &rl, r, Duration::from_secs(1)).await;

    let a = rl.lock(r, Duration::from_secs(10)).await.expect("a");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Grant, token(&a), a.owner.clone())]);

    for s in &c.servers[..2] {
        assert_eq!(kill_subscriptions(s).await, 1, "the watcher's subscription on {}", s.addr());
    }
    // Three servers still heard: a quorum, so a's release and b's grant
    // are delivered from them; two servers learn them at their reading.
    rl.release(&a).await.expect("release a");
    let b = rl.lock(r, Duration::from_secs(10)).await.expect("b");
    assert_eq!(
        take(&mut changes, 2).await,
        vec![(ChangeKind::Release, token(&a), a.owner.clone()), (ChangeKind::Grant, token(&b), b.owner.clone())]
    );
    subscribed(&c, r, 5).await;

    // Three subscriptions lost: no quorum heard while b ends and d holds.
    for s in &c.servers[..3] {
        kill_subscriptions(s).await;
    }
    rl.release(&b).await.expect("release b");
    let d = rl.lock(r, Duration::from_secs(10)).await.expect("d");
    // Learned from the readings once the servers are subscribed again: b's
    // end counted as an expiry where it was not heard, then d's grant.
    let got = take(&mut changes, 2).await;
    assert_eq!(
        got.iter().map(|(_, t, o)| (*t, o.clone())).collect::<Vec<_>>(),
        vec![(token(&b), b.owner.clone()), (token(&d), d.owner.clone())]
    );
    assert!(got.first().is_some_and(|(k, ..)| k.is_end()), "{got:?}");
    assert_eq!(got.get(1).map(|(k, ..)| *k), Some(ChangeKind::Grant), "{got:?}");
    subscribed(&c, r, 5).await;

    rl.release(&d).await.expect("release d");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Release, token(&d), d.owner.clone())]);
    let last = rl.lock(r, Duration::from_secs(10)).await.expect("last");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Grant, token(&last), last.owner.clone())], "nothing twice before");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_lock_alternates_grants_and_ends_with_rising_tokens() {
    let c = Cluster::start(5);
    notify_all(&c, "watched:*").await;
    let r = "watched:contended";
    let watcher = c.redlock(relaxed());
    let mut changes = watching(&c, &watcher, r, Duration::from_millis(200)).await;

    const WORKERS: usize = 4;
    const ROUNDS: usize = 5;
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let rl = c.redlock(relaxed());
            let r = r.to_string();
            tokio::spawn(async move {
                let mut held = Vec::new();
                for _ in 0..ROUNDS {
                    let lock =
                        rl.lock_until(&r, Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(30))).await.expect("granted");
                    held.push((token(&lock), lock.owner.clone()));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    rl.release(&lock).await.expect("release");
                }
                held
            })
        })
        .collect();
    let mut holds: Vec<(i64, String)> = Vec::new();
    for w in workers {
        holds.extend(w.await.expect("worker"));
    }
    holds.sort();
    // Every acquisition's hold, and perhaps rounds a quorum granted that
    // their client gave up (granted too late, released at once): those are
    // holds the servers had too, delivered as any other.
    let mut got = Vec::new();
    while !holds.iter().all(|h| got.iter().any(|(k, t, o): &(ChangeKind, i64, String)| k.is_end() && (t, o) == (&h.0, &h.1))) {
        assert!(got.len() < 4 * holds.len(), "every hold delivered: {got:?}");
        match tokio::time::timeout(WAIT, changes.recv()).await {
            Ok(Some(Ok(c))) => got.push((c.kind, c.token, c.owner)),
            other => panic!("{other:?} after {got:?}, holds {holds:?}"),
        }
    }
    let mut last = i64::MIN;
    for (i, pair) in got.chunks(2).enumerate() {
        let [(grant, t, owner), (end, t2, owner2)] = pair else { panic!("{got:?}") };
        assert!(matches!(grant, ChangeKind::Grant | ChangeKind::Handoff), "change {} is {grant}: {got:?}", 2 * i);
        assert_eq!(*end, ChangeKind::Release, "change {}: {got:?}", 2 * i + 1);
        assert!(*t > last, "tokens rise: {got:?}");
        assert_eq!((t, owner), (t2, owner2), "an end follows its own grant: {got:?}");
        last = *t;
    }
    for hold in &holds {
        let delivered = got.iter().filter(|(k, t, o)| !k.is_end() && (t, o) == (&hold.0, &hold.1)).count();
        assert_eq!(delivered, 1, "{hold:?} once, with the token it was granted: {got:?}");
    }
    assert!(changes.try_recv().is_err(), "nothing more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_notify_names_no_such_key_is_reported_once() {
    let c = Cluster::start(3);
    // Two servers name the key; the third's patterns match other keys only.
    for (i, s) in c.servers.iter().enumerate() {
        let pattern = if i == 2 { "other:* [^w]*" } else { "w?tched:*" };
        s.ok(redis::cmd("CONFIG").arg("SET").arg("redislock.notify").arg(pattern)).await;
    }
    let r = "watched:unnamed";
    let rl = c.redlock(relaxed());
    let mut changes = watching(&c, &rl, r, Duration::from_millis(200)).await;
    let reported = tokio::time::timeout(WAIT, changes.recv()).await.expect("in time").expect("the watch goes on");
    let message = reported.expect_err("a report, not a change");
    assert!(message.contains(&c.servers[2].addr()) && message.contains("redislock.notify"), "{message}");
    // Two of three still make a quorum: the watch goes on, reported once.
    // (The third server's tokens are not heard, so the token delivered is
    // only known to be at most the lock's: see docs/client.md.)
    let owners = |got: Vec<(ChangeKind, i64, String)>| got.into_iter().map(|(k, _, o)| (k, o)).collect::<Vec<_>>();
    let a = rl.lock(r, Duration::from_secs(10)).await.expect("a");
    rl.release(&a).await.expect("release");
    assert_eq!(owners(take(&mut changes, 2).await), vec![(ChangeKind::Grant, a.owner.clone()), (ChangeKind::Release, a.owner.clone())]);
    for s in &c.servers[..2] {
        kill_subscriptions(s).await;
    }
    kill_subscriptions(&c.servers[2]).await;
    subscribed(&c, r, 3).await;
    let b = rl.lock(r, Duration::from_secs(10)).await.expect("b");
    assert_eq!(owners(take(&mut changes, 1).await), vec![(ChangeKind::Grant, b.owner.clone())], "not reported again");
}

/// Two servers killed (kill -9) and started again empty, in restart
/// quarantine (they grant nothing for a while): the watch goes on from the
/// other three, reads the restarted ones when they answer again, and
/// delivers each change once, in order, through the quarantine and after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_killed_and_restarted_in_quarantine_leave_the_watch_whole() {
    // The setting on the loadmodule line, so a restarted server has it too.
    let opts = || common::Opts {
        module_args: vec!["quarantine".into(), "1500".into(), "notify".into(), "watched:*".into()],
        ..common::Opts::default()
    };
    let mut c = Cluster::start_opts((0..5).map(|_| opts()).collect());
    let r = "watched:restarted";
    let rl = c.redlock(relaxed());
    let mut changes = watching(&c, &rl, r, Duration::from_millis(100)).await;
    let until = || Some(Instant::now() + WAIT);

    // Every server starts in quarantine: the first lock waits it out.
    let a = rl.lock_until(r, Duration::from_secs(10), until()).await.expect("a");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Grant, token(&a), a.owner.clone())]);

    for s in &mut c.servers[..2] {
        s.kill9();
    }
    // Three servers are a quorum: a's release and b's grant are heard from them.
    rl.release(&a).await.expect("release a");
    let b = rl.lock_until(r, Duration::from_secs(10), until()).await.expect("b");
    assert_eq!(
        take(&mut changes, 2).await,
        vec![(ChangeKind::Release, token(&a), a.owner.clone()), (ChangeKind::Grant, token(&b), b.owner.clone())]
    );

    // Back, empty and in quarantine: they grant nothing, and their readings
    // (nothing held) end nothing delivered twice.
    for s in &mut c.servers[..2] {
        s.restart();
    }
    subscribed(&c, r, 5).await;
    rl.release(&b).await.expect("release b");
    let d = rl.lock_until(r, Duration::from_secs(10), until()).await.expect("d");
    let quarantined = d.instances[..2].iter().filter(|o| matches!(o.outcome, redlock::Outcome::Quarantine { .. })).count();
    println!("d granted with {quarantined} of the restarted servers still in quarantine");
    assert_eq!(
        take(&mut changes, 2).await,
        vec![(ChangeKind::Release, token(&b), b.owner.clone()), (ChangeKind::Grant, token(&d), d.owner.clone())]
    );
    rl.release(&d).await.expect("release d");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Release, token(&d), d.owner.clone())]);

    // Out of quarantine: a hold on all five. The probes are holds too, each
    // delivered once, its grant then its release, tokens rising.
    let probes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    common::eventually(WAIT, "the restarted servers out of quarantine", || async {
        let Ok(l) = rl.try_lock(r, Duration::from_secs(10)).await else { return false };
        let all = l.instances.iter().all(|o| !matches!(o.outcome, redlock::Outcome::Quarantine { .. }));
        probes.lock().expect("probes").push((token(&l), l.owner.clone()));
        rl.release(&l).await.expect("release");
        all
    })
    .await;
    let probes = probes.lock().expect("probes").clone();
    let mut expected = Vec::new();
    for (t, o) in &probes {
        assert!(*t > token(&d), "{probes:?}");
        expected.push((ChangeKind::Grant, *t, o.clone()));
        expected.push((ChangeKind::Release, *t, o.clone()));
    }
    assert_eq!(take(&mut changes, expected.len()).await, expected);
    let last = rl.lock(r, Duration::from_secs(10)).await.expect("last");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Grant, token(&last), last.owner.clone())], "nothing twice before");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_warns_when_the_servers_notify_setting_misses_its_key() {
    let c = Cluster::start(5);
    // A class, a range and an escaped star: the client reads the setting
    // with the module's own matcher, so they agree on what it covers.
    notify_all(&c, r"w[a-c]tched:\*").await;
    let rl = c.redlock(relaxed());

    let covered = "wbtched:*";
    let mut changes = watching(&c, &rl, covered, Duration::from_millis(200)).await;
    let a = rl.lock(covered, Duration::from_secs(10)).await.expect("a");
    // No warning first, and the module announces the end it covers.
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Grant, token(&a), a.owner.clone())]);
    rl.release(&a).await.expect("release a");
    assert_eq!(take(&mut changes, 1).await, vec![(ChangeKind::Release, token(&a), a.owner.clone())]);

    let missed = "wbtched:x";
    let mut warned = watching(&c, &rl, missed, Duration::from_millis(200)).await;
    let first = tokio::time::timeout(WAIT, warned.recv()).await.expect("an item in time").expect("the watch goes on");
    assert!(matches!(&first, Err(m) if m.contains("names no pattern matching")), "{first:?}");
}
