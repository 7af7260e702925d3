//! `redlock run`: flock(1) across machines. Takes the lock with a guard
//! (which keeps extending it), runs the command, forwards SIGINT/SIGTERM to
//! it, reacts when the lock is lost and to asks to let go (`--on-ask`),
//! releases when the command exits; the command dies with it (the
//! command's handling is `child`'s, shared with `redlock elect`).

use std::ffi::OsString;
use std::io::ErrorKind;
use std::time::Instant;

use redlock::hold::{self, Request};
use redlock::metrics::LossCause;
use redlock::{Lock, LockGuard, Redlock};
use tokio::process::Command;
use tokio::signal::unix::{signal, SignalKind};

use super::args::{OnAsk, RunArgs};
use super::child::{self, describe, status_code, supervise, Asks, Loss, NotStarted, Supervised};
use super::commands::{deadline, request, Flags};
use super::exit::{self, Failure};
use super::explain;
use super::output::warn;
use super::progress::Waiting;

pub async fn run(rl: &Redlock, args: &RunArgs) -> Result<i32, Failure> {
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(Failure::usage("no command given"));
    };
    let name = program.to_string_lossy().into_owned();
    // Installed first, so a signal while we wait for the lock or start the
    // command does not kill us with the lock held.
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| Failure::general(format!("SIGINT handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| Failure::general(format!("SIGTERM handler: {e}")))?;

    let deadline = deadline(args.wait)?;
    let flags = Flags { shared: args.shared, limit: args.limit, permits: args.permits };
    let req = request(&args.resources(), args.ttl, args.wait, flags)?;
    // The names joined with ", ": what messages and REDLOCK_RESOURCE show.
    let resource = req.resources.to_string();
    let (guard, asks, started) = loop {
        let waiting = Waiting::start(&resource, rl.servers().len(), deadline);
        let taken = tokio::select! {
            taken = hold::take(rl, &req, waiting.observer()) => taken,
            _ = sigint.recv() => {
                waiting.finish();
                return Err(interrupted(libc::SIGINT, &resource));
            }
            _ = sigterm.recv() => {
                waiting.finish();
                return Err(interrupted(libc::SIGTERM, &resource));
            }
        };
        waiting.finish();
        let lock = match taken {
            Ok(lock) => lock,
            Err(e) => {
                let failure = super::status::with_holders(rl, &e, &req, explain::not_acquired(&e, rl.quorum())).await;
                return Err(explain::for_run(failure, &name));
            }
        };
        explain::warn_misconfigured(&lock.instances, rl.quorum());
        let guard = rl.keep(lock);
        // Listening before the command starts: an ask made once it runs is
        // heard. Each hold taken hears its own only (its owner's).
        let asks = (args.on_ask != OnAsk::Ignore).then(|| {
            let token = guard.lock().token.map_or_else(|| "none".to_string(), |t| t.to_string());
            Asks::listen(guard.asks(), args.on_ask, token)
        });
        let watch = guard.watch();
        let mut command = command_for(program, program_args, &resource, &req, &guard.lock(), args.limit.is_some());
        // Started only with time left in the hold (see `child::START_MARGIN`).
        let started = match child::time_to_start(&watch).await {
            true => child::start(&mut command, args.foreground, &watch),
            false => Err(NotStarted::TooLate),
        };
        match started {
            Ok(started) => break (guard, asks, started),
            Err(NotStarted::TooLate) => {
                release(rl, guard, &resource, true).await;
                if deadline.is_some_and(|d| Instant::now() < d) {
                    warn(&format!("the lock on {resource:?} was granted too late to start {name:?} inside it; taking it again"));
                    continue;
                }
                return Err(Failure::new(
                    exit::RUN_NOT_LOCKED,
                    "granted_too_late",
                    format!(
                        "the lock on {resource:?} was granted with too little of its validity left to start {name:?} \
                         inside it (a slow round or a busy machine); command not run"
                    ),
                ));
            }
            Err(NotStarted::Spawn(e)) => {
                release(rl, guard, &resource, false).await;
                let (code, kind) = if e.kind() == ErrorKind::NotFound {
                    (exit::NOT_FOUND, "command_not_found")
                } else {
                    (exit::CANNOT_EXECUTE, "cannot_execute")
                };
                return Err(Failure::new(code, kind, format!("cannot run {name:?}: {e}")));
            }
        }
    };

    let loss = Loss::of_lock(guard.watch(), args.on_lost, args.kill_after, &resource, &name);
    let (outcome, _) = supervise(started, &loss, asks, &mut sigint, &mut sigterm).await;
    let exited_at = Instant::now();
    // The validity is checked now too: the keeper may not have woken yet
    // (redlock itself paused past the lease while the command ran).
    let lost_at = guard.lost_at();
    let cause = guard.loss_cause();
    let still_held = release(rl, guard, &resource, lost_at.is_some()).await;
    match outcome {
        Supervised::Exited(status) => match (lost_at, still_held) {
            (None, true) => Ok(status_code(status)),
            (lost_at, _) => Err(lost_while_running(&resource, &name, &describe(status), lost_at.zip(cause), exited_at)),
        },
        Supervised::StoppedAfterLoss(status) => {
            Err(lost_while_running(&resource, &name, &format!("stopped ({})", describe(status)), lost_at.zip(cause), exited_at))
        }
        Supervised::WaitFailed(e) => Err(Failure::general(format!("waiting for {name:?}: {e}"))),
    }
}

/// The command, with the hold's variables: `REDLOCK_RESOURCE(S)`,
/// `REDLOCK_OWNER`, `REDLOCK_TOKEN`, and with `--limit` the permit held
/// (`REDLOCK_PERMIT`, `RESOURCE:permit:I`).
fn command_for(program: &OsString, args: &[OsString], resource: &str, req: &Request, lock: &Lock, permit: bool) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .env("REDLOCK_RESOURCE", resource)
        .env("REDLOCK_RESOURCES", req.resources.names().join("\n"))
        .env("REDLOCK_OWNER", &lock.owner)
        // Empty in script mode, which has no fencing tokens.
        .env("REDLOCK_TOKEN", lock.token.map(|t| t.to_string()).unwrap_or_default())
        .kill_on_drop(false);
    // A variable inherited from an outer `redlock run --limit` must not
    // pass for ours.
    match permit {
        true => command.env("REDLOCK_PERMIT", &lock.resource),
        false => command.env_remove("REDLOCK_PERMIT"),
    };
    command
}

/// Exit 76: the command ran (part of the time) without the lock. `lost`:
/// when it stopped being held and why, if known (else the release found
/// it held by fewer than a quorum).
fn lost_while_running(resource: &str, name: &str, how: &str, lost: Option<(Instant, LossCause)>, exited_at: Instant) -> Failure {
    let when = match lost {
        Some((at, cause)) => {
            let before = exited_at.saturating_duration_since(at);
            let wall = std::time::SystemTime::now()
                .checked_sub(Instant::now().saturating_duration_since(at))
                .map(|t| humantime::format_rfc3339_millis(t).to_string())
                .unwrap_or_default();
            format!("lost ({}) at {wall}, {:.3} s before {name:?} exited", cause.label(), before.as_secs_f64())
        }
        None => "not held by a quorum any more when the command exited".to_string(),
    };
    let failure = Failure::new(
        exit::RUN_LOCK_LOST,
        "lock_lost",
        format!("the lock on {resource:?} was {when}: {name:?} ran without it from then on; {name:?} {how}; exit {}", exit::RUN_LOCK_LOST),
    )
    .with("resource", resource);
    match lost {
        Some((_, cause)) => failure.with("cause", cause.label()),
        None => failure,
    }
}

/// Releases after the command; a short release is worth a warning (the
/// rest of the lease then runs out on its own). Returns `false` when the
/// servers' answers show that fewer than a quorum still held it (enough
/// of them answered "not held by this owner"): it was lost meanwhile.
async fn release(rl: &Redlock, guard: LockGuard, resource: &str, lost: bool) -> bool {
    match guard.release().await {
        Ok(r) if r.released >= rl.quorum() => true,
        Ok(r) => {
            let not_held = r.instances.iter().filter(|o| o.outcome == redlock::Outcome::Refused).count();
            let still_held = not_held + rl.quorum() <= r.instances.len();
            if !lost && still_held {
                warn(&format!(
                    "lock {resource:?} released on {} of {} servers only: {}",
                    r.released,
                    rl.servers().len(),
                    redlock::error::Outcomes(&r.instances)
                ));
            }
            still_held
        }
        Err(e) => {
            warn(&format!("releasing {resource:?}: {e}"));
            true
        }
    }
}

fn interrupted(signal: libc::c_int, resource: &str) -> Failure {
    Failure::new(128 + signal, "interrupted", format!("interrupted while waiting for the lock on {resource:?}; command not run"))
}
