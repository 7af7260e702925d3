//! Harness for the redlock client's integration tests.
//!
//! Every test starts its own real `redis-server` processes on free local
//! ports (bound to 127.0.0.1, no persistence, a temporary directory each),
//! with the redislock module loaded unless a plain server is asked for.
//! A server may also get module args (e.g. `redislock.quarantine`), be
//! Valkey 8.1 (`$REDISLOCK_VALKEY`), and run under libfaketime.
//! Free ports are found by binding port 0 and letting go, so two tests can
//! pick the same one: a server counts as started only when `INFO server`
//! names the PID we spawned; otherwise it is killed and another port tried.
//! A server may speak TLS only (`Opts::tls`, certificates of `tls::Certs`);
//! the harness's own connections to it then speak TLS too.
//! Faults are injected only into these processes, by the PID we spawned:
//! SIGKILL, SIGSTOP/SIGCONT, restart on the same port. `Drop` resumes a
//! frozen server and kills and reaps every process, also when the test
//! panics.
#![allow(dead_code)]

pub mod cli;
pub mod fence;
pub mod forwarder;
pub mod history;
pub mod tls;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Value;
use redlock::{Redlock, Settings};

/// One test at a time, for the tests whose figures mean something only
/// when no other test of their program shares the two cores: each starts
/// five servers and checks timing or counts grants. A test holds the guard
/// from its start to its end, across its awaits (each test has its own
/// runtime on its own thread). Every test of `faults/` takes it, so each
/// runs alone in its process as when its file was a program of its own;
/// in `quorum/`, the contention runs of `semaphore` and `shared_locks`.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a spawned server gets to answer PING.
pub const READY_DEADLINE: Duration = Duration::from_secs(10);
/// Upper bound on every direct (test-side) command, so a wedged server
/// fails the test instead of hanging it.
pub const DIRECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `$REDISLOCK_MODULE`, else `<workspace>/target/release/libredislock.so`.
pub fn module_path() -> PathBuf {
    let p = match std::env::var_os("REDISLOCK_MODULE") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/libredislock.so")),
    };
    assert!(
        p.is_file(),
        "redislock module not found at {} (build it with `cargo build --release -p redislock` \
         in the workspace, or set REDISLOCK_MODULE)",
        p.display()
    );
    p
}

pub fn now_unix_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock before 1970").as_micros() as i64
}

/// Valkey 8.1's server (libfaketime works with it, not with Debian's
/// jemalloc redis-server): `$REDISLOCK_VALKEY` (set by `make test`), else
/// `<workspace>/.servers/valkey-8.1/redis-server`; `None` when neither exists.
pub fn valkey_binary() -> Option<PathBuf> {
    let p = match std::env::var_os("REDISLOCK_VALKEY") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.servers/valkey-8.1/redis-server")),
    };
    p.is_file().then_some(p)
}

/// libfaketime's preload library (Debian's `faketime` package), if installed.
pub fn libfaketime() -> Option<PathBuf> {
    ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// How to start one server.
#[derive(Clone, Debug, Default)]
pub struct Opts {
    /// Without the redislock module.
    pub plain: bool,
    /// After the module path on the `--loadmodule` line, e.g.
    /// `["quarantine", "2000"]` (the `redislock.quarantine` config).
    pub module_args: Vec<String>,
    /// The server executable; `None` for `redis-server` from PATH.
    pub binary: Option<PathBuf>,
    /// Run under libfaketime with this `FAKETIME` spec (e.g. `"+2s"`, or
    /// `"+0 x2"` for a clock running twice as fast). Needs a server that
    /// tolerates it (Valkey, see `valkey_binary`).
    pub faketime: Option<String>,
    /// Run under libfaketime with only the wall clock faked, its offset
    /// read from this file at every clock read (`+60`, `-60`): a test
    /// steps a running server's wall clock by writing the file.
    pub faketime_file: Option<PathBuf>,
    /// A Redis Cluster node (`cluster-enabled yes`); its port comes from
    /// 10000-12999 so that the bus port (+10000) is valid and free.
    pub cluster_node: bool,
    /// `--requirepass`: clients must authenticate. `Server::url` then
    /// carries the password (`bare_url` does not).
    pub requirepass: Option<String>,
    /// Also listen on a Unix socket in the server's directory
    /// (`Server::socket_url`).
    pub unix_socket: bool,
    /// `--replicaof 127.0.0.1 <port>`: a replica of that server.
    pub replica_of: Option<u16>,
    /// A Sentinel (no module) monitoring the master on this port as
    /// `mymaster`, quorum 2, down after 1 s.
    pub sentinel_of: Option<u16>,
    /// TLS only: `--port 0 --tls-port <port>` with these certificates;
    /// `Server::url` is then `rediss://`.
    pub tls: Option<TlsServer>,
}

/// A server's TLS (`redis-server --tls-*`), and the client certificate the
/// harness's own connections show it.
#[derive(Clone, Debug)]
pub struct TlsServer {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `--tls-ca-cert-file`: the CA its clients' certificates must chain to.
    pub ca: PathBuf,
    /// `--tls-auth-clients yes`: clients must show a certificate by `ca`.
    pub auth_clients: bool,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Opts {
    pub fn quarantine(ms: u64) -> Opts {
        Opts { module_args: vec!["quarantine".into(), ms.to_string()], ..Opts::default() }
    }

    /// A server with the module that asks for `password`.
    pub fn requirepass(password: &str) -> Opts {
        Opts { requirepass: Some(password.to_string()), ..Opts::default() }
    }

    /// A replica, with the module, of the server on `port`.
    pub fn replica_of(port: u16, module_args: &[&str]) -> Opts {
        Opts { replica_of: Some(port), module_args: module_args.iter().map(|a| a.to_string()).collect(), ..Opts::default() }
    }

    /// A Sentinel monitoring the master on `port` as `mymaster`.
    pub fn sentinel_of(port: u16) -> Opts {
        Opts { plain: true, sentinel_of: Some(port), ..Opts::default() }
    }

    /// Valkey 8.1, panicking with the fix when it is not installed.
    pub fn valkey() -> Opts {
        let binary = valkey_binary()
            .expect("Valkey 8.1 not found: run `scripts/install-servers.sh valkey-8.1` (make test does) or set REDISLOCK_VALKEY");
        Opts { binary: Some(binary), ..Opts::default() }
    }

    /// Valkey whose wall clock steps when `file` is rewritten; it must
    /// hold an offset (`+0`) before the server starts.
    pub fn valkey_stepped(file: &std::path::Path) -> Opts {
        assert!(libfaketime().is_some(), "libfaketime not found: install Debian's faketime (scripts/install-deps.sh)");
        Opts { faketime_file: Some(file.to_path_buf()), ..Opts::valkey() }
    }

    /// Valkey under libfaketime with `spec`.
    pub fn valkey_faketime(spec: &str) -> Opts {
        assert!(libfaketime().is_some(), "libfaketime not found: install Debian's faketime (scripts/install-deps.sh)");
        Opts { faketime: Some(spec.to_string()), ..Opts::valkey() }
    }
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// A port below the ephemeral range whose cluster bus port is free too.
fn free_cluster_port() -> u16 {
    let mut state = now_unix_us() as u64 ^ ((std::process::id() as u64) << 32) | 1;
    loop {
        // xorshift64: candidates spread over the range without a dependency.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let port = 10_000 + (state % 3000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn pick_port(opts: &Opts) -> u16 {
    if opts.cluster_node {
        free_cluster_port()
    } else {
        free_port()
    }
}

pub struct Server {
    pub port: u16,
    pub pid: u32,
    /// With the redislock module loaded.
    pub module: bool,
    pub opts: Opts,
    child: Option<Child>,
    frozen: bool,
    dir: PathBuf,
    log: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Server {
    /// A server with the module, running and answering PING.
    pub fn start() -> Server {
        Self::start_kind(true)
    }

    /// A plain redis-server without the module.
    pub fn start_plain() -> Server {
        Self::start_kind(false)
    }

    fn start_kind(module: bool) -> Server {
        Self::start_opts(Opts { plain: !module, ..Opts::default() })
    }

    /// A server as `opts` say, running and answering PING.
    pub fn start_opts(opts: Opts) -> Server {
        let mut s = Self::spawn_opts(opts);
        s.wait_ready_or_retry();
        s
    }

    /// Spawns without waiting for readiness (see `wait_ready_or_retry`).
    fn spawn_opts(opts: Opts) -> Server {
        let tmp = tempfile::Builder::new().prefix("redlock-client-test-").tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let log = dir.join("redis.log");
        let module = !opts.plain;
        let mut s = Server { port: pick_port(&opts), pid: 0, module, opts, child: None, frozen: false, dir, log, _tmp: tmp };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let binary = self.opts.binary.clone().unwrap_or_else(|| PathBuf::from("redis-server"));
        let mut cmd = Command::new(&binary);
        if let Some(master) = self.opts.sentinel_of {
            // A sentinel rewrites its configuration file: one of its own.
            let conf = self.dir.join("sentinel.conf");
            let text = format!(
                "sentinel monitor mymaster 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 5000\n\
                 sentinel parallel-syncs mymaster 1\n"
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            cmd.arg(&conf).arg("--sentinel");
        }
        match &self.opts.tls {
            None => {
                cmd.arg("--port").arg(self.port.to_string());
            }
            Some(tls) => {
                cmd.args(["--port", "0", "--tls-port"])
                    .arg(self.port.to_string())
                    .arg("--tls-cert-file")
                    .arg(&tls.cert)
                    .arg("--tls-key-file")
                    .arg(&tls.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&tls.ca)
                    .args(["--tls-auth-clients", if tls.auth_clients { "yes" } else { "no" }]);
                if self.opts.cluster_node {
                    cmd.args(["--tls-cluster", "yes"]);
                }
            }
        }
        cmd.arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&self.log)
            .arg("--daemonize")
            .arg("no")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no");
        if self.module {
            cmd.arg("--loadmodule").arg(module_path()).args(&self.opts.module_args);
        }
        if let Some(password) = &self.opts.requirepass {
            cmd.arg("--requirepass").arg(password);
        }
        if self.opts.unix_socket {
            cmd.arg("--unixsocket").arg(self.dir.join("redis.sock")).arg("--unixsocketperm").arg("700");
        }
        if let Some(master) = self.opts.replica_of {
            cmd.arg("--replicaof").arg("127.0.0.1").arg(master.to_string());
        }
        if self.opts.cluster_node {
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"]);
        }
        if let Some(spec) = &self.opts.faketime {
            let lib = libfaketime().expect("libfaketime not found: install Debian's faketime");
            cmd.env("LD_PRELOAD", lib).env("FAKETIME", spec).env("FAKETIME_DONT_RESET", "1");
        }
        if let Some(file) = &self.opts.faketime_file {
            let lib = libfaketime().expect("libfaketime not found: install Debian's faketime");
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME_TIMESTAMP_FILE", file)
                .env("FAKETIME_NO_CACHE", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let child = cmd
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {} failed: {e} (is it on PATH?)", binary.display()));
        self.pid = child.id();
        self.child = Some(child);
        self.frozen = false;
    }

    /// Waits for PING; when the port was taken meanwhile, moves to a new one.
    fn wait_ready_or_retry(&mut self) {
        for _ in 0..10 {
            match self.wait_ready() {
                Ok(()) => return,
                Err(log) if port_taken(&log) => {
                    self.port = pick_port(&self.opts);
                    self.spawn();
                }
                Err(log) => panic!("redis-server on port {} did not start:\n{log}", self.port),
            }
        }
        panic!("redis-server: no free port after 10 attempts");
    }

    /// Ok when PING answers; Err(log) when the process died or the deadline passed.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_DEADLINE;
        let client = self.client();
        loop {
            if let Some(status) = self.child.as_mut().expect("spawned").try_wait().expect("try_wait") {
                self.child = None;
                return Err(format!("exited with {status}\n{}", self.log_tail()));
            }
            if let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(500)) {
                let _ = con.set_read_timeout(Some(Duration::from_secs(2)));
                // Only the process we spawned counts: another test's
                // server may have won the port.
                match redis::cmd("INFO").arg("server").query::<String>(&mut con) {
                    Ok(info) if info_pid(&info) == Some(self.pid) => {
                        if let Ok(pong) = redis::cmd("PING").query::<String>(&mut con) {
                            if pong == "PONG" {
                                return Ok(());
                            }
                        }
                    }
                    Ok(info) if info_pid(&info).is_some() => {
                        self.kill_child();
                        return Err(format!("{NOT_OURS} {} (not pid {})", self.port, self.pid));
                    }
                    _ => {}
                }
            }
            if Instant::now() > deadline {
                self.kill_child();
                return Err(format!("not ready within {READY_DEADLINE:?}\n{}", self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(12)..].join("\n")
    }

    /// `redis://127.0.0.1:<port>`, with the password if the server asks
    /// for one (`redis://:<password>@127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        match &self.opts.requirepass {
            Some(password) => self.bare_url().replacen("://", &format!("://:{password}@"), 1),
            None => self.bare_url(),
        }
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` for a TLS server), never
    /// with a password.
    pub fn bare_url(&self) -> String {
        let scheme = if self.opts.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A client for the harness's own connections. To a TLS server: with
    /// the harness's client certificate and no certificate checks (the
    /// server's certificate may be one made to fail them).
    pub fn client(&self) -> redis::Client {
        let Some(tls) = &self.opts.tls else { return redis::Client::open(self.url()).expect("client") };
        let read = |p: &PathBuf| std::fs::read(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
        let certificates = redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig { client_cert: read(&tls.client_cert), client_key: read(&tls.client_key) }),
            root_cert: None,
        };
        redis::Client::build_with_tls(format!("{}/#insecure", self.url()), certificates).expect("TLS client")
    }

    /// `unix://<dir>/redis.sock` (a server started with `unix_socket`).
    pub fn socket_url(&self) -> String {
        assert!(self.opts.unix_socket, "server on port {} has no Unix socket", self.port);
        format!("unix://{}", self.dir.join("redis.sock").display())
    }

    /// `127.0.0.1:<port>`, as the client names servers.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn signal(&self, sig: libc::c_int) {
        assert!(self.child.is_some(), "signal to a server that is not running (port {})", self.port);
        // SAFETY: kill(2) on the PID of a child we spawned and have not reaped.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed: {}", self.pid, std::io::Error::last_os_error());
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing.
    pub fn freeze(&mut self) {
        self.signal(libc::SIGSTOP);
        self.frozen = true;
    }

    /// SIGCONT.
    pub fn thaw(&mut self) {
        if self.frozen {
            self.signal(libc::SIGCONT);
            self.frozen = false;
        }
    }

    /// SIGKILL and reap: all data is gone (no persistence).
    pub fn kill9(&mut self) {
        assert!(self.child.is_some(), "kill9: server on port {} is not running", self.port);
        self.kill_child();
    }

    /// Starts a killed server again, empty, on the same port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart: server on port {} still running", self.port);
        for _ in 0..50 {
            self.spawn();
            match self.wait_ready() {
                Ok(()) => return,
                Err(log) if port_taken(&log) => std::thread::sleep(Duration::from_millis(100)),
                Err(log) => panic!("redis-server did not restart on port {}:\n{log}", self.port),
            }
        }
        panic!("redis-server could not get its port {} back", self.port);
    }

    fn kill_child(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.frozen {
                // SAFETY: as in `signal`; the child is not reaped yet.
                unsafe {
                    libc::kill(self.pid as libc::pid_t, libc::SIGCONT);
                }
                self.frozen = false;
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A direct connection for test-side commands.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        let client = self.client();
        match tokio::time::timeout(DIRECT_TIMEOUT, client.get_multiplexed_async_connection()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => panic!("connect to {} failed: {e}", self.addr()),
            Err(_) => panic!("connect to {} timed out", self.addr()),
        }
    }

    /// Runs one command directly; a server error becomes `Err(text)`.
    pub async fn cmd(&self, cmd: &redis::Cmd) -> Result<Value, String> {
        let mut con = self.conn().await;
        match tokio::time::timeout(DIRECT_TIMEOUT, cmd.query_async::<Value>(&mut con)).await {
            Ok(Ok(Value::ServerError(e))) => Err(format!("{e:?}")),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) if e.code().is_some() => Err(e.to_string()),
            Ok(Err(e)) => panic!("{}: no reply: {e}", self.addr()),
            Err(_) => panic!("{}: no reply within {DIRECT_TIMEOUT:?}", self.addr()),
        }
    }

    pub async fn ok(&self, cmd: &redis::Cmd) -> Value {
        self.cmd(cmd).await.unwrap_or_else(|e| panic!("{}: error reply: {e}", self.addr()))
    }

    /// LOCK.INFO key, parsed (RESP2 flat array).
    pub async fn info(&self, key: &str) -> Option<Info> {
        parse_info(self.ok(redis::cmd("LOCK.INFO").arg(key)).await)
    }

    /// GET key (script-mode locks on plain servers).
    pub async fn get(&self, key: &str) -> Option<String> {
        match self.ok(redis::cmd("GET").arg(key)).await {
            Value::Nil => None,
            Value::BulkString(b) => Some(String::from_utf8(b).expect("utf8")),
            other => panic!("GET replied {other:?}"),
        }
    }

    pub async fn pttl(&self, key: &str) -> i64 {
        match self.ok(redis::cmd("PTTL").arg(key)).await {
            Value::Int(n) => n,
            other => panic!("PTTL replied {other:?}"),
        }
    }
}

/// `wait_ready` found another process on the port.
const NOT_OURS: &str = "another process answers on port";

fn port_taken(log: &str) -> bool {
    log.contains("Address already in use") || log.contains(NOT_OURS)
}

fn info_pid(info: &str) -> Option<u32> {
    info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|p| p.trim().parse().ok())
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- redis-server port {} pid {} log tail ---\n{}", self.port, self.pid, self.log_tail());
        }
        self.kill_child();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub owner: String,
    /// None for a plain-string lock.
    pub token: Option<i64>,
    pub pttl: i64,
    pub waiters: i64,
    /// The holder's hold is bound to its connection (`SESSION`).
    pub session: bool,
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

pub fn parse_info(v: Value) -> Option<Info> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return None,
        Value::Array(items) => {
            let mut it = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        Value::Map(pairs) => pairs,
        other => panic!("LOCK.INFO replied {other:?}"),
    };
    let (mut owner, mut token, mut pttl, mut waiters, mut session) = (None, None, None, 0, false);
    for (k, v) in pairs {
        match text(&k).as_str() {
            "owner" => owner = Some(text(&v)),
            "token" => {
                token = match v {
                    Value::Int(t) => Some(t),
                    Value::Nil => None,
                    other => panic!("LOCK.INFO token {other:?}"),
                }
            }
            "pttl" => {
                pttl = match v {
                    Value::Int(t) => Some(t),
                    other => panic!("LOCK.INFO pttl {other:?}"),
                }
            }
            "waiters" => {
                if let Value::Int(n) = v {
                    waiters = n;
                }
            }
            // [owner, token, pttl, held-ms, session] per holder.
            "holders" => {
                if let Value::Array(rows) = v {
                    if let Some(Value::Array(row)) = rows.first() {
                        session = row.get(4) == Some(&Value::Int(1));
                    }
                }
            }
            _ => {}
        }
    }
    Some(Info { owner: owner.expect("owner field"), token, pttl: pttl.expect("pttl field"), waiters, session })
}

/// N servers, started in parallel.
pub struct Cluster {
    pub servers: Vec<Server>,
}

impl Cluster {
    /// `n` module servers.
    pub fn start(n: usize) -> Cluster {
        Self::start_kinds(&vec![true; n])
    }

    /// One server per entry: `true` with the module, `false` plain.
    pub fn start_kinds(kinds: &[bool]) -> Cluster {
        Self::start_opts(kinds.iter().map(|&m| Opts { plain: !m, ..Opts::default() }).collect())
    }

    /// One server per entry of `opts`.
    pub fn start_opts(opts: Vec<Opts>) -> Cluster {
        let mut servers: Vec<Server> = opts.into_iter().map(Server::spawn_opts).collect();
        for s in &mut servers {
            s.wait_ready_or_retry();
        }
        Cluster { servers }
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Server::url).collect()
    }

    pub fn redlock(&self, settings: Settings) -> Redlock {
        Redlock::new(&self.urls(), settings).expect("Redlock::new")
    }

    /// LOCK.INFO on every server (all must be running).
    pub async fn infos(&self, key: &str) -> Vec<Option<Info>> {
        let mut out = Vec::new();
        for s in &self.servers {
            out.push(s.info(key).await);
        }
        out
    }
}

/// Settings for tests where time is not the subject: generous request
/// timeouts (a loaded machine must not turn a healthy server into a
/// "timeout"), short retry delays.
pub fn relaxed() -> Settings {
    Settings {
        request_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(1000),
        retry_count: 2,
        retry_delay: (Duration::from_millis(5), Duration::from_millis(15)),
        ..Settings::default()
    }
}

/// Polls `f` every 5 ms until it is true; panics naming `what` after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
