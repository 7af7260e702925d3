//! Running the real `redlock` program in tests: wait for it within a
//! deadline and keep what it printed.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// What one run of `redlock` did.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From `started` (see `finish`) to the exit.
    pub took: Duration,
    pub ended: Instant,
}

/// Waits for a spawned `redlock`, at most `deadline`, and prints what it
/// did for the test's log. Panics (naming `what`) if it does not exit.
pub async fn finish(child: Child, started: Instant, deadline: Duration, what: &str) -> Ran {
    let out = tokio::time::timeout(deadline, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what}: redlock did not exit within {deadline:?}"))
        .unwrap_or_else(|e| panic!("{what}: waiting for redlock: {e}"));
    let ended = Instant::now();
    let ran = Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: ended - started,
        ended,
    };
    println!("{what}: exit {:?} in {:?}\n  stdout: {:?}\n  stderr: {:?}", ran.code, ran.took, ran.stdout, ran.stderr);
    ran
}

/// Spawns `cmd` and waits for it (see `finish`).
pub async fn run(mut cmd: Command, deadline: Duration, what: &str) -> Ran {
    let started = Instant::now();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: spawning redlock: {e}"));
    finish(child, started, deadline, what).await
}

/// `redlock --servers <servers> <options> <args>`: output captured,
/// killed when dropped.
pub fn redlock_with(servers: &str, options: &[&str], args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlock"));
    cmd.env_remove("REDLOCK_SERVERS")
        .arg("--servers")
        .arg(servers)
        .args(options)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// `redlock_with` generous timeouts: time is not the subject of the tests
/// that use it (a loaded machine must not turn a healthy server into a
/// timeout).
pub fn redlock(servers: &str, args: &[&str]) -> Command {
    redlock_with(servers, &["--request-timeout", "1s", "--connect-timeout", "1s", "--retry-delay", "5ms..15ms"], args)
}
