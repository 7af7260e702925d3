//! `Redlock::ask` (`LOCK.ASK` on every server) and `LockGuard::asks`: a
//! holder hears each ask for its own hold once although five servers
//! announce it, never one for another holder, still once after two of its
//! subscriptions were killed; an ask of a free lock asks nobody; a holder
//! that lets go on an ask lets a waiter in.

use crate::common;

use std::time::{Duration, Instant};

use common::{relaxed, Cluster};
use futures::StreamExt;
use redlock::{AskRequest, LockGuard};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

const WAIT: Duration = Duration::from_secs(10);

/// The guard's asks, heard in a task of their own and sent on; returns
/// once `subscribers` listen on `resource`'s channel on every server.
async fn listening(c: &Cluster, guard: &LockGuard, resource: &str, subscribers: i64) -> UnboundedReceiver<AskRequest> {
    let (sender, receiver) = unbounded_channel();
    let mut asks = Box::pin(guard.asks());
    tokio::spawn(async move {
        while let Some(ask) = asks.next().await {
            if sender.send(ask).is_err() {
                return;
            }
        }
    });
    common::subscribed_everywhere(c, resource, subscribers, WAIT, "the listeners subscribed").await;
    receiver
}

/// The next ask's message.
async fn next(asks: &mut UnboundedReceiver<AskRequest>) -> Option<String> {
    let ask = tokio::time::timeout(WAIT, asks.recv()).await.expect("an ask in time").expect("the asks go on");
    ask.message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_hears_each_ask_once_with_its_message() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let guard = rl.guard("asked", Duration::from_secs(10), None).await.expect("guard");
    let mut asks = listening(&c, &guard, "asked", 1).await;

    let operator = c.redlock(relaxed());
    let asked = operator.ask("asked", Some("deploy at 10:00")).await.expect("ask");
    assert_eq!((asked.answered, asked.holders), (5, 1), "{asked:?}");
    assert_eq!(next(&mut asks).await.as_deref(), Some("deploy at 10:00"));
    // Five servers announced it: the next one heard is the next ask, not
    // another server's copy of the first.
    operator.ask("asked", None).await.expect("ask again");
    assert_eq!(next(&mut asks).await, None, "the second ask, without a message");
    operator.ask("asked", Some("third")).await.expect("ask a third time");
    assert_eq!(next(&mut asks).await.as_deref(), Some("third"));
    assert!(!guard.is_lost(), "an ask changes nothing");
    guard.release().await.expect("release");
    // Its last hold released, the guard's asks end.
    assert!(tokio::time::timeout(WAIT, asks.recv()).await.expect("the end in time").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_hears_no_ask_meant_for_another_holder() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    // Two shared holders: every server announces each ask twice, once per
    // owner.
    let one = rl.guard_shared("both", Duration::from_secs(10), None).await.expect("one");
    let two = rl.guard_shared("both", Duration::from_secs(10), None).await.expect("two");
    let mut one_asks = listening(&c, &one, "both", 1).await;
    let mut two_asks = listening(&c, &two, "both", 2).await;

    // An ask naming another owner, as a server would announce it.
    for s in &c.servers {
        let channel = redlock::transport::changes_channel(0, "both");
        s.cmd(redis::cmd("PUBLISH").arg(&channel).arg("ask 1 13 someone-else not for you")).await.expect("publish");
    }
    let asked = rl.ask("both", Some("first")).await.expect("ask");
    assert_eq!(asked.holders, 2, "{asked:?}");
    rl.ask("both", Some("second")).await.expect("ask");
    for asks in [&mut one_asks, &mut two_asks] {
        assert_eq!(next(asks).await.as_deref(), Some("first"));
        assert_eq!(next(asks).await.as_deref(), Some("second"), "the other holder's copies are not this one's");
    }
    one.release().await.expect("release one");
    two.release().await.expect("release two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_of_a_free_lock_asks_nobody_and_without_a_quorum_is_an_error() {
    let mut c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let asked = rl.ask("free", Some("anyone?")).await.expect("ask");
    assert_eq!((asked.answered, asked.holders), (5, 0), "{asked:?}");
    let lock = rl.try_lock("free", Duration::from_secs(10)).await.expect("lock");
    for server in &mut c.servers[..3] {
        server.kill9();
    }
    match rl.ask("free", None).await {
        Err(redlock::Error::NoQuorum { what: "ask", outcomes, .. }) => {
            let done = outcomes.iter().filter(|o| o.outcome == redlock::Outcome::Done).count();
            assert_eq!(done, 2, "{outcomes:?}");
        }
        other => panic!("expected no quorum: {other:?}"),
    }
    drop(lock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_after_two_subscriptions_were_killed_is_heard_once() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let guard = rl.guard("killed", Duration::from_secs(10), None).await.expect("guard");
    let mut asks = listening(&c, &guard, "killed", 1).await;
    rl.ask("killed", Some("one")).await.expect("ask");
    assert_eq!(next(&mut asks).await.as_deref(), Some("one"));

    for s in &c.servers[..2] {
        assert_eq!(crate::watch::kill_subscriptions(s).await, 1, "the guard's subscription on {}", s.addr());
    }
    // Heard from the three others, whether or not the two are back yet.
    rl.ask("killed", Some("two")).await.expect("ask");
    assert_eq!(next(&mut asks).await.as_deref(), Some("two"));
    common::subscribed_everywhere(&c, "killed", 1, WAIT, "the listeners subscribed").await;
    // Every server heard again, two of them a count behind: still once.
    rl.ask("killed", Some("three")).await.expect("ask");
    rl.ask("killed", Some("four")).await.expect("ask");
    assert_eq!(next(&mut asks).await.as_deref(), Some("three"));
    assert_eq!(next(&mut asks).await.as_deref(), Some("four"));
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_lets_go_when_asked_lets_a_waiter_in() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let guard = rl.guard("handed", Duration::from_secs(10), None).await.expect("guard");
    let held = guard.token().expect("module token");
    let mut asks = listening(&c, &guard, "handed", 1).await;

    let (events, mut order) = unbounded_channel::<&'static str>();
    let waiter = {
        let (waiting, events) = (c.redlock(relaxed()), events.clone());
        tokio::spawn(async move {
            let lock = waiting.lock_until("handed", Duration::from_secs(10), Some(Instant::now() + WAIT)).await;
            let _ = events.send("granted");
            lock.map(|l| (waiting, l))
        })
    };
    common::eventually(WAIT, "the waiter to wait on every server", || async {
        futures::future::join_all(c.servers.iter().map(|s| s.counter("wait_started"))).await.iter().all(|&n| n >= 1)
    })
    .await;
    let holder = tokio::spawn(async move {
        let ask = asks.recv().await;
        let _ = events.send("asked");
        guard.release().await.map(|_| ask)
    });

    let asked = c.redlock(relaxed()).ask("handed", Some("my turn")).await.expect("ask");
    assert_eq!(asked.holders, 1, "the waiter is not asked: {asked:?}");
    let ask = tokio::time::timeout(WAIT, holder).await.expect("the holder in time").expect("task").expect("released");
    assert_eq!(ask.and_then(|a| a.message).as_deref(), Some("my turn"));
    let (waiting, next) = tokio::time::timeout(WAIT, waiter).await.expect("the waiter in time").expect("task").expect("granted");
    assert!(next.token.expect("token") > held);
    let mut seen = Vec::new();
    while let Ok(event) = order.try_recv() {
        seen.push(event);
    }
    assert_eq!(seen, ["asked", "granted"]);
    waiting.release(&next).await.expect("release");
}
