//! What operators run beside `redlock --metrics`, run for real: the alert
//! rules of docs/prometheus/ pass `promtool check rules` and their own
//! unit tests; every query of the Grafana dashboard in docs/grafana/
//! parses and names only metrics a real scrape has; a real Prometheus
//! (Debian's `prometheus`) scrapes `redlock run --metrics`, keeps every
//! family with its help and type and the counts the test made, evaluates
//! the rules and every dashboard query, and fires the lost-hold alert when
//! a majority of the servers is killed; one scrapes `redlock serve
//! --metrics` beside a server in its restart quarantine, and counts the
//! refusals and quarantine answers from both sides, the client's and
//! the module's; and redis_exporter (Debian's
//! `prometheus-redis-exporter`) exports the module's `INFO redislock`
//! fields through docs/prometheus/redislock-info.lua.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::cli::redlock;
use common::{eventually, free_port, Cluster, Opts, Server};
use serde_json::Value as Json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use super::metrics::{installed, metrics_address, sample, scrape, serve_with_metrics};

const REPLY: Duration = Duration::from_secs(10);
/// Prometheus's start, first scrapes and rule evaluations (1 s apart).
const SCRAPED: Duration = Duration::from_secs(20);
const PROMETHEUS_DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/prometheus");
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/redlock-dashboard.json");

/// `program` with `args` in `dir`, within `REPLY`: (exit ok, what it said).
async fn run_tool(program: &Path, args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(program).args(args).current_dir(dir).stdin(Stdio::null()).kill_on_drop(true).output();
    let out = tokio::time::timeout(REPLY, out).await.unwrap_or_else(|_| panic!("{program:?} {args:?}: no exit in time")).expect("spawn");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// `GET path` over HTTP/1.0 (so the server closes after a reply with no
/// chunks): (status code, body).
async fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::time::timeout(REPLY, TcpStream::connect(addr)).await.expect("connect in time").expect("connect");
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await.expect("send");
    let mut response = Vec::new();
    tokio::time::timeout(REPLY, stream.read_to_end(&mut response)).await.expect("reply in time").expect("read");
    let text = String::from_utf8(response).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head in {text:?}"));
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status in {head:?}"));
    (code, body.to_string())
}

/// A query string's value, percent-encoded.
fn encoded(value: &str) -> String {
    value.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// Every name starting `redlock_` in `text`, once.
fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("redlock_") {
        let name: String = rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[at + name.len()..];
        names.push(name);
    }
    names.sort();
    names.dedup();
    names
}

/// Every `expr` of the dashboard, with Grafana's variables replaced as
/// Grafana would (`$__rate_interval` by a range, `$job` by a regex).
fn dashboard_queries(dashboard: &Json) -> Vec<String> {
    fn walk(v: &Json, out: &mut Vec<String>) {
        match v {
            Json::Object(m) => {
                if let Some(Json::String(expr)) = m.get("expr") {
                    out.push(expr.replace("$__rate_interval", "1m").replace("$job", ".*").replace("$instance", ".*"));
                }
                m.values().for_each(|v| walk(v, out));
            }
            Json::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    out
}

/// Every label name `text` (series or queries) selects (`name="`,
/// `name=~"`, `name!="`) or groups and matches on (`by (...)`,
/// `on (...)`, `without (...)`, `ignoring (...)`).
fn label_names(text: &str) -> Vec<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = Vec::new();
    for (at, _) in text.match_indices('"') {
        let before = text[..at].trim_end_matches(['=', '~', '!']);
        if before.len() < at && text[before.len()..at].contains('=') {
            let name: String = before.chars().rev().take_while(|c| word(*c)).collect::<String>().chars().rev().collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    for clause in ["by (", "on (", "without (", "ignoring ("] {
        for (at, _) in text.match_indices(clause) {
            let list = text[at + clause.len()..].split(')').next().unwrap_or_default();
            names.extend(list.split(',').map(|l| l.trim().to_string()).filter(|l| !l.is_empty()));
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The `expr` of every rule of docs/prometheus/redlock-alerts.yml (one
/// line, or a `|` block up to the rule's next key).
fn alert_exprs() -> Vec<String> {
    let rules = std::fs::read_to_string(format!("{PROMETHEUS_DOCS}/redlock-alerts.yml")).expect("alert rules");
    let mut exprs = Vec::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(expr) = line.trim().strip_prefix("expr: ") else { continue };
        if expr != "|" {
            exprs.push(expr.to_string());
            continue;
        }
        let mut block = String::new();
        while let Some(next) = lines.next_if(|l| !["for:", "labels:", "annotations:"].iter().any(|k| l.trim().starts_with(k))) {
            block.push_str(next.trim());
            block.push('\n');
        }
        exprs.push(block);
    }
    exprs
}

/// The families of a scrape: name → (type, help).
fn families(text: &str) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some((name, help)) = line.strip_prefix("# HELP ").and_then(|l| l.split_once(' ')) {
            out.entry(name.to_string()).or_insert_with(|| (String::new(), String::new())).1 = help.to_string();
        }
        if let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|l| l.split_once(' ')) {
            out.entry(name.to_string()).or_insert_with(|| (String::new(), String::new())).0 = kind.to_string();
        }
    }
    out
}

/// The alert names of docs/prometheus/redlock-alerts.yml.
fn alert_names() -> Vec<String> {
    let rules = std::fs::read_to_string(format!("{PROMETHEUS_DOCS}/redlock-alerts.yml")).expect("alert rules");
    rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).map(str::to_string).collect()
}

/// `redlock run` holding `key` on `c` with `--metrics`, and its address.
async fn run_holding(c: &Cluster, key: &str) -> (Child, String) {
    let mut child = redlock(
        &c.urls().join(","),
        &["run", key, "--ttl", "2s", "--on-lost", "warn", "--metrics", "127.0.0.1:0", "--", "sh", "-c", "exec sleep 60"],
    )
    .spawn()
    .expect("spawn redlock run");
    let (addr, mut lines) = metrics_address(&mut child).await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    eventually(REPLY, "run to hold the lock", || async { c.infos(key).await.iter().all(Option::is_some) }).await;
    (child, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_rules_pass_promtool_and_their_unit_tests() {
    let Some(promtool) = installed("promtool") else {
        eprintln!("SKIPPED: promtool is missing and scripts/install-deps.sh could not install Debian's prometheus");
        return;
    };
    let dir = Path::new(PROMETHEUS_DOCS);
    let (ok, said) = run_tool(&promtool, &["check", "rules", "redlock-alerts.yml"], dir).await;
    let alerts = alert_names();
    assert!(ok && said.contains(&format!("SUCCESS: {} rules found", alerts.len())), "promtool check rules: {said}");
    let (ok, said) = run_tool(&promtool, &["test", "rules", "redlock-alerts.test.yml"], dir).await;
    assert!(ok && said.contains("SUCCESS"), "promtool test rules: {said}");
    // Every alert is tested, and explained where operators look.
    let tests = std::fs::read_to_string(dir.join("redlock-alerts.test.yml")).expect("rule tests");
    let operations = std::fs::read_to_string(dir.join("../operations.md")).expect("operations.md");
    for alert in &alerts {
        assert!(tests.contains(&format!("alertname: {alert}\n")), "{alert} has no unit test");
        assert!(operations.contains(&format!("`{alert}`")), "{alert} is not explained in docs/operations.md");
    }
    assert!(alerts.len() >= 5, "{alerts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_queries_parse_and_with_the_alerts_use_only_what_redlock_serves() {
    let text = std::fs::read_to_string(DASHBOARD).expect("dashboard");
    let dashboard: Json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 10, "{queries:?}");

    // Every name the dashboard (queries, variables) and the alert rules use
    // is a family of a real scrape, or a histogram's series of one; every
    // label they select, group or match on is one it carries.
    let c = Cluster::start(1);
    let (mut child, addr) = run_holding(&c, "dashboard").await;
    let served = scrape(&addr).await;
    let _ = child.kill().await;
    let scraped = families(&served);
    let labels = label_names(served.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n").as_str());
    let alerts = alert_exprs();
    for (what, exprs, names) in
        [("the dashboard", &queries, metric_names(&text)), ("the alert rules", &alerts, metric_names(&alerts.join("\n")))]
    {
        assert!(names.len() >= 7, "{what}: {names:?}");
        for name in &names {
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).filter(|f| scraped.contains_key(*f));
            let known = scraped.contains_key(name) || family.is_some_and(|f| scraped[f].0 == "histogram");
            assert!(known, "{what}: {name}, which redlock run --metrics does not serve: {:?}", scraped.keys());
        }
        for expr in exprs.iter() {
            for label in label_names(expr) {
                // `node`: the master of a `redis+cluster://` entry, on its
                // module fields only (the unit tests of metrics/servers.rs).
                let known = ["job", "instance", "le", "node"].contains(&label.as_str()) || labels.contains(&label);
                assert!(known, "{what}: {expr} uses the label {label}, which no series carries: {labels:?}");
            }
        }
    }

    // promtool has no command to parse an expression: as recording rules
    // (a JSON string is a YAML string), `check rules` parses each.
    let Some(promtool) = installed("promtool") else {
        eprintln!("SKIPPED promtool check: promtool is missing and scripts/install-deps.sh could not install Debian's prometheus");
        return;
    };
    let tmp = tempfile::Builder::new().prefix("redlock-dashboard-test-").tempdir().expect("temp dir");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        rules.push_str(&format!("      - record: dashboard:query_{i}\n        expr: {}\n", Json::String(q.clone())));
    }
    std::fs::write(tmp.path().join("dashboard.yml"), rules).expect("write rules");
    let (ok, said) = run_tool(&promtool, &["check", "rules", "dashboard.yml"], tmp.path()).await;
    assert!(ok && said.contains(&format!("SUCCESS: {} rules found", queries.len())), "{said}");
}

/// A Prometheus server of a test: killed (by its child handle's PID) when
/// dropped, also when the test fails, its log printed then.
struct Prometheus {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Started on a free port with its own storage in a temp dir, scraping
    /// `target` and evaluating `rule_file` every second.
    fn start(binary: &Path, target: &str, rule_file: &Path) -> Prometheus {
        let dir = tempfile::Builder::new().prefix("redlock-prometheus-test-").tempdir().expect("temp dir");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: redlock\n    static_configs:\n      - targets: [\"{target}\"]\n",
            rule_file.display()
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("config");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(binary)
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn prometheus");
        Prometheus { child, addr, dir }
    }

    /// `GET /api/v1/<path>`'s `data`, which must be there.
    async fn api(&self, path: &str) -> Json {
        let (code, body) = get(&self.addr, &format!("/api/v1/{path}")).await;
        let reply: Json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert!(code == 200 && reply["status"] == "success", "{path}: {code} {body}");
        reply["data"].clone()
    }

    /// An instant query's samples: (labels, value).
    async fn query(&self, expr: &str) -> Vec<(Json, f64)> {
        let data = self.api(&format!("query?query={}", encoded(expr))).await;
        let samples = data["result"].as_array().cloned().unwrap_or_default();
        samples
            .into_iter()
            .map(|s| {
                let value = s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                (s["metric"].clone(), value)
            })
            .collect()
    }

    /// The one value of `expr`.
    async fn value(&self, expr: &str) -> Option<f64> {
        match self.query(expr).await.as_slice() {
            [(_, v)] => Some(*v),
            _ => None,
        }
    }

    /// Answers its API (the port it was given may still be starting).
    async fn ready(&self) -> bool {
        match TcpStream::connect(&self.addr).await {
            Ok(_) => get(&self.addr, "/-/ready").await.0 == 200,
            Err(_) => false,
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
            eprintln!("prometheus on {} said:\n{log}", self.addr);
        }
    }
}

/// A real Prometheus scrapes `redlock run --metrics` holding a lock over
/// five servers: the series are there with the help and type of the
/// text, the counts are what the test did, the alert rules and every
/// dashboard query evaluate, and killing a majority of the servers loses
/// the hold, counted once, which fires `RedlockHoldLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_run_and_fires_the_lost_hold_alert() {
    let Some(binary) = installed("prometheus") else {
        eprintln!("SKIPPED: prometheus is missing and scripts/install-deps.sh could not install Debian's prometheus");
        return;
    };
    let mut c = Cluster::start(5);
    let (mut child, target) = run_holding(&c, "prometheus-run").await;
    let rules = PathBuf::from(PROMETHEUS_DOCS).join("redlock-alerts.yml");
    let prometheus = Prometheus::start(&binary, &target, &rules);
    eventually(SCRAPED, "prometheus to answer", || prometheus.ready()).await;
    eventually(SCRAPED, "the target to be up", || async {
        let targets = prometheus.api("targets").await;
        targets["activeTargets"].as_array().is_some_and(|t| t.len() == 1 && t[0]["health"] == "up")
    })
    .await;
    // A target is up a moment before its first scrape's samples can be
    // queried (its health is set before they are committed).
    eventually(SCRAPED, "the first scrape's samples", || async { !prometheus.query("redlock_held").await.is_empty() }).await;

    // The counts the test made: one grant, held, over five servers.
    let held = prometheus.query("redlock_held").await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!((held[0].0["job"].as_str(), held[0].1), (Some("redlock"), 1.0), "{held:?}");
    assert_eq!(prometheus.value("redlock_acquire_wait_seconds_count{kind=\"exclusive\",outcome=\"granted\"}").await, Some(1.0));
    assert_eq!(prometheus.value("sum(redlock_acquire_wait_seconds_count)").await, Some(1.0));
    assert_eq!(prometheus.value("count(redlock_server_request_seconds_count)").await, Some(5.0));
    assert_eq!(prometheus.value("sum(redlock_lost_total)").await, Some(0.0));

    // Every family of the text, with its help and type, as Prometheus
    // keeps them (metadata of the target).
    let text = scrape(&target).await;
    let scraped = families(&text);
    assert!(scraped.len() >= 13, "{scraped:?}");
    let metadata = prometheus.api("metadata").await;
    for (name, (kind, help)) in &scraped {
        let kept = &metadata[name][0];
        assert_eq!((kept["type"].as_str(), kept["help"].as_str()), (Some(kind.as_str()), Some(help.as_str())), "{name}: {metadata}");
    }

    // The rules are loaded and evaluate without error; nothing fires yet.
    let alerts = alert_names();
    eventually(SCRAPED, "every rule evaluated, healthy", || async {
        let groups = prometheus.api("rules").await;
        let rules: Vec<Json> =
            groups["groups"].as_array().into_iter().flatten().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()).collect();
        let names: Vec<&str> = rules.iter().filter_map(|r| r["name"].as_str()).collect();
        assert_eq!(names, alerts, "{groups}");
        rules.iter().all(|r| r["health"] == "ok")
    })
    .await;
    let firing = prometheus.api("alerts").await;
    assert_eq!(firing["alerts"].as_array().map(Vec::len), Some(0), "{firing}");
    // Every dashboard query evaluates on the real series (an error such as
    // a many-to-many match shows only then).
    let dashboard: Json = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).expect("dashboard")).expect("JSON");
    for q in dashboard_queries(&dashboard) {
        prometheus.query(&q).await;
    }

    // A majority killed: the next extension reaches no quorum, the hold is
    // lost, counted once, and the alert fires for it.
    for i in 0..3 {
        c.servers[i].kill9();
    }
    eventually(SCRAPED, "RedlockHoldLost to fire", || async {
        let alerts = prometheus.api("alerts").await;
        alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["labels"]["alertname"] == "RedlockHoldLost" && a["labels"]["cause"] == "unreachable" && a["state"] == "firing")
    })
    .await;
    assert_eq!(prometheus.value("redlock_lost_total{cause=\"unreachable\"}").await, Some(1.0));
    assert_eq!(prometheus.value("sum(redlock_lost_total)").await, Some(1.0));
    let down = prometheus.query("sum by (server) (redlock_server_errors_total) > 0").await;
    let mut failing: Vec<&str> = down.iter().filter_map(|(labels, _)| labels["server"].as_str()).collect();
    failing.sort();
    assert_eq!(failing, ["0", "1", "2"], "{down:?}");
    drop(prometheus);
    let _ = child.kill().await;
}

/// A real Prometheus scrapes `redlock serve --metrics` over five servers,
/// the fifth in its restart quarantine: the grant, the refusal and the
/// quarantine answers the test made are counted, each server's module
/// fields are there with their help and type, the quarantined server's
/// own count of quarantine refusals equals the client's, its quarantine
/// shows as time left, and `RedlockServerQuarantine` fires for it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_counts_refusals_and_a_quarantined_server_through_serve() {
    let Some(binary) = installed("prometheus") else {
        eprintln!("SKIPPED: prometheus is missing and scripts/install-deps.sh could not install Debian's prometheus");
        return;
    };
    let mut opts = vec![Opts::default(); 4];
    opts.push(Opts::quarantine(600_000));
    let c = Cluster::start_opts(opts);
    let (mut child, target, port) = serve_with_metrics(&c).await;
    let rules = PathBuf::from(PROMETHEUS_DOCS).join("redlock-alerts.yml");
    let prometheus = Prometheus::start(&binary, &target, &rules);
    eventually(SCRAPED, "prometheus to answer", || prometheus.ready()).await;
    eventually(SCRAPED, "the first scrape's samples", || async { !prometheus.query("redlock_held").await.is_empty() }).await;

    // Through the endpoint: a grant (four servers grant, the fifth answers
    // with its quarantine), then a refusal (held; the fifth again).
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("client");
    let mut con = client.get_multiplexed_async_connection().await.expect("connect");
    for (owner, granted) in [("o1", true), ("o2", false)] {
        let reply: redis::Value =
            redis::cmd("LOCK.ACQUIRE").arg("prometheus-serve").arg(owner).arg(60_000).query_async(&mut con).await.expect("acquire");
        assert_eq!(matches!(reply, redis::Value::Int(_)), granted, "{owner}: {reply:?}");
    }
    let count = |outcome: &str| format!("sum(redlock_acquire_wait_seconds_count{{kind=\"exclusive\",outcome=\"{outcome}\"}})");
    eventually(SCRAPED, "a scrape after the refusal", || async { prometheus.value(&count("refused")).await == Some(1.0) }).await;
    assert_eq!(prometheus.value(&count("granted")).await, Some(1.0));
    assert_eq!(prometheus.value("sum(redlock_acquire_wait_seconds_count)").await, Some(2.0));
    assert_eq!(prometheus.value("redlock_held").await, Some(1.0));

    // The quarantine, as the client saw it and as the server counted it:
    // one answer to each of the two rounds, from the fifth server only.
    let quarantines = prometheus.query("redlock_server_quarantines_total").await;
    let mut by_server: Vec<(String, f64)> =
        quarantines.iter().map(|(labels, v)| (labels["server"].as_str().unwrap_or_default().to_string(), *v)).collect();
    by_server.sort_by(|a, b| a.0.cmp(&b.0));
    let expected: Vec<(String, f64)> = (0..5).map(|i| (i.to_string(), if i == 4 { 2.0 } else { 0.0 })).collect();
    assert_eq!(by_server, expected, "{quarantines:?}");
    assert_eq!(prometheus.value("redislock_acquire_refused_quarantine{server=\"4\"}").await, Some(2.0));
    let left = prometheus.value("redislock_quarantine_left_seconds{server=\"4\"}").await.expect("quarantine left");
    assert!(left > 60.0 && left <= 600.0, "{left} s of quarantine left");
    assert_eq!(prometheus.value("sum(redislock_quarantine_left_seconds{server!=\"4\"})").await, Some(0.0));
    // The module's own counts of the rest: four grants, four refusals.
    assert_eq!(prometheus.value("sum(redislock_acquire_granted_new)").await, Some(4.0));
    assert_eq!(prometheus.value("sum(redislock_acquire_refused_held)").await, Some(4.0));
    assert_eq!(prometheus.value("sum(redlock_server_info_up)").await, Some(5.0));

    // The module's families are kept with their help and type.
    let scraped = families(&scrape(&target).await);
    let metadata = prometheus.api("metadata").await;
    let module: Vec<&String> = scraped.keys().filter(|name| name.starts_with("redislock_")).collect();
    assert!(module.len() >= 20, "{module:?}");
    for name in module {
        let (kind, help) = &scraped[name];
        let kept = &metadata[name][0];
        assert_eq!((kept["type"].as_str(), kept["help"].as_str()), (Some(kind.as_str()), Some(help.as_str())), "{name}: {metadata}");
    }

    eventually(SCRAPED, "RedlockServerQuarantine to fire", || async {
        let alerts = prometheus.api("alerts").await;
        alerts["alerts"].as_array().into_iter().flatten().any(|a| a["labels"]["alertname"] == "RedlockServerQuarantine")
    })
    .await;
    let alerts = prometheus.api("alerts").await;
    let firing: Vec<(&str, &str)> = alerts["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| Some((a["labels"]["alertname"].as_str()?, a["labels"]["server"].as_str().unwrap_or_default())))
        .collect();
    assert_eq!(firing, [("RedlockServerQuarantine", "4")], "{alerts}");
    drop(prometheus);
    let _ = child.kill().await;
}

/// redis_exporter 1.45 (Debian's) with `--script redislock-info.lua`:
/// each `INFO redislock` field of the server as
/// `redis_script_values{key="redislock_<field>"}`, on Redis and Valkey.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_exporter_exports_the_module_fields_through_the_script() {
    let Some(exporter) = installed("prometheus-redis-exporter") else {
        eprintln!("SKIPPED: prometheus-redis-exporter is missing and scripts/install-deps.sh could not install it");
        return;
    };
    let script = PathBuf::from(PROMETHEUS_DOCS).join("redislock-info.lua");
    for (server_name, opts) in [("redis", Opts::default()), ("valkey", Opts::valkey())] {
        let server = Server::start_opts(opts);
        let acquire = |owner: &str| redis::cmd("LOCK.ACQUIRE").arg("exported").arg(owner).arg(60_000).clone();
        assert!(matches!(server.ok(&acquire("o1")).await, redis::Value::Int(_)), "{server_name}: granted");
        assert_eq!(server.ok(&acquire("o2")).await, redis::Value::Nil, "{server_name}: refused");
        let addr = format!("127.0.0.1:{}", free_port());
        let _exporter = Command::new(&exporter)
            .arg(format!("--redis.addr=redis://127.0.0.1:{}", server.port))
            .arg(format!("--web.listen-address={addr}"))
            .arg(format!("--script={}", script.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the exporter");
        let deadline = tokio::time::Instant::now() + REPLY;
        let text = loop {
            if TcpStream::connect(&addr).await.is_ok() {
                let (code, body) = get(&addr, "/metrics").await;
                if code == 200 && body.contains("redis_script_values{") {
                    break body;
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "{server_name}: the exporter served no script values in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let exported = |field: &str| sample(&text, &format!("redis_script_values{{key=\"redislock_{field}\"}}"));
        assert_eq!(exported("acquire_granted_new"), 1.0, "{server_name}");
        assert_eq!(exported("acquire_refused_held"), 1.0, "{server_name}");
        assert_eq!(exported("locks"), 1.0, "{server_name}");
        assert_eq!(sample(&text, "redis_up"), 1.0, "{server_name}");
        // Every field of INFO redislock, none more.
        let info = match server.ok(redis::cmd("INFO").arg("redislock")).await {
            redis::Value::BulkString(b) => String::from_utf8(b).expect("utf-8"),
            redis::Value::VerbatimString { text, .. } => text,
            other => panic!("{server_name}: INFO: {other:?}"),
        };
        let fields: Vec<&str> = info.lines().filter_map(|l| l.split_once(':')).map(|(name, _)| name).collect();
        let keys = text.lines().filter(|l| l.starts_with("redis_script_values{")).count();
        assert!(fields.len() > 30, "{server_name}: {info}");
        assert_eq!(keys, fields.len(), "{server_name}: {fields:?}\n{text}");
        for field in fields {
            assert!(text.contains(&format!("redis_script_values{{key=\"{field}\"}} ")), "{server_name}: {field} not exported");
        }
    }
}
