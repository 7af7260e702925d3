//! The `redlock` command-line program: argument parsing and output only;
//! the Redlock algorithm itself is the library's.

pub mod args;
pub mod ask;
pub mod bench;
pub mod child;
pub mod commands;
pub mod elect;
pub mod exit;
pub mod explain;
pub mod members;
pub mod metrics;
pub mod output;
pub mod progress;
pub mod resize;
pub mod revoke;
pub mod run;
pub mod serve;
pub mod status;
pub mod top;
pub mod watch;

use redlock::Redlock;

use args::{Cli, Command};
use exit::Failure;

/// Runs the parsed command line; returns the exit status.
pub fn execute(cli: Cli) -> Result<i32, Failure> {
    let mut builder = match &cli.command {
        // The endpoint's requests are short and many: on one thread none
        // is handed between threads (a wake-up and a system call each).
        Command::Serve(args) if args.threads <= 1 => tokio::runtime::Builder::new_current_thread(),
        Command::Serve(args) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(usize::from(args.threads));
            builder
        }
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder.enable_all().build().map_err(|e| Failure::general(format!("starting the async runtime: {e}")))?;
    runtime.block_on(dispatch(cli))
}

async fn dispatch(cli: Cli) -> Result<i32, Failure> {
    let Cli { global, command } = cli;
    let json = global.json;
    if let Command::Bench(args) = &command {
        return bench::bench(&global, args, json).await;
    }
    let urls = global.urls().map_err(Failure::usage)?;
    let mut settings = global.settings(global.mode.into());
    // An election's hold is always bound to the connection (as --session):
    // a leader that dies must be followed after its lock-delay.
    if matches!(command, Command::Elect(_) | Command::Leader(_)) {
        settings.release_on_disconnect = true;
    }
    // A supervised command's grace between SIGTERM and SIGKILL fits in the
    // default lock-delay where the ttl allows: a holder cut off by the
    // network still gives its command that grace before a server frees
    // the lock (the command is stopped within the hold either way).
    let supervised = match &command {
        Command::Run(args) => Some((args.ttl, args.kill_after)),
        Command::Elect(args) => Some((args.ttl, args.kill_after)),
        _ => None,
    };
    if let (Some((ttl, kill_after)), true, None) = (supervised, settings.release_on_disconnect, settings.lock_delay) {
        settings.lock_delay = Some(settings.lock_delay_for(ttl).saturating_add(kill_after).min(ttl));
    }
    let redlock = Redlock::new(&urls, settings).map_err(|e| explain::other(&e))?;
    // A server listed twice is refused before anything is asked of it.
    redlock.verify_servers().await.map_err(|e| explain::other(&e))?;
    let metrics_at = match &command {
        Command::Run(args) => args.metrics.as_deref(),
        Command::Elect(args) => args.metrics.as_deref(),
        Command::Leader(args) => args.metrics.as_deref(),
        Command::Serve(args) => args.metrics.as_deref(),
        _ => None,
    };
    let metrics = match metrics_at {
        Some(addr) => Some(metrics::serve(&redlock, addr).await?),
        None => None,
    };
    let outcome = match &command {
        Command::Acquire(args) => commands::acquire(&redlock, args, json).await,
        Command::Release(args) => commands::release(&redlock, args, json).await,
        Command::Extend(args) => commands::extend(&redlock, args, json).await,
        Command::Revoke(args) => revoke::revoke(&redlock, args, json).await,
        Command::Ask(args) => ask::ask(&redlock, args, json).await,
        Command::Resize(args) => resize::resize(&redlock, args, json).await,
        Command::Status(args) => status::status(&redlock, args, json).await,
        Command::Top(args) => top::top(&redlock, args, json).await,
        Command::Run(args) => run::run(&redlock, args).await,
        Command::Elect(args) => elect::elect(&redlock, args).await,
        Command::Leader(args) => elect::leader(&redlock, args, json).await,
        Command::Watch(args) => watch::watch(&redlock, args, json).await,
        Command::Members(args) => members::members(&redlock, args, json).await,
        Command::Bench(args) => bench::bench(&global, args, json).await,
        Command::Serve(args) => serve::serve(&redlock, args).await,
    };
    // A lock taken from the line gives its place up in the background: it
    // must be given up before this process exits, or the next in line
    // would wait for its ttl.
    redlock.settle().await;
    if let Some(server) = metrics {
        server.abort();
    }
    outcome
}

/// Whether `--json` is among the raw arguments (before a `--`), for
/// reporting clap's own usage errors as JSON too.
pub fn json_requested<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> bool {
    args.into_iter().skip(1).take_while(|a| a != "--").any(|a| a == "--json")
}

/// Reports a failure: one line on stderr, and with `json` the error object
/// on stdout.
pub fn report(failure: &Failure, json: bool) {
    if json {
        // Nothing better to do when stdout is gone.
        let _ = output::json(&failure.to_json());
    }
    if !failure.message.is_empty() {
        output::warn(&failure.message);
    }
}
