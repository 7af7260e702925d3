//! `redlock` failures name their cause (issue 17, "a first run that works
//! as written"): connection refused, DNS failure, timeout, authentication,
//! module missing, restart quarantine and a held lock are told apart in
//! the text, the exit status and the `--json` error object; bad URLs and
//! negative durations say what is wrong; the help of each command names
//! only its own options; `redlock bench` reports ratios, not targets.
//! The real binary against real servers (or none at all).

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

use common::cli::Ran;
use common::{relaxed, Cluster, Opts, Server};
use serde_json::Value;
use tokio::process::Command;

/// No CLI invocation here may take longer.
const CLI_DEADLINE: Duration = Duration::from_secs(30);

/// Exit statuses, as `redlock --help` documents them.
const USAGE: i32 = 2;
const HELD: i32 = 3;
const NOT_RELEASED: i32 = 4;
const LOCK_LOST: i32 = 5;
const NO_QUORUM: i32 = 6;
const QUARANTINE: i32 = 7;
const RUN_NOT_LOCKED: i32 = 75;

fn redlock(servers: &str, args: &[&str]) -> Command {
    common::cli::redlock(servers, args)
}

async fn run_cmd(cmd: Command, what: &str) -> Ran {
    common::cli::run(cmd, CLI_DEADLINE, what).await
}

async fn cli(servers: &str, args: &[&str]) -> Ran {
    run_cmd(redlock(servers, args), &args.join(" ")).await
}

/// The `--json` error object on stdout: the only document there, with
/// kind, message and the exit status the process really had.
fn error_object(ran: &Ran, kind: &str) -> Value {
    let doc: Value =
        serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {:?}", ran.stdout));
    let error = doc.get("error").unwrap_or_else(|| panic!("no error object: {doc}")).clone();
    assert_eq!(error["kind"], kind, "{error}");
    assert_eq!(error["exit_code"].as_i64(), ran.code.map(i64::from), "exit_code must be the real status: {error}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");
    error
}

/// The `kind` of every instance of an error or result object.
fn kinds(object: &Value) -> Vec<String> {
    object["instances"]
        .as_array()
        .unwrap_or_else(|| panic!("no instances: {object}"))
        .iter()
        .map(|i| i["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// A local port nothing listens on (bound and let go: the kernel refuses
/// connections to it).
fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn urls(servers: &[&Server]) -> String {
    servers.iter().map(|s| s.url()).collect::<Vec<_>>().join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_named_and_no_quorum_exits_6_with_a_json_error_for_every_command() {
    let ports: Vec<String> = (0..3).map(|_| format!("redis://127.0.0.1:{}", dead_port())).collect();
    let servers = ports.join(",");

    let ran = cli(&servers, &["acquire", "orders:42", "--ttl", "10s"]).await;
    assert_eq!(ran.code, Some(NO_QUORUM), "all servers down is not 'held' (3)");
    assert!(ran.stderr.contains("no quorum reachable: 0 of 3 servers answered (quorum 2)"), "{}", ran.stderr);
    for p in &ports {
        let addr = p.trim_start_matches("redis://");
        assert!(ran.stderr.contains(&format!("{addr} connection refused")), "{addr} named: {}", ran.stderr);
    }
    assert!(!ran.stderr.contains("timeout"), "a refused connection is not a timeout: {}", ran.stderr);
    assert!(ran.stderr.contains("is redis-server running there?"), "{}", ran.stderr);
    assert!(ran.stdout.is_empty(), "nothing on stdout without --json: {:?}", ran.stdout);

    let ran = cli(&servers, &["acquire", "orders:42", "--ttl", "10s", "--json"]).await;
    let error = error_object(&ran, "no_quorum");
    assert_eq!(error["cause"], "connection_refused", "{error}");
    assert_eq!((error["answered"].as_u64(), error["quorum"].as_u64(), error["servers"].as_u64()), (Some(0), Some(2), Some(3)));
    assert_eq!(error["resource"], "orders:42");
    assert_eq!(kinds(&error), vec!["connection_refused"; 3]);
    assert!(error["instances"].as_array().unwrap().iter().all(|i| i["outcome"] == "unreachable"), "{error}");

    // Every command, the same error object (run keeps its 75: the command did not run).
    for (args, code) in [
        (vec!["release", "orders:42", "someone", "--json"], NO_QUORUM),
        (vec!["extend", "orders:42", "someone", "--ttl", "5s", "--json"], NO_QUORUM),
        (vec!["status", "orders:42", "--json"], NO_QUORUM),
        (vec!["status", "--json"], NO_QUORUM),
        (vec!["--json", "run", "orders:42", "--", "sh", "-c", "echo command-ran"], RUN_NOT_LOCKED),
        (vec!["bench", "--duration", "100ms", "--json"], NO_QUORUM),
    ] {
        let ran = cli(&servers, &args).await;
        assert_eq!(ran.code, Some(code), "{args:?}: {}", ran.stderr);
        let error = error_object(&ran, "no_quorum");
        assert_eq!(error["cause"], "connection_refused", "{args:?}: {error}");
        assert!(kinds(&error).iter().all(|k| k == "connection_refused"), "{args:?}: {error}");
        assert!(!ran.stdout.contains("command-ran"), "{args:?}: the command must not run");
        assert!(ran.stderr.contains("connection refused"), "{args:?}: {}", ran.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_failure_is_named_as_such() {
    let ran = cli("redis://nosuchhost.invalid:6379", &["acquire", "r", "--ttl", "1s", "--retry-count", "0", "--json"]).await;
    assert_eq!(ran.code, Some(NO_QUORUM));
    let error = error_object(&ran, "no_quorum");
    assert_eq!(error["cause"], "dns_failure", "{error}");
    assert_eq!(kinds(&error), vec!["dns_failure"]);
    assert!(ran.stderr.contains("nosuchhost.invalid:6379 DNS lookup failed"), "{}", ran.stderr);
    assert!(ran.stderr.contains("does not resolve: check the host names"), "{}", ran.stderr);
    assert!(!ran.stderr.contains("timeout") && !ran.stderr.contains("connection refused"), "{}", ran.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_a_timeout_not_a_refusal() {
    let mut c = Cluster::start(3);
    c.servers[1].freeze();
    c.servers[2].freeze();
    // A fresh process connects anew: the kernel accepts the connection of
    // a stopped server, which then never answers the handshake.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlock"));
    cmd.env_remove("REDLOCK_SERVERS")
        .args(["--servers", &c.urls().join(","), "--request-timeout", "300ms", "--connect-timeout", "300ms"])
        .args(["--retry-count", "0", "acquire", "frozen", "--ttl", "5s", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let ran = run_cmd(cmd, "acquire with two frozen").await;
    c.servers[1].thaw();
    c.servers[2].thaw();
    assert_eq!(ran.code, Some(NO_QUORUM));
    let error = error_object(&ran, "no_quorum");
    assert_eq!(error["cause"], "connect_timeout", "{error}");
    assert_eq!(kinds(&error), vec!["granted", "connect_timeout", "connect_timeout"], "{error}");
    for s in &c.servers[1..] {
        assert!(ran.stderr.contains(&format!("{} connect timeout", s.addr())), "{}", ran.stderr);
    }
    assert!(ran.stderr.contains("did not answer in time"), "{}", ran.stderr);
    assert!(!ran.stderr.contains("refused"), "{}", ran.stderr);
    // The grant of the one live server was rolled back.
    assert_eq!(c.servers[0].info("frozen").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_failures_are_named() {
    let c = Cluster::start_opts(vec![Opts::requirepass("s3cret"); 3]);
    let bare: Vec<String> = c.servers.iter().map(Server::bare_url).collect();
    let ran = cli(&bare.join(","), &["acquire", "r", "--ttl", "2s", "--json"]).await;
    // The servers answered, refusing the credentials: a configuration
    // error named by its cause, not "no quorum reachable".
    assert_eq!(ran.code, Some(USAGE));
    let error = error_object(&ran, "auth_failed");
    assert_eq!(error["cause"], "auth_failed", "{error}");
    assert_eq!(kinds(&error), vec!["auth_failed"; 3]);
    assert!(ran.stderr.contains("authentication failed (NOAUTH"), "{}", ran.stderr);
    assert!(ran.stderr.contains("redis://:PASSWORD@host:port"), "the fix is named: {}", ran.stderr);

    let wrong: Vec<String> = c.servers.iter().map(|s| format!("redis://:wrong@{}", s.addr())).collect();
    let ran = cli(&wrong.join(","), &["acquire", "r", "--ttl", "2s", "--json"]).await;
    let error = error_object(&ran, "auth_failed");
    assert_eq!(kinds(&error), vec!["auth_failed"; 3], "{error}");
    assert!(ran.stderr.contains("authentication failed"), "{}", ran.stderr);
    assert!(!ran.stderr.contains("timeout") && !ran.stderr.contains("connection refused"), "{}", ran.stderr);

    let ran = cli(&c.urls().join(","), &["acquire", "r", "--ttl", "2s"]).await;
    assert_eq!(ran.code, Some(0), "with the password: {}", ran.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_info_is_told_to_allow_it_not_to_change_its_credentials() {
    // The client reads INFO server on each connection (the run_id tells
    // servers apart): a user that may not gets NOPERM, a missing right.
    let c = Cluster::start(3);
    for s in &c.servers {
        s.ok(redis::cmd("ACL").arg(&["SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-info"])).await;
    }
    let app: Vec<String> = c.servers.iter().map(|s| format!("redis://app:pw@{}", s.addr())).collect();
    let ran = cli(&app.join(","), &["acquire", "r", "--ttl", "2s", "--json"]).await;
    assert_eq!(ran.code, Some(USAGE), "a configuration error: {}", ran.stderr);
    let error = error_object(&ran, "auth_failed");
    assert_eq!(kinds(&error), vec!["auth_failed"; 3], "{error}");
    assert!(ran.stderr.contains("NOPERM") && ran.stderr.contains("ACL SETUSER <user> +info"), "the fix is named: {}", ran.stderr);
    assert!(!ran.stderr.contains("give them in the URL"), "the credentials are right: {}", ran.stderr);
    assert!(!ran.stderr.contains("authentication failed"), "{}", ran.stderr);
    for s in &c.servers {
        assert_eq!(s.info("r").await, None, "{}: nothing taken", s.addr());
    }

    // Given the right, the same user locks.
    for s in &c.servers {
        s.ok(redis::cmd("ACL").arg(&["SETUSER", "app", "+info"])).await;
    }
    let ran = cli(&app.join(","), &["acquire", "r", "--ttl", "2s"]).await;
    assert_eq!(ran.code, Some(0), "with +info: {}", ran.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_module_is_one_failed_instance_named_as_such() {
    let c = Cluster::start_kinds(&[true, true, true, true, false]);
    let plain = c.servers[4].addr();
    let ran = cli(&c.urls().join(","), &["acquire", "mm", "--ttl", "10s", "--json"]).await;
    assert_eq!(ran.code, Some(0), "4 module servers of 5 are a quorum: {}", ran.stderr);
    let body: Value = serde_json::from_str(ran.stdout.trim()).expect("JSON");
    assert_eq!(kinds(&body), vec!["granted", "granted", "granted", "granted", "module_missing"], "{body}");
    assert!(ran.stderr.contains(&format!("no redislock module on {plain}")), "a warning names it: {}", ran.stderr);
    let owner = body["owner"].as_str().expect("owner").to_string();

    let ran = cli(&c.urls().join(","), &["status", "mm", "--json"]).await;
    assert_eq!(ran.code, Some(0));
    let status: Value = serde_json::from_str(ran.stdout.trim()).expect("JSON");
    assert_eq!((status["state"].as_str(), status["owner"].as_str()), (Some("held"), Some(owner.as_str())), "{status}");
    assert_eq!(status["instances"][4]["kind"], "module_missing", "{status}");
    assert_eq!(status["instances"][4]["state"], "error", "{status}");

    let ran = cli(&c.urls().join(","), &["release", "mm", &owner]).await;
    assert_eq!(ran.code, Some(0), "released on 4 of 5: {}", ran.stderr);

    // One module server beside one plain, quorum 2: no quorum can answer.
    let servers = urls(&[&c.servers[0], &c.servers[4]]);
    let ran = cli(&servers, &["acquire", "mm", "--ttl", "10s", "--json"]).await;
    assert_eq!(ran.code, Some(USAGE), "1 of 2, the other without the module: a configuration error");
    let error = error_object(&ran, "module_missing");
    assert_eq!(kinds(&error), vec!["granted", "module_missing"], "{error}");
    assert!(ran.stderr.contains(&format!("{plain} LOCK.* unknown (no redislock module)")), "{}", ran.stderr);
    assert!(ran.stderr.contains("--mode script"), "{}", ran.stderr);
    assert_eq!(c.servers[0].info("mm").await, None, "the one grant was rolled back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_3_and_each_command_says_so_in_json() {
    let c = Cluster::start(3);
    let servers = c.urls().join(",");
    let lib = c.redlock(relaxed());
    let lock = lib.lock("held", Duration::from_secs(30)).await.expect("lock");

    let ran = cli(&servers, &["acquire", "held", "--ttl", "5s", "--json"]).await;
    assert_eq!(ran.code, Some(HELD), "{}", ran.stderr);
    let error = error_object(&ran, "held");
    assert_eq!(kinds(&error), vec!["held"; 3]);
    assert!(ran.stderr.contains("held by another owner (refused by 3 of 3 servers, quorum 2"), "{}", ran.stderr);

    let ran = cli(&servers, &["--json", "run", "held", "--ttl", "5s", "--", "sh", "-c", "echo ran"]).await;
    assert_eq!(ran.code, Some(RUN_NOT_LOCKED));
    let error = error_object(&ran, "held");
    assert!(error["message"].as_str().unwrap_or("").ends_with("\"sh\" not run"), "{error}");

    let ran = cli(&servers, &["extend", "held", "not-the-owner", "--ttl", "5s", "--json"]).await;
    assert_eq!(ran.code, Some(LOCK_LOST), "{}", ran.stderr);
    let error = error_object(&ran, "lock_lost");
    assert_eq!(kinds(&error), vec!["not_held"; 3]);

    let ran = cli(&servers, &["release", "held", "not-the-owner", "--json"]).await;
    assert_eq!(ran.code, Some(NOT_RELEASED), "{}", ran.stderr);
    let error = error_object(&ran, "not_released");
    assert_eq!(error["released"], 0);
    assert_eq!(kinds(&error), vec!["not_held"; 3]);

    // Not a failure: status reports the holder.
    let ran = cli(&servers, &["status", "held", "--json"]).await;
    assert_eq!(ran.code, Some(0));
    let status: Value = serde_json::from_str(ran.stdout.trim()).expect("JSON");
    assert_eq!(status["state"], "held");
    assert_eq!(status["owner"], lock.owner.as_str());

    // Two refusals beside one dead server of three: a quorum voted "held".
    // With two dead, one refusal is no quorum's verdict: no_quorum, not held.
    let one_live = format!("{},redis://127.0.0.1:{},redis://127.0.0.1:{}", c.servers[0].url(), dead_port(), dead_port());
    let ran = cli(&one_live, &["acquire", "held", "--ttl", "5s", "--json"]).await;
    assert_eq!(ran.code, Some(NO_QUORUM), "{}", ran.stderr);
    let error = error_object(&ran, "no_quorum");
    assert_eq!(kinds(&error), vec!["held", "connection_refused", "connection_refused"]);
    lib.release(&lock).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_quarantine_is_its_own_state_and_exit_status() {
    let c = Cluster::start_opts(vec![Opts::quarantine(60_000); 3]);
    let servers = c.urls().join(",");

    let ran = cli(&servers, &["acquire", "orders:42", "--ttl", "10s"]).await;
    assert_eq!(ran.code, Some(QUARANTINE), "{}", ran.stderr);
    assert!(ran.stderr.contains("3 of 3 servers are in restart quarantine for another "), "{}", ran.stderr);
    assert!(ran.stderr.contains("or wait for it with --wait "), "{}", ran.stderr);
    assert!(ran.took < Duration::from_secs(5), "a 60 s quarantine ends the retries at once: {:?}", ran.took);

    let ran = cli(&servers, &["acquire", "orders:42", "--ttl", "10s", "--json"]).await;
    let error = error_object(&ran, "quarantine");
    let left = error["quarantine_ms_left"].as_u64().expect("quarantine_ms_left");
    assert!(left > 30_000 && left <= 60_000, "{error}");
    assert_eq!(kinds(&error), vec!["quarantine"; 3]);

    let ran = cli(&servers, &["status", "orders:42"]).await;
    assert_eq!(ran.code, Some(0));
    let summary = ran.stdout.lines().last().unwrap_or_default();
    assert!(summary.starts_with("\"orders:42\" is not grantable for "), "{summary}");
    assert!(summary.ends_with(" s on 3 of 3 servers (restart quarantine)"), "{summary}");
    assert!(!ran.stdout.contains("free"), "never 'free' while nothing can be granted: {}", ran.stdout);

    let ran = cli(&servers, &["status", "orders:42", "--json"]).await;
    let status: Value = serde_json::from_str(ran.stdout.trim()).expect("JSON");
    assert_eq!(status["state"], "quarantine", "{status}");
    assert!(status["quarantine_ms_left"].as_u64().is_some_and(|ms| ms > 30_000), "{status}");
    assert!(status["instances"].as_array().unwrap().iter().all(|i| i["state"] == "quarantine"), "{status}");
}

/// A pseudo-terminal: (master, slave), 24 rows by 120 columns.
fn pty() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize { ws_row: 24, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: openpty writes two descriptors into our integers; no name buffer, default termios.
    let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened for us and are owned here only.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// `redislock_quarantine_ms_left` of `INFO redislock`.
async fn quarantine_left(s: &Server) -> u64 {
    let info = s.ok(redis::cmd("INFO").arg("redislock")).await;
    let info: String = redis::from_redis_value(info).expect("INFO text");
    info.lines()
        .find_map(|l| l.strip_prefix("redislock_quarantine_ms_left:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no quarantine field in {info}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_outlasts_a_quarantine_with_a_countdown_on_a_terminal_only() {
    let c = Cluster::start_opts(vec![Opts::quarantine(4_000); 3]);
    let servers = c.urls().join(",");
    let left = quarantine_left(&c.servers[0]).await;
    assert!(left > 500, "the servers took too long to start for this test: {left} ms of quarantine left");

    // acquire --wait, stderr on a terminal.
    let (master, slave) = pty();
    let mut on_tty = redlock(&servers, &["acquire", "q1", "--ttl", "10s", "--wait", "20s"]);
    on_tty.stderr(Stdio::from(slave));
    let tty_run = run_cmd(on_tty, "acquire --wait on a terminal");
    let terminal = tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::from(master);
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the last writer (the child) is gone.
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    // run --wait at the same time, stderr into a pipe.
    let piped_run = cli(&servers, &["run", "q2", "--ttl", "10s", "--wait", "20s", "--", "sh", "-c", "echo ran"]);
    let (tty_ran, piped) = tokio::join!(tty_run, piped_run);
    let terminal = tokio::time::timeout(Duration::from_secs(10), terminal).await.expect("terminal closed").expect("join");
    println!("terminal: {terminal:?}");

    assert_eq!(tty_ran.code, Some(0), "acquired once the quarantine ended: {terminal}");
    assert!(tty_ran.stdout.contains("token: "), "{}", tty_ran.stdout);
    assert_eq!(piped.code, Some(0), "{}", piped.stderr);
    assert_eq!(piped.stdout.trim(), "ran");
    assert!(
        tty_ran.took + Duration::from_millis(100) >= Duration::from_millis(left),
        "granted {:?} after the start, with {left} ms of quarantine left",
        tty_ran.took
    );
    // Granted once a quorum (2 of 3) left the quarantine; the last server
    // may still be a few milliseconds from the end of its own.
    let mut out_of_quarantine = 0;
    for s in &c.servers {
        if quarantine_left(s).await == 0 {
            out_of_quarantine += 1;
        }
    }
    assert!(out_of_quarantine >= 2, "granted only once a quorum left the quarantine ({out_of_quarantine} of 3 out)");

    assert!(terminal.contains("waiting for restart quarantine: "), "a countdown on the terminal: {terminal:?}");
    assert!(terminal.contains(" s left on 3 of 3 servers"), "{terminal:?}");
    assert!(!piped.stderr.contains("waiting for"), "nothing drawn into a pipe: {:?}", piped.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_name_the_problem() {
    for (url, says) in [
        ("http://127.0.0.1:6379", "unsupported scheme http, use redis://"),
        ("redis://127.0.0.1:99999", "port 99999 out of range 1-65535"),
        ("127.0.0.1:0", "port 0 out of range 1-65535"),
        ("redis://:6379", "missing host"),
        ("redis://127.0.0.1:63x9", "port \"63x9\" is not a number"),
        ("redis+cluster://127.0.0.1:7000,127.0.0.1:70000", "port 70000 out of range 1-65535"),
    ] {
        let ran = cli(url, &["status", "r"]).await;
        assert_eq!(ran.code, Some(2), "{url}");
        assert!(ran.stderr.contains(says), "{url}: {}", ran.stderr);
        assert!(!ran.stderr.contains("did not parse"), "{url}: {}", ran.stderr);
        let ran = cli(url, &["acquire", "r", "--ttl", "1s", "--json"]).await;
        let error = error_object(&ran, "usage");
        assert!(error["message"].as_str().unwrap_or("").contains(says), "{url}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_separated_by_spaces_or_semicolons_say_to_use_commas() {
    // Ports nothing listens on: the list is refused before any connection.
    let a = dead_port();
    let b = std::iter::repeat_with(dead_port).find(|&p| p != a).expect("a second port");
    for (list, by) in [
        (format!("redis://127.0.0.1:{a} redis://127.0.0.1:{b}"), "spaces"),
        (format!("redis://127.0.0.1:{a};redis://127.0.0.1:{b}"), "semicolons"),
        (format!("127.0.0.1:{a}; 127.0.0.1:{b}"), "spaces and semicolons"),
    ] {
        let says = format!("separated by {by}: separate servers with commas");
        let ran = cli(&list, &["status", "r"]).await;
        assert_eq!(ran.code, Some(USAGE), "{list}");
        assert!(ran.stderr.contains(&says) && ran.stderr.contains("--servers"), "{list}: {}", ran.stderr);
        assert!(!ran.stderr.contains("port") && !ran.stderr.contains("did not parse"), "{list}: {}", ran.stderr);
        let ran = cli(&list, &["acquire", "r", "--ttl", "1s", "--json"]).await;
        let error = error_object(&ran, "usage");
        assert!(error["message"].as_str().unwrap_or("").contains(&says), "{list}: {error}");

        // The same list from the environment names the variable.
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlock"));
        cmd.env("REDLOCK_SERVERS", &list)
            .args(["status", "r"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let ran = run_cmd(cmd, &format!("REDLOCK_SERVERS={list:?} status r")).await;
        assert_eq!(ran.code, Some(USAGE), "{list}");
        assert!(ran.stderr.contains(&says) && ran.stderr.contains("REDLOCK_SERVERS"), "{list}: {}", ran.stderr);
    }
    // Commas, as asked, reach the servers (none listens: no quorum).
    let ran = cli(&format!("redis://127.0.0.1:{a},redis://127.0.0.1:{b}"), &["status", "r"]).await;
    assert_eq!(ran.code, Some(NO_QUORUM), "{}", ran.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_durations_say_they_must_be_positive() {
    for args in [
        vec!["acquire", "r", "--ttl", "-5s"],
        vec!["acquire", "r", "--ttl", "5s", "--wait", "-1s"],
        vec!["run", "r", "--ttl", "-1s", "--", "true"],
        vec!["status", "r", "--request-timeout", "-50ms"],
    ] {
        let ran = cli("redis://127.0.0.1:1", &args).await;
        assert_eq!(ran.code, Some(2), "{args:?}");
        assert!(ran.stderr.contains("is negative: durations must be positive"), "{args:?}: {}", ran.stderr);
        assert!(!ran.stderr.contains("tip:"), "no clap tip about '-- -5': {}", ran.stderr);
    }
    // With --json, clap's own usage errors are error objects too.
    let ran = cli("redis://127.0.0.1:1", &["acquire", "r", "--ttl", "-5s", "--json"]).await;
    let error = error_object(&ran, "usage");
    assert!(error["message"].as_str().unwrap_or("").contains("must be positive"), "{error}");
    let ran = cli("redis://127.0.0.1:1", &["acquire", "r", "--json"]).await;
    let error = error_object(&ran, "usage");
    assert!(error["message"].as_str().unwrap_or("").contains("--ttl"), "{error}");
}

/// The options a help text defines, and every `--option` it mentions.
fn options_of(help: &str) -> (Vec<String>, Vec<String>) {
    let mut defined = Vec::new();
    let mut mentioned = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let words = |s: &str| {
            s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(|w| w.trim_end_matches('-').to_string())
                .collect::<Vec<_>>()
        };
        if trimmed.starts_with('-') && line.starts_with("  ") {
            // "  -h, --help" / "      --ttl <DURATION>  text...": the first option word is defined.
            if let Some(first) = words(trimmed.split("  ").next().unwrap_or("")).first() {
                defined.push(first.clone());
            }
        }
        mentioned.extend(words(line));
    }
    (defined, mentioned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_command_help_mentions_only_options_it_has() {
    for command in ["acquire", "release", "extend", "status", "run", "bench"] {
        let ran = cli("redis://127.0.0.1:1", &[command, "--help"]).await;
        assert_eq!(ran.code, Some(0), "{command}");
        let (defined, mentioned) = options_of(&ran.stdout);
        assert!(defined.contains(&"--retry-count".to_string()), "{command}: parsed the options: {defined:?}");
        for m in &mentioned {
            assert!(defined.contains(m), "`redlock {command} --help` mentions {m}, which {command} does not have:\n{}", ran.stdout);
        }
        let has_wait = defined.contains(&"--wait".to_string());
        assert_eq!(has_wait, ["acquire", "run"].contains(&command), "{command}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_reports_what_it_measured_and_ratios_from_the_same_run_without_targets() {
    let c = Cluster::start(3);
    let servers = c.urls().join(",");
    let args = ["bench", "--workers", "2", "--contenders", "2", "--duration", "150ms", "--ttl", "2s"];
    let ran = cli(&servers, &args).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    for gone in ["MISSED", "[met]", "target", "32 worker"] {
        assert!(!ran.stdout.contains(gone), "{gone:?} in:\n{}", ran.stdout);
    }
    for line in [
        "module/script cycles/s, 1 worker(s)",
        "module/script cycles/s, 2 worker(s)",
        "quorum/floor cycles/s, 1 worker(s) (module, 3 servers vs 1)",
        "quorum/floor cycles/s, 2 worker(s) (module, 3 servers vs 1)",
        "contended: ",
        "fairness of the contended phases",
        "contended: permits, limit 2",
    ] {
        assert!(ran.stdout.contains(line), "{line:?} in:\n{}", ran.stdout);
    }

    let mut json_args = args.to_vec();
    json_args.push("--json");
    let ran = cli(&servers, &json_args).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let report: Value = serde_json::from_str(ran.stdout.trim()).expect("JSON");
    assert!(report.get("targets").is_none(), "{report}");
    assert_eq!(report["workers"], 2);
    let phases = report["phases"].as_array().expect("phases");
    assert_eq!(phases.len(), 9, "module, script at 1 and 2 workers, the floor at 1 and 2, contended exclusive, mixed, permits: {report}");
    assert!(phases.iter().all(|p| p["cycles"].as_u64().is_some_and(|n| n > 0)), "every phase measured something: {report}");
    let ratios = report["ratios"].as_array().expect("ratios");
    let names: Vec<&str> = ratios.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.iter().all(|n| n.contains("1 worker(s)") || n.contains("2 worker(s)")), "{names:?}");
    // Each ratio is the quotient of two phases of this very run.
    let rate = |name: &str, workers: u64| {
        phases
            .iter()
            .find(|p| p["name"].as_str().is_some_and(|n| n.starts_with(name)) && p["workers"] == workers)
            .and_then(|p| p["cycles_per_sec"].as_f64())
            .expect("phase")
    };
    let module_script_2 = ratios.iter().find(|r| r["name"] == "module/script cycles/s, 2 worker(s)").expect("ratio");
    let expected = rate("uncontended: module", 2) / rate("uncontended: script", 2);
    assert!((module_script_2["value"].as_f64().unwrap() - expected).abs() < 1e-9, "{module_script_2} vs {expected}");
    assert_eq!(report["contended"]["contenders"], 2);
    // Fairness of each contended phase: grants per worker and Jain's index.
    let fairness = report["fairness"].as_array().expect("fairness");
    assert_eq!(fairness.len(), 3, "{report}");
    for f in fairness {
        let per_worker = f["grants_per_worker"].as_array().expect("grants per worker");
        assert_eq!(per_worker.len(), 2, "{f}");
        let jain = f["jain"].as_f64().expect("jain");
        assert!(jain > 0.0 && jain <= 1.0 + 1e-9, "{f}");
        assert!(f["min"].as_u64() <= f["max"].as_u64(), "{f}");
    }
}
