//! Quorum benchmark: this crate's Redlock client against `rslock` (0.10, the
//! Rust Redlock crate), on the same five module-equipped servers.
//!
//!     cargo bench -p redlock --bench quorum
//!
//! Phases, each measurement BENCH_SECONDS long, run in BENCH_ROUNDS rounds;
//! each round runs every configuration with both implementations back to
//! back, the one that goes first alternating from round to round. The tables
//! show the median of the rounds for every figure.
//!
//! 1. contended: N contenders (16, 64) on ONE resource (a fresh name per
//!    measurement), holding it 1 ms or 10 ms per grant. Each loops: acquire,
//!    waiting until granted; hold (a thread sleep on the blocking pool,
//!    exact where a tokio sleep rounds up to its 1 ms tick); release. Measured: grants/s
//!    and the wait (acquire call → grant; retries included) in an
//!    HdrHistogram (µs).
//!    - ours: one shared `Redlock` (cloned into each task), `lock_until`
//!      with a deadline 5 s ahead (the FIFO line), retried on NotAcquired;
//!    - rslock: one shared `LockManager`, `lock()` retried until granted
//!      (what its `acquire_no_guard` does, but stopping at the end of the
//!      measurement), then `unlock`.
//!
//!    Both: an AtomicBool is set during the hold; finding it already set is
//!    a mutual-exclusion violation. Ours: fencing tokens must increase in
//!    grant order. A violation fails the bench (exit 1).
//! 2. uncontended: 1 and 32 workers, each on a fresh key every cycle,
//!    acquire + release cycles/s: ours `try_lock` + `release`, rslock `lock`
//!    + `unlock`, each on its one shared handle.
//!
//! Grants that come after the end of a measurement are released at once and
//! not counted (the same for both). Ttl 10 s everywhere. Our client runs on
//! `Settings::default()`; rslock on its defaults (3 attempts per `lock()`,
//! a random 0..200 ms between them).
//!
//! The bench starts five `redis-server`s (from PATH) on free ports of
//! 127.0.0.1 below 30000, no persistence, each in a temp dir, with the module
//! loaded, and kills them by PID on exit, also on panic (Drop guard) and, on
//! Linux, when this process dies (PR_SET_PDEATHSIG). The module's restart
//! quarantine defaults to 0, so fresh servers grant at once.
//!
//! Environment:
//!   REDISLOCK_MODULE  module to load (default <workspace>/target/release/libredislock.so)
//!   BENCH_SECONDS     seconds per measurement (default 5; 6 configurations ×
//!                     2 implementations × 3 rounds × 5 s = 3 min, about 3.5 min in all)
//!   BENCH_ROUNDS      rounds (default 3)
//!
//! Output: a progress line per measurement on stderr; the tables and the
//! targets as measured on stdout. Exit status 0, or 1 on a violation or a
//! setup error (no redis-server, no module, a server that does not start).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::Rng;
use redlock::{Error, Redlock, Settings};
use rslock::{LockError, LockManager};

const SERVERS: usize = 5;
/// Lease of every lock, both implementations.
const TTL: Duration = Duration::from_secs(10);
/// Ours, contended: how far ahead the deadline of each `lock_until` is.
const DEADLINE: Duration = Duration::from_secs(5);
const CONTENDERS: [usize; 2] = [16, 64];
const HOLDS_MS: [u64; 2] = [1, 10];
const WORKERS: [usize; 2] = [1, 32];
const DEFAULT_SECONDS: f64 = 5.0;
const DEFAULT_ROUNDS: usize = 3;
/// rslock's defaults (not exported): attempts per `lock()`, and the bound
/// of the uniform random delay between them.
const RSLOCK_RETRY_COUNT: u32 = 3;
const RSLOCK_RETRY_DELAY_MS: u64 = 200;

#[path = "support/servers.rs"]
mod servers;
#[path = "support/stats.rs"]
mod stats;

use servers::{module_path, redis_server_version, Res, Server};
use stats::{histogram, median_of, ratio};

// ---------------------------------------------------------------- config

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

// ---------------------------------------------------------------- measuring

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Imp {
    Ours,
    Rslock,
}

impl Imp {
    fn name(self) -> &'static str {
        match self {
            Imp::Ours => "ours",
            Imp::Rslock => "rslock",
        }
    }
}

/// The two shared handles, one of each for the whole bench.
#[derive(Clone)]
struct Clients {
    ours: Redlock,
    rslock: LockManager,
}

/// Histograms count microseconds, up to ten minutes.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// One task's counts.
struct Tally {
    hist: Histogram<u64>,
    /// Grants (contended) or cycles (uncontended) within the measurement.
    done: u64,
    /// Acquire calls that gave up and were retried by the bench: ours
    /// NotAcquired at its deadline, rslock Unavailable after its attempts.
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

/// One measurement of one implementation.
#[derive(Clone, Debug)]
struct Sample {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    gave_up: u64,
    errors: u64,
    first_error: Option<String>,
    /// The largest share of the grants any one task had, in percent (a
    /// fair share is 100/N).
    top_share: f64,
}

/// Merges the tasks' tallies into a sample over `seconds`.
async fn collect(tasks: Vec<tokio::task::JoinHandle<Res<Tally>>>, seconds: f64) -> Res<Sample> {
    let mut all = Tally::new()?;
    let mut top = 0u64;
    for t in futures::future::join_all(tasks).await {
        let t = t.map_err(|e| format!("bench task failed: {e}"))??;
        top = top.max(t.done);
        all.hist.add(&t.hist).map_err(|e| format!("histogram: {e}"))?;
        all.done += t.done;
        all.gave_up += t.gave_up;
        all.errors += t.errors;
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
    }
    let ms = |v: u64| v as f64 / 1000.0;
    let (p50, p99, max) = if all.hist.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (ms(all.hist.value_at_quantile(0.5)), ms(all.hist.value_at_quantile(0.99)), ms(all.hist.max()))
    };
    Ok(Sample {
        rate: all.done as f64 / seconds,
        p50_ms: p50,
        p99_ms: p99,
        max_ms: max,
        gave_up: all.gave_up,
        errors: all.errors,
        first_error: all.first_error,
        top_share: if all.done > 0 { 100.0 * top as f64 / all.done as f64 } else { 0.0 },
    })
}

/// Mutual exclusion (and, for ours, fencing) failures seen so far.
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

/// The holder's checks: nobody else holds it; ours: the token is above
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
        if let Some(t) = token {
            let before = self.last_token.swap(t, Ordering::SeqCst);
            if t <= before {
                self.violations.push(format!("{}: contender {who} granted token {t} after token {before}", self.what));
            }
        }
    }

    fn leave(&self) {
        self.busy.store(false, Ordering::SeqCst);
    }
}

/// N contenders on one resource for `seconds`.
async fn contended(
    imp: Imp,
    clients: &Clients,
    n: usize,
    hold: Duration,
    resource: String,
    cfg: &Config,
    violations: &Violations,
) -> Res<Sample> {
    let exclusion = Arc::new(Exclusion {
        busy: AtomicBool::new(false),
        last_token: AtomicI64::new(i64::MIN),
        violations: violations.clone(),
        what: format!("{} contended, {n} contenders, hold {} ms", imp.name(), hold.as_millis()),
    });
    let resource = Arc::new(resource);
    let end = Instant::now() + cfg.duration();
    let mut tasks = Vec::with_capacity(n);
    for who in 0..n {
        let (clients, exclusion, resource) = (clients.clone(), exclusion.clone(), resource.clone());
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::new()?;
            match imp {
                Imp::Ours => contend_ours(&clients.ours, &resource, who, hold, end, &exclusion, &mut tally).await,
                Imp::Rslock => contend_rslock(&clients.rslock, &resource, who, hold, end, &exclusion, &mut tally).await,
            }
            Ok(tally)
        }));
    }
    collect(tasks, cfg.seconds).await
}

async fn contend_ours(rl: &Redlock, resource: &str, who: usize, hold: Duration, end: Instant, ex: &Exclusion, tally: &mut Tally) {
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
            hold_for(hold).await;
            ex.leave();
        }
        match rl.release(&lock).await {
            Ok(r) if r.released >= rl.quorum() => {}
            Ok(r) => tally.error(format!("released on {} server(s) only: {}", r.released, redlock::error::Outcomes(&r.instances))),
            Err(e) => tally.error(e.to_string()),
        }
    }
}

async fn contend_rslock(lm: &LockManager, resource: &str, who: usize, hold: Duration, end: Instant, ex: &Exclusion, tally: &mut Tally) {
    while Instant::now() < end {
        let started = Instant::now();
        let lock = loop {
            match lm.lock(resource, TTL).await {
                Ok(lock) => break Some(lock),
                Err(LockError::Unavailable) => tally.gave_up += 1,
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
            ex.enter(who, None);
            tally.record(granted - started);
            hold_for(hold).await;
            ex.leave();
        }
        lm.unlock(&lock).await; // best effort, says nothing
    }
}

/// The holder's work: `hold` as exactly as the OS sleeps, on the blocking
/// pool. A tokio sleep would round up to its 1 ms timer tick, turning a
/// "1 ms" hold into 1 to 2 ms and hiding what the handoff costs.
async fn hold_for(hold: Duration) {
    if tokio::task::spawn_blocking(move || thread::sleep(hold)).await.is_err() {
        tokio::time::sleep(hold).await;
    }
}

/// `workers` loops of acquire + release, each on a fresh key every cycle.
async fn uncontended(imp: Imp, clients: &Clients, workers: usize, prefix: String, cfg: &Config) -> Res<Sample> {
    let end = Instant::now() + cfg.duration();
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let (clients, prefix) = (clients.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::new()?;
            let mut i = 0u64;
            while Instant::now() < end {
                i += 1;
                let key = format!("{prefix}:{worker}:{i}");
                let started = Instant::now();
                match imp {
                    Imp::Ours => match clients.ours.try_lock(&key, TTL).await {
                        Ok(lock) => match clients.ours.release(&lock).await {
                            Ok(r) if r.released >= clients.ours.quorum() => tally.record(started.elapsed()),
                            Ok(r) => tally.error(format!("released on {} server(s) only", r.released)),
                            Err(e) => tally.error(e.to_string()),
                        },
                        Err(e) => tally.error(e.to_string()),
                    },
                    Imp::Rslock => match clients.rslock.lock(key.as_str(), TTL).await {
                        Ok(lock) => {
                            clients.rslock.unlock(&lock).await;
                            tally.record(started.elapsed());
                        }
                        Err(e) => tally.error(e.to_string()),
                    },
                }
            }
            Ok(tally)
        }));
    }
    collect(tasks, cfg.seconds).await
}

/// Opens the connections and loads the scripts before anything is timed;
/// fails clearly when the servers cannot grant.
async fn warm_up(clients: &Clients, run: &str) -> Res<()> {
    for i in 0..8 {
        let key = format!("qb:{run}:warm:ours:{i}");
        let lock = clients
            .ours
            .try_lock(&key, TTL)
            .await
            .map_err(|e| format!("our client cannot lock on the fresh servers (is the module loaded?): {e}"))?;
        clients.ours.release(&lock).await.map_err(|e| format!("our client cannot release: {e}"))?;
        // The line's queue (LOCK.ACQUIRE ... WAIT) too.
        let lock = clients
            .ours
            .lock_until(&key, TTL, Some(Instant::now() + DEADLINE))
            .await
            .map_err(|e| format!("our client cannot lock_until: {e}"))?;
        clients.ours.release(&lock).await.map_err(|e| format!("our client cannot release: {e}"))?;
        let key = format!("qb:{run}:warm:rslock:{i}");
        let lock = clients.rslock.lock(key.as_str(), TTL).await.map_err(|e| format!("rslock cannot lock on the fresh servers: {e}"))?;
        clients.rslock.unlock(&lock).await;
    }
    Ok(())
}

// ---------------------------------------------------------------- report

/// One line per implementation that had errors in the measurement `what`.
fn note_errors(errors: &mut Vec<String>, what: &str, ours: &Med, rslock: &Med) {
    for (name, m) in [("ours", ours), ("rslock", rslock)] {
        if m.errors > 0 {
            errors.push(format!("  {what}, {name}: {} error(s); first: {}\n", m.errors, m.first_error.as_deref().unwrap_or("?")));
        }
    }
}

fn median(v: Vec<f64>) -> f64 {
    median_of(v).unwrap_or(0.0)
}

/// Medians over rounds of one configuration, one implementation.
struct Med {
    rate: f64,
    p50: f64,
    p99: f64,
    max: f64,
    gave_up: u64,
    errors: u64,
    first_error: Option<String>,
    top_share: f64,
}

fn med(samples: &[Sample]) -> Med {
    let pick = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    Med {
        rate: pick(|s| s.rate),
        p50: pick(|s| s.p50_ms),
        p99: pick(|s| s.p99_ms),
        max: pick(|s| s.max_ms),
        top_share: pick(|s| s.top_share),
        gave_up: samples.iter().map(|s| s.gave_up).sum(),
        errors: samples.iter().map(|s| s.errors).sum(),
        first_error: samples.iter().find_map(|s| s.first_error.clone()),
    }
}

/// Samples of one configuration: (ours, rslock), a sample per round each.
#[derive(Default)]
struct Pair {
    ours: Vec<Sample>,
    rslock: Vec<Sample>,
}

impl Pair {
    fn push(&mut self, imp: Imp, s: Sample) {
        match imp {
            Imp::Ours => self.ours.push(s),
            Imp::Rslock => self.rslock.push(s),
        }
    }
}

fn progress(round: usize, rounds: usize, what: &str, imp: Imp, s: &Sample, unit: &str) {
    eprintln!(
        "[round {}/{rounds}] {what:<28} {:<6} {:>6.0} {unit}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  top share {:>5.1}%  gave up {:>4}  errors {}{}",
        round + 1,
        imp.name(),
        s.rate,
        s.p50_ms,
        s.p99_ms,
        s.max_ms,
        s.top_share,
        s.gave_up,
        s.errors,
        s.first_error.as_ref().map(|e| format!(" (first: {e})")).unwrap_or_default()
    );
}

// ---------------------------------------------------------------- main

fn main() -> ExitCode {
    match run() {
        Ok(0) => ExitCode::SUCCESS,
        Ok(n) => {
            eprintln!("quorum bench: FAILED: {n} mutual-exclusion or fencing violation(s)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("quorum bench: error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The number of violations, or a setup error.
fn run() -> Res<usize> {
    let cfg = Config::from_env()?;
    let module = module_path()?;
    let version = redis_server_version()?;
    let servers = Server::start_many(&module, SERVERS)?;
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    eprintln!(
        "quorum bench: {SERVERS} redis-server {version} (pids {}) on {}, module {}",
        servers.iter().map(|s| s.pid.to_string()).collect::<Vec<_>>().join(","),
        urls.join(" "),
        module.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"))?;
    let result = rt.block_on(bench(&cfg, &urls, &version));
    drop(rt);
    drop(servers);
    result
}

async fn bench(cfg: &Config, urls: &[String], version: &str) -> Res<usize> {
    let settings = Settings::default();
    let ours = Redlock::new(urls, settings.clone()).map_err(|e| format!("our client: {e}"))?;
    let rslock = LockManager::new(urls.to_vec());
    let clients = Clients { ours, rslock };
    let run: String = format!("{:08x}", rand::rng().random::<u32>());
    warm_up(&clients, &run).await?;
    let violations = Violations::default();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let started = Instant::now();

    let mut contended_pairs: Vec<((usize, u64), Pair)> =
        CONTENDERS.iter().flat_map(|&n| HOLDS_MS.iter().map(move |&h| ((n, h), Pair::default()))).collect();
    let mut uncontended_pairs: Vec<(usize, Pair)> = WORKERS.iter().map(|&w| (w, Pair::default())).collect();
    for round in 0..cfg.rounds {
        let order = if round % 2 == 0 { [Imp::Ours, Imp::Rslock] } else { [Imp::Rslock, Imp::Ours] };
        for ((n, hold_ms), pair) in contended_pairs.iter_mut() {
            for imp in order {
                let resource = format!("qb:{run}:c:{}:{n}:{hold_ms}:{round}", imp.name());
                let s = contended(imp, &clients, *n, Duration::from_millis(*hold_ms), resource, cfg, &violations).await?;
                progress(round, cfg.rounds, &format!("contended {n} x hold {hold_ms} ms"), imp, &s, "grants");
                pair.push(imp, s);
            }
        }
        for (w, pair) in uncontended_pairs.iter_mut() {
            for imp in order {
                let prefix = format!("qb:{run}:u:{}:{w}:{round}", imp.name());
                let s = uncontended(imp, &clients, *w, prefix, cfg).await?;
                progress(round, cfg.rounds, &format!("uncontended {w} worker(s)"), imp, &s, "cycles");
                pair.push(imp, s);
            }
        }
    }
    let total = started.elapsed();

    let mut out = String::new();
    out += &format!(
        "quorum bench: redlock (this crate) vs rslock 0.10, on {SERVERS} redis-server {version} with the redislock module, 127.0.0.1, quorum {}\n",
        clients.ours.quorum()
    );
    out += &format!("machine: {cpus} CPU(s), shared by the {SERVERS} servers and the bench process (both clients on one tokio runtime)\n");
    out += &format!(
        "{} s per measurement, {} round(s) (first implementation alternating), medians across rounds; ttl {} s; measured {:.0} s in all\n",
        cfg.seconds,
        cfg.rounds,
        TTL.as_secs(),
        total.as_secs_f64()
    );
    out += &format!(
        "ours:   one shared Redlock, Settings::default() (request timeout {} ms, connect timeout {} ms, retry delay {}..{} ms); contended: lock_until, deadline {} s (FIFO line); uncontended: try_lock\n",
        settings.request_timeout.as_millis(),
        settings.connect_timeout.as_millis(),
        settings.retry_delay.0.as_millis(),
        settings.retry_delay.1.as_millis(),
        DEADLINE.as_secs()
    );
    out += &format!(
        "rslock: one shared LockManager, its defaults: retry count {RSLOCK_RETRY_COUNT} (attempts per lock()), retry delay uniform 0..{RSLOCK_RETRY_DELAY_MS} ms; contended: lock() retried until granted; uncontended: lock()\n\n"
    );

    out += "contended: one resource, acquire (waiting) -> hold -> release; wait = acquire call -> grant, in ms\n";
    out += &format!(
        "{:>10} {:>5} | {:<23} | {:<15} | {:<22} | {:<15} | {:<13} | {:<13}\n",
        "contenders", "hold", "grants/s", "p50 wait", "p99 wait", "max wait", "top share %", "gave up"
    );
    out += &format!(
        "{:>10} {:>5} | {:>7} {:>7} {:>7} | {:>7} {:>7} | {:>7} {:>7} {:>6} | {:>7} {:>7} | {:>6} {:>6} | {:>6} {:>6}\n",
        "",
        "",
        "ours",
        "rslock",
        "ratio",
        "ours",
        "rslock",
        "ours",
        "rslock",
        "ratio",
        "ours",
        "rslock",
        "ours",
        "rslock",
        "ours",
        "rslock"
    );
    let mut errors: Vec<String> = Vec::new();
    for ((n, hold_ms), pair) in &contended_pairs {
        let (o, r) = (med(&pair.ours), med(&pair.rslock));
        out += &format!(
            "{:>10} {:>3}ms | {:>7.0} {:>7.0} {:>7.2} | {:>7.2} {:>7.2} | {:>7.2} {:>7.2} {:>6.3} | {:>7.1} {:>7.1} | {:>6.1} {:>6.1} | {:>6} {:>6}\n",
            n,
            hold_ms,
            o.rate,
            r.rate,
            ratio(o.rate, r.rate),
            o.p50,
            r.p50,
            o.p99,
            r.p99,
            ratio(o.p99, r.p99),
            o.max,
            r.max,
            o.top_share,
            r.top_share,
            o.gave_up,
            r.gave_up
        );
        note_errors(&mut errors, &format!("contended {n} x {hold_ms} ms"), &o, &r);
    }
    out += "ratio: grants/s ours/rslock; p99 wait ours/rslock. top share: the grants of the contender that had most, in % of all (fair: 100/N).\n";
    out += "gave up: acquire calls that ran out (ours: its deadline; rslock: its 3 attempts) and were called again, summed over the rounds\n\n";

    out += "uncontended: each worker on a fresh key every cycle, acquire + release; cycle time in ms\n";
    out += &format!("{:>7} | {:<26} | {:<17} | {:<17} | {:<13}\n", "workers", "cycles/s", "p50", "p99", "errors");
    out += &format!(
        "{:>7} | {:>9} {:>9} {:>6} | {:>8} {:>8} | {:>8} {:>8} | {:>6} {:>6}\n",
        "", "ours", "rslock", "ratio", "ours", "rslock", "ours", "rslock", "ours", "rslock"
    );
    for (w, pair) in &uncontended_pairs {
        let (o, r) = (med(&pair.ours), med(&pair.rslock));
        out += &format!(
            "{:>7} | {:>9.0} {:>9.0} {:>6.2} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3} | {:>6} {:>6}\n",
            w,
            o.rate,
            r.rate,
            ratio(o.rate, r.rate),
            o.p50,
            r.p50,
            o.p99,
            r.p99,
            o.errors,
            r.errors
        );
        note_errors(&mut errors, &format!("uncontended {w} worker(s)"), &o, &r);
    }
    out += "ratio: cycles/s ours/rslock. errors: summed over the rounds\n";
    if !errors.is_empty() {
        out += "\nerrors (counted, not fatal):\n";
        out += &errors.concat();
    }

    let target = contended_pairs.iter().find(|((n, h), _)| *n == 16 && *h == 1).map(|(_, p)| (med(&p.ours), med(&p.rslock)));
    if let Some((o, r)) = target {
        let grants = ratio(o.rate, r.rate);
        let p99 = ratio(o.p99, r.p99);
        let verdict = |ok: bool| if ok { "met" } else { "not met" };
        out += "\ntargets, as measured (medians):\n";
        out += &format!("  contended grants/s ours/rslock >= 1.5 at 16 contenders, 1 ms hold: {grants:.2} ({})\n", verdict(grants >= 1.5));
        out += &format!("  p99 wait ours/rslock <= 0.3 (same configuration): {p99:.3} ({})\n", verdict(p99 <= 0.3));
    }

    let violations = violations.list();
    if violations.is_empty() {
        out += "\nmutual exclusion: no violation (ours: tokens increased in grant order)\n";
    } else {
        out += &format!("\nmutual exclusion: {} VIOLATION(S):\n", violations.len());
        for v in violations.iter().take(20) {
            out += &format!("  {v}\n");
        }
    }
    let out: String = out.lines().map(|l| format!("{}\n", l.trim_end())).collect();
    print!("{out}");
    Ok(violations.len())
}
