//! Every command path and error of docs/commands.md, against a real
//! redis-server with the module loaded.

use crate::common;

use std::time::Duration;

use common::*;
use redis::Value;

const ARITY_ACQUIRE: &str = "ERR wrong number of arguments for 'lock.acquire' command";
const ARITY_RELEASE: &str = "ERR wrong number of arguments for 'lock.release' command";
const ARITY_EXTEND: &str = "ERR wrong number of arguments for 'lock.extend' command";
const ARITY_INFO: &str = "ERR wrong number of arguments for 'lock.info' command";
const ARITY_APPLY: &str = "ERR wrong number of arguments for 'lock.apply' command";
const E_EMPTY_OWNER: &str = "ERR owner must not be empty";
const E_TTL: &str = "ERR ttl must be a positive integer (milliseconds)";
const E_FENCE_NEEDS: &str = "ERR FENCE needs a token";
const E_FENCE_TWICE: &str = "ERR FENCE given more than once";
const E_TOKEN: &str = "ERR token must be a non-negative integer";
const E_APPLY: &str = "ERR LOCK.APPLY is accepted only from the master link or while loading the AOF";
const E_WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn lock_cmd(name: &str, args: &[&[u8]]) -> redis::Cmd {
    let mut c = cmd(name);
    for a in args {
        c.arg(*a);
    }
    c
}

// ---------------------------------------------------------------------------
// ACQUIRE basics
// ---------------------------------------------------------------------------

#[test]
fn acquire_free_key_token_pttl_type_and_scan() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "res", "alice", 10_000);
    assert!(t > 0, "token must be > 0, got {t}");
    let p = pttl(&mut c, b"res");
    assert!(p > 0 && p <= 10_000, "PTTL must be in (0, 10000], got {p}");
    let ty: String = cmd("TYPE").arg("res").query(&mut c).expect("TYPE res");
    assert_eq!(ty, "redislock", "TYPE of a lock key");
    let inf = info(&mut c, b"res").expect("LOCK.INFO of a held lock");
    assert_eq!(inf.owner, b"alice");
    assert_eq!(inf.token, t);
    assert!(inf.pttl > 0 && inf.pttl <= 10_000, "LOCK.INFO pttl {}", inf.pttl);

    // A plain string key next to it must not show up in SCAN ... TYPE redislock.
    ok_cmd(&mut c, cmd("SET").arg("plain").arg("v"));
    let mut cursor = "0".to_string();
    let mut found: Vec<Vec<u8>> = Vec::new();
    loop {
        let (next, keys): (String, Vec<Vec<u8>>) =
            cmd("SCAN").arg(&cursor).arg("TYPE").arg("redislock").query(&mut c).expect("SCAN TYPE redislock");
        found.extend(keys);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(found, vec![b"res".to_vec()], "SCAN 0 TYPE redislock");
}

#[test]
fn regrant_same_owner_keeps_token_restarts_lease_other_owner_nil() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "alice", 100_000);
    let t2 = grant(&mut c, "k", "alice", 200_000);
    assert_eq!(t2, t, "re-grant to the same owner must keep the token");
    let p = pttl(&mut c, b"k");
    assert!(p > 100_000 && p <= 200_000, "re-grant must restart the lease at 200000 ms, PTTL {p}");

    let before = info(&mut c, b"k").expect("info before");
    assert_eq!(acquire(&mut c, b"k", b"bob", 300_000), None, "another owner must get nil");
    let after = info(&mut c, b"k").expect("info after");
    assert_eq!(after.owner, b"alice", "owner unchanged after refused acquire");
    assert_eq!(after.token, t, "token unchanged after refused acquire");
    assert!(
        after.pttl <= before.pttl && after.pttl > 100_000,
        "lease must not be touched by a refused acquire: before {} after {}",
        before.pttl,
        after.pttl
    );
    // Refused acquire with FENCE must not raise the held token either.
    assert_eq!(acquire_fence(&mut c, b"k", b"bob", 300_000, t + 1_000_000), None);
    assert_eq!(info(&mut c, b"k").expect("info").token, t);
    // And the counter was not raised by the refused FENCE.
    let next = grant(&mut c, "other", "bob", 1000);
    assert_eq!(next, t + 1, "refused FENCE must not raise the counter");
}

#[test]
fn fence_semantics() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = grant(&mut c, "a", "o", 100_000);
    // FENCE below the counter: max(counter + 1, min) = counter + 1.
    let t2 = acquire_fence(&mut c, b"b", b"o", 100_000, 5).expect("grant b");
    assert_eq!(t2, t1 + 1, "FENCE 5 on a free key: token must be counter+1");
    // FENCE above the counter on a free key: exactly min.
    let f = t2 + 1_000;
    let t3 = acquire_fence(&mut c, b"c", b"o", 100_000, f).expect("grant c");
    assert_eq!(t3, f, "FENCE above counter: token must be the FENCE value");
    // Re-grant with a larger FENCE raises the held token.
    let f2 = f + 1_000;
    let t4 = acquire_fence(&mut c, b"c", b"o", 100_000, f2).expect("re-grant c");
    assert_eq!(t4, f2, "re-grant with larger FENCE must raise the token");
    assert_eq!(info(&mut c, b"c").expect("info c").token, f2);
    // Re-grant with a smaller FENCE lowers nothing.
    let t5 = acquire_fence(&mut c, b"c", b"o", 100_000, 1).expect("re-grant c, small fence");
    assert_eq!(t5, f2, "FENCE below the held token must not lower it");
    assert_eq!(info(&mut c, b"c").expect("info c").token, f2);
    // Re-grant of another key with a small FENCE keeps that key's token.
    let t6 = acquire_fence(&mut c, b"a", b"o", 100_000, 0).expect("re-grant a");
    assert_eq!(t6, t1, "FENCE 0 re-grant keeps the token");
    // A later grant on another key is above the FENCE value (counter raised).
    let t7 = grant(&mut c, "d", "o", 100_000);
    assert_eq!(t7, f2 + 1, "next grant must be counter+1 after FENCE raised it");
    // FENCE exactly equal to counter+1 and to the counter itself.
    let t8 = acquire_fence(&mut c, b"e", b"o", 100_000, t7).expect("grant e");
    assert_eq!(t8, t7 + 1, "FENCE equal to the counter gives counter+1");
}

/// Tokens are unique per instance whatever FENCE asks. A re-grant used to
/// take the FENCE value verbatim, so `FENCE <another key's token>` gave two
/// live locks the same token; now a re-grant raised by FENCE takes a token
/// from the counter, as a new grant does: max(counter + 1, min-token).
#[test]
fn a_fenced_regrant_never_takes_a_token_another_lock_holds() {
    let s = Server::start();
    let mut c = s.conn();
    let ta = grant(&mut c, "a", "o", 100_000);
    let tb = grant(&mut c, "b", "o", 100_000);
    assert!(tb > ta);
    // Re-grant of `a` asking for `b`'s token.
    let ra = acquire_fence(&mut c, b"a", b"o", 100_000, tb).expect("re-grant a");
    assert_ne!(ra, tb, "the re-grant took b's token: two locks share it");
    assert_eq!(ra, tb + 1, "a fresh token from the counter, above every token issued");
    assert_eq!(info(&mut c, b"a").expect("a").token, ra);
    assert_eq!(info(&mut c, b"b").expect("b").token, tb);
    // A new grant asking for a held token gets counter + 1 just the same.
    let tc = acquire_fence(&mut c, b"c", b"o", 100_000, ra).expect("grant c");
    assert_eq!(tc, ra + 1);
    // Above the counter, both paths take exactly the FENCE value.
    let f = tc + 1_000;
    assert_eq!(acquire_fence(&mut c, b"a", b"o", 100_000, f), Some(f), "re-grant above the counter");
    assert_eq!(acquire_fence(&mut c, b"d", b"o", 100_000, f + 10), Some(f + 10), "new grant above the counter");
    let tokens: Vec<i64> = ["a", "b", "c", "d"].iter().map(|k| info(&mut c, k.as_bytes()).expect("held").token).collect();
    let mut unique = tokens.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), tokens.len(), "tokens {tokens:?}");
    assert_eq!(grant(&mut c, "e", "o", 1000), f + 11);
}

/// A number beyond 64 bits is too large, not "not a positive integer":
/// ttl (ACQUIRE and EXTEND) says it exceeds max-ttl, as any ttl above it
/// does; WAIT and FENCE say they are too large. Nothing changes.
#[test]
fn numbers_beyond_64_bits_are_too_large_not_malformed() {
    let s = Server::start();
    let mut c = s.conn();
    let t0 = grant(&mut c, "k", "holder", 100_000);
    let big: &[u8] = b"99999999999999999999999";
    let exceeds = "ERR ttl exceeds redislock.max-ttl (3600000 ms)";
    let cases: [(&str, Vec<&[u8]>, &str); 6] = [
        ("LOCK.ACQUIRE", vec![b"free", b"o", big], exceeds),
        ("LOCK.ACQUIRE", vec![b"k", b"holder", big], exceeds),
        ("LOCK.EXTEND", vec![b"k", b"holder", big], exceeds),
        (
            "LOCK.ACQUIRE",
            vec![b"k", b"w", b"1000", b"WAIT", big],
            "ERR timeout is too large (at most 9223372036854775807 milliseconds; 0 waits without limit)",
        ),
        ("LOCK.ACQUIRE", vec![b"free", b"o", b"1000", b"FENCE", big], "ERR token is too large (at most 9223372036854775807)"),
        ("LOCK.ACQUIRE", vec![b"k", b"holder", b"1000", b"FENCE", big], "ERR token is too large (at most 9223372036854775807)"),
    ];
    for (name, args, want) in &cases {
        let cm = lock_cmd(name, args);
        assert_eq!(expect_err(&mut c, &cm), *want, "{}", describe(&cm.get_packed_command()));
    }
    // Still malformed: a negative beyond 64 bits, digits with junk.
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("free").arg("o").arg("-99999999999999999999999"));
    assert_eq!(e, E_TTL);
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("free").arg("o").arg(1000).arg("FENCE").arg("99999999999999999999999x"));
    assert_eq!(e, E_TOKEN);
    let i = info(&mut c, b"k").expect("k");
    assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"holder"[..], t0, 0));
    assert!(!exists(&mut c, b"free"));
    assert_eq!(grant(&mut c, "after", "o", 1000), t0 + 1, "no error moved the counter");
}

/// An owner is at most `redislock.max-owner-len` bytes (256 unless raised)
/// when a grant stores it; before, a 50 MB owner was accepted and copied
/// into the lock, every replica and the AOF. Locks stored before a lower
/// limit stay usable and survive reloads and replay.
#[test]
fn owners_beyond_max_owner_len_are_refused_and_stored_ones_still_load() {
    let mut s = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-owner-len"), "256");
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_max_owner_len"), 256);
    let e_long = "ERR owner is longer than redislock.max-owner-len (256 bytes)";
    let at_limit = vec![b'o'; 256];
    assert!(acquire(&mut c, b"k", &at_limit, 60_000).is_some(), "256 bytes is allowed");
    let over = vec![b'o'; 257];
    assert_eq!(expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("j").arg(over.as_slice()).arg(60_000)), e_long);
    let huge = vec![b'x'; 50 * 1024 * 1024];
    assert_eq!(expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("j").arg(huge.as_slice()).arg(60_000)), e_long);
    drop(huge);
    assert!(!exists(&mut c, b"j"), "a refused owner stored nothing");

    for bad in ["0", "1048577", "-1", "banana"] {
        assert!(try_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-owner-len").arg(bad)).is_err(), "{bad}");
    }
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-owner-len").arg("1048576"));
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_max_owner_len"), 1_048_576);
    let long = vec![b'L'; 4000];
    let t = acquire(&mut c, b"long", &long, 600_000).expect("4000 bytes under a 1 MiB limit");
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-owner-len").arg("256"));
    // Only what a grant would store is bounded: the lock stays usable.
    assert_eq!(expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("long").arg(long.as_slice()).arg(60_000)), e_long);
    assert_eq!(extend(&mut c, b"long", &long, 600_000), 1);
    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));
    assert_eq!(info(&mut c, b"long").expect("after DEBUG RELOAD").owner, long);
    wait_aof_flushed(&mut c);
    drop(c);
    s.kill9();
    s.set_module_args(&["max-owner-len", "256"]);
    s.start_again();
    let mut c = s.conn();
    let i = info(&mut c, b"long").expect("the AOF replays an owner longer than today's limit");
    assert_eq!((i.owner, i.token), (long.clone(), t));
    assert_eq!(release(&mut c, b"long", &long), 1);
}

#[test]
fn tokens_strictly_increase_across_keys_release_expiry_del_flushall_dbs() {
    let s = Server::start();
    let mut c = s.conn();
    let mut seen: Vec<(String, i64)> = Vec::new();
    fn push(what: &str, t: i64, seen: &mut Vec<(String, i64)>) {
        if let Some((w, last)) = seen.last() {
            assert!(t > *last, "token after {what} ({t}) must exceed token after {w} ({last})");
        }
        seen.push((what.to_string(), t));
    }
    for k in ["x", "y", "z"] {
        let t = grant(&mut c, k, "o", 100_000);
        push(&format!("grant {k}"), t, &mut seen);
    }
    assert_eq!(release(&mut c, b"x", b"o"), 1);
    let t = grant(&mut c, "x", "o", 100_000);
    push("re-grant after release", t, &mut seen);

    // Expiry: short lease, wait until Redis says it is gone.
    let t = grant(&mut c, "short", "o", 300);
    push("grant short", t, &mut seen);
    wait_until(Duration::from_secs(5), "lease of 'short' to expire", || pttl(&mut c, b"short") == -2);
    let t = grant(&mut c, "short", "o", 100_000);
    push("grant after expiry", t, &mut seen);

    let n = int_of(&ok_cmd(&mut c, cmd("DEL").arg("short")), "DEL");
    assert_eq!(n, 1);
    let t = grant(&mut c, "short", "o", 100_000);
    push("grant after DEL", t, &mut seen);

    ok_cmd(&mut c, &cmd("FLUSHALL"));
    assert!(!exists(&mut c, b"short"), "FLUSHALL removed the lock");
    let t = grant(&mut c, "short", "o", 100_000);
    push("grant after FLUSHALL", t, &mut seen);

    // Another database shares the same counter.
    let mut c1 = s.conn();
    ok_cmd(&mut c1, cmd("SELECT").arg(1));
    let t = grant(&mut c1, "short", "o", 100_000);
    push("grant in db 1", t, &mut seen);
    let t = grant(&mut c, "db0again", "o", 100_000);
    push("grant in db 0 after db 1", t, &mut seen);
}

#[test]
fn first_token_at_least_unix_micros_at_load() {
    let before = now_unix_us();
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "o", 1000);
    assert!(t >= before, "first token {t} must be >= Unix time in µs before the server started ({before})");
}

// ---------------------------------------------------------------------------
// RELEASE / EXTEND / INFO
// ---------------------------------------------------------------------------

#[test]
fn release_semantics() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "k", "alice", 100_000);
    assert_eq!(release(&mut c, b"k", b"bob"), 0, "release by another owner");
    assert!(exists(&mut c, b"k"), "key kept after foreign release");
    assert_eq!(info(&mut c, b"k").expect("info").owner, b"alice");
    assert_eq!(release(&mut c, b"k", b"alice"), 1, "release by the holder");
    assert!(!exists(&mut c, b"k"), "key gone after release");
    assert_eq!(release(&mut c, b"k", b"alice"), 0, "release of a missing key");
    assert_eq!(release(&mut c, b"never", b"alice"), 0, "release of a never-created key");
    // After release anyone can acquire.
    assert!(acquire(&mut c, b"k", b"bob", 1000).is_some(), "free after release");
}

#[test]
fn extend_semantics() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "alice", 10_000);
    assert_eq!(extend(&mut c, b"k", b"alice", 500_000), 1, "extend by holder");
    let p = pttl(&mut c, b"k");
    assert!(p > 400_000 && p <= 500_000, "PTTL after extend to 500000: {p}");
    assert_eq!(info(&mut c, b"k").expect("info").token, t, "extend keeps the token");
    // Extend can also shorten.
    assert_eq!(extend(&mut c, b"k", b"alice", 20_000), 1);
    let p = pttl(&mut c, b"k");
    assert!(p > 0 && p <= 20_000, "PTTL after extend to 20000: {p}");

    assert_eq!(extend(&mut c, b"k", b"bob", 900_000), 0, "extend by another owner");
    let p2 = pttl(&mut c, b"k");
    assert!(p2 <= p, "foreign extend must not change the lease ({p} -> {p2})");
    assert_eq!(info(&mut c, b"k").expect("info").owner, b"alice");
    assert_eq!(extend(&mut c, b"missing", b"alice", 1000), 0, "extend of a missing key");
    assert!(!exists(&mut c, b"missing"), "extend must not create a key");
    // Counter untouched by extend.
    assert_eq!(grant(&mut c, "n", "o", 1000), t + 1, "extend must not consume tokens");
}

#[test]
fn info_missing_resp2_resp3_and_persist() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(ok_cmd(&mut c, cmd("LOCK.INFO").arg("missing")), Value::Nil, "LOCK.INFO on a missing key");
    let t = grant(&mut c, "k", "alice", 100_000);
    // RESP2: exact flat array layout.
    let v = ok_cmd(&mut c, cmd("LOCK.INFO").arg("k"));
    match &v {
        Value::Array(items) => {
            assert_eq!(items.len(), 18, "{v:?}");
            assert_eq!(items[14], Value::BulkString(b"taken".to_vec()));
            assert_eq!(items[15], Value::Nil, "an exclusive lock has no permits taken");
            assert_eq!(items[16], Value::BulkString(b"value".to_vec()));
            assert_eq!(items[17], Value::Nil, "a lock granted without VALUE has none");
            assert_eq!(items[0], Value::BulkString(b"owner".to_vec()));
            assert_eq!(items[1], Value::BulkString(b"alice".to_vec()));
            assert_eq!(items[2], Value::BulkString(b"token".to_vec()));
            assert_eq!(items[3], Value::Int(t));
            assert_eq!(items[8], Value::BulkString(b"mode".to_vec()));
            assert_eq!(items[9], Value::BulkString(b"exclusive".to_vec()));
            assert_eq!(items[10], Value::BulkString(b"limit".to_vec()));
            assert_eq!(items[11], Value::Nil);
            assert_eq!(items[12], Value::BulkString(b"holders".to_vec()));
            let held = match &items[13] {
                Value::Array(rows) => match rows.as_slice() {
                    [Value::Array(row)] if row.len() == 6 => row[3].clone(),
                    other => panic!("one holder row of 6 items, got {other:?}"),
                },
                other => panic!("holders must be an array, got {other:?}"),
            };
            let held_ms = int_of(&held, "held-ms");
            assert!((0..10_000).contains(&held_ms), "alice has held the lock {held_ms} ms");
            assert_eq!(
                items[13],
                Value::Array(vec![Value::Array(vec![
                    Value::BulkString(b"alice".to_vec()),
                    Value::Int(t),
                    items[5].clone(),
                    held,
                    Value::Int(0),
                    Value::Int(1)
                ])])
            );
            assert_eq!(items[4], Value::BulkString(b"pttl".to_vec()));
            let p = int_of(&items[5], "pttl");
            assert!(p > 0 && p <= 100_000, "pttl {p}");
            assert_eq!(items[6], Value::BulkString(b"waiters".to_vec()));
            assert_eq!(items[7], Value::Int(0), "waiters must be 0 with nobody waiting");
        }
        other => panic!("RESP2 LOCK.INFO must be a flat array, got {other:?}"),
    }
    // RESP3: a map.
    let mut c3 = s.conn_resp3();
    let v3 = ok_cmd(&mut c3, cmd("LOCK.INFO").arg("k"));
    assert!(matches!(v3, Value::Map(_)), "RESP3 LOCK.INFO must be a map, got {v3:?}");
    match &v3 {
        Value::Map(pairs) => {
            let keys: Vec<Vec<u8>> = pairs
                .iter()
                .map(|(k, _)| match k {
                    Value::BulkString(b) => b.clone(),
                    Value::SimpleString(s) => s.as_bytes().to_vec(),
                    other => panic!("RESP3 LOCK.INFO map key {other:?}"),
                })
                .collect();
            assert_eq!(
                keys,
                vec![
                    b"owner".to_vec(),
                    b"token".to_vec(),
                    b"pttl".to_vec(),
                    b"waiters".to_vec(),
                    b"mode".to_vec(),
                    b"limit".to_vec(),
                    b"holders".to_vec(),
                    b"taken".to_vec(),
                    b"value".to_vec()
                ],
                "RESP3 LOCK.INFO fields: {v3:?}"
            );
            assert_eq!(pairs[3].1, Value::Int(0), "RESP3 waiters: {v3:?}");
        }
        other => panic!("RESP3 LOCK.INFO must be a map, got {other:?}"),
    }
    let i3 = parse_info(v3).expect("RESP3 info");
    assert_eq!(i3.owner, b"alice");
    assert_eq!(i3.token, t);
    assert!(i3.pttl > 0 && i3.pttl <= 100_000);
    assert_eq!(i3.waiters, 0);
    assert_eq!(ok_cmd(&mut c3, cmd("LOCK.INFO").arg("missing")), Value::Nil, "RESP3 LOCK.INFO on a missing key");
    // PERSIST: pttl -1 in both protocols.
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("PERSIST").arg("k")), "PERSIST"), 1);
    assert_eq!(info(&mut c, b"k").expect("info").pttl, -1, "RESP2 pttl after PERSIST");
    assert_eq!(info(&mut c3, b"k").expect("info").pttl, -1, "RESP3 pttl after PERSIST");
}

#[test]
fn binary_safe_owners() {
    let s = Server::start();
    let mut c = s.conn();
    let owner: &[u8] = b"ab\x00\xff\xfe\xc3(cd";
    let other: &[u8] = b"ab\x00zz";
    let prefix: &[u8] = b"ab";
    let t = acquire(&mut c, b"k", owner, 100_000).expect("grant to binary owner");
    let inf = info(&mut c, b"k").expect("info");
    assert_eq!(inf.owner, owner, "owner must round-trip byte for byte");
    assert_eq!(inf.token, t);
    assert_eq!(acquire(&mut c, b"k", other, 100_000), None, "owner differing after NUL");
    assert_eq!(acquire(&mut c, b"k", prefix, 100_000), None, "owner = prefix before NUL");
    assert_eq!(release(&mut c, b"k", other), 0);
    assert_eq!(release(&mut c, b"k", prefix), 0);
    assert_eq!(extend(&mut c, b"k", other, 1000), 0);
    assert_eq!(acquire(&mut c, b"k", owner, 100_000), Some(t), "same binary owner re-grant");
    assert_eq!(release(&mut c, b"k", owner), 1);
    assert!(!exists(&mut c, b"k"));
    // Binary key name too.
    let key: &[u8] = b"\x00k\xff";
    acquire(&mut c, key, owner, 1000).expect("grant on binary key");
    assert_eq!(info(&mut c, key).expect("info").owner, owner);
}

#[test]
fn wrongtype_on_list_string_is_a_plain_lock() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("RPUSH").arg("lst").arg("a").arg("b"));
    ok_cmd(&mut c, cmd("SET").arg("str").arg("value"));
    let key = "lst";
    let cases: Vec<redis::Cmd> = vec![
        lock_cmd("LOCK.ACQUIRE", &[key.as_bytes(), b"o", b"1000"]),
        lock_cmd("LOCK.ACQUIRE", &[key.as_bytes(), b"o", b"1000", b"FENCE", b"5"]),
        lock_cmd("LOCK.ACQUIRE", &[key.as_bytes(), b"o", b"1000", b"WAIT", b"0"]),
        lock_cmd("LOCK.RELEASE", &[key.as_bytes(), b"o"]),
        lock_cmd("LOCK.EXTEND", &[key.as_bytes(), b"o", b"1000"]),
        lock_cmd("LOCK.INFO", &[key.as_bytes()]),
    ];
    for cm in &cases {
        let e = expect_err(&mut c, cm);
        assert_eq!(e, E_WRONGTYPE, "{}", describe(&cm.get_packed_command()));
    }
    // A plain string is a lock held by its value (docs: plain-string
    // locks); another owner is refused and nothing changes.
    assert_eq!(acquire(&mut c, b"str", b"o", 1000), None, "ACQUIRE str by another owner");
    assert_eq!(acquire_fence(&mut c, b"str", b"o", 1000, 5), None);
    assert_eq!(release(&mut c, b"str", b"o"), 0, "RELEASE str by another owner");
    assert_eq!(extend(&mut c, b"str", b"o", 1000), 0, "EXTEND str by another owner");
    let i = info_any(&mut c, b"str").expect("LOCK.INFO of a plain string");
    assert_eq!(i.owner, b"value");
    assert_eq!(i.token, None, "plain-string lock has no token");
    let l: Vec<String> = cmd("LRANGE").arg("lst").arg(0).arg(-1).query(&mut c).expect("LRANGE");
    assert_eq!(l, vec!["a", "b"], "list untouched");
    let v: String = cmd("GET").arg("str").query(&mut c).expect("GET");
    assert_eq!(v, "value", "string untouched");
    let ty: String = cmd("TYPE").arg("str").query(&mut c).expect("TYPE str");
    assert_eq!(ty, "string", "refused operations keep the string a string");
    assert_eq!(pttl(&mut c, b"str"), -1, "string got no TTL");
    assert_eq!(pttl(&mut c, b"lst"), -1, "list got no TTL");
}

// ---------------------------------------------------------------------------
// Error table
// ---------------------------------------------------------------------------

#[test]
fn error_table_exact_texts_and_nothing_changes() {
    let s = Server::start();
    let mut c = s.conn();
    let t0 = grant(&mut c, "k", "holder", 100_000);
    let huge = "8000000000000000000";

    let exceeds = "ERR ttl exceeds redislock.max-ttl (3600000 ms)";
    // (args, expected error text) — every command targets the held key `k`
    // or the free key `free`.
    let mut cases: Vec<(&str, Vec<&[u8]>, &str)> = vec![
        // arity
        ("LOCK.ACQUIRE", vec![], ARITY_ACQUIRE),
        ("LOCK.ACQUIRE", vec![b"k"], ARITY_ACQUIRE),
        ("LOCK.ACQUIRE", vec![b"k", b"holder"], ARITY_ACQUIRE),
        ("LOCK.ACQUIRE", vec![b"free"], ARITY_ACQUIRE),
        ("LOCK.ACQUIRE", vec![b"free", b"o"], ARITY_ACQUIRE),
        ("LOCK.RELEASE", vec![], ARITY_RELEASE),
        ("LOCK.RELEASE", vec![b"k"], ARITY_RELEASE),
        ("LOCK.RELEASE", vec![b"k", b"holder", b"x"], ARITY_RELEASE),
        ("LOCK.EXTEND", vec![], ARITY_EXTEND),
        ("LOCK.EXTEND", vec![b"k"], ARITY_EXTEND),
        ("LOCK.EXTEND", vec![b"k", b"holder"], ARITY_EXTEND),
        ("LOCK.EXTEND", vec![b"k", b"holder", b"200000", b"x"], ARITY_EXTEND),
        ("LOCK.INFO", vec![], ARITY_INFO),
        ("LOCK.INFO", vec![b"k", b"x"], ARITY_INFO),
        // empty owner
        ("LOCK.ACQUIRE", vec![b"k", b"", b"200000"], E_EMPTY_OWNER),
        ("LOCK.ACQUIRE", vec![b"free", b"", b"200000"], E_EMPTY_OWNER),
        ("LOCK.RELEASE", vec![b"k", b""], E_EMPTY_OWNER),
        ("LOCK.EXTEND", vec![b"k", b"", b"200000"], E_EMPTY_OWNER),
        // unknown option, FENCE problems, token problems
        ("LOCK.ACQUIRE", vec![b"k", b"holder", b"200000", b"BOGUS", b"1"], "ERR unknown option 'BOGUS'"),
        ("LOCK.ACQUIRE", vec![b"free", b"o", b"200000", b"BOGUS"], "ERR unknown option 'BOGUS'"),
        ("LOCK.ACQUIRE", vec![b"k", b"holder", b"200000", b"FENCE"], E_FENCE_NEEDS),
        ("LOCK.ACQUIRE", vec![b"free", b"o", b"200000", b"FENCE"], E_FENCE_NEEDS),
        ("LOCK.ACQUIRE", vec![b"k", b"holder", b"200000", b"FENCE", huge.as_bytes(), b"FENCE", b"1"], E_FENCE_TWICE),
        ("LOCK.ACQUIRE", vec![b"free", b"o", b"200000", b"FENCE", huge.as_bytes(), b"FENCE", huge.as_bytes()], E_FENCE_TWICE),
        ("LOCK.ACQUIRE", vec![b"k", b"holder", b"200000", b"FENCE", b"-1"], E_TOKEN),
        ("LOCK.ACQUIRE", vec![b"k", b"holder", b"200000", b"FENCE", b"abc"], E_TOKEN),
        ("LOCK.ACQUIRE", vec![b"free", b"o", b"200000", b"FENCE", b"-1"], E_TOKEN),
        ("LOCK.ACQUIRE", vec![b"free", b"o", b"200000", b"FENCE", b"abc"], E_TOKEN),
        ("LOCK.ACQUIRE", vec![b"free", b"o", b"200000", b"FENCE", b"1.5"], E_TOKEN),
        // ttl above max
        ("LOCK.ACQUIRE", vec![b"k", b"holder", b"3600001"], exceeds),
        ("LOCK.ACQUIRE", vec![b"free", b"o", b"3600001"], exceeds),
        ("LOCK.EXTEND", vec![b"k", b"holder", b"3600001"], exceeds),
    ];
    // ttl not a positive integer, for ACQUIRE (held + free key) and EXTEND.
    let bad_ttls: [&[u8]; 5] = [b"0", b"-5", b"abc", b"1.5", b""];
    for ttl in bad_ttls {
        cases.push(("LOCK.ACQUIRE", vec![b"k", b"holder", ttl], E_TTL));
        cases.push(("LOCK.ACQUIRE", vec![b"free", b"o", ttl], E_TTL));
        cases.push(("LOCK.ACQUIRE", vec![b"free", b"o", ttl, b"FENCE", b"5"], E_TTL));
        cases.push(("LOCK.EXTEND", vec![b"k", b"holder", ttl], E_TTL));
    }

    let mut failures = Vec::new();
    for (name, args, want) in &cases {
        let before = info(&mut c, b"k").expect("k must exist before each case");
        let cm = lock_cmd(name, args);
        let desc = describe(&cm.get_packed_command());
        match try_cmd(&mut c, &cm) {
            Err(got) if got == *want => {}
            Err(got) => failures.push(format!("{desc}\n    want: {want}\n    got:  {got}")),
            Ok(v) => failures.push(format!("{desc}\n    want: {want}\n    got reply: {v:?}")),
        }
        let after = info(&mut c, b"k").expect("k must still exist after an error");
        assert_eq!(after.owner, before.owner, "owner changed by {desc}");
        assert_eq!(after.token, t0, "token changed by {desc}");
        assert!(after.pttl <= before.pttl, "lease of k changed by {desc}: {} -> {}", before.pttl, after.pttl);
        assert!(!exists(&mut c, b"free"), "{desc} created the free key");
    }
    // LOCK.APPLY with a wrong arity: either the arity error or the refusal.
    for args in [vec![], vec![&b"k"[..]], vec![b"k", b"o", b"1"], vec![b"k", b"o", b"1", b"0", b"x"]] {
        let cm = lock_cmd("LOCK.APPLY", &args);
        let got = expect_err(&mut c, &cm);
        assert!(got == ARITY_APPLY || got == E_APPLY, "{}: got {got}", describe(&cm.get_packed_command()));
    }
    assert!(failures.is_empty(), "{} of {} error cases answered wrongly:\n{}", failures.len(), cases.len(), failures.join("\n"));
    // No error consumed or raised the counter.
    assert_eq!(grant(&mut c, "after", "o", 1000), t0 + 1, "an erroring command advanced or raised the fencing counter");
}

#[test]
fn fence_beyond_the_lead_is_refused_and_exhausts_nothing() {
    let s = Server::start();
    let mut admin = s.conn();
    // The case: a user confined to one tenant's keys.
    ok_cmd(&mut admin, cmd("ACL").arg("SETUSER").arg("tenant").arg("on").arg(">pw").arg("~tenantA:*").arg("+@all"));
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("AUTH").arg("tenant").arg("pw"));
    for far in [i64::MAX, i64::MAX - 1, now_unix_us() + 61_000_000] {
        let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("tenantA:x").arg("me").arg(1000).arg("FENCE").arg(far));
        assert!(e.starts_with("ERR FENCE token is ahead of this server's clock by more than redislock.max-token-lead (60000 ms)"), "{e}");
        assert!(!exists(&mut admin, b"tenantA:x"), "a refused FENCE creates nothing");
    }
    // Every other key and database still grants, with clock-sized tokens.
    let t = grant(&mut admin, "other", "o", 1000);
    assert!(t < now_unix_us() + 1_000_000, "the counter was not pushed ahead: {t}");
    ok_cmd(&mut admin, cmd("SELECT").arg(3));
    assert!(grant(&mut admin, "db3", "o", 1000) > t);
    // Within the lead a FENCE is honoured exactly; the bound is a setting.
    let near = now_unix_us() + 50_000_000;
    assert_eq!(acquire_fence(&mut c, b"tenantA:y", b"me", 1000, near), Some(near));
    ok_cmd(&mut admin, cmd("CONFIG").arg("SET").arg("redislock.max-token-lead").arg(0));
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("tenantA:z").arg("me").arg(1000).arg("FENCE").arg(near + 10_000_000));
    assert!(e.contains("max-token-lead (0 ms)"), "{e}");
    // A FENCE the counter has already reached changes nothing: accepted.
    assert!(acquire_fence(&mut c, b"tenantA:z", b"me", 1000, near).expect("granted") > near);
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

fn config_get(c: &mut redis::Connection, name: &str) -> String {
    let v: Vec<String> = cmd("CONFIG").arg("GET").arg(name).query(c).expect("CONFIG GET");
    assert_eq!(v.len(), 2, "CONFIG GET {name} returned {v:?}");
    assert_eq!(v[0], name);
    v[1].clone()
}

#[test]
fn config_max_ttl_default_and_runtime_set() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "3600000");
    assert!(grant(&mut c, "atmax", "o", 3_600_000) > 0, "ttl equal to max-ttl is accepted");

    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-ttl").arg("1000"));
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "1000");
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(1001));
    assert_eq!(e, "ERR ttl exceeds redislock.max-ttl (1000 ms)");
    assert!(!exists(&mut c, b"k"));
    grant(&mut c, "k", "o", 1000);
    let e = expect_err(&mut c, cmd("LOCK.EXTEND").arg("k").arg("o").arg(1001));
    assert_eq!(e, "ERR ttl exceeds redislock.max-ttl (1000 ms)");
    assert_eq!(extend(&mut c, b"k", b"o", 1000), 1);

    for bad in ["0", "banana", "-1", "31536000001", ""] {
        let e = try_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-ttl").arg(bad));
        assert!(e.is_err(), "CONFIG SET redislock.max-ttl {bad:?} must be refused, got {e:?}");
        assert_eq!(config_get(&mut c, "redislock.max-ttl"), "1000", "after refused {bad:?}");
    }
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-ttl").arg("31536000000"));
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "31536000000");
    grant(&mut c, "year", "o", 31_536_000_000);
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k2").arg("o").arg(31_536_000_001i64));
    assert_eq!(e, "ERR ttl exceeds redislock.max-ttl (31536000000 ms)");
}

#[test]
fn config_max_ttl_from_module_arg() {
    let s = Server::start_full(&["max-ttl", "5000"], &[]);
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "5000");
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(5001));
    assert_eq!(e, "ERR ttl exceeds redislock.max-ttl (5000 ms)");
    grant(&mut c, "k", "o", 5000);
}

#[test]
fn config_max_ttl_from_config_directive() {
    let s = Server::start_with(&["--redislock.max-ttl", "60000"]);
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-ttl"), "60000");
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(60001));
    assert_eq!(e, "ERR ttl exceeds redislock.max-ttl (60000 ms)");
    grant(&mut c, "k", "o", 60000);
}

#[test]
fn bad_module_arg_server_does_not_come_up_with_module() {
    let started = std::time::Instant::now();
    match Server::try_start_full(&["max-ttl", "banana"], &[]) {
        Err(e) => {
            // Expected: redis-server aborts because the module refused to load.
            assert!(e.exited.is_some(), "server neither started nor exited (harness must report, not hang): {e}");
            assert!(started.elapsed() < Duration::from_secs(10), "harness took {:?} to report the failed start", started.elapsed());
        }
        Ok(s) => {
            let mut c = s.conn();
            let v = ok_cmd(&mut c, cmd("MODULE").arg("LIST"));
            let text = format!("{v:?}");
            assert!(!text.contains("redislock"), "server came up WITH the module despite max-ttl banana: {text}");
        }
    }
    // A bad value out of range is refused the same way.
    match Server::try_start_full(&["max-ttl", "0"], &[]) {
        Err(e) => assert!(e.exited.is_some(), "{e}"),
        Ok(s) => {
            let mut c = s.conn();
            let text = format!("{:?}", ok_cmd(&mut c, cmd("MODULE").arg("LIST")));
            assert!(!text.contains("redislock"), "module loaded with max-ttl 0: {text}");
        }
    }
}

// ---------------------------------------------------------------------------
// LOCK.APPLY from clients
// ---------------------------------------------------------------------------

#[test]
fn apply_refused_from_clients_multi_and_eval() {
    let s = Server::start();
    let mut c = s.conn();
    let deadline = (now_unix_ms() + 100_000).to_string();
    let e = expect_err(&mut c, cmd("LOCK.APPLY").arg("k").arg("o").arg(5).arg(&deadline));
    assert_eq!(e, E_APPLY);
    let e = expect_err(&mut c, cmd("LOCK.APPLY").arg("k").arg("o").arg(5).arg(0));
    assert_eq!(e, E_APPLY);
    assert!(!exists(&mut c, b"k"), "refused LOCK.APPLY created the key");

    // Inside MULTI/EXEC.
    ok_cmd(&mut c, &cmd("MULTI"));
    let q = try_cmd(&mut c, cmd("LOCK.APPLY").arg("k").arg("o").arg(5).arg(&deadline));
    match q {
        Ok(Value::SimpleString(ref s)) if s == "QUEUED" => {
            let v = ok_cmd(&mut c, &cmd("EXEC"));
            match v {
                Value::Array(items) => {
                    assert_eq!(items.len(), 1);
                    match &items[0] {
                        Value::ServerError(se) => {
                            let t = format!("{} {}", se.code(), se.details().unwrap_or(""));
                            assert_eq!(t, E_APPLY, "LOCK.APPLY inside EXEC");
                        }
                        other => panic!("LOCK.APPLY inside MULTI/EXEC must fail, got {other:?}"),
                    }
                }
                other => panic!("EXEC reply {other:?}"),
            }
        }
        Err(t) => {
            // Refused at queue time: EXEC then aborts.
            assert!(t.contains("LOCK.APPLY is accepted only"), "queue-time error: {t}");
            let _ = try_cmd(&mut c, &cmd("EXEC"));
        }
        Ok(other) => panic!("LOCK.APPLY in MULTI replied {other:?}"),
    }
    assert!(!exists(&mut c, b"k"), "LOCK.APPLY in MULTI created the key");

    // From a script.
    let e =
        expect_err(&mut c, cmd("EVAL").arg("return redis.call('LOCK.APPLY', KEYS[1], 'o', '5', ARGV[1])").arg(1).arg("k").arg(&deadline));
    assert!(
        e.contains("LOCK.APPLY is accepted only from the master link or while loading the AOF"),
        "EVAL redis.call('LOCK.APPLY') error: {e}"
    );
    assert!(!exists(&mut c, b"k"), "LOCK.APPLY from EVAL created the key");
    // The counter was not raised by any refused APPLY.
    let t = grant(&mut c, "probe", "o", 1000);
    let t2 = grant(&mut c, "probe2", "o", 1000);
    assert_eq!(t2, t + 1);
    let e = expect_err(&mut c, cmd("LOCK.APPLY").arg("k").arg("o").arg(t + 1_000_000).arg(0));
    assert_eq!(e, E_APPLY);
    assert_eq!(grant(&mut c, "probe3", "o", 1000), t2 + 1, "refused APPLY raised the counter");
}

// ---------------------------------------------------------------------------
// Command metadata
// ---------------------------------------------------------------------------

fn command_info(c: &mut redis::Connection, name: &str) -> (i64, Vec<String>, i64, i64, i64) {
    let v = ok_cmd(c, cmd("COMMAND").arg("INFO").arg(name));
    let outer = match v {
        Value::Array(a) => a,
        other => panic!("COMMAND INFO {name}: {other:?}"),
    };
    assert_eq!(outer.len(), 1, "COMMAND INFO {name}: {outer:?}");
    let entry = match &outer[0] {
        Value::Array(a) => a.clone(),
        other => panic!("COMMAND INFO {name}: command unknown? {other:?}"),
    };
    let flags: Vec<String> = match &entry[2] {
        Value::Array(f) | Value::Set(f) => f
            .iter()
            .map(|x| match x {
                Value::SimpleString(s) => s.clone(),
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                o => panic!("flag {o:?}"),
            })
            .collect(),
        other => panic!("flags {other:?}"),
    };
    (int_of(&entry[1], "arity"), flags, int_of(&entry[3], "first key"), int_of(&entry[4], "last key"), int_of(&entry[5], "step"))
}

#[test]
fn command_metadata_flags_and_keys() {
    let s = Server::start();
    let mut c = s.conn();
    let expect: [(&str, &[&str], &[&str]); 5] = [
        ("lock.acquire", &["write", "denyoom", "fast"], &["readonly"]),
        ("lock.release", &["write", "fast"], &["readonly"]),
        ("lock.extend", &["write", "fast"], &["readonly"]),
        ("lock.info", &["readonly", "fast"], &["write", "denyoom"]),
        ("lock.apply", &["write"], &["readonly"]),
    ];
    for (name, must, must_not) in expect {
        let (_arity, flags, first, last, step) = command_info(&mut c, name);
        for f in must {
            assert!(flags.iter().any(|x| x == f), "{name} lacks flag {f}: {flags:?}");
        }
        for f in must_not {
            assert!(!flags.iter().any(|x| x == f), "{name} must not have flag {f}: {flags:?}");
        }
        assert_eq!((first, last, step), (1, 1, 1), "{name} key spec (first, last, step)");
    }
    let keys: Vec<String> =
        cmd("COMMAND").arg("GETKEYS").arg("LOCK.ACQUIRE").arg("k").arg("o").arg("100").query(&mut c).expect("COMMAND GETKEYS LOCK.ACQUIRE");
    assert_eq!(keys, vec!["k"]);
    let keys: Vec<String> = cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.ACQUIRE")
        .arg("k")
        .arg("o")
        .arg("100")
        .arg("FENCE")
        .arg("7")
        .query(&mut c)
        .expect("COMMAND GETKEYS LOCK.ACQUIRE FENCE");
    assert_eq!(keys, vec!["k"]);
    let keys: Vec<String> =
        cmd("COMMAND").arg("GETKEYS").arg("LOCK.RELEASE").arg("rk").arg("o").query(&mut c).expect("COMMAND GETKEYS LOCK.RELEASE");
    assert_eq!(keys, vec!["rk"]);
}

// ---------------------------------------------------------------------------
// No trace for failed operations
// ---------------------------------------------------------------------------

fn exec_after_watch(a: &mut redis::Connection) -> Value {
    ok_cmd(a, &cmd("MULTI"));
    let q = ok_cmd(a, cmd("SET").arg("x").arg("1"));
    assert_eq!(q, Value::SimpleString("QUEUED".into()));
    ok_cmd(a, &cmd("EXEC"))
}

#[test]
fn failed_ops_do_not_invalidate_watch_successful_ops_do() {
    let s = Server::start();
    let mut a = s.conn();
    let mut b = s.conn();
    grant(&mut b, "k", "holder", 100_000);

    ok_cmd(&mut a, cmd("WATCH").arg("k").arg("missing"));
    assert_eq!(acquire(&mut b, b"k", b"other", 1000), None);
    assert_eq!(acquire_fence(&mut b, b"k", b"other", 1000, far_future_token()), None);
    assert_eq!(release(&mut b, b"k", b"other"), 0);
    assert_eq!(extend(&mut b, b"k", b"other", 1000), 0);
    assert_eq!(release(&mut b, b"missing", b"other"), 0);
    assert_eq!(extend(&mut b, b"missing", b"other", 1000), 0);
    let _ = expect_err(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(0));
    let _ = expect_err(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(1000).arg("FENCE"));
    let _ = expect_err(&mut b, cmd("LOCK.EXTEND").arg("k").arg("holder").arg("abc"));
    let _ = info(&mut b, b"k");
    let v = exec_after_watch(&mut a);
    assert_ne!(v, Value::Nil, "EXEC aborted: a failed lock operation invalidated WATCH");
    assert!(matches!(v, Value::Array(_)), "EXEC reply {v:?}");

    // Each successful operation does abort a watching transaction.
    let ops: Vec<(&str, redis::Cmd)> = vec![
        ("re-grant", lock_cmd("LOCK.ACQUIRE", &[b"k", b"holder", b"100000"])),
        ("extend", lock_cmd("LOCK.EXTEND", &[b"k", b"holder", b"100000"])),
        ("release", lock_cmd("LOCK.RELEASE", &[b"k", b"holder"])),
        ("grant", lock_cmd("LOCK.ACQUIRE", &[b"k", b"new", b"100000"])),
    ];
    for (what, op) in ops {
        ok_cmd(&mut a, cmd("WATCH").arg("k"));
        let r = ok_cmd(&mut b, &op);
        assert!(matches!(r, Value::Int(_)) && r != Value::Int(0), "{what} should have succeeded: {r:?}");
        let v = exec_after_watch(&mut a);
        assert_eq!(v, Value::Nil, "successful {what} must abort the watching EXEC");
    }
}

#[test]
fn keyspace_notifications_only_for_successful_ops() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("KEA"));
    grant(&mut c, "k", "holder", 100_000);

    let mut subcon = s.conn();
    let mut ps = subcon.as_pubsub();
    ps.psubscribe("__keyspace@0__:*").expect("PSUBSCRIBE keyspace");
    ps.set_read_timeout(Some(Duration::from_secs(5))).expect("pubsub read timeout");

    // Failed operations: must produce no event at all.
    assert_eq!(acquire(&mut c, b"k", b"other", 1000), None);
    assert_eq!(release(&mut c, b"k", b"other"), 0);
    assert_eq!(extend(&mut c, b"k", b"other", 1000), 0);
    assert_eq!(release(&mut c, b"missing", b"other"), 0);
    assert_eq!(extend(&mut c, b"missing", b"other", 1000), 0);
    let _ = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(0));
    let _ = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(1000).arg("FENCE"));
    let _ = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("fresh").arg("").arg(1000));
    let _ = info(&mut c, b"k");

    // Successful ones, then a marker.
    assert!(acquire(&mut c, b"k", b"holder", 100_000).is_some(), "holder re-grant");
    assert_eq!(extend(&mut c, b"k", b"holder", 200_000), 1);
    assert_eq!(release(&mut c, b"k", b"holder"), 1);
    ok_cmd(&mut c, cmd("SET").arg("marker").arg("1"));

    let mut events: Vec<(String, String)> = Vec::new();
    loop {
        let m = ps.get_message().unwrap_or_else(|e| panic!("no keyspace message within 5 s (got so far: {events:?}): {e}"));
        let ch: String = m.get_channel_name().to_string();
        let payload: String = m.get_payload().expect("payload");
        if ch == "__keyspace@0__:marker" {
            break;
        }
        events.push((ch, payload));
        assert!(events.len() < 100, "runaway events: {events:?}");
    }
    assert!(!events.is_empty(), "no event before the marker: successful ops emitted nothing");
    assert_eq!(
        events[0],
        ("__keyspace@0__:k".to_string(), "lock.acquire".to_string()),
        "first event must be the successful re-grant (failed ops must emit nothing); all: {events:?}"
    );
    let lock_events: Vec<&(String, String)> = events.iter().filter(|(_, p)| p.starts_with("lock.")).collect();
    let want = vec!["lock.acquire", "lock.extend", "lock.release"];
    assert_eq!(lock_events.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>(), want, "all events: {events:?}");
    assert!(lock_events.iter().all(|(ch, _)| ch == "__keyspace@0__:k"), "lock events on the wrong key: {events:?}");
}

#[test]
fn failed_ops_do_not_grow_the_aof() {
    let s = Server::start_with(&["--appendonly", "yes"]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);
    ok_cmd(&mut c, cmd("SET").arg("warm").arg("1"));
    grant(&mut c, "k", "holder", 100_000);
    let s0 = wait_aof_flushed(&mut c);
    assert!(s0 > 0, "AOF must have content after a SET and a grant");

    assert_eq!(acquire(&mut c, b"k", b"other", 1000), None);
    assert_eq!(acquire_fence(&mut c, b"k", b"other", 1000, far_future_token()), None);
    assert_eq!(release(&mut c, b"k", b"other"), 0);
    assert_eq!(extend(&mut c, b"k", b"other", 1000), 0);
    assert_eq!(release(&mut c, b"missing", b"other"), 0);
    assert_eq!(extend(&mut c, b"missing", b"other", 1000), 0);
    let _ = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(0));
    let _ = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(1000).arg("FENCE"));
    let _ = expect_err(&mut c, cmd("LOCK.APPLY").arg("z").arg("o").arg(1).arg(0));
    let _ = info(&mut c, b"k");
    let s1 = wait_aof_flushed(&mut c);
    assert_eq!(s1, s0, "failed lock operations were written to the AOF");

    grant(&mut c, "k2", "holder", 100_000);
    let s2 = wait_aof_flushed(&mut c);
    assert!(s2 > s1, "a successful grant must be written to the AOF ({s1} -> {s2})");
    assert_eq!(extend(&mut c, b"k2", b"holder", 100_000), 1);
    let s3 = wait_aof_flushed(&mut c);
    assert!(s3 > s2, "a successful extend must be written to the AOF");
    assert_eq!(release(&mut c, b"k2", b"holder"), 1);
    let s4 = wait_aof_flushed(&mut c);
    assert!(s4 > s3, "a successful release must be written to the AOF");
}

// ---------------------------------------------------------------------------
// Generic key commands on a lock key
// ---------------------------------------------------------------------------

#[test]
fn generic_key_commands_work_on_lock_keys() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "o", 100_000);

    let enc = ok_cmd(&mut c, cmd("OBJECT").arg("ENCODING").arg("k"));
    assert!(matches!(enc, Value::BulkString(ref b) if !b.is_empty()), "OBJECT ENCODING: {enc:?}");
    let idle = int_of(&ok_cmd(&mut c, cmd("OBJECT").arg("IDLETIME").arg("k")), "IDLETIME");
    assert!(idle >= 0, "OBJECT IDLETIME {idle}");
    let mem = int_of(&ok_cmd(&mut c, cmd("MEMORY").arg("USAGE").arg("k")), "MEMORY USAGE");
    assert!(mem > 0, "MEMORY USAGE {mem}");

    assert_eq!(int_of(&ok_cmd(&mut c, cmd("EXPIRE").arg("k").arg(1000)), "EXPIRE"), 1);
    let p = pttl(&mut c, b"k");
    assert!(p > 100_000 && p <= 1_000_000, "PTTL after EXPIRE 1000: {p}");
    let i = info(&mut c, b"k").expect("info after EXPIRE");
    assert!(i.pttl > 100_000, "LOCK.INFO pttl follows EXPIRE: {}", i.pttl);
    assert_eq!(i.token, t);
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("PERSIST").arg("k")), "PERSIST"), 1);
    assert_eq!(pttl(&mut c, b"k"), -1);
    assert_eq!(info(&mut c, b"k").expect("info").pttl, -1);

    assert_eq!(int_of(&ok_cmd(&mut c, cmd("DEL").arg("k")), "DEL"), 1);
    assert!(!exists(&mut c, b"k"));
    assert_eq!(info(&mut c, b"k"), None);
    let t2 = grant(&mut c, "k", "someone-else", 100_000);
    assert!(t2 > t);

    grant(&mut c, "u", "o", 100_000);
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("UNLINK").arg("u")), "UNLINK"), 1);
    assert!(!exists(&mut c, b"u"));
    assert_eq!(info(&mut c, b"u"), None);
    assert!(acquire(&mut c, b"u", b"p", 1000).is_some(), "free after UNLINK");
}
