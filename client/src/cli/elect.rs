//! `redlock elect` (campaign, run a command while leading, stop it the
//! moment the leadership is lost, campaign again with `--again`) and
//! `redlock leader` (who leads, or every change with `--watch`). The
//! election is the library's (`redlock::election`); the command's handling
//! is `child`'s, shared with `redlock run`.

use std::io::ErrorKind;
use std::time::Instant;

use futures::StreamExt;
use redlock::{Election, Error, Leader, Leadership, Redlock};
use serde::Serialize;
use tokio::process::Command;
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::args::{ElectArgs, LeaderArgs, OnLost};
use super::child::{self, describe, status_code, supervise, Loss, NotStarted, Supervised};
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, pairs, warn, Op};

/// The election `name` on `rl`'s servers, or the configuration error that
/// refuses it (exit 2).
fn election(rl: &Redlock, name: &str, value: &str, ttl: std::time::Duration) -> Result<Election, Failure> {
    Election::named(rl.clone(), name, value, Some(ttl), &redlock::Names::RUST).map_err(|e| explain::other(&e))
}

pub(super) fn signals() -> Result<(Signal, Signal), Failure> {
    let sigint = signal(SignalKind::interrupt()).map_err(|e| Failure::general(format!("SIGINT handler: {e}")))?;
    let sigterm = signal(SignalKind::terminate()).map_err(|e| Failure::general(format!("SIGTERM handler: {e}")))?;
    Ok((sigint, sigterm))
}

pub async fn elect(rl: &Redlock, args: &ElectArgs) -> Result<i32, Failure> {
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(Failure::usage("no command given"));
    };
    let name = program.to_string_lossy().into_owned();
    let election = election(rl, &args.name, &args.value, args.ttl)?;
    // Installed first: a signal while campaigning must not kill us with a
    // place in line (or the leadership) held.
    let (mut sigint, mut sigterm) = signals()?;
    loop {
        let campaigned = tokio::select! {
            campaigned = election.campaign() => campaigned,
            _ = sigint.recv() => return Err(interrupted(libc::SIGINT, &args.name)),
            _ = sigterm.recv() => return Err(interrupted(libc::SIGTERM, &args.name)),
        };
        let leading = campaigned.map_err(|e| explain::for_run(explain::not_acquired(&e, rl.quorum()), &name))?;
        let mut command = Command::new(program);
        command
            .args(program_args)
            .env("REDLOCK_ELECTION", &args.name)
            .env("REDLOCK_VALUE", &args.value)
            .env("REDLOCK_TOKEN", leading.term().to_string())
            // Not a `redlock run` lock: an outer one's must not pass for ours.
            .env_remove("REDLOCK_RESOURCE")
            .env_remove("REDLOCK_OWNER")
            .env_remove("REDLOCK_PERMIT")
            .kill_on_drop(false);
        // Started only with time left in the term (see `child::START_MARGIN`):
        // a leadership won too late to start the command inside it waits
        // for its next extension, or is given up and campaigned for again.
        let watch = leading.watch();
        let started = match child::time_to_start(&watch).await {
            true => child::start(&mut command, args.foreground, &watch),
            false => Err(NotStarted::TooLate),
        };
        let started = match started {
            Ok(started) => started,
            Err(NotStarted::TooLate) => {
                warn(&format!(
                    "the leadership of election {:?} (term {}) was won too late to start {name:?} inside it; campaigning again",
                    args.name,
                    leading.term()
                ));
                resign(leading, &args.name).await;
                continue;
            }
            Err(NotStarted::Spawn(e)) => {
                resign(leading, &args.name).await;
                let (code, kind) = if e.kind() == ErrorKind::NotFound {
                    (exit::NOT_FOUND, "command_not_found")
                } else {
                    (exit::CANNOT_EXECUTE, "cannot_execute")
                };
                return Err(Failure::new(code, kind, format!("cannot run {name:?}: {e}")));
            }
        };
        let loss = Loss {
            watch: leading.watch(),
            on_lost: OnLost::Kill,
            kill_after: args.kill_after,
            what: format!(
                "LEADERSHIP LOST: election {:?} (term {}) could not be kept on a quorum while {name:?} runs",
                args.name,
                leading.term()
            ),
            name: name.clone(),
        };
        let (outcome, forwarded) = supervise(started, &loss, None, &mut sigint, &mut sigterm).await;
        let exited_at = Instant::now();
        let lost_at = leading.lost_at();
        let term = leading.term();
        resign(leading, &args.name).await;
        let result = match outcome {
            Supervised::Exited(status) if lost_at.is_none() => Ok(status_code(status)),
            Supervised::Exited(status) => Err(lost_while_leading(&args.name, term, &name, &describe(status), lost_at, exited_at)),
            Supervised::StoppedAfterLoss(status) => {
                Err(lost_while_leading(&args.name, term, &name, &format!("stopped ({})", describe(status)), lost_at, exited_at))
            }
            Supervised::WaitFailed(e) => return Err(Failure::general(format!("waiting for {name:?}: {e}"))),
        };
        // A signal passed on to the command ends the campaigning too.
        if !args.again || forwarded.is_some() {
            return result;
        }
        match result {
            Ok(code) => warn(&format!("{name:?} ended (exit {code}) in term {term}; campaigning again (--again)")),
            Err(failure) => warn(&format!("{}; campaigning again (--again)", failure.message)),
        }
    }
}

/// Steps down; a resignation that did not reach every server is only
/// worth a warning (the rest ends with the connection or the lease).
async fn resign(leading: Leadership, name: &str) {
    if let Err(e) = leading.resign().await {
        warn(&format!("resigning from election {name:?}: {e}"));
    }
}

fn interrupted(signal: libc::c_int, name: &str) -> Failure {
    Failure::new(128 + signal, "interrupted", format!("interrupted while campaigning in election {name:?}; command not run"))
}

/// Exit 76: the command ran (part of the time) while another could lead.
fn lost_while_leading(name: &str, term: i64, command: &str, how: &str, lost_at: Option<Instant>, exited_at: Instant) -> Failure {
    let when = match lost_at {
        Some(at) => format!("lost {:.3} s before {command:?} exited", exited_at.saturating_duration_since(at).as_secs_f64()),
        None => "lost".to_string(),
    };
    Failure::new(
        exit::RUN_LOCK_LOST,
        "leadership_lost",
        format!(
            "the leadership of election {name:?} (term {term}) was {when}: another may lead since; {command:?} {how}; exit {}",
            exit::RUN_LOCK_LOST
        ),
    )
    .with("election", name)
    .with("term", term)
}

#[derive(Serialize)]
struct LeaderJson<'a> {
    value: &'a str,
    term: i64,
}

fn print_leader(leader: &Leader, json: bool) -> Result<(), Failure> {
    if json {
        output::json(&LeaderJson { value: &leader.value, term: leader.term })
    } else {
        output::stdout(&pairs(&[("value", leader.value.clone()), ("term", leader.term.to_string())]))
    }
}

pub async fn leader(rl: &Redlock, args: &LeaderArgs, json: bool) -> Result<i32, Failure> {
    let election = election(rl, &args.name, "", redlock::election::DEFAULT_TTL)?;
    if !args.watch {
        return match election.leader().await {
            Ok(Some(leader)) => print_leader(&leader, json).map(|()| exit::OK),
            Ok(None) => Err(Failure::new(
                exit::NOT_ACQUIRED,
                "no_leader",
                format!("election {:?} has no leader: no quorum of servers agrees on one", args.name),
            )
            .with("election", &args.name)),
            Err(e) => Err(not_read(&e, &args.name, rl.quorum())),
        };
    }
    let (mut sigint, mut sigterm) = signals()?;
    let mut changes = Box::pin(election.with_observe_interval(args.interval).observe());
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(leader) => print_leader(&leader, json)?,
                // The stream does not end by itself.
                None => return Ok(exit::OK),
            },
            // The end of a watch.
            _ = sigint.recv() => return Ok(exit::OK),
            _ = sigterm.recv() => return Ok(exit::OK),
        }
    }
}

/// Too few servers answered to tell who leads (exit 6), or another error.
fn not_read(e: &Error, name: &str, quorum: usize) -> Failure {
    match e {
        Error::NoQuorum { outcomes, .. } => {
            explain::no_quorum(&format!("leader of election {name:?} unknown"), outcomes, quorum, Op::Acquire).with("election", name)
        }
        other => explain::other(other),
    }
}
