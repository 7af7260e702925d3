//! Group membership on five servers (`redlock::Group`): members join with
//! values and are listed as a quorum agrees, with their tokens; a
//! proclamation changes a member's value; a member leaves, and one whose
//! connections die is listed no more a lock-delay later; the group's
//! watch sees the joins and leaves in the order they happened; the list
//! answers from a quorum and not from fewer.

use crate::common;

use std::time::Duration;

use common::{eventually, relaxed, Cluster};
use futures::StreamExt;
use redlock::members::{members_of, resource_of};
use redlock::{Change, ChangeKind, Error, Group, Member, Membership, Settings};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

const WAIT: Duration = Duration::from_secs(10);

fn bound() -> Settings {
    Settings { release_on_disconnect: true, ..relaxed() }
}

/// A member's handle of group `name` with connections of its own, so its
/// connections can die alone.
fn member_handle(c: &Cluster, name: &str, ttl: Duration) -> Group {
    Group::new(c.redlock(bound()), name).and_then(|g| g.with_ttl(ttl)).expect("group")
}

fn listed(m: &Membership) -> Member {
    Member { owner: m.owner().to_string(), token: m.token(), value: m.value() }
}

/// The group's changes, sent on from a task of their own; returns once
/// every server has the watcher's subscription.
async fn watching(c: &Cluster, group: &Group) -> UnboundedReceiver<Change> {
    let (tx, rx) = unbounded_channel();
    let mut stream = Box::pin(group.watch());
    tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            if tx.send(item.expect("a change, not an error")).is_err() {
                return;
            }
        }
    });
    let channel = redlock::transport::changes_channel(0, group.resource());
    eventually(WAIT, "the watcher subscribed everywhere", || async {
        let mut n = 0;
        for s in &c.servers {
            if let Ok(redis::Value::Array(v)) = s.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel)).await {
                n += usize::from(matches!(v.get(1), Some(redis::Value::Int(k)) if *k >= 1));
            }
        }
        n == c.servers.len()
    })
    .await;
    rx
}

async fn next(changes: &mut UnboundedReceiver<Change>, what: &str) -> (ChangeKind, String, Option<String>) {
    let c = tokio::time::timeout(WAIT, changes.recv()).await.unwrap_or_else(|_| panic!("no change seen: {what}")).expect("watch");
    (c.kind, c.owner, c.value)
}

fn is_leave(kind: ChangeKind) -> bool {
    matches!(kind, ChangeKind::Release | ChangeKind::Expire | ChangeKind::Session | ChangeKind::Revoke)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_proclaim_leave_and_die_as_the_list_and_the_watch_agree() {
    let c = Cluster::start(5);
    for s in &c.servers {
        s.ok(redis::cmd("CONFIG").arg("SET").arg("redislock.notify").arg("redlock:group:*")).await;
    }
    let ttl = Duration::from_millis(1_500);
    let reader = c.redlock(relaxed());
    let observer = member_handle(&c, "web", ttl);
    let mut changes = watching(&c, &observer).await;
    assert_eq!(members_of(&reader, "web").await.expect("read"), vec![], "nobody joined yet");

    let a = member_handle(&c, "web", ttl).join("10.0.0.1:80").await.expect("a joins");
    let b = member_handle(&c, "web", ttl).join("10.0.0.2:80").await.expect("b joins");
    let d = member_handle(&c, "web", ttl).join("10.0.0.3:80").await.expect("d joins");
    assert!(a.token() < b.token() && b.token() < d.token(), "tokens grow: {} {} {}", a.token(), b.token(), d.token());
    assert_eq!(members_of(&reader, "web").await.expect("read"), vec![listed(&a), listed(&b), listed(&d)], "all three, in join order");
    for (m, value) in [(&a, "10.0.0.1:80"), (&b, "10.0.0.2:80"), (&d, "10.0.0.3:80")] {
        assert_eq!(next(&mut changes, "a join").await, (ChangeKind::Grant, m.owner().to_string(), Some(value.to_string())));
    }

    b.proclaim("10.0.0.2:81").await.expect("proclaimed");
    assert_eq!(b.value(), "10.0.0.2:81");
    let now = observer.members().await.expect("read");
    assert_eq!(now, vec![listed(&a), Member { owner: b.owner().into(), token: b.token(), value: "10.0.0.2:81".into() }, listed(&d)]);
    assert_eq!(next(&mut changes, "b's new value").await, (ChangeKind::Proclaim, b.owner().to_string(), Some("10.0.0.2:81".into())));
    // A value the servers refuse is a rejection, and nothing changes.
    assert!(matches!(b.proclaim(&"v".repeat(300)).await, Err(Error::Rejected { .. })));
    assert_eq!(observer.members().await.expect("read"), now);

    let d_owner = d.owner().to_string();
    d.leave().await.expect("d leaves");
    assert_eq!(observer.members().await.expect("read"), vec![listed(&a), listed(&b)], "d left at once");
    let (kind, owner, _) = next(&mut changes, "d's leave").await;
    assert!(kind == ChangeKind::Release && owner == d_owner, "{kind:?} {owner}");

    // a's connections die on every server: it is listed no more a
    // lock-delay later, and learns of it itself.
    let ids = a.connections();
    assert!(ids.iter().all(Option::is_some), "bound everywhere: {ids:?}");
    for (server, id) in c.servers.iter().zip(ids.iter().flatten()) {
        server.ok(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(*id)).await;
    }
    tokio::time::timeout(WAIT, a.lost()).await.expect("a learns it is lost");
    eventually(WAIT, "a listed no more", || async { observer.members().await.ok() == Some(vec![listed(&b)]) }).await;
    // Its lease cut to the lock-delay (its connections closed) on a
    // quorum; once that ended, the next write on the group (b's extension,
    // or b's release) announces a's end first.
    let (kind, owner, _) = next(&mut changes, "a's cut").await;
    assert!(kind == ChangeKind::Cut && owner == a.owner(), "{kind:?} {owner}");

    let (a_owner, b_owner) = (a.owner().to_string(), b.owner().to_string());
    drop(a);
    drop(b);
    eventually(WAIT, "a dropped membership leaves", || async { observer.members().await.ok() == Some(vec![]) }).await;
    let (kind, owner, _) = next(&mut changes, "a's end").await;
    assert!(is_leave(kind) && owner == a_owner, "a's end before b's leave: {kind:?} {owner}");
    let (kind, owner, _) = next(&mut changes, "b's leave").await;
    assert!(is_leave(kind) && owner == b_owner, "{kind:?} {owner}");
    assert!(tokio::time::timeout(Duration::from_millis(300), changes.recv()).await.is_err(), "nothing more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_answer_from_a_quorum_and_not_from_fewer() {
    let mut c = Cluster::start(5);
    let group = member_handle(&c, "q", Duration::from_secs(30));
    let m = group.join("me").await.expect("joins");
    let reader = c.redlock(relaxed());
    c.servers[0].freeze();
    c.servers[1].freeze();
    assert_eq!(members_of(&reader, "q").await.expect("three answer"), vec![listed(&m)]);
    c.servers[2].freeze();
    assert!(matches!(members_of(&reader, "q").await, Err(Error::NoQuorum { .. })));
    for s in &mut c.servers {
        s.thaw();
    }
    drop(m);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_on_fewer_than_a_quorum_is_not_listed() {
    let c = Cluster::start(5);
    let m = member_handle(&c, "few", Duration::from_secs(30)).join("me").await.expect("joins");
    let reader = c.redlock(relaxed());
    // Released behind the client's back on three servers: two still list it.
    for s in &c.servers[..3] {
        s.ok(redis::cmd("LOCK.RELEASE").arg(resource_of("few")).arg(m.owner())).await;
    }
    assert_eq!(members_of(&reader, "few").await.expect("read"), vec![]);
    assert!(matches!(Group::new(c.redlock(relaxed()), "few"), Err(Error::Config(_))), "a member's handle must bind its holds");
}
