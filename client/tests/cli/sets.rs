//! Several resources and several permits at once through the `redlock`
//! program (issue 42): `acquire a b`, `run a b -- cmd`, `--permits K`,
//! `release`/`extend` of a set by owner, and the usage errors around them.

use crate::common;

use std::time::{Duration, Instant};

use common::cli::Ran;
use common::{eventually, relaxed, Cluster};
use serde_json::Value;

/// Exit statuses (`redlock --help`).
const USAGE: i32 = 2;
const NOT_ACQUIRED: i32 = 3;
const NOT_RELEASED: i32 = 4;
const RUN_NOT_LOCKED: i32 = 75;
/// No CLI invocation here may take longer.
const CLI_DEADLINE: Duration = Duration::from_secs(30);

fn redlock(c: &Cluster, args: &[&str]) -> tokio::process::Command {
    common::cli::redlock(&c.urls().join(","), args)
}

async fn run(c: &Cluster, args: &[&str], what: &str) -> Ran {
    common::cli::run(redlock(c, args), CLI_DEADLINE, what).await
}

fn json(ran: &Ran) -> Value {
    serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {:?}", ran.stdout))
}

fn names(v: &Value) -> Vec<String> {
    v.as_array().unwrap_or_else(|| panic!("not a list: {v}")).iter().map(|n| n.as_str().expect("a name").to_string()).collect()
}

/// Every server holds `key` for `owner` with `token`.
async fn held_by(c: &Cluster, key: &str, owner: &str, token: i64) {
    for (i, info) in c.infos(key).await.into_iter().enumerate() {
        let info = info.unwrap_or_else(|| panic!("{key} not held on server {i}"));
        assert_eq!((info.owner.as_str(), info.token), (owner, Some(token)), "{key} on server {i}");
    }
}

/// `acquire a b`: both held on every server by one owner with one token;
/// extended and released as a set by that owner from another process
/// (`--owner`, and the positional form), not by a stranger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_holds_a_set_with_one_owner_and_token_and_release_extend_take_it_by_owner() {
    let c = Cluster::start(5);
    let ran = run(&c, &["acquire", "set:a", "set:b", "--ttl", "30s", "--json"], "acquire a b").await;
    assert_eq!(ran.code, Some(0), "stderr: {}", ran.stderr);
    let out = json(&ran);
    assert_eq!(out["resource"], "set:a, set:b", "{out}");
    assert_eq!(names(&out["resources"]), ["set:a", "set:b"], "{out}");
    let owner = out["owner"].as_str().expect("owner").to_string();
    let token = out["token"].as_i64().expect("token");
    held_by(&c, "set:a", &owner, token).await;
    held_by(&c, "set:b", &owner, token).await;

    // The text output names the set too.
    let text = run(&c, &["acquire", "set:c", "set:d", "--ttl", "30s"], "acquire c d, text").await;
    assert_eq!(text.code, Some(0), "stderr: {}", text.stderr);
    assert!(text.stdout.starts_with("resource: set:c, set:d\n"), "{}", text.stdout);

    let stranger = run(&c, &["release", "set:a", "set:b", "--owner", "not-the-owner"], "release by a stranger").await;
    assert_eq!(stranger.code, Some(NOT_RELEASED), "stderr: {}", stranger.stderr);
    held_by(&c, "set:a", &owner, token).await;

    let extended = run(&c, &["extend", "set:a", "set:b", "--owner", &owner, "--ttl", "90s", "--json"], "extend a b").await;
    assert_eq!(extended.code, Some(0), "stderr: {}", extended.stderr);
    let out = json(&extended);
    assert_eq!((out["resource"].as_str(), out["extended"].as_u64()), (Some("set:a, set:b"), Some(5)), "{out}");
    assert_eq!(names(&out["resources"]), ["set:a", "set:b"], "{out}");
    for key in ["set:a", "set:b"] {
        let pttls: Vec<i64> = c.infos(key).await.iter().map(|i| i.as_ref().map_or(-2, |i| i.pttl)).collect();
        assert!(pttls.iter().all(|p| *p > 30_000), "{key} extended to 90 s on every server: {pttls:?}");
    }

    let released = run(&c, &["release", "set:a", "set:b", "--owner", &owner, "--json"], "release a b").await;
    assert_eq!(released.code, Some(0), "stderr: {}", released.stderr);
    let out = json(&released);
    assert_eq!((out["resource"].as_str(), out["released"].as_u64()), (Some("set:a, set:b"), Some(5)), "{out}");
    assert_eq!(c.infos("set:a").await, vec![None; 5]);
    assert_eq!(c.infos("set:b").await, vec![None; 5]);

    // RESOURCE... OWNER without --owner: the last name is the owner.
    let owner = text.stdout.lines().find_map(|l| l.strip_prefix("owner: ")).expect("owner line");
    let released = run(&c, &["release", "set:c", "set:d", owner], "release c d OWNER").await;
    assert_eq!(released.code, Some(0), "stderr: {}", released.stderr);
    assert_eq!(c.infos("set:c").await, vec![None; 5]);
    assert_eq!(c.infos("set:d").await, vec![None; 5]);
}

/// A set with one member held elsewhere is not acquired (exit 3, 75 for
/// `run`, naming the member held and its owner) and takes nothing; with `--wait` it waits, holding no member,
/// and is granted once that member is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_a_member_held_elsewhere_takes_nothing_and_waits_for_it() {
    let c = Cluster::start(5);
    let lib = c.redlock(relaxed());
    let other = lib.lock("busy:b", Duration::from_secs(60)).await.expect("lock busy:b");

    let refused = run(&c, &["acquire", "busy:a", "busy:b", "--ttl", "30s", "--json"], "acquire a b, b held").await;
    assert_eq!(refused.code, Some(NOT_ACQUIRED), "stdout {} stderr {}", refused.stdout, refused.stderr);
    assert_eq!(json(&refused)["error"]["kind"], "held", "{}", refused.stdout);
    // The refusal names the member held and by whom, and only that one.
    let held = format!("\"busy:b\" is held by {} on 5 of 5 servers", other.owner);
    assert_eq!(json(&refused)["error"]["held"], serde_json::json!([format!("{held} (quorum 3)")]), "{}", refused.stdout);
    assert_eq!(c.infos("busy:a").await, vec![None; 5], "a refused set takes no member");
    let ran = run(&c, &["run", "busy:a", "busy:b", "--", "sh", "-c", "echo ran"], "run a b, b held").await;
    assert_eq!(ran.code, Some(RUN_NOT_LOCKED), "stderr: {}", ran.stderr);
    assert!(!ran.stdout.contains("ran"), "the command must not run: {}", ran.stdout);
    assert!(ran.stderr.contains(&held), "stderr: {}", ran.stderr);
    assert_eq!(c.infos("busy:a").await, vec![None; 5], "a refused set takes no member");

    let started = Instant::now();
    let waiting =
        redlock(&c, &["acquire", "busy:a", "busy:b", "--ttl", "30s", "--wait", "25s", "--json"]).spawn().expect("spawn waiting acquire");
    // The set waits on the held member on every server.
    eventually(Duration::from_secs(20), "the set to wait for busy:b", || async {
        c.infos("busy:b").await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters > 0))
    })
    .await;
    assert_eq!(c.infos("busy:a").await, vec![None; 5], "a waiting set holds no member");
    lib.release(&other).await.expect("release busy:b");
    let granted = common::cli::finish(waiting, started, CLI_DEADLINE, "acquire a b --wait").await;
    assert_eq!(granted.code, Some(0), "stderr: {}", granted.stderr);
    let out = json(&granted);
    let (owner, token) = (out["owner"].as_str().expect("owner"), out["token"].as_i64().expect("token"));
    assert!(token > other.token.expect("a token"), "the set's token {token} is above busy:b's earlier one {:?}", other.token);
    // A waited grant is the quorum's: servers that had not granted yet
    // when a quorum had may have been given up. Each server holds the set
    // whole or not at all.
    let (a, b) = (c.infos("busy:a").await, c.infos("busy:b").await);
    let holds = |i: &Option<common::Info>| i.as_ref().is_some_and(|i| i.owner == owner && i.token == Some(token));
    let whole = a.iter().zip(&b).filter(|(a, b)| holds(a) && holds(b)).count();
    assert!(whole >= 3, "the set held whole on a quorum of 5: {a:?} {b:?}");
    assert!(a.iter().zip(&b).all(|(a, b)| holds(a) == holds(b)), "no server holds half the set: {a:?} {b:?}");
}

/// `run a b -- cmd`: the command sees both names in REDLOCK_RESOURCES
/// (one a line) and joined in REDLOCK_RESOURCE; both are held while it
/// runs with one token, and released after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_holds_a_set_and_names_it_to_the_command() {
    let c = Cluster::start(5);
    let script = "echo \"$REDLOCK_RESOURCES\"; echo \"$REDLOCK_RESOURCE\"; echo $REDLOCK_TOKEN";
    let ran = run(&c, &["run", "job:a", "job:b", "--", "sh", "-c", script], "run a b").await;
    assert_eq!(ran.code, Some(0), "stderr: {}", ran.stderr);
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines[..3], ["job:a", "job:b", "job:a, job:b"], "{}", ran.stdout);
    assert!(lines.get(3).and_then(|t| t.parse::<i64>().ok()).is_some_and(|t| t > 0), "one token: {}", ran.stdout);
    assert_eq!(c.infos("job:a").await, vec![None; 5], "released when the command exited");
    assert_eq!(c.infos("job:b").await, vec![None; 5], "released when the command exited");

    // While the command runs, every member is held by one owner.
    let script = "echo $REDLOCK_OWNER $REDLOCK_TOKEN; cat >/dev/null";
    let mut holder = redlock(&c, &["run", "--ttl", "30s", "job:a", "job:b", "--", "sh", "-c", script]);
    holder.stdin(std::process::Stdio::piped());
    let started = Instant::now();
    let mut child = holder.spawn().expect("spawn run");
    eventually(Duration::from_secs(20), "the run to hold both", || async {
        let (a, b) = (c.infos("job:a").await, c.infos("job:b").await);
        a.iter().chain(&b).all(Option::is_some)
    })
    .await;
    let owners: Vec<(String, Option<i64>)> =
        c.infos("job:a").await.into_iter().chain(c.infos("job:b").await).flatten().map(|i| (i.owner, i.token)).collect();
    assert!(owners.windows(2).all(|w| w[0] == w[1]), "one owner and token on every member and server: {owners:?}");
    // Closing its stdin ends the command.
    drop(child.stdin.take());
    let ran = common::cli::finish(child, started, CLI_DEADLINE, "run a b, held").await;
    assert_eq!(ran.code, Some(0), "stderr: {}", ran.stderr);
    let (owner, token) = ran.stdout.trim().split_once(' ').expect("owner and token");
    assert_eq!(owners[0], (owner.to_string(), token.parse().ok()), "the command's owner and token are the set's");
    assert_eq!(c.infos("job:a").await, vec![None; 5]);
}

/// `--permits 3 --limit 5`: three permits in one hold; a second request
/// for 3 is refused (3 + 3 > 5) and takes nothing, one for 2 is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_take_several_of_a_semaphore_in_one_hold() {
    let c = Cluster::start(5);
    let take = |k: &'static str| {
        let c = &c;
        async move { run(c, &["acquire", "pool", "--ttl", "30s", "--limit", "5", "--permits", k, "--json"], k).await }
    };
    let first = take("3").await;
    assert_eq!(first.code, Some(0), "stderr: {}", first.stderr);
    let out = json(&first);
    let permits = names(&out["resources"]);
    assert_eq!(permits.len(), 3, "{out}");
    assert_eq!(out["resource"].as_str(), Some(permits.join(", ").as_str()), "{out}");
    let (owner, token) = (out["owner"].as_str().expect("owner"), out["token"].as_i64().expect("token"));
    for p in &permits {
        assert!(p.starts_with("pool:permit:"), "{p}");
        held_by(&c, p, owner, token).await;
    }

    let second = take("3").await;
    assert_eq!(second.code, Some(NOT_ACQUIRED), "3 + 3 of 5: stdout {} stderr {}", second.stdout, second.stderr);
    let mut held = 0;
    for slot in 0..5 {
        let infos = c.infos(&format!("pool:permit:{slot}")).await;
        assert!(infos.iter().flatten().all(|i| i.owner == owner), "permit {slot}: only the first holder: {infos:?}");
        held += usize::from(infos.iter().all(Option::is_some));
    }
    assert_eq!(held, 3, "the refused request took no permit");

    let third = take("2").await;
    assert_eq!(third.code, Some(0), "3 + 2 of 5: stderr {}", third.stderr);
    let mut all: Vec<String> = permits.iter().cloned().chain(names(&json(&third)["resources"])).collect();
    all.sort();
    assert_eq!(all, (0..5).map(|s| format!("pool:permit:{s}")).collect::<Vec<_>>(), "the five permits, each once");

    let ran = run(&c, &["run", "pool", "--limit", "5", "--permits", "1", "--", "sh", "-c", "echo ran"], "run, all taken").await;
    assert_eq!(ran.code, Some(RUN_NOT_LOCKED), "stderr: {}", ran.stderr);

    // extend and release by the semaphore's name act on every permit of
    // the owner's hold, and name them (in slot order, which may differ
    // from the acquisition's when its slots wrap around).
    let sorted = |names: &str| {
        let mut v: Vec<String> = names.split(", ").map(String::from).collect();
        v.sort();
        v
    };
    let mut mine = permits.clone();
    mine.sort();
    let extended = run(&c, &["extend", "pool", "--owner", owner, "--ttl", "90s", "--limit", "5"], "extend --limit").await;
    assert_eq!(extended.code, Some(0), "stderr: {}", extended.stderr);
    let named = extended.stdout.lines().find_map(|l| l.strip_prefix("permit: ")).expect("permit line");
    assert_eq!(sorted(named), mine, "{}", extended.stdout);
    for p in &permits {
        let pttls: Vec<i64> = c.infos(p).await.iter().map(|i| i.as_ref().map_or(-2, |i| i.pttl)).collect();
        assert!(pttls.iter().all(|t| *t > 30_000), "{p} extended to 90 s on every server: {pttls:?}");
    }
    let released = run(&c, &["release", "pool", "--owner", owner, "--limit", "5", "--json"], "release --limit").await;
    assert_eq!(released.code, Some(0), "stderr: {}", released.stderr);
    assert_eq!(json(&released)["permit"].as_str().map(sorted).as_ref(), Some(&mine), "{}", released.stdout);
    for p in &permits {
        assert_eq!(c.infos(p).await, vec![None; 5], "{p} released");
    }

    // run --permits: the command holds them all and is told which.
    let ran =
        run(&c, &["run", "pool", "--limit", "5", "--permits", "3", "--", "sh", "-c", "echo $REDLOCK_PERMIT"], "run --permits 3").await;
    assert_eq!(ran.code, Some(0), "stderr: {}", ran.stderr);
    assert_eq!(sorted(ran.stdout.trim()), mine, "the three permits freed above: {}", ran.stdout);
}

/// Usage errors (exit 2, kind usage, a message naming the mistake), and
/// nothing taken: a name given twice, `--permits` without `--limit` or
/// above it, `--limit` with several resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistakes_about_sets_and_permits_are_usage_errors_that_take_nothing() {
    let c = Cluster::start(3);
    let cases: [(&[&str], &str); 8] = [
        (&["acquire", "u:a", "u:b", "u:a", "--ttl", "5s"], "\"u:a\" is named twice"),
        (&["run", "u:a", "u:a", "--", "sh", "-c", "echo ran"], "\"u:a\" is named twice"),
        (&["release", "u:a", "u:a", "--owner", "someone"], "\"u:a\" is named twice"),
        (&["acquire", "u:a", "--ttl", "5s", "--permits", "2"], "--permits 2 needs --limit"),
        (&["run", "u:a", "--permits", "2", "--", "sh", "-c", "echo ran"], "--permits 2 needs --limit"),
        (&["acquire", "u:a", "--ttl", "5s", "--limit", "5", "--permits", "6"], "--permits 6 is more than --limit 5"),
        (&["acquire", "u:a", "u:b", "--ttl", "5s", "--limit", "2"], "--limit 2 names one semaphore"),
        (&["run", "u:a", "u:b", "--limit", "2", "--", "sh", "-c", "echo ran"], "--limit 2 names one semaphore"),
    ];
    for (args, says) in cases {
        let ran = run(&c, args, &format!("{args:?}")).await;
        assert_eq!(ran.code, Some(USAGE), "{args:?}: stderr {}", ran.stderr);
        assert!(ran.stderr.contains(says), "{args:?}: {says:?} in {}", ran.stderr);
        assert!(!ran.stdout.contains("ran"), "{args:?}: the command must not run: {}", ran.stdout);
        let with_json: Vec<&str> = std::iter::once("--json").chain(args.iter().copied()).collect();
        let ran = run(&c, &with_json, &format!("{with_json:?}")).await;
        assert_eq!(ran.code, Some(USAGE), "{with_json:?}: stderr {}", ran.stderr);
        assert_eq!(json(&ran)["error"]["kind"], "usage", "{with_json:?}: {}", ran.stdout);
    }
    for key in ["u:a", "u:b", "u:a:permit:0", "u:a:permit:1"] {
        assert_eq!(c.infos(key).await, vec![None; 3], "{key}: nothing is taken");
    }
}
