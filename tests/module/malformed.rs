//! A deterministic barrage of malformed LOCK.* commands: every one must get
//! an error or a legitimate reply, never a dropped connection, and the server
//! must keep working afterwards.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use redis::Value;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        // Knuth's MMIX constants.
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn nasty_values() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "",
        "-1",
        "0",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "1e3",
        " 5",
        "5 ",
        "FENCE",
        "fence",
        "WAIT",
        "\r\n",
        "k",
        "owner",
        "100",
        "1000",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    v.push(vec![b'x'; 1024 * 1024]); // 1 MB
    v.push((0u8..=255).collect()); // every byte 0x00-0xff
    v.push(vec![0x00]);
    v.push(vec![0xff]);
    v.push(vec![0x80, 0x00, 0xc3]);
    v.push(b"FENCE\x00".to_vec());
    v
}

fn valid_prefix(name: &str) -> &'static [&'static [u8]] {
    match name {
        "LOCK.ACQUIRE" => &[b"k", b"owner", b"1000"],
        "LOCK.RELEASE" => &[b"k", b"owner"],
        "LOCK.EXTEND" => &[b"k", b"owner", b"1000"],
        "LOCK.INFO" => &[b"k"],
        _ => &[b"k", b"owner", b"5", b"0"],
    }
}

fn is_documented_error(name: &str, nargs: usize, e: &str) -> bool {
    let lname = name.to_ascii_lowercase();
    let arity = format!("ERR wrong number of arguments for '{lname}' command");
    if e == arity {
        return true;
    }
    if name == "LOCK.APPLY" {
        return e == "ERR LOCK.APPLY is accepted only from the master link or while loading the AOF";
    }
    let _ = nargs;
    e == "ERR owner must not be empty"
        || e == "ERR ttl must be a positive integer (milliseconds)"
        || e == "ERR ttl exceeds redislock.max-ttl (3600000 ms)"
        || (e.starts_with("ERR unknown option '") && e.ends_with('\''))
        || e == "ERR FENCE needs a token"
        || e == "ERR FENCE given more than once"
        || e == "ERR token must be a non-negative integer"
        || e == "ERR fencing token space exhausted"
        || e == "ERR WAIT needs a timeout"
        || e == "ERR WAIT given more than once"
        || e == "ERR timeout must be a non-negative integer (milliseconds)"
        || e == "ERR token is too large (at most 9223372036854775807)"
        || e == "ERR timeout is too large (at most 9223372036854775807 milliseconds; 0 waits without limit)"
        || e == "ERR owner is longer than redislock.max-owner-len (256 bytes)"
}

/// A valid `WAIT n` in the barrage can block the connection (up to forever
/// with `WAIT 0`) when another owner holds the key. This watchdog, on its
/// own connection, releases `k` for whoever holds it whenever the barrage
/// client is blocked (the waiter is then granted: a legitimate reply) and
/// counts how often that happened. (CLIENT UNBLOCK does not apply to lock
/// waiters.)
struct Unblocker {
    stop: Arc<AtomicBool>,
    unblocked: Arc<AtomicUsize>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Unblocker {
    fn start(s: &Server) -> Unblocker {
        let stop = Arc::new(AtomicBool::new(false));
        let unblocked = Arc::new(AtomicUsize::new(0));
        let mut w = s.conn();
        let (st, un) = (stop.clone(), unblocked.clone());
        let handle = thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                if blocked_clients(&mut w) > 0 {
                    if let Some(holder) = info_any(&mut w, b"k") {
                        let n = release(&mut w, b"k", &holder.owner);
                        un.fetch_add(n as usize, Ordering::Relaxed);
                    }
                } else {
                    thread::sleep(Duration::from_millis(2));
                }
            }
        });
        Unblocker { stop, unblocked, handle: Some(handle) }
    }

    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("unblocker thread panicked");
        }
        self.unblocked.load(Ordering::Relaxed)
    }
}

impl Drop for Unblocker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn malformed_barrage_never_drops_the_connection() {
    let mut s = Server::start();
    let mut c = s.conn();
    let unblocker = Unblocker::start(&s);
    // `k` held by `owner` for the whole barrage, so that WAITs by others block.
    let mut granted_keys: HashSet<Vec<u8>> = HashSet::new();
    grant(&mut c, "k", "owner", 3_600_000);
    granted_keys.insert(b"k".to_vec());
    let values = nasty_values();
    let names = ["LOCK.ACQUIRE", "LOCK.RELEASE", "LOCK.EXTEND", "LOCK.INFO", "LOCK.APPLY"];
    let fixed_arity = |name: &str| -> Option<usize> {
        match name {
            "LOCK.RELEASE" => Some(2),
            "LOCK.EXTEND" => Some(3),
            "LOCK.INFO" => Some(1),
            "LOCK.APPLY" => Some(4),
            _ => None,
        }
    };
    let mut rng = Lcg(0x5eed_1234_abcd_0001);
    let mut sent = 0usize;
    let mut problems: Vec<String> = Vec::new();
    for round in 0..8 {
        for name in names {
            for nargs in 0..=8usize {
                let mut args: Vec<Vec<u8>> = (0..nargs).map(|_| values[rng.below(values.len())].clone()).collect();
                // One time in three, start from a valid prefix so that the
                // legitimate reply paths are exercised amid the garbage.
                if rng.below(3) == 0 {
                    for (a, v) in args.iter_mut().zip(valid_prefix(name)) {
                        *a = v.to_vec();
                    }
                } else if name == "LOCK.ACQUIRE" && rng.below(2) == 0 {
                    // Another owner WAITing on `k` (held by `owner` unless a
                    // valid RELEASE freed it): blocking amid the garbage; the
                    // Unblocker releases `k` so that the waiter is granted.
                    let timeout: &[u8] = [&b"0"[..], b"100", b"1000"][rng.below(3)];
                    let wait: [&[u8]; 5] = [b"k", b"other", b"1000", b"WAIT", timeout];
                    for (a, v) in args.iter_mut().zip(wait) {
                        *a = v.to_vec();
                    }
                }
                let mut cm = cmd(name);
                for a in &args {
                    cm.arg(a.as_slice());
                }
                let desc = describe(&cm.get_packed_command());
                sent += 1;
                // try_cmd panics (with the command) if the connection drops.
                let reply = try_cmd(&mut c, &cm);
                match (&reply, name) {
                    (Err(e), _) => {
                        if !is_documented_error(name, nargs, e) {
                            problems.push(format!("round {round}: {desc}\n    undocumented error: {e}"));
                        }
                        if let Some(n) = fixed_arity(name) {
                            let arity = format!("ERR wrong number of arguments for '{}' command", name.to_ascii_lowercase());
                            if nargs != n && *e != arity && name != "LOCK.APPLY" {
                                problems.push(format!("{desc}\n    want arity error, got: {e}"));
                            }
                        }
                        if name == "LOCK.ACQUIRE" && nargs < 3 {
                            assert_eq!(e.as_str(), "ERR wrong number of arguments for 'lock.acquire' command", "{desc}");
                        }
                    }
                    (Ok(v), "LOCK.APPLY") => {
                        panic!("LOCK.APPLY from a client must be refused: {desc} -> {v:?}")
                    }
                    (Ok(v), "LOCK.ACQUIRE") => match v {
                        Value::Int(t) if *t > 0 => {
                            assert!(nargs >= 3, "{desc} succeeded with {nargs} args");
                            granted_keys.insert(args[0].clone());
                        }
                        Value::Nil => assert!(nargs >= 3, "{desc}: nil with {nargs} args"),
                        other => panic!("{desc}: illegitimate ACQUIRE reply {other:?}"),
                    },
                    (Ok(v), "LOCK.RELEASE") | (Ok(v), "LOCK.EXTEND") => {
                        assert_eq!(Some(nargs), fixed_arity(name), "{desc} accepted");
                        assert!(matches!(v, Value::Int(0) | Value::Int(1)), "{desc}: illegitimate reply {v:?}");
                    }
                    (Ok(v), "LOCK.INFO") => {
                        assert_eq!(nargs, 1, "{desc} accepted");
                        // Strict layout check (panics on anything else).
                        let parsed = parse_info(v.clone());
                        if let Some(i) = parsed {
                            assert!(!i.owner.is_empty(), "{desc}: empty owner stored");
                            assert!(i.token > 0, "{desc}: token {}", i.token);
                        }
                    }
                    (Ok(v), _) => panic!("{desc}: unexpected {v:?}"),
                }
            }
        }
    }
    let unblocked = unblocker.finish();
    assert!(sent >= 300, "only {sent} commands sent");
    assert!(problems.is_empty(), "{} problem(s) in {sent} malformed commands:\n{}", problems.len(), problems.join("\n"));

    // Only keys that some ACQUIRE granted may exist (errors and LOCK.APPLY
    // create nothing).
    let keys: Vec<Vec<u8>> = cmd("KEYS").arg("*").query(&mut c).expect("KEYS *");
    for k in &keys {
        assert!(granted_keys.contains(k), "key {:?} exists but no ACQUIRE granted it", String::from_utf8_lossy(&k[..k.len().min(40)]));
    }

    // The server is alive and healthy.
    let pong: String = cmd("PING").query(&mut c).expect("PING after barrage");
    assert_eq!(pong, "PONG");
    assert!(s.is_alive(), "redis-server pid {} died", s.pid);
    let mut fresh = s.conn();
    let t = grant(&mut fresh, "after-barrage", "me", 10_000);
    assert!(t > 0);
    assert_eq!(release(&mut fresh, b"after-barrage", b"me"), 1);
    assert!(!exists(&mut fresh, b"after-barrage"));
    eprintln!("malformed: {sent} commands, {} keys granted, {unblocked} blocked WAITs unblocked", granted_keys.len());
}
