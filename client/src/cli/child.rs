//! A command run on behalf of a hold, shared by `redlock run` and `redlock
//! elect`: started so that it dies with this process, watched while it
//! runs (SIGINT and SIGTERM passed on to it; SIGTERM, then SIGKILL after a
//! grace, the moment the hold is lost), and its status read as a shell
//! does.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::args::OnLost;
use super::exit;
use super::output::warn;

/// How long a command gets between SIGTERM and SIGKILL once the hold is lost.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

/// A command never outlives its supervisor: the hold ends with this
/// process's connections (a session hold at once, any other when its
/// lease runs out unextended), so a command left running after `redlock
/// run` or `redlock elect` died, kill -9 included, would run without the
/// lock (a second leader, for `elect`). The kernel
/// sends it SIGKILL when the thread that spawned it ends (nothing is left
/// to send SIGTERM and wait out a grace): that thread is the one
/// `block_on` runs the command line on, which lives until the process
/// exits. Only the command itself is covered; a command that starts its
/// own children and exits without waiting leaves them to its own care.
pub fn die_with_this_process(command: &mut Command) {
    let supervisor = std::process::id();
    // SAFETY: the closure runs in the forked child before exec, and makes
    // only async-signal-safe calls (prctl, getppid); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The supervisor died between fork and the prctl: the signal
            // will never come, so the command must not start.
            if u32::try_from(libc::getppid()).ok() != Some(supervisor) {
                return Err(std::io::Error::from(ErrorKind::Interrupted));
            }
            Ok(())
        });
    }
}

/// What to do when the hold a command runs under is lost, and what to say.
pub struct Loss {
    /// Cancelled the moment the hold is lost (a guard's lost signal).
    pub token: CancellationToken,
    pub on_lost: OnLost,
    /// The warning when the command is stopped (`OnLost::Kill`).
    pub stopping: String,
    /// The warning when it is let finish (`OnLost::Warn`).
    pub letting: String,
    /// The command's name, for the SIGKILL warning.
    pub name: String,
}

impl Loss {
    /// `redlock run`'s: the lock on `resource` lost while `name` runs.
    pub fn of_lock(token: CancellationToken, on_lost: OnLost, resource: &str, name: &str) -> Loss {
        Loss {
            token,
            on_lost,
            stopping: format!(
                "LOCK LOST: {resource:?} could not be extended on a quorum while {name:?} runs; \
                 sending SIGTERM, SIGKILL in {} s",
                KILL_GRACE.as_secs()
            ),
            letting: format!(
                "LOCK LOST: {resource:?} could not be extended on a quorum while {name:?} runs; \
                 letting it finish (--on-lost warn): it no longer holds the lock"
            ),
            name: name.to_string(),
        }
    }
}

pub enum Supervised {
    /// The command exited on its own (or after a forwarded signal), or
    /// after a lost lock with `--on-lost warn`.
    Exited(ExitStatus),
    /// The lock was lost and the command was stopped (`--on-lost kill`).
    StoppedAfterLoss(ExitStatus),
    WaitFailed(std::io::Error),
}

/// Watches `child` until it exits: SIGINT and SIGTERM received here are
/// passed on to it (the last one passed on is returned beside the
/// outcome), and the moment `loss.token` is cancelled it is stopped or let
/// finish as `loss.on_lost` says.
pub async fn supervise(
    child: &mut Child,
    loss: &Loss,
    sigint: &mut tokio::signal::unix::Signal,
    sigterm: &mut tokio::signal::unix::Signal,
) -> (Supervised, Option<libc::c_int>) {
    let on_lost = loss.on_lost;
    let mut forwarded = None;
    // Known while the child is not reaped, which is until `wait` returns.
    let pid = child.id().and_then(|p| libc::pid_t::try_from(p).ok());
    let mut lost = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    loop {
        let kill_timer = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => {
                let outcome = match status {
                    Ok(status) if lost && on_lost == OnLost::Kill => Supervised::StoppedAfterLoss(status),
                    Ok(status) => Supervised::Exited(status),
                    Err(e) => {
                        let _ = child.start_kill();
                        Supervised::WaitFailed(e)
                    }
                };
                return (outcome, forwarded);
            }
            () = loss.token.cancelled(), if !lost => {
                lost = true;
                match on_lost {
                    OnLost::Kill => {
                        warn(&loss.stopping);
                        send(pid, libc::SIGTERM);
                        kill_at = Some(tokio::time::Instant::now() + KILL_GRACE);
                    }
                    OnLost::Warn => warn(&loss.letting),
                }
            }
            _ = kill_timer => {
                kill_at = None;
                warn(&format!("{:?} still running {} s after SIGTERM: SIGKILL", loss.name, KILL_GRACE.as_secs()));
                let _ = child.start_kill();
            }
            Some(()) = sigint.recv() => {
                send(pid, libc::SIGINT);
                forwarded = Some(libc::SIGINT);
            }
            Some(()) = sigterm.recv() => {
                send(pid, libc::SIGTERM);
                forwarded = Some(libc::SIGTERM);
            }
        }
    }
}

pub fn send(pid: Option<libc::pid_t>, signal: libc::c_int) {
    if let Some(pid) = pid.filter(|p| *p > 0) {
        // SAFETY: kill(2) on our own, not yet reaped child; no memory involved.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// The shell convention: the exit code, or 128 + the signal.
pub fn status_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => exit::FAILURE,
    }
}

pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "unknown status".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_follow_the_shell() {
        assert_eq!(status_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(status_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(status_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(status_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
