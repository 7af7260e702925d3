//! The one launcher of real server processes for the Rust tests and
//! benches.
//!
//! A [`Process`] is a `redis-server` (or Valkey, or a Sentinel) bound to
//! 127.0.0.1 on a free port, with a fresh temporary directory holding its
//! data and log, and the redislock module loaded unless the [`Spec`] says
//! otherwise. It counts as started only when `INFO server` names the PID
//! we spawned and PING answers: free ports are found by binding and
//! letting go, so two programs can pick the same one, and the loser moves
//! to another port. Signals go only to that PID. `Drop` resumes a frozen
//! server, kills it (SIGKILL) and reaps it, also when the test panics,
//! and then prints the tail of its log.

use std::ffi::OsString;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::ops::Range;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use redis::Value;

/// How long a spawned server gets to answer PING.
pub const READY_DEADLINE: Duration = Duration::from_secs(10);

/// Where a server's port comes from.
#[derive(Clone, Debug, Default)]
pub enum Ports {
    /// One the kernel hands out for 127.0.0.1:0.
    #[default]
    Free,
    /// 10000-12999, with the Cluster bus port (+10000) free too.
    ClusterNode,
    /// One of `range` that binds now and is none of `avoid` (benches: clear
    /// of the ephemeral ports their proxies and clients take).
    Within { range: Range<u16>, avoid: Vec<u16> },
    /// Exactly this one, one attempt (the caller picks, e.g. a Cluster
    /// node's).
    Fixed(u16),
}

/// A TLS-only server (`--port 0 --tls-port <port>`) and the client
/// certificate the launcher's own connections show it.
#[derive(Clone, Debug)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `--tls-ca-cert-file`: the CA its clients' certificates must chain to.
    pub ca: PathBuf,
    /// `--tls-auth-clients yes`: clients must show a certificate by `ca`.
    pub auth_clients: bool,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// How to start one server. The command line is, in order: the config
/// file (if any) and `leading_args`; the port (or TLS); `--bind
/// 127.0.0.1 --dir <dir> --logfile <dir>/redis.log --daemonize no`;
/// `--loadmodule <module> <module_args>`; `--requirepass`; each of
/// `defaults` not named in `args`; `args`; `dir_args`.
#[derive(Clone, Debug)]
pub struct Spec {
    pub binary: PathBuf,
    /// The module to load; `None` for a plain server.
    pub module: Option<PathBuf>,
    /// After the module path on the `--loadmodule` line.
    pub module_args: Vec<String>,
    /// A configuration file written into the server's directory before
    /// each start (name, text) and passed first (a Sentinel rewrites its own).
    pub config_file: Option<(String, String)>,
    /// Right after the configuration file (e.g. `--sentinel`).
    pub leading_args: Vec<String>,
    /// Server arguments with a value, each passed unless `args` names it.
    pub defaults: Vec<(String, String)>,
    /// Last on the command line.
    pub args: Vec<String>,
    /// After `args`: arguments whose value names a file in the server's
    /// directory, passed as its path (e.g. `("--unixsocket", "redis.sock")`).
    pub dir_args: Vec<(String, String)>,
    /// Environment of the server process (e.g. libfaketime's).
    pub envs: Vec<(String, OsString)>,
    /// `--requirepass`; the launcher's own connections authenticate.
    pub password: Option<String>,
    pub tls: Option<Tls>,
    pub ports: Ports,
    /// Prefix of the temporary directory's name.
    pub dir_prefix: String,
    /// On Linux, the kernel kills the server when the thread that started
    /// it dies without `Drop` having run (PR_SET_PDEATHSIG; benches).
    pub die_with_parent: bool,
}

impl Spec {
    /// `redis-server` from PATH with `module` loaded, on a free port.
    pub fn new(module: Option<PathBuf>) -> Spec {
        Spec {
            binary: PathBuf::from("redis-server"),
            module,
            module_args: Vec::new(),
            config_file: None,
            leading_args: Vec::new(),
            defaults: Vec::new(),
            args: Vec::new(),
            dir_args: Vec::new(),
            envs: Vec::new(),
            password: None,
            tls: None,
            ports: Ports::Free,
            dir_prefix: "redislock-test-".into(),
            die_with_parent: false,
        }
    }
}

/// Why a server did not come up.
#[derive(Debug)]
pub struct StartError {
    /// The process exited (with this status) before answering PING.
    pub exited: Option<ExitStatus>,
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

    fn new(message: String) -> StartError {
        StartError { exited: None, message, log_tail: String::new() }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (exit status: {:?})\n--- redis log tail ---\n{}", self.message, self.exited, self.log_tail)
    }
}

/// One server process (see the module's header).
pub struct Process {
    pub port: u16,
    /// The PID of the last process spawned (0 before the first).
    pub pid: u32,
    /// The server's directory (`--dir`), removed on drop.
    pub dir: PathBuf,
    pub spec: Spec,
    child: Option<Child>,
    frozen: bool,
    log: PathBuf,
    /// The log's length when the last process was spawned: a failed
    /// start reports only its own lines (an earlier run's "Address
    /// already in use" must not read as this one's port race).
    log_start: u64,
    // Last, so the directory outlives the process (Drop::drop runs first anyway).
    _tmp: tempfile::TempDir,
}

impl Process {
    /// Spawns a server as `spec` says and waits until it is ready; on a
    /// port race, again on another port (10 attempts). Returns promptly
    /// when the process exits during startup.
    pub fn start(spec: Spec) -> Result<Process, StartError> {
        let mut p = Process::spawned(spec)?;
        p.finish_start()?;
        Ok(p)
    }

    /// Spawns without waiting (several servers then start side by side);
    /// `finish_start` waits.
    pub fn spawned(spec: Spec) -> Result<Process, StartError> {
        let tmp = tempfile::Builder::new()
            .prefix(&spec.dir_prefix)
            .tempdir()
            .map_err(|e| StartError::new(format!("cannot create a temp dir for redis-server: {e}")))?;
        let dir = tmp.path().to_path_buf();
        let log = dir.join("redis.log");
        let mut p = Process { port: 0, pid: 0, dir, spec, child: None, frozen: false, log, log_start: 0, _tmp: tmp };
        p.port = p.pick_port()?;
        p.spawn()?;
        Ok(p)
    }

    /// Waits for a `spawned` server; when another process won its port,
    /// starts it again on another one.
    pub fn finish_start(&mut self) -> Result<(), StartError> {
        let mut attempts = 1;
        loop {
            match self.wait_ready() {
                Ok(()) => return Ok(()),
                Err(e) if e.port_taken() && attempts < 10 && !matches!(self.spec.ports, Ports::Fixed(_)) => {
                    attempts += 1;
                    self.port = self.pick_port()?;
                    self.spawn()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn pick_port(&self) -> Result<u16, StartError> {
        match &self.spec.ports {
            Ports::Free => {
                let l =
                    TcpListener::bind("127.0.0.1:0").map_err(|e| StartError::new(format!("bind 127.0.0.1:0 to find a free port: {e}")))?;
                l.local_addr().map(|a| a.port()).map_err(|e| StartError::new(format!("local_addr of the probe listener: {e}")))
            }
            Ports::ClusterNode => {
                free_port_in(10_000..13_000, &[], true).ok_or_else(|| StartError::new("no free Cluster node port in 10000..13000".into()))
            }
            Ports::Within { range, avoid } => free_port_in(range.clone(), avoid, false)
                .ok_or_else(|| StartError::new(format!("no free port in 127.0.0.1:{}..{}", range.start, range.end))),
            Ports::Fixed(port) => Ok(*port),
        }
    }

    /// The command line (see `Spec`).
    pub fn args(&self) -> Vec<OsString> {
        let s = &self.spec;
        let mut v: Vec<OsString> = Vec::new();
        if let Some((name, _)) = &s.config_file {
            v.push(self.dir.join(name).into());
        }
        v.extend(s.leading_args.iter().map(OsString::from));
        let port = self.port.to_string();
        match &s.tls {
            None => v.extend(["--port".into(), port.into()]),
            Some(tls) => {
                let auth = if tls.auth_clients { "yes" } else { "no" };
                v.extend(["--port".into(), "0".into(), "--tls-port".into(), port.into()]);
                v.extend(["--tls-cert-file".into(), tls.cert.clone().into(), "--tls-key-file".into(), tls.key.clone().into()]);
                v.extend(["--tls-ca-cert-file".into(), tls.ca.clone().into(), "--tls-auth-clients".into(), auth.into()]);
                if matches!(s.ports, Ports::ClusterNode) {
                    v.extend(["--tls-cluster".into(), "yes".into()]);
                }
            }
        }
        v.extend(["--bind".into(), "127.0.0.1".into(), "--dir".into(), self.dir.clone().into()]);
        v.extend(["--logfile".into(), self.log.clone().into(), "--daemonize".into(), "no".into()]);
        if let Some(module) = &s.module {
            v.extend(["--loadmodule".into(), module.clone().into()]);
            v.extend(s.module_args.iter().map(OsString::from));
        }
        if let Some(password) = &s.password {
            v.extend(["--requirepass".into(), password.into()]);
        }
        for (k, val) in &s.defaults {
            if !s.args.iter().any(|a| a == k) {
                v.extend([k.into(), val.into()]);
            }
        }
        v.extend(s.args.iter().map(OsString::from));
        for (k, name) in &s.dir_args {
            v.extend([k.into(), self.dir.join(name).into()]);
        }
        v
    }

    fn spawn(&mut self) -> Result<(), StartError> {
        if let Some((name, text)) = &self.spec.config_file {
            let path = self.dir.join(name);
            fs::write(&path, text).map_err(|e| StartError::new(format!("writing {}: {e}", path.display())))?;
        }
        self.log_start = fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
        let mut cmd = Command::new(&self.spec.binary);
        cmd.args(self.args())
            .envs(self.spec.envs.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        #[cfg(target_os = "linux")]
        if self.spec.die_with_parent {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; it only asks the kernel to
            // SIGKILL the child if the thread that spawned it dies without
            // the Drop guard having run (abort, SIGKILL, Ctrl-C).
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().map_err(|e| {
            StartError::new(match e.kind() {
                std::io::ErrorKind::NotFound => format!("{} not found (Debian: apt-get install redis-server)", self.spec.binary.display()),
                _ => format!("spawning {} failed: {e}", self.spec.binary.display()),
            })
        })?;
        self.pid = child.id();
        self.child = Some(child);
        self.frozen = false;
        Ok(())
    }

    /// Ready once `INFO server` names our PID and PING answers PONG (a
    /// server loading its data answers LOADING until then).
    fn wait_ready(&mut self) -> Result<(), StartError> {
        let deadline = Instant::now() + READY_DEADLINE;
        let client = self.client().map_err(StartError::new)?;
        let mut last: String;
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err(StartError::new(format!("redis-server (port {}) is not running", self.port)));
            };
            // The process died: report at once, do not wait for the deadline.
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(StartError {
                    exited: Some(status),
                    message: format!("redis-server (pid {}, port {}) exited during startup; args: {:?}", self.pid, self.port, self.args()),
                    log_tail: self.log_since(self.log_start),
                });
            }
            match client.get_connection_with_timeout(Duration::from_millis(500)) {
                Ok(mut con) => {
                    let _ = con.set_read_timeout(Some(Duration::from_secs(2)));
                    match redis::cmd("INFO").arg("server").query::<String>(&mut con) {
                        Ok(s) if info_pid(&s) == Some(self.pid) => match redis::cmd("PING").query::<String>(&mut con) {
                            Ok(p) if p == "PONG" => return Ok(()),
                            Ok(p) => last = format!("PING answered {p:?}"),
                            Err(e) => last = format!("PING failed: {e}"),
                        },
                        Ok(s) if info_pid(&s).is_some() => {
                            let log_tail = self.log_since(self.log_start);
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
                let log_tail = self.log_since(self.log_start);
                self.kill_child();
                return Err(StartError {
                    exited: None,
                    message: format!(
                        "redis-server (pid {}, port {}) not ready within {READY_DEADLINE:?}; last: {last}",
                        self.pid, self.port
                    ),
                    log_tail,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` for a TLS server), with the
    /// password if the server asks for one.
    pub fn url(&self) -> String {
        let scheme = if self.spec.tls.is_some() { "rediss" } else { "redis" };
        match &self.spec.password {
            Some(password) => format!("{scheme}://:{password}@127.0.0.1:{}", self.port),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    /// A client for the launcher's and the tests' own connections. To a
    /// TLS server: with the client certificate of `Tls` and no certificate
    /// checks (the server's certificate may be one made to fail them).
    pub fn client(&self) -> Result<redis::Client, String> {
        let Some(tls) = &self.spec.tls else {
            return redis::Client::open(self.url()).map_err(|e| format!("redis client for {}: {e}", self.url()));
        };
        tls_client(&self.url(), tls)
    }

    fn log_since(&self, from: u64) -> String {
        let mut buf = Vec::new();
        if let Ok(mut f) = fs::File::open(&self.log) {
            let _ = f.seek(SeekFrom::Start(from));
            let _ = f.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
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

    /// Is the process we spawned still running (not exited, not reaped)?
    pub fn is_alive(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            None => false,
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
        }
    }

    /// Is there a spawned, unreaped process (without polling it)?
    pub fn spawned_and_unreaped(&self) -> bool {
        self.child.is_some()
    }

    /// kill(2) of our PID; panics if it is not running or kill fails.
    pub fn signal(&self, sig: libc::c_int) {
        assert!(self.child.is_some(), "signal {sig} to a server that is not running (port {})", self.port);
        // SAFETY: kill(2) on the PID of a child we spawned and have not reaped.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed: {}", self.pid, std::io::Error::last_os_error());
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing.
    pub fn freeze(&mut self) {
        self.signal(libc::SIGSTOP);
        self.frozen = true;
    }

    /// SIGCONT a frozen server.
    pub fn thaw(&mut self) {
        if self.frozen {
            self.signal(libc::SIGCONT);
            self.frozen = false;
        }
    }

    /// SIGKILL and reap; panics if the server is not running.
    pub fn kill9(&mut self) {
        assert!(self.child.is_some(), "kill9: server on port {} is not running", self.port);
        self.kill_child();
    }

    /// SIGKILL (after SIGCONT if frozen) and reap, if running.
    pub fn kill_child(&mut self) {
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

    /// Waits for the server to exit on its own (e.g. after SHUTDOWN) and
    /// returns its status; `None` if it still runs after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.child.as_mut()?;
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Is persistence configured (AOF on, or non-empty save points)?
    fn persistence_configured(&self) -> bool {
        let a: Vec<String> = self.args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        // The last occurrence wins, as in redis-server.
        let mut aof = false;
        let mut save = false;
        for w in a.windows(2) {
            match w[0].as_str() {
                "--appendonly" => aof = w[1] == "yes",
                "--save" => save = !w[1].trim().is_empty(),
                _ => {}
            }
        }
        aof || save
    }

    /// Stops gracefully: `SHUTDOWN SAVE` when persistence is configured,
    /// `SHUTDOWN NOSAVE` otherwise; SIGTERM if SHUTDOWN is refused. Waits
    /// for the process to exit (10 s deadline, then SIGKILL and panic).
    pub fn stop(&mut self) {
        if !self.is_alive() {
            return;
        }
        let mode = if self.persistence_configured() { "SAVE" } else { "NOSAVE" };
        let mut sent = false;
        if let Ok(mut con) = self.client().and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)).map_err(|e| e.to_string())) {
            let _ = con.set_read_timeout(Some(Duration::from_secs(10)));
            match redis::cmd("SHUTDOWN").arg(mode).query::<Value>(&mut con) {
                // A successful SHUTDOWN closes the connection without a reply.
                Err(e) if e.is_io_error() || e.is_connection_dropped() => sent = true,
                Err(e) => eprintln!("SHUTDOWN {mode} refused on port {}: {e}", self.port),
                Ok(v) => eprintln!("SHUTDOWN {mode} replied {v:?} on port {}", self.port),
            }
        }
        if !sent {
            // SAFETY: kill(2) on the PID of the child we spawned and still own.
            unsafe {
                libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
            }
        }
        if self.wait_exit(Duration::from_secs(10)).is_none() && self.child.is_some() {
            self.kill_child();
            panic!("redis-server pid {} did not exit within 10 s after SHUTDOWN/SIGTERM\n{}", self.pid, self.log_tail(30));
        }
    }

    /// Starts a stopped (or killed) server again on the same port, dir and
    /// spec (which may have been changed meanwhile); while something else
    /// briefly holds the port, retries every 100 ms (50 attempts).
    pub fn start_again(&mut self) -> Result<(), StartError> {
        assert!(self.child.is_none(), "start_again: server on port {} still running", self.port);
        let mut last = None;
        for _ in 0..50 {
            self.spawn()?;
            match self.wait_ready() {
                Ok(()) => return Ok(()),
                Err(e) if e.port_taken() => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| StartError::new(format!("could not get port {} back", self.port))))
    }
}

impl Drop for Process {
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

fn info_pid(info: &str) -> Option<u32> {
    info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|p| p.trim().parse().ok())
}

/// A port of `range` that binds now (and, for a Cluster node, whose bus
/// port +10000 binds too), none of `avoid`; candidates spread by xorshift64.
fn free_port_in(range: Range<u16>, avoid: &[u16], bus: bool) -> Option<u16> {
    let width = u64::from(range.end.checked_sub(range.start)?.max(1));
    let mut state = crate::now_unix_us() as u64 ^ ((std::process::id() as u64) << 32) | 1;
    for _ in 0..1000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let port = range.start + (state % width) as u16;
        if avoid.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        if bus && port.checked_add(10_000).is_none_or(|b| TcpListener::bind(("127.0.0.1", b)).is_err()) {
            continue;
        }
        return Some(port);
    }
    None
}

#[cfg(feature = "tls")]
fn tls_client(url: &str, tls: &Tls) -> Result<redis::Client, String> {
    let read = |p: &std::path::Path| fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let certificates = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig { client_cert: read(&tls.client_cert)?, client_key: read(&tls.client_key)? }),
        root_cert: None,
    };
    redis::Client::build_with_tls(format!("{url}/#insecure"), certificates).map_err(|e| format!("TLS client for {url}: {e}"))
}

#[cfg(not(feature = "tls"))]
fn tls_client(url: &str, _tls: &Tls) -> Result<redis::Client, String> {
    Err(format!("{url}: testkit was built without its `tls` feature"))
}
