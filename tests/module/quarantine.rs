//! The restart quarantine (`redislock.quarantine`): after a start that
//! loaded no persisted state, ACQUIRE answers TRYAGAIN for that long, so a
//! restarted empty node cannot re-grant locks it forgot.

use crate::common;

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
        panic!("expected `TRYAGAIN restart quarantine: <n> ms left` to {}, got {e:?}", describe(&cm.get_packed_command()))
    });
    assert!(n > 0, "ms left must be > 0: {e}");
    n
}

fn config_quarantine(c: &mut Connection) -> String {
    let v: Vec<String> = cmd("CONFIG").arg("GET").arg("redislock.quarantine").query(c).expect("CONFIG GET redislock.quarantine");
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
    let srv = Server::start_full(&["quarantine", "2000"], &["--save", "", "--appendonly", "no"]);
    let t_ready = Instant::now();
    let mut c = srv.conn();
    assert_eq!(config_quarantine(&mut c), "2000");

    let n = expect_quarantine(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(10_000));
    assert!(n <= 2000, "ms left {n} > the quarantine 2000");
    // WAIT does not block during the quarantine: TRYAGAIN at once.
    let mut w = srv.conn();
    w.set_read_timeout(Some(Duration::from_secs(3))).expect("timeout");
    let t0 = Instant::now();
    expect_quarantine(&mut w, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(10_000).arg("WAIT").arg(0));
    assert!(t0.elapsed() < Duration::from_secs(1));
    expect_quarantine(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(10_000).arg("FENCE").arg(5));
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
    assert_eq!(release(&mut c, b"s", b"alice"), 1, "RELEASE during quarantine");
    assert!(!exists(&mut c, b"s"));
    assert_eq!(extend(&mut c, b"e", b"alice", 50_000), 1, "EXTEND during quarantine");
    assert!(pttl(&mut c, b"e") > 45_000);
    // Converting a string by its owner is a grant: refused too.
    expect_quarantine(&mut c, cmd("LOCK.ACQUIRE").arg("conv").arg("alice").arg(10_000));
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
                let n = quarantine_ms_left(&e).unwrap_or_else(|| panic!("unexpected error during quarantine: {e}"));
                let since_ready = t_ready.elapsed().as_millis() as i64;
                assert!(n > 0 && n <= last_n, "ms left went {last_n} -> {n}");
                assert!(n <= 2000 - since_ready + 50, "{n} ms left although {since_ready} ms passed since the server was ready");
                last_n = n;
            }
        }
        assert!(Instant::now() < deadline, "quarantine of 2000 ms still active after 10 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    let el = t_spawn.elapsed();
    eprintln!("quarantine 2000: first grant {el:?} after spawning the server (last ms left {last_n})");
    assert!(el >= Duration::from_millis(1800), "quarantine ended after only {el:?}");
    assert!(token > 0);
    assert!(acquire(&mut c, b"conv", b"alice", 10_000).is_some(), "conversion after the quarantine");
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

/// Grants a lock, then stops the server as `stop` says, then starts it
/// again with a 60 s quarantine. Returns the server, the lock's token and
/// whether ACQUIRE of another key is quarantined after the restart.
fn restart_after(args: &[&str], stop: impl FnOnce(&mut Server, &mut Connection)) -> (Server, i64, bool) {
    let mut srv = Server::start_with(args);
    let mut c = srv.conn();
    let t = grant(&mut c, "old", "alice", 600_000);
    stop(&mut srv, &mut c);
    drop(c);
    srv.set_module_args(&["quarantine", "60000"]);
    srv.start_again();
    let mut c = srv.conn();
    let quarantined = match try_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("new").arg("bob").arg(1000)) {
        Ok(Value::Int(x)) => {
            assert!(x > t, "tokens increase across the restart");
            false
        }
        Err(e) if quarantine_ms_left(&e).is_some() => true,
        other => panic!("LOCK.ACQUIRE after the restart: {other:?}"),
    };
    (srv, t, quarantined)
}

fn kill9(srv: &mut Server, c: &mut Connection) {
    wait_aof_flushed(c);
    srv.kill9();
}

fn shutdown(srv: &mut Server, _c: &mut Connection) {
    srv.stop();
}

#[test]
fn aof_with_fsync_always_after_a_crash_skips_the_quarantine() {
    let (srv, t, quarantined) = restart_after(&["--appendonly", "yes", "--appendfsync", "always", "--save", ""], kill9);
    assert!(!quarantined, "every acknowledged write was on disk");
    let i = info(&mut srv.conn(), b"old").expect("the lock came back from the AOF");
    assert_eq!((i.owner.as_slice(), i.token), (&b"alice"[..], t));
}

#[test]
fn aof_with_fsync_everysec_after_a_crash_quarantines() {
    let (srv, _, quarantined) = restart_after(&["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""], kill9);
    assert!(quarantined, "a crash with everysec may have lost the last second of grants");
    assert!(info(&mut srv.conn(), b"old").is_some(), "what was on disk is still loaded");
}

#[test]
fn aof_with_fsync_everysec_after_a_clean_shutdown_skips_the_quarantine() {
    let (srv, t, quarantined) = restart_after(&["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""], shutdown);
    assert!(!quarantined, "SHUTDOWN fsyncs the AOF and the module recorded it");
    assert_eq!(info(&mut srv.conn(), b"old").expect("loaded").token, t);
    assert!(!srv.dir.join("redislock-clean-shutdown").exists(), "the marker is consumed at load");
}

#[test]
fn a_stale_rdb_after_a_crash_quarantines() {
    // The case: SAVE, grant, kill -9, restart.
    let (srv, _, quarantined) = restart_after(&["--appendonly", "no", "--save", ""], |srv, c| {
        assert_eq!(ok_cmd(c, &cmd("SAVE")), Value::Okay);
        grant(c, "after-save", "carol", 600_000);
        srv.kill9();
    });
    assert!(quarantined, "the RDB lacks the grant made after it");
    let mut c = srv.conn();
    assert!(info(&mut c, b"old").is_some() && info(&mut c, b"after-save").is_none());
}

#[test]
fn shutdown_nosave_after_unsaved_grants_quarantines() {
    let (_srv, _, quarantined) = restart_after(&["--appendonly", "no", "--save", ""], |srv, c| {
        assert_eq!(ok_cmd(c, &cmd("SAVE")), Value::Okay);
        assert_eq!(extend(c, b"old", b"alice", 600_000), 1);
        srv.stop(); // SHUTDOWN NOSAVE: the extension is in no file
    });
    assert!(quarantined, "the RDB lacks the extension made after it");
}

#[test]
fn a_clean_shutdown_with_its_rdb_skips_the_quarantine_once() {
    let (mut srv, t, quarantined) = restart_after(&["--appendonly", "no", "--save", "3600 1"], shutdown);
    assert!(!quarantined, "SHUTDOWN saved every write");
    assert_eq!(info(&mut srv.conn(), b"old").expect("loaded").token, t);
    // The marker spoke for that start only: a crash now quarantines, even
    // though the RDB on disk is the same file.
    srv.kill9();
    srv.start_again();
    expect_quarantine(&mut srv.conn(), cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(1000));
}

#[test]
fn an_older_rdb_put_back_after_a_clean_shutdown_quarantines() {
    let (_srv, _, quarantined) = restart_after(&["--appendonly", "no", "--save", "3600 1"], |srv, c| {
        assert_eq!(ok_cmd(c, &cmd("SAVE")), Value::Okay);
        let older = std::fs::read(srv.dir.join("dump.rdb")).expect("read dump.rdb");
        grant(c, "later", "carol", 600_000);
        srv.stop(); // clean: saves, records the marker
        std::fs::write(srv.dir.join("dump.rdb"), older).expect("put the older RDB back");
    });
    assert!(quarantined, "the marker names the RDB the shutdown wrote, not this one");
}

/// Copies a data directory (the AOF directory: flat) for a backup.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).expect("create the copy");
    for entry in std::fs::read_dir(from).expect("read the directory") {
        let entry = entry.expect("directory entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy a file");
    }
}

/// Whether ACQUIRE of a fresh key is refused by the quarantine.
fn quarantined_now(srv: &Server) -> bool {
    match try_cmd(&mut srv.conn(), cmd("LOCK.ACQUIRE").arg("probe").arg("p").arg(1000)) {
        Ok(Value::Int(_)) => false,
        Err(e) if quarantine_ms_left(&e).is_some() => true,
        other => panic!("LOCK.ACQUIRE probe: {other:?}"),
    }
}

/// The case: a clean stop, an AOF backup, a grant, another clean
/// stop (the marker now vouches for the AOF with the grant), the backup
/// put back. The marker must not vouch for the older AOF.
#[test]
fn an_older_aof_put_back_after_a_clean_shutdown_quarantines() {
    let mut srv = Server::start_with(&["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]);
    grant(&mut srv.conn(), "before", "A", 600_000);
    srv.stop();
    let backup = srv.dir.join("aof-backup");
    copy_dir(&srv.dir.join("appendonlydir"), &backup);
    srv.start_again();
    grant(&mut srv.conn(), "orders:42", "B", 600_000);
    srv.stop();
    assert!(srv.dir.join("redislock-clean-shutdown").exists(), "the clean stop was recorded");
    copy_dir(&backup, &srv.dir.join("appendonlydir"));
    srv.set_module_args(&["quarantine", "60000"]);
    srv.start_again();
    let mut c = srv.conn();
    assert!(info(&mut c, b"orders:42").is_none(), "the older AOF lacks B's grant");
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("orders:42").arg("C").arg(1000));
    assert!(quarantine_ms_left(&e).is_some(), "C must not get orders:42 while B may hold it: {e}");
}

/// The RDB case: SAVE, a copy, an EXTEND (the counter does not
/// move), SHUTDOWN SAVE, the copy put back. Same counter, older data.
#[test]
fn an_older_rdb_with_the_marker_s_counter_put_back_quarantines() {
    let mut srv = Server::start_with(&["--appendonly", "no", "--save", "3600 1"]);
    let mut c = srv.conn();
    grant(&mut c, "old", "alice", 5_000);
    assert_eq!(ok_cmd(&mut c, &cmd("SAVE")), Value::Okay);
    let copy = std::fs::read(srv.dir.join("dump.rdb")).expect("read dump.rdb");
    assert_eq!(extend(&mut c, b"old", b"alice", 600_000), 1);
    drop(c);
    srv.stop(); // SHUTDOWN SAVE: the marker names this RDB, with the same counter
    std::fs::write(srv.dir.join("dump.rdb"), copy).expect("put the copy back");
    srv.set_module_args(&["quarantine", "60000"]);
    srv.start_again();
    assert!(quarantined_now(&srv), "the copy's lease of `old` ends before the extension alice holds");
}

/// Another server's files are not this server's data.
#[test]
fn another_server_s_rdb_put_in_place_quarantines() {
    let mut a = Server::start_with(&["--appendonly", "no", "--save", "3600 1"]);
    let mut b = Server::start_with(&["--appendonly", "no", "--save", "3600 1"]);
    // Both counters end at the same token, so the saved counter alone
    // cannot tell the two RDBs apart.
    let token = far_future_token();
    for (srv, owner) in [(&a, "on-a"), (&b, "on-b")] {
        let granted = acquire_fence(&mut srv.conn(), b"k", owner.as_bytes(), 600_000, token);
        assert_eq!(granted, Some(token));
    }
    a.stop();
    b.stop();
    std::fs::copy(b.dir.join("dump.rdb"), a.dir.join("dump.rdb")).expect("b's RDB into a's dir");
    a.set_module_args(&["quarantine", "60000"]);
    a.start_again();
    assert!(quarantined_now(&a), "a's marker does not vouch for b's data");
}

/// The policy that wrote the data decides, not the new start's.
#[test]
fn an_aof_written_under_everysec_then_started_with_always_quarantines() {
    let mut srv = Server::start_with(&["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]);
    let mut c = srv.conn();
    grant(&mut c, "k", "a", 600_000);
    wait_aof_flushed(&mut c);
    drop(c);
    srv.kill9();
    srv.set_extra_args(&["--appendonly", "yes", "--appendfsync", "always", "--save", ""]);
    srv.set_module_args(&["quarantine", "60000"]);
    srv.start_again();
    assert!(quarantined_now(&srv), "everysec may have lost acknowledged grants before the crash");
}

#[test]
fn a_switch_away_from_always_at_runtime_quarantines_after_a_crash() {
    let mut srv = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always", "--save", ""]);
    assert!(srv.dir.join("redislock-aof-always").exists(), "the run records its policy");
    let mut c = srv.conn();
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("appendfsync").arg("everysec"));
    assert!(!srv.dir.join("redislock-aof-always").exists(), "the record goes with the policy");
    grant(&mut c, "k", "a", 600_000);
    wait_aof_flushed(&mut c);
    drop(c);
    srv.kill9();
    srv.set_module_args(&["quarantine", "60000"]);
    srv.start_again();
    assert!(quarantined_now(&srv), "writes after the switch were under everysec");
}

/// Turning `always` on at runtime does not vouch for what was acknowledged
/// before, possibly not yet on disk.
#[test]
fn always_turned_on_at_runtime_is_not_recorded() {
    let mut srv = Server::start_with(&["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]);
    let mut c = srv.conn();
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("appendfsync").arg("always"));
    grant(&mut c, "k", "a", 600_000);
    drop(c);
    assert!(!srv.dir.join("redislock-aof-always").exists());
    srv.kill9();
    srv.set_extra_args(&["--appendonly", "yes", "--appendfsync", "always", "--save", ""]);
    srv.set_module_args(&["quarantine", "60000"]);
    srv.start_again();
    assert!(quarantined_now(&srv));
}

#[test]
fn debug_reload_does_not_lift_a_running_quarantine() {
    let srv = Server::start_full(&["quarantine", "60000"], &["--save", ""]);
    let mut c = srv.conn();
    expect_quarantine(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(1000));
    assert_eq!(ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD")), Value::Okay);
    let n = expect_quarantine(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(1000));
    assert!(n > 50_000, "{n}");
}

#[test]
fn config_set_quarantine_is_refused_not_ignored() {
    let srv = Server::start_full(&["quarantine", "100"], &[]);
    let mut c = srv.conn();
    assert_eq!(config_quarantine(&mut c), "100");
    for value in ["5000", "0", "-1", "abc"] {
        let e = expect_err(&mut c, cmd("CONFIG").arg("SET").arg("redislock.quarantine").arg(value));
        assert!(e.starts_with("ERR") && e.contains("redislock.quarantine"), "CONFIG SET redislock.quarantine {value}: {e}");
    }
    assert_eq!(config_quarantine(&mut c), "100", "the value in force is shown, unchanged");
}

#[test]
fn bad_quarantine_module_arg_is_refused() {
    for bad in ["-1", "abc"] {
        if let Ok(mut s) = Server::try_start_full(&["quarantine", bad], &[]) {
            let mut c = s.conn();
            let loaded: Value = cmd("MODULE").arg("LIST").query(&mut c).expect("MODULE LIST");
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
            if words.next().map(|w| w.eq_ignore_ascii_case(name)).unwrap_or(false) {
                // The last occurrence wins, as in redis.conf.
                found = words.next().map(str::to_string);
            }
        }
        found
    };
    let max_ttl = value_of("redislock.max-ttl").unwrap_or_else(|| panic!("{path} sets no redislock.max-ttl"));
    let q = value_of("redislock.quarantine").unwrap_or_else(|| panic!("{path} sets no redislock.quarantine"));
    assert_eq!(
        q, max_ttl,
        "redislock.quarantine must equal redislock.max-ttl in {path} (a restarted node must outwait every lease it may have granted)"
    );
    let ms: i64 = q.parse().unwrap_or_else(|e| panic!("quarantine {q:?}: {e}"));
    assert!(ms > 0);
    let lead: i64 = value_of("redislock.max-token-lead")
        .unwrap_or_else(|| panic!("{path} sets no redislock.max-token-lead"))
        .parse()
        .expect("max-token-lead is an integer");
    assert!(lead <= ms, "the quarantine must cover max-token-lead in {path} ({ms} < {lead})");
}

#[test]
fn info_redislock_shows_the_quarantine_and_the_settings() {
    let srv = Server::start_full(&["quarantine", "60000", "max-ttl", "30000"], &[]);
    let mut c = srv.conn();
    let left = info_field_i64(&mut c, "redislock", "redislock_quarantine_ms_left");
    assert!(left > 50_000 && left <= 60_000, "{left}");
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_quarantine_ms"), 60_000);
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_max_ttl_ms"), 30_000);
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_max_token_lead_ms"), 60_000);

    let fresh = Server::start();
    let mut c = fresh.conn();
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_quarantine_ms_left"), 0);
    let t = grant(&mut c, "k", "o", 1000);
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_highest_token"), t);
}

/// A replica promoted to master (a failover, `REPLICAOF NO ONE`) may lack
/// grants its old master acknowledged (replication is asynchronous): it
/// quarantines for the configured time, as a restart without data does,
/// whatever it loaded from its master.
#[test]
fn a_promoted_replica_quarantines_like_a_restart() {
    let master = Server::start();
    let replica = Server::start_full(&["quarantine", "1500"], &["--save", "", "--appendonly", "no"]);
    attach_replica(&master, &replica);
    let mut m = master.conn();
    grant(&mut m, "held", "a", 60_000);
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    // Its own start's quarantine ends first.
    wait_until(Duration::from_secs(10), "the replica's start quarantine over", || {
        info_field_i64(&mut r, "redislock", "redislock_quarantine_ms_left") == 0
    });
    let promoted = Instant::now();
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    let n = expect_quarantine(&mut r, cmd("LOCK.ACQUIRE").arg("fresh").arg("b").arg(10_000));
    assert!(n > 1000 && n <= 1500, "{n} ms left just after the promotion");
    assert_eq!(info(&mut r, b"held").map(|i| i.owner), Some(b"a".to_vec()), "the replicated lock is kept");
    wait_until(Duration::from_secs(10), "the promotion's quarantine over", || {
        try_cmd(&mut r, &cmd("LOCK.ACQUIRE").arg("fresh").arg("b").arg(10_000).clone()).is_ok()
    });
    assert!(promoted.elapsed() >= Duration::from_millis(1_450), "granted {:?} after the promotion", promoted.elapsed());
}
