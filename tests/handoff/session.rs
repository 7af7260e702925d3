//! `LOCK.ACQUIRE ... SESSION [DELAY ms]`: holds that end with the
//! connection that was granted them, a lock-delay past the disconnect,
//! and the lease alone without SESSION.
//!
//! Connections are closed the ways a holder dies: a `redis-cli` killed
//! with SIGKILL, a dropped connection, CLIENT KILL. Whether the module has
//! handled a disconnect is learnt from an event (a waiter's reply, a
//! sentinel hold released in the same pass, INFO counters), never from a
//! sleep.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use redis::Connection;

/// `LOCK.ACQUIRE key owner ttl [extra...]`.
fn acq(key: &str, owner: &str, ttl: i64, extra: &[&str]) -> redis::Cmd {
    let mut c = cmd("LOCK.ACQUIRE");
    c.arg(key).arg(owner).arg(ttl);
    for e in extra {
        c.arg(*e);
    }
    c
}

/// A waiter blocked on `key` on its own connection (its reply read later).
fn wait_for(s: &Server, key: &str, owner: &str, ttl: i64, wait_ms: i64) -> Connection {
    let mut c = s.conn();
    send_cmd(&mut c, &acq(key, owner, ttl, &["WAIT", &wait_ms.to_string()]));
    c
}

/// A `redis-cli` holding `key` for `owner` (its stdin kept open, so it
/// stays connected until killed).
struct Cli {
    child: Child,
}

impl Cli {
    fn acquire(s: &Server, key: &str, owner: &str, ttl: i64, extra: &str) -> (Cli, i64) {
        let mut child = Command::new(redis_cli())
            .args(["-h", "127.0.0.1", "-p", &s.port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-cli");
        let mut stdin = child.stdin.take().expect("redis-cli stdin");
        writeln!(stdin, "LOCK.ACQUIRE {key} {owner} {ttl} {extra}").expect("write to redis-cli");
        stdin.flush().expect("flush redis-cli");
        // Kept open: redis-cli reads on and stays connected.
        std::mem::forget(stdin);
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("redis-cli stdout")).read_line(&mut line).expect("redis-cli reply");
        let token = line.trim().parse().unwrap_or_else(|_| panic!("redis-cli got no token: {line:?}"));
        (Cli { child }, token)
    }

    /// SIGKILL, as a crashed holder.
    fn kill9(&mut self) {
        self.child.kill().expect("kill -9 redis-cli");
        let _ = self.child.wait();
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// redis-cli beside the server binary the tests run (Debian's by default).
fn redis_cli() -> std::path::PathBuf {
    let server = server_binary();
    let beside = server.with_file_name("redis-cli");
    if beside.exists() {
        beside
    } else {
        "redis-cli".into()
    }
}

fn counter(c: &mut Connection, field: &str) -> i64 {
    info_field_i64(c, "redislock", &format!("redislock_{field}"))
}

/// The waiter's reply: its token, and how long after `since` it came.
fn granted_after(waiter: &mut Connection, since: Instant) -> (i64, Duration) {
    let reply = recv_reply(waiter, "the waiter's LOCK.ACQUIRE").expect("a token");
    (int_of(&reply, "waiter token"), since.elapsed())
}

/// Trials per timing below: their median is what is asserted, so a few
/// trials slowed by a busy machine do not decide.
const TRIALS: usize = 7;

/// The ttl of the waiters measured below: their lease starts at their
/// grant, so PEXPIRETIME less this is when they were granted, by the
/// server's clock.
const WAITER_TTL: i64 = 30_000;

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// A redis-cli holds `key` for 30 s with `SESSION DELAY delay_ms`, a waiter
/// waits in line, the redis-cli is killed -9: how many ms from the kill
/// (this process's wall clock, just before it) to the waiter's grant (the
/// server's wall clock: when the waiter's lease began). The same machine's
/// clock on both sides, and the test's own wake-up is out of it.
fn kill_to_grant(s: &Server, c: &mut Connection, key: &str, delay_ms: i64) -> i64 {
    let extra = if delay_ms > 0 { format!("SESSION DELAY {delay_ms}") } else { "SESSION".to_string() };
    let (mut holder, token) = Cli::acquire(s, key, "a", 30_000, &extra);
    let rows = holder_rows(c, key);
    assert_eq!(rows.iter().map(|h| (h.owner.as_slice(), h.session)).collect::<Vec<_>>(), [(&b"a"[..], true)], "bound to its connection");
    let mut w = wait_for(s, key, "b", WAITER_TTL, 20_000);
    wait_waiters(c, key.as_bytes(), 1);
    let killed = now_unix_ms();
    holder.kill9();
    let (next, _) = granted_after(&mut w, Instant::now());
    assert!(next > token);
    let granted = pexpiretime(c, key.as_bytes()) - WAITER_TTL;
    assert_eq!(release(c, key.as_bytes(), b"b"), 1);
    granted - killed
}

/// A 30 s lock whose holder (a redis-cli) is killed -9 goes to its waiter
/// after DELAY, promptly, with SESSION; without it, the waiter waits for
/// the lease.
///
/// Order: never before the kill plus DELAY (the server cannot know of the
/// disconnect before the kill; 1 ms for the clocks' rounding).
///
/// Promptness, as the median of seven trials: the server's handling of a
/// closed connection (the kernel's close, the event loop's read of EOF,
/// the handoff; a few ms idle) plus redis-server waiting for a CPU on a
/// loaded machine (tens of ms). The bound, DELAY + 250 ms, needs four of
/// seven trials that late. A hold not bound to its connection waits for
/// its 30 s lease (the waiter's 20 s WAIT answers nil: the test fails at
/// once); a lock-delay left to a poll once a second instead of its own
/// timer is late by 0..1000 ms, a median of 500 ms expected.
#[test]
fn a_killed_holder_hands_over_at_once_only_with_session() {
    let s = Server::start();
    let mut c = s.conn();
    for delay_ms in [0, 300] {
        let times: Vec<i64> = (0..TRIALS).map(|i| kill_to_grant(&s, &mut c, &format!("job{delay_ms}-{i}"), delay_ms)).collect();
        eprintln!("SESSION DELAY {delay_ms}: kill to grant {times:?} ms (server clock)");
        let bound = delay_ms + 250;
        assert!(
            median(times.clone()) <= bound,
            "DELAY {delay_ms}: the waiter's grants came {times:?} ms after the kill; median beyond {bound} ms"
        );
        assert!(times.iter().all(|t| *t >= delay_ms - 1), "DELAY {delay_ms}: granted inside the delay: {times:?} ms");
    }
    assert_eq!(counter(&mut c, "session_releases"), TRIALS as i64, "the trials without a delay were released by their session");
    assert_eq!(counter(&mut c, "session_delays"), TRIALS as i64, "the trials with a delay were cut to it");
    assert_eq!(counter(&mut c, "session_holds"), 0);

    // Without SESSION the lease alone decides: a 3 s lease, and the grant
    // comes after its end (the server's clock on both sides), however
    // soon after the grant the holder is killed.
    let (mut holder, _) = Cli::acquire(&s, "plain", "a", 3_000, "");
    let mut w = wait_for(&s, "plain", "b", WAITER_TTL, 20_000);
    wait_waiters(&mut c, b"plain", 1);
    let lease_end = pexpiretime(&mut c, b"plain");
    holder.kill9();
    granted_after(&mut w, Instant::now());
    let granted = pexpiretime(&mut c, b"plain") - WAITER_TTL;
    assert!(granted >= lease_end, "granted at {granted}, before the lease of a killed holder without SESSION ended at {lease_end}");
    assert_eq!(counter(&mut c, "session_releases"), TRIALS as i64, "no session release without SESSION");
}

/// DELAY keeps the lock held that long past the disconnect, then it goes
/// to the waiter; the lease is cut to the delay (PTTL shows it).
#[test]
fn the_lock_delay_holds_the_lock_past_the_disconnect() {
    let s = Server::start();
    let mut c = s.conn();
    let mut holder = s.conn();
    int_of(&ok_cmd(&mut holder, &acq("job", "a", 30_000, &["SESSION", "DELAY", "800"])), "token");
    let mut w = wait_for(&s, "job", "b", 30_000, 20_000);
    wait_waiters(&mut c, b"job", 1);
    let dropped = Instant::now();
    drop(holder);
    wait_until(Duration::from_secs(5), "the lease cut to the delay", || counter(&mut c, "session_delays") == 1);
    let left = pttl(&mut c, b"job");
    assert!((0..=800).contains(&left), "PTTL {left} after the cut");
    let (_, after) = granted_after(&mut w, dropped);
    assert!(after >= Duration::from_millis(795), "granted {after:?} after the disconnect, inside the 800 ms lock-delay");
    assert!(after < Duration::from_millis(800 + 2_000), "granted {after:?} after the disconnect");
    assert_eq!(counter(&mut c, "session_releases"), 0, "a lock-delay ends by the lease, not a release");
}

/// A sentinel: a session hold on `key` whose connection closes in the
/// same pass as the ones under test, so its release says the pass ran.
fn sentinel(s: &Server, key: &str) -> Connection {
    let mut c = s.conn();
    int_of(&ok_cmd(&mut c, &acq(key, "sentinel", 30_000, &["SESSION"])), "sentinel token");
    c
}

fn kill_client(control: &mut Connection, id: i64) {
    assert_eq!(int_of(&ok_cmd(control, cmd("CLIENT").arg("KILL").arg("ID").arg(id)), "CLIENT KILL"), 1);
}

/// A re-grant to the same owner on another connection moves the binding
/// there, a re-grant without SESSION binds it to nothing, and a release
/// by owner from anywhere ends it: closing the first connection then
/// frees nothing.
#[test]
fn a_regrant_elsewhere_moves_the_binding_and_a_release_ends_it() {
    let s = Server::start();
    let mut c = s.conn();
    let mut first = s.conn();
    let mut second = s.conn();
    let t = int_of(&ok_cmd(&mut first, &acq("moved", "a", 30_000, &["SESSION"])), "token");
    assert_eq!(int_of(&ok_cmd(&mut second, &acq("moved", "a", 30_000, &["SESSION"])), "re-grant"), t, "a re-grant keeps its token");
    int_of(&ok_cmd(&mut first, &acq("unbound", "a", 30_000, &["SESSION"])), "token");
    int_of(&ok_cmd(&mut second, &acq("unbound", "a", 30_000, &[])), "re-grant without SESSION");
    assert!(!holder_rows(&mut c, "unbound")[0].session, "a re-grant without SESSION is bound to nothing");
    int_of(&ok_cmd(&mut first, &acq("released", "a", 30_000, &["SESSION"])), "token");
    assert_eq!(release(&mut c, b"released", b"a"), 1, "a release by owner from another connection");
    int_of(&ok_cmd(&mut first, &acq("released", "b", 30_000, &[])), "another owner takes it");
    assert_eq!(counter(&mut c, "session_holds"), 1, "only the moved hold is bound");

    let mut watch = sentinel(&s, "sentinel");
    let (first_id, watch_id) = (client_id(&mut first), client_id(&mut watch));
    kill_client(&mut c, first_id);
    kill_client(&mut c, watch_id);
    wait_until(Duration::from_secs(5), "the sentinel's release", || !exists(&mut c, b"sentinel"));
    assert!(exists(&mut c, b"moved"), "the hold moved to the second connection");
    assert!(holder_rows(&mut c, "moved")[0].session);
    assert!(exists(&mut c, b"unbound"), "a hold bound to nothing stays");
    assert_eq!(info(&mut c, b"released").expect("held").owner, b"b", "another owner's lock is left alone");

    let second_id = client_id(&mut second);
    kill_client(&mut c, second_id);
    wait_until(Duration::from_secs(5), "the moved hold's release", || !exists(&mut c, b"moved"));
    assert_eq!(counter(&mut c, "session_releases"), 2, "the sentinel and the moved hold");
}

/// Readers and permits end with their own connection only: the others
/// keep holding, and the line moves when they leave.
#[test]
fn shared_and_permit_holds_end_with_their_connection() {
    let s = Server::start();
    let mut c = s.conn();
    let mut r1 = s.conn();
    let mut r2 = s.conn();
    int_of(&ok_cmd(&mut r1, &acq("rw", "r1", 30_000, &["SHARED", "SESSION"])), "r1");
    int_of(&ok_cmd(&mut r2, &acq("rw", "r2", 30_000, &["SHARED"])), "r2");
    let mut writer = wait_for(&s, "rw", "w", 30_000, 20_000);
    wait_waiters(&mut c, b"rw", 1);
    let id = client_id(&mut r1);
    kill_client(&mut c, id);
    wait_until(Duration::from_secs(5), "r1's release", || counter(&mut c, "session_releases") == 1);
    let owners: Vec<String> = holder_rows(&mut c, "rw").into_iter().map(|h| String::from_utf8_lossy(&h.owner).into_owned()).collect();
    assert_eq!(owners, ["r2"], "r2 still holds; the writer still waits");
    assert_eq!(waiters(&mut c, b"rw"), 1);
    assert_eq!(release(&mut r2, b"rw", b"r2"), 1);
    int_of(&recv_reply(&mut writer, "the writer").expect("token"), "writer token");

    // A semaphore of 2: a permit with a lock-delay frees after it.
    let mut p1 = s.conn();
    let mut p2 = s.conn();
    int_of(&ok_cmd(&mut p1, &acq("sem", "p1", 30_000, &["SHARED", "LIMIT", "2", "SESSION", "DELAY", "300"])), "p1");
    int_of(&ok_cmd(&mut p2, &acq("sem", "p2", 30_000, &["SHARED", "LIMIT", "2"])), "p2");
    let mut p3 = s.conn();
    send_cmd(&mut p3, &acq("sem", "p3", 30_000, &["SHARED", "LIMIT", "2", "WAIT", "20000"]));
    wait_waiters(&mut c, b"sem", 1);
    let dropped = Instant::now();
    drop(p1);
    let (_, after) = granted_after(&mut p3, dropped);
    assert!(after >= Duration::from_millis(295), "p3 had p1's permit {after:?} after the disconnect, inside the delay");
    let owners: Vec<String> = holder_rows(&mut c, "sem").into_iter().map(|h| String::from_utf8_lossy(&h.owner).into_owned()).collect();
    assert_eq!(owners.len(), 2, "never over the limit: {owners:?}");
    assert!(owners.contains(&"p2".to_string()) && owners.contains(&"p3".to_string()), "{owners:?}");
}

/// A release the module makes for a closed connection reaches a replica
/// as a release.
#[test]
fn a_session_release_replicates() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    let mut holder = master.conn();
    int_of(&ok_cmd(&mut holder, &acq("job", "a", 30_000, &["SESSION"])), "token");
    int_of(&ok_cmd(&mut holder, &acq("rw", "a", 30_000, &["SHARED", "SESSION", "DELAY", "400"])), "token");
    int_of(&ok_cmd(&mut m, &acq("rw", "b", 30_000, &["SHARED"])), "token");
    wait1(&mut m);
    assert!(info(&mut r, b"job").is_some(), "the replica has the lock");
    drop(holder);
    wait_until(Duration::from_secs(5), "the release on the master", || !exists(&mut m, b"job"));
    wait_until(Duration::from_secs(5), "the release on the replica", || !exists(&mut r, b"job"));
    // The cut lease reached the replica too: a's hold ends there within the delay.
    wait_until(Duration::from_secs(5), "a's shared hold ended on the replica", || {
        holder_rows(&mut r, "rw").iter().all(|h| h.owner != b"a")
    });
    assert_eq!(holder_rows(&mut r, "rw").len(), 1, "b keeps its hold on the replica");
}

/// SESSION and DELAY are checked like every option.
#[test]
fn bad_session_options_are_refused_clearly() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: [(&[&str], &str); 5] = [
        (&["DELAY", "100"], "ERR syntax error: DELAY needs SESSION"),
        (&["SESSION", "DELAY", "-1"], "ERR DELAY must be an integer from 0 to redislock.max-ttl"),
        (&["SESSION", "DELAY", "3600001"], "ERR DELAY must be an integer from 0 to redislock.max-ttl"),
        (&["SESSION", "SESSION"], "ERR SESSION given more than once"),
        (&["SESSION", "DELAY"], "ERR DELAY needs milliseconds"),
    ];
    for (extra, expected) in cases {
        let e = expect_err(&mut c, &acq("k", "a", 1_000, extra));
        assert!(e.starts_with(expected), "{extra:?}: {e}");
    }
    let e = expect_err(&mut c, cmd("EVAL").arg("return redis.call('LOCK.ACQUIRE', 'k', 'a', 1000, 'SESSION')").arg(0));
    assert!(e.contains("SESSION is not allowed in scripts"), "{e}");
    assert!(!exists(&mut c, b"k"), "nothing was granted");
}

/// Holders come and go with SESSION, some released, some crashed (their
/// connection dropped or killed mid-hold): every grant finds the fenced
/// resource free and tokens only rise.
#[test]
fn sessions_never_let_two_holders_in() {
    let s = Server::start();
    let resource = Arc::new(Mutex::new((None::<usize>, 0i64, 0usize, 0usize)));
    let deadline = Instant::now() + Duration::from_secs(3);
    let workers: Vec<_> = (0..6)
        .map(|me| {
            let (s_port, resource) = (s.port, Arc::clone(&resource));
            std::thread::spawn(move || {
                let url = format!("redis://127.0.0.1:{s_port}/");
                let client = redis::Client::open(url).expect("client");
                let mut control = client.get_connection().expect("control");
                let mut round = 0u64;
                while Instant::now() < deadline {
                    round += 1;
                    let mut c = client.get_connection().expect("connect");
                    // A new owner each round: a crashed holder's successor is a
                    // new process (the same owner again would be a re-grant,
                    // with the same token, and would take the binding over).
                    let owner = format!("w{me}-{round}");
                    let reply = redis::cmd("LOCK.ACQUIRE")
                        .arg("job")
                        .arg(&owner)
                        .arg(5_000)
                        .arg("WAIT")
                        .arg(4_000)
                        .arg("SESSION")
                        .query::<Option<i64>>(&mut c);
                    let Ok(Some(token)) = reply else { continue };
                    {
                        let mut r = resource.lock().unwrap_or_else(|p| p.into_inner());
                        if r.0.is_some() {
                            r.2 += 1; // an overlap
                        }
                        assert!(token > r.1, "token {token} after {}", r.1);
                        *r = (Some(me), token, r.2, r.3 + 1);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    // The holder stops writing before it ends: released, or dead.
                    resource.lock().unwrap_or_else(|p| p.into_inner()).0 = None;
                    match round % 3 {
                        0 => drop(c),
                        1 => {
                            let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).expect("CLIENT ID");
                            let _: redis::RedisResult<i64> = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query(&mut control);
                        }
                        _ => {
                            let _: i64 = redis::cmd("LOCK.RELEASE").arg("job").arg(&owner).query(&mut c).expect("release");
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let r = resource.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(r.2, 0, "overlapping holds");
    assert!(r.3 >= 30, "only {} holds in 3 s", r.3);
    let mut c = s.conn();
    assert!(counter(&mut c, "session_releases") > 0, "crashed holders were released by their session");
}

/// `LOCK.ACQUIRE key owner ttl SESSION ...` for `n` keys `{prefix}{i}` on
/// `c`, pipelined.
fn bind_many(c: &mut Connection, prefix: &str, n: usize, ttl: i64) {
    const CHUNK: usize = 10_000;
    for start in (0..n).step_by(CHUNK) {
        let mut pipe = redis::pipe();
        for i in start..n.min(start + CHUNK) {
            pipe.add_command(acq(&format!("{prefix}{i}"), "a", ttl, &["SESSION"]));
        }
        let tokens: Vec<i64> = pipe.query(c).expect("pipelined LOCK.ACQUIRE ... SESSION");
        assert_eq!(tokens.len(), n.min(start + CHUNK) - start);
    }
}

/// A session-bound hold is extended from its own connection only: from
/// another, EXTEND answers 0 and changes nothing (its lease, what a
/// replica has); exclusive, shared and permit holds alike. A hold bound
/// to nothing extends from anywhere.
#[test]
fn only_its_own_connection_extends_a_bound_hold() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut c = master.conn();
    let mut r = replica.conn();
    let mut own = master.conn();
    let mut other = master.conn();
    let holds: [(&str, &[&str]); 3] = [("x", &["SESSION"]), ("rw", &["SHARED", "SESSION"]), ("sem", &["SHARED", "LIMIT", "2", "SESSION"])];
    for (key, extra) in holds {
        int_of(&ok_cmd(&mut own, &acq(key, "a", 10_000, extra)), "token");
    }
    // WAIT waits for the writes of the connection that calls it.
    wait1(&mut own);
    let expires: Vec<i64> = holds.iter().map(|(key, _)| pexpiretime(&mut r, key.as_bytes())).collect();
    for (key, _) in holds {
        assert_eq!(extend(&mut other, key.as_bytes(), b"a", 60_000), 0, "{key}: EXTEND from another connection");
        let left = pttl(&mut c, key.as_bytes());
        assert!((1..=10_000).contains(&left), "{key}: PTTL {left} after a refused extension");
    }
    assert_eq!(counter(&mut c, "extend_refused"), 3);
    // Whatever the refused extensions wrote (nothing) has reached the replica.
    wait1(&mut other);
    let after: Vec<i64> = holds.iter().map(|(key, _)| pexpiretime(&mut r, key.as_bytes())).collect();
    assert_eq!(after, expires, "nothing reached the replica");
    for (key, _) in holds {
        assert_eq!(extend(&mut own, key.as_bytes(), b"a", 20_000), 1, "{key}: EXTEND from its own connection");
        assert!(pttl(&mut c, key.as_bytes()) > 10_000, "{key}: extended");
        assert!(holder_rows(&mut c, key)[0].session, "{key}: still bound");
    }
    // Bound to nothing: from anywhere.
    int_of(&ok_cmd(&mut own, &acq("x", "a", 10_000, &[])), "a re-grant without SESSION");
    assert_eq!(extend(&mut other, b"x", b"a", 30_000), 1, "a hold bound to nothing");
    int_of(&ok_cmd(&mut own, &acq("plain", "a", 10_000, &[])), "token");
    assert_eq!(extend(&mut other, b"plain", b"a", 30_000), 1, "a hold never bound");
}

/// With `SESSION DELAY`, a closed connection's hold cannot be revived by
/// an extension from a new connection, neither before the server has
/// ended it (here held back by OOM, under which the module writes
/// nothing) nor after its lease was cut to the lock-delay: the lock goes
/// to the next owner after the delay, not after the 10 s lease.
#[test]
fn a_lease_cut_to_its_lock_delay_is_not_revived_by_an_extension() {
    let s = Server::start();
    let mut c = s.conn();
    let mut holder = s.conn();
    let token = int_of(&ok_cmd(&mut holder, &acq("job", "a", 10_000, &["SESSION", "DELAY", "1500"])), "token");
    // The module ends nothing while the server is out of memory.
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("maxmemory").arg(1));
    let id = client_id(&mut holder);
    let killed = Instant::now();
    kill_client(&mut c, id);
    assert_eq!(counter(&mut c, "session_holds"), 0, "its connection closed");
    let mut reconnected = s.conn();
    assert_eq!(extend(&mut reconnected, b"job", b"a", 10_000), 0, "closed, not ended yet: no extension");
    assert_eq!(counter(&mut c, "session_delays"), 0, "not ended under OOM");
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    wait_until(Duration::from_secs(5), "the lease cut to the delay", || counter(&mut c, "session_delays") == 1);
    assert_eq!(extend(&mut reconnected, b"job", b"a", 10_000), 0, "cut: no extension");
    assert_eq!(extend(&mut c, b"job", b"a", 10_000), 0, "cut: from no connection");
    let left = pttl(&mut c, b"job");
    assert!((0..=1_500).contains(&left), "PTTL {left} after the cut and the extensions");
    assert_eq!(info(&mut c, b"job").expect("held through the delay").token, token);
    // The next owner, waiting: granted once the delay ends.
    let mut next = s.conn();
    let t = int_of(&ok_cmd(&mut next, &acq("job", "b", 10_000, &["WAIT", "8000"])), "b's token");
    let after = killed.elapsed();
    assert!(t > token);
    assert!(after >= Duration::from_millis(1_495), "b was granted {after:?} after the kill, inside the lock-delay");
    assert!(after < Duration::from_millis(1_500 + 3_000), "b was granted {after:?} after the kill: the lease was revived");
    assert_eq!(extend(&mut reconnected, b"job", b"a", 10_000), 0, "a's hold is gone");
}

/// After the cut, a re-grant to the same owner (LOCK.ACQUIRE on its new
/// connection, during the lock-delay) is how a holder gets its hold back:
/// same token, a full lease, bound to the new connection, which alone may
/// extend it; closing that one ends it again.
#[test]
fn a_regrant_after_the_cut_binds_the_hold_to_the_new_connection() {
    let s = Server::start();
    let mut c = s.conn();
    let mut holder = s.conn();
    let token = int_of(&ok_cmd(&mut holder, &acq("job", "a", 10_000, &["SESSION", "DELAY", "3000"])), "token");
    let id = client_id(&mut holder);
    kill_client(&mut c, id);
    wait_until(Duration::from_secs(5), "the lease cut to the delay", || counter(&mut c, "session_delays") == 1);
    let mut reconnected = s.conn();
    assert_eq!(extend(&mut reconnected, b"job", b"a", 10_000), 0, "cut: no extension");
    let again = int_of(&ok_cmd(&mut reconnected, &acq("job", "a", 10_000, &["SESSION", "DELAY", "3000"])), "re-grant");
    assert_eq!(again, token, "a re-grant keeps the token");
    assert!(pttl(&mut c, b"job") > 3_000, "a full lease again");
    assert!(holder_rows(&mut c, "job")[0].session, "bound again");
    assert_eq!(extend(&mut reconnected, b"job", b"a", 10_000), 1, "from the connection it is bound to now");
    assert_eq!(extend(&mut c, b"job", b"a", 10_000), 0, "from another");
    let id = client_id(&mut reconnected);
    kill_client(&mut c, id);
    wait_until(Duration::from_secs(5), "the second connection's cut", || counter(&mut c, "session_delays") == 2);
    assert!(pttl(&mut c, b"job") <= 3_000);
}

/// A binding ends with its hold: the leases of 1000 bound holds run out
/// while their connection stays open, and `session_holds` falls to 0;
/// a hold extended on that connection stays bound, and closing the
/// connection still ends it.
#[test]
fn bindings_end_with_their_leases_while_the_connection_stays_open() {
    let s = Server::start();
    let mut c = s.conn();
    let mut holder = s.conn();
    bind_many(&mut holder, "short", 1_000, 300);
    int_of(&ok_cmd(&mut holder, &acq("kept", "a", 300, &["SESSION"])), "token");
    assert_eq!(counter(&mut c, "session_holds"), 1_001);
    assert_eq!(extend(&mut holder, b"kept", b"a", 60_000), 1);
    wait_until(Duration::from_secs(10), "the ended holds' bindings forgotten", || counter(&mut c, "session_holds") == 1);
    assert!(holder_rows(&mut c, "kept")[0].session, "the extended hold is still bound");
    let mut sentinel_conn = sentinel(&s, "sentinel");
    let (holder_id, sentinel_id) = (client_id(&mut holder), client_id(&mut sentinel_conn));
    kill_client(&mut c, holder_id);
    kill_client(&mut c, sentinel_id);
    wait_until(Duration::from_secs(5), "the sentinel's release", || !exists(&mut c, b"sentinel"));
    assert!(!exists(&mut c, b"kept"), "the extended hold ended with its connection");
    assert_eq!(counter(&mut c, "session_releases"), 2, "kept and the sentinel; the others had ended");
    assert_eq!(counter(&mut c, "session_holds"), 0);
}

/// Closing a connection bound to 100,000 holds ends them all, a slice at
/// a time: the server keeps answering while they end (a command is
/// answered with some of them ended and some not; one callback ending all
/// of them took 116–130 ms during which nothing was answered), and the
/// work was split (the module yields at least once per 1000 holds).
#[test]
fn closing_a_connection_with_many_holds_ends_them_in_slices() {
    const N: usize = 100_000;
    let s = Server::start();
    let mut c = s.conn();
    let mut holder = s.conn();
    let bound_at = Instant::now();
    bind_many(&mut holder, "k", N, 600_000);
    eprintln!("{N} bound in {:?}", bound_at.elapsed());
    assert_eq!(counter(&mut c, "session_holds"), N as i64);
    // One of them with a waiter: its line moves when it ends.
    let mut w = wait_for(&s, "k7", "b", 60_000, 20_000);
    wait_waiters(&mut c, b"k7", 1);

    // A prober asks for the count of session releases over and over: an
    // answer between 0 and N is the server answering a command while the
    // holds end. Ended in one callback, they would all end between two
    // commands, and no answer could fall between (however fast or slow
    // the machine: the probes wait for the server, never for a time).
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut probe = s.conn();
    let prober = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let (mut worst, mut probes, mut midway) = (Duration::ZERO, 0u32, 0u32);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                let ended = counter(&mut probe, "session_releases");
                worst = worst.max(sent.elapsed());
                probes += 1;
                if ended > 0 && ended < N as i64 {
                    midway += 1;
                }
            }
            (worst, probes, midway)
        })
    };
    let id = client_id(&mut holder);
    let killed = Instant::now();
    kill_client(&mut c, id);
    let mut midway_here = 0;
    wait_until(Duration::from_secs(30), "every hold ended", || {
        let ended = counter(&mut c, "session_releases");
        if ended > 0 && ended < N as i64 {
            midway_here += 1;
        }
        ended == N as i64
    });
    let took = killed.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (worst, probes, midway) = prober.join().expect("prober");
    let yields = counter(&mut c, "session_end_yields");
    eprintln!(
        "{N} holds ended in {took:?} with {yields} yields; {probes} probes, {midway} of them (and {midway_here} polls) midway, the slowest {worst:?}"
    );
    assert!(yields >= (N / 1_000 - 1) as i64, "ended in {yields} yields: not in slices of at most 1000 holds");
    assert!(midway + midway_here > 0, "no command was answered while the holds ended ({took:?}): ended in one go");
    assert_eq!(int_of(&ok_cmd(&mut c, &cmd("DBSIZE")), "DBSIZE"), 1, "every hold released; the waiter holds k7");
    assert_eq!(info(&mut c, b"k7").expect("k7 handed over").owner, b"b");
    int_of(&recv_reply(&mut w, "the waiter").expect("token"), "waiter token");
    assert_eq!(counter(&mut c, "session_holds"), 0);
}
