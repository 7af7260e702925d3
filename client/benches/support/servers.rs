//! Module-equipped `redis-server`s for the benches (`quorum.rs`, `rtt.rs`):
//! free ports of 127.0.0.1 below 30000, no persistence, each in a temp
//! dir, killed by PID on drop (also on panic) and, on Linux, when the
//! bench dies (PR_SET_PDEATHSIG).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rand::Rng;

/// Ports are taken from this range (below 30000, clear of the ephemeral ones).
const PORTS: std::ops::Range<u16> = 20_000..30_000;

pub type Res<T> = Result<T, String>;

/// One redis-server with the module; killed by PID when dropped.
pub struct Server {
    child: Option<Child>,
    pub pid: u32,
    pub port: u16,
    log: PathBuf,
    // Last, so the directory outlives the process.
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts on a free port; on a port race, again on another port.
    pub fn start(module: &Path, taken: &[u16]) -> Res<Server> {
        let mut last = String::new();
        for _ in 0..10 {
            match Server::start_once(module, taken) {
                Ok(s) => return Ok(s),
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(format!("redis-server found no free port in 10 attempts: {last}"))
    }

    fn start_once(module: &Path, taken: &[u16]) -> Res<Server> {
        let dir = tempfile::Builder::new()
            .prefix("redlock-bench-")
            .tempdir()
            .map_err(|e| format!("cannot create a temp dir for redis-server: {e}"))?;
        let log = dir.path().join("redis.log");
        let port = free_port(taken)?;
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(&log)
            .arg("--loadmodule")
            .arg(module)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; it asks the kernel to
            // SIGKILL the server if the thread that started it (the main
            // thread) dies without the Drop guard having run.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "redis-server not found on PATH (Debian: apt-get install redis-server)".to_string(),
            _ => format!("cannot start redis-server: {e}"),
        })?;
        let mut s = Server { pid: child.id(), child: Some(child), port, log, _dir: dir };
        match s.wait_ready() {
            Ok(()) => Ok(s),
            Err(e) => {
                s.kill();
                Err(format!("{e}\n--- redis-server log (port {port}) ---\n{}", s.log_tail(15)))
            }
        }
    }

    /// Waits until the server we spawned answers PING (and INFO names our PID).
    fn wait_ready(&mut self) -> Res<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = redis::Client::open(self.url().as_str()).map_err(|e| e.to_string())?;
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    self.child = None;
                    let log = fs::read_to_string(&self.log).unwrap_or_default();
                    let why = if log.contains("Address already in use") { "Address already in use: " } else { "" };
                    return Err(format!("{why}redis-server (pid {}, port {}) exited during startup ({status})", self.pid, self.port));
                }
            }
            let last = match client.get_connection_with_timeout(Duration::from_millis(500)) {
                Ok(mut con) => {
                    let _ = con.set_read_timeout(Some(Duration::from_secs(2)));
                    match redis::cmd("PING").query::<String>(&mut con) {
                        Ok(_) => match redis::cmd("INFO").arg("server").query::<String>(&mut con) {
                            Ok(info) => match info.lines().find_map(|l| l.strip_prefix("process_id:")).map(str::trim) {
                                Some(pid) if pid == self.pid.to_string() => return Ok(()),
                                Some(pid) => {
                                    return Err(format!(
                                        "Address already in use: port {} answered by pid {pid}, not {}",
                                        self.port, self.pid
                                    ))
                                }
                                None => "INFO server has no process_id".to_string(),
                            },
                            Err(e) => format!("INFO failed: {e}"),
                        },
                        Err(e) => format!("PING failed: {e}"),
                    }
                }
                Err(e) => format!("connect failed: {e}"),
            };
            if Instant::now() > deadline {
                return Err(format!("redis-server (pid {}, port {}) not ready within 10 s; last: {last}", self.pid, self.port));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGTERM by PID, up to 2 s to exit, then SIGKILL; always reaped.
    fn kill(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        if let Ok(pid) = libc::pid_t::try_from(self.pid) {
            // SAFETY: kill(2) on the PID of our child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill(); // SIGKILL, same PID
        let _ = c.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port of `PORTS` that binds now and is not one of `taken`.
fn free_port(taken: &[u16]) -> Res<u16> {
    let mut rng = rand::rng();
    for _ in 0..200 {
        let port = rng.random_range(PORTS);
        if !taken.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(format!("no free port in 127.0.0.1:{}..{}", PORTS.start, PORTS.end))
}

pub fn module_path() -> Res<PathBuf> {
    let path = match std::env::var_os("REDISLOCK_MODULE") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target/release/libredislock.so"),
    };
    if !path.is_file() {
        return Err(format!("module {} not found: build it (cargo build --release -p redislock) or set REDISLOCK_MODULE", path.display()));
    }
    path.canonicalize().map_err(|e| format!("module {}: {e}", path.display()))
}

/// `redis-server --version`'s `v=...`; also the check that it is on PATH.
pub fn redis_server_version() -> Res<String> {
    let out = Command::new("redis-server").arg("--version").output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "redis-server not found on PATH (Debian: apt-get install redis-server)".to_string(),
        _ => format!("redis-server --version: {e}"),
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.split_whitespace().find_map(|w| w.strip_prefix("v=")).unwrap_or("?").to_string())
}
