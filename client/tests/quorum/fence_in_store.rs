//! The fence enforced where the data lives, through the quorum: a holder
//! that outlived its lease (here: never extended, its validity waited
//! out, as a process paused past its lease wakes) sends the write it built
//! while it held, and the store refuses it every time once a newer holder
//! wrote (or raised the register), while the newer holder's writes land.
//! `Lock::fenced` for data on a Redis of its own (`LOCK.FENCED`, a token
//! register there), `Lock::guarded` for data in a Redis that holds the
//! lock (`LOCK.GUARD`). What landed is counted on the data server: every
//! write that runs appends its value to one list.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, relaxed, Cluster, Server};
use redis::Value;
use redlock::{Error, Settings};

/// Attempts of the stale holder, each of which must be refused.
const STALE_WRITES: usize = 20;

/// What `cmd` did on `server`: its reply, or its error's text.
async fn send(server: &Server, cmd: &redis::Cmd) -> Result<Value, String> {
    server.cmd(cmd).await
}

/// Waits until `lock`'s validity ran out: its holder is past its lease
/// (the next holder waits in line for the servers' leases to end).
async fn outlive(lock: &redlock::Lock) {
    eventually(Duration::from_secs(10), "the holder's validity ran out", || async { lock.remaining().is_zero() }).await;
}

/// The list every write that runs appends to.
const LOG: &str = "order:42:log";
const REGISTER: &str = "order:42:fence";

/// The register's highest token.
async fn register(data: &Server) -> Option<i64> {
    match data.ok(redis::cmd("LOCK.FENCEINFO").arg(REGISTER)).await {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("LOCK.FENCEINFO replied {other:?}"),
    }
}

/// Sends the stale holder's write `STALE_WRITES` times; each must be
/// refused as older than `newer`, the register's token.
async fn refused_every_time(data: &Server, stale: &redis::Cmd, older: i64, newer: i64) {
    let why = format!("has accepted token {newer}, not {older}");
    for attempt in 1..=STALE_WRITES {
        match send(data, stale).await {
            Err(e) if e.contains("FENCED") && e.contains("older token") && e.contains(&why) => {}
            other => panic!("the stale holder's write {attempt} of {STALE_WRITES} was not refused as older: {other:?}"),
        }
    }
}

fn quick() -> Settings {
    Settings { extend_fraction: 0.5, ..relaxed() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_past_its_lease_has_every_fenced_write_refused_on_the_data_server_once_a_newer_holder_wrote() {
    let c = Cluster::start(5);
    let data = Server::start();
    let rl = c.redlock(quick());
    let a = rl.lock("orders:42", Duration::from_millis(800)).await.expect("A takes the lock");
    let a_token = a.token.expect("module mode has a token");
    assert_eq!(send(&data, &a.fenced(REGISTER, &["RPUSH", LOG, "a1"]).expect("A's command")).await, Ok(Value::Int(1)));
    assert_eq!(register(&data).await, Some(a_token), "the register took A's token");
    // A builds its next write while it holds, then pauses past its lease.
    let stale = a.fenced(REGISTER, &["RPUSH", LOG, "a-late"]).expect("A's command, built while it holds");
    outlive(&a).await;
    assert!(matches!(a.fenced(REGISTER, &["RPUSH", LOG, "x"]), Err(Error::Expired { .. })), "an ended copy builds nothing");

    let b = rl.guard("orders:42", Duration::from_secs(30), Some(Instant::now() + Duration::from_secs(10))).await.expect("B");
    let b_token = b.token().expect("B's token");
    assert!(b_token > a_token, "B's token {b_token} is above A's {a_token}");
    assert_eq!(send(&data, &b.fenced(REGISTER, ("RPUSH", LOG, "b1")).expect("B's command")).await, Ok(Value::Int(2)));
    refused_every_time(&data, &stale, a_token, b_token).await;
    // The newer holder writes again under its token.
    assert_eq!(send(&data, &b.fenced(REGISTER, ("RPUSH", LOG, "b2")).expect("B's command")).await, Ok(Value::Int(3)));
    assert_eq!(data.list(LOG).await, ["a1", "b1", "b2"], "none of A's {STALE_WRITES} late writes landed");
    assert_eq!(register(&data).await, Some(b_token));
    b.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_holder_that_raises_the_register_shuts_the_older_out_before_its_first_write() {
    let c = Cluster::start(5);
    let data = Server::start();
    let rl = c.redlock(quick());
    let a = rl.lock("orders:42", Duration::from_millis(800)).await.expect("A takes the lock");
    let a_token = a.token.expect("A's token");
    let stale = a.fenced(REGISTER, &["RPUSH", LOG, "a-late"]).expect("A's command, built while it holds");
    outlive(&a).await;
    // Before anyone raised the register, a late write still lands: the
    // register knows no newer token (the reason to raise it first).
    assert_eq!(send(&data, &stale).await, Ok(Value::Int(1)));

    let b = rl.lock_until("orders:42", Duration::from_secs(30), Some(Instant::now() + Duration::from_secs(10))).await.expect("B");
    let b_token = b.token.expect("B's token");
    let raise = b.fenced(REGISTER, Vec::<String>::new()).expect("B's raise");
    assert_eq!(send(&data, &raise).await, Ok(Value::Int(b_token)), "without a command the register answers its token");
    refused_every_time(&data, &stale, a_token, b_token).await;
    assert_eq!(data.list(LOG).await, ["a-late"], "after the raise, none of A's writes landed");
    rl.release(&b).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_write_of_a_holder_past_its_lease_is_refused_where_the_lock_is() {
    let c = Cluster::start(5);
    let rl = c.redlock(quick());
    let data = &c.servers[0];
    let a = rl.lock("orders:42", Duration::from_millis(800)).await.expect("A takes the lock");
    assert_eq!(send(data, &a.guarded(&["SET", "order:42", "a1"]).expect("A's command")).await, Ok(Value::Okay), "A's write lands");
    // A builds its next write while it holds, then pauses past its lease.
    let stale = a.guarded(&["SET", "order:42", "a-late"]).expect("A's command, built while it holds");
    outlive(&a).await;
    assert!(matches!(a.guarded(&["SET", "order:42", "x"]), Err(Error::Expired { .. })), "an ended copy builds nothing");

    let b = rl.lock_until("orders:42", Duration::from_secs(30), Some(Instant::now() + Duration::from_secs(10))).await.expect("B");
    assert!(b.token > a.token, "B's token {:?} is above A's {:?}", b.token, a.token);
    let granted_by_data = data.info("orders:42").await.is_some_and(|i| i.owner == b.owner);
    let mut refused = 0;
    for _ in 0..STALE_WRITES {
        match send(data, &stale).await {
            Err(e) if e.contains("FENCED") => refused += 1,
            other => panic!("A's late write was not fenced: {other:?}"),
        }
    }
    assert_eq!(refused, STALE_WRITES, "every write of the stale holder is refused");
    if granted_by_data {
        assert_eq!(send(data, &b.guarded(&["SET", "order:42", "b1"]).expect("B's command")).await, Ok(Value::Okay));
        assert_eq!(data.get("order:42").await.as_deref(), Some("b1"), "only B's write landed after A's first");
    } else {
        assert_eq!(data.get("order:42").await.as_deref(), Some("a1"), "nothing of A's landed after its lease");
    }
    rl.release(&b).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holds_and_permits_are_guarded_on_their_own_but_give_no_register_a_token() {
    let c = Cluster::start(5);
    let rl = c.redlock(quick());
    let data = &c.servers[0];
    let reader = rl.try_lock_shared("schema", Duration::from_secs(30)).await.expect("a shared hold");
    let other = rl.try_lock_shared("schema", Duration::from_secs(30)).await.expect("another shared hold");
    let permit = rl.try_permit("pool", 3, Duration::from_secs(30)).await.expect("a permit");
    assert!(permit.permit && !reader.permit, "the permit hold says so");
    for (hold, what) in [(&reader, "shared hold"), (&permit, "semaphore's permit")] {
        match hold.fenced(REGISTER, &["SET", "k", "v"]) {
            Err(e @ Error::Unfenced { .. }) => assert!(e.to_string().contains(what), "{e}"),
            other => panic!("a {what} fenced a write: {other:?}"),
        }
        // Each holder's own hold is current where it was granted.
        let value = format!("by {what}");
        assert_eq!(send(data, &hold.guarded(("SET", "guarded", value.as_str())).expect("guarded")).await, Ok(Value::Okay));
        assert_eq!(data.get("guarded").await.as_deref(), Some(value.as_str()));
    }
    // The permit is guarded by its slot's key, which LOCK.GUARD checks.
    let slot = permit.resources.names().first().expect("a slot").clone();
    assert!(slot.starts_with("pool:permit:"), "{slot}");
    assert_eq!(permit.guarded_prefix().expect("prefix")[1], slot);
    // A released hold's command, sent anyway, is refused where it was held.
    let stale = reader.guarded(&["SET", "guarded", "late"]).expect("built while held");
    rl.release(&reader).await.expect("release");
    assert!(send(data, &stale).await.is_err_and(|e| e.contains("FENCED")), "a released shared hold is fenced");
    assert_eq!(data.get("guarded").await.as_deref(), Some("by semaphore's permit"));
    rl.release(&other).await.expect("release");
    rl.release(&permit).await.expect("release");
}
