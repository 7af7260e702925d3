//! The FENCE write-back when an instance answers above the token asked for.
//!
//! An instance never gives two locks one token: a re-grant that FENCE
//! raises takes a token from its counter, `max(counter + 1, min-token)`.
//! An instance that issued other tokens between its grant and the
//! write-back so answers above the quorum's maximum T. It holds a token of
//! at least T, which is what ordering needs: it counts, the lock's token is
//! T, and no further round chases its answer.

use crate::common;

use std::time::Duration;

use common::forwarder::Forwarder;
use common::{eventually, now_unix_us, relaxed, Cluster};
use redlock::{Redlock, Settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_answering_above_the_written_back_token_still_counts() {
    let c = Cluster::start(3);
    let (a, b, z) = (&c.servers[0], &c.servers[1], &c.servers[2]);
    // A's counter well above B's and Z's, so A issues the maximum and B is
    // written back to. Z stays out of this acquisition (held by another
    // owner), so the quorum of 2 needs B.
    let ahead = now_unix_us() + 20_000_000;
    a.ok(redis::cmd("LOCK.ACQUIRE").arg("push").arg("x").arg(60_000).arg("FENCE").arg(ahead)).await;
    z.ok(redis::cmd("LOCK.ACQUIRE").arg("f").arg("someone-else").arg(60_000)).await;
    // B's replies come late: between its grant and the write-back there
    // is time to issue a token above A's on B.
    let slow = Forwarder::start_delayed(b.port, 1000..=1000).await;
    let settings = Settings { request_timeout: Duration::from_secs(10), connect_timeout: Duration::from_secs(10), ..relaxed() };
    let rl = Redlock::new(&[a.url(), slow.url(), z.url()], settings).expect("handle");
    let _ = rl.status("f").await;
    let locking = tokio::spawn(async move {
        let got = rl.try_lock("f", Duration::from_secs(30)).await;
        (rl, got)
    });
    eventually(Duration::from_secs(10), "A and B granted f", || async { a.info("f").await.is_some() && b.info("f").await.is_some() }).await;
    let a_token = a.info("f").await.and_then(|i| i.token).expect("A's token");
    let b_token = b.info("f").await.and_then(|i| i.token).expect("B's token");
    assert!(a_token > b_token, "A issued the maximum ({a_token} vs {b_token})");
    let beyond = a_token + 1000;
    b.ok(redis::cmd("LOCK.ACQUIRE").arg("other").arg("y").arg(60_000).arg("FENCE").arg(beyond)).await;

    let (rl, got) = locking.await.expect("the locking task");
    let lock = got.expect("granted: B's larger answer holds at least A's token, so B counts");
    let token = lock.token.expect("module mode has a token");
    assert_eq!(token, a_token, "the lock's token is the maximum of the grants, not B's later answer");
    assert_eq!(lock.fenced, 1, "B was raised once, and nobody chased its answer");
    assert_eq!(a.info("f").await.and_then(|i| i.token), Some(a_token), "A keeps its token");
    let on_b = b.info("f").await.and_then(|i| i.token).expect("B holds f");
    assert_eq!(on_b, beyond + 1, "B's fresh token, the next above the one it issued");
    assert!(on_b >= token, "every counted instance holds the lock's token or more");
    assert_eq!(b.info("other").await.and_then(|i| i.token), Some(beyond), "no two locks on B share a token");
    rl.release(&lock).await.expect("release");

    // Ordering across the quorum: the next holder of f, whichever majority
    // grants it, gets a token above the first one's.
    z.ok(redis::cmd("LOCK.RELEASE").arg("f").arg("someone-else")).await;
    let rl = Redlock::new(&[a.url(), b.url(), z.url()], relaxed()).expect("handle");
    let next = rl.try_lock("f", Duration::from_secs(30)).await.expect("the next holder");
    assert!(next.token.expect("token") > token, "the next holder's token {:?} after {token}", next.token);
    rl.release(&next).await.expect("release");
}
