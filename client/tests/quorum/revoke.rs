//! `Redlock::revoke` (`LOCK.REVOKE` on every server): a held lock taken
//! away goes to the next in line with a larger token, its holder's guard
//! is lost with the cause `Revoked`, a named holder's hold alone ends, and
//! without a quorum the revocation is an error.

use crate::common;

use std::time::{Duration, Instant};

use common::{relaxed, Cluster};
use redlock::metrics::LossCause;
use redlock::transport::{Ask, Share};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_hold_goes_to_the_next_in_line_and_its_guard_is_lost_as_revoked() {
    let c = Cluster::start(5);
    let holder = c.redlock(relaxed());
    let guard = holder.guard("revoked", Duration::from_secs(3), None).await.expect("guard");
    let held = guard.token().expect("module token");

    let waiting = c.redlock(relaxed());
    let waiter = {
        let waiting = waiting.clone();
        tokio::spawn(async move { waiting.lock_until("revoked", Duration::from_secs(10), Some(Instant::now() + WAIT)).await })
    };
    common::eventually(WAIT, "the waiter to wait on every server", || async {
        futures::future::join_all(c.servers.iter().map(|s| s.counter("wait_started"))).await.iter().all(|&n| n >= 1)
    })
    .await;

    let operator = c.redlock(relaxed());
    let revoked = operator.revoke("revoked", None).await.expect("revoke");
    assert!(revoked.token > held, "{revoked:?} after token {held}");
    assert_eq!(revoked.ended, 5, "the hold on every server: {revoked:?}");
    assert!(revoked.owners.is_empty(), "{revoked:?}");

    // The fence is one above the revoked hold's token.
    assert_eq!(revoked.fence, Some(held + 1), "{revoked:?}");
    // The waiter is granted at once, at or above the fence: its writes pass
    // a register raised to it, the revoked holder's do not. (Not always
    // above `token`, the highest any server issued: a server outside the
    // waiter's quorum may count higher.)
    let next = tokio::time::timeout(WAIT, waiter).await.expect("the waiter in time").expect("task").expect("granted");
    assert!(next.token.expect("token") > held, "{:?} after {revoked:?}", next.token);

    // The holder hears it at its next extension, within its ttl, as revoked.
    tokio::time::timeout(Duration::from_secs(3), guard.lost()).await.expect("the guard lost within its ttl");
    assert_eq!(guard.loss_cause(), Some(LossCause::Revoked));
    assert_eq!(holder.metrics().lost(LossCause::Revoked), 1);
    assert_eq!(holder.metrics().lost(LossCause::Refused), 0);
    waiting.release(&next).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_named_holder_ends_its_hold_alone() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let resource = redlock::Resources::one("named");
    let alice = rl.lock_as(&resource, "alice", Duration::from_secs(10), Ask::new(Share::Shared), None).await.expect("alice");
    let bob = rl.lock_as(&resource, "bob", Duration::from_secs(10), Ask::new(Share::Shared), None).await.expect("bob");

    let revoked = rl.revoke("named", Some("alice")).await.expect("revoke");
    assert_eq!(revoked.owners, std::slice::from_ref(&alice.owner), "the round's owner of alice, found on the servers");
    assert_eq!(revoked.fence, alice.token.map(|t| t + 1), "one above alice's token, whatever bob's");
    assert_eq!(revoked.ended, 5, "{revoked:?}");
    for status in rl.holders("named").await {
        let owners: Vec<&str> = status.holders.iter().map(|h| h.owner.as_str()).collect();
        assert_eq!(owners, [bob.owner.as_str()], "{}: bob keeps his hold", status.server);
    }
    // Nobody by that name any more: the token is still issued, nothing ends.
    let again = rl.revoke("named", Some("alice")).await.expect("revoke again");
    assert_eq!((again.ended, again.owners.clone(), again.fence), (0, vec!["alice".to_string()], None), "{again:?}");
    assert!(again.token > revoked.token);
    rl.release(&bob).await.expect("release bob");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_without_a_quorum_is_an_error_and_ends_holds_where_it_reached() {
    let mut c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let lock = rl.try_lock("unrevoked", Duration::from_secs(10)).await.expect("lock");
    for server in &mut c.servers[..3] {
        server.kill9();
    }
    match rl.revoke("unrevoked", None).await {
        Err(redlock::Error::NoQuorum { what: "revocation", outcomes, .. }) => {
            let done = outcomes.iter().filter(|o| o.outcome == redlock::Outcome::Done).count();
            assert_eq!(done, 2, "{outcomes:?}");
        }
        other => panic!("expected no quorum: {other:?}"),
    }
    for server in &c.servers[3..] {
        assert!(server.info("unrevoked").await.is_none(), "{}: revoked where it was reached", server.addr());
    }
    drop(lock);
}
