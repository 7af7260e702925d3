//! Module-equipped `redis-server`s for the benches (`quorum.rs`, `rtt.rs`),
//! from the workspace's one launcher (`testkit::Process`): free ports of
//! 127.0.0.1 below 30000 (clear of the ephemeral ones the proxies and
//! clients take), no persistence, each in a temp dir, killed by PID on
//! drop (also on panic) and, on Linux, when the bench dies
//! (PR_SET_PDEATHSIG).

use std::path::Path;
use std::process::Command;

pub use testkit::try_module_path as module_path;

/// Ports are taken from this range (below 30000, clear of the ephemeral ones).
const PORTS: std::ops::Range<u16> = 20_000..30_000;

pub type Res<T> = Result<T, String>;

/// One redis-server with the module; killed by PID when dropped. Derefs
/// to the launcher's process (`port`, `pid`).
pub struct Server(testkit::Process);

impl std::ops::Deref for Server {
    type Target = testkit::Process;
    fn deref(&self) -> &testkit::Process {
        &self.0
    }
}

impl Server {
    /// Starts on a free port of `PORTS` that is none of `taken`; on a port
    /// race, again on another port.
    pub fn start(module: &Path, taken: &[u16]) -> Res<Server> {
        let mut spec = testkit::Spec::new(Some(module.to_path_buf()));
        spec.dir_prefix = "redlock-bench-".into();
        spec.ports = testkit::Ports::Within { range: PORTS, avoid: taken.to_vec() };
        spec.defaults = vec![("--save".into(), String::new()), ("--appendonly".into(), "no".into())];
        spec.die_with_parent = true;
        testkit::Process::start(spec).map(Server).map_err(|e| e.to_string())
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    /// `n` servers on distinct free ports (started from the main thread,
    /// which lives to the end: they die with it).
    pub fn start_many(module: &Path, n: usize) -> Res<Vec<Server>> {
        let mut servers: Vec<Server> = Vec::with_capacity(n);
        for _ in 0..n {
            let taken: Vec<u16> = servers.iter().map(|s| s.port).collect();
            servers.push(Server::start(module, &taken)?);
        }
        Ok(servers)
    }
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
