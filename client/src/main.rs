//! `redlock`: the command-line program of the Redlock quorum client.
//! Subcommands acquire, release, extend, status, run, bench, serve; see
//! `redlock --help` for the exit statuses.

mod cli;
mod serve;

use clap::error::ErrorKind;

fn main() {
    // The reaper of a supervised command's group (`cli::child`), started by
    // `redlock run` or `redlock elect` as this very program.
    if std::env::args_os().nth(1).is_some_and(|a| a == cli::child::REAPER_ARG) {
        std::process::exit(cli::child::reaper_main());
    }
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match cli::args::config::parse(&raw) {
        Ok(cli) => cli.resolve(std::env::args_os()),
        Err(e) => {
            let informational = matches!(
                e.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            );
            if informational || !cli::json_requested(std::env::args_os()) {
                // Usage errors exit 2; --help and --version exit 0.
                e.exit();
            }
            // With --json, clap's usage errors are error objects too.
            let text = e.render().to_string();
            // The error's paragraph, on one line (the usage and the tips follow).
            let paragraph: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
            let joined = paragraph.join(" ");
            let message = joined.strip_prefix("error: ").unwrap_or(&joined).to_string();
            let failure = cli::exit::Failure::usage(message).with("usage", text.trim_end());
            cli::report(&failure, true);
            std::process::exit(failure.code);
        }
    };
    let json = cli.global.json;
    let code = match cli::execute(cli) {
        Ok(code) => code,
        Err(failure) => {
            cli::report(&failure, json);
            failure.code
        }
    };
    std::process::exit(code);
}
