//! `redlock serve --config FILE`: options from a file, one `option value`
//! per line with the long flag names without `--`, `#` comment lines.
//! Each value becomes its option's default, so that clap's own order
//! decides: a flag on the command line, then its environment variable,
//! then the file, then the built-in default.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::error::ErrorKind;
use clap::{Command, CommandFactory, FromArgMatches};

use super::Cli;

/// The command line `raw` (program name first) parsed, with the config
/// file of `redlock serve --config` (or `REDLOCK_SERVE_CONFIG`) read
/// first. A file that cannot be read, or a line that is not a known
/// option with a valid value, is a usage error naming the line.
pub fn parse(raw: &[OsString]) -> Result<Cli, clap::Error> {
    let file = config_file(raw);
    let mut command = match &file {
        Some(path) => with_file(Cli::command(), path)?,
        None => Cli::command(),
    };
    let matches = command.try_get_matches_from_mut(raw)?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
    // clap's `requires` does not count a default, so the file's `session`
    // would not let --lock-delay through: that check is made here instead.
    if file.is_some() && cli.global.lock_delay.is_some() && !cli.global.session {
        return Err(command.error(
            ErrorKind::MissingRequiredArgument,
            "--lock-delay (or lock-delay in the config file) needs --session (or session in the config file)",
        ));
    }
    Ok(cli)
}

/// `--config`'s value (or its variable's), when the subcommand is serve:
/// read leniently, the strict reading comes after.
fn config_file(raw: &[OsString]) -> Option<PathBuf> {
    let matches = Cli::command().ignore_errors(true).try_get_matches_from(raw).ok()?;
    matches.subcommand_matches("serve")?.get_one::<PathBuf>("config").cloned()
}

/// `command` with the options of the file at `path` as defaults.
fn with_file(mut command: Command, path: &Path) -> Result<Command, clap::Error> {
    let shown = path.display();
    // Checked by `parse` instead (see there).
    if command.get_arguments().any(|a| a.get_id() == "lock_delay") {
        command = command.mut_arg("lock_delay", |a| a.requires(clap::builder::Resettable::<clap::Id>::Reset));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| Cli::command().error(ErrorKind::Io, format!("--config {shown}: cannot read it: {e}")))?;
    let mut given: Vec<String> = Vec::new();
    for (number, line) in (1u32..).zip(text.lines()) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fail = |what: String| Cli::command().error(ErrorKind::InvalidValue, format!("--config {shown}:{number}: {what}"));
        let (name, value) = match line.split_once(char::is_whitespace) {
            Some((name, value)) => (name, Some(value.trim())),
            None => (line, None),
        };
        let name = name.strip_prefix("--").unwrap_or(name);
        let serve = command.find_subcommand("serve").and_then(|s| s.get_arguments().find(|a| a.get_long() == Some(name)));
        let global = command.get_arguments().find(|a| a.get_long() == Some(name));
        let Some(arg) = serve.or(global).filter(|_| name != "config") else {
            return Err(fail(format!("unknown option '{}' (the long options of redlock serve --help, without --)", printable(name))));
        };
        if given.iter().any(|g| g == name) {
            return Err(fail(format!("'{name}' is given twice")));
        }
        given.push(name.to_string());
        let takes_value = arg.get_action().takes_values();
        let value = match (takes_value, value) {
            (true, Some(value)) => value.to_string(),
            (true, None) => return Err(fail(format!("'{name}' needs a value: {name} VALUE"))),
            (false, None | Some("yes" | "true" | "on")) => "true".to_string(),
            (false, Some("no" | "false" | "off")) => "false".to_string(),
            (false, Some(_)) => return Err(fail(format!("'{name}' is a flag: '{name}' alone, or '{name} yes' or '{name} no'"))),
        };
        if takes_value {
            // The value checked as the flag's would be, so that its error
            // names this line.
            let check = Cli::command().try_get_matches_from(["redlock".to_string(), "serve".to_string(), format!("--{name}={value}")]);
            if let Err(e) = check.as_ref().map(|_| ()) {
                if matches!(e.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
                    let text = e.render().to_string();
                    let first = text.lines().next().unwrap_or_default();
                    return Err(fail(first.strip_prefix("error: ").unwrap_or(first).to_string()));
                }
            }
        }
        let is_serve = serve.is_some();
        // Its id (the field's name), which clap's mut_arg takes: an id it
        // does not know would be a panic; this one it defined.
        let id = arg.get_id().clone();
        // Not shown by --help: a password may be among them.
        command = if is_serve {
            command.mut_subcommand("serve", |s| s.mut_arg(&id, |a| a.default_value(value).hide_default_value(true)))
        } else {
            command.mut_arg(&id, |a| a.default_value(value).hide_default_value(true))
        };
    }
    Ok(command)
}

/// A name as an error shows it: printable, at most 40 characters.
fn printable(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(40).collect()
}
