//! `redlock serve` at the scale issue 59 names: 10,000 client connections
//! and 1,000 of them waiting in one lock's line at once. Every connection
//! is served, a client is answered while the thousand wait, and the
//! thousand are granted one at a time (no grant while another holds,
//! tokens rising in grant order), each once.
//!
//! The test raises its own limit of open files to the hard limit (the
//! endpoint inherits it); where the hard limit is below what 10,000
//! connections need, it runs with as many as fit and says so.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Cluster;

use crate::serve_endpoint::{endpoint, token_of, Raw, REPLY};

const CONNECTIONS: u64 = 10_000;
const WAITERS: u64 = 1_000;

/// A field of the endpoint's INFO.
async fn info_field(port: u16, field: &str) -> i64 {
    let mut c = Raw::connect(port).await;
    let text = c.call(&["INFO"]).await;
    let prefix = format!("{field}:");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok()).unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// Alone in the process (`serial`): its eleven thousand sockets and a
// thousand waiters' handoffs would slow the timing of any test beside it.
// The guard only keeps other serial tests out; nothing else takes it.
#[allow(clippy::await_holding_lock)]
async fn serve_takes_ten_thousand_connections_and_a_line_of_a_thousand() {
    let _alone = common::serial();
    let limit = testkit::raise_open_files();
    // The endpoint holds every client connection, and a connection to
    // each of the five servers per waiter; this process the clients.
    let waiters = WAITERS.min(limit.saturating_sub(500) / 10).max(50);
    let connections = CONNECTIONS.min(limit.saturating_sub(5 * waiters + 500)).max(waiters + 1);
    if connections < CONNECTIONS || waiters < WAITERS {
        eprintln!("open files limited to {limit}: {connections} connections and {waiters} waiters instead of {CONNECTIONS} and {WAITERS}");
    }
    let c = Cluster::start(5);
    let e = endpoint(&c, &[]).await;

    let mut clients = Vec::new();
    for _ in 0..connections {
        clients.push(Raw::connect(e.port).await);
    }
    for client in clients.iter_mut() {
        client.send(&["PING"]).await;
    }
    for client in clients.iter_mut() {
        assert_eq!(client.reply().await, "+PONG\r\n");
    }
    // Each test connection of `info_field` counts itself.
    assert_eq!(info_field(e.port, "connected_clients").await, connections as i64 + 1, "every connection is the endpoint's");

    // A holder, and a line of waiters behind it.
    let mut holder = clients.pop().expect("a connection");
    let first = token_of(&holder.call(&["LOCK.ACQUIRE", "line", "holder", "120000"]).await);
    let line: Vec<Raw> = clients.drain(..waiters as usize).collect();
    let holding = Arc::new(AtomicBool::new(true));
    let last_token = Arc::new(AtomicI64::new(first));
    let mut tasks = Vec::new();
    for (i, mut waiter) in line.into_iter().enumerate() {
        let (holding, last_token) = (holding.clone(), last_token.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("w{i}");
            waiter.send(&["LOCK.ACQUIRE", "line", &owner, "120000", "WAIT", "300000"]).await;
            // The whole line may be served before this one: no REPLY bound.
            let reply = tokio::time::timeout(Duration::from_secs(300), waiter.read_reply()).await.expect("a grant within the wait");
            let token = token_of(&reply);
            assert!(!holding.swap(true, Ordering::SeqCst), "{owner} granted token {token} while another holds the lock");
            let before = last_token.swap(token, Ordering::SeqCst);
            assert!(token > before, "{owner} granted token {token} after token {before}");
            holding.store(false, Ordering::SeqCst);
            assert_eq!(waiter.call(&["LOCK.RELEASE", "line", &owner]).await, ":1\r\n", "{owner} releases");
        }));
    }
    common::eventually(Duration::from_secs(120), "every waiter in the line", || async {
        info_field(e.port, "acquisitions_waiting").await == waiters as i64
    })
    .await;
    // Another client is served while the line waits.
    let mut other = clients.pop().expect("a connection");
    assert_eq!(tokio::time::timeout(REPLY, other.call(&["PING"])).await.expect("served while the line waits"), "+PONG\r\n");
    assert_eq!(other.call(&["LOCK.ACQUIRE", "line", "latecomer", "1000"]).await, "$-1\r\n", "the lock is held");

    holding.store(false, Ordering::SeqCst);
    assert_eq!(holder.call(&["LOCK.RELEASE", "line", "holder"]).await, ":1\r\n");
    for task in tasks {
        task.await.expect("a waiter's task");
    }
    assert_eq!(info_field(e.port, "acquisitions_waiting").await, 0, "the line is empty");
    assert!(last_token.load(Ordering::SeqCst) > first, "the line was granted after the holder");
    // The idle connections are still served.
    for client in clients.iter_mut().step_by(97) {
        assert_eq!(client.call(&["PING"]).await, "+PONG\r\n");
    }
}

/// The endpoint's CPU time so far (user and system), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the endpoint's /proc stat");
    // The fields after the command name, which is in parentheses.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
    fields.get(11..13).map(|f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum()).unwrap_or(0)
}

/// Out of file descriptors, the endpoint neither spins on its listener
/// nor stops accepting: clients beyond the limit wait in the backlog, the
/// endpoint stays near idle meanwhile, and they are served as soon as
/// others leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_out_of_descriptors_waits_for_them_without_spinning() {
    let c = Cluster::start(5);
    let mut cmd =
        crate::common::cli::redlock_with(&c.urls().join(","), crate::serve_endpoint::GENEROUS, &["serve", "--listen", "127.0.0.1:0"]);
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: 64, rlim_max: 64 };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let e = crate::serve_endpoint::endpoint_of(cmd).await;
    let pid = e.child.id().expect("the endpoint's pid");
    // More clients than 64 descriptors hold: the kernel takes them all
    // into the listener's backlog, the endpoint accepts what it can.
    let mut clients = Vec::new();
    for _ in 0..100 {
        let mut client = Raw::connect(e.port).await;
        client.send(&["PING"]).await;
        clients.push(client);
    }
    let mut served = Vec::new();
    let mut waiting = Vec::new();
    for mut client in clients {
        match tokio::time::timeout(Duration::from_millis(300), client.read_reply()).await {
            Ok(reply) => {
                assert_eq!(reply, "+PONG\r\n");
                served.push(client);
            }
            Err(_) => waiting.push(client),
        }
    }
    assert!(!served.is_empty() && !waiting.is_empty(), "{} served, {} beyond the limit", served.len(), waiting.len());
    let before = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = cpu_ticks(pid) - before;
    // Spinning on the listener would take a CPU's whole two seconds (200
    // ticks at 100 a second); a wait takes almost nothing.
    assert!(spent < 50, "the endpoint spent {spent} ticks of CPU in 2 s at its descriptor limit");
    // Ten clients leave: ten descriptors free.
    served.truncate(served.len().saturating_sub(10));
    let mut first = waiting.remove(0);
    assert_eq!(tokio::time::timeout(REPLY, first.read_reply()).await.expect("served once others left"), "+PONG\r\n");
    drop(served);
}
