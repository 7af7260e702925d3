//! 16 clients fight over one key for ~3 s: mutual exclusion and strictly
//! increasing fencing tokens, as observed from the clients.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::history::History;
use common::*;

const THREADS: usize = 16;
const RUN_FOR: Duration = Duration::from_secs(3);

#[test]
fn hammer_one_key_mutual_exclusion_and_monotonic_tokens() {
    let _heavy = one_heavy_at_a_time();
    let s = Server::start();
    let port = s.port;
    let held = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let history = History::new();
    let mut handles = Vec::new();
    for id in 0..THREADS {
        let held = held.clone();
        let overlaps = overlaps.clone();
        let barrier = barrier.clone();
        let history = history.clone();
        handles.push(thread::spawn(move || {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/").as_str()).expect("client for hammer thread");
            let mut con = client.get_connection_with_timeout(Duration::from_secs(5)).expect("hammer thread connect");
            con.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
            let owner = format!("owner-{id}");
            barrier.wait();
            let end = Instant::now() + RUN_FOR;
            while Instant::now() < end {
                let token = acquire(&mut con, b"the-lock", owner.as_bytes(), 5000);
                let Some(token) = token else {
                    thread::yield_now();
                    continue;
                };
                let granted = Instant::now();
                if held.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_micros(200));
                held.store(false, Ordering::SeqCst);
                let released = Instant::now();
                let r = release(&mut con, b"the-lock", owner.as_bytes());
                assert_eq!(r, 1, "thread {id}: RELEASE of a granted lock (token {token}) replied {r}");
                history.record(owner.clone(), token, granted, released);
            }
        }));
    }
    for h in handles {
        h.join().expect("hammer thread panicked");
    }
    let holds = history.holds();
    let per_thread: Vec<usize> = (0..THREADS).map(|t| holds.iter().filter(|h| h.client == format!("owner-{t}")).count()).collect();
    eprintln!("hammer: {} grants, per thread {:?}", holds.len(), per_thread);

    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two clients held the lock at the same time");
    assert!(holds.len() >= 100, "only {} grants in {:?}", holds.len(), RUN_FOR);
    // In grant order: no hold starts before the previous ones ended, and
    // tokens strictly increase.
    history.check().assert_exclusive("hammer");
    // The key is free at the end and the server still works.
    let mut c = s.conn();
    assert!(!exists(&mut c, b"the-lock"), "lock left behind after all releases");
}
