//! Eviction under `maxmemory` never frees a held lock silently.
//!
//! Lock keys carry a TTL (the lease's wall-clock mirror), so `volatile-*`
//! policies may pick them, and `allkeys-*` may pick any key. Redis offers
//! no veto; before the module kept evicted locks (`src/kept.rs`), the
//! waiter was granted the moment its holder's key was evicted. Each test
//! fills memory until Redis has evicted the lock itself (INFO says so:
//! without it the test would prove nothing), then checks that nobody got
//! the lock, that its holder still has it, and that it is handed over at
//! its lease's end and not before.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

const FILL_VALUE_BYTES: usize = 1_000;
const FILL_BATCH: usize = 200;
const MAX_FILL_KEYS: usize = 60_000;

fn used_memory(c: &mut Connection) -> i64 {
    info_field_i64(c, "memory", "used_memory")
}

fn locks_evicted(c: &mut Connection) -> i64 {
    info_field_i64(c, "redislock", "redislock_locks_evicted")
}

/// Caps memory just above what is used now and writes 1 KB keys (with a
/// TTL an hour long for the volatile policies, so the lock's is the
/// shortest) until `done` says so. Returns how many keys were written and
/// whether a write was refused with OOM.
fn fill(c: &mut Connection, volatile: bool, mut done: impl FnMut(&mut Connection) -> bool) -> (usize, bool) {
    let cap = used_memory(c) + 2_000_000;
    ok_cmd(c, cmd("CONFIG").arg("SET").arg("maxmemory").arg(cap));
    let value = vec![b'x'; FILL_VALUE_BYTES];
    let mut written = 0;
    while written < MAX_FILL_KEYS {
        let mut pipe = redis::pipe();
        for i in written..written + FILL_BATCH {
            let set = pipe.cmd("SET").arg(format!("fill:{i}")).arg(&value[..]);
            if volatile {
                set.arg("PX").arg(3_600_000);
            }
        }
        let replies: Vec<Value> = match pipe.query(c) {
            Ok(r) => r,
            Err(e) if err_text(&e).contains("OOM") => return (written, true),
            Err(e) => panic!("filling memory: {e}"),
        };
        written += FILL_BATCH;
        if replies.iter().any(|v| matches!(v, Value::ServerError(e) if e.code() == "OOM")) {
            return (written, true);
        }
        if done(c) {
            return (written, false);
        }
    }
    (written, false)
}

/// A holds `k` for 600 s and B waits for it; memory fills under `policy`
/// until the lock is evicted (or, for noeviction, writes are refused).
fn held_lock_under_memory_pressure(policy: &str) {
    let server = Server::start_with(&["--maxmemory-policy", policy, "--maxmemory-samples", "10"]);
    let mut a = server.conn();
    let token = grant(&mut a, "k", "A", 600_000);
    let mut b = server.conn();
    b.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    send_cmd(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("B").arg(10_000).arg("WAIT").arg(3_000));
    wait_waiters(&mut a, b"k", 1);
    let waited = Instant::now();
    let evicting = policy != "noeviction";
    assert_eq!(info_field_i64(&mut a, "redislock", "redislock_locks_evictable"), 0, "{policy}: no maxmemory yet");
    let (written, refused) = fill(&mut a, policy.starts_with("volatile"), |c| locks_evicted(c) >= 1);
    assert_eq!(
        info_field_i64(&mut a, "redislock", "redislock_locks_evictable"),
        i64::from(evicting),
        "{policy}: INFO says whether locks may be evicted"
    );
    if evicting {
        assert!(
            locks_evicted(&mut a) >= 1,
            "{policy}: Redis never evicted the lock ({written} keys written, evicted_keys {})",
            info_field_i64(&mut a, "stats", "evicted_keys")
        );
        // Kept in module memory, or already put back by B's handoff,
        // which found it held.
        let kept = info_field_i64(&mut a, "redislock", "redislock_evicted_locks_kept");
        let restored = info_field_i64(&mut a, "redislock", "redislock_locks_restored");
        assert!(kept + restored >= 1, "{policy}: kept {kept}, restored {restored}");
    } else {
        assert!(refused, "noeviction: writes were never refused ({written} keys)");
        assert_eq!(locks_evicted(&mut a), 0);
    }
    // LOCK.INFO writes nothing and runs under OOM: it shows the holder.
    let i = info(&mut a, b"k").unwrap_or_else(|| panic!("{policy}: LOCK.INFO shows no lock"));
    assert_eq!((i.owner.as_slice(), i.token), (&b"A"[..], token), "{policy}: LOCK.INFO");
    assert!(i.pttl > 590_000, "{policy}: lease left {}", i.pttl);
    let reply = recv_reply(&mut b, "B's WAIT");
    assert_eq!(reply, Ok(Value::Nil), "{policy}: B's wait ended after {:?}", waited.elapsed());
    // Memory pressure over: a newcomer finds the lock held, its holder has it.
    ok_cmd(&mut a, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    assert_eq!(acquire(&mut a, b"k", b"C", 1_000), None, "{policy}: a newcomer after the eviction");
    assert_eq!(extend(&mut a, b"k", b"A", 600_000), 1, "{policy}: A extends");
    assert_eq!(info(&mut a, b"k").map(|i| (i.owner, i.token)), Some((b"A".to_vec(), token)));
    assert_eq!(release(&mut a, b"k", b"A"), 1, "{policy}: A releases");
    assert!(acquire(&mut a, b"k", b"C", 1_000).is_some_and(|t| t > token), "{policy}: C after A's release");
}

#[test]
fn volatile_ttl_keeps_an_evicted_lock_held() {
    held_lock_under_memory_pressure("volatile-ttl");
}

#[test]
fn volatile_lru_keeps_an_evicted_lock_held() {
    held_lock_under_memory_pressure("volatile-lru");
}

#[test]
fn allkeys_lru_keeps_an_evicted_lock_held() {
    held_lock_under_memory_pressure("allkeys-lru");
}

#[test]
fn noeviction_refuses_writes_and_leaves_the_lock_alone() {
    held_lock_under_memory_pressure("noeviction");
}

/// An evicted lock is handed to its waiter when its lease ends: not
/// before, and not much after.
#[test]
fn an_evicted_lease_hands_over_at_its_end() {
    const LEASE_MS: u64 = 3_000;
    let server = Server::start_with(&["--maxmemory-policy", "allkeys-lru", "--maxmemory-samples", "10"]);
    let mut a = server.conn();
    let granted = Instant::now();
    let token = grant(&mut a, "k", "A", LEASE_MS as i64);
    let (written, _) = fill(&mut a, false, |c| locks_evicted(c) >= 1);
    assert!(locks_evicted(&mut a) >= 1, "the lock was never evicted ({written} keys written)");
    assert!(granted.elapsed() < Duration::from_millis(LEASE_MS - 500), "filling took too long to test the lease");
    // Memory pressure eases (say, the cache's own keys expire).
    ok_cmd(&mut a, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    let mut b = server.conn();
    b.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    let reply = try_cmd(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("B").arg(10_000).arg("WAIT").arg(10_000));
    let took = granted.elapsed();
    assert!(matches!(reply, Ok(Value::Int(t)) if t > token), "B's wait: {reply:?}");
    eprintln!("evicted lease: B granted {:?} after the lease's end", took.saturating_sub(Duration::from_millis(LEASE_MS)));
    assert!(took >= Duration::from_millis(LEASE_MS), "B granted {took:?} after A's grant of {LEASE_MS} ms");
    assert!(took <= Duration::from_millis(LEASE_MS + 250), "B granted late: {took:?}");
}
