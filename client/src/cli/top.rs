//! `redlock top`: the most contended locks across the servers, refreshed.
//!
//! Each server answers `LOCK.TOP` (a cluster's masters together); a
//! quorum client's place in line (`redlock:line:R`; a permit's line is
//! that of its key, `redlock:line:R:permit:I`, and `redlock:permit-line:R`
//! a semaphore's line in clients that predate per-permit lines) counts for
//! the resource `R` it queues for. Per resource the table shows
//! the most any one server saw: waiters, the oldest wait, holders and the
//! longest hold, and on how many servers it is contended.

use std::collections::BTreeMap;
use std::io::IsTerminal;

use redlock::{InstanceTop, Outcome, Redlock};
use serde::Serialize;

use super::args::TopArgs;
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, Op};

/// One resource across the servers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Busiest {
    pub resource: String,
    /// The most waiting on any one server (a quorum client waits on each).
    pub waiters: i64,
    pub oldest_wait_ms: i64,
    /// `exclusive` or `shared`, as a server holding it says.
    pub mode: Option<String>,
    pub holders: i64,
    pub longest_hold_ms: Option<i64>,
    /// Servers on which it has waiters.
    pub servers: usize,
}

/// The resource a contended key stands for: a quorum client's line for
/// `R` stands for `R`.
pub fn resource_of(key: &str) -> &str {
    ["redlock:line:", "redlock:permit-line:"].iter().find_map(|prefix| key.strip_prefix(prefix)).unwrap_or(key)
}

/// The servers' lists as one, busiest first (most waiters, then the
/// longest wait, then by name), at most `count`.
pub fn merge(tops: &[InstanceTop], count: usize) -> Vec<Busiest> {
    let mut all: BTreeMap<String, Busiest> = BTreeMap::new();
    for top in tops {
        // This server's view of each resource: its keys added up.
        let mut here: BTreeMap<&str, Busiest> = BTreeMap::new();
        for lock in &top.locks {
            let resource = resource_of(&lock.key);
            let b = here.entry(resource).or_default();
            b.waiters += lock.waiters;
            b.oldest_wait_ms = b.oldest_wait_ms.max(lock.oldest_wait_ms);
            if lock.key == resource {
                b.mode.clone_from(&lock.mode);
                b.holders = lock.holders;
                b.longest_hold_ms = lock.longest_hold_ms;
            }
        }
        for (resource, b) in here {
            let m = all.entry(resource.to_string()).or_insert_with(|| Busiest { resource: resource.to_string(), ..Busiest::default() });
            m.waiters = m.waiters.max(b.waiters);
            m.oldest_wait_ms = m.oldest_wait_ms.max(b.oldest_wait_ms);
            if m.mode.is_none() {
                m.mode = b.mode;
            }
            m.holders = m.holders.max(b.holders);
            m.longest_hold_ms = m.longest_hold_ms.max(b.longest_hold_ms);
            m.servers += 1;
        }
    }
    let mut busiest: Vec<Busiest> = all.into_values().collect();
    busiest
        .sort_by(|a, b| b.waiters.cmp(&a.waiters).then(b.oldest_wait_ms.cmp(&a.oldest_wait_ms)).then_with(|| a.resource.cmp(&b.resource)));
    busiest.truncate(count);
    busiest
}

#[derive(Serialize)]
struct InstanceJson<'a> {
    server: &'a str,
    reachable: bool,
    /// Contended keys on this server, as `LOCK.TOP` lists them.
    locks: Vec<LockJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct LockJson<'a> {
    key: &'a str,
    waiters: i64,
    oldest_wait_ms: i64,
    mode: Option<&'a str>,
    holders: i64,
    longest_hold_ms: Option<i64>,
}

#[derive(Serialize)]
struct TopJson<'a> {
    resources: &'a [Busiest],
    instances: Vec<InstanceJson<'a>>,
}

fn text(busiest: &[Busiest], tops: &[InstanceTop], quorum: usize) -> String {
    let dash = || "-".to_string();
    let header = ["RESOURCE", "WAITERS", "OLDEST_WAIT_MS", "MODE", "HOLDERS", "LONGEST_HOLD_MS", "SERVERS"];
    let rows: Vec<Vec<String>> = busiest
        .iter()
        .map(|b| {
            vec![
                output::cell(&b.resource),
                b.waiters.to_string(),
                b.oldest_wait_ms.to_string(),
                b.mode.clone().unwrap_or_else(dash),
                b.holders.to_string(),
                b.longest_hold_ms.map_or_else(dash, |ms| ms.to_string()),
                format!("{}/{}", b.servers, tops.len()),
            ]
        })
        .collect();
    let answered = tops.iter().filter(|t| t.reachable && t.error.is_none()).count();
    let mut out = if rows.is_empty() { "no lock has waiters\n".to_string() } else { output::table(&header, &rows) };
    out.push_str(&format!("{answered} of {} servers answered (quorum {quorum})\n", tops.len()));
    for t in tops.iter().filter(|t| t.error.is_some()) {
        out.push_str(&format!("{}: {}\n", t.server, t.error.as_deref().unwrap_or("")));
    }
    out
}

/// `redlock top`: refreshes until interrupted or `--iterations` tables.
/// Fails (no quorum) only when the last table was made without a quorum
/// of servers answering.
pub async fn top(rl: &Redlock, args: &TopArgs, json: bool) -> Result<i32, Failure> {
    let count = usize::try_from(args.count).unwrap_or(usize::MAX);
    let terminal = !json && std::io::stdout().is_terminal();
    let mut refreshes = 0u32;
    loop {
        let started = tokio::time::Instant::now();
        let tops = rl.top(count).await;
        let busiest = merge(&tops, count);
        if json {
            let instances = tops
                .iter()
                .map(|t| InstanceJson {
                    server: &t.server,
                    reachable: t.reachable,
                    locks: t
                        .locks
                        .iter()
                        .map(|l| LockJson {
                            key: &l.key,
                            waiters: l.waiters,
                            oldest_wait_ms: l.oldest_wait_ms,
                            mode: l.mode.as_deref(),
                            holders: l.holders,
                            longest_hold_ms: l.longest_hold_ms,
                        })
                        .collect(),
                    kind: t.failure.as_ref().map(Outcome::kind),
                    error: t.error.as_deref(),
                })
                .collect();
            output::json(&TopJson { resources: &busiest, instances })?;
        } else {
            // A terminal shows one table in place; a pipe gets them in turn.
            let clear = if terminal {
                "\x1b[H\x1b[2J"
            } else if refreshes > 0 {
                "\n"
            } else {
                ""
            };
            output::stdout(&format!("{clear}{}", text(&busiest, &tops, rl.quorum())))?;
        }
        refreshes += 1;
        if args.iterations.is_some_and(|n| refreshes >= n) {
            let answered = tops.iter().filter(|t| t.reachable && t.error.is_none()).count();
            if answered < rl.quorum() {
                let pseudo: Vec<_> = tops.iter().map(|t| explain::as_outcome(&t.server, t.failure.as_ref())).collect();
                return Err(explain::no_quorum("the servers' lines are unknown", &pseudo, rl.quorum(), Op::Release));
            }
            return Ok(exit::OK);
        }
        tokio::time::sleep_until(started + args.interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlock::ContendedLock;

    fn lock(key: &str, waiters: i64, oldest: i64, holders: i64, held: Option<i64>) -> ContendedLock {
        ContendedLock {
            key: key.into(),
            waiters,
            oldest_wait_ms: oldest,
            mode: (holders > 0).then(|| "exclusive".to_string()),
            holders,
            longest_hold_ms: held,
        }
    }

    fn server(name: &str, locks: Vec<ContendedLock>) -> InstanceTop {
        InstanceTop { server: name.into(), reachable: true, locks, error: None, failure: None }
    }

    #[test]
    fn lines_count_for_their_resource_and_servers_are_merged_by_their_largest() {
        assert_eq!(resource_of("redlock:line:orders"), "orders");
        assert_eq!(resource_of("redlock:permit-line:pool"), "pool");
        assert_eq!(resource_of("plain"), "plain");
        let tops = [
            // The line instance: 4 in line for orders, the head on the lock.
            server(
                "a",
                vec![
                    lock("redlock:line:orders", 4, 900, 1, Some(50)),
                    lock("orders", 1, 20, 1, Some(700)),
                    lock("jobs", 2, 100, 1, Some(5)),
                ],
            ),
            server("b", vec![lock("orders", 1, 25, 1, Some(710)), lock("jobs", 3, 300, 1, Some(9))]),
            server("c", vec![]),
        ];
        let merged = merge(&tops, 10);
        let names: Vec<&str> = merged.iter().map(|b| b.resource.as_str()).collect();
        assert_eq!(names, ["orders", "jobs"], "most waiters first");
        let orders = &merged[0];
        assert_eq!((orders.waiters, orders.oldest_wait_ms, orders.servers), (5, 900, 2), "the line and the head on one server");
        assert_eq!((orders.holders, orders.longest_hold_ms), (1, Some(710)), "the lock's own holders, not the line's");
        let jobs = &merged[1];
        assert_eq!((jobs.waiters, jobs.oldest_wait_ms, jobs.longest_hold_ms), (3, 300, Some(9)));
        assert_eq!(merge(&tops, 1).len(), 1, "at most --count");
        assert!(merge(&[server("a", vec![])], 10).is_empty());
    }

    #[test]
    fn ties_go_to_the_longest_wait_then_the_name() {
        let tops = [server("a", vec![lock("b", 1, 5, 0, None), lock("a", 1, 5, 0, None), lock("c", 1, 50, 0, None)])];
        let names: Vec<String> = merge(&tops, 10).into_iter().map(|b| b.resource).collect();
        assert_eq!(names, ["c", "a", "b"]);
    }
}
