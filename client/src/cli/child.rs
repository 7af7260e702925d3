//! A command run on behalf of a hold, shared by `redlock run` and `redlock
//! elect`: started in a process group of its own that dies with this
//! process, watched while it runs (SIGINT and SIGTERM passed on to its
//! group), stopped inside the hold when the hold is lost (SIGTERM, then
//! SIGKILL after `--kill-after`, and never later than the hold's own
//! deadline: see `supervise`), and its status read as a shell does.
//!
//! What is and is not covered (docs/client.md, "The command's contract"):
//! every process of the command's group is stopped before the hold ends,
//! and with the group if this process is killed (a reaper process kills the
//! group when this one dies, SIGKILL included); a process that leaves the
//! group (`setsid`, a daemon that detaches) is out of reach, and only the
//! fencing token stops its writes.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::process::{CommandExt as _, ExitStatusExt};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use redlock::Watch;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::args::{OnAsk, OnLost};
use super::exit;
use super::output::warn;

/// The hidden first argument that makes `redlock` a reaper (`reaper_main`).
pub const REAPER_ARG: &str = "--reap-process-group-of-dead-supervisor";

/// How often the rest of a group is looked at while it is let stop.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// How long processes sent SIGKILL get to be gone before a warning says
/// that some are not (stuck in the kernel: nothing more can be done).
const KILLED_GONE_WITHIN: Duration = Duration::from_secs(5);

/// How much of the hold must be left, before the instant its command must
/// have stopped (`Watch::stop_by`), for the command to be started: the
/// time to start it and for `supervise` to take over, on a busy machine.
/// A hold granted with less (a slow round, or a grant that came late in
/// the wait) waits for its next extension, or is lost before the command
/// ever ran: a command started with its hold about to end would run on
/// past it while the next holder starts (measured: started 90 ms after
/// that instant, killed 210 ms after it, while another client held).
pub const START_MARGIN: Duration = Duration::from_millis(100);

/// How often `time_to_start` looks whether an extension made room.
const START_POLL: Duration = Duration::from_millis(5);

/// A command running under a hold, and its process group.
pub struct Started {
    pub child: Child,
    /// `None` with `--foreground`: the command shares this process's group.
    group: Option<Group>,
}

/// The command's own process group (its leader is the command itself).
struct Group {
    pgid: libc::pid_t,
    /// Kills the group if this process dies first; `None` if it could not
    /// be started (said in a warning).
    reaper: Option<Reaper>,
}

/// A process of our own binary (`reaper_main`) that sends the command's
/// group SIGKILL when this process dies, however it dies: its stdin is a
/// pipe whose only writer is this process.
struct Reaper {
    process: std::process::Child,
    pipe: std::process::ChildStdin,
}

/// Where the signals for the command go.
#[derive(Clone, Copy)]
enum Target {
    Group(libc::pid_t),
    Process(libc::pid_t),
    Gone,
}

impl Target {
    fn send(self, signal: libc::c_int) {
        let to = match self {
            Target::Group(pgid) => -pgid,
            Target::Process(pid) => pid,
            Target::Gone => return,
        };
        // SAFETY: kill(2) on our own child or its process group (the group
        // keeps its id while any member lives); no memory involved.
        unsafe {
            libc::kill(to, signal);
        }
    }
}

/// Starts `command` so that it never outlives this process nor, unless
/// `foreground`, do the processes it starts: in a process group of its
/// own (signals go to the whole group) watched by a reaper.
///
/// The command itself gets SIGKILL from the kernel when the thread that
/// spawned it ends (`PR_SET_PDEATHSIG`; that thread is the one `block_on`
/// runs the command line on, which lives until the process exits), and
/// its group gets it from the reaper. A hold ends with this process's
/// connections (a session hold at once, any other when its lease runs out
/// unextended), so a command left running after `redlock run` or `redlock
/// elect` died, kill -9 included, would run without the lock.
///
/// The reaper is started first, and the command only if the hold still
/// leaves `START_MARGIN` then (else `NotStarted::TooLate`, nothing
/// running): starting processes is slow on a busy machine, and the time
/// it takes must not come out of the command's supervision.
pub fn start(command: &mut Command, foreground: bool, watch: &Watch) -> Result<Started, NotStarted> {
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
    if !foreground {
        command.process_group(0);
        // Orphans of the command's group come to this process instead of
        // init, so that it sees them end (`Group::running` reaps them).
        // SAFETY: prctl on this process; no memory involved.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        }
    }
    let mut reaper = (!foreground).then(spawn_reaper).flatten();
    if !has_time_to_start(watch) {
        if let Some(reaper) = reaper.take() {
            reaper.dismiss();
        }
        return Err(NotStarted::TooLate);
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            if let Some(reaper) = reaper.take() {
                reaper.dismiss();
            }
            return Err(NotStarted::Spawn(e));
        }
    };
    let group = match (foreground, child.id().and_then(|p| libc::pid_t::try_from(p).ok())) {
        (false, Some(pgid)) => Some(Group { pgid, reaper: reaper.and_then(|r| r.watch_group(pgid)) }),
        _ => None,
    };
    Ok(Started { child, group })
}

/// Why the command was not started.
pub enum NotStarted {
    /// The hold had less than `START_MARGIN` left (or was lost).
    TooLate,
    /// It could not be started (not found, not executable, ...).
    Spawn(std::io::Error),
}

/// Whether the hold leaves `START_MARGIN` before its command must have
/// stopped.
fn has_time_to_start(watch: &Watch) -> bool {
    watch.lost_at().is_none() && watch.stop_by().saturating_duration_since(std::time::Instant::now()) >= START_MARGIN
}

/// Waits until the hold leaves `START_MARGIN` (at once, or after the
/// extension its keeper makes when it is due); `false` when it is lost
/// first.
pub async fn time_to_start(watch: &Watch) -> bool {
    let lost = watch.lost_token();
    loop {
        if has_time_to_start(watch) {
            return true;
        }
        if lost.is_cancelled() || watch.lost_at().is_some() {
            return false;
        }
        tokio::select! {
            () = lost.cancelled() => return false,
            () = tokio::time::sleep(START_POLL) => {}
        }
    }
}

/// The reaper, started before the command: it learns the command's group
/// from the first line on its stdin (`watch_group`); end of file before
/// that line means there is no group to watch.
fn spawn_reaper() -> Option<Reaper> {
    // /proc/self/exe: this very program, even if its file was replaced.
    let mut reaper = std::process::Command::new("/proc/self/exe");
    reaper
        .arg(REAPER_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        // Apart from the terminal's signals: a Ctrl-C is for redlock to
        // pass on, and the reaper must outlive it.
        .process_group(0);
    match reaper.spawn() {
        Ok(mut process) => match process.stdin.take() {
            Some(pipe) => Some(Reaper { process, pipe }),
            None => {
                let _ = process.kill();
                let _ = process.wait();
                None
            }
        },
        Err(e) => {
            warn(&format!(
                "cannot start the process that stops the command's group if redlock is killed ({e}): \
                 if redlock dies, processes the command started may run on"
            ));
            None
        }
    }
}

impl Reaper {
    /// Hands the reaper the command's group; `None` (said in a warning)
    /// when it is gone already.
    fn watch_group(mut self, pgid: libc::pid_t) -> Option<Reaper> {
        match writeln!(self.pipe, "{pgid}").and_then(|()| self.pipe.flush()) {
            Ok(()) => Some(self),
            Err(e) => {
                warn(&format!(
                    "the process that stops the command's group if redlock is killed has gone ({e}): \
                     if redlock dies, processes the command started may run on"
                ));
                self.dismiss();
                None
            }
        }
    }

    /// Lets the reaper exit without a group to watch.
    fn dismiss(mut self) {
        drop(self.pipe);
        let _ = self.process.wait();
    }
}

/// The reaper (`spawn_reaper`): reads the group to watch from the first
/// line on stdin (end of file first: none, it exits), then waits on stdin
/// again; a byte means the supervisor saw the group end, end of file that
/// it died: the group then gets SIGKILL. Returns the exit status.
pub fn reaper_main() -> i32 {
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    match std::io::BufRead::read_line(&mut stdin, &mut line) {
        Ok(0) => return exit::OK,
        Ok(_) => {}
        Err(_) => return exit::FAILURE,
    }
    let Some(pgid) = group_named(&line) else {
        return exit::USAGE;
    };
    let mut byte = [0u8; 1];
    loop {
        match stdin.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => return exit::OK,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    // SAFETY: kill(2) on the group the supervisor handed over; no memory.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    exit::OK
}

/// The process group a reaper is handed: a number above 1 (0 and 1 would
/// make kill(2) signal this process's own group or every process).
fn group_named(line: &str) -> Option<libc::pid_t> {
    line.trim().parse::<libc::pid_t>().ok().filter(|p| *p > 1)
}

impl Group {
    /// Whether a process of the group still runs. Orphans of the group
    /// that came to this process (a child subreaper) are reaped first, so
    /// that one that ended does not count. Only called once the command
    /// itself was reaped (by `Child::wait`).
    fn running(&self) -> bool {
        loop {
            // SAFETY: waitpid(2) on our own children of that group, no
            // status kept (a null pointer is allowed).
            let reaped = unsafe { libc::waitpid(-self.pgid, std::ptr::null_mut(), libc::WNOHANG) };
            if reaped <= 0 {
                break;
            }
        }
        // SAFETY: signal 0 only checks that the group exists.
        unsafe { libc::kill(-self.pgid, 0) == 0 }
    }

    /// The group is gone: the reaper is told so, and exits without a kill.
    fn finish(self) {
        if let Some(mut reaper) = self.reaper {
            let _ = reaper.pipe.write_all(b"x");
            drop(reaper.pipe);
            let _ = reaper.process.wait();
        }
    }
}

/// What to do when the hold a command runs under is lost, and what to say.
pub struct Loss {
    /// The hold's lost signal and when the command must have stopped.
    pub watch: Watch,
    pub on_lost: OnLost,
    /// SIGTERM to SIGKILL, at most (`--kill-after`).
    pub kill_after: Duration,
    /// What was lost, e.g. `LOCK LOST: "orders" could not be extended on
    /// a quorum while "make" runs`.
    pub what: String,
    /// The command's name, for the warnings.
    pub name: String,
}

impl Loss {
    /// `redlock run`'s: the lock on `resource` lost while `name` runs.
    pub fn of_lock(watch: Watch, on_lost: OnLost, kill_after: Duration, resource: &str, name: &str) -> Loss {
        Loss {
            watch,
            on_lost,
            kill_after,
            what: format!("LOCK LOST: {resource:?} could not be kept on a quorum while {name:?} runs"),
            name: name.to_string(),
        }
    }

    /// Sends `target` SIGTERM, saying `{before} SIGTERM, SIGKILL in N
    /// s{after}`; returns when SIGKILL is due (`kill_at`).
    fn terminate(&self, target: Target, before: &str, after: &str) -> Instant {
        let now = Instant::now();
        let at = self.kill_at(now);
        warn(&format!("{before} SIGTERM, SIGKILL in {:.1} s{after}", at.saturating_duration_since(now).as_secs_f64()));
        target.send(libc::SIGTERM);
        at
    }

    /// When the command must be dead, after a loss at `now`: the grace
    /// after SIGTERM, never past the hold's own end.
    fn kill_at(&self, now: Instant) -> Instant {
        let grace_ends = now.checked_add(self.kill_after).unwrap_or(now);
        grace_ends.min(Instant::from_std(self.watch.stop_by()))
    }
}

/// The asks for the hold heard while its command runs (`redlock run
/// --on-ask`), and what is done with each.
pub struct Asks {
    /// Fed by a task that listens from before the command starts, so that
    /// an ask made as soon as it runs is heard (`listen`).
    pub heard: tokio::sync::mpsc::UnboundedReceiver<redlock::AskRequest>,
    pub on_ask: OnAsk,
    /// The hold's fencing token as the line shows it.
    pub token: String,
}

impl Asks {
    /// Starts listening to `asks` at once (their subscriptions are made
    /// when first polled); the task ends with the stream, when the hold
    /// ends, or at the first ask after the receiver is gone.
    pub fn listen(asks: impl futures::Stream<Item = redlock::AskRequest> + Send + 'static, on_ask: OnAsk, token: String) -> Asks {
        let (sender, heard) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut asks = std::pin::pin!(asks);
            while let Some(ask) = futures::StreamExt::next(&mut asks).await {
                if sender.send(ask).is_err() {
                    return;
                }
            }
        });
        Asks { heard, on_ask, token }
    }

    /// Says the ask on stderr and, with `--on-ask term`, sends the
    /// command SIGTERM; the hold ends when the command exits.
    fn act(&self, ask: &redlock::AskRequest, target: Target, name: &str) {
        let message = ask.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
        warn(&format!("asked to let go {} token {}{message}", ask.resource, self.token));
        if self.on_ask == OnAsk::Term {
            warn(&format!("sending {name:?} SIGTERM (--on-ask term)"));
            target.send(libc::SIGTERM);
        }
    }
}

/// The next ask, or never (no asks listened to, or none will come).
async fn next_ask(asks: &mut Option<Asks>) -> Option<redlock::AskRequest> {
    match asks {
        Some(asks) => match asks.heard.recv().await {
            Some(ask) => Some(ask),
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
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

/// Watches the command until it and its group are gone: SIGINT and
/// SIGTERM received here are passed on to the group (the last one passed
/// on is returned beside the outcome). With `--on-lost kill`, the moment
/// the hold is lost the group gets SIGTERM, and SIGKILL at the end of the
/// grace or of the hold (`Watch::stop_by`, followed even when no loss was
/// signalled: a keeper that is late must not make the command late),
/// whichever is first; with `--on-lost warn` it is let finish. Processes of
/// the group still running when the command exits are stopped the same way
/// before this returns, since the hold ends then (`settle`). Each ask in
/// `asks` is acted on as `Asks::act` says.
pub async fn supervise(
    started: Started,
    loss: &Loss,
    mut asks: Option<Asks>,
    sigint: &mut tokio::signal::unix::Signal,
    sigterm: &mut tokio::signal::unix::Signal,
) -> (Supervised, Option<libc::c_int>) {
    let Started { mut child, group } = started;
    let target = match (&group, child.id().and_then(|p| libc::pid_t::try_from(p).ok())) {
        (Some(g), _) => Target::Group(g.pgid),
        (None, Some(pid)) => Target::Process(pid),
        (None, None) => Target::Gone,
    };
    let killing = loss.on_lost == OnLost::Kill;
    let mut forwarded = None;
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let lost_signal = loss.watch.lost_token();
    let status = loop {
        let hard = (killing && !killed).then(|| {
            let stop_by = Instant::from_std(loss.watch.stop_by());
            kill_at.map_or(stop_by, |k| k.min(stop_by))
        });
        let hard_timer = async {
            match hard {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            status = child.wait() => break status,
            () = lost_signal.cancelled(), if !lost => {
                lost = true;
                if killing {
                    kill_at = Some(loss.terminate(target, &format!("{}; sending", loss.what), " (the grace, or the hold's end if sooner)"));
                } else {
                    warn(&format!("{}; letting it finish (--on-lost warn): it no longer holds the lock", loss.what));
                }
            }
            () = hard_timer => {
                // An extension may have moved the hold's end meanwhile.
                if !lost && Instant::now() < Instant::from_std(loss.watch.stop_by()) {
                    continue;
                }
                if !lost {
                    lost = true;
                    warn(&format!("{}: its validity ends now; SIGKILL", loss.what));
                } else {
                    warn(&format!("{:?} still running at the end of its grace or of the hold: SIGKILL", loss.name));
                }
                target.send(libc::SIGKILL);
                killed = true;
            }
            Some(()) = sigint.recv() => {
                target.send(libc::SIGINT);
                forwarded = Some(libc::SIGINT);
            }
            Some(()) = sigterm.recv() => {
                target.send(libc::SIGTERM);
                forwarded = Some(libc::SIGTERM);
            }
            Some(ask) = next_ask(&mut asks) => {
                if let Some(asks) = &asks {
                    asks.act(&ask, target, &loss.name);
                }
            }
        }
    };
    let outcome = match status {
        Ok(status) if lost && killing => Supervised::StoppedAfterLoss(status),
        Ok(status) => Supervised::Exited(status),
        Err(e) => {
            let _ = child.start_kill();
            Supervised::WaitFailed(e)
        }
    };
    if let Some(group) = group {
        let deadline = match (lost && killing, killed) {
            (_, true) => Some(Instant::now()),
            (true, false) => kill_at,
            (false, false) => None,
        };
        settle(group, loss, deadline).await;
    }
    (outcome, forwarded)
}

/// Stops what is left of the command's group once the command itself
/// exited: the hold is about to end, and nothing of the command may run
/// on without it. SIGTERM (unless it was sent at a loss: `deadline` is
/// then when SIGKILL is due), SIGKILL at the end of the grace or of the
/// hold, then waits until the group is gone.
async fn settle(group: Group, loss: &Loss, deadline: Option<Instant>) {
    if !group.running() {
        group.finish();
        return;
    }
    let target = Target::Group(group.pgid);
    let stop_by = Instant::from_std(loss.watch.stop_by());
    let deadline = match deadline {
        Some(at) => at.min(stop_by),
        None => {
            loss.terminate(target, &format!("{:?} exited, leaving processes of its group running:", loss.name), " unless they are gone")
        }
    };
    while group.running() && Instant::now() < deadline {
        tokio::time::sleep(GROUP_POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
    if group.running() {
        target.send(libc::SIGKILL);
        let given_up = Instant::now() + KILLED_GONE_WITHIN;
        while group.running() && Instant::now() < given_up {
            tokio::time::sleep(GROUP_POLL).await;
        }
        if group.running() {
            warn(&format!(
                "processes of {:?}'s group are still there {} s after SIGKILL (stuck in the kernel?)",
                loss.name,
                KILLED_GONE_WITHIN.as_secs()
            ));
        }
    }
    group.finish();
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

    #[test]
    fn a_reaper_watches_only_a_group_it_may_kill() {
        assert_eq!(group_named("4242\n"), Some(4242));
        for line in ["", "\n", "0\n", "1\n", "-5\n", "many\n"] {
            assert_eq!(group_named(line), None, "{line:?}");
        }
    }
}
