//! Harness for the redlock client's integration tests.
//!
//! Servers come from the workspace's one launcher (`testkit::Process`,
//! `testkit/`); this file adds the client tests' options (`Opts`), async
//! connections and `Cluster` of N servers. The history checker is
//! testkit's too (`common::history`).
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
#![allow(dead_code, unused_imports)]

pub mod cli;
pub mod fence;
pub mod forwarder;
pub mod tls;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// Upper bound on every direct (test-side) command, so a wedged server
/// fails the test instead of hanging it.
pub const DIRECT_TIMEOUT: Duration = Duration::from_secs(5);

pub use testkit::history;
pub use testkit::server::READY_DEADLINE;
pub use testkit::{libfaketime, module_path, now_unix_us, valkey_binary};

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
pub use testkit::Tls as TlsServer;

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

/// A free port of 127.0.0.1 (nothing listens on it once returned).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

impl Opts {
    /// testkit's launch spec for these options.
    fn spec(&self) -> testkit::Spec {
        let mut spec = testkit::Spec::new((!self.plain).then(module_path));
        spec.dir_prefix = "redlock-client-test-".into();
        spec.binary = self.binary.clone().unwrap_or_else(|| PathBuf::from("redis-server"));
        spec.module_args = self.module_args.clone();
        spec.password = self.requirepass.clone();
        spec.tls = self.tls.clone();
        spec.defaults = vec![("--save".into(), String::new()), ("--appendonly".into(), "no".into())];
        if let Some(master) = self.sentinel_of {
            // A sentinel rewrites its configuration file: one of its own.
            let text = format!(
                "sentinel monitor mymaster 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 5000\n\
                 sentinel parallel-syncs mymaster 1\n"
            );
            spec.config_file = Some(("sentinel.conf".into(), text));
            spec.leading_args = vec!["--sentinel".into()];
        }
        if self.unix_socket {
            spec.dir_args.push(("--unixsocket".into(), "redis.sock".into()));
            spec.args.extend(["--unixsocketperm".into(), "700".into()]);
        }
        if let Some(master) = self.replica_of {
            spec.args.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
        }
        if self.cluster_node {
            spec.ports = testkit::Ports::ClusterNode;
            spec.args.extend(
                ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"].map(String::from),
            );
        }
        if let Some(spec_text) = &self.faketime {
            let lib = libfaketime().expect("libfaketime not found: install Debian's faketime");
            spec.envs.extend([
                ("LD_PRELOAD".into(), lib.into_os_string()),
                ("FAKETIME".into(), spec_text.into()),
                ("FAKETIME_DONT_RESET".into(), "1".into()),
            ]);
        }
        if let Some(file) = &self.faketime_file {
            let lib = libfaketime().expect("libfaketime not found: install Debian's faketime");
            spec.envs.extend([
                ("LD_PRELOAD".into(), lib.into_os_string()),
                ("FAKETIME_TIMESTAMP_FILE".into(), file.clone().into_os_string()),
                ("FAKETIME_NO_CACHE".into(), "1".into()),
                ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
            ]);
        }
        spec
    }
}

/// A server of the client tests: testkit's launcher (`testkit::Process`,
/// whose `port`, `pid`, `freeze`, `thaw`, `kill9`... it derefs to) with
/// these tests' options and async connections.
pub struct Server {
    process: testkit::Process,
    /// With the redislock module loaded.
    pub module: bool,
    pub opts: Opts,
}

impl std::ops::Deref for Server {
    type Target = testkit::Process;
    fn deref(&self) -> &testkit::Process {
        &self.process
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut testkit::Process {
        &mut self.process
    }
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
        s.finish_start();
        s
    }

    /// Spawns without waiting for readiness (see `finish_start`).
    fn spawn_opts(opts: Opts) -> Server {
        let process = testkit::Process::spawned(opts.spec()).unwrap_or_else(|e| panic!("redis-server did not start: {e}"));
        Server { process, module: !opts.plain, opts }
    }

    /// Waits for PING; when the port was taken meanwhile, moves to a new one.
    fn finish_start(&mut self) {
        if self.process.spawned_and_unreaped() {
            let port = self.port;
            self.process.finish_start().unwrap_or_else(|e| panic!("redis-server on port {port} did not start: {e}"));
        }
    }

    /// `redis://127.0.0.1:<port>`, with the password if the server asks
    /// for one (`redis://:<password>@127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        self.process.url()
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
        self.process.client().unwrap_or_else(|e| panic!("{e}"))
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

    /// Starts a killed server again, empty, on the same port.
    pub fn restart(&mut self) {
        let port = self.port;
        assert!(!self.process.spawned_and_unreaped(), "restart: server on port {port} still running");
        self.process.start_again().unwrap_or_else(|e| panic!("redis-server did not restart on port {port}: {e}"));
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

    /// Counter `name` of `INFO redislock` (`wait_granted`: its handoffs).
    pub async fn counter(&self, name: &str) -> i64 {
        let text = match self.ok(redis::cmd("INFO").arg("redislock")).await {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            Value::VerbatimString { text, .. } => text,
            other => panic!("INFO replied {other:?}"),
        };
        let field = format!("redislock_{name}:");
        let n = text.lines().find_map(|l| l.strip_prefix(field.as_str())).and_then(|n| n.trim().parse().ok());
        n.unwrap_or_else(|| panic!("{}: no {name} in INFO redislock", self.addr()))
    }

    /// GET key (script-mode locks on plain servers).
    pub async fn get(&self, key: &str) -> Option<String> {
        match self.ok(redis::cmd("GET").arg(key)).await {
            Value::Nil => None,
            Value::BulkString(b) => Some(String::from_utf8(b).expect("utf8")),
            other => panic!("GET replied {other:?}"),
        }
    }

    /// `LRANGE key 0 -1` as text.
    pub async fn list(&self, key: &str) -> Vec<String> {
        match self.ok(redis::cmd("LRANGE").arg(key).arg(0).arg(-1)).await {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("a listed value: {other:?}"),
                })
                .collect(),
            other => panic!("LRANGE replied {other:?}"),
        }
    }

    pub async fn pttl(&self, key: &str) -> i64 {
        match self.ok(redis::cmd("PTTL").arg(key)).await {
            Value::Int(n) => n,
            other => panic!("PTTL replied {other:?}"),
        }
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
            s.finish_start();
        }
        Cluster { servers }
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Server::url).collect()
    }

    pub fn redlock(&self, settings: Settings) -> Redlock {
        Redlock::new(&self.urls(), settings).expect("Redlock::new")
    }

    /// `wait_granted` of every server: the handoffs each made so far.
    pub async fn handoffs(&self) -> Vec<i64> {
        let mut out = Vec::new();
        for s in &self.servers {
            out.push(s.counter("wait_granted").await);
        }
        out
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

/// The median of `times` (the upper one of an even count): what a timing
/// under load asserts, so that one sample held up by a busy machine does
/// not decide.
pub fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// Waits up to `timeout` until every server of `c` has `n` subscribers
/// or more on `resource`'s announcement channel (a watch, a guard's asks,
/// a `redlock run` listening); panics naming `what` after that.
pub async fn subscribed_everywhere(c: &Cluster, resource: &str, n: i64, timeout: Duration, what: &str) {
    let channel = redlock::transport::changes_channel(0, resource);
    eventually(timeout, what, || async {
        for s in &c.servers {
            match s.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel)).await {
                Ok(Value::Array(v)) if matches!(v.get(1), Some(Value::Int(k)) if *k >= n) => {}
                _ => return false,
            }
        }
        true
    })
    .await;
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
