//! The endpoint (`redlock serve`) against the Rust client it runs, on the
//! same five module-equipped servers: what reaching the quorum through one
//! Redis-shaped endpoint costs a program in another language.
//!
//!     cargo bench -p redlock --bench serve        (make bench-serve)
//!
//! Phases, each measurement BENCH_SECONDS long, run in BENCH_ROUNDS rounds;
//! each round runs every configuration both ways back to back, the one
//! that goes first alternating from round to round. The tables show the
//! median of the rounds for every figure.
//!
//! 1. uncontended: 32 workers and 1 worker, each on a fresh key every
//!    cycle, acquire + release cycles/s:
//!    - rust: one shared `Redlock`, `try_lock` + `release`;
//!    - endpoint: a connection per worker (the `redis` crate's multiplexed
//!      connection, as a Rust program would speak to any Redis), sending
//!      `LOCK.ACQUIRE key owner ttl` then `LOCK.RELEASE key owner`.
//!
//!    With one worker, a loopback round trip is measured in the same round
//!    (`PING` to one of the servers, through the same kind of connection),
//!    and the endpoint's extra time per command is given in round trips.
//! 2. contended: 16 contenders on ONE resource (a fresh name per
//!    measurement), holding it 1 ms per grant; each loops acquire (waiting
//!    in the line), hold, release:
//!    - rust: `lock_until` with a deadline 5 s ahead;
//!    - endpoint: `LOCK.ACQUIRE key owner ttl WAIT 5000`, then
//!      `LOCK.RELEASE`.
//!
//!    Both: a flag is set during the hold, and finding it set is a
//!    mutual-exclusion violation; tokens must increase in grant order. A
//!    violation fails the bench (exit 1).
//! 3. scale (once, after the rounds): 10,000 idle client connections,
//!    each answered a `PING`, then 1,000 of them waiting in one lock's
//!    line behind a holder; the endpoint's resident memory (VmRSS) before
//!    and after each, per connection and per waiter, and the time the line
//!    takes to drain, one grant at a time, once the holder lets go. The
//!    bench raises its open-files limit to the hard one (the endpoint
//!    inherits it) and takes fewer connections where that is too low.
//! 4. `redis-benchmark` against the endpoint (when it is on PATH):
//!    `LOCK.ACQUIRE sb:<rand> owner 10000` from 32 clients, its requests/s
//!    printed (each grants a fresh key: a whole quorum round per request).
//!
//! The endpoint is this package's `redlock` binary (built with the bench),
//! `redlock serve` on a free port with its defaults; the Rust client runs
//! on `Settings::default()`. Ttl 10 s everywhere.
//!
//! The bench starts five `redis-server`s (from PATH) on free ports of
//! 127.0.0.1 below 30000, no persistence, each in a temp dir, with the
//! module loaded, and kills them, and the endpoint, by PID on exit, also
//! on panic.
//!
//! Environment:
//!   REDISLOCK_MODULE  module to load (default <workspace>/target/release/libredislock.so)
//!   BENCH_SECONDS     seconds per measurement (default 5; 3 configurations
//!                     × 2 ways × 3 rounds × 5 s = 1.5 min)
//!   BENCH_ROUNDS      rounds (default 3)
//!
//! Output: a progress line per measurement on stderr; the tables and the
//! targets as measured on stdout. Exit status 0, or 1 on a violation or a
//! setup error.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::Rng;
use redis::aio::MultiplexedConnection;
use redlock::{Error, Redlock, Settings};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "support/servers.rs"]
mod servers;
#[path = "support/stats.rs"]
mod stats;

use servers::{module_path, redis_server_version, Res, Server};
use stats::{histogram, median_of, ratio};

const SERVERS: usize = 5;
const TTL: Duration = Duration::from_secs(10);
/// How long a contender waits in the line per call, both ways.
const DEADLINE: Duration = Duration::from_secs(5);
const CONTENDERS: usize = 16;
const HOLD: Duration = Duration::from_millis(1);
const WORKERS: [usize; 2] = [32, 1];
const DEFAULT_SECONDS: f64 = 5.0;
const DEFAULT_ROUNDS: usize = 3;

struct Config {
    seconds: f64,
    rounds: usize,
}

impl Config {
    fn from_env() -> Res<Config> {
        let seconds = match std::env::var("BENCH_SECONDS") {
            Ok(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or(format!("BENCH_SECONDS={v:?}: not a positive number"))?,
            Err(_) => DEFAULT_SECONDS,
        };
        let rounds = match std::env::var("BENCH_ROUNDS") {
            Ok(v) => v.trim().parse::<usize>().ok().filter(|r| *r > 0).ok_or(format!("BENCH_ROUNDS={v:?}: not a positive integer"))?,
            Err(_) => DEFAULT_ROUNDS,
        };
        Ok(Config { seconds, rounds })
    }

    fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Way {
    Rust,
    Endpoint,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Rust => "rust",
            Way::Endpoint => "endpoint",
        }
    }
}

/// `redlock serve`, killed by PID when dropped.
struct Endpoint {
    child: Child,
    port: u16,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Endpoint {
    /// Starts the package's `redlock serve` over `urls` on a free port,
    /// once it reports where it listens.
    fn start(urls: &[String]) -> Res<Endpoint> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_redlock"))
            .args(["--servers", &urls.join(","), "serve", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn redlock serve: {e}"))?;
        let stderr = child.stderr.take().ok_or("redlock serve: no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let line = match lines.next() {
            Some(Ok(line)) => line,
            _ => {
                let _ = child.kill();
                return Err("redlock serve exited before it listened".into());
            }
        };
        let Some(port) = line.rsplit(':').next().and_then(|p| p.trim().parse::<u16>().ok()) else {
            let _ = child.kill();
            return Err(format!("redlock serve: no port in {line:?}"));
        };
        // Its later lines, if any, are read and dropped.
        thread::spawn(move || for _ in lines.by_ref() {});
        Ok(Endpoint { child, port })
    }
}

async fn connect(url: &str) -> Res<MultiplexedConnection> {
    let client = redis::Client::open(url).map_err(|e| format!("{url}: {e}"))?;
    client.get_multiplexed_async_connection().await.map_err(|e| format!("{url}: {e}"))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// One task's counts.
struct Tally {
    hist: Histogram<u64>,
    done: u64,
    gave_up: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn new() -> Res<Tally> {
        Ok(Tally { hist: histogram()?, done: 0, gave_up: 0, errors: 0, first_error: None })
    }

    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    fn record(&mut self, d: Duration) {
        self.hist.saturating_record(micros(d));
        self.done += 1;
    }
}

/// One measurement.
#[derive(Clone, Debug)]
struct Sample {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    gave_up: u64,
    errors: u64,
    first_error: Option<String>,
}

async fn collect(tasks: Vec<tokio::task::JoinHandle<Res<Tally>>>, seconds: f64) -> Res<Sample> {
    let mut all = Tally::new()?;
    for t in futures::future::join_all(tasks).await {
        let t = t.map_err(|e| format!("bench task failed: {e}"))??;
        all.hist.add(&t.hist).map_err(|e| format!("histogram: {e}"))?;
        all.done += t.done;
        all.gave_up += t.gave_up;
        all.errors += t.errors;
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
    }
    let ms = |v: u64| v as f64 / 1000.0;
    let (p50, p99) =
        if all.hist.is_empty() { (0.0, 0.0) } else { (ms(all.hist.value_at_quantile(0.5)), ms(all.hist.value_at_quantile(0.99))) };
    Ok(Sample {
        rate: all.done as f64 / seconds,
        p50_ms: p50,
        p99_ms: p99,
        gave_up: all.gave_up,
        errors: all.errors,
        first_error: all.first_error,
    })
}

/// Mutual exclusion and fencing failures seen so far.
#[derive(Clone, Default)]
struct Violations(Arc<Mutex<Vec<String>>>);

impl Violations {
    fn push(&self, v: String) {
        eprintln!("VIOLATION: {v}");
        if let Ok(mut list) = self.0.lock() {
            list.push(v);
        }
    }

    fn list(&self) -> Vec<String> {
        self.0.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// The holder's checks: nobody else holds it, and its token is above
/// every earlier grant's.
struct Exclusion {
    busy: AtomicBool,
    last_token: AtomicI64,
    violations: Violations,
    what: String,
}

impl Exclusion {
    fn enter(&self, who: usize, token: Option<i64>) {
        if self.busy.swap(true, Ordering::SeqCst) {
            self.violations.push(format!("{}: contender {who} granted while another one holds the lock", self.what));
        }
        match token {
            Some(t) => {
                let before = self.last_token.swap(t, Ordering::SeqCst);
                if t <= before {
                    self.violations.push(format!("{}: contender {who} granted token {t} after token {before}", self.what));
                }
            }
            None => self.violations.push(format!("{}: contender {who} granted without a token", self.what)),
        }
    }

    fn leave(&self) {
        self.busy.store(false, Ordering::SeqCst);
    }
}

/// The holder's work: `HOLD` as exactly as the OS sleeps (a tokio sleep
/// rounds up to its 1 ms tick).
async fn hold() {
    if tokio::task::spawn_blocking(|| thread::sleep(HOLD)).await.is_err() {
        tokio::time::sleep(HOLD).await;
    }
}

/// `LOCK.ACQUIRE key owner ttl [WAIT ms]` through the endpoint: the token,
/// or `None` when not granted.
async fn acquire(c: &mut MultiplexedConnection, key: &str, owner: &str, wait: Option<Duration>) -> Result<Option<i64>, String> {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(owner).arg(TTL.as_millis() as u64);
    if let Some(w) = wait {
        cmd.arg("WAIT").arg(w.as_millis() as u64);
    }
    cmd.query_async(c).await.map_err(|e| e.to_string())
}

async fn release(c: &mut MultiplexedConnection, key: &str, owner: &str) -> Result<(), String> {
    match redis::cmd("LOCK.RELEASE").arg(key).arg(owner).query_async::<i64>(c).await {
        Ok(1) => Ok(()),
        Ok(n) => Err(format!("LOCK.RELEASE answered {n}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `workers` loops of acquire + release, each on a fresh key every cycle.
async fn uncontended(way: Way, rl: &Redlock, endpoint: &str, workers: usize, prefix: String, cfg: &Config) -> Res<Sample> {
    let mut conns = Vec::with_capacity(workers);
    if way == Way::Endpoint {
        for _ in 0..workers {
            conns.push(Some(connect(endpoint).await?));
        }
    } else {
        conns.resize_with(workers, || None);
    }
    let end = Instant::now() + cfg.duration();
    let mut tasks = Vec::with_capacity(workers);
    for (worker, conn) in conns.into_iter().enumerate() {
        let (rl, prefix) = (rl.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::new()?;
            let owner = format!("w{worker}");
            let mut conn = conn;
            let mut i = 0u64;
            while Instant::now() < end {
                i += 1;
                let key = format!("{prefix}:{worker}:{i}");
                let started = Instant::now();
                match conn.as_mut() {
                    None => match rl.try_lock(&key, TTL).await {
                        Ok(lock) => match rl.release(&lock).await {
                            Ok(r) if r.released >= rl.quorum() => tally.record(started.elapsed()),
                            Ok(r) => tally.error(format!("released on {} server(s) only", r.released)),
                            Err(e) => tally.error(e.to_string()),
                        },
                        Err(e) => tally.error(e.to_string()),
                    },
                    Some(c) => match acquire(c, &key, &owner, None).await {
                        Ok(Some(_)) => match release(c, &key, &owner).await {
                            Ok(()) => tally.record(started.elapsed()),
                            Err(e) => tally.error(e),
                        },
                        Ok(None) => tally.error(format!("{key}: not granted on a fresh key")),
                        Err(e) => tally.error(e),
                    },
                }
            }
            Ok(tally)
        }));
    }
    collect(tasks, cfg.seconds).await
}

/// The median loopback round trip, in ms: `PING` to `url` for a second.
async fn round_trip(url: &str) -> Res<f64> {
    let mut c = connect(url).await?;
    let mut hist = histogram()?;
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end {
        let started = Instant::now();
        redis::cmd("PING").query_async::<String>(&mut c).await.map_err(|e| format!("PING {url}: {e}"))?;
        hist.saturating_record(micros(started.elapsed()));
    }
    Ok(hist.value_at_quantile(0.5) as f64 / 1000.0)
}

/// `CONTENDERS` on one resource, each waiting in the line.
async fn contended(way: Way, rl: &Redlock, endpoint: &str, resource: String, cfg: &Config, violations: &Violations) -> Res<Sample> {
    let exclusion = Arc::new(Exclusion {
        busy: AtomicBool::new(false),
        last_token: AtomicI64::new(i64::MIN),
        violations: violations.clone(),
        what: format!("{} contended, {CONTENDERS} contenders", way.name()),
    });
    let mut conns = Vec::with_capacity(CONTENDERS);
    for _ in 0..CONTENDERS {
        conns.push(if way == Way::Endpoint { Some(connect(endpoint).await?) } else { None });
    }
    let resource = Arc::new(resource);
    let end = Instant::now() + cfg.duration();
    let mut tasks = Vec::with_capacity(CONTENDERS);
    for (who, conn) in conns.into_iter().enumerate() {
        let (rl, exclusion, resource) = (rl.clone(), exclusion.clone(), resource.clone());
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::new()?;
            match conn {
                None => contend_rust(&rl, &resource, who, end, &exclusion, &mut tally).await,
                Some(mut c) => contend_endpoint(&mut c, &resource, who, end, &exclusion, &mut tally).await,
            }
            Ok(tally)
        }));
    }
    collect(tasks, cfg.seconds).await
}

async fn contend_rust(rl: &Redlock, resource: &str, who: usize, end: Instant, ex: &Exclusion, tally: &mut Tally) {
    while Instant::now() < end {
        let started = Instant::now();
        let lock = loop {
            match rl.lock_until(resource, TTL, Some(Instant::now() + DEADLINE)).await {
                Ok(lock) => break Some(lock),
                Err(Error::NotAcquired { .. }) => tally.gave_up += 1,
                Err(e) => {
                    tally.error(e.to_string());
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            if Instant::now() >= end {
                break None;
            }
        };
        let Some(lock) = lock else { break };
        let granted = Instant::now();
        if granted < end {
            ex.enter(who, lock.token);
            tally.record(granted - started);
            hold().await;
            ex.leave();
        }
        match rl.release(&lock).await {
            Ok(r) if r.released >= rl.quorum() => {}
            Ok(r) => tally.error(format!("released on {} server(s) only", r.released)),
            Err(e) => tally.error(e.to_string()),
        }
    }
}

async fn contend_endpoint(c: &mut MultiplexedConnection, resource: &str, who: usize, end: Instant, ex: &Exclusion, tally: &mut Tally) {
    let owner = format!("c{who}");
    while Instant::now() < end {
        let started = Instant::now();
        let token = loop {
            match acquire(c, resource, &owner, Some(DEADLINE)).await {
                Ok(Some(token)) => break Some(token),
                Ok(None) => tally.gave_up += 1,
                Err(e) => {
                    tally.error(e);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            if Instant::now() >= end {
                break None;
            }
        };
        let Some(token) = token else { break };
        let granted = Instant::now();
        if granted < end {
            ex.enter(who, Some(token));
            tally.record(granted - started);
            hold().await;
            ex.leave();
        }
        if let Err(e) = release(c, resource, &owner).await {
            tally.error(e);
        }
    }
}

/// The endpoint's resident memory, kB.
fn rss_kb(pid: u32) -> Res<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// A request in RESP.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// One line of a reply (the replies read here are one line each).
async fn reply_line(c: &mut tokio::io::BufReader<TcpStream>) -> Res<String> {
    let mut line = String::new();
    match c.read_line(&mut line).await {
        Ok(0) => Err("the endpoint closed a connection".into()),
        Ok(_) => Ok(line),
        Err(e) => Err(format!("read: {e}")),
    }
}

/// What the scale phase measured.
struct Scale {
    connections: usize,
    per_connection_bytes: f64,
    waiters: usize,
    per_waiter_bytes: f64,
    line_up_ms: f64,
    drain_ms: f64,
}

/// Phase 3: `connections` idle connections, then `waiters` of them in
/// one line; the endpoint's memory for each, and the line's drain.
async fn scale(port: u16, pid: u32, run: &str, violations: &Violations) -> Res<Scale> {
    let limit = testkit::raise_open_files();
    let waiters = 1_000usize.min(usize::try_from(limit.saturating_sub(500) / 10).unwrap_or(0)).max(10);
    let connections = 10_000usize.min(usize::try_from(limit.saturating_sub(5 * waiters as u64 + 500)).unwrap_or(0)).max(waiters + 1);
    let before = rss_kb(pid)?;
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| format!("connect: {e}"))?;
        conns.push(tokio::io::BufReader::new(stream));
    }
    for c in conns.iter_mut() {
        c.get_mut().write_all(&resp(&["PING"])).await.map_err(|e| format!("write: {e}"))?;
    }
    for c in conns.iter_mut() {
        let line = reply_line(c).await?;
        if line != "+PONG\r\n" {
            return Err(format!("PING answered {line:?}"));
        }
    }
    let idle = rss_kb(pid)?;
    let key = format!("sv:{run}:line");
    let mut holder = conns.pop().ok_or("no connection")?;
    holder.get_mut().write_all(&resp(&["LOCK.ACQUIRE", &key, "holder", "600000"])).await.map_err(|e| format!("write: {e}"))?;
    let first = reply_line(&mut holder).await?;
    if !first.starts_with(':') {
        return Err(format!("the holder was answered {first:?}"));
    }
    let lined_up = Instant::now();
    let mut line = Vec::with_capacity(waiters);
    for (i, mut c) in conns.drain(..waiters).enumerate() {
        let owner = format!("w{i}");
        c.get_mut()
            .write_all(&resp(&["LOCK.ACQUIRE", &key, &owner, "600000", "WAIT", "600000"]))
            .await
            .map_err(|e| format!("write: {e}"))?;
        line.push((owner, c));
    }
    let mut info = tokio::io::BufReader::new(TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| format!("connect: {e}"))?);
    loop {
        info.get_mut().write_all(&resp(&["INFO"])).await.map_err(|e| format!("write: {e}"))?;
        let head = reply_line(&mut info).await?;
        let len: usize = head.get(1..).map(str::trim).and_then(|n| n.parse().ok()).ok_or(format!("INFO answered {head:?}"))?;
        let mut body = vec![0u8; len + 2];
        info.read_exact(&mut body).await.map_err(|e| format!("read: {e}"))?;
        let text = String::from_utf8_lossy(&body);
        let waiting = text.lines().find_map(|l| l.strip_prefix("acquisitions_waiting:")).and_then(|v| v.trim().parse::<usize>().ok());
        if waiting == Some(waiters) {
            break;
        }
        if lined_up.elapsed() > Duration::from_secs(120) {
            return Err(format!("{waiters} waiters did not line up in 120 s (waiting: {waiting:?})"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let line_up_ms = lined_up.elapsed().as_secs_f64() * 1000.0;
    let waiting = rss_kb(pid)?;
    let holding = Arc::new(AtomicBool::new(false));
    let drained = Instant::now();
    holder.get_mut().write_all(&resp(&["LOCK.RELEASE", &key, "holder"])).await.map_err(|e| format!("write: {e}"))?;
    reply_line(&mut holder).await?;
    let mut tasks = Vec::with_capacity(waiters);
    for (owner, mut c) in line {
        let (holding, violations, key) = (holding.clone(), violations.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let granted = reply_line(&mut c).await?;
            if !granted.starts_with(':') {
                return Err(format!("{owner} was answered {granted:?}"));
            }
            if holding.swap(true, Ordering::SeqCst) {
                violations.push(format!("scale: {owner} granted while another waiter holds the lock"));
            }
            holding.store(false, Ordering::SeqCst);
            c.get_mut().write_all(&resp(&["LOCK.RELEASE", &key, &owner])).await.map_err(|e| format!("write: {e}"))?;
            reply_line(&mut c).await.map(|_| ())
        }));
    }
    for t in futures::future::join_all(tasks).await {
        t.map_err(|e| format!("waiter task: {e}"))??;
    }
    let drain_ms = drained.elapsed().as_secs_f64() * 1000.0;
    Ok(Scale {
        connections,
        per_connection_bytes: (idle.saturating_sub(before) * 1024) as f64 / connections as f64,
        waiters,
        per_waiter_bytes: (waiting.saturating_sub(idle) * 1024) as f64 / waiters as f64,
        line_up_ms,
        drain_ms,
    })
}

/// `redis-benchmark` against the endpoint: its requests/s, or why none.
fn redis_benchmark(port: u16, run: &str) -> String {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-c", "32", "-n", "20000", "-r", "100000000", "--csv"])
        .args(["LOCK.ACQUIRE", &format!("sb:{run}:__rand_int__"), "owner", &TTL.as_millis().to_string()])
        .stdin(Stdio::null())
        .output();
    match out {
        Err(e) => format!("not run ({e})"),
        Ok(o) if !o.status.success() => format!("failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            // The last line's second field is the requests/s.
            text.lines()
                .last()
                .and_then(|l| l.split(',').nth(1))
                .map(|v| format!("{} requests/s (32 clients, 20000 requests, each a grant of a fresh key)", v.trim_matches('"')))
                .unwrap_or_else(|| format!("no figure in its output: {text:?}"))
        }
    }
}

fn median(v: Vec<f64>) -> f64 {
    median_of(v).unwrap_or(0.0)
}

struct Med {
    rate: f64,
    p50: f64,
    p99: f64,
    gave_up: u64,
    errors: u64,
    first_error: Option<String>,
}

fn med(samples: &[Sample]) -> Med {
    let pick = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    Med {
        rate: pick(|s| s.rate),
        p50: pick(|s| s.p50_ms),
        p99: pick(|s| s.p99_ms),
        gave_up: samples.iter().map(|s| s.gave_up).sum(),
        errors: samples.iter().map(|s| s.errors).sum(),
        first_error: samples.iter().find_map(|s| s.first_error.clone()),
    }
}

#[derive(Default)]
struct Pair {
    rust: Vec<Sample>,
    endpoint: Vec<Sample>,
}

impl Pair {
    fn push(&mut self, way: Way, s: Sample) {
        match way {
            Way::Rust => self.rust.push(s),
            Way::Endpoint => self.endpoint.push(s),
        }
    }

    fn meds(&self) -> (Med, Med) {
        (med(&self.rust), med(&self.endpoint))
    }
}

/// One line for each way that had errors in the measurement `what`.
fn note_errors(errors: &mut Vec<String>, what: &str, rust: &Med, endpoint: &Med) {
    for (name, m) in [("rust", rust), ("endpoint", endpoint)] {
        if m.errors > 0 {
            errors.push(format!("  {what}, {name}: {} error(s); first: {}\n", m.errors, m.first_error.as_deref().unwrap_or("?")));
        }
    }
}

fn progress(round: usize, rounds: usize, what: &str, way: Way, s: &Sample, unit: &str) {
    eprintln!(
        "[round {}/{rounds}] {what:<24} {:<8} {:>7.0} {unit}/s  p50 {:>7.3} ms  p99 {:>7.3} ms  gave up {:>4}  errors {}{}",
        round + 1,
        way.name(),
        s.rate,
        s.p50_ms,
        s.p99_ms,
        s.gave_up,
        s.errors,
        s.first_error.as_ref().map(|e| format!(" (first: {e})")).unwrap_or_default()
    );
}

fn main() -> ExitCode {
    match run() {
        Ok(0) => ExitCode::SUCCESS,
        Ok(n) => {
            eprintln!("serve bench: FAILED: {n} mutual-exclusion or fencing violation(s)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("serve bench: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Res<usize> {
    let cfg = Config::from_env()?;
    let module = module_path()?;
    let version = redis_server_version()?;
    let servers = Server::start_many(&module, SERVERS)?;
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let endpoint = Endpoint::start(&urls)?;
    eprintln!(
        "serve bench: {SERVERS} redis-server {version} on {}, module {}; redlock serve on port {}",
        urls.join(" "),
        module.display(),
        endpoint.port
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"))?;
    let result = rt.block_on(bench(&cfg, &urls, &endpoint, &version));
    drop(rt);
    drop(endpoint);
    drop(servers);
    result
}

async fn bench(cfg: &Config, urls: &[String], endpoint: &Endpoint, version: &str) -> Res<usize> {
    let rl = Redlock::new(urls, Settings::default()).map_err(|e| format!("the Rust client: {e}"))?;
    let endpoint_url = format!("redis://127.0.0.1:{}", endpoint.port);
    let run: String = format!("{:08x}", rand::rng().random::<u32>());
    // Connections opened and both ways granting before anything is timed.
    let warm = Config { seconds: 0.5, rounds: 1 };
    for way in [Way::Rust, Way::Endpoint] {
        let s = uncontended(way, &rl, &endpoint_url, 4, format!("sv:{run}:warm:{}", way.name()), &warm).await?;
        if s.errors > 0 || s.rate <= 0.0 {
            return Err(format!("{} does not lock on the fresh servers: {}", way.name(), s.first_error.unwrap_or_default()));
        }
    }
    let violations = Violations::default();
    let started = Instant::now();
    let mut uncontended_pairs: Vec<(usize, Pair)> = WORKERS.iter().map(|&w| (w, Pair::default())).collect();
    let mut contended_pair = Pair::default();
    let mut rtts = Vec::new();
    for round in 0..cfg.rounds {
        let order = if round % 2 == 0 { [Way::Rust, Way::Endpoint] } else { [Way::Endpoint, Way::Rust] };
        for (w, pair) in uncontended_pairs.iter_mut() {
            for way in order {
                let s = uncontended(way, &rl, &endpoint_url, *w, format!("sv:{run}:u:{}:{w}:{round}", way.name()), cfg).await?;
                progress(round, cfg.rounds, &format!("uncontended {w} worker(s)"), way, &s, "cycles");
                pair.push(way, s);
            }
        }
        let rtt = round_trip(&urls[0]).await?;
        eprintln!("[round {}/{}] loopback round trip (PING) p50 {rtt:.3} ms", round + 1, cfg.rounds);
        rtts.push(rtt);
        for way in order {
            let s = contended(way, &rl, &endpoint_url, format!("sv:{run}:c:{}:{round}", way.name()), cfg, &violations).await?;
            progress(round, cfg.rounds, &format!("contended {CONTENDERS} x hold 1 ms"), way, &s, "grants");
            contended_pair.push(way, s);
        }
    }
    let scaled = scale(endpoint.port, endpoint.child.id(), &run, &violations).await?;
    let bench_line = redis_benchmark(endpoint.port, &run);
    let total = started.elapsed();

    let cpus = thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut out = String::new();
    out += &format!("serve bench: redlock serve against the Rust client it runs, on {SERVERS} redis-server {version} with the redislock module, 127.0.0.1, quorum {}\n", rl.quorum());
    out += &format!("machine: {cpus} CPU(s), shared by the {SERVERS} servers, the endpoint and the bench process\n");
    out += &format!(
        "{} s per measurement, {} round(s) (first way alternating), medians across rounds; ttl {} s; measured {:.0} s in all\n",
        cfg.seconds,
        cfg.rounds,
        TTL.as_secs(),
        total.as_secs_f64()
    );
    out += "rust: one shared Redlock, Settings::default(); endpoint: redlock serve with its defaults, a connection per worker (the redis crate)\n\n";

    let mut errors = Vec::new();
    out += "uncontended: each worker on a fresh key every cycle, acquire + release; cycle time in ms\n";
    out += &format!("{:>7} | {:<26} | {:<17} | {:<17}\n", "workers", "cycles/s", "p50", "p99");
    out += &format!(
        "{:>7} | {:>8} {:>9} {:>7} | {:>8} {:>8} | {:>8} {:>8}\n",
        "", "rust", "endpoint", "ratio", "rust", "endpoint", "rust", "endpoint"
    );
    for (w, pair) in &uncontended_pairs {
        let (r, e) = pair.meds();
        out += &format!(
            "{w:>7} | {:>8.0} {:>9.0} {:>7.2} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3}\n",
            r.rate,
            e.rate,
            ratio(e.rate, r.rate),
            r.p50,
            e.p50,
            r.p99,
            e.p99
        );
        note_errors(&mut errors, &format!("uncontended {w}"), &r, &e);
    }
    out += "ratio: cycles/s endpoint/rust\n\n";

    let (r, e) = contended_pair.meds();
    out += &format!("contended: {CONTENDERS} contenders on one resource, hold 1 ms, waiting in the line; wait in ms\n");
    out += &format!(
        "  grants/s rust {:.0}, endpoint {:.0}, ratio {:.2}; p50 wait {:.2} / {:.2}; p99 wait {:.2} / {:.2}; gave up {} / {}\n\n",
        r.rate,
        e.rate,
        ratio(e.rate, r.rate),
        r.p50,
        e.p50,
        r.p99,
        e.p99,
        r.gave_up,
        e.gave_up
    );
    note_errors(&mut errors, "contended", &r, &e);
    out += &format!(
        "scale: {} idle connections, {:.0} B of the endpoint's memory each; {} of them waiting in one line, {:.0} B more each \
         (lined up in {:.0} ms); the line drained one grant at a time in {:.0} ms ({:.0} grants/s)\n",
        scaled.connections,
        scaled.per_connection_bytes,
        scaled.waiters,
        scaled.per_waiter_bytes,
        scaled.line_up_ms,
        scaled.drain_ms,
        scaled.waiters as f64 * 1000.0 / scaled.drain_ms.max(1.0)
    );
    out += &format!("redis-benchmark LOCK.ACQUIRE through the endpoint: {bench_line}\n");
    if !errors.is_empty() {
        out += "\nerrors (counted, not fatal):\n";
        out += &errors.concat();
    }

    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    let rtt = median(rtts);
    out += "\ntargets, as measured (medians):\n";
    if let Some((_, pair)) = uncontended_pairs.iter().find(|(w, _)| *w == 32) {
        let (r, e) = pair.meds();
        let x = ratio(e.rate, r.rate);
        out += &format!("  32 workers, cycles/s endpoint/rust >= 0.8: {x:.2} ({})\n", verdict(x >= 0.8));
    }
    if let Some((_, pair)) = uncontended_pairs.iter().find(|(w, _)| *w == 1) {
        let (r, e) = pair.meds();
        // Two commands per cycle.
        let extra = (e.p50 - r.p50) / 2.0;
        let trips = ratio(extra, rtt);
        out += &format!(
            "  1 worker, extra time per command <= one loopback round trip: {:.3} ms extra, round trip {rtt:.3} ms: {trips:.2} round trips ({})\n",
            extra,
            verdict(extra <= rtt)
        );
    }
    let x = ratio(e.rate, r.rate);
    out += &format!("  16 contenders, grants/s endpoint/rust >= 0.9: {x:.2} ({})\n", verdict(x >= 0.9));

    let violations = violations.list();
    if violations.is_empty() {
        out += "\nmutual exclusion: no violation (tokens increased in grant order, both ways)\n";
    } else {
        out += &format!("\nmutual exclusion: {} VIOLATION(S):\n", violations.len());
        for v in violations.iter().take(20) {
            out += &format!("  {v}\n");
        }
    }
    print!("{out}");
    Ok(violations.len())
}
