//! `--metrics HOST:PORT`: the quorum client's metrics scraped over HTTP
//! from the real `redlock` program while it runs against real servers,
//! the counts equal to what the test did, and the text valid for
//! Prometheus (`promtool check metrics`, Debian's `prometheus` package).

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::cli::redlock;
use common::{eventually, Cluster};
use redis::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStderr};

const REPLY: Duration = Duration::from_secs(10);

/// Reads `child`'s stderr until a line containing `marker`; returns what
/// follows it, and the lines left.
pub(super) async fn after(lines: &mut Lines<BufReader<ChildStderr>>, marker: &str) -> String {
    loop {
        let line = tokio::time::timeout(REPLY, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no {marker:?} on stderr in time"))
            .expect("stderr")
            .unwrap_or_else(|| panic!("stderr ended before {marker:?}"));
        if let Some((_, rest)) = line.split_once(marker) {
            return rest.to_string();
        }
    }
}

/// The address `redlock` printed for its metrics (`--metrics 127.0.0.1:0`).
pub(super) async fn metrics_address(child: &mut Child) -> (String, Lines<BufReader<ChildStderr>>) {
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let rest = after(&mut lines, "metrics on http://").await;
    (rest.trim_end_matches("/metrics").to_string(), lines)
}

/// `redlock serve --metrics` on free ports over `c`: the process, its
/// metrics address and the port it serves Redis clients on.
pub(super) async fn serve_with_metrics(c: &Cluster) -> (Child, String, u16) {
    let mut child = redlock(&c.urls().join(","), &["serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"]).spawn().expect("spawn");
    let (addr, mut lines) = metrics_address(&mut child).await;
    let port: u16 = after(&mut lines, "listening on ").await.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, addr, port)
}

/// One HTTP request, raw: (status line, headers, body).
async fn http(addr: &str, request: &[u8]) -> (String, String, String) {
    let mut stream = tokio::time::timeout(REPLY, TcpStream::connect(addr)).await.expect("connect in time").expect("connect");
    stream.write_all(request).await.expect("send");
    let mut response = Vec::new();
    tokio::time::timeout(REPLY, stream.read_to_end(&mut response)).await.expect("reply in time, then closed").expect("read");
    let text = String::from_utf8(response).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head in {text:?}"));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

pub(super) async fn scrape(addr: &str) -> String {
    let (status, headers, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains("Content-Type: text/plain; version=0.0.4"), "{headers}");
    assert!(headers.contains(&format!("Content-Length: {}", body.len())), "{headers}");
    body
}

/// The value of the sample `series` (its name and labels as written).
pub(super) fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap_or_else(|e| panic!("{series}: {e}"))
}

/// The sum of every sample of `name` whose labels contain `with`.
pub(super) fn total(text: &str, name: &str, with: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// Every sample belongs to a family with a HELP and a TYPE line.
fn assert_help_and_type(text: &str) {
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
        let described = |f: &str| text.contains(&format!("# HELP {f} ")) && text.contains(&format!("# TYPE {f} "));
        assert!(described(family) || described(name), "no HELP/TYPE for {line}");
    }
}

/// `program` on the PATH, installed by scripts/install-deps.sh when it is
/// missing and can be: `promtool` and `prometheus` (Debian's
/// `prometheus`), `prometheus-redis-exporter`.
pub(super) fn installed(program: &str) -> Option<std::path::PathBuf> {
    let find = || std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(program)).find(|p| p.is_file()));
    if let Some(found) = find() {
        return Some(found);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/install-deps.sh");
    let _ = std::process::Command::new(script).status();
    find()
}

/// `promtool check metrics` accepts `text`.
async fn assert_promtool_accepts(text: &str) {
    let Some(promtool) = installed("promtool") else {
        eprintln!("SKIPPED promtool check: promtool is missing and scripts/install-deps.sh could not install Debian's prometheus");
        return;
    };
    let mut check = tokio::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    let mut stdin = check.stdin.take().expect("stdin");
    stdin.write_all(text.as_bytes()).await.expect("to promtool");
    drop(stdin);
    let out = tokio::time::timeout(REPLY, check.wait_with_output()).await.expect("promtool in time").expect("promtool");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}");
}

/// `redlock run --metrics`: the grant, the hold, and the hold lost when a
/// majority of the servers is killed, each counted once; each server's
/// module's numbers (`INFO redislock`) beside them, a killed server's
/// down; every series described and valid for promtool; anything but GET
/// /metrics refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_its_grant_and_its_lost_hold_as_metrics() {
    let mut c = Cluster::start(5);
    let mut child = redlock(
        &c.urls().join(","),
        &["run", "metrics-run", "--ttl", "2s", "--on-lost", "warn", "--metrics", "127.0.0.1:0", "--", "sh", "-c", "exec sleep 60"],
    )
    .spawn()
    .expect("spawn redlock run");
    let (addr, _stderr) = metrics_address(&mut child).await;
    eventually(REPLY, "run to hold the lock", || async { c.infos("metrics-run").await.iter().all(Option::is_some) }).await;

    let held = scrape(&addr).await;
    assert_eq!(sample(&held, "redlock_acquire_wait_seconds_count{kind=\"exclusive\",outcome=\"granted\"}"), 1.0);
    assert_eq!(total(&held, "redlock_acquire_wait_seconds_count", ""), 1.0, "one acquisition, nothing else counted");
    assert_eq!(sample(&held, "redlock_held"), 1.0);
    assert_eq!(sample(&held, "redlock_waiting"), 0.0);
    assert_eq!(total(&held, "redlock_lost_total", ""), 0.0);
    for i in 0..5 {
        let address = c.servers[i].addr();
        let round_trips = sample(&held, &format!("redlock_server_request_seconds_count{{server=\"{i}\",address=\"{address}\"}}"));
        assert!(round_trips >= 1.0, "server {i} ({address}) answered the grant: {round_trips}");
        // The module's own numbers, read from that server at the scrape.
        let labels = format!("{{server=\"{i}\",address=\"{address}\"}}");
        assert_eq!(sample(&held, &format!("redlock_server_info_up{labels}")), 1.0);
        assert!(sample(&held, &format!("redislock_acquire_granted_new{labels}")) >= 1.0, "server {i} granted the lock");
        assert_eq!(sample(&held, &format!("redislock_clients_waiting{labels}")), 0.0);
        assert_eq!(sample(&held, &format!("redislock_oldest_wait_seconds{labels}")), 0.0, "INFO's _ms in seconds");
        assert_eq!(sample(&held, &format!("redislock_quarantine_left_seconds{labels}")), 0.0, "quarantine_ms_left");
        assert_eq!(sample(&held, &format!("redislock_hold_exclusive_total{labels}")), 0.0, "no hold released yet");
        assert_eq!(sample(&held, &format!("redislock_wait_exclusive_p99_seconds{labels}")), 0.0, "nobody waited");
    }
    assert_help_and_type(&held);
    assert_promtool_accepts(&held).await;

    // Refused: other paths and methods, and a request that never ends.
    let (status, ..) = http(&addr, b"GET / HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, ..) = http(&addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    let (status, ..) = http(&addr, &[b'x'; 20_000]).await;
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");

    // A majority killed: the next extension reaches no quorum.
    for i in 0..3 {
        c.servers[i].kill9();
    }
    eventually(REPLY, "the loss to be counted", || async { total(&scrape(&addr).await, "redlock_lost_total", "") >= 1.0 }).await;
    let lost = scrape(&addr).await;
    assert_eq!(sample(&lost, "redlock_lost_total{cause=\"unreachable\"}"), 1.0, "{lost}");
    assert_eq!(total(&lost, "redlock_lost_total", ""), 1.0);
    assert_eq!(sample(&lost, "redlock_held"), 0.0);
    assert_eq!(sample(&lost, "redlock_hold_seconds_count{kind=\"exclusive\"}"), 1.0);
    assert!(sample(&lost, "redlock_extensions_total{result=\"failed\"}") >= 1.0);
    for i in 0..5 {
        let failures = total(&lost, "redlock_server_errors_total", &format!("server=\"{i}\""));
        assert_eq!(failures > 0.0, i < 3, "server {i}: {failures} failed requests");
        let up = sample(&lost, &format!("redlock_server_info_up{{server=\"{i}\",address=\"{}\"}}", c.servers[i].addr()));
        assert_eq!(up, if i < 3 { 0.0 } else { 1.0 }, "server {i} answers INFO");
        assert_eq!(lost.contains(&format!("redislock_highest_token{{server=\"{i}\"")), i >= 3, "server {i}'s module fields");
    }
    assert_promtool_accepts(&lost).await;
    let _ = child.kill().await;
}

/// `redlock serve --metrics`: the endpoint's grants, refusals and a wait
/// that ran out, through its one handle, by kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_counts_the_grants_and_refusals_of_its_clients() {
    let c = Cluster::start(5);
    let (mut child, addr, port) = serve_with_metrics(&c).await;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("client");
    let mut con = client.get_multiplexed_async_connection().await.expect("connect");
    let acquire = |key: &str, owner: &str, shared: bool| {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(key).arg(owner).arg(10_000);
        if shared {
            cmd.arg("SHARED");
        }
        cmd
    };
    for (key, owner, shared, granted) in [
        ("m-a", "o1", false, true),
        ("m-a", "o2", false, false),
        ("m-b", "o3", false, true),
        ("m-r", "o4", true, true),
        ("m-r", "o5", true, true),
        ("m-r", "o6", false, false),
    ] {
        let reply: Value = acquire(key, owner, shared).query_async(&mut con).await.expect("acquire");
        assert_eq!(matches!(reply, Value::Int(_)), granted, "{key} {owner}: {reply:?}");
    }
    // A wait for a held lock that runs out.
    let waited: Value =
        redis::cmd("LOCK.ACQUIRE").arg("m-a").arg("o7").arg(10_000).arg("WAIT").arg(100).query_async(&mut con).await.expect("wait");
    assert_eq!(waited, Value::Nil);
    let text = scrape(&addr).await;
    let count =
        |kind: &str, outcome: &str| sample(&text, &format!("redlock_acquire_wait_seconds_count{{kind=\"{kind}\",outcome=\"{outcome}\"}}"));
    assert_eq!((count("exclusive", "granted"), count("exclusive", "refused")), (2.0, 2.0), "{text}");
    assert_eq!(count("exclusive", "timed_out"), 1.0, "{text}");
    assert_eq!(sample(&text, "redlock_waiting"), 0.0);
    assert_eq!((count("shared", "granted"), count("shared", "refused")), (2.0, 0.0), "{text}");
    assert_eq!(total(&text, "redlock_acquire_wait_seconds_count", ""), 7.0);
    assert_eq!(sample(&text, "redlock_held"), 4.0);
    assert_help_and_type(&text);
    assert_promtool_accepts(&text).await;
    let _ = child.kill().await;
}

/// `redlock elect --metrics` shows it leads, with its term; `redlock
/// leader --watch --metrics` the one change of leader it saw, same term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_and_leader_watch_serve_the_leadership_and_its_term() {
    let c = Cluster::start(5);
    let servers = c.urls().join(",");
    let mut watch = redlock(&servers, &["leader", "m-svc", "--watch", "--json", "--interval", "20ms", "--metrics", "127.0.0.1:0"])
        .spawn()
        .expect("watch");
    let (watch_addr, _watch_err) = metrics_address(&mut watch).await;
    let before = scrape(&watch_addr).await;
    assert_eq!(sample(&before, "redlock_election_leader_changes_total"), 0.0);
    let mut elect = redlock(
        &servers,
        &["elect", "m-svc", "--value", "10.0.0.1:80", "--ttl", "30s", "--metrics", "127.0.0.1:0", "--", "sh", "-c", "exec sleep 60"],
    )
    .spawn()
    .expect("elect");
    let (elect_addr, _elect_err) = metrics_address(&mut elect).await;
    eventually(REPLY, "the candidate to lead", || async { sample(&scrape(&elect_addr).await, "redlock_election_leading") == 1.0 }).await;
    let leading = scrape(&elect_addr).await;
    let term = sample(&leading, "redlock_election_term");
    assert!(term > 0.0, "term {term}");
    eventually(REPLY, "the watch to see the leader", || async {
        sample(&scrape(&watch_addr).await, "redlock_election_leader_changes_total") >= 1.0
    })
    .await;
    let seen = scrape(&watch_addr).await;
    assert_eq!(sample(&seen, "redlock_election_leader_changes_total"), 1.0, "{seen}");
    assert_eq!(sample(&seen, "redlock_election_term"), term);
    assert_eq!(sample(&seen, "redlock_election_leading"), 0.0, "the watch leads nothing");
    assert_promtool_accepts(&leading).await;
    let _ = elect.kill().await;
    let _ = watch.kill().await;
}
