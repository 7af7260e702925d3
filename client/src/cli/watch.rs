//! `redlock watch NAME [--json]`: a lock's changes as a quorum of servers
//! announced them (`Redlock::watch`), one line each, until interrupted.

use futures::StreamExt;
use redlock::{Change, Redlock};
use serde::Serialize;

use super::args::WatchArgs;
use super::elect::signals;
use super::exit::{self, Failure};
use super::output;

#[derive(Serialize)]
struct ChangeJson<'a> {
    kind: &'static str,
    token: i64,
    owner: &'a str,
    value: Option<&'a str>,
    /// When it was delivered, RFC 3339 (UTC, milliseconds).
    at: String,
}

fn print(change: &Change, json: bool) -> Result<(), Failure> {
    if json {
        let at = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        output::json(&ChangeJson {
            kind: change.kind.as_str(),
            token: change.token,
            owner: &change.owner,
            value: change.value.as_deref(),
            at,
        })
    } else {
        let value = change.value.as_deref().map(|v| format!(" {v}")).unwrap_or_default();
        output::stdout(&format!("{} {} {}{value}\n", change.kind, change.token, change.owner))
    }
}

pub async fn watch(rl: &Redlock, args: &WatchArgs, json: bool) -> Result<i32, Failure> {
    let (mut sigint, mut sigterm) = signals()?;
    let mut changes = Box::pin(rl.watch_every(&args.name, args.interval));
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(change)) => print(&change, json)?,
                // A server that announces no end of this lock: said once, on stderr.
                Some(Err(e)) => output::warn(&e.to_string()),
                // The stream does not end by itself.
                None => return Ok(exit::OK),
            },
            // The end of a watch.
            _ = sigint.recv() => return Ok(exit::OK),
            _ = sigterm.recv() => return Ok(exit::OK),
        }
    }
}
