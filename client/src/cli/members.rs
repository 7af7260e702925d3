//! `redlock members NAME [--json] [--watch]`: a group's members as a
//! quorum of servers lists them (`members::members_of`), one line each;
//! with `--watch`, subscribed first (`Redlock::watch_subscribed`), then
//! listed, then each join and leave of the group's key, until interrupted.

use std::collections::HashSet;

use futures::StreamExt;
use redlock::members::{members_of, resource_of, Member};
use redlock::{Change, ChangeKind, Error, Redlock};
use serde::Serialize;

use super::args::MembersArgs;
use super::elect::signals;
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, Op};

#[derive(Serialize)]
struct MemberJson<'a> {
    token: i64,
    owner: &'a str,
    value: &'a str,
}

#[derive(Serialize)]
struct EventJson<'a> {
    event: &'static str,
    token: i64,
    owner: &'a str,
    value: Option<&'a str>,
    /// When it was delivered, RFC 3339 (UTC, milliseconds).
    at: String,
}

/// What a change of the group's key is to its members: a join (a grant
/// or handoff, with its value), a new value (a proclamation), a leave (an
/// end of the hold); `None` for the rest (a cut lease: the member is still
/// listed until it ends).
fn event_of(kind: ChangeKind) -> Option<&'static str> {
    match kind {
        ChangeKind::Grant | ChangeKind::Handoff => Some("join"),
        ChangeKind::Proclaim => Some("value"),
        ChangeKind::Release | ChangeKind::Expire | ChangeKind::Session | ChangeKind::Revoke => Some("leave"),
        _ => None,
    }
}

fn print_list(members: &[Member], json: bool) -> Result<(), Failure> {
    if json {
        let rows: Vec<MemberJson<'_>> = members.iter().map(|m| MemberJson { token: m.token, owner: &m.owner, value: &m.value }).collect();
        return output::json(&rows);
    }
    let text: String = members.iter().map(|m| format!("{} {} {}\n", m.token, m.owner, m.value)).collect();
    output::stdout(&text)
}

fn print_event(change: &Change, value: Option<&str>, json: bool) -> Result<(), Failure> {
    let Some(event) = event_of(change.kind) else { return Ok(()) };
    let value = value.filter(|_| event != "leave");
    if json {
        let at = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        return output::json(&EventJson { event, token: change.token, owner: &change.owner, value, at });
    }
    let value = value.map(|v| format!(" {v}")).unwrap_or_default();
    output::stdout(&format!("{event} {} {}{value}\n", change.token, change.owner))
}

pub async fn members(rl: &Redlock, args: &MembersArgs, json: bool) -> Result<i32, Failure> {
    if !args.watch {
        let listed = members_of(rl, &args.name).await.map_err(|e| not_read(&e, &args.name, rl.quorum()))?;
        return print_list(&listed, json).map(|()| exit::OK);
    }
    let (mut sigint, mut sigterm) = signals()?;
    // Subscribed first, then listed (an election observer's rule): every
    // change after the list was read is in the stream. Waits while fewer
    // than a quorum of servers can be subscribed.
    let resource = resource_of(&args.name);
    let changes = tokio::select! {
        changes = rl.watch_subscribed(&resource, args.interval) => changes,
        _ = sigint.recv() => return Ok(exit::OK),
        _ = sigterm.recv() => return Ok(exit::OK),
    };
    let mut changes = Box::pin(changes);
    let listed = members_of(rl, &args.name).await.map_err(|e| not_read(&e, &args.name, rl.quorum()))?;
    print_list(&listed, json)?;
    // The stream also has what came before the list: the holds found when
    // it subscribed (as grants, without their values) and changes made
    // before the list was read. Members are told apart by token: a join
    // of a member already shown, or a leave of one never shown, is not
    // printed.
    let mut shown: HashSet<i64> = listed.iter().map(|m| m.token).collect();
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(change)) => {
                    let value = match event_of(change.kind) {
                        Some("join") if !shown.insert(change.token) => continue,
                        Some("join") if change.value.is_none() => value_of(rl, &args.name, &change.owner).await,
                        Some("leave") if !shown.remove(&change.token) => continue,
                        Some("leave") => None,
                        _ => change.value.clone(),
                    };
                    print_event(&change, value.as_deref(), json)?;
                }
                // A server that announces no leaves of this group: said once, on stderr.
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

/// The value a quorum lists `owner` with now (a join the watch found
/// held when it subscribed carries none); `None` when it is not listed.
async fn value_of(rl: &Redlock, name: &str, owner: &str) -> Option<String> {
    members_of(rl, name).await.ok()?.into_iter().find(|m| m.owner == owner).map(|m| m.value)
}

/// Too few servers answered to list the members (exit 6), or another error.
fn not_read(e: &Error, name: &str, quorum: usize) -> Failure {
    match e {
        Error::NoQuorum { outcomes, .. } => {
            explain::no_quorum(&format!("members of group {name:?} unknown"), outcomes, quorum, Op::Acquire).with("group", name)
        }
        other => explain::other(other),
    }
}
