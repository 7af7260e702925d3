//! `redlock`: the command-line program of the Redlock quorum client.
//! Subcommands acquire, release, extend, status, run, bench; see
//! `redlock --help` for the exit statuses.

mod cli;

use clap::Parser;

fn main() {
    let cli = match cli::args::Cli::try_parse() {
        Ok(cli) => cli,
        // Usage errors exit 2; --help and --version exit 0.
        Err(e) => e.exit(),
    };
    let code = match cli::execute(cli) {
        Ok(code) => code,
        Err(failure) => {
            if !failure.message.is_empty() {
                cli::output::warn(&failure.message);
            }
            failure.code
        }
    };
    std::process::exit(code);
}
