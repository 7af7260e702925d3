//! The restart quarantine (`redislock.quarantine`): after a start that
//! loaded no persisted state, ACQUIRE answers TRYAGAIN for that long, so a
//! restarted empty node cannot re-grant locks it forgot.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

/// `TRYAGAIN restart quarantine: <n> ms left` → Some(n); anything else → None.
fn quarantine_ms_left(e: &str) -> Option<i64> {
    let rest = e.strip_prefix("TRYAGAIN restart quarantine: ")?;
    let n = rest.strip_suffix(" ms left")?;
    n.parse().ok()
}

/// ACQUIRE that must be refused by the quarantine; returns the ms left.
fn expect_quarantine(c: &mut Connection, cm: &redis::Cmd) -> i64 {
    let e = expect_err(c, cm);
    let n = quarantine_ms_left(&e).unwrap_or_else(|| {
        panic!(
            "expected `TRYAGAIN restart quarantine: <n> ms left` to {}, got {e:?}",
            describe(&cm.get_packed_command())
        )
    });
    assert!(n > 0, "ms left must be > 0: {e}");
    n
}

fn config_quarantine(c: &mut Connection) -> String {
    let v: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("redislock.quarantine")
        .query(c)
        .expect("CONFIG GET redislock.quarantine");
    assert_eq!(v.len(), 2, "CONFIG GET redislock.quarantine: {v:?}");
    assert_eq!(v[0], "redislock.quarantine");
    v[1].clone()
}

#[test]
fn default_is_zero_and_a_fresh_server_grants_at_once() {
    let srv = Server::start();
    let mut c = srv.conn();
    assert_eq!(config_quarantine(&mut c), "0");
    assert!(grant(&mut c, "k", "o", 1000) > 0);
}

#[test]
fn fresh_server_with_quarantine_answers_tryagain_until_it_passes() {
    let t_spawn = Instant::now();
    let srv = Server::start_full(
        &["quarantine", "2000"],
        &["--save", "", "--appendonly", "no"],
    );
    let t_ready = Instant::now();
    let mut c = srv.conn();
    assert_eq!(config_quarantine(&mut c), "2000");

    let n = expect_quarantine(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(10_000));
    assert!(n <= 2000, "ms left {n} > the quarantine 2000");
    // WAIT does not block during the quarantine: TRYAGAIN at once.
    let mut w = srv.conn();
    w.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let t0 = Instant::now();
    expect_quarantine(
        &mut w,
        cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg("o")
            .arg(10_000)
            .arg("WAIT")
            .arg(0),
    );
    assert!(t0.elapsed() < Duration::from_secs(1));
    expect_quarantine(
        &mut c,
        cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg("o")
            .arg(10_000)
            .arg("FENCE")
            .arg(5),
    );
    assert!(!exists(&mut c, b"k"), "a refused ACQUIRE created the key");

    // RELEASE, EXTEND and INFO keep working (on plain-string locks, the
    // only locks that can exist on a fresh node).
    ok_cmd(&mut c, cmd("SET").arg("s").arg("alice"));
    ok_cmd(&mut c, cmd("SET").arg("e").arg("alice"));
    ok_cmd(&mut c, cmd("SET").arg("conv").arg("alice"));
    let i = info_any(&mut c, b"s").expect("LOCK.INFO during quarantine");
    assert_eq!((i.owner.as_slice(), i.token), (&b"alice"[..], None));
    assert_eq!(info_any(&mut c, b"missing"), None);
    assert_eq!(release(&mut c, b"s", b"bob"), 0);
    assert_eq!(
        release(&mut c, b"s", b"alice"),
        1,
        "RELEASE during quarantine"
    );
    assert!(!exists(&mut c, b"s"));
    assert_eq!(
        extend(&mut c, b"e", b"alice", 50_000),
        1,
        "EXTEND during quarantine"
    );
    assert!(pttl(&mut c, b"e") > 45_000);
    // Converting a string by its owner is a grant: refused too.
    expect_quarantine(
        &mut c,
        cmd("LOCK.ACQUIRE").arg("conv").arg("alice").arg(10_000),
    );
    let ty: String = cmd("TYPE").arg("conv").query(&mut c).expect("TYPE");
    assert_eq!(ty, "string", "refused conversion");

    // Poll until ACQUIRE stops answering TRYAGAIN; the ms left must shrink
    // with time.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last_n = i64::MAX;
    let token = loop {
        match try_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(10_000)) {
            Ok(Value::Int(t)) => break t,
            Ok(other) => panic!("ACQUIRE on a free key replied {other:?}"),
            Err(e) => {
                let n = quarantine_ms_left(&e)
                    .unwrap_or_else(|| panic!("unexpected error during quarantine: {e}"));
                let since_ready = t_ready.elapsed().as_millis() as i64;
                assert!(n > 0 && n <= last_n, "ms left went {last_n} -> {n}");
                assert!(
                    n <= 2000 - since_ready + 50,
                    "{n} ms left although {since_ready} ms passed since the server was ready"
                );
                last_n = n;
            }
        }
        assert!(
            Instant::now() < deadline,
            "quarantine of 2000 ms still active after 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let el = t_spawn.elapsed();
    eprintln!(
        "quarantine 2000: first grant {el:?} after spawning the server (last ms left {last_n})"
    );
    assert!(
        el >= Duration::from_millis(1800),
        "quarantine ended after only {el:?}"
    );
    assert!(token > 0);
    assert!(
        acquire(&mut c, b"conv", b"alice", 10_000).is_some(),
        "conversion after the quarantine"
    );
}

#[test]
fn quarantine_from_a_config_directive() {
    // `--redislock.quarantine N` after --loadmodule is a config line.
    let srv = Server::start_full(&[], &["--redislock.quarantine", "60000"]);
    let mut c = srv.conn();
    assert_eq!(config_quarantine(&mut c), "60000");
    let n = expect_quarantine(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(1000));
    assert!(n > 50_000 && n <= 60_000, "ms left {n}");
}

#[test]
fn no_quarantine_after_loading_an_rdb_but_quarantine_when_it_is_missing() {
    let mut srv = Server::start_full(&[], &["--save", "", "--appendonly", "no"]);
    let mut c = srv.conn();
    let t = grant(&mut c, "old", "alice", 600_000);
    let deadline = pexpiretime(&mut c, b"old");
    assert_eq!(ok_cmd(&mut c, &cmd("SAVE")), Value::Okay);
    drop(c);
    srv.restart_with_module_args(&["quarantine", "60000"]);
    let mut c = srv.conn();
    assert_eq!(config_quarantine(&mut c), "60000");
    let i = info(&mut c, b"old").expect("the lock came back from the RDB");
    assert_eq!((i.owner.as_slice(), i.token), (&b"alice"[..], t));
    assert_eq!(pexpiretime(&mut c, b"old"), deadline);
    let tn = match try_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("new").arg("bob").arg(1000)) {
        Ok(Value::Int(x)) => x,
        other => panic!("state was loaded from the RDB: no quarantine expected, got {other:?}"),
    };
    assert!(tn > t);
    drop(c);

    // Same dir, RDB deleted: nothing to load → quarantined.
    srv.stop();
    std::fs::remove_file(srv.dir.join("dump.rdb")).expect("remove dump.rdb");
    srv.start_again();
    let mut c = srv.conn();
    assert!(!exists(&mut c, b"old"), "nothing was loaded");
    let n = expect_quarantine(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(1000));
    assert!(n > 50_000 && n <= 60_000, "ms left {n}");
}

#[test]
fn no_quarantine_after_loading_an_aof() {
    let mut srv = Server::start_full(&[], &["--appendonly", "yes", "--save", ""]);
    let mut c = srv.conn();
    let t = grant(&mut c, "old", "alice", 600_000);
    wait_aof_flushed(&mut c);
    drop(c);
    srv.kill9();
    let _ = std::fs::remove_file(srv.dir.join("dump.rdb"));
    srv.set_module_args(&["quarantine", "60000"]);
    srv.start_again();
    let mut c = srv.conn();
    let i = info(&mut c, b"old").expect("the lock came back from the AOF");
    assert_eq!((i.owner.as_slice(), i.token), (&b"alice"[..], t));
    match try_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("new").arg("bob").arg(1000)) {
        Ok(Value::Int(x)) => assert!(x > t),
        other => panic!("state was loaded from the AOF: no quarantine expected, got {other:?}"),
    }
}

#[test]
fn config_get_set_quarantine_does_not_start_one() {
    let srv = Server::start();
    let mut c = srv.conn();
    assert_eq!(config_quarantine(&mut c), "0");
    let r = ok_cmd(
        &mut c,
        cmd("CONFIG")
            .arg("SET")
            .arg("redislock.quarantine")
            .arg(5000),
    );
    assert_eq!(r, Value::Okay);
    assert_eq!(config_quarantine(&mut c), "5000");
    assert!(
        grant(&mut c, "k", "o", 1000) > 0,
        "CONFIG SET must not start a quarantine"
    );
    for bad in ["-1", "abc", "31536000001"] {
        let e = expect_err(
            &mut c,
            cmd("CONFIG")
                .arg("SET")
                .arg("redislock.quarantine")
                .arg(bad),
        );
        assert!(
            e.starts_with("ERR"),
            "CONFIG SET redislock.quarantine {bad}: {e}"
        );
    }
    assert_eq!(
        config_quarantine(&mut c),
        "5000",
        "rejected values change nothing"
    );
    let r = ok_cmd(
        &mut c,
        cmd("CONFIG")
            .arg("SET")
            .arg("redislock.quarantine")
            .arg("31536000000"),
    );
    assert_eq!(r, Value::Okay, "the documented maximum is accepted");
    assert_eq!(
        ok_cmd(
            &mut c,
            cmd("CONFIG").arg("SET").arg("redislock.quarantine").arg(0)
        ),
        Value::Okay
    );
    assert!(grant(&mut c, "k2", "o", 1000) > 0);
}

#[test]
fn bad_quarantine_module_arg_is_refused() {
    for bad in ["-1", "abc"] {
        if let Ok(mut s) = Server::try_start_full(&["quarantine", bad], &[]) {
            let mut c = s.conn();
            let loaded: Value = cmd("MODULE")
                .arg("LIST")
                .query(&mut c)
                .expect("MODULE LIST");
            s.stop();
            panic!("server with module arg `quarantine {bad}` came up: {loaded:?}");
        }
    }
}

#[test]
fn redlock_conf_quarantine_equals_max_ttl() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/redlock.conf");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let value_of = |name: &str| -> Option<String> {
        let mut found = None;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            if words
                .next()
                .map(|w| w.eq_ignore_ascii_case(name))
                .unwrap_or(false)
            {
                // The last occurrence wins, as in redis.conf.
                found = words.next().map(str::to_string);
            }
        }
        found
    };
    let max_ttl =
        value_of("redislock.max-ttl").unwrap_or_else(|| panic!("{path} sets no redislock.max-ttl"));
    let q = value_of("redislock.quarantine")
        .unwrap_or_else(|| panic!("{path} sets no redislock.quarantine"));
    assert_eq!(
        q, max_ttl,
        "redislock.quarantine must equal redislock.max-ttl in {path} (a restarted node must outwait every lease it may have granted)"
    );
    let ms: i64 = q
        .parse()
        .unwrap_or_else(|e| panic!("quarantine {q:?}: {e}"));
    assert!(ms > 0);
}
