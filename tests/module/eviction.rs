//! Eviction under `maxmemory` never frees a held lock silently.
//!
//! Lock keys carry a TTL (the lease's wall-clock mirror), so `volatile-*`
//! policies may pick them, and `allkeys-*` may pick any key. Redis offers
//! no veto; before the module kept evicted locks (`src/rescue.rs`), the
//! waiter was granted the moment its holder's key was evicted. Each test
//! fills memory until Redis has evicted the lock itself (INFO says so:
//! without it the test would prove nothing), then checks that nobody got
//! the lock, that its holder still has it, and that it is handed over at
//! its lease's end and not before.
//!
//! The behavioural checks (the waiter's reply, LOCK.INFO, a newcomer's
//! nil, the handover time) come before the INFO counters, so that against
//! a module without `src/rescue.rs` (and without its INFO fields) a test
//! fails on what that module gets wrong, the waiter served at once, not
//! on a missing field. The counters still decide whether a passing run
//! proved anything.

use crate::common;

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

/// A field of `INFO redislock`, `None` when the module does not have it.
fn module_counter(c: &mut Connection, field: &str) -> Option<i64> {
    let text: String = cmd("INFO").arg("redislock").query(c).expect("INFO redislock");
    text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().parse().ok())
}

/// Has Redis evicted A's lock? The module counts it; a module that does
/// not keep evicted locks counts nothing, but then the lock is no longer
/// A's (gone, or handed to the waiter), which ends the fill just as well.
fn lock_evicted(c: &mut Connection, token: i64) -> bool {
    module_counter(c, "redislock_locks_evicted").is_some_and(|n| n >= 1)
        || info(c, b"k").is_none_or(|i| (i.owner.as_slice(), i.token) != (&b"A"[..], token))
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

/// B's WAIT: long enough for the fill to evict the lock first (checked).
const WAIT_MS: u64 = 3_000;

/// A holds `k` for 600 s (with a value) and B waits for it; memory fills
/// under `policy` until the lock is evicted (or, for noeviction, writes are
/// refused).
fn held_lock_under_memory_pressure(policy: &str) {
    let server = Server::start_with(&["--maxmemory-policy", policy, "--maxmemory-samples", "10"]);
    let mut a = server.conn();
    let token = int_of(&ok_cmd(&mut a, cmd("LOCK.ACQUIRE").arg("k").arg("A").arg(600_000).arg("VALUE").arg("host-a")), "A's grant");
    let mut b = server.conn();
    b.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    send_cmd(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("B").arg(30_000).arg("WAIT").arg(WAIT_MS));
    wait_waiters(&mut a, b"k", 1);
    let waited = Instant::now();
    let evicting = policy != "noeviction";
    let evictable_before = module_counter(&mut a, "redislock_locks_evictable");
    let (written, refused) = fill(&mut a, policy.starts_with("volatile"), |c| lock_evicted(c, token));
    let filled = waited.elapsed();
    let evictable_during = module_counter(&mut a, "redislock_locks_evictable");
    eprintln!("{policy}: {written} keys written in {filled:?}");
    // B's wait must still be running when the lock goes, or its nil says
    // nothing about the eviction.
    assert!(filled < Duration::from_millis(WAIT_MS - 500), "{policy}: filling took {filled:?}, B's WAIT is {WAIT_MS} ms");
    // A module that forgets an evicted lock serves B here, at once.
    let reply = recv_reply(&mut b, "B's WAIT");
    assert_eq!(reply, Ok(Value::Nil), "{policy}: B's wait ended after {:?}", waited.elapsed());
    // LOCK.INFO writes nothing and runs under OOM: it shows the holder.
    let i = info(&mut a, b"k").unwrap_or_else(|| panic!("{policy}: LOCK.INFO shows no lock"));
    assert_eq!((i.owner.as_slice(), i.token), (&b"A"[..], token), "{policy}: LOCK.INFO");
    assert!(i.pttl > 590_000, "{policy}: lease left {}", i.pttl);
    assert_eq!(value_of(&mut a, "k").as_deref(), Some(&b"host-a"[..]), "{policy}: the value kept with the lock");
    // Memory pressure over (LOCK.ACQUIRE is deny-oom): a newcomer finds
    // the lock held, its holder has it.
    ok_cmd(&mut a, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    assert_eq!(acquire(&mut a, b"k", b"C", 1_000), None, "{policy}: a newcomer after the eviction");
    if evicting {
        assert!(
            locks_evicted(&mut a) >= 1,
            "{policy}: Redis never evicted the lock, the test proved nothing ({written} keys written, evicted_keys {})",
            info_field_i64(&mut a, "stats", "evicted_keys")
        );
        // Kept in module memory, or already put back by a command or the
        // handoff at B's timeout, which found it held.
        let kept = info_field_i64(&mut a, "redislock", "redislock_evicted_locks_kept");
        let restored = info_field_i64(&mut a, "redislock", "redislock_locks_restored");
        assert!(kept + restored >= 1, "{policy}: kept {kept}, restored {restored}");
    } else {
        assert!(refused, "noeviction: writes were never refused ({written} keys)");
        assert_eq!(locks_evicted(&mut a), 0);
    }
    assert_eq!(evictable_before, Some(0), "{policy}: INFO locks_evictable before maxmemory was set");
    assert_eq!(evictable_during, Some(i64::from(evicting)), "{policy}: INFO locks_evictable under maxmemory");
    assert_eq!(extend(&mut a, b"k", b"A", 600_000), 1, "{policy}: A extends");
    assert_eq!(info(&mut a, b"k").map(|i| (i.owner, i.token)), Some((b"A".to_vec(), token)));
    assert_eq!(value_of(&mut a, "k").as_deref(), Some(&b"host-a"[..]), "{policy}: the value put back with the lock");
    assert_eq!(release(&mut a, b"k", b"A"), 1, "{policy}: A releases");
    assert!(acquire(&mut a, b"k", b"C", 1_000).is_some_and(|t| t > token), "{policy}: C after A's release");
}

#[test]
fn volatile_ttl_keeps_an_evicted_lock_held() {
    let _heavy = one_heavy_at_a_time();
    held_lock_under_memory_pressure("volatile-ttl");
}

#[test]
fn volatile_lru_keeps_an_evicted_lock_held() {
    let _heavy = one_heavy_at_a_time();
    held_lock_under_memory_pressure("volatile-lru");
}

#[test]
fn allkeys_lru_keeps_an_evicted_lock_held() {
    let _heavy = one_heavy_at_a_time();
    held_lock_under_memory_pressure("allkeys-lru");
}

#[test]
fn noeviction_refuses_writes_and_leaves_the_lock_alone() {
    let _heavy = one_heavy_at_a_time();
    held_lock_under_memory_pressure("noeviction");
}

/// Evicted locks are handed to their waiters when their leases end: not
/// before (a second holder), and not much after. `MEASURED_KEYS` locks at
/// once, their leases ending `DEADLINE_STEP_MS` apart: each handoff in
/// order, their median prompt.
#[test]
fn an_evicted_lease_hands_over_at_its_end() {
    let _heavy = one_heavy_at_a_time();
    const LEASE_MS: i64 = 3_000;
    /// B's ttl: its lease starts at its grant, so PEXPIRETIME less this is
    /// when it was granted, by the server's clock.
    const B_TTL: i64 = 10_000;
    /// A grant is served from the lease timer; on a loaded 2-core machine
    /// the server may run it this late (measured: 1-3 ms when idle); the
    /// server's clock times it, so the test's own wake-up is not in it. A
    /// lease lost with its evicted key leaves B to its WAIT (nil after 10
    /// s); a handoff left to a poll once a second meets the spread lease
    /// ends at every phase, a median of 444 ms or more.
    const LATE_MS: i64 = 300;
    let server = Server::start_with(&["--maxmemory-policy", "allkeys-lru", "--maxmemory-samples", "10"]);
    let mut a = server.conn();
    let keys: Vec<String> = (0..MEASURED_KEYS).map(|i| format!("k{i}")).collect();
    // TIME and the grants in one write: the server runs them back to back,
    // so each lease ends its ttl after that TIME (whole ms).
    let granted = Instant::now();
    let mut grants = redis::pipe();
    grants.cmd("TIME");
    for (i, key) in keys.iter().enumerate() {
        grants.cmd("LOCK.ACQUIRE").arg(key).arg("A").arg(LEASE_MS + i as i64 * DEADLINE_STEP_MS);
    }
    let (time, tokens): (Vec<String>, Vec<i64>) = {
        let mut replies: Vec<Value> = grants.query(&mut a).expect("TIME and A's grants");
        let tokens = replies.split_off(1).iter().map(|t| int_of(t, "A's token")).collect();
        (redis::from_redis_value(replies.swap_remove(0)).expect("TIME"), tokens)
    };
    let at_ms = |t: &[String]| -> i64 {
        let n = |i: usize| t[i].parse::<i64>().unwrap_or_else(|e| panic!("TIME {t:?}: {e}"));
        n(0) * 1000 + n(1) / 1000
    };
    let lease_ends: Vec<i64> = (0..keys.len()).map(|i| at_ms(&time) + LEASE_MS + i as i64 * DEADLINE_STEP_MS).collect();
    // Until Redis evicted every lock: the module counts them; a module
    // that does not keep evicted locks counts nothing, but then no lock is
    // A's any more.
    let all_evicted = |c: &mut Connection| {
        module_counter(c, "redislock_locks_evicted").is_some_and(|n| n >= keys.len() as i64)
            || keys.iter().zip(&tokens).all(|(k, t)| info(c, k.as_bytes()).is_none_or(|i| (i.owner.as_slice(), i.token) != (&b"A"[..], *t)))
    };
    let (written, _) = fill(&mut a, false, all_evicted);
    let filled = granted.elapsed();
    assert!(filled < Duration::from_millis(LEASE_MS as u64 - 500), "filling took {filled:?}, too long to test the leases");
    // Memory pressure eases (say, the cache's own keys expire).
    ok_cmd(&mut a, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    // One waiter per lock, each with TIME in the same write: when it
    // asked. A waiter that asks after its lease's end (a slow test) is
    // owed the lock at once: its grant is timed from whichever came later.
    let mut waiters: Vec<Connection> = keys
        .iter()
        .map(|key| {
            let mut b = waiter(&server, Duration::from_secs(30));
            let ask =
                redis::pipe().cmd("TIME").cmd("LOCK.ACQUIRE").arg(key).arg("B").arg(B_TTL).arg("WAIT").arg(10_000).get_packed_pipeline();
            b.send_packed_command(&ask).expect("send B's wait");
            b
        })
        .collect();
    let mut delays = Vec::new();
    for (i, b) in waiters.iter_mut().enumerate() {
        let asked: Vec<String> = redis::from_redis_value(recv_reply(b, "TIME").expect("TIME")).expect("TIME");
        let reply = recv_reply(b, "B's wait");
        assert!(matches!(reply, Ok(Value::Int(t)) if t > tokens[i]), "B's wait for {}: {reply:?}", keys[i]);
        delays.push(pexpiretime(&mut a, keys[i].as_bytes()) - B_TTL - lease_ends[i].max(at_ms(&asked)));
    }
    eprintln!(
        "evicted leases of {LEASE_MS} ms and more: B granted {delays:?} ms after the end of each or B's ask (server clock; {written} keys written)"
    );
    // Leases have millisecond resolution: 2 ms, as the client's drift
    // allows for it. Each one: a grant before its lease's end is a second
    // holder, however busy the machine.
    assert!(delays.iter().all(|late| *late >= -2), "B granted before the end of A's lease: {delays:?} ms");
    let median = median_i64(&delays);
    assert!(median <= LATE_MS, "B granted late: a median {median} ms after the end of A's lease (bound {LATE_MS}): {delays:?}");
    let evicted = locks_evicted(&mut a);
    assert!(
        evicted >= keys.len() as i64,
        "Redis evicted {evicted} of the {} locks, the test proved too little ({written} keys written)",
        keys.len()
    );
}

/// The holders of a key held shared, as `(owner, token)`, from LOCK.INFO.
fn shared_holders(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, i64)> {
    holder_rows(c, key).into_iter().map(|h| (h.owner, h.token.expect("a module lock's holder has a token"))).collect()
}

fn permit(c: &mut Connection, key: &str, owner: &str) -> Option<i64> {
    match ok_cmd(c, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(600_000).arg("SHARED").arg("LIMIT").arg(2)) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("LOCK.ACQUIRE {key} {owner}: {other:?}"),
    }
}

/// A full semaphore evicted under volatile-lru keeps both its holders:
/// the waiter for a permit is not served, a newcomer is refused, and a
/// permit frees only when a holder releases it.
#[test]
fn an_evicted_semaphore_keeps_every_holder() {
    let _heavy = one_heavy_at_a_time();
    let server = Server::start_with(&["--maxmemory-policy", "volatile-lru", "--maxmemory-samples", "10"]);
    let mut a = server.conn();
    let ta = permit(&mut a, "sem", "A").expect("A's permit");
    let tb = permit(&mut a, "sem", "B").expect("B's permit");
    // A member's value is kept with its hold (see `members`).
    assert_eq!(ok_cmd(&mut a, cmd("LOCK.PROCLAIM").arg("sem").arg("A").arg("addr-a")), Value::Int(1));
    let values = |c: &mut Connection| holder_rows(c, "sem").into_iter().map(|h| h.value).collect::<Vec<_>>();
    let mut c = server.conn();
    c.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    send_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("sem").arg("C").arg(30_000).arg("SHARED").arg("LIMIT").arg(2).arg("WAIT").arg(WAIT_MS));
    wait_waiters(&mut a, b"sem", 1);
    let waited = Instant::now();
    let both = vec![(b"A".to_vec(), ta), (b"B".to_vec(), tb)];
    // Evicted: the module counts it, or (a module that forgets it) the
    // holders are gone.
    let (written, _) = fill(&mut a, true, |c| locks_evicted(c) >= 1 || shared_holders(c, "sem") != both);
    assert!(waited.elapsed() < Duration::from_millis(WAIT_MS - 500), "filling took {:?}", waited.elapsed());
    assert_eq!(recv_reply(&mut c, "C's WAIT"), Ok(Value::Nil), "C was served a permit of an evicted full semaphore");
    assert_eq!(shared_holders(&mut a, "sem"), both, "LOCK.INFO after the eviction");
    assert_eq!(values(&mut a), [Some(b"addr-a".to_vec()), None], "the kept holders' values");
    assert!(locks_evicted(&mut a) >= 1, "Redis never evicted the semaphore, the test proved nothing ({written} keys written)");
    ok_cmd(&mut a, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    assert_eq!(permit(&mut a, "sem", "D"), None, "a newcomer while both permits are held");
    assert_eq!(values(&mut a), [Some(b"addr-a".to_vec()), None], "put back with the values");
    assert_eq!(release(&mut a, b"sem", b"A"), 1, "A releases its permit");
    assert!(permit(&mut a, "sem", "D").is_some_and(|t| t > tb), "D after A's release");
    assert_eq!(permit(&mut a, "sem", "E"), None, "B and D hold both permits");
}

/// A semaphore LOCK.RESIZE shrank below its holders, evicted, comes back
/// as it was: both holders over the limit of 1 and the resized mark (a
/// request with the old LIMIT is held, not refused as another kind).
#[test]
fn an_evicted_resized_semaphore_comes_back_resized() {
    let _heavy = one_heavy_at_a_time();
    let server = Server::start_with(&["--maxmemory-policy", "volatile-lru", "--maxmemory-samples", "10"]);
    let mut a = server.conn();
    let ta = permit(&mut a, "sem", "A").expect("A's permit");
    let tb = permit(&mut a, "sem", "B").expect("B's permit");
    assert_eq!(ok_cmd(&mut a, cmd("LOCK.RESIZE").arg("sem").arg(1)), Value::Int(0));
    let both = vec![(b"A".to_vec(), ta), (b"B".to_vec(), tb)];
    let (written, _) = fill(&mut a, true, |c| locks_evicted(c) >= 1 || shared_holders(c, "sem") != both);
    assert!(locks_evicted(&mut a) >= 1, "Redis never evicted the semaphore, the test proved nothing ({written} keys written)");
    ok_cmd(&mut a, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    // The request puts the kept semaphore back first, then is served
    // under its limit of 1: held.
    assert_eq!(permit(&mut a, "sem", "D"), None, "a request with the old LIMIT 2 on the semaphore resized to 1");
    assert_eq!(shared_holders(&mut a, "sem"), both, "both holders back");
    let fields = info_fields(ok_cmd(&mut a, cmd("LOCK.INFO").arg("sem"))).expect("held");
    assert_eq!(fields[5].1, Value::Int(1), "the limit in force");
    // And its largest limit (2, from before the shrink): a strict request
    // naming only the limit in force is refused with both.
    let strict =
        cmd("LOCK.MACQUIRE").arg(2).arg("slot").arg("sem").arg("D").arg(60_000).arg("SEMAPHORE").arg(1).arg("LARGEST").arg(1).clone();
    assert_eq!(expect_err(&mut a, &strict), "LIMIT 1 2 semaphore resized: ask with SEMAPHORE 1 LARGEST 2", "the largest came back too");
}
