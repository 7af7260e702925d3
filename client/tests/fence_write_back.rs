//! The FENCE write-back when an instance answers above the token asked for.
//!
//! An instance never gives two locks one token: a re-grant that FENCE
//! raises takes a token from its counter, `max(counter + 1, min-token)`.
//! An instance that issued other tokens between its grant and the
//! write-back so answers above the quorum's maximum; the client then raises
//! the others to that answer instead of counting the instance out.

mod common;

use std::time::Duration;

use common::proxy::DelayProxy;
use common::{eventually, now_unix_us, relaxed, Cluster};
use redlock::{Outcome, Redlock, Settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_answering_above_the_written_back_token_raises_the_others() {
    let c = Cluster::start(2);
    let (a, b) = (&c.servers[0], &c.servers[1]);
    // A's counter well above B's, so A issues the maximum and B is the one
    // written back to.
    let ahead = now_unix_us() + 20_000_000;
    a.ok(redis::cmd("LOCK.ACQUIRE").arg("push").arg("x").arg(60_000).arg("FENCE").arg(ahead)).await;
    // B's replies come late: between its grant and the write-back there
    // is time to issue a token above A's on B.
    let slow = DelayProxy::start(b.port, 1000..=1000).await;
    let settings = Settings {
        request_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        ..relaxed()
    };
    let rl = Redlock::new(&[a.url(), slow.url()], settings).expect("handle");
    let _ = rl.status("f").await;
    let locking = tokio::spawn(async move {
        let got = rl.try_lock("f", Duration::from_secs(30)).await;
        (rl, got)
    });
    eventually(Duration::from_secs(10), "both instances granted f", || async {
        a.info("f").await.is_some() && b.info("f").await.is_some()
    })
    .await;
    let a_token = a.info("f").await.and_then(|i| i.token).expect("A's token");
    let b_token = b.info("f").await.and_then(|i| i.token).expect("B's token");
    assert!(a_token > b_token, "A issued the maximum ({a_token} vs {b_token})");
    let beyond = a_token + 1000;
    b.ok(redis::cmd("LOCK.ACQUIRE").arg("other").arg("y").arg(60_000).arg("FENCE").arg(beyond)).await;

    let (rl, got) = locking.await.expect("the locking task");
    let lock = got.expect("granted: B's larger answer is written back to A, not counted as a failure");
    let token = lock.token.expect("module mode has a token");
    assert_eq!(token, beyond + 1, "B's fresh token, the next above the one it issued");
    assert_eq!(lock.fenced, 2, "both instances were raised once");
    for o in &lock.instances {
        assert_eq!(o.outcome, Outcome::Granted { token: Some(token) }, "{o}");
    }
    for (who, s) in [("A", a), ("B", b)] {
        assert_eq!(s.info("f").await.and_then(|i| i.token), Some(token), "{who} holds the agreed token");
    }
    assert_eq!(b.info("other").await.and_then(|i| i.token), Some(beyond), "no two locks on B share a token");
    rl.release(&lock).await.expect("release");
}
