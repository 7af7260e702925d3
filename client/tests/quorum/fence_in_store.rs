//! The fence enforced where the data lives, through the quorum: a holder
//! that outlived its lease (here: never extended, its validity waited
//! out, as a process paused past its lease wakes) sends the write it built
//! while it held, and the store refuses it every time once a newer holder
//! took the lock, while the newer holder's writes land. `Lock::guarded`
//! for data in a Redis that holds the lock (`LOCK.GUARD`).

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

fn quick() -> Settings {
    Settings { extend_fraction: 0.5, ..relaxed() }
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
