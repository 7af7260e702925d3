//! The lock family (issue 16): shared locks and counting semaphores next to
//! exclusive locks, checked against real redis-server processes and the
//! contract in the issue's spec (docs/design-lock-family.md records the
//! decisions):
//!
//! - syntax and kind errors (`LIMIT` needs `SHARED`, its range, a key's kind
//!   is fixed while anyone holds it), and that a refused request changes
//!   nothing;
//! - read-write locks held shared by many, semaphores up to their limit,
//!   per-holder RELEASE / EXTEND / lease end, re-grants, downgrade and
//!   upgrade;
//! - one FIFO line per key across modes: no barging, readers at the head
//!   granted together, an exclusive waiter holds back later readers;
//! - the 7-field `LOCK.INFO` in RESP2 and RESP3;
//! - every holder across DEBUG RELOAD, RDB and AOF restarts, replication,
//!   DUMP/RESTORE and COPY;
//! - a history checker: 16 clients on one key, with dropped connections and
//!   with a crash and restart, checked for mutual exclusion, the semaphore's
//!   limit, token order and starvation.
//!
//! Blocked requests run in threads, each on its own connection; the test
//! learns that a request is queued by polling `LOCK.INFO`'s `waiters` with a
//! deadline, never by sleeping. The harness's `info`/`wait_waiters` parse
//! the old 4-field reply, so this file has its own `info`.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

// ---------------------------------------------------------------------------
// The contract's texts
// ---------------------------------------------------------------------------

const E_LIMIT_NEEDS_SHARED: &str = "ERR syntax error: LIMIT needs SHARED";
const E_LIMIT_RANGE: &str = "ERR LIMIT must be an integer from 1 to 100000";
const E_KIND: &str = "ERR wrong lock kind:";
const E_UPGRADE: &str = "ERR upgrade refused";
const KIND_RW: &str = "the key is a lock (exclusive or SHARED, no LIMIT)";
const KIND_STRING: &str = "the key is a plain-string lock (exclusive only)";

fn kind_sem(limit: i64) -> String {
    format!("the key is a semaphore (SHARED LIMIT {limit})")
}

/// How long a test waits for an event (a reply, a queue length) before
/// failing: generous for a loaded 2-core machine.
const EVENT_DEADLINE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// How a request asks for the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    Exclusive,
    /// `SHARED` (a read-write lock).
    Shared,
    /// `SHARED LIMIT n` (a semaphore).
    Sem(i64),
}

/// `LOCK.ACQUIRE key owner ttl [SHARED [LIMIT n]] extra...`
fn acq_cmd(key: &str, owner: &str, ttl: i64, ask: Ask, extra: &[&str]) -> redis::Cmd {
    let mut c = cmd("LOCK.ACQUIRE");
    c.arg(key).arg(owner).arg(ttl);
    match ask {
        Ask::Exclusive => {}
        Ask::Shared => {
            c.arg("SHARED");
        }
        Ask::Sem(n) => {
            c.arg("SHARED").arg("LIMIT").arg(n);
        }
    }
    for a in extra {
        c.arg(*a);
    }
    c
}

/// An ACQUIRE reply: `Some(token)` or `None` for nil.
fn token_reply(v: Value, what: &str) -> Option<i64> {
    match v {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("{what}: LOCK.ACQUIRE replied neither integer nor nil: {other:?}"),
    }
}

/// ACQUIRE that must not be an error: `Some(token)` or `None` (nil).
fn try_acq(con: &mut Connection, key: &str, owner: &str, ttl: i64, ask: Ask) -> Option<i64> {
    let what = format!("{key} {owner} {ask:?}");
    token_reply(ok_cmd(con, &acq_cmd(key, owner, ttl, ask, &[])), &what)
}

/// ACQUIRE that must be granted; returns the token.
fn must(con: &mut Connection, key: &str, owner: &str, ttl: i64, ask: Ask) -> i64 {
    try_acq(con, key, owner, ttl, ask).unwrap_or_else(|| panic!("LOCK.ACQUIRE {key} {owner} {ttl} {ask:?} must be granted, got nil"))
}

/// ACQUIRE that must be refused with nil (held incompatibly / others queued).
fn refused(con: &mut Connection, key: &str, owner: &str, ttl: i64, ask: Ask, why: &str) {
    if let Some(t) = try_acq(con, key, owner, ttl, ask) {
        panic!("LOCK.ACQUIRE {key} {owner} {ask:?} must be nil ({why}), got token {t}");
    }
}

/// ACQUIRE (with extra options) that must be an error starting with
/// `prefix` and containing `detail`; returns the text.
fn acq_err(con: &mut Connection, c: &redis::Cmd, prefix: &str, detail: &str) -> String {
    let e = expect_err(con, c);
    let shown = describe(&c.get_packed_command());
    assert!(e.starts_with(prefix), "{shown}: error must start with {prefix:?}, got {e:?}");
    assert!(e.contains(detail), "{shown}: error must name {detail:?}, got {e:?}");
    e
}

fn rel(con: &mut Connection, key: &str, owner: &str) -> i64 {
    release(con, key.as_bytes(), owner.as_bytes())
}

fn ext(con: &mut Connection, key: &str, owner: &str, ttl: i64) -> i64 {
    extend(con, key.as_bytes(), owner.as_bytes(), ttl)
}

/// Why a request from a history thread failed.
#[derive(Debug)]
enum Fail {
    /// An error reply (text as the server sent it).
    Server(String),
    /// The connection broke (or timed out).
    Io(String),
}

/// Send one command and read its reply, never panicking (for threads, whose
/// connections may break on purpose).
fn request(con: &mut Connection, c: &redis::Cmd) -> Result<Value, Fail> {
    con.send_packed_command(&c.get_packed_command()).map_err(|e| Fail::Io(e.to_string()))?;
    match con.recv_response() {
        Ok(Value::ServerError(e)) => Err(Fail::Server(match e.details() {
            Some(d) => format!("{} {d}", e.code()),
            None => e.code().to_string(),
        })),
        Ok(v) => Ok(v),
        Err(e) if e.code().is_some() && !e.is_io_error() => Err(Fail::Server(err_text(&e))),
        Err(e) => Err(Fail::Io(e.to_string())),
    }
}

// ---------------------------------------------------------------------------
// LOCK.INFO: 9 fields, RESP2 or RESP3
// ---------------------------------------------------------------------------

/// One holder as LOCK.INFO lists it: owner, token (nil for a plain-string
/// lock), pttl.
type Holder = (String, Option<i64>, i64);

/// A key's mode, limit and holders (owner, token), leases left out.
type Shape = (String, Option<i64>, Vec<(String, Option<i64>)>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Info {
    owner: Option<String>,
    token: Option<i64>,
    pttl: i64,
    waiters: i64,
    mode: String,
    limit: Option<i64>,
    holders: Vec<Holder>,
    /// A semaphore's permits taken (nil otherwise).
    taken: Option<i64>,
}

impl Info {
    /// Owners and tokens in LOCK.INFO's order (no leases): what persistence
    /// and replication must keep.
    fn who(&self) -> Vec<(String, Option<i64>)> {
        self.holders.iter().map(|(o, t, _)| (o.clone(), *t)).collect()
    }

    /// Everything but the leases and the queue.
    fn shape(&self) -> Shape {
        (self.mode.clone(), self.limit, self.who())
    }

    fn holder(&self, owner: &str) -> &Holder {
        self.holders.iter().find(|(o, _, _)| o == owner).unwrap_or_else(|| panic!("{owner} is not among the holders: {self:?}"))
    }

    fn holder_token(&self, owner: &str) -> i64 {
        self.holder(owner).1.unwrap_or_else(|| panic!("{owner}'s token is nil: {self:?}"))
    }

    fn holder_pttl(&self, owner: &str) -> i64 {
        self.holder(owner).2
    }
}

fn text_of(v: &Value, what: &str) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("{what}: expected a string, got {other:?}"),
    }
}

fn opt_int(v: &Value, what: &str) -> Option<i64> {
    match v {
        Value::Nil => None,
        Value::Int(i) => Some(*i),
        other => panic!("{what}: expected an integer or nil, got {other:?}"),
    }
}

/// Parse a LOCK.INFO reply strictly (the harness's `info_fields`: nil, or
/// the 9 fields in the contract's order as a flat RESP2 array of 18 items
/// or a RESP3 map of 9 entries). Also checks that the fields agree with
/// each other (see `check_info`).
fn parse_info(v: Value) -> Option<Info> {
    let pairs = info_fields(v)?;
    let owner = match &pairs[0].1 {
        Value::Nil => None,
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        other => panic!("LOCK.INFO owner must be a bulk string or nil, got {other:?}"),
    };
    let mode = text_of(&pairs[4].1, "LOCK.INFO mode");
    assert!(mode == "exclusive" || mode == "shared", "LOCK.INFO mode {mode:?}");
    let holders = holder_rows_of(&pairs)
        .into_iter()
        .map(|h| {
            let owner = String::from_utf8_lossy(&h.owner).into_owned();
            // Held-for is known for every module lock, never for a plain string.
            assert_eq!(h.held_ms.is_some(), h.token.is_some(), "held-ms of {owner}: {h:?}");
            assert!(h.held_ms.is_none_or(|ms| ms >= 0), "held-ms of {owner}: {h:?}");
            // Nothing here asks PERMITS: one permit per hold.
            assert_eq!(h.permits, 1, "permits of {owner}: {h:?}");
            (owner, h.token, h.pttl)
        })
        .collect();
    let info = Info {
        owner,
        token: opt_int(&pairs[1].1, "LOCK.INFO token"),
        pttl: int_of(&pairs[2].1, "LOCK.INFO pttl"),
        waiters: int_of(&pairs[3].1, "LOCK.INFO waiters"),
        mode,
        limit: opt_int(&pairs[5].1, "LOCK.INFO limit"),
        holders,
        taken: opt_int(&pairs[7].1, "LOCK.INFO taken"),
    };
    check_info(&info);
    Some(info)
}

/// What every LOCK.INFO reply must satisfy, whatever the key.
fn check_info(i: &Info) {
    assert!(i.waiters >= 0, "waiters {i:?}");
    assert!(!i.holders.is_empty(), "LOCK.INFO of a held key lists its holders: {i:?}");
    if i.mode == "exclusive" {
        assert_eq!(i.holders.len(), 1, "an exclusive lock has one holder: {i:?}");
        let (o, t, p) = &i.holders[0];
        assert_eq!(i.owner.as_ref(), Some(o), "owner is the holder's: {i:?}");
        assert_eq!(i.token, *t, "token is the holder's: {i:?}");
        assert!((i.pttl - p).abs() <= 1, "pttl is the holder's: {i:?}");
        assert_eq!(i.limit, None, "an exclusive lock has no limit: {i:?}");
        assert_eq!(i.taken, None, "an exclusive lock has no permits taken: {i:?}");
    } else {
        assert_eq!((i.owner.as_ref(), i.token), (None, None), "shared: owner and token are nil: {i:?}");
        assert!(i.holders.iter().all(|(_, t, _)| t.is_some()), "shared holders have tokens: {i:?}");
        if let Some(n) = i.limit {
            assert!((1..=100_000).contains(&n), "limit {n}: {i:?}");
            assert!(i.holders.len() as i64 <= n, "more holders than the limit: {i:?}");
        }
        // One permit per hold here (see `parse_info`).
        let taken = i.limit.map(|_| i.holders.len() as i64);
        assert_eq!(i.taken, taken, "a semaphore's permits taken are its holders' ({taken:?}): {i:?}");
        let longest =
            if i.holders.iter().any(|(_, _, p)| *p < 0) { -1 } else { i.holders.iter().map(|(_, _, p)| *p).max().expect("non-empty") };
        assert!((i.pttl - longest).abs() <= 1, "pttl is the longest lease among the holders ({longest}): {i:?}");
    }
}

/// LOCK.INFO of `key` (this file's 8-field parser; shadows the harness's).
fn info(con: &mut Connection, key: &str) -> Option<Info> {
    parse_info(ok_cmd(con, cmd("LOCK.INFO").arg(key)))
}

fn held(con: &mut Connection, key: &str) -> Info {
    info(con, key).unwrap_or_else(|| panic!("LOCK.INFO {key}: nobody holds it (expected holders)"))
}

/// Poll LOCK.INFO until `waiters` equals `n` (deadline `EVENT_DEADLINE`).
fn wait_queue(con: &mut Connection, key: &str, n: i64) {
    wait_until(EVENT_DEADLINE, &format!("LOCK.INFO {key} waiters == {n}"), || info(con, key).map(|i| i.waiters) == Some(n));
}

/// Tokens must strictly increase along the holders list (grant order).
fn assert_grant_order(i: &Info) {
    let tokens: Vec<i64> = i.holders.iter().map(|(_, t, _)| t.expect("token")).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "holders must be listed in grant order (tokens increasing): {i:?}");
}

fn owners(i: &Info) -> Vec<&str> {
    i.holders.iter().map(|(o, _, _)| o.as_str()).collect()
}

// ---------------------------------------------------------------------------
// Blocked requests in threads
// ---------------------------------------------------------------------------

type Reply = Result<Option<i64>, String>;

/// A `LOCK.ACQUIRE ... WAIT` running in its own thread on its own
/// connection; its reply and arrival time come back through a channel.
struct Pending {
    what: String,
    /// CLIENT ID of its connection (for CLIENT KILL).
    id: i64,
    rx: mpsc::Receiver<(Reply, Instant)>,
}

impl Pending {
    fn start(srv: &Server, key: &str, owner: &str, ttl: i64, ask: Ask, wait_ms: i64) -> Pending {
        let mut con = srv.conn();
        let id = client_id(&mut con);
        let wait = wait_ms.to_string();
        let c = acq_cmd(key, owner, ttl, ask, &["WAIT", &wait]);
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let r = match request(&mut con, &c) {
                Ok(Value::Int(t)) => Ok(Some(t)),
                Ok(Value::Nil) => Ok(None),
                Ok(other) => Err(format!("neither integer nor nil: {other:?}")),
                Err(Fail::Server(e)) => Err(e),
                Err(Fail::Io(e)) => Err(format!("connection: {e}")),
            };
            // The test may be gone already (it failed); nothing to tell then.
            let _ = tx.send((r, Instant::now()));
        });
        Pending { what: format!("{owner} ({ask:?} on {key} WAIT {wait_ms})"), id, rx }
    }

    /// Start a waiter and wait until the key's queue has grown to `queued`.
    fn queue(srv: &Server, o: &mut Connection, key: &str, owner: &str, ask: Ask, queued: i64) -> Pending {
        let p = Pending::start(srv, key, owner, 60_000, ask, 20_000);
        wait_queue(o, key, queued);
        p.still_waiting();
        p
    }

    fn reply(&self) -> (Reply, Instant) {
        self.rx.recv_timeout(EVENT_DEADLINE).unwrap_or_else(|e| panic!("{}: no reply within {EVENT_DEADLINE:?}: {e}", self.what))
    }

    /// The reply must be a grant; returns the token and when it arrived.
    fn granted(&self) -> (i64, Instant) {
        match self.reply() {
            (Ok(Some(t)), at) => (t, at),
            (other, _) => panic!("{}: expected a grant, got {other:?}", self.what),
        }
    }

    fn token(&self) -> i64 {
        self.granted().0
    }

    /// No reply has arrived (a snapshot; LOCK.INFO's waiters is the
    /// authoritative check).
    fn still_waiting(&self) {
        match self.rx.try_recv() {
            Err(TryRecvError::Empty) => {}
            Ok(r) => panic!("{}: must still be waiting, but replied {r:?}", self.what),
            Err(TryRecvError::Disconnected) => panic!("{}: thread gone", self.what),
        }
    }
}

// ---------------------------------------------------------------------------
// 1. Syntax and kind errors
// ---------------------------------------------------------------------------

#[test]
fn limit_syntax_errors() {
    let srv = Server::start();
    let mut c = srv.conn();

    for extra in [&["LIMIT", "3"][..], &["WAIT", "100", "LIMIT", "3"], &["LIMIT", "3", "FENCE", "1"]] {
        acq_err(&mut c, &acq_cmd("k", "o", 10_000, Ask::Exclusive, extra), E_LIMIT_NEEDS_SHARED, "");
    }
    for bad in ["0", "abc", "100001", "-1", "3.5", "", "99999999999999999999"] {
        for order in [["SHARED", "LIMIT", bad], ["LIMIT", bad, "SHARED"]] {
            acq_err(&mut c, &acq_cmd("k", "o", 10_000, Ask::Exclusive, &order), E_LIMIT_RANGE, "");
        }
    }
    // Each option at most once; LIMIT needs its value.
    for extra in [&["SHARED", "SHARED"][..], &["SHARED", "LIMIT", "2", "LIMIT", "2"], &["SHARED", "LIMIT"]] {
        acq_err(&mut c, &acq_cmd("k", "o", 10_000, Ask::Exclusive, extra), "ERR", "");
    }
    assert!(!exists(&mut c, b"k"), "refused requests must not create the key");

    // The bounds themselves are accepted, options in any order.
    must(&mut c, "big", "o", 60_000, Ask::Sem(100_000));
    assert_eq!(held(&mut c, "big").limit, Some(100_000));
    must(&mut c, "one", "a", 60_000, Ask::Sem(1));
    refused(&mut c, "one", "b", 60_000, Ask::Sem(1), "LIMIT 1 is full");
    let t = token_reply(ok_cmd(&mut c, &acq_cmd("ord", "a", 60_000, Ask::Exclusive, &["LIMIT", "2", "SHARED"])), "LIMIT before SHARED")
        .expect("LIMIT 2 SHARED on a free key is granted");
    let f = far_future_token();
    let fs = f.to_string();
    let tf = token_reply(
        ok_cmd(&mut c, &acq_cmd("ord", "b", 60_000, Ask::Exclusive, &["FENCE", &fs, "LIMIT", "2", "WAIT", "100", "SHARED"])),
        "FENCE LIMIT WAIT SHARED",
    )
    .expect("a second permit of LIMIT 2 is granted");
    assert_eq!(tf, f, "FENCE raises the new holder's token");
    let i = held(&mut c, "ord");
    assert_eq!((i.mode.as_str(), i.limit, i.who()), ("shared", Some(2), vec![("a".into(), Some(t)), ("b".into(), Some(f))]));
}

/// A kind error must leave the key exactly as it was: holders, tokens,
/// limit, queue and the key's expiry.
fn assert_unchanged(c: &mut Connection, key: &str, before: &Info, expire_before: i64) {
    let now = held(c, key);
    assert_eq!(now.shape(), before.shape(), "{key}: a refused request changed the holders");
    assert_eq!(now.waiters, before.waiters, "{key}: a refused request changed the queue");
    assert_eq!(pexpiretime(c, key.as_bytes()), expire_before, "{key}: a refused request moved the key's expiry");
}

#[test]
fn kind_errors_name_the_kind_and_change_nothing() {
    let srv = Server::start();
    let mut c = srv.conn();
    let sem4 = kind_sem(4);

    // A semaphore of 4 with one holder: room left, so these would be granted
    // or queued if the kind were not checked. The ttl is longer than the
    // holder's so that a request that touched the key would move its expiry.
    let ta = must(&mut c, "sem", "a", 60_000, Ask::Sem(4));
    let before = held(&mut c, "sem");
    let exp = pexpiretime(&mut c, b"sem");
    for (ask, extra) in [
        (Ask::Sem(3), &[][..]),
        (Ask::Sem(5), &[]),
        (Ask::Exclusive, &[]),
        (Ask::Shared, &[]),
        (Ask::Exclusive, &["WAIT", "5000"]),
        (Ask::Shared, &["WAIT", "5000"]),
    ] {
        acq_err(&mut c, &acq_cmd("sem", "b", 600_000, ask, extra), E_KIND, &sem4);
        assert_unchanged(&mut c, "sem", &before, exp);
    }
    // Full semaphore: an exclusive request with WAIT is still an error at
    // once, not a wait that ends in nil.
    for o in ["b", "c", "d"] {
        must(&mut c, "sem", o, 60_000, Ask::Sem(4));
    }
    let before = held(&mut c, "sem");
    let exp = pexpiretime(&mut c, b"sem");
    let t0 = Instant::now();
    acq_err(&mut c, &acq_cmd("sem", "e", 600_000, Ask::Exclusive, &["WAIT", "5000"]), E_KIND, &sem4);
    acq_err(&mut c, &acq_cmd("sem", "e", 600_000, Ask::Sem(2), &["WAIT", "5000"]), E_KIND, &sem4);
    assert!(t0.elapsed() < Duration::from_millis(4000), "kind errors must come at once, not after WAIT");
    assert_unchanged(&mut c, "sem", &before, exp);
    assert_eq!(before.holder_token("a"), ta);

    // A read-write lock held exclusive: SHARED LIMIT is the wrong kind, also
    // for the holder itself (a downgrade is SHARED without LIMIT).
    must(&mut c, "ex", "x", 60_000, Ask::Exclusive);
    let before = held(&mut c, "ex");
    let exp = pexpiretime(&mut c, b"ex");
    for (owner, extra) in [("y", &[][..]), ("x", &[]), ("y", &["WAIT", "5000"])] {
        acq_err(&mut c, &acq_cmd("ex", owner, 600_000, Ask::Sem(2), extra), E_KIND, KIND_RW);
        assert_unchanged(&mut c, "ex", &before, exp);
    }

    // A read-write lock held shared: the same.
    must(&mut c, "rs", "r1", 60_000, Ask::Shared);
    let before = held(&mut c, "rs");
    let exp = pexpiretime(&mut c, b"rs");
    for (owner, extra) in [("y", &[][..]), ("r1", &[]), ("y", &["WAIT", "5000"])] {
        acq_err(&mut c, &acq_cmd("rs", owner, 600_000, Ask::Sem(2), extra), E_KIND, KIND_RW);
        assert_unchanged(&mut c, "rs", &before, exp);
    }

    // A plain-string lock: SHARED is refused (also for its owner), the
    // string untouched; exclusive by another is merely held (nil).
    ok_cmd(&mut c, cmd("SET").arg("p").arg("po"));
    for (owner, ask) in [("y", Ask::Shared), ("po", Ask::Shared), ("y", Ask::Sem(2))] {
        acq_err(&mut c, &acq_cmd("p", owner, 600_000, ask, &[]), E_KIND, KIND_STRING);
    }
    refused(&mut c, "p", "y", 600_000, Ask::Exclusive, "a plain-string lock held by po");
    let v: String = cmd("GET").arg("p").query(&mut c).expect("GET p");
    assert_eq!(v, "po", "the plain string is untouched");
    assert_eq!(pttl(&mut c, b"p"), -1, "the plain string keeps no expiry");

    // The same limit is fine.
    let tb = must(&mut c, "sem2", "a", 60_000, Ask::Sem(4));
    assert!(must(&mut c, "sem2", "b", 60_000, Ask::Sem(4)) > tb);
}

// ---------------------------------------------------------------------------
// 2. Shared read-write locks
// ---------------------------------------------------------------------------

#[test]
fn readers_share_writers_wait_and_holders_are_separate() {
    let srv = Server::start();
    let mut c = srv.conn();

    let t1 = must(&mut c, "rw", "r1", 30_000, Ask::Shared);
    let t2 = must(&mut c, "rw", "r2", 30_000, Ask::Shared);
    let t3 = must(&mut c, "rw", "r3", 30_000, Ask::Shared);
    assert!(t1 < t2 && t2 < t3, "distinct increasing tokens: {t1} {t2} {t3}");
    let i = held(&mut c, "rw");
    assert_eq!((i.mode.as_str(), i.limit, i.waiters), ("shared", None, 0));
    assert_eq!(i.who(), vec![("r1".into(), Some(t1)), ("r2".into(), Some(t2)), ("r3".into(), Some(t3))]);
    assert!(i.pttl > 20_000 && i.pttl <= 30_000, "{i:?}");

    refused(&mut c, "rw", "w", 30_000, Ask::Exclusive, "readers hold");
    let v = ok_cmd(&mut c, &acq_cmd("rw", "w", 30_000, Ask::Exclusive, &["WAIT", "300"]));
    assert_eq!(v, Value::Nil, "a writer waiting behind readers times out with nil");
    assert_eq!(held(&mut c, "rw").waiters, 0, "the timed-out writer left the line");

    // Re-grant: the same token, a new lease.
    assert_eq!(try_acq(&mut c, "rw", "r1", 40_000, Ask::Shared), Some(t1), "re-grant keeps the token");
    assert!(held(&mut c, "rw").holder_pttl("r1") > 35_000, "re-grant renews r1's lease");

    // EXTEND acts on one holder.
    assert_eq!(ext(&mut c, "rw", "r2", 60_000), 1);
    assert_eq!(ext(&mut c, "rw", "w", 60_000), 0, "EXTEND by a non-holder");
    let i = held(&mut c, "rw");
    assert!(i.holder_pttl("r2") > 55_000, "r2 extended: {i:?}");
    assert!(i.holder_pttl("r3") <= 30_000, "r3 untouched: {i:?}");
    assert!(i.holder_pttl("r1") <= 40_000, "r1 untouched: {i:?}");
    assert!(i.pttl > 55_000, "pttl is the longest lease: {i:?}");

    // RELEASE acts on one holder.
    assert_eq!(rel(&mut c, "rw", "r1"), 1);
    assert_eq!(rel(&mut c, "rw", "r1"), 0, "r1 no longer holds");
    assert_eq!(rel(&mut c, "rw", "w"), 0, "w never held");
    let i = held(&mut c, "rw");
    assert_eq!(i.who(), vec![("r2".into(), Some(t2)), ("r3".into(), Some(t3))]);
    assert!(i.holder_pttl("r2") > 50_000, "r2's lease kept: {i:?}");
    refused(&mut c, "rw", "w", 30_000, Ask::Exclusive, "r2 and r3 still hold");

    assert_eq!(rel(&mut c, "rw", "r2"), 1);
    assert_eq!(owners(&held(&mut c, "rw")), ["r3"]);
    assert_eq!(rel(&mut c, "rw", "r3"), 1);
    assert!(!exists(&mut c, b"rw"), "the last holder's RELEASE deletes the key");
    assert_eq!(info(&mut c, "rw"), None);

    // A writer after the readers: a larger token than any reader's.
    let tw = must(&mut c, "rw", "w", 30_000, Ask::Exclusive);
    assert!(tw > t3, "writer's token {tw} must exceed every reader's ({t3})");
    let i = held(&mut c, "rw");
    assert_eq!((i.owner.as_deref(), i.token, i.mode.as_str(), i.limit), (Some("w"), Some(tw), "exclusive", None));
    refused(&mut c, "rw", "r1", 30_000, Ask::Shared, "a writer holds");
    assert_eq!(rel(&mut c, "rw", "w"), 1);
    assert!(!exists(&mut c, b"rw"));
}

#[test]
fn one_holders_lease_end_leaves_the_others_holding() {
    let srv = Server::start();
    let mut c = srv.conn();

    // Read-write lock: a's lease is short, b's long.
    let sent_a = Instant::now();
    let ta = must(&mut c, "rw", "a", 1500, Ask::Shared);
    let tb = must(&mut c, "rw", "b", 30_000, Ask::Shared);
    assert_eq!(held(&mut c, "rw").who(), vec![("a".into(), Some(ta)), ("b".into(), Some(tb))], "well before a's lease ends");
    wait_until(EVENT_DEADLINE, "a's lease to end (one holder left)", || held(&mut c, "rw").holders.len() == 1);
    assert!(sent_a.elapsed() >= Duration::from_millis(1499), "a's place was freed before its lease ended");
    let i = held(&mut c, "rw");
    assert_eq!((i.mode.as_str(), i.who()), ("shared", vec![("b".into(), Some(tb))]));
    assert!(i.pttl > 20_000, "b's lease is what is left: {i:?}");
    refused(&mut c, "rw", "w", 30_000, Ask::Exclusive, "b still holds");
    assert_eq!(rel(&mut c, "rw", "a"), 0, "a's hold is over");
    assert_eq!(rel(&mut c, "rw", "b"), 1);
    assert_eq!(info(&mut c, "rw"), None, "nobody holds after b's release");

    // Semaphore of 2: a's expiry makes room for a waiter, b keeps holding.
    let sent_a = Instant::now();
    let ta = must(&mut c, "sem", "a", 1500, Ask::Sem(2));
    let tb = must(&mut c, "sem", "b", 30_000, Ask::Sem(2));
    let w = Pending::queue(&srv, &mut c, "sem", "w", Ask::Sem(2), 1);
    let (tw, at) = w.granted();
    assert!(at.duration_since(sent_a) >= Duration::from_millis(1499), "w granted before a's lease ended");
    assert!(tw > tb && tb > ta);
    let i = held(&mut c, "sem");
    assert_eq!(i.who(), vec![("b".into(), Some(tb)), ("w".into(), Some(tw))]);
    assert_eq!((i.limit, i.waiters), (Some(2), 0));
}

// ---------------------------------------------------------------------------
// 3. Semaphores
// ---------------------------------------------------------------------------

#[test]
fn semaphore_admits_up_to_its_limit() {
    let srv = Server::start();
    let mut c = srv.conn();
    let ta = must(&mut c, "sem", "a", 30_000, Ask::Sem(3));
    let tb = must(&mut c, "sem", "b", 30_000, Ask::Sem(3));
    let tc = must(&mut c, "sem", "c", 30_000, Ask::Sem(3));
    assert!(ta < tb && tb < tc);
    refused(&mut c, "sem", "d", 30_000, Ask::Sem(3), "three permits taken");
    let i = held(&mut c, "sem");
    assert_eq!((i.owner.as_deref(), i.token, i.mode.as_str(), i.limit), (None, None, "shared", Some(3)));
    assert_eq!(i.who(), vec![("a".into(), Some(ta)), ("b".into(), Some(tb)), ("c".into(), Some(tc))]);

    // A holder's re-grant while full: same token, new lease.
    assert_eq!(try_acq(&mut c, "sem", "b", 60_000, Ask::Sem(3)), Some(tb), "re-grant keeps the token");
    let i = held(&mut c, "sem");
    assert!(i.holder_pttl("b") > 55_000 && i.holder_pttl("a") <= 30_000, "only b's lease renewed: {i:?}");
    assert_eq!(i.holders.len(), 3, "a re-grant takes no second permit: {i:?}");
    // A FENCE above its token gives it a new one.
    let f = far_future_token();
    let fs = f.to_string();
    let tb2 = token_reply(ok_cmd(&mut c, &acq_cmd("sem", "b", 60_000, Ask::Sem(3), &["FENCE", &fs])), "re-grant with FENCE")
        .expect("re-grant with FENCE is granted");
    assert_eq!(tb2, f, "FENCE above the holder's token gives a new token");
    assert_eq!(held(&mut c, "sem").holder_token("b"), f);

    assert_eq!(rel(&mut c, "sem", "a"), 1);
    let td = must(&mut c, "sem", "d", 30_000, Ask::Sem(3));
    assert!(td > tb2, "d's token {td} must exceed every earlier one ({tb2})");
    refused(&mut c, "sem", "e", 30_000, Ask::Sem(3), "full again");
    let mut who = held(&mut c, "sem").who();
    who.sort();
    assert_eq!(who, vec![("b".into(), Some(f)), ("c".into(), Some(tc)), ("d".into(), Some(td))]);
    for o in ["b", "c", "d"] {
        assert_eq!(rel(&mut c, "sem", o), 1);
    }
    assert!(!exists(&mut c, b"sem"), "the last release deletes the semaphore");
    // A fresh key may take another kind.
    must(&mut c, "sem", "x", 30_000, Ask::Exclusive);
}

// ---------------------------------------------------------------------------
// 4. Downgrade and upgrade
// ---------------------------------------------------------------------------

#[test]
fn downgrade_takes_a_new_token_and_admits_waiting_readers() {
    let srv = Server::start();
    let mut o = srv.conn();
    let mut x = srv.conn();
    let tx = must(&mut x, "k", "x", 60_000, Ask::Exclusive);
    let s1 = Pending::queue(&srv, &mut o, "k", "s1", Ask::Shared, 1);
    let s2 = Pending::queue(&srv, &mut o, "k", "s2", Ask::Shared, 2);
    let e = Pending::queue(&srv, &mut o, "k", "e", Ask::Exclusive, 3);
    let s3 = Pending::queue(&srv, &mut o, "k", "s3", Ask::Shared, 4);

    let td = must(&mut x, "k", "x", 60_000, Ask::Shared);
    assert!(td > tx, "downgrade gives a new larger token: {td} vs {tx}");
    // The readers at the head are in at once, within the downgrade.
    let i = held(&mut o, "k");
    assert_eq!(i.mode, "shared", "{i:?}");
    assert_eq!(owners(&i), ["x", "s1", "s2"], "the readers at the head of the line are admitted: {i:?}");
    assert_eq!(i.waiters, 2, "e (exclusive) and s3 behind it still wait: {i:?}");
    assert_grant_order(&i);
    let t1 = s1.token();
    let t2 = s2.token();
    assert_eq!((i.holder_token("x"), i.holder_token("s1"), i.holder_token("s2")), (td, t1, t2));
    assert!(td < t1 && t1 < t2);
    e.still_waiting();
    s3.still_waiting();

    assert_eq!(rel(&mut x, "k", "x"), 1);
    assert_eq!(rel(&mut o, "k", "s1"), 1);
    assert_eq!(rel(&mut o, "k", "s2"), 1);
    let te = e.token();
    assert!(te > t2);
    let i = held(&mut o, "k");
    assert_eq!((i.owner.as_deref(), i.mode.as_str(), i.waiters), (Some("e"), "exclusive", 1));
    s3.still_waiting();
    assert_eq!(rel(&mut o, "k", "e"), 1);
    assert!(s3.token() > te);
}

#[test]
fn upgrade_only_for_the_sole_reader() {
    let srv = Server::start();
    let mut c = srv.conn();

    let tu = must(&mut c, "k", "u", 60_000, Ask::Shared);
    let tu2 = must(&mut c, "k", "u", 60_000, Ask::Exclusive);
    assert!(tu2 > tu, "upgrade gives a new larger token: {tu2} vs {tu}");
    let i = held(&mut c, "k");
    assert_eq!((i.owner.as_deref(), i.token, i.mode.as_str()), (Some("u"), Some(tu2), "exclusive"));
    refused(&mut c, "k", "r", 60_000, Ask::Shared, "u holds it exclusive after the upgrade");
    assert_eq!(rel(&mut c, "k", "u"), 1);
    assert!(!exists(&mut c, b"k"));

    // Two readers: refused at once (an error, never queued), nothing changed.
    let tp = must(&mut c, "k", "p", 60_000, Ask::Shared);
    let tq = must(&mut c, "k", "q", 60_000, Ask::Shared);
    let before = held(&mut c, "k");
    let exp = pexpiretime(&mut c, b"k");
    acq_err(&mut c, &acq_cmd("k", "p", 600_000, Ask::Exclusive, &[]), E_UPGRADE, "");
    let t0 = Instant::now();
    acq_err(&mut c, &acq_cmd("k", "p", 600_000, Ask::Exclusive, &["WAIT", "5000"]), E_UPGRADE, "");
    assert!(t0.elapsed() < Duration::from_millis(4000), "an upgrade is refused at once, never queued");
    assert_unchanged(&mut c, "k", &before, exp);
    assert_eq!(before.who(), vec![("p".into(), Some(tp)), ("q".into(), Some(tq))]);
    assert_eq!(before.mode, "shared");

    // Once q has left, p is the sole reader: the upgrade is granted, even
    // with a writer queued (a holder's upgrade is not a newcomer).
    assert_eq!(rel(&mut c, "k", "q"), 1);
    let w = Pending::queue(&srv, &mut c, "k", "w", Ask::Exclusive, 1);
    let tp2 = must(&mut c, "k", "p", 60_000, Ask::Exclusive);
    assert!(tp2 > tq);
    let i = held(&mut c, "k");
    assert_eq!((i.owner.as_deref(), i.mode.as_str(), i.waiters), (Some("p"), "exclusive", 1));
    w.still_waiting();
    assert_eq!(rel(&mut c, "k", "p"), 1);
    assert!(w.token() > tp2);
}

// ---------------------------------------------------------------------------
// 5. Fairness
// ---------------------------------------------------------------------------

#[test]
fn one_fifo_line_across_modes() {
    let srv = Server::start();
    let mut o = srv.conn();
    let th = must(&mut o, "k", "h", 60_000, Ask::Shared);
    let x = Pending::queue(&srv, &mut o, "k", "x", Ask::Exclusive, 1);
    let s1 = Pending::queue(&srv, &mut o, "k", "s1", Ask::Shared, 2);
    let s2 = Pending::queue(&srv, &mut o, "k", "s2", Ask::Shared, 3);

    // No barging: a reader would be compatible with h, but x is first.
    refused(&mut o, "k", "n", 60_000, Ask::Shared, "x is queued first");
    let v = ok_cmd(&mut o, &acq_cmd("k", "n", 60_000, Ask::Shared, &["WAIT", "300"]));
    assert_eq!(v, Value::Nil, "a newcomer reader with WAIT queues behind x and times out");
    assert_eq!(held(&mut o, "k").waiters, 3, "the timed-out newcomer left the line");
    // h's own re-grant is not a newcomer.
    assert_eq!(try_acq(&mut o, "k", "h", 60_000, Ask::Shared), Some(th));
    assert_eq!(owners(&held(&mut o, "k")), ["h"]);

    // h leaves: x, and only x.
    assert_eq!(rel(&mut o, "k", "h"), 1);
    let i = held(&mut o, "k");
    assert_eq!((i.owner.as_deref(), i.mode.as_str(), i.waiters), (Some("x"), "exclusive", 2), "x first and alone: {i:?}");
    let tx = x.token();
    assert!(tx > th);
    assert_eq!(i.token, Some(tx));
    s1.still_waiting();
    s2.still_waiting();

    // x leaves: both readers together, in line order.
    assert_eq!(rel(&mut o, "k", "x"), 1);
    let i = held(&mut o, "k");
    assert_eq!((i.mode.as_str(), owners(&i), i.waiters), ("shared", vec!["s1", "s2"], 0), "readers batched: {i:?}");
    let (t1, t2) = (s1.token(), s2.token());
    assert!(tx < t1 && t1 < t2, "tokens after x's, in line order: {tx} {t1} {t2}");
    assert_eq!(i.who(), vec![("s1".into(), Some(t1)), ("s2".into(), Some(t2))]);
}

#[test]
fn semaphore_waiters_granted_in_fifo_order() {
    let srv = Server::start();
    let mut o = srv.conn();
    let ta = must(&mut o, "sem", "a", 60_000, Ask::Sem(2));
    let tb = must(&mut o, "sem", "b", 60_000, Ask::Sem(2));
    let w: Vec<Pending> = (1..=3).map(|n| Pending::queue(&srv, &mut o, "sem", &format!("w{n}"), Ask::Sem(2), n)).collect();
    refused(&mut o, "sem", "n", 60_000, Ask::Sem(2), "full and three queued");

    let mut tokens = vec![ta, tb];
    // Each release lets in exactly the head of the line.
    for (step, (leaving, expect)) in [("a", ["b", "w1"]), ("b", ["w1", "w2"]), ("w1", ["w2", "w3"])].into_iter().enumerate() {
        assert_eq!(rel(&mut o, "sem", leaving), 1);
        let i = held(&mut o, "sem");
        assert_eq!(owners(&i), expect, "after {leaving} leaves: {i:?}");
        assert_eq!(i.waiters, 2 - step as i64, "{i:?}");
        let t = w[step].token();
        assert_eq!(i.holder_token(expect[1]), t);
        tokens.push(t);
        for later in &w[step + 1..] {
            later.still_waiting();
        }
    }
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "grants in line order: {tokens:?}");
}

#[test]
fn an_exclusive_waiter_leaving_the_line_lets_readers_in() {
    let srv = Server::start();
    let mut o = srv.conn();

    // x times out: s, behind it and compatible with h, is granted while h
    // still holds.
    must(&mut o, "k", "h", 60_000, Ask::Shared);
    let x = Pending::start(&srv, "k", "x", 60_000, Ask::Exclusive, 3000);
    wait_queue(&mut o, "k", 1);
    let s = Pending::queue(&srv, &mut o, "k", "s", Ask::Shared, 2);
    assert!(matches!(x.reply().0, Ok(None)), "x times out with nil");
    let (ts, _) = s.granted();
    let i = held(&mut o, "k");
    assert_eq!((owners(&i), i.waiters), (vec!["h", "s"], 0), "{i:?}");
    assert_eq!(i.holder_token("s"), ts);

    // x disconnects: the same.
    must(&mut o, "k2", "h", 60_000, Ask::Shared);
    let x = Pending::queue(&srv, &mut o, "k2", "x", Ask::Exclusive, 1);
    let s = Pending::queue(&srv, &mut o, "k2", "s", Ask::Shared, 2);
    ok_cmd(&mut o, cmd("CLIENT").arg("KILL").arg("ID").arg(x.id));
    assert!(x.reply().0.is_err(), "x's connection was killed");
    let (ts, _) = s.granted();
    let i = held(&mut o, "k2");
    assert_eq!((owners(&i), i.waiters), (vec!["h", "s"], 0), "{i:?}");
    assert_eq!(i.holder_token("s"), ts);
}

// ---------------------------------------------------------------------------
// 6. LOCK.INFO's shape
// ---------------------------------------------------------------------------

#[test]
fn info_has_seven_fields_in_resp2_and_resp3() {
    let srv = Server::start();
    let mut c = srv.conn();
    let te = must(&mut c, "ex", "eo", 60_000, Ask::Exclusive);
    let t1 = must(&mut c, "rs", "r1", 60_000, Ask::Shared);
    let t2 = must(&mut c, "rs", "r2", 120_000, Ask::Shared);
    let m1 = must(&mut c, "sem", "m1", 120_000, Ask::Sem(5));
    let m2 = must(&mut c, "sem", "m2", 60_000, Ask::Sem(5));
    ok_cmd(&mut c, cmd("SET").arg("p").arg("po").arg("PX").arg(90_000));
    ok_cmd(&mut c, cmd("SET").arg("p0").arg("po"));
    let w = Pending::queue(&srv, &mut c, "ex", "w", Ask::Shared, 1);

    for (proto, mut con) in [("RESP2", srv.conn()), ("RESP3", srv.conn_resp3())] {
        let raw = ok_cmd(&mut con, cmd("LOCK.INFO").arg("ex"));
        match (&raw, proto) {
            (Value::Array(_), "RESP2") | (Value::Map(_), "RESP3") => {}
            other => panic!("{proto}: LOCK.INFO must be a flat array (RESP2) or a map (RESP3), got {other:?}"),
        }
        let i = parse_info(raw).expect("ex is held");
        assert_eq!(
            (i.owner.as_deref(), i.token, i.mode.as_str(), i.limit, i.waiters),
            (Some("eo"), Some(te), "exclusive", None, 1),
            "{proto}"
        );
        assert!(i.pttl > 50_000 && i.pttl <= 60_000, "{proto}: {i:?}");

        let i = info(&mut con, "rs").expect("rs is held");
        assert_eq!((i.owner.as_deref(), i.token, i.mode.as_str(), i.limit, i.waiters), (None, None, "shared", None, 0), "{proto}");
        assert_eq!(i.who(), vec![("r1".into(), Some(t1)), ("r2".into(), Some(t2))], "{proto}");
        assert!(i.holder_pttl("r1") > 50_000 && i.holder_pttl("r1") <= 60_000, "{proto}: {i:?}");
        assert!(i.holder_pttl("r2") > 110_000 && i.holder_pttl("r2") <= 120_000, "{proto}: {i:?}");
        assert_eq!(i.pttl, i.holder_pttl("r2"), "{proto}: pttl is the longest lease");

        let i = info(&mut con, "sem").expect("sem is held");
        assert_eq!((i.owner.as_deref(), i.token, i.mode.as_str(), i.limit, i.waiters), (None, None, "shared", Some(5), 0), "{proto}");
        assert_eq!(i.who(), vec![("m1".into(), Some(m1)), ("m2".into(), Some(m2))], "{proto}");
        assert!(i.holder_pttl("m1") > 110_000 && i.holder_pttl("m2") <= 60_000, "{proto}: {i:?}");
        assert_eq!(i.pttl, i.holder_pttl("m1"), "{proto}: pttl is the longest lease");

        let i = info(&mut con, "p").expect("p is a plain-string lock");
        assert_eq!((i.owner.as_deref(), i.token, i.mode.as_str(), i.limit), (Some("po"), None, "exclusive", None), "{proto}");
        assert_eq!(i.holders.len(), 1);
        assert_eq!((i.holders[0].0.as_str(), i.holders[0].1), ("po", None), "{proto}");
        assert!(i.pttl > 80_000 && i.pttl <= 90_000, "{proto}: the key's PTTL: {i:?}");
        let i = info(&mut con, "p0").expect("p0 is a plain-string lock");
        assert_eq!((i.pttl, i.holders[0].2), (-1, -1), "{proto}: no expiry: {i:?}");

        assert_eq!(info(&mut con, "nothing"), None, "{proto}: nil for a free key");
    }
    assert_eq!(rel(&mut c, "ex", "eo"), 1);
    assert!(w.token() > m2);
}

// ---------------------------------------------------------------------------
// 7. Persistence, replication, DUMP/RESTORE, COPY
// ---------------------------------------------------------------------------

/// A semaphore with three holders and a read-write lock with two readers,
/// each holder with its own lease (60/120/180 s); returns every token.
fn make_holders(c: &mut Connection) -> Vec<i64> {
    vec![
        must(c, "sem", "a", 60_000, Ask::Sem(3)),
        must(c, "sem", "b", 120_000, Ask::Sem(3)),
        must(c, "sem", "c", 180_000, Ask::Sem(3)),
        must(c, "rw", "r1", 180_000, Ask::Shared),
        must(c, "rw", "r2", 60_000, Ask::Shared),
    ]
}

/// Each holder's lease is its own (not the key's): within `slack` ms below
/// the ttl it was given.
fn assert_leases(c: &mut Connection, leases: &[(&str, &str, i64)], slack: i64, when: &str) {
    for (key, owner, ttl) in leases {
        let p = held(c, key).holder_pttl(owner);
        assert!(p > ttl - slack && p <= *ttl, "{when}: {key} {owner}'s lease must be its own ({ttl} ms given), pttl {p}");
    }
}

const LEASES: [(&str, &str, i64); 5] =
    [("sem", "a", 60_000), ("sem", "b", 120_000), ("sem", "c", 180_000), ("rw", "r1", 180_000), ("rw", "r2", 60_000)];

/// After a reload: the same holders; the semaphore is still full and the
/// readers still exclude a writer; a new token exceeds all.
fn assert_still_working(c: &mut Connection, tokens: &[i64], when: &str) {
    let max = *tokens.iter().max().expect("tokens");
    refused(c, "sem", "d", 60_000, Ask::Sem(3), &format!("{when}: the semaphore is still full"));
    refused(c, "rw", "w", 60_000, Ask::Exclusive, &format!("{when}: the readers still hold"));
    let next = must(c, "other", "n", 60_000, Ask::Shared);
    assert!(next > max, "{when}: new token {next} must exceed every earlier one ({max})");
    assert_eq!(rel(c, "sem", "b"), 1, "{when}: b still holds");
    assert!(must(c, "sem", "d", 60_000, Ask::Sem(3)) > next, "{when}: b's permit is free");
}

#[test]
fn holders_survive_debug_reload_and_rdb_restart() {
    let mut s = Server::start();
    let mut c = s.conn();
    let tokens = make_holders(&mut c);
    let before = [held(&mut c, "sem").shape(), held(&mut c, "rw").shape()];
    assert_eq!(before[0].2.len(), 3);

    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));
    assert_eq!([held(&mut c, "sem").shape(), held(&mut c, "rw").shape()], before, "after DEBUG RELOAD");
    assert_leases(&mut c, &LEASES, 20_000, "after DEBUG RELOAD");

    ok_cmd(&mut c, &cmd("SAVE"));
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_eq!([held(&mut c, "sem").shape(), held(&mut c, "rw").shape()], before, "after RDB restart");
    assert_leases(&mut c, &LEASES, 20_000, "after RDB restart");
    assert_still_working(&mut c, &tokens, "after RDB restart");
}

fn holders_survive_aof(preamble: &str) {
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);
    // Before the rewrite: a, r1 and x (who leaves after it).
    let mut tokens = vec![must(&mut c, "sem", "a", 60_000, Ask::Sem(3)), must(&mut c, "rw", "r1", 180_000, Ask::Shared)];
    must(&mut c, "sem", "x", 60_000, Ask::Sem(3));
    bgrewriteaof(&mut c);
    // After it (the incremental file): b, c, r2; x leaves; b's lease grows.
    tokens.push(must(&mut c, "sem", "b", 60_000, Ask::Sem(3)));
    assert_eq!(rel(&mut c, "sem", "x"), 1);
    tokens.push(must(&mut c, "sem", "c", 180_000, Ask::Sem(3)));
    tokens.push(must(&mut c, "rw", "r2", 60_000, Ask::Shared));
    assert_eq!(ext(&mut c, "sem", "b", 120_000), 1);
    let before = [held(&mut c, "sem").shape(), held(&mut c, "rw").shape()];
    assert_eq!(before[0].2.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
    wait_aof_flushed(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    let when = format!("after AOF restart (preamble {preamble})");
    assert_eq!([held(&mut c, "sem").shape(), held(&mut c, "rw").shape()], before, "{when}");
    assert_leases(&mut c, &LEASES, 20_000, &when);

    // And once more after a rewrite of what was loaded.
    bgrewriteaof(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    let when = format!("after a second rewrite and restart (preamble {preamble})");
    assert_eq!([held(&mut c, "sem").shape(), held(&mut c, "rw").shape()], before, "{when}");
    assert_leases(&mut c, &LEASES, 30_000, &when);
    assert_still_working(&mut c, &tokens, &when);
}

#[test]
fn holders_survive_aof_restart_with_rdb_preamble() {
    holders_survive_aof("yes");
}

#[test]
fn holders_survive_aof_restart_without_rdb_preamble() {
    holders_survive_aof("no");
}

#[test]
fn holders_replicate_and_releases_follow() {
    let master = Server::start_with(&["--repl-ping-replica-period", "3600", "--repl-diskless-sync-delay", "0"]);
    let replica = Server::start();
    let mut m = master.conn();
    // Some holders before the replica attaches (full sync), some after.
    let ta = must(&mut m, "sem", "a", 60_000, Ask::Sem(3));
    let t1 = must(&mut m, "rw", "r1", 180_000, Ask::Shared);
    attach_replica(&master, &replica);
    let mut r = replica.conn();
    let tb = must(&mut m, "sem", "b", 120_000, Ask::Sem(3));
    let tc = must(&mut m, "sem", "c", 180_000, Ask::Sem(3));
    let t2 = must(&mut m, "rw", "r2", 60_000, Ask::Shared);
    wait1(&mut m);
    for key in ["sem", "rw"] {
        let (mi, ri) = (held(&mut m, key), held(&mut r, key));
        assert_eq!(ri.shape(), mi.shape(), "{key} on the replica");
        for (o, _, p) in &mi.holders {
            assert!((ri.holder_pttl(o) - p).abs() < 5_000, "{key} {o}: the replica's lease {} vs the master's {p}", ri.holder_pttl(o));
        }
    }
    assert_eq!(held(&mut r, "sem").who(), vec![("a".into(), Some(ta)), ("b".into(), Some(tb)), ("c".into(), Some(tc))]);
    assert_eq!(held(&mut r, "sem").limit, Some(3));
    assert_eq!(held(&mut r, "rw").who(), vec![("r1".into(), Some(t1)), ("r2".into(), Some(t2))]);

    // One holder leaves on the master: gone on the replica, the others stay.
    assert_eq!(rel(&mut m, "sem", "b"), 1);
    assert_eq!(rel(&mut m, "rw", "r1"), 1);
    assert_eq!(ext(&mut m, "sem", "a", 300_000), 1);
    wait1(&mut m);
    let ri = held(&mut r, "sem");
    assert_eq!(ri.who(), vec![("a".into(), Some(ta)), ("c".into(), Some(tc))], "b left on the replica too");
    assert!(ri.holder_pttl("a") > 250_000, "a's EXTEND reached the replica: {ri:?}");
    assert_eq!(held(&mut r, "rw").who(), vec![("r2".into(), Some(t2))], "r1 left on the replica too");

    // The last holders leave: the keys are gone on the replica.
    for (key, owner) in [("sem", "a"), ("sem", "c"), ("rw", "r2")] {
        assert_eq!(rel(&mut m, key, owner), 1);
    }
    wait1(&mut m);
    for key in ["sem", "rw"] {
        assert!(!exists(&mut r, key.as_bytes()), "{key} must be gone on the replica");
        assert_eq!(info(&mut r, key), None);
    }
}

#[test]
fn dump_restore_and_copy_keep_the_holders() {
    let srv = Server::start();
    let mut c = srv.conn();
    make_holders(&mut c);
    for key in ["sem", "rw"] {
        let payload = match ok_cmd(&mut c, cmd("DUMP").arg(key)) {
            Value::BulkString(b) => b,
            other => panic!("DUMP {key}: {other:?}"),
        };
        let restored = format!("{key}-restored");
        ok_cmd(&mut c, cmd("RESTORE").arg(&restored).arg(0).arg(payload.as_slice()));
        let copied = format!("{key}-copied");
        assert_eq!(int_of(&ok_cmd(&mut c, cmd("COPY").arg(key).arg(&copied)), "COPY"), 1);
        let orig = held(&mut c, key);
        for other in [&restored, &copied] {
            assert_eq!(held(&mut c, other).shape(), orig.shape(), "{other} has {key}'s holders");
        }
    }
    // The copies behave as the original: full, excluding a writer, and
    // independent of it.
    refused(&mut c, "sem-restored", "d", 60_000, Ask::Sem(3), "the restored semaphore is full");
    acq_err(&mut c, &acq_cmd("sem-copied", "d", 60_000, Ask::Sem(2), &[]), E_KIND, &kind_sem(3));
    refused(&mut c, "rw-restored", "w", 60_000, Ask::Exclusive, "the restored readers hold");
    assert_eq!(rel(&mut c, "sem-restored", "a"), 1);
    assert_eq!(owners(&held(&mut c, "sem-restored")), ["b", "c"]);
    assert_eq!(owners(&held(&mut c, "sem")), ["a", "b", "c"], "releasing on the restored copy leaves the original");
    assert_eq!(rel(&mut c, "rw-copied", "r1"), 1);
    assert_eq!(owners(&held(&mut c, "rw")), ["r1", "r2"], "releasing on the copy leaves the original");
}

// ---------------------------------------------------------------------------
// 8. History checker
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Exclusive,
    Shared,
}

/// One grant as a client saw it. Its interval `[start, end]` lies inside
/// the server's hold: the grant happened before the reply arrived, and the
/// hold lasted at least until RELEASE was sent (or, never released, until
/// its lease's end as bounded by `lease_floor`).
#[derive(Clone, Debug)]
struct Hold {
    thread: usize,
    mode: Mode,
    token: i64,
    /// When the ACQUIRE was sent: the grant came after it.
    sent: Instant,
    /// When the grant's reply arrived.
    start: Instant,
    /// When RELEASE was sent, or for a hold left to expire its lease floor.
    end: Instant,
    released: bool,
}

const H_THREADS: usize = 16;
const H_TTL: i64 = 5_000;
const H_WAIT: &str = "2000";
/// The lease of a hold whose client drops its connection instead of
/// releasing.
const FAULT_TTL: i64 = 500;
/// A lease starts when the server grants, which is before its reply
/// arrives: a hold left to expire is counted as lasting until
/// `reply + ttl - LEASE_SLACK`, which is within the real lease as long as
/// the reply took less than that to arrive (and covers whole-millisecond
/// leases). A client that dropped its hold while another was granted would
/// overlap by about `FAULT_TTL - LEASE_SLACK`.
const LEASE_SLACK: Duration = Duration::from_millis(150);

/// The message a thread panicked with.
fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_else(|| "(no message)".into())
}

fn lease_floor(start: Instant, ttl: i64) -> Instant {
    start + Duration::from_millis(ttl as u64) - LEASE_SLACK
}

#[derive(Clone, Copy, Debug)]
struct HistoryCfg {
    key: &'static str,
    /// `SHARED LIMIT n` for every request (a semaphore); `None`: a
    /// read-write lock with exclusive and SHARED requests.
    limit: Option<i64>,
    /// Some threads drop their connection while holding, now and then.
    faults: bool,
    /// Kill the server (AOF, fsync always) once mid-run and start it again.
    restart: bool,
    run_for: Duration,
}

/// xorshift64*: enough randomness for a workload, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

#[derive(Default, Debug)]
struct WorkerLog {
    holds: Vec<Hold>,
    timeouts: usize,
    faults: usize,
    reconnects: usize,
    /// Holds whose RELEASE broke with the connection and that the server
    /// still had after the restart (the retried RELEASE replied 1).
    kept_across_restart: usize,
    /// Holds whose RELEASE broke and whose retry replied 0 (the first one
    /// may have been applied): counted as ending when the first was sent.
    unsure_release: usize,
}

fn connect(port: u16, deadline: Instant) -> Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/").as_str()).expect("redis client");
    loop {
        match client.get_connection_with_timeout(Duration::from_millis(500)) {
            Ok(con) => {
                con.set_read_timeout(Some(Duration::from_secs(15))).expect("read timeout");
                con.set_write_timeout(Some(Duration::from_secs(15))).expect("write timeout");
                return con;
            }
            Err(e) if Instant::now() > deadline => panic!("could not connect to port {port}: {e}"),
            // The server is restarting: try again shortly.
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// `LOCK.RELEASE key owner` until it gets an answer, reconnecting while the
/// server restarts; returns (when the answered RELEASE was sent, its reply).
fn release_retrying(con: &mut Connection, port: u16, key: &str, owner: &str, log: &mut WorkerLog) -> (Instant, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut c = cmd("LOCK.RELEASE");
    c.arg(key).arg(owner);
    loop {
        assert!(Instant::now() < deadline, "{owner}: RELEASE got no answer for 60 s");
        let sent = Instant::now();
        match request(con, &c) {
            Ok(v) => return (sent, int_of(&v, "LOCK.RELEASE")),
            Err(Fail::Server(e)) if e.starts_with("LOADING") => thread::sleep(Duration::from_millis(10)),
            Err(Fail::Server(e)) => panic!("{owner}: RELEASE replied an error: {e}"),
            Err(Fail::Io(_)) => {
                *con = connect(port, deadline);
                log.reconnects += 1;
            }
        }
    }
}

fn history_worker(port: u16, id: usize, cfg: HistoryCfg, barrier: Arc<Barrier>, restarting: Arc<AtomicBool>) -> WorkerLog {
    let mut log = WorkerLog::default();
    let mut rng = Rng::new(id as u64 + 1);
    let mut con = connect(port, Instant::now() + EVENT_DEADLINE);
    // A fresh owner after every dropped connection, so a re-grant of a hold
    // left to expire cannot be mistaken for a new one.
    let mut generation = 0;
    let may_fault = cfg.faults && id.is_multiple_of(4);
    barrier.wait();
    let until = Instant::now() + cfg.run_for;
    while Instant::now() < until {
        let owner = format!("t{id}-{generation}");
        let (mode, ask) = match cfg.limit {
            Some(n) => (Mode::Shared, Ask::Sem(n)),
            None if rng.below(4) == 0 => (Mode::Exclusive, Ask::Exclusive),
            None => (Mode::Shared, Ask::Shared),
        };
        let fault = may_fault && log.faults < 2 && rng.below(12) == 0;
        let ttl = if fault { FAULT_TTL } else { H_TTL };
        let c = acq_cmd(cfg.key, &owner, ttl, ask, &["WAIT", H_WAIT]);
        let sent = Instant::now();
        let token = match request(&mut con, &c) {
            Ok(Value::Int(t)) => t,
            Ok(Value::Nil) => {
                log.timeouts += 1;
                continue;
            }
            Ok(other) => panic!("thread {id}: ACQUIRE replied {other:?}"),
            Err(Fail::Server(e)) if cfg.restart && e.starts_with("LOADING") => {
                thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(Fail::Server(e)) => panic!("thread {id}: {ask:?} on {} replied an error: {e}", cfg.key),
            Err(Fail::Io(e)) => {
                assert!(cfg.restart && restarting.load(Ordering::SeqCst), "thread {id}: connection failed: {e}");
                // The server may have granted a reply it never delivered:
                // give it back (unobserved, so not part of the history).
                con = connect(port, Instant::now() + Duration::from_secs(60));
                log.reconnects += 1;
                release_retrying(&mut con, port, cfg.key, &owner, &mut log);
                generation += 1;
                continue;
            }
        };
        let start = Instant::now();
        thread::sleep(Duration::from_micros(rng.below(2001)));
        if fault {
            // Walk away holding: the lease must run out on its own.
            drop(con);
            log.faults += 1;
            log.holds.push(Hold { thread: id, mode, token, sent, start, end: lease_floor(start, ttl), released: false });
            con = connect(port, Instant::now() + EVENT_DEADLINE);
            generation += 1;
            continue;
        }
        let end = Instant::now();
        let mut r = cmd("LOCK.RELEASE");
        r.arg(cfg.key).arg(&owner);
        let hold = match request(&mut con, &r) {
            Ok(v) => {
                let n = int_of(&v, "LOCK.RELEASE");
                assert_eq!(n, 1, "thread {id}: RELEASE of its hold (token {token}) replied {n}");
                Hold { thread: id, mode, token, sent, start, end, released: true }
            }
            Err(Fail::Io(e)) => {
                assert!(cfg.restart && restarting.load(Ordering::SeqCst), "thread {id}: connection failed: {e}");
                con = connect(port, Instant::now() + Duration::from_secs(60));
                log.reconnects += 1;
                let (again, n) = release_retrying(&mut con, port, cfg.key, &owner, &mut log);
                if n == 1 {
                    // The server kept it across the restart until now.
                    log.kept_across_restart += 1;
                    Hold { thread: id, mode, token, sent, start, end: again, released: true }
                } else {
                    // The first RELEASE may have been applied just before
                    // the crash, its reply lost: only [start, end] is sure.
                    log.unsure_release += 1;
                    Hold { thread: id, mode, token, sent, start, end, released: true }
                }
            }
            Err(Fail::Server(e)) => panic!("thread {id}: RELEASE replied an error: {e}"),
        };
        log.holds.push(hold);
    }
    log
}

#[derive(Debug, Default)]
struct Verdict {
    grants_exclusive: usize,
    grants_shared: usize,
    per_thread: Vec<usize>,
    /// Most holds seen at once (all modes), and shared ones at once.
    max_concurrent: usize,
    max_shared_concurrent: usize,
    /// Holds never released (left to expire).
    left_to_expire: usize,
    violations: Vec<String>,
}

/// Check a history; see `history` for what is checked.
fn check_history(holds: &[Hold], threads: usize, limit: Option<i64>) -> Verdict {
    let mut v = Verdict { per_thread: vec![0; threads], ..Verdict::default() };
    let mut bad = |s: String| {
        if v.violations.len() < 1000 {
            v.violations.push(s);
        }
    };
    v.left_to_expire = holds.iter().filter(|h| !h.released).count();
    for h in holds {
        v.per_thread[h.thread] += 1;
        match h.mode {
            Mode::Exclusive => v.grants_exclusive += 1,
            Mode::Shared => v.grants_shared += 1,
        }
    }

    // Tokens all distinct.
    let mut by_token: Vec<&Hold> = holds.iter().collect();
    by_token.sort_by_key(|h| h.token);
    for w in by_token.windows(2) {
        if w[0].token == w[1].token {
            bad(format!("token {} granted twice: {:?} and {:?}", w[0].token, w[0], w[1]));
        }
    }

    let mut by_start: Vec<&Hold> = holds.iter().collect();
    by_start.sort_by_key(|h| h.start);

    // Real-time order: a grant whose reply arrived before another request
    // was sent came first on the server, so its token is smaller.
    let mut prefix_max: Vec<&Hold> = Vec::with_capacity(by_start.len());
    for h in &by_start {
        let m = match prefix_max.last() {
            Some(p) if p.token >= h.token => *p,
            _ => *h,
        };
        prefix_max.push(m);
    }
    for b in holds {
        let n = by_start.partition_point(|a| a.start < b.sent);
        if n > 0 && prefix_max[n - 1].token >= b.token {
            bad(format!("token order: {:?} was granted before {:?} was asked, yet its token is not smaller", prefix_max[n - 1], b));
        }
    }

    // Mutual exclusion: an exclusive hold overlaps no other hold.
    for (i, a) in by_start.iter().enumerate() {
        for b in by_start[i + 1..].iter().take_while(|b| b.start < a.end) {
            if a.mode == Mode::Exclusive || b.mode == Mode::Exclusive {
                bad(format!("overlap: {a:?} and {b:?}"));
            }
        }
    }

    // An exclusive hold's token is larger than every hold that ended before
    // it started and smaller than every hold that started after it ended.
    let mut by_end: Vec<&Hold> = holds.iter().collect();
    by_end.sort_by_key(|h| h.end);
    let mut end_prefix_max = Vec::with_capacity(by_end.len());
    let mut m = i64::MIN;
    for h in &by_end {
        m = m.max(h.token);
        end_prefix_max.push(m);
    }
    let mut start_suffix_min = vec![i64::MAX; by_start.len() + 1];
    for (i, h) in by_start.iter().enumerate().rev() {
        start_suffix_min[i] = start_suffix_min[i + 1].min(h.token);
    }
    for e in holds.iter().filter(|h| h.mode == Mode::Exclusive) {
        let before = by_end.partition_point(|h| h.end <= e.start);
        if before > 0 && end_prefix_max[before - 1] >= e.token {
            bad(format!("exclusive {e:?}: a hold that ended before it has a token >= {}", e.token));
        }
        let after = by_start.partition_point(|h| h.start < e.end);
        if start_suffix_min[after] <= e.token {
            bad(format!("exclusive {e:?}: a hold that started after it has a token <= {}", e.token));
        }
    }

    // Concurrency: starts +1, ends -1 (an end at the same instant as a
    // start comes first: touching is not overlapping).
    let mut events: Vec<(Instant, i32, Mode)> = Vec::with_capacity(holds.len() * 2);
    for h in holds {
        events.push((h.start, 1, h.mode));
        events.push((h.end, -1, h.mode));
    }
    events.sort_by_key(|(t, d, _)| (*t, *d));
    let (mut all, mut shared) = (0i64, 0i64);
    for (t, d, mode) in events {
        all += i64::from(d);
        if mode == Mode::Shared {
            shared += i64::from(d);
        }
        v.max_concurrent = v.max_concurrent.max(all as usize);
        v.max_shared_concurrent = v.max_shared_concurrent.max(shared as usize);
        if let Some(n) = limit {
            if d > 0 && all > n {
                bad(format!("{all} holders at once at {t:?}, more than LIMIT {n}"));
            }
        }
    }
    v
}

/// 16 clients on one key for a few seconds; then the history must show:
/// tokens all distinct and in real-time order; no exclusive hold overlapping
/// any other; never more holders than the limit; shared holds actually
/// overlapping (readers are not serialised); every client granted at least
/// once (no starvation).
fn history(cfg: HistoryCfg) {
    let _heavy = one_heavy_at_a_time();
    let args: &[&str] = if cfg.restart { &["--appendonly", "yes", "--appendfsync", "always"] } else { &[] };
    let mut srv = Server::start_with(args);
    let port = srv.port;
    if cfg.restart {
        wait_aof_rewrite_idle(&mut srv.conn());
    }
    let barrier = Arc::new(Barrier::new(H_THREADS + 1));
    let restarting = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..H_THREADS)
        .map(|id| {
            let (barrier, restarting) = (barrier.clone(), restarting.clone());
            thread::spawn(move || history_worker(port, id, cfg, barrier, restarting))
        })
        .collect();
    barrier.wait();
    let began = Instant::now();

    let mut holds: Vec<Hold> = Vec::new();
    let mut restarted_at = None;
    if cfg.restart {
        // Mid-run: take a hold, crash the server, start it again. The hold
        // must still be there (granted with fsync always), so it counts as
        // lasting until its RELEASE after the restart.
        thread::sleep(Duration::from_millis(1200));
        let mut c = connect(port, Instant::now() + EVENT_DEADLINE);
        let ask = match cfg.limit {
            Some(n) => Ask::Sem(n),
            None => Ask::Exclusive,
        };
        let sent = Instant::now();
        let token = token_reply(ok_cmd(&mut c, &acq_cmd(cfg.key, "main", H_TTL, ask, &["WAIT", "10000"])), "main's hold")
            .expect("main's hold is granted within 10 s");
        let start = Instant::now();
        restarting.store(true, Ordering::SeqCst);
        drop(c);
        srv.kill9();
        srv.start_again();
        restarted_at = Some(Instant::now());
        let mut c = srv.conn();
        let i = held(&mut c, cfg.key);
        assert!(
            i.holders.iter().any(|(o, t, _)| o == "main" && *t == Some(token)),
            "main's hold (token {token}) lost in the restart: {i:?}"
        );
        // Hold on until another thread waits in line behind it (an event,
        // not a time: the restarted server's first queue), unless every
        // thread has run out of time and asks no more, or the lease is
        // about to end (it must last until the RELEASE); then let go.
        wait_until(EVENT_DEADLINE, "a thread in line behind main's hold", || {
            let i = held(&mut c, cfg.key);
            i.waiters >= 1 || i.pttl < 2_000 || handles.iter().all(|h| h.is_finished())
        });
        let end = Instant::now();
        assert_eq!(rel(&mut c, cfg.key, "main"), 1, "main's hold must last until its RELEASE");
        let mode = if cfg.limit.is_some() { Mode::Shared } else { Mode::Exclusive };
        holds.push(Hold { thread: H_THREADS, mode, token, sent, start, end, released: true });
    }

    let mut logs = Vec::new();
    for h in handles {
        logs.push(h.join().unwrap_or_else(|e| panic!("a history thread failed: {}", panic_text(e.as_ref()))));
    }
    let elapsed = began.elapsed();
    for l in &logs {
        holds.extend(l.holds.iter().cloned());
    }
    let threads = H_THREADS + usize::from(cfg.restart);
    let v = check_history(&holds, threads, cfg.limit);
    let sum = |f: fn(&WorkerLog) -> usize| logs.iter().map(f).sum::<usize>();
    let after_restart = restarted_at.map(|t| holds.iter().filter(|h| h.sent > t).count());
    eprintln!(
        "history {cfg:?}: {elapsed:?}, {} grants ({} exclusive, {} shared), per thread {:?}; \
         WAIT timeouts {}, dropped holds {}, reconnects {}, kept across restart {}, unsure releases {}, \
         grants after restart {after_restart:?}; left to expire {}; most at once {} (shared {}); {} violations",
        holds.len(),
        v.grants_exclusive,
        v.grants_shared,
        v.per_thread,
        sum(|l| l.timeouts),
        sum(|l| l.faults),
        sum(|l| l.reconnects),
        sum(|l| l.kept_across_restart),
        sum(|l| l.unsure_release),
        v.left_to_expire,
        v.max_concurrent,
        v.max_shared_concurrent,
        v.violations.len(),
    );
    for s in v.violations.iter().take(10) {
        eprintln!("  violation: {s}");
    }
    assert!(v.violations.is_empty(), "{} violations, first: {}", v.violations.len(), v.violations[0]);
    for (t, n) in v.per_thread.iter().enumerate().take(H_THREADS) {
        assert!(*n >= 1, "thread {t} was never granted (starved): per thread {:?}", v.per_thread);
    }
    assert!(v.max_shared_concurrent >= 2, "shared holds never overlapped: readers are being serialised");
    if cfg.limit.is_none() {
        assert!(v.grants_exclusive >= 10 && v.grants_shared >= 10, "too few grants of a mode: {v:?}");
    }
    if cfg.faults {
        assert!(sum(|l| l.faults) >= 1, "no hold was dropped: the fault variant tested nothing");
        assert_eq!(v.left_to_expire, sum(|l| l.faults));
    }
    if let Some(n) = after_restart {
        assert!(n >= 1, "no grant after the restart");
    }

    // Nothing is left held: released holds are gone, dropped ones expire.
    let mut c = srv.conn();
    if cfg.faults || cfg.restart {
        wait_until(EVENT_DEADLINE, "every dropped hold's lease to end", || info(&mut c, cfg.key).is_none());
    } else {
        assert!(!exists(&mut c, cfg.key.as_bytes()), "the key outlived its last RELEASE");
    }
}

const RUN: Duration = Duration::from_secs(4);

#[test]
fn history_read_write_lock() {
    history(HistoryCfg { key: "rw", limit: None, faults: false, restart: false, run_for: RUN });
}

#[test]
fn history_semaphore_of_4() {
    history(HistoryCfg { key: "sem", limit: Some(4), faults: false, restart: false, run_for: RUN });
}

#[test]
fn history_read_write_lock_with_dropped_holders() {
    history(HistoryCfg { key: "rw", limit: None, faults: true, restart: false, run_for: RUN });
}

#[test]
fn history_semaphore_with_dropped_holders() {
    history(HistoryCfg { key: "sem", limit: Some(4), faults: true, restart: false, run_for: RUN });
}

#[test]
fn history_read_write_lock_across_a_crash() {
    history(HistoryCfg { key: "rw", limit: None, faults: false, restart: true, run_for: Duration::from_secs(5) });
}

#[test]
fn history_semaphore_across_a_crash() {
    history(HistoryCfg { key: "sem", limit: Some(4), faults: false, restart: true, run_for: Duration::from_secs(5) });
}

/// The checker itself finds what it must (no server involved).
#[test]
fn history_checker_finds_violations() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let h = |thread, mode, token, s: u64, e: u64| Hold { thread, mode, token, sent: at(s), start: at(s), end: at(e), released: true };
    use Mode::{Exclusive as X, Shared as S};

    let good = [h(0, S, 1, 0, 10), h(1, S, 2, 5, 15), h(0, X, 3, 20, 30), h(1, S, 4, 31, 40)];
    let v = check_history(&good, 2, None);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!((v.max_concurrent, v.max_shared_concurrent), (2, 2));

    let cases: Vec<(&str, Vec<Hold>, Option<i64>)> = vec![
        ("exclusive overlaps shared", vec![h(0, S, 1, 0, 10), h(1, X, 2, 5, 15)], None),
        ("two exclusive overlap", vec![h(0, X, 1, 0, 10), h(1, X, 2, 9, 15)], None),
        ("duplicate token", vec![h(0, S, 1, 0, 10), h(1, S, 1, 20, 30)], None),
        ("token order against real time", vec![h(0, S, 5, 0, 10), h(1, S, 2, 20, 30)], None),
        ("exclusive after a larger token", vec![h(0, S, 5, 0, 10), Hold { sent: at(0), ..h(1, X, 2, 20, 30) }], None),
        ("over the limit", vec![h(0, S, 1, 0, 10), h(1, S, 2, 1, 10), h(2, S, 3, 2, 10)], Some(2)),
    ];
    for (what, holds, limit) in cases {
        let v = check_history(&holds, 3, limit);
        assert!(!v.violations.is_empty(), "the checker missed: {what}");
    }
}
