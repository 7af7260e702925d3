//! LOCK.RESIZE (issue 61): a held semaphore's limit changes while its
//! holders keep their permits. A larger limit grants whoever waits at
//! once, in line order, as far as it fits; a smaller one grants nothing
//! until the holders fall under it. Requests with any LIMIT are served
//! under the limit in force while the key lives; the mark goes with the
//! last holder. The limit, the mark and holders over a shrunk limit
//! survive DEBUG RELOAD, an RDB restart, the AOF (replayed and rewritten)
//! and a replica's sync; a crafted over-limit group without the mark is
//! refused on RESTORE.

use crate::common;

use std::time::Duration;

use common::dump::{Dump, Field};
use common::*;
use redis::{Connection, Value};

/// `LOCK.RESIZE key limit` → the waiters granted, or `None` for nil.
fn resize(c: &mut Connection, key: &str, limit: i64) -> Option<i64> {
    match ok_cmd(c, cmd("LOCK.RESIZE").arg(key).arg(limit)) {
        Value::Int(n) => Some(n),
        Value::Nil => None,
        other => panic!("LOCK.RESIZE {key} {limit}: {other:?}"),
    }
}

fn ask(key: &str, owner: &str, limit: i64, permits: i64) -> redis::Cmd {
    let mut r = cmd("LOCK.ACQUIRE");
    r.arg(key).arg(owner).arg(600_000).arg("SHARED").arg("LIMIT").arg(limit);
    if permits != 1 {
        r.arg("PERMITS").arg(permits);
    }
    r
}

fn take(c: &mut Connection, key: &str, owner: &str, limit: i64, permits: i64) -> Option<i64> {
    match ok_cmd(c, &ask(key, owner, limit, permits)) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("ACQUIRE {key} {owner}: {other:?}"),
    }
}

/// A client blocked in `LOCK.ACQUIRE ... SHARED LIMIT limit [PERMITS k] WAIT`.
fn blocked(s: &Server, c: &mut Connection, key: &str, owner: &str, limit: i64, permits: i64) -> Connection {
    let before = waiters(c, key.as_bytes());
    let mut w = waiter(s, Duration::from_secs(20));
    let mut r = ask(key, owner, limit, permits);
    r.arg("WAIT").arg(20_000);
    send_cmd(&mut w, &r);
    wait_waiters(c, key.as_bytes(), before + 1);
    w
}

/// The limit LOCK.INFO gives, and (owner, permits) of each holder, sorted.
fn state(c: &mut Connection, key: &str) -> (i64, Vec<(String, i64)>) {
    let fields = info_fields(ok_cmd(c, cmd("LOCK.INFO").arg(key))).unwrap_or_else(|| panic!("{key} is held"));
    let limit = int_of(&fields[5].1, "limit");
    let mut holders: Vec<(String, i64)> =
        holder_rows_of(&fields).into_iter().map(|h| (String::from_utf8_lossy(&h.owner).into_owned(), h.permits)).collect();
    holders.sort();
    (limit, holders)
}

fn dump_shape(c: &mut Connection, key: &str) -> u64 {
    match ok_cmd(c, cmd("DUMP").arg(key)) {
        Value::BulkString(b) => Dump::parse(&b).fields[0].int(),
        other => panic!("DUMP {key}: {other:?}"),
    }
}

fn held(owners: &[(&str, i64)]) -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = owners.iter().map(|(o, k)| (o.to_string(), *k)).collect();
    v.sort();
    v
}

/// A larger limit grants the line's heads in order as far as they fit,
/// in the resize itself, whose reply counts them; the holders keep theirs.
#[test]
fn growing_grants_the_waiters_in_line_order_as_far_as_they_fit() {
    let s = Server::start();
    let mut c = s.conn();
    take(&mut c, "sem", "a", 2, 1).expect("a");
    take(&mut c, "sem", "b", 2, 1).expect("b");
    let mut w1 = blocked(&s, &mut c, "sem", "w1", 2, 1);
    let mut w2 = blocked(&s, &mut c, "sem", "w2", 2, 2);
    let mut w3 = blocked(&s, &mut c, "sem", "w3", 2, 1);

    // 2 + 1 fit 4; w2's 2 more do not, and w3 does not pass it.
    assert_eq!(resize(&mut c, "sem", 4), Some(1));
    let t1 = recv_token(&mut w1, "w1").expect("w1 granted by the resize");
    assert_eq!(state(&mut c, "sem"), (4, held(&[("a", 1), ("b", 1), ("w1", 1)])));
    assert_eq!(waiters(&mut c, b"sem"), 2, "w2 and w3 still wait");

    assert_eq!(resize(&mut c, "sem", 6), Some(2));
    let t2 = recv_token(&mut w2, "w2").expect("w2");
    let t3 = recv_token(&mut w3, "w3").expect("w3");
    assert!(t1 < t2 && t2 < t3, "granted in line order: {t1} {t2} {t3}");
    assert_eq!(state(&mut c, "sem"), (6, held(&[("a", 1), ("b", 1), ("w1", 1), ("w2", 2), ("w3", 1)])));
    assert_eq!(resize(&mut c, "sem", 6), Some(0), "nothing left to grant");
}

/// A smaller limit keeps every holder and grants nothing until the
/// permits taken fall under it; then the head is granted.
#[test]
fn shrinking_keeps_the_holders_and_grants_nothing_until_they_fall_under() {
    let s = Server::start();
    let mut c = s.conn();
    for o in ["a", "b", "c", "d"] {
        take(&mut c, "sem", o, 4, 1).expect(o);
    }
    assert_eq!(resize(&mut c, "sem", 2), Some(0));
    assert_eq!(state(&mut c, "sem"), (2, held(&[("a", 1), ("b", 1), ("c", 1), ("d", 1)])), "4 holders of 2 keep theirs");
    let mut w = blocked(&s, &mut c, "sem", "w", 4, 1);
    assert_eq!(release(&mut c, b"sem", b"a"), 1);
    assert_eq!(take(&mut c, "other", "x", 1, 1).map(|_| ()), Some(()), "another key is unaffected");
    assert_eq!(release(&mut c, b"sem", b"b"), 1);
    // 2 of 2 taken: nothing is granted, with or without WAIT.
    assert_eq!(waiters(&mut c, b"sem"), 1, "w still waits at 2 of 2");
    assert_eq!(state(&mut c, "sem").1, held(&[("c", 1), ("d", 1)]), "w is not granted at 2 of 2");
    let mut late = s.conn();
    assert_eq!(take(&mut late, "sem", "n", 4, 1), None, "no WAIT: nil, behind w and at 2 of 2");
    assert_eq!(release(&mut c, b"sem", b"c"), 1);
    recv_token(&mut w, "w").expect("w granted once 1 of 2 is taken");
    assert_eq!(state(&mut c, "sem"), (2, held(&[("d", 1), ("w", 1)])));
    assert_eq!(take(&mut late, "sem", "n", 4, 1), None, "2 of 2 again");
}

/// A request with the old LIMIT is served under the new one; PERMITS
/// above the limit in force is refused; other kinds still are. After the
/// last holder the key is gone, and a new LIMIT makes a new semaphore.
#[test]
fn requests_with_any_limit_are_served_under_the_resized_one_until_the_key_goes() {
    let s = Server::start();
    let mut c = s.conn();
    take(&mut c, "sem", "a", 2, 1).expect("a");
    assert_eq!(resize(&mut c, "sem", 3), Some(0));
    take(&mut c, "sem", "b", 2, 1).expect("the old LIMIT 2 is served");
    take(&mut c, "sem", "c", 7, 1).expect("any LIMIT is served under 3");
    assert_eq!(take(&mut c, "sem", "d", 2, 1), None, "3 of 3 taken");
    assert_eq!(
        expect_err(&mut c, &ask("sem", "e", 9, 4)),
        "ERR PERMITS must be between 1 and LIMIT (the semaphore was resized to LIMIT 3)"
    );
    let wrong = "ERR wrong lock kind: the key is a semaphore (SHARED LIMIT 3, resized)";
    assert_eq!(expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("sem").arg("e").arg(1000)), wrong);
    assert_eq!(expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("sem").arg("e").arg(1000).arg("SHARED")), wrong);
    for o in ["a", "b", "c"] {
        assert_eq!(release(&mut c, b"sem", o.as_bytes()), 1);
    }
    assert!(!exists(&mut c, b"sem"), "the last release deletes the key, mark and all");
    take(&mut c, "sem", "f", 5, 1).expect("a fresh semaphore of 5");
    assert_eq!(state(&mut c, "sem").0, 5);
    assert_eq!(
        expect_err(&mut c, &ask("sem", "g", 3, 1)),
        "ERR wrong lock kind: the key is a semaphore (SHARED LIMIT 5)",
        "the mark went with the last holder"
    );
    assert_eq!(dump_shape(&mut c, "sem"), 1, "saved as an unmarked group");
}

/// Not a semaphore: the kind named as ACQUIRE names it; a free key: nil;
/// bad lines: their errors. None of them changes anything.
#[test]
fn wrong_kinds_free_keys_and_malformed_lines() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "ex", "a", 60_000);
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("rw").arg("a").arg(60_000).arg("SHARED"));
    ok_cmd(&mut c, cmd("SET").arg("plain").arg("a"));
    ok_cmd(&mut c, cmd("RPUSH").arg("list").arg("x"));
    let lock = "ERR wrong lock kind: the key is a lock (exclusive or SHARED, no LIMIT)";
    assert_eq!(expect_err(&mut c, cmd("LOCK.RESIZE").arg("ex").arg(3)), lock);
    assert_eq!(expect_err(&mut c, cmd("LOCK.RESIZE").arg("rw").arg(3)), lock);
    assert_eq!(
        expect_err(&mut c, cmd("LOCK.RESIZE").arg("plain").arg(3)),
        "ERR wrong lock kind: the key is a plain-string lock (exclusive only)"
    );
    assert!(expect_err(&mut c, cmd("LOCK.RESIZE").arg("list").arg(3)).starts_with("WRONGTYPE"));
    assert_eq!(resize(&mut c, "free", 3), None, "nothing to resize");
    assert!(!exists(&mut c, b"free"));
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("short").arg("a").arg(50).arg("SHARED").arg("LIMIT").arg(2));
    wait_until(Duration::from_secs(5), "the short hold to end", || !exists(&mut c, b"short"));
    assert_eq!(resize(&mut c, "short", 3), None, "a semaphore whose holders all ended is free");
    take(&mut c, "sem", "a", 2, 1).expect("a");
    let limit = "ERR LIMIT must be an integer from 1 to 100000";
    for bad in ["0", "100001", "-1", "x", "", "2.5"] {
        assert_eq!(expect_err(&mut c, cmd("LOCK.RESIZE").arg("sem").arg(bad)), limit, "{bad:?}");
    }
    assert_eq!(
        expect_err(&mut c, cmd("LOCK.RESIZE").arg("sem").arg(3).arg("NOW")),
        "ERR syntax error: unexpected 'NOW' (LOCK.RESIZE key limit)"
    );
    assert!(expect_err(&mut c, cmd("LOCK.RESIZE").arg("sem")).contains("wrong number of arguments"));
    assert_eq!(state(&mut c, "sem").0, 2, "no bad line changed the limit");
    assert_eq!(
        expect_err(&mut c, &ask("sem", "b", 3, 1)),
        "ERR wrong lock kind: the key is a semaphore (SHARED LIMIT 2)",
        "no bad line marked it"
    );
    assert_eq!(resize(&mut c, "sem", 100_000), Some(0));
    assert_eq!(resize(&mut c, "sem", 1), Some(0));
    assert_eq!(ok_cmd(&mut c, &cmd("PING")), Value::SimpleString("PONG".into()));
}

/// Holders over a shrunk limit and the mark, checked after each reload.
fn assert_resized_state(c: &mut Connection, what: &str) {
    assert_resized_copy(c, what);
    assert_eq!(take(c, "sem", "c", 3, 1), None, "{what}: the old LIMIT is served under 1: held");
}

/// `assert_resized_state` without a request (a replica's).
fn assert_resized_copy(c: &mut Connection, what: &str) {
    assert_eq!(state(c, "sem"), (1, held(&[("a", 2), ("b", 1)])), "{what}: limit 1, both holders keep theirs");
    // Shrunk from 3: its largest limit, 3, is kept with it (shape 6).
    assert_eq!(dump_shape(c, "sem"), 6, "{what}: saved as a resized group with its largest limit");
}

fn shrunk(c: &mut Connection) {
    take(c, "sem", "a", 3, 2).expect("a");
    take(c, "sem", "b", 3, 1).expect("b");
    assert_eq!(resize(c, "sem", 1), Some(0));
}

#[test]
fn the_limit_the_mark_and_holders_over_it_survive_reload_and_restart() {
    let mut s = Server::start();
    let mut c = s.conn();
    shrunk(&mut c);
    assert_resized_state(&mut c, "before");
    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));
    assert_resized_state(&mut c, "DEBUG RELOAD");
    ok_cmd(&mut c, &cmd("SAVE"));
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_resized_state(&mut c, "RDB restart");
    assert!(!s.log_text().contains("refused a"), "nothing refused:\n{}", s.log_tail(20));
}

/// A rewritten AOF writes a resized semaphore's holders before its
/// LOCK.RESIZE; one cut between them (`aof-load-truncated`, a lost tail)
/// still loads a group its next save can store: the holder over the limit
/// marks it resized as it is applied. Unmarked, the next DEBUG RELOAD (or
/// restart) would refuse it, and with it the whole dataset.
#[test]
fn an_aof_cut_before_the_resize_still_loads_a_storable_group() {
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("SET").arg("other").arg("data"));
    shrunk(&mut c);
    bgrewriteaof(&mut c);
    drop(c);
    s.stop();
    let dir = s.dir.join("appendonlydir");
    // The resize to its largest limit (3), then to its limit (1).
    let resize_lines: &[u8] = b"*3\r\n$11\r\nLOCK.RESIZE\r\n$3\r\nsem\r\n$1\r\n3\r\n*3\r\n$11\r\nLOCK.RESIZE\r\n$3\r\nsem\r\n$1\r\n1\r\n";
    let mut cut = 0;
    for entry in std::fs::read_dir(&dir).expect("appendonlydir").flatten() {
        let bytes = std::fs::read(entry.path()).expect("read aof");
        if let Some(at) = bytes.windows(resize_lines.len()).position(|w| w == resize_lines) {
            let mut kept = bytes[..at].to_vec();
            kept.extend_from_slice(&bytes[at + resize_lines.len()..]);
            std::fs::write(entry.path(), kept).expect("write aof");
            cut += 1;
        }
    }
    assert_eq!(cut, 1, "the rewritten AOF has the resizes once");
    s.start_again();
    let mut c = s.conn();
    assert_eq!(state(&mut c, "sem"), (1, held(&[("a", 2), ("b", 1)])), "the holders over the limit loaded");
    assert_eq!(dump_shape(&mut c, "sem"), 4, "marked resized as they were applied (the largest limit went with the cut)");
    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));
    assert_eq!(state(&mut c, "sem"), (1, held(&[("a", 2), ("b", 1)])), "and stored so");
    assert_eq!(ok_cmd(&mut c, cmd("GET").arg("other")), Value::BulkString(b"data".to_vec()), "with the rest of the data");
}

fn aof_survives(preamble: &str) {
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]);
    let mut c = s.conn();
    shrunk(&mut c);
    wait_aof_flushed(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_resized_state(&mut c, "AOF replayed");
    bgrewriteaof(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_resized_state(&mut c, &format!("AOF rewritten (preamble {preamble})"));
    assert!(!s.log_text().contains("refused a"), "nothing refused:\n{}", s.log_tail(20));
}

#[test]
fn the_aof_replays_and_rewrites_a_resize() {
    aof_survives("no");
    aof_survives("yes");
}

/// A replica gets the limit and the mark (the resize travels before the
/// grants it makes), and refuses a client's resize.
#[test]
fn a_replica_gets_the_limit_and_the_mark() {
    let master = Server::start();
    let replica = Server::start();
    let mut m = master.conn();
    // Before the replica: the full sync carries the resized group.
    shrunk(&mut m);
    attach_replica(&master, &replica);
    let mut r = replica.conn();
    assert_resized_copy(&mut r, "full sync");
    // A holder over the limit re-granted travels with its permits.
    take(&mut m, "sem", "a", 3, 2).expect("a's re-grant");
    wait1(&mut m);
    assert_resized_copy(&mut r, "a re-grant over the limit");
    // A grow that grants a waiter travels as the resize and the grant.
    let mut w = blocked(&master, &mut m, "sem", "w", 3, 1);
    assert_eq!(resize(&mut m, "sem", 4), Some(1));
    recv_token(&mut w, "w").expect("w");
    wait1(&mut m);
    assert_eq!(state(&mut r, "sem"), state(&mut m, "sem"));
    assert_eq!(state(&mut r, "sem").0, 4);
    assert_eq!(dump_shape(&mut r, "sem"), 4);
    let e = expect_err(&mut r, cmd("LOCK.RESIZE").arg("sem").arg(9));
    assert!(e.starts_with("READONLY"), "LOCK.RESIZE on a replica: {e}");
    assert_eq!(state(&mut r, "sem").0, 4);
}

/// RESTORE takes the resized group as dumped, and refuses the same group
/// without the mark (more permits taken than its limit).
#[test]
fn restore_refuses_an_over_limit_group_without_the_mark() {
    let s = Server::start();
    let mut c = s.conn();
    shrunk(&mut c);
    let payload = match ok_cmd(&mut c, cmd("DUMP").arg("sem")) {
        Value::BulkString(b) => b,
        other => panic!("DUMP: {other:?}"),
    };
    let marked = Dump::parse(&payload);
    assert_eq!(marked.payload(), payload, "the codec is the server's");
    // Shape 6: limit 1, the mark naming its largest limit 3, 2 holders.
    assert_eq!(marked.fields[..4], [Field::Int(6), Field::Int(1), Field::Int(3), Field::Int(2)]);
    ok_cmd(&mut c, cmd("RESTORE").arg("copy").arg(0).arg(&payload));
    assert_eq!(state(&mut c, "copy"), state(&mut c, "sem"), "restored as dumped");
    assert_eq!(dump_shape(&mut c, "copy"), 6);
    // The same group as shape 4 (resized, largest its limit) restores too.
    let mut d = marked.clone();
    d.fields.remove(2);
    d.fields[0] = Field::Int(4);
    ok_cmd(&mut c, cmd("RESTORE").arg("four").arg(0).arg(d.payload()));
    assert_eq!(state(&mut c, "four"), state(&mut c, "sem"), "shape 4 as earlier files hold it");
    assert_eq!(dump_shape(&mut c, "four"), 4);
    for (shape, reason) in [(2, "a holder taking 2 permits of LIMIT 1"), (1, "")] {
        let mut unmarked = d.clone();
        unmarked.fields[0] = Field::Int(shape);
        if shape == 1 {
            // Without permits: each holder one, two of one.
            unmarked.fields.remove(10);
            unmarked.fields.remove(6);
        }
        let e = expect_err(&mut c, cmd("RESTORE").arg("x").arg(0).arg(unmarked.payload()));
        assert!(e.contains("Bad data format"), "shape {shape}: {e}");
        assert!(!exists(&mut c, b"x"));
        if !reason.is_empty() {
            assert!(s.log_text().contains(reason), "the log says {reason:?}:\n{}", s.log_tail(10));
        }
    }
    assert!(s.log_text().contains("2 permits taken of LIMIT 1"), "{}", s.log_tail(10));
    let mut marked_lock = d.clone();
    marked_lock.fields[1] = Field::Int(0);
    assert!(expect_err(&mut c, cmd("RESTORE").arg("x").arg(0).arg(marked_lock.payload())).contains("Bad data format"));
    assert!(s.log_text().contains("a lock without LIMIT marked resized"), "{}", s.log_tail(10));
}

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// One look at the semaphore right after a grant: each holder's token and
/// permits.
type Snapshot = Vec<(i64, i64)>;

/// Workers loop acquire (SHARED LIMIT 3, PERMITS 1 or 2, WAIT) / look /
/// release while another client resizes the semaphore between 1 and 4 at
/// random; an anchor holds a permit throughout, so the mark stays. Each
/// resize runs in MULTI after an exclusive grant on another key, whose
/// token T splits the counter: every grant with a token above T (the
/// resize's own included) and below the next resize's was made under its
/// limit. The holders of a look with tokens up to a holder's own were all
/// there at its grant, so their permits fit the limit in force then. A
/// grant that ignored the new limit (the request's LIMIT 3, or the old
/// limit) breaks it at the first shrink a waiter is granted through.
#[test]
fn grants_fit_the_limit_in_force_while_it_changes() {
    let s = Server::start();
    let mut c = s.conn();
    take(&mut c, "sem", "anchor", 3, 1).expect("the anchor");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let mut w = waiter(&s, Duration::from_secs(10));
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut rng = Lcg(i + 7);
                let owner = format!("w{i}");
                let mut looks: Vec<Snapshot> = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let permits = 1 + rng.below(2) as i64;
                    let mut r = ask("sem", &owner, 3, permits);
                    r.arg("WAIT").arg(200);
                    match try_cmd(&mut w, &r) {
                        Ok(Value::Int(_)) => {
                            let rows = holder_rows(&mut w, "sem");
                            looks.push(rows.iter().map(|h| (h.token.expect("a token"), h.permits)).collect());
                            assert_eq!(release(&mut w, b"sem", owner.as_bytes()), 1, "{owner} releases its hold");
                        }
                        Ok(Value::Nil) => {}
                        // PERMITS 2 under a limit of 1.
                        Err(e) if e.contains("resized to LIMIT 1") && permits == 2 => {}
                        other => panic!("{owner}: {other:?}"),
                    }
                }
                looks
            })
        })
        .collect();
    // (T, limit): from T on, this limit is in force.
    let mut history: Vec<(i64, i64)> = vec![(0, 3)];
    let mut rng = Lcg(99);
    let mut granted_by_resizes = 0;
    for _ in 0..300 {
        let limit = 1 + rng.below(4) as i64;
        let (split, granted): (i64, i64) = {
            let mut p = redis::pipe();
            p.atomic()
                .cmd("LOCK.ACQUIRE")
                .arg("split")
                .arg("r")
                .arg(10_000)
                .cmd("LOCK.RESIZE")
                .arg("sem")
                .arg(limit)
                .cmd("LOCK.RELEASE")
                .arg("split")
                .arg("r")
                .ignore();
            p.query(&mut c).expect("the resize's MULTI")
        };
        history.push((split, limit));
        granted_by_resizes += granted;
        std::thread::sleep(Duration::from_millis(2 + rng.below(6)));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let looks: Vec<Snapshot> = workers.into_iter().flat_map(|w| w.join().expect("a worker")).collect();
    let in_force = |token: i64| history.iter().rev().find(|(t, _)| *t < token).map_or(3, |(_, l)| *l);
    let mut checked = 0;
    for look in &looks {
        for &(token, _) in look {
            let there: i64 = look.iter().filter(|(t, _)| *t <= token).map(|(_, k)| k).sum();
            if token > history[1].0 {
                checked += 1;
                assert!(
                    there <= in_force(token),
                    "a grant (token {token}) under LIMIT {} left {there} permits taken: {look:?}",
                    in_force(token)
                );
            }
        }
    }
    assert!(looks.len() > 100 && checked > 100, "{} grants looked at, {checked} checked", looks.len());
    assert!(granted_by_resizes > 0, "some resize granted a waiter");
}

/// Operators only: `@dangerous` where the server has categories (and
/// `redislock-admin` where the module can add it); by name everywhere.
#[test]
fn acl_keeps_resizing_to_operators() {
    let mut categorised = Vec::new();
    for (name, bin) in crate::acl::servers() {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut admin = srv.conn();
        take(&mut admin, "sem", "a", 2, 1).expect("a");
        let keys = ok_cmd(&mut admin, cmd("COMMAND").arg("GETKEYS").arg("LOCK.RESIZE").arg("sem").arg(3));
        assert_eq!(keys, Value::Array(vec![Value::BulkString(b"sem".to_vec())]), "{name}");
        let mut by_name = crate::acl::user(&srv, "byname", &["~*", "+@all", "-lock.resize"]);
        assert_refused(try_cmd(&mut by_name, cmd("LOCK.RESIZE").arg("sem").arg(3)), "NOPERM", "-lock.resize");
        let mut expected_limit = 2;
        let info_text = format!("{:?}", ok_cmd(&mut admin, cmd("COMMAND").arg("INFO").arg("lock.resize")));
        assert!(info_text.contains("denyoom") && info_text.contains("write"), "{name}: {info_text}");
        if info_text.contains("@write") {
            categorised.push(name.clone());
            assert!(info_text.contains("@dangerous") && info_text.contains("@slow"), "{name}: {info_text}");
            let mut no_danger = crate::acl::user(&srv, "nodanger", &["~*", "+@all", "-@dangerous"]);
            assert_refused(try_cmd(&mut no_danger, cmd("LOCK.RESIZE").arg("sem").arg(3)), "NOPERM", "-@dangerous");
            let cats: Vec<String> = cmd("ACL").arg("CAT").query(&mut admin).expect("ACL CAT");
            if cats.iter().any(|c| c == "redislock-admin") {
                let mut ops = crate::acl::user(&srv, "ops", &["~*", "-@all", "+@redislock-admin"]);
                assert_eq!(resize(&mut ops, "sem", 3), Some(0), "{name}: +@redislock-admin resizes");
                expected_limit = 3;
            }
        }
        assert_eq!(state(&mut admin, "sem").0, expected_limit, "{name}: only an operator resized");
    }
    assert!(categorised.iter().any(|n| n == "valkey-8.1"), "Valkey 8.1 categorises module commands: {categorised:?}");
}

/// Watchers hear `lock.resize` on the key when a semaphore was resized,
/// and nothing for a free key or a refused resize.
#[test]
fn a_resize_is_announced_on_the_key() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("Kg"));
    take(&mut c, "sem", "a", 2, 1).expect("a");
    grant(&mut c, "ex", "a", 60_000);
    let mut subcon = s.conn();
    let mut ps = subcon.as_pubsub();
    ps.psubscribe("__keyspace@0__:*").expect("PSUBSCRIBE");
    ps.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
    resize(&mut c, "free", 3);
    assert!(try_cmd(&mut c, cmd("LOCK.RESIZE").arg("ex").arg(3)).is_err());
    resize(&mut c, "sem", 3);
    // A generic event (class g) after it, as the end.
    ok_cmd(&mut c, cmd("SET").arg("marker").arg("1"));
    ok_cmd(&mut c, cmd("DEL").arg("marker"));
    let events = keyspace_events_until(&mut ps, "marker");
    assert_eq!(events, vec![("__keyspace@0__:sem".to_string(), "lock.resize".to_string())]);
}

/// Odd arguments in every position: each reply is a count, nil or a
/// documented error; no key is made, and the server lives on.
#[test]
fn a_barrage_of_odd_resizes_gets_replies_or_errors() {
    let mut s = Server::start();
    let mut c = s.conn();
    take(&mut c, "sem", "a", 2, 1).expect("a");
    grant(&mut c, "ex", "a", 60_000);
    let values: [&[u8]; 16] = [
        b"sem",
        b"ex",
        b"free",
        b"",
        b"0",
        b"1",
        b"2",
        b"100000",
        b"100001",
        b"-1",
        b"9223372036854775808",
        b"\r\n",
        b"\x00\xff",
        b"LIMIT",
        b"1e3",
        b" 3",
    ];
    let mut rng = Lcg(61);
    for _ in 0..2_000 {
        let n = rng.below(5) as usize;
        let mut r = cmd("LOCK.RESIZE");
        let args: Vec<&[u8]> = (0..n).map(|_| values[rng.below(values.len() as u64) as usize]).collect();
        for a in &args {
            r.arg(*a);
        }
        match try_cmd(&mut c, &r) {
            Ok(Value::Int(k)) => assert!(n == 2 && args[0] == b"sem" && k >= 0, "{args:?}: {k}"),
            Ok(Value::Nil) => assert!(n == 2 && args[0] != b"sem" && args[0] != b"ex", "{args:?}: nil"),
            Ok(other) => panic!("{args:?}: {other:?}"),
            Err(e) => assert!(
                e == "ERR wrong number of arguments for 'lock.resize' command"
                    || e == "ERR LIMIT must be an integer from 1 to 100000"
                    || e.starts_with("ERR syntax error: unexpected '")
                    || e == "ERR wrong lock kind: the key is a lock (exclusive or SHARED, no LIMIT)",
                "{args:?}: {e}"
            ),
        }
    }
    let mut keys: Vec<Vec<u8>> = cmd("KEYS").arg("*").query(&mut c).expect("KEYS");
    keys.sort();
    assert_eq!(keys, vec![b"ex".to_vec(), b"sem".to_vec()], "no key made");
    assert!(s.is_alive());
    assert_eq!(state(&mut c, "sem").1, held(&[("a", 1)]));
}
