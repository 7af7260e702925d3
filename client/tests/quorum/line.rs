//! The waiting line of `lock_until`: contenders are served in arrival
//! order, the head of the line waits on the lock itself on every instance,
//! the place is given up at the grant, a grant that comes after the lock
//! was released is undone, and a line instance that is down costs
//! fairness, not the lock.

use crate::common;

use std::time::{Duration, Instant};

use common::{relaxed, Cluster};
use redis::Value;

const LINE: &str = "redlock:line:";

/// The servers that hold the line key of `resource`.
async fn line_holders(c: &Cluster, resource: &str) -> usize {
    c.infos(&format!("{LINE}{resource}")).await.iter().filter(|i| i.is_some()).count()
}

/// The number of waiters queued on `key` on each server (0 when not held).
async fn waiters(c: &Cluster, key: &str) -> Vec<i64> {
    c.infos(key).await.iter().map(|i| i.as_ref().map_or(0, |i| i.waiters)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order_and_the_head_waits_on_the_lock() {
    let c = Cluster::start(5);
    let holder = c.redlock(relaxed());
    let deadline = || Some(Instant::now() + Duration::from_secs(5));
    let lock = holder.lock_until("fifo", Duration::from_secs(5), deadline()).await.expect("free resource");
    common::eventually(Duration::from_secs(3), "place given up at the grant", || async { line_holders(&c, "fifo").await == 0 }).await;

    // Three contenders queue one after the other.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..3 {
        let rl = c.redlock(relaxed());
        let tx = tx.clone();
        tokio::spawn(async move {
            let got = rl.lock_until("fifo", Duration::from_secs(5), deadline()).await;
            let _ = tx.send((n, got.as_ref().map(|l| l.token).ok().flatten()));
            if let Ok(l) = got {
                let _ = rl.release(&l).await;
            }
        });
        if n == 0 {
            // The first is the head: it waits on the lock on every instance,
            // holding the line's only place.
            common::eventually(Duration::from_secs(3), "head waiting on every instance", || async {
                waiters(&c, "fifo").await == vec![1; 5]
            })
            .await;
            assert_eq!(line_holders(&c, "fifo").await, 1, "the line lives on exactly one instance");
        } else {
            // The others wait in line, not on the lock.
            common::eventually(Duration::from_secs(3), "contender queued in line", || async {
                c.infos(&format!("{LINE}fifo")).await.iter().flatten().any(|i| i.waiters == n)
            })
            .await;
            assert_eq!(waiters(&c, "fifo").await, vec![1; 5], "only the head waits on the lock");
        }
    }
    holder.release(&lock).await.expect("release");
    let mut order = Vec::new();
    let mut last = lock.token.unwrap_or(0);
    while order.len() < 3 {
        let (n, token) =
            tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("every contender is served").expect("channel open");
        let token = token.expect("granted");
        assert!(token > last, "tokens increase along the line");
        last = token;
        order.push(n);
    }
    assert_eq!(order, vec![0, 1, 2], "served in arrival order");
    common::eventually(Duration::from_secs(3), "line key gone", || async { line_holders(&c, "fifo").await == 0 }).await;
    common::eventually(Duration::from_secs(3), "lock free everywhere", || async { c.infos("fifo").await.iter().all(Option::is_none) })
        .await;
}

/// A waiter that found the lock held joins the line at once the next
/// times, for a second after: no first round refused on every server
/// (under contention it costs ten messages a grant, and a semaphore's may
/// take a permit ahead of its line). Past that second it asks first again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_found_the_lock_held_joins_the_line_at_once_for_a_second() {
    let c = Cluster::start(5);
    let (holder, waiter) = (c.redlock(relaxed()), c.redlock(relaxed()));
    let ttl = Duration::from_secs(10);
    let refused = || async {
        let mut n = 0;
        for s in &c.servers {
            n += s.counter("acquire_refused_held").await;
        }
        n
    };
    let briefly = || Some(Instant::now() + Duration::from_millis(150));
    let held = holder.lock("busy", ttl).await.expect("holder");
    let before = refused().await;
    let marked = Instant::now();
    assert!(waiter.lock_until("busy", ttl, briefly()).await.is_err(), "held throughout the wait");
    let after_first = refused().await;
    assert_eq!(after_first - before, 5, "the first wait asks every server first, and is refused everywhere");
    // The mark was set after `marked`, by the first wait's round: a wait
    // that starts within 0.9 s of it starts within the second. (A machine
    // so slow that it does not cannot tell; the rest still runs.)
    let in_time = marked.elapsed() < Duration::from_millis(900);
    assert!(waiter.lock_until("busy", ttl, briefly()).await.is_err(), "held throughout the wait");
    if in_time {
        assert_eq!(refused().await, after_first, "the next wait went into the line at once: nothing refused");
    }
    // A skipped round does not extend the mark: a second after the round
    // that found the lock held, the waiter asks first again.
    tokio::time::sleep_until((marked + Duration::from_millis(1100)).into()).await;
    assert!(waiter.lock_until("busy", ttl, briefly()).await.is_err(), "held throughout the wait");
    assert_eq!(refused().await - after_first, 5, "past the second the wait asks first again");
    holder.release(&held).await.expect("release");
    let lock = waiter.lock_until("busy", ttl, Some(Instant::now() + Duration::from_secs(5))).await.expect("free: the line grants it");
    waiter.release(&lock).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_without_a_deadline_has_no_place_in_line() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let lock = rl.lock("plain", Duration::from_secs(5)).await.expect("lock");
    assert_eq!(line_holders(&c, "plain").await, 0);
    assert_eq!(c.redlock(relaxed()).summary().await.iter().filter_map(|s| s.locks).sum::<i64>(), 5, "the lock alone, no ticket");
    rl.release(&lock).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_place_is_given_up_at_the_grant_and_the_lock_kept() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let lock = rl.lock_until("early", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(2))).await.expect("lock");
    common::eventually(Duration::from_secs(3), "place given up", || async { line_holders(&c, "early").await == 0 }).await;
    assert!(c.infos("early").await.iter().all(|i| i.as_ref().is_some_and(|i| i.owner == lock.owner)), "lock kept");
    rl.release(&lock).await.expect("release");
}

/// Holder `owner` of `key` on server `i`: released there, or its lease set.
async fn on_server(c: &Cluster, i: usize, cmd: &mut redis::Cmd) -> Value {
    c.servers[i].ok(cmd).await
}

/// Makes two instances grant the head after the others: the holder's lease
/// there is released last. Returns the holder and the head's lock, taken
/// on the first three instances with the waits on the last two running.
async fn head_granted_by_three(c: &Cluster, resource: &str) -> (redlock::Lock, redlock::Redlock, redlock::Lock) {
    let holder = c.redlock(relaxed());
    let held = holder.lock(resource, Duration::from_secs(20)).await.expect("holder");
    let head = c.redlock(relaxed());
    let waiting = {
        let (head, resource) = (head.clone(), resource.to_string());
        tokio::spawn(
            async move { head.lock_until(&resource, Duration::from_secs(20), Some(Instant::now() + Duration::from_secs(5))).await },
        )
    };
    common::eventually(Duration::from_secs(3), "head waiting on every instance", || async { waiters(c, resource).await == vec![1; 5] })
        .await;
    for i in 0..3 {
        assert_eq!(on_server(c, i, redis::cmd("LOCK.RELEASE").arg(resource).arg(&held.owner)).await, Value::Int(1));
    }
    let lock = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("granted").expect("task").expect("quorum of three");
    let infos = c.infos(resource).await;
    for (i, info) in infos.iter().enumerate().take(3) {
        assert_eq!(info.as_ref().map(|i| i.owner.as_str()), Some(lock.owner.as_str()), "instance {i} granted the head");
    }
    for (i, info) in infos.iter().enumerate().skip(3) {
        let info = info.as_ref().expect("still the holder's");
        assert_eq!((info.owner.as_str(), info.waiters), (held.owner.as_str(), 1), "instance {i}: the head still waits");
    }
    (held, head, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_grant_after_the_release_is_released_at_once() {
    let c = Cluster::start(5);
    let (held, head, lock) = head_granted_by_three(&c, "late").await;
    head.release(&lock).await.expect("release");
    // The holder's leases on the last two end now: their queued waits are
    // granted to a lock already released, and must be undone.
    for i in 3..5 {
        assert_eq!(on_server(&c, i, redis::cmd("LOCK.RELEASE").arg("late").arg(&held.owner)).await, Value::Int(1));
    }
    common::eventually(Duration::from_secs(3), "late grants released", || async { c.infos("late").await.iter().all(Option::is_none) })
        .await;
    // Not by their lease: it is 20 s.
    let other = c.redlock(relaxed());
    let next = other.try_lock("late", Duration::from_secs(5)).await.expect("free on every instance");
    assert_eq!(next.instances.iter().filter(|o| matches!(o.outcome, redlock::Outcome::Granted { .. })).count(), 5);
    assert!(next.token > lock.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_grant_during_the_hold_is_kept_and_released_with_the_lock() {
    let c = Cluster::start(5);
    let (held, head, lock) = head_granted_by_three(&c, "late-held").await;
    for i in 3..5 {
        assert_eq!(on_server(&c, i, redis::cmd("LOCK.RELEASE").arg("late-held").arg(&held.owner)).await, Value::Int(1));
    }
    common::eventually(Duration::from_secs(3), "late grants arrive", || async {
        c.infos("late-held").await.iter().all(|i| i.as_ref().is_some_and(|i| i.owner == lock.owner))
    })
    .await;
    // Held on all five now, so it survives two instances failing to extend.
    let extended = head.extend(&lock, Duration::from_secs(20)).await.expect("extend");
    assert_eq!(extended.instances.iter().filter(|o| o.outcome == redlock::Outcome::Done).count(), 5);
    let released = head.release(&extended).await.expect("release");
    assert_eq!(released.released, 5);
    assert!(c.infos("late-held").await.iter().all(Option::is_none));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_instance_that_is_down_costs_fairness_not_the_lock() {
    let mut c = Cluster::start(5);
    // Find the line's instance for this resource, then kill it.
    // A head of the line holds its place while it waits.
    let rl = c.redlock(relaxed());
    let blocker = rl.lock("down", Duration::from_secs(5)).await.expect("lock");
    let probe = {
        let rl = rl.clone();
        tokio::spawn(async move { rl.lock_until("down", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(5))).await })
    };
    common::eventually(Duration::from_secs(3), "head in line", || async { line_holders(&c, "down").await == 1 }).await;
    let infos = c.infos(&format!("{LINE}down")).await;
    let line = infos.iter().position(|i| i.is_some()).expect("line key somewhere");
    rl.release(&blocker).await.expect("release");
    let probe = probe.await.expect("task").expect("head granted");
    rl.release(&probe).await.expect("release");
    c.servers[line].kill9();

    let holder = c.redlock(relaxed());
    let held = holder.lock("down", Duration::from_millis(800)).await.expect("4 of 5 still grant");
    let waiter = c.redlock(relaxed());
    let started = Instant::now();
    let got = waiter
        .lock_until("down", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(4)))
        .await
        .expect("granted once the holder's lease ends, without a line");
    assert!(got.token > held.token);
    assert!(started.elapsed() < Duration::from_secs(3), "waited {:?}", started.elapsed());
    waiter.release(&got).await.expect("release");
}

/// The line instance freezes (SIGSTOP) for 120 ms while a contender asks
/// for its place: its requests time out (50 ms, the default), and it asks
/// again instead of polling behind the line, so it gets its place once
/// the line instance is back, and a contender that arrives after it still
/// comes after it. Everyone is served in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_asked_for_while_the_line_instance_stalls_keeps_its_turn() {
    let mut c = Cluster::start(5);
    let holder = c.redlock(relaxed());
    let held = holder.lock("stall", Duration::from_secs(10)).await.expect("lock");
    let deadline = || Some(Instant::now() + Duration::from_secs(10));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let contender = |n: usize, rl: redlock::Redlock| {
        let tx = tx.clone();
        tokio::spawn(async move {
            let asked = Instant::now();
            let got = rl.lock_until("stall", Duration::from_secs(5), deadline()).await;
            let _ = tx.send((n, got.as_ref().map(|l| l.token).ok().flatten(), asked.elapsed()));
            if let Ok(l) = got {
                let _ = rl.release(&l).await;
            }
        })
    };
    // The first is the head: its place shows where the line lives.
    contender(1, c.redlock(relaxed()));
    common::eventually(Duration::from_secs(3), "the head waiting on every instance", || async {
        waiters(&c, "stall").await == vec![1; 5] && line_holders(&c, "stall").await == 1
    })
    .await;
    let line = c.infos(&format!("{LINE}stall")).await.iter().position(Option::is_some).expect("the line's instance");
    // The second asks with the defaults (a 50 ms request timeout, polls
    // 100-200 ms apart) while the line instance is frozen.
    let second = c.redlock(redlock::Settings::default());
    // Connected (and its servers identified) before the freeze: only the
    // place in line is asked for while the line instance stalls.
    second.verify_servers().await.expect("servers");
    c.servers[line].freeze();
    contender(2, second);
    tokio::time::sleep(Duration::from_millis(120)).await;
    c.servers[line].thaw();
    // The third arrives once the second has its place (an event: a time
    // here would race the second's retry on a busy machine). A contender
    // that gave up its place after the stalled request, and polled the
    // lock instead, never shows in line: this wait fails.
    common::eventually(Duration::from_secs(5), "the second in line once the line instance is back", || async {
        c.infos(&format!("{LINE}stall")).await.get(line).cloned().flatten().is_some_and(|i| i.waiters == 1)
    })
    .await;
    contender(3, c.redlock(relaxed()));
    common::eventually(Duration::from_secs(5), "both behind the head in line", || async {
        c.infos(&format!("{LINE}stall")).await.get(line).cloned().flatten().is_some_and(|i| i.waiters == 2)
    })
    .await;
    holder.release(&held).await.expect("release");
    let mut order = Vec::new();
    let mut last = held.token.unwrap_or(0);
    while order.len() < 3 {
        let (n, token, waited) =
            tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("every contender is served").expect("channel open");
        let token = token.unwrap_or_else(|| panic!("contender {n} not granted after {waited:?}"));
        assert!(token > last, "tokens increase along the line");
        last = token;
        order.push(n);
    }
    assert_eq!(order, vec![1, 2, 3], "served in arrival order, the stalled request's contender included");
}

/// The head of the line gives its acquisition up (its future dropped, as a
/// binding's timeout or a cancelled task does) while the lock is held: its
/// waits leave every server's queue before `settle` returns, far inside
/// their window (10 s here), and once the holder releases, the next in
/// line is granted at once and nobody else ever is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_given_up_leaves_every_queue_at_once() {
    let c = Cluster::start(5);
    let ttl = Duration::from_secs(30);
    let holder = c.redlock(relaxed());
    let held = holder.lock("gone", ttl).await.expect("holder");
    let head = c.redlock(relaxed());
    let waiting = {
        let head = head.clone();
        tokio::spawn(async move { head.lock_until("gone", ttl, Some(Instant::now() + Duration::from_secs(60))).await })
    };
    common::eventually(Duration::from_secs(5), "head waiting on every instance", || async { waiters(&c, "gone").await == vec![1; 5] })
        .await;
    let given_up = Instant::now();
    waiting.abort();
    assert!(waiting.await.is_err_and(|e| e.is_cancelled()), "still waiting when given up");
    head.settle().await;
    assert_eq!(waiters(&c, "gone").await, vec![0; 5], "the waits left every queue");
    for s in &c.servers {
        assert_eq!(s.ok(redis::cmd("LOCK.WAITERS").arg("gone")).await, Value::Array(vec![]), "{}: nobody in line", s.addr());
    }
    assert!(given_up.elapsed() < ttl / 3, "before the window ended");
    assert_eq!(line_holders(&c, "gone").await, 0, "the head's place in line given up");

    // The next waiter takes the head and is handed the lock at the release.
    let next = c.redlock(relaxed());
    let taking = {
        let next = next.clone();
        tokio::spawn(async move { next.lock_until("gone", ttl, Some(Instant::now() + Duration::from_secs(60))).await })
    };
    common::eventually(Duration::from_secs(5), "the next waiting on every instance", || async { waiters(&c, "gone").await == vec![1; 5] })
        .await;
    let before = c.handoffs().await;
    let released = Instant::now();
    holder.release(&held).await.expect("release");
    let lock = tokio::time::timeout(Duration::from_secs(5), taking).await.expect("granted at once").expect("task").expect("lock");
    assert!(released.elapsed() < ttl / 3, "granted at the release, not a window later");
    common::eventually(Duration::from_secs(5), "the next holds it on every server", || async {
        c.infos("gone").await.iter().all(|i| i.as_ref().is_some_and(|i| i.owner == lock.owner && i.waiters == 0))
    })
    .await;
    // One handoff per server, to the next: the one given up never held it.
    let after = c.handoffs().await;
    let handed: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(handed, vec![1; 5], "handoffs at the release: {before:?} -> {after:?}");
    next.release(&lock).await.expect("release");
}

/// The owners a server's MONITOR shows `LOCK.ACQUIRE key` asked under,
/// those of `name`'s form, in order, until `last` is among them.
async fn owners_asked(monitor: &mut tokio::io::BufReader<tokio::net::TcpStream>, key: &str, name: &str, last: &str) -> Vec<String> {
    use tokio::io::AsyncBufReadExt;
    let mut owners: Vec<String> = Vec::new();
    let (command, key) = ("\"LOCK.ACQUIRE\"".to_string(), format!("\"{key}\""));
    while !owners.iter().any(|o| o == last) {
        let mut line = String::new();
        let read = tokio::time::timeout(Duration::from_secs(10), monitor.read_line(&mut line)).await;
        assert!(matches!(read, Ok(Ok(n)) if n > 0), "MONITOR ended before {last} was asked for; saw {owners:?}");
        let words: Vec<&str> = line.split_whitespace().skip_while(|w| !w.eq_ignore_ascii_case(&command)).collect();
        if words.get(1) == Some(&key.as_str()) {
            if let Some(owner) = words.get(2).map(|w| w.trim_matches('"')).filter(|o| o.starts_with(&format!("{name}:"))) {
                owners.push(owner.to_string());
            }
        }
    }
    owners
}

/// A hold its caller names (`lock_as`, as `redlock serve` names its
/// clients'): each round of the acquisition asks under an owner of its
/// own, the name, `:`, and 16 hex digits. Under one owner for all of
/// them, the undoing of a failed round, sent again to a server that had
/// not answered and landing late, would end a later round's grant there
/// while the lock counts it. Seen on a server's MONITOR: the round that
/// finds the lock held and the head's round that is granted ask under two
/// owners, the second the lock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_round_of_a_named_acquisition_asks_under_an_owner_of_its_own() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let c = Cluster::start(5);
    let holder = c.redlock(relaxed());
    let held = holder.try_lock("named", Duration::from_secs(10)).await.expect("free resource");
    let port = c.servers[0].port;
    let mut monitor = tokio::io::BufReader::new(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect"));
    monitor.get_mut().write_all(b"MONITOR\r\n").await.expect("MONITOR");
    let mut ok = String::new();
    monitor.read_line(&mut ok).await.expect("MONITOR's answer");
    assert_eq!(ok, "+OK\r\n");

    let waiter = c.redlock(relaxed());
    let asking = tokio::spawn(async move {
        let one = redlock::Resources::one("named");
        let ask = redlock::transport::Ask::exclusive();
        waiter.lock_as(&one, "client-7", Duration::from_secs(10), ask, Some(Instant::now() + Duration::from_secs(8))).await
    });
    common::eventually(Duration::from_secs(5), "the named waiter at the head", || async {
        waiters(&c, "named").await.iter().any(|&w| w > 0)
    })
    .await;
    holder.release(&held).await.expect("release");
    let lock = asking.await.expect("task").expect("granted once released");
    let suffix = lock.owner.strip_prefix("client-7:").unwrap_or_else(|| panic!("the lock's owner {:?} is not the name's", lock.owner));
    assert!(suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_hexdigit()), "{:?}", lock.owner);
    let owners = owners_asked(&mut monitor, "named", "client-7", &lock.owner).await;
    assert!(owners.len() >= 2, "a refused round and a granted one: {owners:?}");
    let first = owners.first().cloned().unwrap_or_default();
    assert_ne!(first, lock.owner, "the round that found the lock held asked under another owner than the grant: {owners:?}");
}

/// A named head given up (its future dropped, as `redlock serve` drops a
/// client's acquisition when the client leaves) is remembered as given up
/// by a handle asked to (`remember_given_up`), for its releases may still
/// be on their way: the endpoint must never take such a hold over for the
/// client asking again (one overlap in 23 runs of `serve_faults` before).
/// A handle not asked remembers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_head_given_up_is_remembered_as_given_up() {
    let c = Cluster::start(5);
    let ttl = Duration::from_secs(30);
    let holder = c.redlock(relaxed());
    let _held = holder.lock("forsaken", ttl).await.expect("holder");
    let remembering = c.redlock(relaxed());
    remembering.remember_given_up();
    let forgetting = c.redlock(relaxed());
    let mut owners = Vec::new();
    for rl in [&remembering, &forgetting] {
        let waiting = {
            let rl = rl.clone();
            tokio::spawn(async move {
                let one = redlock::Resources::one("forsaken");
                rl.lock_as(&one, "client-9", ttl, redlock::transport::Ask::exclusive(), Some(Instant::now() + Duration::from_secs(60)))
                    .await
            })
        };
        let waiting_owner = || async {
            let reply = c.servers[0].ok(redis::cmd("LOCK.WAITERS").arg("forsaken")).await;
            let Value::Array(rows) = reply else { return None };
            rows.into_iter().find_map(|row| {
                let fields = match row {
                    Value::Array(f) => f,
                    Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                    _ => return None,
                };
                let at = fields.iter().position(|f| matches!(f, Value::BulkString(b) if b == b"owner"))?;
                match fields.get(at + 1) {
                    Some(Value::BulkString(o)) => String::from_utf8(o.clone()).ok().filter(|o| o.starts_with("client-9:")),
                    _ => None,
                }
            })
        };
        common::eventually(Duration::from_secs(5), "the named head waiting", || async { waiting_owner().await.is_some() }).await;
        let owner = waiting_owner().await.expect("the head's owner");
        waiting.abort();
        assert!(waiting.await.is_err_and(|e| e.is_cancelled()), "still waiting when given up");
        rl.settle().await;
        owners.push(owner);
    }
    assert!(remembering.gave_up(&owners[0]), "the dropped round's owner {} is not remembered", owners[0]);
    assert!(!remembering.gave_up(&owners[1]), "another handle's round");
    assert!(!remembering.gave_up("client-9:0000000000000000"), "an owner never used");
    assert!(!forgetting.gave_up(&owners[1]), "a handle not asked to remember");
}
