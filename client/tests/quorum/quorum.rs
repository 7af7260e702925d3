//! The Redlock client against five real redis-servers with the redislock
//! module (and plain ones where that is the point): grants, quorum loss,
//! fencing write-back, module detection, reentrancy, extension, reconnects,
//! script mode.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, now_unix_us, relaxed, Cluster, Info};
use redlock::{quorum, Error, Mode, NotGranted, Outcome, Settings, UnreachableCause};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_grants_on_all_five_with_one_token_and_releases() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    assert_eq!(rl.quorum(), 3);
    let ttl = Duration::from_secs(10);

    let asked = Instant::now();
    let lock = rl.lock("happy", ttl).await.expect("lock on five healthy servers");
    let took = asked.elapsed();
    let token = lock.token.expect("module mode yields a fencing token");
    let drift = quorum::drift(ttl, rl.settings().drift_factor);
    assert!(lock.validity <= ttl - drift, "validity {:?} must subtract the drift {drift:?} from {ttl:?}", lock.validity);
    // The validity loses the time the round took, counted within the call:
    // no more than the call took here (however long a busy machine made it).
    assert!(lock.validity >= ttl - drift - took, "validity {:?} lost more than the {took:?} the lock took", lock.validity);
    assert_eq!(lock.ttl, ttl);
    assert_eq!(lock.owner.len(), 40, "owner is 20 random bytes in hex: {:?}", lock.owner);

    assert_eq!(lock.instances.len(), 5);
    for (o, s) in lock.instances.iter().zip(&c.servers) {
        assert_eq!(o.server, s.addr(), "outcomes are in server order");
        assert_eq!(o.outcome, Outcome::Granted { token: Some(token) }, "after write-back: {o}");
    }
    // Five servers started at different instants issue different
    // clock-seeded tokens: the lock's is their maximum, the rest were fenced.
    assert!((1..=4).contains(&lock.fenced), "fenced {}", lock.fenced);
    for (info, s) in c.infos("happy").await.into_iter().zip(&c.servers) {
        let info = info.unwrap_or_else(|| panic!("{}: no lock after grant", s.addr()));
        assert_eq!(info.owner, lock.owner, "{}", s.addr());
        assert_eq!(info.token, Some(token), "{}: token must have been written back", s.addr());
        assert!(info.pttl > 9_000 && info.pttl <= 10_000, "{}: pttl {}", s.addr(), info.pttl);
    }

    let released = rl.release(&lock).await.expect("release");
    assert_eq!(released.released, 5, "{released:?}");
    assert_eq!(released.remaining_holds, 0);
    assert!(released.instances.iter().all(|o| o.outcome == Outcome::Done), "{released:?}");
    assert_eq!(c.infos("happy").await, vec![None; 5], "keys gone after release");

    // The resource is free again: another client takes it at once, with a larger token.
    let other = c.redlock(relaxed());
    let again = other.try_lock("happy", ttl).await.expect("free after release");
    assert!(again.token.unwrap() > token);
    other.release(&again).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_validity_left_means_not_granted_and_nothing_left_behind() {
    let c = Cluster::start(5);

    // ttl 1 ms, drift 2.01 ms: nothing can be left of the lease.
    let rl = c.redlock(Settings { retry_count: 1, ..relaxed() });
    match rl.lock("tiny", MS(1)).await {
        Err(Error::NotAcquired { resource, attempts, why, .. }) => {
            assert_eq!(resource, "tiny");
            assert_eq!(attempts, 2, "retry_count 1 → two attempts");
            assert_eq!(why, NotGranted::NoValidity);
        }
        other => panic!("ttl 1 ms must not be granted, got {other:?}"),
    }
    assert_eq!(c.infos("tiny").await, vec![None; 5]);

    // A lease that would outlive the test on the servers (5 s) but whose
    // validity is eaten by the drift (factor 1.0): every server granted it,
    // so the client must have released it everywhere before returning.
    let rl = c.redlock(Settings { retry_count: 0, drift_factor: 1.0, ..relaxed() });
    match rl.lock("drift", Duration::from_secs(5)).await {
        Err(Error::NotAcquired { attempts, outcomes, why, .. }) => {
            assert_eq!(attempts, 1);
            assert_eq!(why, NotGranted::NoValidity, "granted by all, but too late");
            assert_eq!(outcomes.len(), 5);
            for o in &outcomes {
                assert!(matches!(o.outcome, Outcome::Granted { token: Some(_) }), "servers granted: {o}");
            }
        }
        other => panic!("drift ≥ ttl must not be granted, got {other:?}"),
    }
    // No polling: the releases completed before `lock` returned.
    assert_eq!(c.infos("drift").await, vec![None; 5], "a refused lock must be released everywhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_down_acquires_majority_down_fails_cleanly() {
    let mut c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    // Connections established first: the servers die under live connections.
    let warm = rl.lock("m", Duration::from_secs(10)).await.expect("warm-up lock");
    rl.release(&warm).await.unwrap();

    c.servers[1].kill9();
    c.servers[3].kill9();
    let lock = rl.lock("m", Duration::from_secs(10)).await.expect("3 of 5 is a quorum");
    let token = lock.token.unwrap();
    for (i, o) in lock.instances.iter().enumerate() {
        if i == 1 || i == 3 {
            assert!(matches!(o.outcome, Outcome::Unreachable { cause: UnreachableCause::ConnectionRefused, .. }), "killed server {i}: {o}");
        } else {
            assert_eq!(o.outcome, Outcome::Granted { token: Some(token) }, "live server {i}");
        }
    }
    for i in [0, 2, 4] {
        assert_eq!(c.servers[i].info("m").await.map(|i| i.owner), Some(lock.owner.clone()));
    }
    let released = rl.release(&lock).await.unwrap();
    assert_eq!(released.released, 3, "{released:?}");

    c.servers[4].kill9();
    let err = rl.lock("m", Duration::from_secs(10)).await.expect_err("2 of 5 is no quorum");
    let text = err.to_string();
    println!("{text}");
    match &err {
        Error::NotAcquired { resource, attempts, why, outcomes } => {
            assert_eq!(resource, "m");
            assert_eq!(*why, NotGranted::NoQuorum, "2 answers of 5: no quorum could vote");
            assert_eq!(*attempts, 3, "retry_count 2 → three attempts");
            assert_eq!(outcomes.len(), 5);
            for (i, o) in outcomes.iter().enumerate() {
                if [1, 3, 4].contains(&i) {
                    assert!(
                        matches!(o.outcome, Outcome::Unreachable { cause: UnreachableCause::ConnectionRefused, .. }),
                        "killed server {i}: {o}"
                    );
                } else {
                    assert!(matches!(o.outcome, Outcome::Granted { .. }), "live server {i}: {o}");
                }
            }
        }
        other => panic!("expected NotAcquired, got {other:?}"),
    }
    for s in &c.servers {
        assert!(text.contains(&s.addr()), "error must name {}: {text}", s.addr());
    }
    assert!(text.contains("granted") && text.contains("connection refused"), "{text}");
    assert!(text.contains("too few servers answered for a quorum"), "{text}");
    // Nothing left behind on the live ones (ttl 10 s: no expiry could hide it).
    for i in [0, 2] {
        assert_eq!(c.servers[i].info("m").await, None, "live server {i} keeps no lock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_are_the_quorum_maximum_written_back_and_survive_an_empty_restart() {
    let mut c = Cluster::start(5);
    // Raise server 0's counter far above the others' (clock-seeded) ones.
    // (30 s ahead: within the default redislock.max-token-lead of 60 s.)
    let big = now_unix_us() + 30_000_000;
    let raised = c.servers[0].ok(redis::cmd("LOCK.ACQUIRE").arg("other").arg("x").arg(1000).arg("FENCE").arg(big)).await;
    assert_eq!(raised, redis::Value::Int(big));

    let rl = c.redlock(relaxed());
    let first = rl.lock("f", Duration::from_secs(10)).await.expect("lock");
    let token = first.token.unwrap();
    assert_eq!(token, big + 1, "the lock's token is the largest any granting server issued");
    assert_eq!(first.fenced, 4, "the four servers behind were raised (FENCE)");
    for o in &first.instances {
        assert_eq!(o.outcome, Outcome::Granted { token: Some(token) }, "{o}");
    }
    for (info, s) in c.infos("f").await.into_iter().zip(&c.servers) {
        assert_eq!(info.and_then(|i| i.token), Some(token), "{} holds the written-back token", s.addr());
    }
    rl.release(&first).await.unwrap();

    // The server that issued the maximum loses everything: its counter
    // restarts from the clock, far below `token`.
    c.servers[0].kill9();
    c.servers[0].restart();
    let fresh = c.servers[0].ok(redis::cmd("LOCK.ACQUIRE").arg("probe").arg("p").arg(1000)).await;
    match fresh {
        redis::Value::Int(t) => assert!(t < token, "restarted server's own counter is behind ({t} vs {token})"),
        other => panic!("{other:?}"),
    }
    c.servers[0].ok(redis::cmd("LOCK.RELEASE").arg("probe").arg("p")).await;
    // The client's connection to server 0 died while idle; the transport
    // resends on the new one, so server 0 takes part and must be fenced.
    let second = rl.lock("f", Duration::from_secs(10)).await.expect("lock after restart");
    let later = second.token.unwrap();
    println!("first token {token}, after empty restart {later}, fenced {}: {:?}", second.fenced, second.instances);
    assert!(later > token, "token went backwards: {later} after {token}");
    assert!(second.fenced >= 1, "the restarted server was behind and must have been fenced");
    for (info, s) in c.infos("f").await.into_iter().zip(&c.servers) {
        assert_eq!(info.and_then(|i| i.token), Some(later), "{}", s.addr());
    }
    rl.release(&second).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_module_is_named_and_script_mode_serves_plain_redis() {
    // One server without the module is one instance that does not grant,
    // not a fatal error: the other four are a quorum.
    let c = Cluster::start_kinds(&[true, true, false, true, true]);
    let plain = c.servers[2].addr();
    let rl = c.redlock(relaxed());
    let lock = rl.lock("mm", Duration::from_secs(10)).await.expect("4 module servers of 5 are a quorum");
    assert_eq!(lock.instances[2].outcome, Outcome::ModuleMissing, "{}", lock.instances[2]);
    let text = lock.instances[2].to_string();
    assert!(text.starts_with(&plain) && text.contains("redislock module"), "the outcome names the server and the module: {text}");
    for i in [0, 1, 3, 4] {
        assert_eq!(c.servers[i].info("mm").await.map(|i| i.owner), Some(lock.owner.clone()), "server {i}");
    }
    let released = rl.release(&lock).await.expect("release");
    assert_eq!(released.released, 4, "{released:?}");
    assert_eq!(released.instances[2].outcome, Outcome::ModuleMissing);

    // Three without it: no quorum can grant, and the error says why: the
    // request is refused (a configuration error), not an outage.
    let c = Cluster::start_kinds(&[true, false, false, true, false]);
    let rl = c.redlock(Settings { retry_count: 0, ..relaxed() });
    match rl.lock("mm", Duration::from_secs(10)).await {
        Err(Error::Rejected { rejection: redlock::Rejection::ModuleMissing, outcomes, .. }) => {
            for i in [1, 2, 4] {
                assert_eq!(outcomes[i].outcome, Outcome::ModuleMissing, "{}", outcomes[i]);
            }
        }
        other => panic!("expected Rejected(ModuleMissing), got {other:?}"),
    }
    for i in [0, 3] {
        assert_eq!(c.servers[i].info("mm").await, None, "server {i}: grant rolled back");
    }

    let plain = Cluster::start_kinds(&[false; 5]);
    let rl = plain.redlock(Settings { mode: Mode::Script, ..relaxed() });
    let lock = rl.lock("sp", Duration::from_secs(10)).await.expect("script mode on plain servers");
    assert_eq!(lock.token, None);
    assert!(lock.instances.iter().all(|o| o.outcome == Outcome::Granted { token: None }), "{:?}", lock.instances);
    for s in &plain.servers {
        assert_eq!(s.get("sp").await, Some(lock.owner.clone()));
    }
    let rival = plain.redlock(Settings { mode: Mode::Script, retry_count: 0, ..relaxed() });
    assert!(matches!(rival.lock("sp", Duration::from_secs(10)).await, Err(Error::NotAcquired { .. })));
    for s in &plain.servers {
        assert_eq!(s.get("sp").await, Some(lock.owner.clone()), "rival's failed attempt released nothing of ours");
    }
    let extended = rl.extend(&lock, Duration::from_secs(30)).await.expect("extend");
    for s in &plain.servers {
        assert!(s.pttl("sp").await > 20_000);
    }
    let released = rl.release(&extended).await.unwrap();
    assert_eq!(released.released, 5);
    for s in &plain.servers {
        assert_eq!(s.get("sp").await, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_mode_on_module_servers_interoperates() {
    let c = Cluster::start(5);
    let rl = c.redlock(Settings { mode: Mode::Script, ..relaxed() });
    let lock = rl.lock("sm", Duration::from_secs(5)).await.expect("script-mode lock");
    assert_eq!(lock.token, None);
    for info in c.infos("sm").await {
        // A SET NX PX lock, seen by the module as a plain-string lock.
        let Info { owner, token, .. } = info.expect("lock present");
        assert_eq!((owner, token), (lock.owner.clone(), None));
    }
    // A module-mode client is excluded by it.
    let module = c.redlock(Settings { retry_count: 0, ..relaxed() });
    assert!(matches!(module.lock("sm", Duration::from_secs(5)).await, Err(Error::NotAcquired { why: NotGranted::Held, .. })));

    let extended = rl.extend(&lock, Duration::from_secs(60)).await.expect("extend");
    assert!(extended.instances.iter().all(|o| o.outcome == Outcome::Done));
    for s in &c.servers {
        let pttl = s.pttl("sm").await;
        assert!(pttl > 50_000, "{}: pttl {pttl} after extending to 60 s", s.addr());
    }
    let released = rl.release(&extended).await.unwrap();
    assert_eq!(released.released, 5);
    assert_eq!(c.infos("sm").await, vec![None; 5]);
}

/// How many LOCK.* commands each server has run (INFO commandstats).
pub(crate) async fn lock_commands(c: &Cluster) -> Vec<i64> {
    let mut out = Vec::new();
    for s in &c.servers {
        let text = match s.ok(redis::cmd("INFO").arg("commandstats")).await {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            other => panic!("INFO commandstats replied {other:?}"),
        };
        let calls = text
            .lines()
            .filter(|l| l.starts_with("cmdstat_lock."))
            .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<i64>().ok())
            .sum();
        out.push(calls);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_reenters_through_its_lock_and_the_last_release_frees_it() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let first = rl.lock("re", Duration::from_secs(10)).await.unwrap();
    assert_eq!(first.holds(), 1);
    let asked_before = lock_commands(&c).await;
    let second = first.reenter().expect("the holder re-enters");
    assert_eq!(lock_commands(&c).await, asked_before, "re-entry asks no server");
    assert_eq!((&second.owner, second.token, second.holds()), (&first.owner, first.token, 2));

    // The same handle asking for the resource is another acquisition, and
    // excluded like any other client.
    let same_handle = rl.try_lock("re", Duration::from_secs(10)).await;
    assert!(matches!(same_handle, Err(Error::NotAcquired { .. })), "{same_handle:?}");

    let r1 = rl.release(&second).await.unwrap();
    assert_eq!((r1.released, r1.remaining_holds), (0, 1), "{r1:?}");
    for info in c.infos("re").await {
        assert_eq!(info.map(|i| i.owner), Some(first.owner.clone()), "still held after the first release");
    }
    let other = c.redlock(Settings { retry_count: 0, ..relaxed() });
    assert!(matches!(other.lock("re", Duration::from_secs(10)).await, Err(Error::NotAcquired { .. })));

    let r2 = rl.release(&first).await.unwrap();
    assert_eq!((r2.released, r2.remaining_holds), (5, 0), "{r2:?}");
    assert_eq!(c.infos("re").await, vec![None; 5]);
    assert!(matches!(first.reenter(), Err(Error::Expired { .. })), "a released lock cannot be re-entered");
    let third = rl.lock("re", Duration::from_secs(10)).await.unwrap();
    assert_ne!(third.owner, first.owner);
    assert!(third.token > first.token);
    rl.release(&third).await.unwrap();

    // A guard re-enters as a guard of its own; the last one releases.
    let guard = rl.guard("re", Duration::from_secs(2), None).await.unwrap();
    let inner = guard.reenter().expect("guard re-entry");
    assert_eq!(inner.token(), guard.token());
    let r = guard.release().await.unwrap();
    assert_eq!((r.released, r.remaining_holds), (0, 1), "{r:?}");
    // Still extended while the inner hold lasts: past the 2 s ttl.
    tokio::time::sleep(MS(2500)).await;
    assert!(!inner.is_lost());
    for info in c.infos("re").await {
        assert_eq!(info.map(|i| i.owner), Some(inner.lock().owner.clone()), "kept alive by the remaining hold");
    }
    let r = inner.release().await.unwrap();
    assert_eq!((r.released, r.remaining_holds), (5, 0), "{r:?}");
    assert_eq!(c.infos("re").await, vec![None; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_recomputes_validity_and_reports_quorum_loss_and_expiry() {
    let mut c = Cluster::start(5);
    let rl = c.redlock(relaxed());

    // Expired: a lock whose validity ran out cannot be extended.
    // 500 ms: granted even when a busy machine slows the round down.
    let short = rl.lock("short", MS(500)).await.unwrap();
    tokio::time::sleep(MS(600)).await; // time is the subject
    match rl.extend(&short, Duration::from_secs(5)).await {
        Err(Error::Expired { resource }) => assert_eq!(resource, "short"),
        other => panic!("extending an expired lock must be Error::Expired, got {other:?}"),
    }
    assert_eq!(c.infos("short").await, vec![None; 5], "an expired lock is not revived");

    let lock = rl.lock("ext", Duration::from_secs(2)).await.unwrap();
    tokio::time::sleep(MS(300)).await; // time is the subject
    let before = lock.remaining();
    let ttl = Duration::from_secs(5);
    let asked = Instant::now();
    let ext = rl.extend(&lock, ttl).await.expect("extend with all five up");
    let took = asked.elapsed();
    let drift = quorum::drift(ttl, rl.settings().drift_factor);
    assert_eq!(ext.ttl, ttl);
    assert_eq!((&ext.owner, ext.token), (&lock.owner, lock.token));
    assert!(ext.acquired_at > lock.acquired_at, "validity counts from the extension");
    assert!(ext.validity <= ttl - drift && ext.validity >= ttl - drift - took, "validity {:?}, the extension took {took:?}", ext.validity);
    assert!(ext.remaining() > before + MS(2500), "remaining {:?} vs {before:?} before", ext.remaining());
    assert!(ext.instances.iter().all(|o| o.outcome == Outcome::Done), "{:?}", ext.instances);
    for info in c.infos("ext").await {
        let info = info.unwrap();
        assert!(info.pttl > 4_000, "server lease extended to 5 s: pttl {}", info.pttl);
        assert_eq!(info.token, lock.token, "token unchanged by EXTEND");
    }

    for i in 0..3 {
        c.servers[i].kill9();
    }
    let err = rl.extend(&ext, ttl).await.expect_err("two of five cannot extend");
    let text = err.to_string();
    println!("{text}");
    match &err {
        Error::QuorumLost { resource, outcomes } => {
            assert_eq!(resource, "ext");
            for (i, o) in outcomes.iter().enumerate() {
                if i < 3 {
                    assert!(!matches!(o.outcome, Outcome::Done), "killed server {i}: {o}");
                } else {
                    assert_eq!(o.outcome, Outcome::Done, "live server {i}");
                }
            }
        }
        other => panic!("expected QuorumLost, got {other:?}"),
    }
    for s in &c.servers {
        assert!(text.contains(&s.addr()), "error must name {}: {text}", s.addr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_comes_back_after_a_server_restart() {
    let mut c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let warm = rl.lock("rc", Duration::from_secs(10)).await.unwrap();
    assert_eq!(warm.instances.iter().filter(|o| matches!(o.outcome, Outcome::Granted { .. })).count(), 5);
    rl.release(&warm).await.unwrap();

    c.servers[4].kill9();
    let down = rl.lock("rc", Duration::from_secs(10)).await.expect("4 of 5");
    assert!(
        matches!(down.instances[4].outcome, Outcome::Unreachable { cause: UnreachableCause::ConnectionRefused, .. }),
        "{}",
        down.instances[4]
    );
    assert_eq!(down.instances.iter().filter(|o| matches!(o.outcome, Outcome::Granted { .. })).count(), 4);
    rl.release(&down).await.unwrap();

    c.servers[4].restart();
    // The client backs off from a server whose connections failed (at
    // most a second): it is used again once a connection to it answers.
    eventually(Duration::from_millis(1_500), "the restarted server answering", || async { rl.status("rc").await[4].reachable }).await;
    let back = rl.lock("rc", Duration::from_secs(10)).await.expect("lock after restart");
    let token = back.token.unwrap();
    for o in &back.instances {
        assert_eq!(o.outcome, Outcome::Granted { token: Some(token) }, "the first lock after the restart: {o}");
    }
    assert_eq!(c.servers[4].info("rc").await.and_then(|i| i.token), Some(token));
    rl.release(&back).await.unwrap();
    assert!(token > down.token.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_while_idle_counts_in_the_next_lock() {
    let mut c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let warm = rl.lock("idle", Duration::from_secs(10)).await.unwrap();
    rl.release(&warm).await.unwrap();

    // No request while it is down: the client's connection to it is idle.
    c.servers[4].kill9();
    c.servers[4].restart();
    let lock = rl.lock("idle", Duration::from_secs(10)).await.expect("lock");
    let token = lock.token.unwrap();
    let granted = lock.instances.iter().filter(|o| o.outcome == Outcome::Granted { token: Some(token) }).count();
    rl.release(&lock).await.unwrap();
    assert_eq!(granted, 5, "server 4 is up again and must count: {}", redlock::error::Outcomes(&lock.instances));
}

/// One instance whose counter runs far ahead of the others' clocks (a
/// clock minutes ahead, a FENCE its own bound allowed) issues tokens the
/// others refuse to be raised to. It is counted out like a failed instance
/// instead of failing every acquisition it takes part in; the rest agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_tokens_run_far_ahead_is_counted_out_not_fatal() {
    let lenient = common::Opts { module_args: vec!["max-token-lead".into(), "31536000000".into()], ..common::Opts::default() };
    let c = Cluster::start_opts(vec![lenient, common::Opts::default(), common::Opts::default()]);
    let far = now_unix_us() + 10 * 24 * 3600 * 1_000_000;
    let pushed = c.servers[0].ok(redis::cmd("LOCK.ACQUIRE").arg("push").arg("o").arg(1000).arg("FENCE").arg(far)).await;
    assert_eq!(pushed, redis::Value::Int(far));
    let rl = c.redlock(relaxed());
    let mut last = 0;
    for round in 0..5 {
        let lock = rl.try_lock("res", Duration::from_secs(10)).await.unwrap_or_else(|e| panic!("round {round}: {e}"));
        let token = lock.token.expect("module token");
        assert!(token > last && token < far, "round {round}: token {token} (previous {last}, far {far})");
        assert!(c.servers[0].info("res").await.is_none(), "round {round}: the far-ahead grant was released");
        for s in &c.servers[1..] {
            assert_eq!(s.info("res").await.and_then(|i| i.token), Some(token), "round {round}: the rest agree");
        }
        rl.release(&lock).await.expect("release");
        last = token;
    }
}

/// The same fallback under contention: 8 tasks on one shared handle and 4
/// separate handles, every hold recorded. Counting the far-ahead instance
/// out never lets two holders in, and tokens keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_stay_apart_while_a_far_ahead_instance_is_counted_out() {
    let lenient = common::Opts { module_args: vec!["max-token-lead".into(), "31536000000".into()], ..common::Opts::default() };
    let c = Cluster::start_opts(vec![lenient, common::Opts::default(), common::Opts::default()]);
    let far = now_unix_us() + 10 * 24 * 3600 * 1_000_000;
    c.servers[0].ok(redis::cmd("LOCK.ACQUIRE").arg("push").arg("o").arg(1000).arg("FENCE").arg(far)).await;
    let shared = c.redlock(relaxed());
    let history = common::history::History::new();
    let stop = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for client in 0..12 {
        let rl = if client < 8 { shared.clone() } else { c.redlock(relaxed()) };
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let Ok(lock) = rl.try_lock("res", Duration::from_secs(2)).await else { continue };
                let granted = Instant::now();
                let token = lock.token.expect("module token");
                assert!(token < far, "a far-ahead token was returned: {token}");
                tokio::time::sleep(MS(1)).await;
                history.record(format!("client {client}"), token, granted, Instant::now());
                rl.release(&lock).await.expect("release");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t).await.expect("client stuck").expect("client panicked");
    }
    let verdict = history.check();
    println!("far-ahead instance counted out: {} grants, {} overlaps", verdict.grants, verdict.overlaps.len());
    verdict.assert_exclusive("far-ahead instance counted out");
    assert!(verdict.grants >= 20, "only {} grants in 2 s", verdict.grants);
}

/// Servers in restart quarantine answer `TRYAGAIN restart quarantine`:
/// never a grant. Without a deadline a quarantine that outlasts the
/// retries ends them at once, naming it; with one, the client polls at
/// most once a second and takes the lock right when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_quarantine_never_grants_and_a_deadline_waits_it_out() {
    let c = Cluster::start_opts(vec![common::Opts::quarantine(2_500), common::Opts::quarantine(2_500), common::Opts::default()]);
    let rl = c.redlock(relaxed());

    let asked = Instant::now();
    let left = match rl.lock("q", Duration::from_secs(10)).await {
        Err(Error::NotAcquired { why: NotGranted::Quarantine { ms_left, instances: 2 }, attempts, outcomes, .. }) => {
            assert!(ms_left > 0 && ms_left <= 2_500, "{ms_left}");
            assert_eq!(attempts, 1, "retries cannot outlast the quarantine: none made");
            assert!(matches!(outcomes[0].outcome, Outcome::Quarantine { .. }), "{}", outcomes[0]);
            assert!(matches!(outcomes[2].outcome, Outcome::Granted { token: Some(_) }), "{}", outcomes[2]);
            Duration::from_millis(ms_left)
        }
        other => panic!("one grant and two quarantines must not be a lock: {other:?}"),
    };
    assert!(asked.elapsed() < Duration::from_millis(1_000), "gave up at once: {:?}", asked.elapsed());
    assert_eq!(c.servers[2].info("q").await, None, "the lone grant was rolled back");

    let mut retries = Vec::new();
    let lock = rl
        .lock_until_observed("q", Duration::from_secs(10), Some(Instant::now() + Duration::from_secs(20)), |r| {
            retries.push((r.why, r.delay))
        })
        .await
        .expect("granted once the quarantine ended");
    let waited = asked.elapsed();
    println!("granted after {waited:?}, retries {retries:?}");
    // An order, not a race between two commands: `left` is the earlier of
    // the two quarantines' ends, counted by the server when it answered,
    // after `asked`; no grant can come before that end. A busy machine only
    // makes `waited` longer; the 50 ms are for whole-millisecond rounding
    // and stay far from a grant during the quarantine (`left` is ~2.5 s).
    assert!(waited + Duration::from_millis(50) >= left, "granted after {waited:?}, {left:?} of quarantine left");
    assert!(retries.iter().all(|(why, _)| matches!(why, NotGranted::Quarantine { .. })), "{retries:?}");
    assert!(retries.iter().all(|(_, delay)| *delay <= Duration::from_secs(1)), "at most a second apart: {retries:?}");
    assert!(retries.len() <= 6, "polled about once a second, not every 5-15 ms: {} retries", retries.len());
    let token = lock.token.expect("token");
    let mut holding = 0;
    for (i, o) in lock.instances.iter().enumerate() {
        match o.outcome {
            // The servers' quarantines end a few ms apart.
            Outcome::Quarantine { .. } => assert_eq!(c.servers[i].info("q").await, None, "server {i}"),
            // Decided without its answer (the round does not wait for the
            // last ones): granted late or not, uncounted.
            Outcome::Refused => {}
            _ => {
                assert_eq!(o.outcome, Outcome::Granted { token: Some(token) }, "server {i}");
                assert_eq!(c.servers[i].info("q").await.and_then(|i| i.token), Some(token), "server {i}");
                holding += 1;
            }
        }
    }
    assert!(holding >= rl.quorum(), "{holding} granted");
    rl.release(&lock).await.expect("release");
}

/// A handle made with `metrics: false` counts nothing (what the metrics
/// bench compares against), while one beside it, on the same servers,
/// counts the same acquisitions: one grant, one refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_without_metrics_counts_nothing_and_one_with_them_counts_each_acquisition() {
    use redlock::metrics::{AcquireKind, AcquireOutcome};
    let c = Cluster::start(5);
    for counting in [true, false] {
        let rl = c.redlock(Settings { metrics: counting, retry_count: 0, ..Settings::default() });
        let key = format!("counted-{counting}");
        let lock = rl.try_lock(&key, Duration::from_secs(10)).await.expect("granted");
        assert!(rl.try_lock(&key, Duration::from_secs(10)).await.is_err(), "held");
        let held = rl.metrics().held;
        rl.release(&lock).await.expect("released");
        let m = rl.metrics();
        let (granted, refused) = (
            m.acquisitions(AcquireKind::Exclusive, AcquireOutcome::Granted),
            m.acquisitions(AcquireKind::Exclusive, AcquireOutcome::Refused),
        );
        let requests: u64 = m.servers.iter().map(|s| s.round_trip.count).sum();
        let want = u64::from(counting);
        assert_eq!((granted, refused, held), (want, want, i64::from(counting)), "metrics {counting}");
        assert_eq!(requests > 0, counting, "server round trips counted: {requests}");
    }
}
