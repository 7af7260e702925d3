//! The `redlock` command-line program: argument parsing and output only;
//! the Redlock algorithm itself is the library's.

pub mod args;
pub mod bench;
pub mod commands;
pub mod exit;
pub mod output;
pub mod run;

use redlock::Redlock;

use args::{Cli, Command};
use exit::Failure;

/// Runs the parsed command line; returns the exit status.
pub fn execute(cli: Cli) -> Result<i32, Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::general(format!("starting the async runtime: {e}")))?;
    runtime.block_on(dispatch(cli))
}

async fn dispatch(cli: Cli) -> Result<i32, Failure> {
    let Cli { global, command } = cli;
    let json = global.json;
    if let Command::Bench(args) = &command {
        return bench::bench(&global, args, json).await;
    }
    let urls = global.urls().map_err(Failure::usage)?;
    let redlock = Redlock::new(&urls, global.settings(global.mode.into()))
        .map_err(|e| Failure::from_lock_error(&e, exit::USAGE))?;
    match &command {
        Command::Acquire(args) => commands::acquire(&redlock, args, json).await,
        Command::Release(args) => commands::release(&redlock, args, json).await,
        Command::Extend(args) => commands::extend(&redlock, args, json).await,
        Command::Status(args) => commands::status(&redlock, args, json).await,
        Command::Run(args) => run::run(&redlock, args).await,
        Command::Bench(args) => bench::bench(&global, args, json).await,
    }
}
