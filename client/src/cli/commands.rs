//! acquire, release, extend, status.

use std::collections::HashMap;
use std::time::Instant;

use redlock::{InstanceStatus, InstanceSummary, Redlock};
use serde::Serialize;

use super::args::{AcquireArgs, ExtendArgs, ReleaseArgs, StatusArgs};
use super::exit::{self, Failure};
use super::output::{self, cell, millis, outcomes_json, pairs, OutcomeJson};

/// `now + wait`, or a usage error for a wait too long to represent.
pub fn deadline(wait: Option<std::time::Duration>) -> Result<Option<Instant>, Failure> {
    match wait {
        None => Ok(None),
        Some(w) => Instant::now()
            .checked_add(w)
            .map(Some)
            .ok_or_else(|| Failure::usage(format!("--wait {} is too long", humantime::format_duration(w)))),
    }
}

#[derive(Serialize)]
struct AcquireJson<'a> {
    resource: &'a str,
    owner: &'a str,
    token: Option<i64>,
    validity_ms: u64,
    ttl_ms: u64,
    fenced: usize,
    instances: Vec<OutcomeJson>,
}

pub async fn acquire(rl: &Redlock, args: &AcquireArgs, json: bool) -> Result<i32, Failure> {
    let deadline = deadline(args.wait)?;
    let mut lock = rl
        .lock_until(&args.resource, args.ttl, deadline)
        .await
        .map_err(|e| Failure::from_lock_error(&e, exit::NOT_ACQUIRED))?;
    // The lock outlives this process and is released by another one, which
    // knows nothing of the place in line: give it up now.
    rl.leave_line_of(&mut lock).await;
    // Validity left now, after the round trips, not at the acquisition.
    let validity_ms = millis(lock.remaining());
    if json {
        output::json(&AcquireJson {
            resource: &lock.resource,
            owner: &lock.owner,
            token: lock.token,
            validity_ms,
            ttl_ms: millis(lock.ttl),
            fenced: lock.fenced,
            instances: outcomes_json(&lock.instances),
        })?;
    } else {
        output::stdout(&pairs(&[
            ("resource", lock.resource.clone()),
            ("owner", lock.owner.clone()),
            ("token", lock.token.map(|t| t.to_string()).unwrap_or_default()),
            ("validity_ms", validity_ms.to_string()),
        ]))?;
    }
    Ok(exit::OK)
}

#[derive(Serialize)]
struct ReleaseJson<'a> {
    resource: &'a str,
    released: usize,
    servers: usize,
    quorum: usize,
    instances: Vec<OutcomeJson>,
}

pub async fn release(rl: &Redlock, args: &ReleaseArgs, json: bool) -> Result<i32, Failure> {
    let released = rl
        .release_owner(&args.resource, &args.owner)
        .await
        .map_err(|e| Failure::from_lock_error(&e, exit::NOT_RELEASED))?;
    let (servers, quorum) = (rl.servers().len(), rl.quorum());
    if json {
        output::json(&ReleaseJson {
            resource: &args.resource,
            released: released.released,
            servers,
            quorum,
            instances: outcomes_json(&released.instances),
        })?;
    } else {
        output::stdout(&pairs(&[("released", released.released.to_string()), ("servers", servers.to_string())]))?;
    }
    if released.released >= quorum {
        return Ok(exit::OK);
    }
    Err(Failure::new(
        exit::NOT_RELEASED,
        format!(
            "lock {:?} of owner {:?} released on {} of {} servers, quorum {}: {}",
            args.resource,
            args.owner,
            released.released,
            servers,
            quorum,
            redlock::error::Outcomes(&released.instances)
        ),
    ))
}

#[derive(Serialize)]
struct ExtendJson<'a> {
    resource: &'a str,
    owner: &'a str,
    validity_ms: u64,
    ttl_ms: u64,
    extended: usize,
    instances: Vec<OutcomeJson>,
}

pub async fn extend(rl: &Redlock, args: &ExtendArgs, json: bool) -> Result<i32, Failure> {
    let lock = rl
        .extend_owner(&args.resource, &args.owner, args.ttl)
        .await
        .map_err(|e| Failure::from_lock_error(&e, exit::QUORUM_LOST))?;
    let extended = lock.instances.iter().filter(|o| o.outcome == redlock::Outcome::Done).count();
    let validity_ms = millis(lock.remaining());
    if json {
        output::json(&ExtendJson {
            resource: &args.resource,
            owner: &args.owner,
            validity_ms,
            ttl_ms: millis(args.ttl),
            extended,
            instances: outcomes_json(&lock.instances),
        })?;
    } else {
        output::stdout(&pairs(&[
            ("resource", args.resource.clone()),
            ("owner", args.owner.clone()),
            ("validity_ms", validity_ms.to_string()),
            ("extended", extended.to_string()),
        ]))?;
    }
    Ok(exit::OK)
}

#[derive(Serialize)]
struct StatusJson<'a> {
    server: &'a str,
    reachable: bool,
    owner: Option<&'a str>,
    token: Option<i64>,
    /// Remaining lease in ms; -1: the key has no TTL.
    pttl_ms: Option<i64>,
    waiters: Option<i64>,
    /// Restart quarantine left in ms (0: none; null: unknown).
    quarantine_ms_left: Option<i64>,
    error: Option<&'a str>,
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
    error: Option<&'a str>,
}

/// `status` without a resource: each server's lock service as a whole.
async fn summary_status(rl: &Redlock, json: bool) -> Result<i32, Failure> {
    let summaries = rl.summary().await;
    if json {
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
                error: s.error.as_deref(),
            })
            .collect();
        output::json(&rows)?;
    } else {
        output::stdout(&summary_text(&summaries))?;
    }
    let answered = summaries.iter().filter(|s| s.reachable && s.error.is_none()).count();
    quorum_answered(rl, answered, summaries.len(), "")
}

/// Exit status of `status`: a general failure when fewer than a quorum
/// answered without error (`unknown` says what is then unknown).
fn quorum_answered(rl: &Redlock, answered: usize, servers: usize, unknown: &str) -> Result<i32, Failure> {
    if answered < rl.quorum() {
        return Err(Failure::general(format!(
            "only {answered} of {servers} servers answered without error (quorum {}){unknown}",
            rl.quorum()
        )));
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
    let statuses = rl.status(resource).await;
    if json {
        let rows: Vec<StatusJson> = statuses
            .iter()
            .map(|s| StatusJson {
                server: &s.server,
                reachable: s.reachable,
                owner: s.owner.as_deref(),
                token: s.token,
                pttl_ms: s.pttl,
                waiters: s.waiters,
                quarantine_ms_left: s.quarantine_ms_left,
                error: s.error.as_deref(),
            })
            .collect();
        output::json(&rows)?;
    } else {
        output::stdout(&status_text(resource, &statuses, rl.quorum()))?;
    }
    let answered = statuses.iter().filter(|s| s.reachable && s.error.is_none()).count();
    quorum_answered(rl, answered, statuses.len(), &format!(": the state of {resource:?} is unknown"))
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
    text.push_str(&summary(resource, statuses, quorum));
    text.push('\n');
    text
}

/// Who holds `resource` according to the answers.
fn summary(resource: &str, statuses: &[InstanceStatus], quorum: usize) -> String {
    let answered = statuses.iter().filter(|s| s.reachable && s.error.is_none()).count();
    let mut holders: HashMap<&str, usize> = HashMap::new();
    for s in statuses {
        if let Some(owner) = s.owner.as_deref() {
            *holders.entry(owner).or_default() += 1;
        }
    }
    let n = statuses.len();
    if answered < quorum {
        return format!("{resource:?}: unknown, {answered} of {n} servers answered (quorum {quorum})");
    }
    match holders.iter().max_by_key(|(_, count)| **count) {
        None => format!("{resource:?} is free on {answered} of {n} servers (quorum {quorum})"),
        Some((owner, &count)) if count >= quorum => {
            format!("{resource:?} is held by {} on {count} of {n} servers (quorum {quorum})", cell(owner))
        }
        Some(_) => format!(
            "{resource:?} is held by no owner on a quorum ({quorum} of {n}): {} holder(s) on {} server(s)",
            holders.len(),
            holders.values().sum::<usize>()
        ),
    }
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
            quarantine_ms_left: Some(0),
            error: None,
            failure: None,
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
