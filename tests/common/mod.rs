//! Test harness for the redislock integration tests.
//!
//! Every test starts its own real `redis-server` process(es) on free local
//! ports, bound to 127.0.0.1 only, with a fresh temporary data directory.
//! Servers are killed (by the PID we spawned) and reaped in `Drop`, also when
//! the test panics.
#![allow(dead_code)]

pub mod cluster;

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, RedisError, Value};

/// One at a time, in `tests/module/`, for the tests that load both cores
/// (the 16-thread hammer and histories) and those that bound how long they
/// take beside a memory fill (eviction): a test holds the guard from its
/// start to its end. Each of their files was a program of its own, so they
/// never ran beside each other's load.
static HEAVY: Mutex<()> = Mutex::new(());

pub fn one_heavy_at_a_time() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a server gets to answer PING after being spawned.
pub const READY_DEADLINE: Duration = Duration::from_secs(10);
/// Read timeout on every test connection, so a wedged server fails the test
/// instead of hanging it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Path of the module under test: `$REDISLOCK_MODULE`, else the release build
/// in this crate. Panics with a clear message when the file does not exist.
pub fn module_path() -> PathBuf {
    let p = match std::env::var_os("REDISLOCK_MODULE") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/release/libredislock.so")),
    };
    if !p.is_file() {
        panic!(
            "redislock module not found at {} — build it with `cargo build --release` \
             or point REDISLOCK_MODULE at the .so",
            p.display()
        );
    }
    p
}

/// The server binary the suite runs against: `$REDISLOCK_SERVER` (e.g.
/// Valkey's, from `make test`), else `redis-server` from PATH.
pub fn server_binary() -> PathBuf {
    match std::env::var_os("REDISLOCK_SERVER") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from("redis-server"),
    }
}

/// Valkey 8.1's server, for tests that must also run there: `$REDISLOCK_VALKEY`
/// (set by `make test`), else `.servers/valkey-8.1/redis-server` in this
/// repository. `None` when neither exists (the test then says so).
pub fn valkey_binary() -> Option<PathBuf> {
    let p = match std::env::var_os("REDISLOCK_VALKEY") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.servers/valkey-8.1/redis-server")),
    };
    p.is_file().then_some(p)
}

/// libfaketime's preload library (Debian's `faketime` package, which
/// `make test` installs), if present.
pub fn libfaketime() -> Option<PathBuf> {
    ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Microseconds since the Unix epoch, from the system clock.
pub fn now_unix_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("system clock before 1970").as_micros() as i64
}

/// A fencing token well above anything a server's counter (seeded from
/// the clock in µs at load) reaches by itself during a test, and within
/// the default `redislock.max-token-lead` (60 s): 30 s ahead of the clock.
pub fn far_future_token() -> i64 {
    now_unix_us() + 30_000_000
}

/// Milliseconds since the Unix epoch, from the system clock.
pub fn now_unix_ms() -> i64 {
    now_unix_us() / 1000
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    l.local_addr().expect("local_addr of probe listener").port()
}

/// Why a server did not come up.
#[derive(Debug)]
pub struct StartError {
    /// The process exited (with this status) before answering PING.
    pub exited: Option<std::process::ExitStatus>,
    pub message: String,
    pub log_tail: String,
}

/// The readiness check reached a server that is not the one spawned.
const NOT_OURS: &str = "another process answers on this port";

impl StartError {
    /// Another process holds (or won) the port: retry on another one.
    pub fn port_taken(&self) -> bool {
        self.log_tail.contains("Address already in use") || self.message.contains(NOT_OURS)
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (exit status: {:?})\n--- redis log tail ---\n{}", self.message, self.exited, self.log_tail)
    }
}

pub struct Server {
    pub port: u16,
    /// The server executable (see `server_binary`).
    pub binary: PathBuf,
    pub dir: PathBuf,
    pub pid: u32,
    child: Option<Child>,
    module_args: Vec<String>,
    extra_args: Vec<String>,
    /// Extra environment of the server process (e.g. libfaketime's).
    envs: Vec<(String, String)>,
    log: PathBuf,
    // Kept last so the directory outlives the process (fields drop in order,
    // but Drop::drop runs first anyway).
    _tmp: tempfile::TempDir,
}

impl Server {
    /// A server with the module loaded without module args.
    pub fn start() -> Server {
        Self::start_full(&[], &[])
    }

    /// A server with extra redis-server args (e.g. `["--appendonly", "yes"]`).
    pub fn start_with(args: &[&str]) -> Server {
        Self::start_full(&[], args)
    }

    /// A server with module args (after the module path on the loadmodule
    /// line) and extra redis-server args.
    pub fn start_full(module_args: &[&str], args: &[&str]) -> Server {
        match Self::try_start_full(module_args, args) {
            Ok(s) => s,
            Err(e) => panic!("redis-server did not start: {e}"),
        }
    }

    /// Like `start_full`, but reports a failed start instead of panicking.
    /// Returns promptly when the process exits during startup.
    pub fn try_start_full(module_args: &[&str], args: &[&str]) -> Result<Server, StartError> {
        Self::try_start_binary(&server_binary(), module_args, args)
    }

    /// A server from the given executable (e.g. `valkey_binary()`).
    pub fn start_binary(binary: &Path, module_args: &[&str], args: &[&str]) -> Server {
        match Self::try_start_binary(binary, module_args, args) {
            Ok(s) => s,
            Err(e) => panic!("{} did not start: {e}", binary.display()),
        }
    }

    pub fn try_start_binary(binary: &Path, module_args: &[&str], args: &[&str]) -> Result<Server, StartError> {
        Self::try_start_binary_env(binary, module_args, args, &[])
    }

    /// A server from `binary` with extra environment variables (e.g.
    /// LD_PRELOAD of libfaketime).
    pub fn start_binary_env(binary: &Path, module_args: &[&str], args: &[&str], envs: &[(&str, &str)]) -> Server {
        match Self::try_start_binary_env(binary, module_args, args, envs) {
            Ok(s) => s,
            Err(e) => panic!("{} did not start: {e}", binary.display()),
        }
    }

    pub fn try_start_binary_env(binary: &Path, module_args: &[&str], args: &[&str], envs: &[(&str, &str)]) -> Result<Server, StartError> {
        let mut s = Self::unstarted(binary, module_args, args);
        s.envs = envs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut last_err = None;
        for _attempt in 0..10 {
            s.port = free_port();
            match s.launch() {
                Ok(()) => return Ok(s),
                Err(e) if e.port_taken() => {
                    last_err = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

    /// A server of the suite's binary on exactly `port` (one attempt; the
    /// caller picks ports, e.g. a Cluster node whose bus port must be free).
    pub fn try_start_at(port: u16, module_args: &[&str], args: &[&str]) -> Result<Server, StartError> {
        let mut s = Self::unstarted(&server_binary(), module_args, args);
        s.port = port;
        s.launch().map(|()| s)
    }

    fn unstarted(binary: &Path, module_args: &[&str], args: &[&str]) -> Server {
        let tmp = tempfile::Builder::new().prefix("redislock-test-").tempdir().expect("create temp dir for redis-server");
        let dir = tmp.path().to_path_buf();
        let log = dir.join("redis.log");
        Server {
            port: 0,
            binary: binary.to_path_buf(),
            dir,
            pid: 0,
            child: None,
            module_args: module_args.iter().map(|s| s.to_string()).collect(),
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            envs: Vec::new(),
            log,
            _tmp: tmp,
        }
    }

    /// Is persistence configured (AOF on, or non-empty save points)?
    fn persistence_configured(&self) -> bool {
        let a = &self.extra_args;
        let mut i = 0;
        while i < a.len() {
            if a[i] == "--appendonly" && a.get(i + 1).map(|v| v == "yes").unwrap_or(false) {
                return true;
            }
            if a[i] == "--save" && a.get(i + 1).map(|v| !v.trim().is_empty()).unwrap_or(false) {
                return true;
            }
            i += 1;
        }
        false
    }

    fn has_extra(&self, name: &str) -> bool {
        self.extra_args.iter().any(|a| a == name)
    }

    fn build_args(&self) -> Vec<String> {
        let module = module_path();
        let mut v: Vec<String> = vec![
            "--port".into(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--logfile".into(),
            self.log.display().to_string(),
            "--daemonize".into(),
            "no".into(),
            "--loadmodule".into(),
            module.display().to_string(),
        ];
        v.extend(self.module_args.iter().cloned());
        let defaults: &[(&str, &str)] = &[
            ("--save", ""),
            ("--appendonly", "no"),
            ("--enable-debug-command", "yes"),
            ("--enable-module-command", "yes"),
            ("--loglevel", "notice"),
        ];
        for (k, val) in defaults {
            if !self.has_extra(k) {
                v.push((*k).into());
                v.push((*val).into());
            }
        }
        v.extend(self.extra_args.iter().cloned());
        v
    }

    fn log_len(&self) -> u64 {
        fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    fn log_since(&self, from: u64) -> String {
        let mut out = String::new();
        if let Ok(mut f) = fs::File::open(&self.log) {
            let _ = f.seek(SeekFrom::Start(from));
            let mut buf = Vec::new();
            let _ = f.read_to_end(&mut buf);
            out = String::from_utf8_lossy(&buf).into_owned();
        }
        out
    }

    /// Last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        let all = self.log_since(0);
        let lines: Vec<&str> = all.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The whole server log.
    pub fn log_text(&self) -> String {
        self.log_since(0)
    }

    /// Spawn redis-server on `self.port` and wait until it answers PING.
    fn launch(&mut self) -> Result<(), StartError> {
        let log_start = self.log_len();
        let args = self.build_args();
        let child = Command::new(&self.binary)
            .args(&args)
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| StartError {
                exited: None,
                message: format!("spawning redis-server failed: {e} (is it on PATH?)"),
                log_tail: String::new(),
            })?;
        self.pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + READY_DEADLINE;
        let url = format!("redis://127.0.0.1:{}/", self.port);
        let client = redis::Client::open(url.as_str()).expect("redis client for readiness check");
        let mut last: String;
        loop {
            // The process died: report at once, do not wait for the deadline.
            let status = self.child.as_mut().expect("child present").try_wait().expect("try_wait on redis-server");
            if let Some(st) = status {
                self.child = None;
                return Err(StartError {
                    exited: Some(st),
                    message: format!("redis-server (pid {}, port {}) exited during startup; args: {:?}", self.pid, self.port, args),
                    log_tail: self.log_since(log_start),
                });
            }
            match client.get_connection_with_timeout(Duration::from_millis(500)) {
                Ok(mut con) => {
                    let _ = con.set_read_timeout(Some(Duration::from_secs(2)));
                    // Free ports are found by binding port 0 and letting
                    // go, so two tests can pick the same one: only the
                    // server we spawned counts as ready.
                    match redis::cmd("INFO").arg("server").query::<String>(&mut con) {
                        // Ours; ready once it has loaded its data (PING
                        // answers LOADING until then).
                        Ok(s) if info_pid(&s) == Some(self.pid) => match redis::cmd("PING").query::<String>(&mut con) {
                            Ok(p) if p == "PONG" => return Ok(()),
                            Ok(p) => last = format!("PING answered {p:?}"),
                            Err(e) => last = format!("PING failed: {e}"),
                        },
                        Ok(s) if info_pid(&s).is_some() => {
                            let log_tail = self.log_since(log_start);
                            self.kill_child();
                            return Err(StartError {
                                exited: None,
                                message: format!("{NOT_OURS} ({}, not pid {})", self.port, self.pid),
                                log_tail,
                            });
                        }
                        Ok(s) => last = format!("INFO server answered {s:?}"),
                        Err(e) => last = format!("INFO server failed: {e}"),
                    }
                }
                Err(e) => last = format!("connect failed: {e}"),
            }
            if Instant::now() > deadline {
                let log_tail = self.log_since(log_start);
                self.kill_child();
                return Err(StartError {
                    exited: None,
                    message: format!(
                        "redis-server (pid {}, port {}) not ready within {:?}; last: {last}",
                        self.pid, self.port, READY_DEADLINE
                    ),
                    log_tail,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill_child(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A RESP2 connection (read timeout 30 s).
    pub fn conn(&self) -> Connection {
        self.conn_url(&format!("redis://127.0.0.1:{}/", self.port))
    }

    /// A RESP3 connection (read timeout 30 s).
    pub fn conn_resp3(&self) -> Connection {
        self.conn_url(&format!("redis://127.0.0.1:{}/?protocol=resp3", self.port))
    }

    fn conn_url(&self, url: &str) -> Connection {
        let client = redis::Client::open(url).expect("redis client from URL");
        let con = client.get_connection_with_timeout(Duration::from_secs(5)).unwrap_or_else(|e| {
            panic!("connect to redis-server on port {} failed: {e}\n--- log tail ---\n{}", self.port, self.log_tail(30))
        });
        con.set_read_timeout(Some(READ_TIMEOUT)).expect("set read timeout");
        con.set_write_timeout(Some(READ_TIMEOUT)).expect("set write timeout");
        con
    }

    /// Is the process we spawned still running?
    pub fn is_alive(&mut self) -> bool {
        match self.child.as_mut() {
            None => false,
            Some(c) => match c.try_wait().expect("try_wait on redis-server") {
                None => true,
                Some(_) => {
                    self.child = None;
                    false
                }
            },
        }
    }

    /// SIGSTOP the server (it stops reading its sockets, like a lagging host).
    pub fn sigstop(&self) {
        // SAFETY: kill(2) on the PID of the child we spawned and still own.
        assert_eq!(unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGSTOP) }, 0, "SIGSTOP");
    }

    /// SIGCONT a server stopped with `sigstop`.
    pub fn sigcont(&self) {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGCONT) }, 0, "SIGCONT");
    }

    /// Waits for the server to exit on its own (e.g. after SHUTDOWN) and
    /// returns its status; `None` if it still runs after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.child.as_mut()?;
            if let Some(status) = c.try_wait().expect("try_wait on redis-server") {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL the server and reap it.
    pub fn kill9(&mut self) {
        let mut c = self.child.take().expect("kill9: server is not running");
        c.kill().expect("SIGKILL redis-server");
        c.wait().expect("wait for killed redis-server");
    }

    /// Stop gracefully: `SHUTDOWN SAVE` when persistence is configured,
    /// `SHUTDOWN NOSAVE` otherwise; SIGTERM if SHUTDOWN is refused. Waits for
    /// the process to exit (10 s deadline, then SIGKILL and panic).
    pub fn stop(&mut self) {
        if !self.is_alive() {
            return;
        }
        let mode = if self.persistence_configured() { "SAVE" } else { "NOSAVE" };
        let mut sent = false;
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port).as_str()).expect("redis client for shutdown");
        if let Ok(mut con) = client.get_connection_with_timeout(Duration::from_secs(5)) {
            let _ = con.set_read_timeout(Some(Duration::from_secs(10)));
            match redis::cmd("SHUTDOWN").arg(mode).query::<Value>(&mut con) {
                // A successful SHUTDOWN closes the connection without a reply.
                Err(e) if e.is_io_error() || e.is_connection_dropped() => sent = true,
                Err(e) => eprintln!("SHUTDOWN {mode} refused on port {}: {e}", self.port),
                Ok(v) => eprintln!("SHUTDOWN {mode} replied {v:?} on port {}", self.port),
            }
        }
        if !sent {
            // SAFETY: plain kill(2) on the PID of the child we spawned and still own.
            unsafe {
                libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let c = self.child.as_mut().expect("child present while stopping");
            if let Some(_st) = c.try_wait().expect("try_wait on redis-server") {
                self.child = None;
                return;
            }
            if Instant::now() > deadline {
                self.kill_child();
                panic!("redis-server pid {} did not exit within 10 s after SHUTDOWN/SIGTERM\n{}", self.pid, self.log_tail(30));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stop gracefully (see `stop`) if running, then start again with the
    /// same port, dir and args.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Stop gracefully (see `stop`) if running, then start again with the
    /// same port, dir and redis-server args but these module args.
    pub fn restart_with_module_args(&mut self, module_args: &[&str]) {
        self.stop();
        self.set_module_args(module_args);
        self.start_again();
    }

    /// redis-server args for the next `start_again` / `restart` (the same
    /// port and dir; e.g. another `--appendfsync`).
    pub fn set_extra_args(&mut self, args: &[&str]) {
        self.extra_args = args.iter().map(|s| s.to_string()).collect();
    }

    /// Module args for the next `start_again` / `restart`.
    pub fn set_module_args(&mut self, module_args: &[&str]) {
        self.module_args = module_args.iter().map(|s| s.to_string()).collect();
    }

    /// Start a stopped (or killed) server again on the same port, dir, args.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "start_again: server still running");
        let mut last = None;
        for _ in 0..20 {
            match self.launch() {
                Ok(()) => return,
                Err(e) if e.port_taken() => {
                    last = Some(e);
                    // The port is briefly held by something else; back off and retry.
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("redis-server did not restart: {e}"),
            }
        }
        panic!("redis-server could not get its port {} back: {}", self.port, last.expect("an error"));
    }
}

fn info_pid(info: &str) -> Option<u32> {
    info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|p| p.trim().parse().ok())
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- redis-server port {} pid {} log tail (dir {}) ---\n{}",
                self.port,
                self.pid,
                self.dir.display(),
                self.log_tail(40)
            );
        }
        self.kill_child();
    }
}

// ---------------------------------------------------------------------------
// Reply helpers
// ---------------------------------------------------------------------------

/// Full text of a server error as the server sent it, e.g.
/// `ERR owner must not be empty` or `WRONGTYPE Operation against ...`.
pub fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(c), Some(d)) => format!("{c} {d}"),
        (Some(c), None) => c.to_string(),
        _ => format!("<not a server error: {e:?}>"),
    }
}

fn server_err_text(e: &redis::ServerError) -> String {
    match e.details() {
        Some(d) => format!("{} {}", e.code(), d),
        None => e.code().to_string(),
    }
}

/// Send a command and return the raw reply; a top-level server error becomes
/// `Err(full error text)`. Nested errors (e.g. inside EXEC) stay as
/// `Value::ServerError`. I/O errors (dropped connection) panic with context.
pub fn try_cmd(con: &mut Connection, cmd: &redis::Cmd) -> Result<Value, String> {
    let packed = cmd.get_packed_command();
    con.send_packed_command(&packed).unwrap_or_else(|e| panic!("sending {} failed: {e}", describe(&packed)));
    match con.recv_response() {
        Ok(Value::ServerError(e)) => Err(server_err_text(&e)),
        Ok(v) => Ok(v),
        Err(e) if e.code().is_some() && !e.is_io_error() => Err(err_text(&e)),
        Err(e) => panic!("no reply to {}: {e} ({e:?})", describe(&packed)),
    }
}

/// Like `try_cmd` but returns the error text or panics on a non-error reply.
pub fn expect_err(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match try_cmd(con, cmd) {
        Err(t) => t,
        Ok(v) => panic!("expected an error reply to {}, got {v:?}", describe(&cmd.get_packed_command())),
    }
}

/// Like `try_cmd` but panics on an error reply.
pub fn ok_cmd(con: &mut Connection, cmd: &redis::Cmd) -> Value {
    match try_cmd(con, cmd) {
        Ok(v) => v,
        Err(t) => panic!("unexpected error reply to {}: {t}", describe(&cmd.get_packed_command())),
    }
}

/// Short printable description of a packed command (for messages).
pub fn describe(packed: &[u8]) -> String {
    let s = String::from_utf8_lossy(packed).replace("\r\n", " ");
    if s.len() > 200 {
        format!("{}… ({} bytes)", &s[..s.char_indices().nth(200).map(|(i, _)| i).unwrap_or(s.len())], packed.len())
    } else {
        s
    }
}

pub fn int_of(v: &Value, what: &str) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("{what}: expected an integer reply, got {other:?}"),
    }
}

pub fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

/// `LOCK.ACQUIRE key owner ttl` → Some(token) or None (held by another).
pub fn acquire(con: &mut Connection, key: &[u8], owner: &[u8], ttl: i64) -> Option<i64> {
    let v = ok_cmd(con, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(ttl));
    match v {
        Value::Nil => None,
        Value::Int(t) => Some(t),
        other => panic!("LOCK.ACQUIRE replied neither integer nor nil: {other:?}"),
    }
}

/// `LOCK.ACQUIRE key owner ttl FENCE min`.
pub fn acquire_fence(con: &mut Connection, key: &[u8], owner: &[u8], ttl: i64, min: i64) -> Option<i64> {
    let v = ok_cmd(con, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(ttl).arg("FENCE").arg(min));
    match v {
        Value::Nil => None,
        Value::Int(t) => Some(t),
        other => panic!("LOCK.ACQUIRE FENCE replied neither integer nor nil: {other:?}"),
    }
}

/// Acquire that must be granted; returns the token.
pub fn grant(con: &mut Connection, key: &str, owner: &str, ttl: i64) -> i64 {
    acquire(con, key.as_bytes(), owner.as_bytes(), ttl).unwrap_or_else(|| panic!("LOCK.ACQUIRE {key} {owner} {ttl} was not granted"))
}

pub fn release(con: &mut Connection, key: &[u8], owner: &[u8]) -> i64 {
    let v = ok_cmd(con, cmd("LOCK.RELEASE").arg(key).arg(owner));
    int_of(&v, "LOCK.RELEASE")
}

pub fn extend(con: &mut Connection, key: &[u8], owner: &[u8], ttl: i64) -> i64 {
    let v = ok_cmd(con, cmd("LOCK.EXTEND").arg(key).arg(owner).arg(ttl));
    int_of(&v, "LOCK.EXTEND")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub owner: Vec<u8>,
    pub token: i64,
    pub pttl: i64,
    pub waiters: i64,
}

/// LOCK.INFO of any lock, including a plain-string lock (token nil).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnyLockInfo {
    pub owner: Vec<u8>,
    /// `None` for a plain-string lock.
    pub token: Option<i64>,
    pub pttl: i64,
    pub waiters: i64,
}

fn bulk(v: &Value, what: &str) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.as_bytes().to_vec(),
        other => panic!("{what}: expected a string, got {other:?}"),
    }
}

fn token_of(v: &Value) -> Option<i64> {
    match v {
        Value::Nil => None,
        Value::Int(i) => Some(*i),
        other => panic!("LOCK.INFO token must be an integer or nil, got {other:?}"),
    }
}

/// The fields of a LOCK.INFO reply in order, from a RESP2 flat array or a
/// RESP3 map; strictly the documented seven: owner, token, pttl, waiters,
/// mode, limit, holders.
pub fn info_fields(v: Value) -> Option<Vec<(Vec<u8>, Value)>> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return None,
        Value::Array(items) => {
            assert_eq!(items.len(), 14, "LOCK.INFO RESP2 reply must have 14 elements: {items:?}");
            let mut it = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        Value::Map(pairs) => pairs,
        other => panic!("LOCK.INFO: unexpected reply {other:?}"),
    };
    let fields: Vec<(Vec<u8>, Value)> = pairs.into_iter().map(|(k, v)| (bulk(&k, "LOCK.INFO field"), v)).collect();
    let names: Vec<&[u8]> = fields.iter().map(|(k, _)| k.as_slice()).collect();
    let expected: [&[u8]; 7] = [b"owner", b"token", b"pttl", b"waiters", b"mode", b"limit", b"holders"];
    assert_eq!(names, expected, "LOCK.INFO fields and their order");
    Some(fields)
}

/// Parse the LOCK.INFO reply of an exclusive lock strictly (see
/// `info_fields`): mode exclusive, no limit, and one holder that repeats
/// owner, token and pttl.
pub fn parse_info_any(v: Value) -> Option<AnyLockInfo> {
    let fields = info_fields(v)?;
    let field = |i: usize| &fields[i].1;
    let owner = match field(0) {
        Value::BulkString(b) => b.clone(),
        other => panic!("LOCK.INFO owner must be a bulk string, got {other:?}"),
    };
    let token = token_of(field(1));
    let pttl = int_of(field(2), "LOCK.INFO pttl");
    let waiters = int_of(field(3), "LOCK.INFO waiters");
    assert_eq!(bulk(field(4), "LOCK.INFO mode"), b"exclusive", "{fields:?}");
    assert_eq!(field(5), &Value::Nil, "an exclusive lock has no limit: {fields:?}");
    match field(6) {
        Value::Array(holders) => {
            assert_eq!(holders.len(), 1, "an exclusive lock has one holder: {fields:?}");
            match &holders[0] {
                Value::Array(h) if h.len() == 5 => {
                    // Held-for is known for a module lock, not for a plain string.
                    match (&h[1], &h[3]) {
                        (Value::Nil, held) => assert_eq!(held, &Value::Nil, "a plain string's held-ms: {fields:?}"),
                        (_, held) => assert!(int_of(held, "holder held-ms") >= 0, "held-ms: {fields:?}"),
                    }
                    assert!(matches!(h[4], Value::Int(0 | 1)), "session flag: {fields:?}");
                    assert_eq!(bulk(&h[0], "holder owner"), owner, "{fields:?}");
                    assert_eq!(token_of(&h[1]), token, "{fields:?}");
                    assert_eq!(int_of(&h[2], "holder pttl"), pttl, "{fields:?}");
                }
                other => panic!("LOCK.INFO holder must be [owner, token, pttl, held-ms, session], got {other:?}"),
            }
        }
        other => panic!("LOCK.INFO holders must be an array, got {other:?}"),
    }
    Some(AnyLockInfo { owner, token, pttl, waiters })
}

/// Like `parse_info_any`, for a module lock: the token must be an integer.
pub fn parse_info(v: Value) -> Option<LockInfo> {
    parse_info_any(v).map(|i| LockInfo {
        token: i.token.unwrap_or_else(|| {
            panic!(
                "LOCK.INFO token is nil (a plain-string lock?) where a module lock was expected: owner {:?}",
                String::from_utf8_lossy(&i.owner)
            )
        }),
        owner: i.owner,
        pttl: i.pttl,
        waiters: i.waiters,
    })
}

/// LOCK.INFO of any lock (plain-string locks included).
pub fn info_any(con: &mut Connection, key: &[u8]) -> Option<AnyLockInfo> {
    parse_info_any(ok_cmd(con, cmd("LOCK.INFO").arg(key)))
}

/// The `waiters` field of LOCK.INFO, of any kind of lock; panics when the
/// key does not exist.
pub fn waiters(con: &mut Connection, key: &[u8]) -> i64 {
    let fields = info_fields(ok_cmd(con, cmd("LOCK.INFO").arg(key)))
        .unwrap_or_else(|| panic!("LOCK.INFO {}: key does not exist (expected a held lock)", String::from_utf8_lossy(key)));
    int_of(&fields[3].1, "LOCK.INFO waiters")
}

/// Poll LOCK.INFO until `waiters` equals `n` (10 s deadline).
pub fn wait_waiters(con: &mut Connection, key: &[u8], n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let last = waiters(con, key);
        if last == n {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for LOCK.INFO {} waiters == {n} (last seen {last})", String::from_utf8_lossy(key));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `CLIENT ID` of a connection.
pub fn client_id(con: &mut Connection) -> i64 {
    int_of(&ok_cmd(con, cmd("CLIENT").arg("ID")), "CLIENT ID")
}

/// `blocked_clients` from INFO clients.
pub fn blocked_clients(con: &mut Connection) -> i64 {
    info_field_i64(con, "clients", "blocked_clients")
}

/// Send a command without reading its reply (for blocking commands and
/// pipelining across connections); read it later with `recv_reply`.
pub fn send_cmd(con: &mut Connection, cmd: &redis::Cmd) {
    let packed = cmd.get_packed_command();
    con.send_packed_command(&packed).unwrap_or_else(|e| panic!("sending {} failed: {e}", describe(&packed)));
}

/// Read the next reply on `con`; a top-level error becomes `Err(text)`.
/// Panics (naming `what`) on I/O errors, including the read timeout.
pub fn recv_reply(con: &mut Connection, what: &str) -> Result<Value, String> {
    match con.recv_response() {
        Ok(Value::ServerError(e)) => Err(server_err_text(&e)),
        Ok(v) => Ok(v),
        Err(e) if e.code().is_some() && !e.is_io_error() => Err(err_text(&e)),
        Err(e) => panic!("no reply to {what}: {e} ({e:?})"),
    }
}

/// Like `recv_reply`, but `None` when no reply arrives (read timeout or
/// another I/O error) instead of panicking.
pub fn try_recv_reply(con: &mut Connection) -> Option<Result<Value, String>> {
    match con.recv_response() {
        Ok(Value::ServerError(e)) => Some(Err(server_err_text(&e))),
        Ok(v) => Some(Ok(v)),
        Err(e) if e.code().is_some() && !e.is_io_error() => Some(Err(err_text(&e))),
        Err(_) => None,
    }
}

pub fn info(con: &mut Connection, key: &[u8]) -> Option<LockInfo> {
    parse_info(ok_cmd(con, cmd("LOCK.INFO").arg(key)))
}

pub fn pttl(con: &mut Connection, key: &[u8]) -> i64 {
    int_of(&ok_cmd(con, cmd("PTTL").arg(key)), "PTTL")
}

pub fn pexpiretime(con: &mut Connection, key: &[u8]) -> i64 {
    int_of(&ok_cmd(con, cmd("PEXPIRETIME").arg(key)), "PEXPIRETIME")
}

pub fn exists(con: &mut Connection, key: &[u8]) -> bool {
    int_of(&ok_cmd(con, cmd("EXISTS").arg(key)), "EXISTS") == 1
}

/// One field of `INFO <section>`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap_or_else(|e| panic!("INFO {section} failed: {e}"));
    let prefix = format!("{field}:");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(&prefix) {
            return rest.trim().to_string();
        }
    }
    panic!("INFO {section} has no field {field}:\n{text}")
}

pub fn info_field_i64(con: &mut Connection, section: &str, field: &str) -> i64 {
    let s = info_field(con, section, field);
    s.parse().unwrap_or_else(|e| panic!("INFO {section} {field}={s:?} is not an integer: {e}"))
}

/// Poll `f` until it returns true or `timeout` passes (then panic with `what`).
pub fn wait_until<F: FnMut() -> bool>(timeout: Duration, what: &str, mut f: F) {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Wait until the AOF buffer has been written to the file and return
/// `aof_current_size`. Redis appends propagated commands to its AOF buffer
/// during the command and writes it before replying, except that with
/// `appendfsync everysec` the write may be postponed while a background
/// fsync runs; so wait for `aof_buffer_length:0`.
pub fn wait_aof_flushed(c: &mut Connection) -> i64 {
    let mut size = 0;
    wait_until(Duration::from_secs(10), "AOF buffer to drain", || {
        let text: String = redis::cmd("INFO").arg("persistence").query(c).expect("INFO persistence");
        let get = |f: &str| -> i64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{f}:")))
                .unwrap_or_else(|| panic!("no {f} in INFO persistence"))
                .trim()
                .parse()
                .expect("integer field")
        };
        size = get("aof_current_size");
        get("aof_buffer_length") == 0
    });
    size
}

/// Wait until no AOF rewrite is running or scheduled.
pub fn wait_aof_rewrite_idle(con: &mut Connection) {
    wait_until(Duration::from_secs(30), "AOF rewrite to finish", || {
        info_field(con, "persistence", "aof_rewrite_in_progress") == "0" && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
    });
}

/// BGREWRITEAOF and wait for it to complete successfully.
pub fn bgrewriteaof(con: &mut Connection) {
    wait_aof_rewrite_idle(con);
    let before = info_field_i64(con, "persistence", "aof_rewrites");
    ok_cmd(con, &cmd("BGREWRITEAOF"));
    wait_until(Duration::from_secs(30), "BGREWRITEAOF to complete", || {
        info_field(con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
            && info_field_i64(con, "persistence", "aof_rewrites") > before
    });
    assert_eq!(info_field(con, "persistence", "aof_last_bgrewrite_status"), "ok", "BGREWRITEAOF failed");
}

/// Make `replica` replicate `master` and wait for the link to be up with
/// equal offsets.
pub fn attach_replica(master: &Server, replica: &Server) {
    let mut r = replica.conn();
    ok_cmd(&mut r, cmd("REPLICAOF").arg("127.0.0.1").arg(master.port));
    wait_replica_synced(master, replica);
}

/// Wait until the replica's link is up and both offsets are equal.
pub fn wait_replica_synced(master: &Server, replica: &Server) {
    let mut m = master.conn();
    let mut r = replica.conn();
    wait_until(Duration::from_secs(20), "replica link up", || info_field(&mut r, "replication", "master_link_status") == "up");
    let n = int_of(&ok_cmd(&mut m, cmd("WAIT").arg(1).arg(5000)), "WAIT");
    assert_eq!(n, 1, "WAIT 1 5000: replica did not acknowledge");
    wait_until(Duration::from_secs(10), "replica offset == master offset", || {
        let mo = info_field_i64(&mut m, "replication", "master_repl_offset");
        let ro = info_field_i64(&mut r, "replication", "slave_repl_offset");
        mo == ro
    });
}

/// `WAIT 1 5000` on the master must report the replica acknowledged.
pub fn wait1(master_con: &mut Connection) {
    let n = int_of(&ok_cmd(master_con, cmd("WAIT").arg(1).arg(5000)), "WAIT");
    assert_eq!(n, 1, "WAIT 1 5000: replica did not acknowledge the writes");
}

/// All regular files under `dir` (recursively), concatenated.
pub fn read_all_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(read_all_files(&p));
            } else if let Ok(b) = fs::read(&p) {
                out.push((p, b));
            }
        }
    }
    out
}

pub fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    let n: Vec<u8> = needle.to_ascii_lowercase();
    hay.windows(n.len()).any(|w| w.to_ascii_lowercase() == n)
}

// ---------------------------------------------------------------------------
// Handoff delays measured by the server's clock (issue 40)
// ---------------------------------------------------------------------------

/// The ttl a measured waiter asks for: its lease starts at its grant, so
/// its PEXPIRETIME less this is the instant of the grant, by the server's
/// own clock (see `granted_at`).
pub const MEASURED_WAITER_TTL: i64 = 60_000;

/// How far apart (ms) the lease ends of one measurement's keys are: nine
/// of them spread over a second, so a poll on a period of one second
/// (Redis's active expiry or cron at `hz 1`) meets each at another phase.
pub const DEADLINE_STEP_MS: i64 = 111;

/// Keys per measurement of handoff delays.
pub const MEASURED_KEYS: usize = 9;

/// The bound on the median delay, see `assert_prompt_handoffs`.
pub const PROMPT_MEDIAN_MS: i64 = 250;

/// When the waiter that asked for `MEASURED_WAITER_TTL` got `key`, by the
/// server's wall clock in ms: the test's own scheduling is not in it.
pub fn granted_at(con: &mut Connection, key: &[u8]) -> i64 {
    pexpiretime(con, key) - MEASURED_WAITER_TTL
}

/// The median of `v` (the upper one of an even count).
pub fn median_i64(v: &[i64]) -> i64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[s.len() / 2]
}

/// Checks the delays (ms, server clock) from `MEASURED_KEYS` lease ends,
/// spread `DEADLINE_STEP_MS` apart, to their waiters' grants.
///
/// Order: no grant before its lease's end (a delay below 0 is a handoff
/// of a lease still running).
///
/// Promptness, as a median: the module arms a timer for each lease's end,
/// so a delay is made of the timer firing late in the event loop (1 ms
/// idle) plus redis-server waiting for a CPU on a loaded machine (tens of
/// ms on a busy 2-core laptop; the test's own process is out of it, since
/// the server stamps the grant). `PROMPT_MEDIAN_MS` is 250 ms: more than
/// half of the nine handoffs would have to be that late. A handoff left to
/// a poll once a second instead of the timer (Redis's active expiry or the
/// cron at `hz 1`) meets the nine deadlines, 111 ms apart, at nine phases:
/// its delays spread over 0..1000 ms and their median is at least 444 ms.
pub fn assert_prompt_handoffs(what: &str, delays: &[i64]) {
    eprintln!("{what}: grants {delays:?} ms after the lease ends (server clock)");
    assert!(delays.iter().all(|d| *d >= 0), "{what}: a grant came before its lease ended: {delays:?} ms");
    let median = median_i64(delays);
    assert!(
        median < PROMPT_MEDIAN_MS,
        "{what}: median handoff {median} ms after the lease ends (bound {PROMPT_MEDIAN_MS} ms, a poll once a second shows >= 444): {delays:?}"
    );
}
