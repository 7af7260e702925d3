//! The module's other lock commands through `redlock serve`: semaphores
//! (`SHARED LIMIT n`), values (`VALUE`), sets (`LOCK.MACQUIRE`,
//! `MRELEASE`, `MEXTEND`) and `LOCK.WAITERS`, each answered as a module
//! server answers it.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, Cluster};

use crate::serve_endpoint::{endpoint, token_of, Raw, REPLY};

/// Servers whose LOCK.INFO of `key` counts a waiter.
async fn waited_on(c: &Cluster, key: &str) -> usize {
    c.infos(key).await.iter().filter(|i| i.as_ref().is_some_and(|i| i.waiters >= 1)).count()
}

/// Three clients through the endpoint share a semaphore of 2, each taking
/// and releasing it in turn with `WAIT`: never more than two hold at once,
/// and two do at some point (a semaphore, not a lock). Then, with two
/// holding, a third is refused without `WAIT`, waits with it, and gets in
/// when one releases; a holder's re-grant keeps its token, and its extend
/// and release act on its permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_semaphore_of_two_admits_two_and_the_third_waits_its_turn() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..3 {
        let (holding, most, port) = (Arc::clone(&holding), Arc::clone(&most), e.port);
        workers.push(tokio::spawn(async move {
            let mut con = Raw::connect(port).await;
            let owner = format!("worker-{w}");
            for _ in 0..6 {
                let reply = con.call(&["LOCK.ACQUIRE", "pool", &owner, "10000", "SHARED", "LIMIT", "2", "WAIT", "9000"]).await;
                token_of(&reply);
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(40)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(con.call(&["LOCK.RELEASE", "pool", &owner]).await, ":1\r\n", "{owner} releases its permit");
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} held a semaphore of 2 at once");
    assert_eq!(most, 2, "two holders at once at some point: a semaphore of 2, not a lock");

    let (mut a, mut b, mut third) = (Raw::connect(e.port).await, Raw::connect(e.port).await, Raw::connect(e.port).await);
    let ta = token_of(&a.call(&["LOCK.ACQUIRE", "pool", "a", "30000", "SHARED", "LIMIT", "2"]).await);
    token_of(&b.call(&["LOCK.ACQUIRE", "pool", "b", "30000", "SHARED", "LIMIT", "2"]).await);
    assert_eq!(third.call(&["LOCK.ACQUIRE", "pool", "c", "30000", "SHARED", "LIMIT", "2"]).await, "$-1\r\n", "no third permit");
    assert_eq!(token_of(&a.call(&["LOCK.ACQUIRE", "pool", "a", "30000", "SHARED", "LIMIT", "2"]).await), ta, "a's re-grant");
    assert_eq!(
        a.call(&["LOCK.ACQUIRE", "pool", "a", "30000", "SHARED", "LIMIT", "3"]).await,
        "-ERR wrong lock kind: the key is a semaphore (SHARED LIMIT 2)\r\n"
    );
    assert_eq!(a.call(&["LOCK.EXTEND", "pool", "a", "60000"]).await, ":1\r\n");
    assert_eq!(a.call(&["LOCK.EXTEND", "pool", "nobody", "60000"]).await, ":0\r\n");

    third.send(&["LOCK.ACQUIRE", "pool", "c", "30000", "SHARED", "LIMIT", "2", "WAIT", "20000"]).await;
    eventually(REPLY, "c waiting on a permit on a quorum", || async {
        waited_on(&c, "pool:permit:0").await >= 3 || waited_on(&c, "pool:permit:1").await >= 3
    })
    .await;
    assert_eq!(a.call(&["LOCK.RELEASE", "pool", "a"]).await, ":1\r\n");
    let tc = token_of(&third.reply().await);
    assert!(tc > 0, "c gets in when a releases");
    assert_eq!(a.call(&["LOCK.ACQUIRE", "pool", "a", "30000", "SHARED", "LIMIT", "2"]).await, "$-1\r\n", "b and c hold both");
}

/// A permit taken with `SESSION` goes with its client's connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_semaphore_session_permit_goes_with_its_connection() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut other = Raw::connect(e.port).await;
    let mut bound = Raw::connect(e.port).await;
    token_of(&bound.call(&["LOCK.ACQUIRE", "one", "bound", "30000", "SHARED", "LIMIT", "1", "SESSION"]).await);
    assert_eq!(other.call(&["LOCK.ACQUIRE", "one", "other", "30000", "SHARED", "LIMIT", "1"]).await, "$-1\r\n");
    drop(bound);
    let reply = other.call(&["LOCK.ACQUIRE", "one", "other", "30000", "SHARED", "LIMIT", "1", "WAIT", "5000"]).await;
    assert!(token_of(&reply) > 0, "the permit freed at the disconnect, long before its 30 s lease");
}

/// `FENCE` with `SHARED LIMIT`: a permit granted at once and one granted
/// to a waiter each carry a token of at least the one asked, on every
/// server that holds it; a holder asking again with a `FENCE` above its
/// token is refused as the module refuses it, and keeps its permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_semaphore_permits_carry_at_least_the_token_they_fence() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let (mut a, mut b) = (Raw::connect(e.port).await, Raw::connect(e.port).await);
    let plain = token_of(&a.call(&["LOCK.ACQUIRE", "gate", "a", "30000", "SHARED", "LIMIT", "1"]).await);
    assert_eq!(a.call(&["LOCK.RELEASE", "gate", "a"]).await, ":1\r\n");
    let least = plain + 1_000;
    let ta = token_of(&a.call(&["LOCK.ACQUIRE", "gate", "a", "30000", "SHARED", "LIMIT", "1", "FENCE", &least.to_string()]).await);
    assert!(ta >= least, "granted at once: token {ta}, asked at least {least}");
    let stored = c.infos("gate:permit:0").await.into_iter().flatten().filter(|i| i.token.is_some_and(|t| t >= least)).count();
    assert!(stored >= 3, "the permit's token is at least {least} on a quorum ({stored} servers)");
    let above = (ta + 1).to_string();
    let refused = a.call(&["LOCK.ACQUIRE", "gate", "a", "30000", "SHARED", "LIMIT", "1", "FENCE", &above]).await;
    assert!(refused.starts_with("-ERR a holds gate with token") && refused.contains("below FENCE"), "{refused:?}");
    let more = (ta + 1_000).to_string();
    b.send(&["LOCK.ACQUIRE", "gate", "b", "30000", "SHARED", "LIMIT", "1", "FENCE", &more, "WAIT", "20000"]).await;
    eventually(REPLY, "b waiting on the permit on a quorum", || async { waited_on(&c, "gate:permit:0").await >= 3 }).await;
    assert_eq!(a.call(&["LOCK.RELEASE", "gate", "a"]).await, ":1\r\n", "a kept its permit through the refusal");
    let tb = token_of(&b.reply().await);
    assert!(tb >= ta + 1_000, "granted to the waiter: token {tb}, asked at least {more}");
}

/// Four clients share a semaphore of 2 through the endpoint, each asking
/// with `FENCE` and `WAIT`: never more than two hold at once, two do at
/// some point, and every permit carries at least the token fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_fenced_semaphore_of_two_never_admits_a_third() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut first = Raw::connect(e.port).await;
    let least = token_of(&first.call(&["LOCK.ACQUIRE", "fpool", "probe", "10000", "SHARED", "LIMIT", "2"]).await) + 1_000;
    assert_eq!(first.call(&["LOCK.RELEASE", "fpool", "probe"]).await, ":1\r\n");
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..4 {
        let (holding, most, port) = (Arc::clone(&holding), Arc::clone(&most), e.port);
        workers.push(tokio::spawn(async move {
            let mut con = Raw::connect(port).await;
            let owner = format!("fenced-{w}");
            for _ in 0..5 {
                let reply = con
                    .call(&["LOCK.ACQUIRE", "fpool", &owner, "10000", "SHARED", "LIMIT", "2", "FENCE", &least.to_string(), "WAIT", "9000"])
                    .await;
                let token = token_of(&reply);
                assert!(token >= least, "{owner}: token {token} below FENCE {least}");
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(con.call(&["LOCK.RELEASE", "fpool", &owner]).await, ":1\r\n", "{owner} releases its permit");
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} held a semaphore of 2 at once");
    assert_eq!(most, 2, "two holders at once at some point");
}

/// `VALUE` is stored with the hold on the servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_value_is_stored_with_the_hold() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut con = Raw::connect(e.port).await;
    token_of(&con.call(&["LOCK.ACQUIRE", "leader", "n1", "10000", "VALUE", "10.0.0.1:80"]).await);
    let mut with_value = 0;
    for s in &c.servers {
        let mut raw = Raw::connect(s.port).await;
        if raw.call(&["LOCK.INFO", "leader"]).await.contains("$5\r\nvalue\r\n$11\r\n10.0.0.1:80\r\n") {
            with_value += 1;
        }
    }
    assert!(with_value >= 3, "the value on {with_value} servers");
}

/// `LOCK.MACQUIRE` of two keys holds both: a single-key acquisition of
/// one of them is refused; `LOCK.MEXTEND` extends both on the servers;
/// `LOCK.MRELEASE` frees both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_sets_are_taken_extended_and_released_whole() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut a = Raw::connect(e.port).await;
    let mut b = Raw::connect(e.port).await;
    let token = token_of(&a.call(&["LOCK.MACQUIRE", "2", "{o}:lines", "{o}:stock", "a", "5000"]).await);
    for key in ["{o}:lines", "{o}:stock"] {
        assert_eq!(b.call(&["LOCK.ACQUIRE", key, "b", "5000"]).await, "$-1\r\n", "{key} is held by the set");
        let held = c.infos(key).await.iter().filter(|i| i.as_ref().is_some_and(|i| i.token == Some(token))).count();
        assert!(held >= 3, "{key} held with the set's token on {held} servers");
    }
    assert_eq!(b.call(&["LOCK.MACQUIRE", "2", "{o}:stock", "{o}:other", "b", "5000"]).await, "$-1\r\n", "overlapping set refused");
    assert_eq!(token_of(&a.call(&["LOCK.MACQUIRE", "2", "{o}:lines", "{o}:stock", "a", "5000"]).await), token, "re-grant");

    assert_eq!(a.call(&["LOCK.MEXTEND", "2", "{o}:lines", "{o}:stock", "b", "60000"]).await, ":0\r\n", "not b's");
    assert_eq!(a.call(&["LOCK.MEXTEND", "2", "{o}:lines", "{o}:stock", "a", "60000"]).await, ":2\r\n");
    for key in ["{o}:lines", "{o}:stock"] {
        assert!(c.servers[0].pttl(key).await > 10_000, "{key} extended past its 5 s lease");
    }
    assert_eq!(a.call(&["LOCK.MRELEASE", "2", "{o}:lines", "{o}:stock", "b"]).await, ":0\r\n", "not b's");
    assert_eq!(a.call(&["LOCK.MRELEASE", "2", "{o}:lines", "{o}:stock", "a"]).await, ":2\r\n");
    for key in ["{o}:lines", "{o}:stock"] {
        assert_eq!(c.infos(key).await, vec![None; 5], "{key} released on every server");
        token_of(&b.call(&["LOCK.ACQUIRE", key, "b", "5000"]).await);
    }
}

/// `LOCK.WAITERS` shows a client waiting through the endpoint, by its
/// own owner, in the module's shape; nothing once it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_waiters_shows_a_waiting_client() {
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;
    let mut holder = Raw::connect(e.port).await;
    let mut waiter = Raw::connect(e.port).await;
    let mut looker = Raw::connect(e.port).await;
    token_of(&holder.call(&["LOCK.ACQUIRE", "job", "holder", "30000"]).await);
    assert_eq!(looker.call(&["LOCK.WAITERS", "job"]).await, "*0\r\n", "nobody waits yet");
    waiter.send(&["LOCK.ACQUIRE", "job", "waiter", "30000", "WAIT", "20000"]).await;
    eventually(REPLY, "the waiter waiting on a quorum", || async { waited_on(&c, "job").await >= 3 }).await;
    let shown = looker.call(&["LOCK.WAITERS", "job"]).await;
    assert!(
        shown.starts_with("*1\r\n*12\r\n$8\r\nposition\r\n:1\r\n$5\r\nowner\r\n$6\r\nwaiter\r\n$4\r\nmode\r\n$9\r\nexclusive\r\n$5\r\nlimit\r\n$-1\r\n$9\r\nwaited_ms\r\n"),
        "{shown:?}"
    );
    assert_eq!(looker.call(&["LOCK.WAITERS", "job", "COUNT", "0"]).await, "*0\r\n");
    // A second waiter stands in the line behind the first: listed after it.
    let mut second = Raw::connect(e.port).await;
    second.send(&["LOCK.ACQUIRE", "job", "second", "30000", "WAIT", "20000"]).await;
    eventually(REPLY, "the second waiting in the line", || async { waited_on(&c, "redlock:line:job").await >= 1 }).await;
    let both = looker.call(&["LOCK.WAITERS", "job"]).await;
    assert!(both.starts_with("*2\r\n*12\r\n$8\r\nposition\r\n:1\r\n$5\r\nowner\r\n$6\r\nwaiter\r\n"), "the head first: {both:?}");
    assert!(both.contains("$8\r\nposition\r\n:2\r\n"), "{both:?}");
    assert_eq!(holder.call(&["LOCK.RELEASE", "job", "holder"]).await, ":1\r\n");
    let first = token_of(&waiter.reply().await);
    assert_eq!(waiter.call(&["LOCK.RELEASE", "job", "waiter"]).await, ":1\r\n");
    assert!(token_of(&second.reply().await) > first, "the second served after the first");
    assert_eq!(looker.call(&["LOCK.WAITERS", "job"]).await, "*0\r\n", "served: nobody waits any more");
}

/// Bad options get the module's own error texts: each request is sent to
/// a module server and to the endpoint, and the replies compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_bad_options_are_answered_as_the_module_answers_them() {
    let c = Cluster::start(3);
    let e = endpoint(&c, &[]).await;
    let mut module = Raw::connect(c.servers[0].port).await;
    let mut served = Raw::connect(e.port).await;
    let bad: &[&[&str]] = &[
        &["LOCK.ACQUIRE", "k", "o", "100", "LIMIT", "3"],
        &["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "LIMIT", "0"],
        &["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "LIMIT"],
        &["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "LIMIT", "2", "LIMIT", "2"],
        &["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "LIMIT", "2", "PERMITS", "3"],
        &["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "PERMITS", "1"],
        &["LOCK.ACQUIRE", "k", "o", "100", "VALUE"],
        &["LOCK.ACQUIRE", "k", "o", "100", "SEMAPHORE", "2"],
        &["LOCK.ACQUIRE", "k", "o", "100", "SESSION", "DELAY"],
        &["LOCK.ACQUIRE", "k", "o", "100", "NX"],
        &["LOCK.MACQUIRE", "0", "a", "o", "100"],
        &["LOCK.MACQUIRE", "3", "a", "o", "100"],
        &["LOCK.MACQUIRE", "2", "a", "a", "o", "100"],
        &["LOCK.MACQUIRE", "2000", "a", "b", "o", "100"],
        &["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "SHARED", "LIMIT", "2"],
        &["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "VALUE", "v"],
        &["LOCK.MACQUIRE", "1", "a", "o", "100", "SEMAPHORE", "2"],
        &["LOCK.MACQUIRE", "1", "a", "o"],
        &["LOCK.MRELEASE", "2", "a", "b"],
        &["LOCK.MRELEASE", "1", "a", ""],
        &["LOCK.MEXTEND", "2", "a", "b", "o", "0"],
        &["LOCK.WAITERS", "k", "COUNT", "-1"],
        &["LOCK.WAITERS", "k", "LIMIT", "1"],
        &["LOCK.WAITERS"],
    ];
    for request in bad {
        let expected = module.call(request).await;
        assert!(expected.starts_with("-ERR"), "{request:?}: the module answers {expected:?}");
        assert_eq!(served.call(request).await, expected, "{request:?}");
    }
    // What the quorum client cannot do is named.
    let limit = served.call(&["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "LIMIT", "5000"]).await;
    assert!(limit.starts_with("-ERR LIMIT above 1024 is not served by this endpoint"), "{limit:?}");
    let valued = served.call(&["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "LIMIT", "2", "VALUE", "v"]).await;
    assert!(valued.starts_with("-ERR VALUE is not served with SHARED LIMIT"), "{valued:?}");
    let semaphore = served.call(&["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "SEMAPHORE", "2"]).await;
    assert!(semaphore.starts_with("-ERR LOCK.MACQUIRE ... SEMAPHORE is not served by this endpoint"), "{semaphore:?}");
    // An operator's commands stay with the redlock command and the
    // servers' own ACLs: this endpoint knows no rules beyond logging in.
    for (request, by) in [(&["LOCK.RESIZE", "k", "2"][..], "redlock resize"), (&["LOCK.REVOKE", "k"][..], "redlock revoke")] {
        let refused = served.call(request).await;
        assert!(refused.starts_with(&format!("-ERR '{}' is not served", request[0].to_ascii_lowercase())), "{refused:?}");
        assert!(refused.contains(by), "{request:?}: {refused:?} names {by}");
    }
}
