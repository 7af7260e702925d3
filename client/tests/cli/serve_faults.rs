//! `redlock serve` under faults: clients that reach the quorum only
//! through endpoints, while a server is killed and restarted, a server is
//! paused, and an endpoint is killed with holds and waiters and started
//! again. What is counted is what mutual exclusion means: no two holds
//! overlap, and every write a holder makes through the store-side fence
//! (LOCK.FENCED on a separate data server) while it holds lands.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::history::History;
use common::{Cluster, Opts, Server};
use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::serve_endpoint::{connect, endpoint_on, BRISK};

/// What a client saw.
#[derive(Default)]
struct Tally {
    held: u32,
    /// Fenced writes made while holding that the register refused: only
    /// a newer holder's write can make one (an overlap).
    refused_while_holding: u32,
    errors: u32,
}

/// One client's loop through the endpoint on `port`: waits up to 2 s for
/// the lock (ttl 1 s), holds it 10–30 ms with a fenced write in the
/// middle, releases; reconnects (backing off) when its connection fails.
/// With `session`, each hold is bound to the connection (`SESSION DELAY
/// 1000`): the endpoint extends it, and closes the connection if it may
/// be lost.
async fn client(name: String, port: u16, session: bool, data: MultiplexedConnection, history: History, stop: Arc<AtomicBool>) -> Tally {
    let mut tally = Tally::default();
    let mut conn: Option<MultiplexedConnection> = None;
    // The hold being recorded: a release that did not land leaves it
    // standing, and asking again is then the module's re-grant (the same
    // token): one hold, from its first grant to its last release.
    let mut current: Option<(i64, Instant, Instant)> = None;
    let mut backoff = Duration::from_millis(20);
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = conn.as_mut() else {
            conn = connect(port).await;
            if conn.is_none() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            continue;
        };
        backoff = Duration::from_millis(20);
        let asked = Instant::now();
        let mut acquire = redis::cmd("LOCK.ACQUIRE");
        acquire.arg("res").arg(&name).arg(1000).arg("WAIT").arg(2000);
        if session {
            // The lock-delay covers the work: a hold the endpoint gives up
            // (its extension failed, the connection closed) stays taken
            // for its lease, not released under a client still working.
            acquire.arg("SESSION").arg("DELAY").arg(1000);
        }
        let reply = acquire.query_async::<Value>(c).await;
        let token = match reply {
            Ok(Value::Int(t)) => t,
            Ok(Value::Nil) => continue,
            Ok(other) => panic!("{name}: LOCK.ACQUIRE answered {other:?}"),
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                conn = None;
                tally.errors += 1;
                continue;
            }
            Err(_) => {
                // An error reply (no quorum reached): asked again.
                tally.errors += 1;
                continue;
            }
        };
        let granted = Instant::now();
        // A hold a client keeps past its lease is no hold: the grant's
        // lease began before the request's reply, so 1 s from the ask.
        let hold = Duration::from_millis(rand::Rng::random_range(&mut rand::rng(), 10..=30));
        tokio::time::sleep(hold / 2).await;
        let mut data = data.clone();
        let wrote = redis::cmd("LOCK.FENCED").arg("fence:res").arg(token).arg("INCR").arg("writes").query_async::<Value>(&mut data).await;
        match wrote {
            Ok(Value::Int(_)) => {}
            Err(e) if e.to_string().contains("FENCED") => tally.refused_while_holding += 1,
            other => panic!("{name}: the fenced write answered {other:?}"),
        }
        tokio::time::sleep(hold / 2).await;
        let released = Instant::now().min(asked + Duration::from_millis(1000)).max(granted);
        current = match current {
            Some((t, first, _)) if t == token => Some((t, first, released)),
            Some((t, first, last)) => {
                history.record(name.clone(), t, first, last);
                Some((token, granted, released))
            }
            None => Some((token, granted, released)),
        };
        tally.held += 1;
        // The release may fail with the endpoint: the lease ends the hold.
        if redis::cmd("LOCK.RELEASE").arg("res").arg(&name).query_async::<Value>(c).await.is_err() {
            conn = None;
        }
    }
    if let Some((t, first, last)) = current {
        history.record(name, t, first, last);
    }
    tally
}

/// Four clients on two endpoints (one of each binding its holds to its
/// connection with SESSION) contend for one lock for about 12 s
/// while a server is killed and restarted empty (in quarantine), another
/// is paused for 1.5 s, and the first endpoint is killed with holds and
/// waiters and started again on its port. No two holds overlap, no write
/// a holder made through the fence is refused, and every client holds
/// again after the faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The serial guard is held through the test on purpose: its endpoints'
// request timeouts are short, so no other heavy test runs beside it (each
// test has its own runtime: a test waiting for the guard blocks only
// itself).
#[allow(clippy::await_holding_lock)]
async fn serve_holds_never_overlap_under_server_and_endpoint_faults() {
    let _serial = common::serial();
    let mut c = Cluster::start_opts(vec![Opts::quarantine(2000); 5]);
    let data_server = Server::start();
    let data = data_server.conn().await;
    let first = endpoint_on(&c, BRISK, 0, &[], &[]).await;
    let first_port = first.port;
    let second = endpoint_on(&c, BRISK, 0, &[], &[]).await;
    let second_port = second.port;
    let history = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let port = if i % 2 == 0 { first_port } else { second_port };
            // One client of each endpoint binds its holds to its connection.
            tokio::spawn(client(format!("client-{i}"), port, i >= 2, data.clone(), history.clone(), Arc::clone(&stop)))
        })
        .collect();
    let holds_now = || history.holds().len();
    let settle = |what: &'static str, at_least: usize| {
        let history = history.clone();
        async move {
            common::eventually(Duration::from_secs(20), what, || {
                let n = history.holds().len();
                async move { n >= at_least }
            })
            .await;
        }
    };
    settle("holds before the faults", 10).await;

    // A server killed and restarted empty: in quarantine, it grants
    // nothing until a lease taken before could have ended.
    c.servers[0].kill9();
    tokio::time::sleep(Duration::from_millis(800)).await;
    c.servers[0].restart();
    settle("holds after a server's restart", holds_now() + 10).await;

    // A server paused past the ttl.
    c.servers[1].freeze();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.servers[1].thaw();
    settle("holds after a server's pause", holds_now() + 10).await;

    // The first endpoint killed with holds and waiters, and started again.
    let mut first = first;
    let _ = first.child.start_kill();
    let _ = first.child.wait().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first_again = endpoint_on(&c, BRISK, first_port, &[], &[]).await;
    assert_eq!(first_again.port, first_port, "the endpoint back on its port");
    let before = holds_now();
    let per_client = |n: &str| history.holds().iter().filter(|h| h.client == n).count();
    let counts_before: Vec<usize> = (0..4).map(|i| per_client(&format!("client-{i}"))).collect();
    common::eventually(Duration::from_secs(20), "every client holding again after the faults", || {
        let now: Vec<usize> = (0..4).map(|i| per_client(&format!("client-{i}"))).collect();
        let done = now.iter().zip(&counts_before).all(|(n, b)| n > b);
        async move { done }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut total = Tally::default();
    for t in clients {
        let t = tokio::time::timeout(Duration::from_secs(10), t).await.expect("a client stuck").expect("a client failed");
        total.held += t.held;
        total.refused_while_holding += t.refused_while_holding;
        total.errors += t.errors;
    }
    println!(
        "SERVE FAULTS | holds {} ({} after the endpoint's restart) | fenced writes refused while holding {} | errors seen by clients {}",
        total.held,
        holds_now() - before,
        total.refused_while_holding,
        total.errors
    );
    history.check().assert_exclusive("clients through two endpoints under faults");
    assert_eq!(total.refused_while_holding, 0, "a holder's fenced write was refused: a newer token wrote while it held");
    let writes: i64 = redis::cmd("GET").arg("writes").query_async::<Option<i64>>(&mut data.clone()).await.expect("GET").unwrap_or(0);
    assert_eq!(writes, i64::from(total.held), "every hold's fenced write landed once");
}
