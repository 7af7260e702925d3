//! `LOCK.ACQUIRE ... SESSION [DELAY ms]` through `redlock serve`: the hold
//! bound to the client's connection to the endpoint, kept extended while
//! it lives, released (or cut to the delay) when it closes, and its
//! connection closed when the hold may be lost.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, Cluster};

use crate::serve_endpoint::{endpoint, endpoint_on, Raw};

fn is_token(reply: &str) -> bool {
    reply.strip_prefix(':').and_then(|t| t.trim().parse::<i64>().ok()).is_some_and(|t| t > 0)
}

/// Whether a quorum of the servers lists a holder of `key` whose owner
/// begins with `owner:` (the endpoint's form).
async fn held_by(c: &Cluster, key: &str, owner: &str) -> bool {
    let prefix = format!("{owner}:");
    c.infos(key).await.iter().filter(|i| i.as_ref().is_some_and(|i| i.owner.starts_with(&prefix))).count() >= 3
}

/// A SESSION hold with a ttl of 2 s is still held 3 s later while
/// its connection lives (the endpoint extends it), and refused to another
/// owner; closing the connection of a SESSION hold with a ttl of 10 s
/// frees the lock at once, not when the lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_session_hold_lives_with_its_connection() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut a = Raw::connect(e.port).await;
    let mut b = Raw::connect(e.port).await;
    assert!(is_token(&a.call(&["LOCK.ACQUIRE", "s", "owner-a", "2000", "SESSION"]).await));
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(held_by(&c, "s", "owner-a").await, "held past its ttl while the connection lives");
    assert_eq!(b.call(&["LOCK.ACQUIRE", "s", "owner-b", "5000"]).await, "$-1\r\n", "another owner refused");
    assert_eq!(a.call(&["LOCK.RELEASE", "s", "owner-a"]).await, ":1\r\n");

    let mut long = Raw::connect(e.port).await;
    assert!(is_token(&long.call(&["LOCK.ACQUIRE", "s", "owner-long", "10000", "SESSION"]).await));
    assert!(held_by(&c, "s", "owner-long").await);
    let closed = Instant::now();
    drop(long);
    eventually(Duration::from_secs(3), "the lock released at the disconnect", || async { c.infos("s").await.iter().all(Option::is_none) })
        .await;
    assert!(closed.elapsed() < Duration::from_secs(5), "released at the close, not at the lease's end");
    let next = b.call(&["LOCK.ACQUIRE", "s", "owner-b", "5000"]).await;
    assert!(is_token(&next), "free for the next owner: {next:?}");
}

/// `DELAY`: after the disconnect the lock stays held for the delay (1.5
/// s), then frees, long before its lease (10 s) would have ended; a waiter
/// is granted in between. Without `SESSION`, `DELAY` is refused as the
/// module refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_session_delay_keeps_the_lock_for_the_delay() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut b = Raw::connect(e.port).await;
    assert_eq!(b.call(&["LOCK.ACQUIRE", "d", "o", "1000", "DELAY", "10"]).await, "-ERR syntax error: DELAY needs SESSION\r\n");
    let mut a = Raw::connect(e.port).await;
    assert!(is_token(&a.call(&["LOCK.ACQUIRE", "d", "owner-a", "10000", "SESSION", "DELAY", "1500"]).await));
    let closed = Instant::now();
    drop(a);
    assert!(is_token(&b.call(&["LOCK.ACQUIRE", "d", "owner-b", "5000", "WAIT", "9000"]).await));
    let waited = closed.elapsed();
    assert!(waited >= Duration::from_millis(1200), "granted {waited:?} after the disconnect, within the delay of 1.5 s");
    assert!(waited < Duration::from_millis(8000), "granted {waited:?} after the disconnect: the lease of 10 s was not cut");
}

/// A release from another connection ends the binding: the bound
/// connection is not closed by the extensions that then fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_session_released_elsewhere_closes_nothing() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut a = Raw::connect(e.port).await;
    let mut b = Raw::connect(e.port).await;
    assert!(is_token(&a.call(&["LOCK.ACQUIRE", "r", "owner-a", "1500", "SESSION"]).await));
    assert_eq!(b.call(&["LOCK.RELEASE", "r", "owner-a"]).await, ":1\r\n");
    // Past the first extensions, which now find nothing bound.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(a.call(&["PING"]).await, "+PONG\r\n", "the bound connection still served");
    assert!(!held_by(&c, "r", "owner-a").await);
}

/// When the extensions of a bound hold fail (three of five servers
/// paused), the hold may be lost: the endpoint closes its connection, the
/// signal a Redis client hears; a connection without a bound hold stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_session_hold_that_may_be_lost_closes_its_connection() {
    let mut c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut bound = Raw::connect(e.port).await;
    let mut plain = Raw::connect(e.port).await;
    assert!(is_token(&bound.call(&["LOCK.ACQUIRE", "l", "owner-a", "900", "SESSION"]).await));
    assert!(is_token(&plain.call(&["LOCK.ACQUIRE", "other", "owner-p", "900"]).await));
    for s in c.servers.iter_mut().take(3) {
        s.freeze();
    }
    let closed = bound.closed().await;
    for s in c.servers.iter_mut().take(3) {
        s.thaw();
    }
    assert!(closed, "the connection of a hold that may be lost is closed");
    assert_eq!(plain.call(&["PING"]).await, "+PONG\r\n", "a connection without a bound hold stays");
}

/// A bound hold whose extension neither succeeds nor fails before its
/// validity ends (three of five servers paused, a request timeout far
/// longer than the ttl): the endpoint closes the connection at the end of
/// the validity, before any server may give the lock to another, not when
/// the extension's failure comes back (10 s after it was sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_session_connection_closes_when_the_validity_ends_before_an_extension_answers() {
    let mut c = Cluster::start(5);
    let slow = ["--request-timeout", "10s", "--connect-timeout", "1s", "--retry-delay", "5ms..15ms"];
    let e = endpoint_on(&c, &slow, 0, &[], &[]).await;
    let mut bound = Raw::connect(e.port).await;
    let sent = Instant::now();
    assert!(is_token(&bound.call(&["LOCK.ACQUIRE", "l", "owner-a", "3000", "SESSION"]).await));
    for s in c.servers.iter_mut().take(3) {
        s.freeze();
    }
    let closed = bound.closed().await;
    let after = sent.elapsed();
    for s in c.servers.iter_mut().take(3) {
        s.thaw();
    }
    assert!(closed, "the connection of a hold that may be lost is closed");
    // The lease ends on the servers 3 s after the request at the earliest;
    // the failed extension would come back 10 s after it was sent.
    assert!(after < Duration::from_millis(3_000 + 1_000), "closed {after:?} after the request: after the lease could end");
    assert!(after >= Duration::from_millis(2_000), "closed {after:?} after the request: before the validity ended");
}
