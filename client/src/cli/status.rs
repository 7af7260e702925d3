//! status: each server's view of a resource (its holders and line) and
//! the verdict of the quorum, each permit's with --limit, or each server's
//! summary without a resource.

use std::collections::HashMap;

use futures::StreamExt;
use redlock::hold::{Kind, Request};
use redlock::{Error, InstanceOutcome, InstanceStatus, InstanceSummary, NotGranted, Outcome, Redlock};
use serde::Serialize;

use super::args::StatusArgs;
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, ceil_secs, cell, Op};

#[derive(Serialize)]
struct StatusRowJson<'a> {
    server: &'a str,
    reachable: bool,
    /// free, held, quarantine (free, but in restart quarantine),
    /// unreachable, error (replied with an error)
    state: &'static str,
    owner: Option<&'a str>,
    token: Option<i64>,
    /// Remaining lease in ms; -1: the key has no TTL.
    pttl_ms: Option<i64>,
    waiters: Option<i64>,
    /// Restart quarantine left in ms (0: none; null: unknown).
    quarantine_ms_left: Option<i64>,
    /// What went wrong, for scripts: connection_refused, dns_failure,
    /// timeout, connect_timeout, unreachable, auth_failed, module_missing, error.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    /// Who holds it on this server, oldest first.
    holders: Vec<HolderJson<'a>>,
    /// Who waits for it on this server, the head first.
    line: Vec<WaiterJson<'a>>,
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct StatusJson<'a> {
    resource: &'a str,
    /// held (by one owner on a quorum), free (grantable now), quarantine
    /// (not grantable until restart quarantines end), split (no owner on a
    /// quorum, and not grantable now), unknown (fewer than a quorum answered)
    state: &'static str,
    /// The summary line of the text output.
    summary: String,
    quorum: usize,
    servers: usize,
    answered: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a str>,
    /// With state quarantine: until enough quarantines end for a quorum.
    #[serde(skip_serializing_if = "Option::is_none")]
    quarantine_ms_left: Option<u64>,
    instances: Vec<StatusRowJson<'a>>,
}

#[derive(Serialize)]
struct SummaryJson<'a> {
    server: &'a str,
    reachable: bool,
    /// Restart quarantine left in ms (0: none; null: unknown).
    quarantine_ms_left: Option<i64>,
    /// Lock values in memory (held, or run out and not reclaimed yet).
    locks: Option<i64>,
    clients_waiting: Option<i64>,
    keys_waited: Option<i64>,
    highest_token: Option<i64>,
    /// As in `status RESOURCE`: what went wrong, for scripts.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    error: Option<&'a str>,
}

/// `status` without a resource: each server's lock service as a whole.
async fn summary_status(rl: &Redlock, json: bool) -> Result<i32, Failure> {
    let summaries = rl.summary().await;
    let rows: Vec<SummaryJson> = summaries
        .iter()
        .map(|s| SummaryJson {
            server: &s.server,
            reachable: s.reachable,
            quarantine_ms_left: s.quarantine_ms_left,
            locks: s.locks,
            clients_waiting: s.clients_waiting,
            keys_waited: s.keys_waited,
            highest_token: s.highest_token,
            kind: s.failure.as_ref().map(Outcome::kind),
            error: s.error.as_deref(),
        })
        .collect();
    let answered = summaries.iter().filter(|s| s.reachable && s.error.is_none()).count();
    if answered < rl.quorum() {
        let pseudo: Vec<InstanceOutcome> = summaries.iter().map(|s| explain::as_outcome(&s.server, s.failure.as_ref())).collect();
        let failure = explain::no_quorum("the servers' state is unknown", &pseudo, rl.quorum(), Op::Release).with("instances", &rows);
        if !json {
            output::stdout(&summary_text(&summaries))?;
        }
        return Err(failure);
    }
    if json {
        output::json(&rows)?;
    } else {
        output::stdout(&summary_text(&summaries))?;
    }
    Ok(exit::OK)
}

fn summary_text(summaries: &[InstanceSummary]) -> String {
    let dash = || "-".to_string();
    let number = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_else(dash);
    let with_errors = summaries.iter().any(|s| s.error.is_some());
    let mut header = vec!["SERVER", "REACHABLE", "QUARANTINE_MS_LEFT", "LOCKS", "WAITERS", "WAITED_KEYS", "HIGHEST_TOKEN"];
    if with_errors {
        header.push("ERROR");
    }
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let mut row = vec![
                s.server.clone(),
                if s.reachable { "yes" } else { "no" }.to_string(),
                number(s.quarantine_ms_left),
                number(s.locks),
                number(s.clients_waiting),
                number(s.keys_waited),
                number(s.highest_token),
            ];
            if with_errors {
                row.push(s.error.clone().unwrap_or_else(dash));
            }
            row
        })
        .collect();
    output::table(&header, &rows)
}

pub async fn status(rl: &Redlock, args: &StatusArgs, json: bool) -> Result<i32, Failure> {
    let Some(resource) = args.resource.as_deref() else {
        return summary_status(rl, json).await;
    };
    if let Some(limit) = args.limit {
        return permits_status(rl, resource, limit, json).await;
    }
    let statuses = rl.status(resource).await;
    let quorum = rl.quorum();
    let verdict = verdict(&statuses, quorum);
    let rows: Vec<StatusRowJson> = statuses
        .iter()
        .map(|s| StatusRowJson {
            server: &s.server,
            reachable: s.reachable,
            state: row_state(s),
            owner: s.owner.as_deref(),
            token: s.token,
            pttl_ms: s.pttl,
            waiters: s.waiters,
            quarantine_ms_left: s.quarantine_ms_left,
            kind: s.failure.as_ref().map(Outcome::kind),
            error: s.error.as_deref(),
            holders: holders_json(s),
            line: line_json(s),
        })
        .collect();
    if let Verdict::Unknown { .. } = verdict {
        let pseudo: Vec<InstanceOutcome> = statuses.iter().map(|s| explain::as_outcome(&s.server, s.failure.as_ref())).collect();
        let failure = explain::no_quorum(&format!("the state of {resource:?} is unknown"), &pseudo, quorum, Op::Release)
            .with("resource", resource)
            .with("instances", &rows);
        if !json {
            output::stdout(&status_text(resource, &statuses, quorum))?;
        }
        return Err(failure);
    }
    if json {
        output::json(&StatusJson {
            resource,
            state: verdict.state(),
            summary: verdict.text(resource, statuses.len(), quorum),
            quorum,
            servers: statuses.len(),
            answered: statuses.iter().filter(|s| answered(s)).count(),
            owner: match verdict {
                Verdict::Held { owner, .. } => Some(owner),
                _ => None,
            },
            quarantine_ms_left: match verdict {
                Verdict::Quarantine { ms_left, .. } => Some(ms_left),
                _ => None,
            },
            instances: rows,
        })?;
    } else {
        output::stdout(&status_text(resource, &statuses, quorum))?;
    }
    Ok(exit::OK)
}

#[derive(Serialize)]
struct PermitJson {
    permit: String,
    state: &'static str,
    summary: String,
}

/// `status RESOURCE --limit N`: each permit's verdict on the quorum, one
/// line each (a JSON array with --json).
async fn permits_status(rl: &Redlock, resource: &str, limit: u32, json: bool) -> Result<i32, Failure> {
    let quorum = rl.quorum();
    let mut permits = Vec::new();
    for slot in 0..limit {
        let permit = redlock::semaphore::permit_key(resource, slot);
        let statuses = rl.status(&permit).await;
        let verdict = verdict(&statuses, quorum);
        permits.push(PermitJson { state: verdict.state(), summary: verdict.text(&permit, statuses.len(), quorum), permit });
    }
    if json {
        output::json(&permits)?;
    } else {
        let text: String = permits.iter().map(|p| format!("{}\n", p.summary)).collect();
        output::stdout(&text)?;
    }
    Ok(exit::OK)
}

/// A refusal (`acquire`, `run`: held by another owner) told with what
/// the servers say now, read right after it: who holds which member of a
/// set, or how many of a semaphore's permits are free of how many (text
/// and JSON: `held`, or `permits_free` and `permits`). "Now": a holder
/// may have let go since the refusal.
pub async fn with_holders(rl: &Redlock, e: &Error, req: &Request, failure: Failure) -> Failure {
    if !matches!(e, Error::NotAcquired { why: NotGranted::Held, .. }) {
        return failure;
    }
    let quorum = rl.quorum();
    let Some(name) = req.resources.names().first() else { return failure };
    if let Kind::Permit { limit, count } = req.kind {
        // A few at a time: a semaphore has up to MAX_PERMITS permits.
        let held = futures::stream::iter(0..limit)
            .map(|slot| async move { rl.status(&redlock::semaphore::permit_key(name, slot)).await })
            .buffer_unordered(16)
            .filter(|statuses| std::future::ready(matches!(verdict(statuses, quorum), Verdict::Held { .. })))
            .count()
            .await;
        let free = usize::try_from(limit).unwrap_or(usize::MAX).saturating_sub(held);
        let mut failure = failure.with("permits_free", free).with("permits", limit);
        failure.message = format!("{}; now {free} of {limit} permits free ({count} asked)", failure.message);
        return failure;
    }
    let n = rl.servers().len();
    let mut held = Vec::new();
    for member in req.resources.names() {
        let statuses = rl.status(member).await;
        let verdict = verdict(&statuses, quorum);
        if !matches!(verdict, Verdict::Free { .. }) {
            held.push(verdict.text(member, n, quorum));
        }
    }
    if held.is_empty() {
        return failure;
    }
    let mut failure = failure.with("held", &held);
    failure.message = format!("{}; now {}", failure.message, held.join("; "));
    failure
}

fn answered(s: &InstanceStatus) -> bool {
    s.reachable && s.error.is_none()
}

/// Restart quarantine left on a server that answered, if one runs.
fn quarantined(s: &InstanceStatus) -> Option<u64> {
    s.quarantine_ms_left.filter(|ms| *ms > 0).and_then(|ms| u64::try_from(ms).ok())
}

fn row_state(s: &InstanceStatus) -> &'static str {
    if !answered(s) {
        if s.reachable {
            "error"
        } else {
            "unreachable"
        }
    } else if s.owner.is_some() {
        "held"
    } else if quarantined(s).is_some() {
        "quarantine"
    } else {
        "free"
    }
}

/// What the answers say about a resource, as a whole.
#[derive(Debug, PartialEq, Eq)]
enum Verdict<'a> {
    /// Fewer than a quorum answered.
    Unknown { answered: usize },
    /// One owner on a quorum.
    Held { owner: &'a str, count: usize },
    /// A quorum would grant it now (`quarantined`: answering servers in
    /// restart quarantine, which would not).
    Free { answered: usize, quarantined: usize },
    /// Free, but restart quarantines keep a quorum from granting it for
    /// `ms_left` (`instances` in quarantine).
    Quarantine { ms_left: u64, instances: usize },
    /// No owner on a quorum, and not grantable now.
    Split { holders: usize, servers: usize },
}

impl Verdict<'_> {
    fn state(&self) -> &'static str {
        match self {
            Verdict::Unknown { .. } => "unknown",
            Verdict::Held { .. } => "held",
            Verdict::Free { .. } => "free",
            Verdict::Quarantine { .. } => "quarantine",
            Verdict::Split { .. } => "split",
        }
    }

    fn text(&self, resource: &str, n: usize, quorum: usize) -> String {
        match self {
            Verdict::Unknown { answered } => {
                format!("{resource:?}: unknown, {answered} of {n} servers answered (quorum {quorum})")
            }
            Verdict::Held { owner, count } => {
                format!("{resource:?} is held by {} on {count} of {n} servers (quorum {quorum})", cell(owner))
            }
            Verdict::Free { answered, quarantined: 0 } => {
                format!("{resource:?} is free on {answered} of {n} servers (quorum {quorum})")
            }
            Verdict::Free { answered, quarantined } => {
                format!("{resource:?} is free on {answered} of {n} servers (quorum {quorum}; {quarantined} in restart quarantine)")
            }
            Verdict::Quarantine { ms_left, instances } => {
                format!("{resource:?} is not grantable for {} s on {instances} of {n} servers (restart quarantine)", ceil_secs(*ms_left))
            }
            Verdict::Split { holders, servers } => {
                format!("{resource:?} is held by no owner on a quorum ({quorum} of {n}): {holders} holder(s) on {servers} server(s)")
            }
        }
    }
}

/// Who holds `resource` according to the answers, and whether a quorum
/// could grant it now. A server in restart quarantine never counts as
/// granting: when quarantines alone keep a quorum from granting a free
/// resource, the verdict is `Quarantine`, never `Free`.
fn verdict(statuses: &[InstanceStatus], quorum: usize) -> Verdict<'_> {
    let answering: Vec<&InstanceStatus> = statuses.iter().filter(|s| answered(s)).collect();
    if answering.len() < quorum {
        return Verdict::Unknown { answered: answering.len() };
    }
    let mut holders: HashMap<&str, usize> = HashMap::new();
    for s in &answering {
        if let Some(owner) = s.owner.as_deref() {
            *holders.entry(owner).or_default() += 1;
        }
    }
    if let Some((owner, &count)) = holders.iter().max_by_key(|(_, count)| **count) {
        if count >= quorum {
            return Verdict::Held { owner, count };
        }
    }
    let free_now = answering.iter().filter(|s| s.owner.is_none() && quarantined(s).is_none()).count();
    let quarantined_total = answering.iter().filter(|s| quarantined(s).is_some()).count();
    let split = Verdict::Split { holders: holders.len(), servers: holders.values().sum() };
    if free_now >= quorum {
        return if holders.is_empty() { Verdict::Free { answered: answering.len(), quarantined: quarantined_total } } else { split };
    }
    let mut waiting: Vec<u64> = answering.iter().filter(|s| s.owner.is_none()).filter_map(|s| quarantined(s)).collect();
    if !waiting.is_empty() && free_now + waiting.len() >= quorum {
        waiting.sort_unstable();
        let ms_left = waiting.get(quorum - free_now - 1).copied().unwrap_or(0);
        return Verdict::Quarantine { ms_left, instances: quarantined_total };
    }
    split
}

#[derive(Serialize)]
struct HolderJson<'a> {
    owner: &'a str,
    token: Option<i64>,
    pttl_ms: i64,
    held_ms: Option<i64>,
    session: bool,
}

#[derive(Serialize)]
struct WaiterJson<'a> {
    owner: &'a str,
    mode: &'a str,
    limit: Option<i64>,
    waited_ms: i64,
    /// -1: no limit.
    wait_left_ms: i64,
}

fn holders_json(s: &InstanceStatus) -> Vec<HolderJson<'_>> {
    s.holders
        .iter()
        .map(|h| HolderJson { owner: &h.owner, token: h.token, pttl_ms: h.pttl, held_ms: h.held_ms, session: h.session })
        .collect()
}

fn line_json(s: &InstanceStatus) -> Vec<WaiterJson<'_>> {
    s.line
        .iter()
        .map(|w| WaiterJson { owner: &w.owner, mode: &w.mode, limit: w.limit, waited_ms: w.waited_ms, wait_left_ms: w.wait_left_ms })
        .collect()
}

/// Under the table: each server's holders (how long each has held it,
/// whether it is bound to its connection) and its line, in order.
fn holders_and_line(statuses: &[InstanceStatus]) -> String {
    let secs = |ms: i64| format!("{:.1} s", ms as f64 / 1000.0);
    let mut text = String::new();
    for s in statuses {
        if !s.holders.is_empty() {
            let holders: Vec<String> = s
                .holders
                .iter()
                .map(|h| {
                    let held = h.held_ms.map(|ms| format!(", held {}", secs(ms))).unwrap_or_default();
                    let session = if h.session { ", session" } else { "" };
                    format!("{}{held}{session}", cell(&h.owner))
                })
                .collect();
            text.push_str(&format!("{}  holders: {}\n", s.server, holders.join("; ")));
        }
        if !s.line.is_empty() {
            let line: Vec<String> = s
                .line
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let mode = match w.limit {
                        Some(n) => format!("{} of {n}", w.mode),
                        None => w.mode.clone(),
                    };
                    let left = if w.wait_left_ms < 0 { "no limit".to_string() } else { format!("{} left", secs(w.wait_left_ms)) };
                    format!("{}. {} ({mode}, waited {}, {left})", i + 1, cell(&w.owner), secs(w.waited_ms))
                })
                .collect();
            let more = s.waiters.unwrap_or(0) - s.line.len() as i64;
            let more = if more > 0 { format!("; {more} more") } else { String::new() };
            text.push_str(&format!("{}  line: {}{more}\n", s.server, line.join("; ")));
        }
    }
    text
}

fn status_text(resource: &str, statuses: &[InstanceStatus], quorum: usize) -> String {
    let dash = || "-".to_string();
    let with_errors = statuses.iter().any(|s| s.error.is_some());
    let quarantined = statuses.iter().any(|s| s.quarantine_ms_left.is_some_and(|ms| ms > 0));
    let mut header = vec!["SERVER", "REACHABLE", "OWNER", "TOKEN", "LEASE_MS", "WAITERS"];
    if quarantined {
        header.push("QUARANTINE_MS_LEFT");
    }
    if with_errors {
        header.push("ERROR");
    }
    let rows: Vec<Vec<String>> = statuses
        .iter()
        .map(|s| {
            let mut row = vec![
                s.server.clone(),
                if s.reachable { "yes" } else { "no" }.to_string(),
                s.owner.as_deref().map(cell).unwrap_or_else(dash),
                s.token.map(|t| t.to_string()).unwrap_or_else(dash),
                s.pttl.map(|p| if p < 0 { "no-ttl".to_string() } else { p.to_string() }).unwrap_or_else(dash),
                s.waiters.map(|w| w.to_string()).unwrap_or_else(dash),
            ];
            if quarantined {
                row.push(s.quarantine_ms_left.filter(|ms| *ms > 0).map(|ms| ms.to_string()).unwrap_or_else(dash));
            }
            if with_errors {
                row.push(s.error.clone().unwrap_or_else(dash));
            }
            row
        })
        .collect();
    let mut text = output::table(&header, &rows);
    text.push_str(&holders_and_line(statuses));
    text.push_str(&summary(resource, statuses, quorum));
    text.push('\n');
    text
}

/// The summary line: who holds `resource`, or whether it is grantable.
fn summary(resource: &str, statuses: &[InstanceStatus], quorum: usize) -> String {
    verdict(statuses, quorum).text(resource, statuses.len(), quorum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(server: &str, owner: Option<&str>) -> InstanceStatus {
        InstanceStatus {
            server: server.into(),
            reachable: true,
            owner: owner.map(String::from),
            token: owner.map(|_| 7),
            pttl: owner.map(|_| 900),
            waiters: Some(0),
            limit: None,
            quarantine_ms_left: Some(0),
            error: None,
            failure: None,
            holders: Vec::new(),
            line: Vec::new(),
        }
    }

    #[test]
    fn summary_names_the_quorum_holder() {
        let s = [st("a", Some("me")), st("b", Some("me")), st("c", None)];
        assert_eq!(summary("r", &s, 2), "\"r\" is held by me on 2 of 3 servers (quorum 2)");
        let s = [st("a", Some("me")), st("b", Some("you")), st("c", None)];
        assert!(summary("r", &s, 2).contains("no owner on a quorum"));
        let mut s = [st("a", None), st("b", None), st("c", None)];
        assert_eq!(summary("r", &s, 2), "\"r\" is free on 3 of 3 servers (quorum 2)");
        s[0].error = Some("timeout".into());
        s[1].error = Some("timeout".into());
        assert_eq!(summary("r", &s, 2), "\"r\": unknown, 1 of 3 servers answered (quorum 2)");
    }

    #[test]
    fn a_quarantine_that_keeps_a_quorum_from_granting_is_never_free() {
        let q = |server: &str, ms: i64| InstanceStatus { quarantine_ms_left: Some(ms), ..st(server, None) };
        let s = [q("a", 57_800), q("b", 57_700), q("c", 57_900)];
        assert_eq!(summary("orders:42", &s, 2), "\"orders:42\" is not grantable for 58 s on 3 of 3 servers (restart quarantine)");
        assert_eq!(verdict(&s, 2), Verdict::Quarantine { ms_left: 57_800, instances: 3 });
        // One free server: the shortest quarantine of the rest decides.
        let s = [st("a", None), q("b", 9_000), q("c", 4_200)];
        assert_eq!(summary("r", &s, 2), "\"r\" is not grantable for 5 s on 2 of 3 servers (restart quarantine)");
        // A quorum free without the quarantined one: free, and said so.
        let s = [st("a", None), st("b", None), q("c", 4_200)];
        assert_eq!(summary("r", &s, 2), "\"r\" is free on 3 of 3 servers (quorum 2; 1 in restart quarantine)");
        // Held on a quorum: held, whatever the quarantines.
        let held = |server: &str| InstanceStatus { quarantine_ms_left: Some(1_000), ..st(server, Some("me")) };
        assert_eq!(verdict(&[held("a"), held("b"), q("c", 1_000)], 2), Verdict::Held { owner: "me", count: 2 });
        assert_eq!(row_state(&q("a", 1)), "quarantine");
        assert_eq!(row_state(&held("a")), "held");
    }

    #[test]
    fn status_table_has_an_error_column_only_when_needed() {
        let mut s = vec![st("a", Some("me")), st("b", None)];
        let text = status_text("r", &s, 2);
        assert!(text.starts_with("SERVER  REACHABLE  OWNER  TOKEN  LEASE_MS  WAITERS\n"), "{text}");
        assert!(text.contains("a       yes        me     7      900       0\n"), "{text}");
        s[1].reachable = false;
        s[1].waiters = None;
        s[1].error = Some("timeout".into());
        let text = status_text("r", &s, 2);
        assert!(text.contains("ERROR"), "{text}");
        assert!(text.contains("b       no         -      -      -         -        timeout"), "{text}");
    }

    #[test]
    fn status_table_shows_a_quarantine_only_when_one_runs() {
        let mut s = vec![st("a", None), st("b", None)];
        assert!(!status_text("r", &s, 2).contains("QUARANTINE"));
        s[1].quarantine_ms_left = Some(41_250);
        let text = status_text("r", &s, 2);
        assert!(text.starts_with("SERVER  REACHABLE  OWNER  TOKEN  LEASE_MS  WAITERS  QUARANTINE_MS_LEFT\n"), "{text}");
        assert!(text.contains("b       yes        -      -      -         0        41250\n"), "{text}");
        assert!(text.contains("a       yes        -      -      -         0        -\n"), "{text}");
    }
}
