//! `redlock bench`: throughput and latency against the servers, in one run.
//!
//! Phases (each `--duration` long, a progress bar each on stderr):
//! - uncontended quorum acquire+release of fresh resources, module and
//!   script mode, with 1 and `--workers` workers sharing one client;
//! - the single-instance floor: one LOCK.ACQUIRE and one LOCK.RELEASE round
//!   trip on the first server only, 1 and `--workers` workers;
//! - contended: `--contenders` workers, each with its own client (own
//!   connections), on one resource, `lock_until` with a deadline of one ttl,
//!   holding `--hold` then releasing; the latency is the wait for the lock.
//!
//! The table and the ratios measured in the same run (module against
//! script mode, the quorum against the single-server floor) go to stdout.
//! No absolute targets: what a machine reaches depends on its cores, and
//! the ratios are what this run can tell.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::Rng;
use redlock::transport::Instance;
use redlock::{Mode, Outcome, Redlock, Settings};
use serde::Serialize;

use super::args::{BenchArgs, Global};
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, Op};

/// Histograms count microseconds, up to one hour.
fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).map_err(|e| format!("histogram: {e}"))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One measured phase.
struct Phase {
    name: String,
    workers: usize,
    cycles: u64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    /// Cycle latency (µs), or the wait for the lock when contended.
    hist: Histogram<u64>,
    /// Cycles of each worker, for fairness.
    per_worker: Vec<u64>,
}

impl Phase {
    /// Jain's fairness index of the cycles per worker: 1 when every worker
    /// got as many, 1/n when one got them all.
    fn jain(&self) -> f64 {
        let n = self.per_worker.len() as f64;
        let sum: f64 = self.per_worker.iter().map(|&c| c as f64).sum();
        let squares: f64 = self.per_worker.iter().map(|&c| (c as f64) * (c as f64)).sum();
        if squares > 0.0 {
            sum * sum / (n * squares)
        } else {
            0.0
        }
    }

    fn min_max(&self) -> (u64, u64) {
        (self.per_worker.iter().copied().min().unwrap_or(0), self.per_worker.iter().copied().max().unwrap_or(0))
    }

    fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.cycles as f64 / secs
        } else {
            0.0
        }
    }

    fn quantile_ms(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    fn max_ms(&self) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.max() as f64 / 1000.0
    }
}

#[derive(Default)]
struct WorkerTally {
    cycles: u64,
    errors: u64,
    first_error: Option<String>,
}

/// Runs `workers` loops of `cycle(worker, iteration)` for `duration`; a
/// cycle returns the latency to record or an error to count.
async fn measure<F, Fut>(name: String, workers: usize, duration: Duration, cycle: F) -> Result<Phase, Failure>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Duration, String>> + Send + 'static,
{
    let bar = ProgressBar::new(output::millis(duration).max(1));
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{wide_bar}] {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(format!("{name}, {workers} worker(s)"));

    let cycle = Arc::new(cycle);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let end = started
        .checked_add(duration)
        .ok_or_else(|| Failure::usage(format!("--duration {} is too long", humantime::format_duration(duration))))?;
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let cycle = cycle.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram()?;
            let mut tally = WorkerTally::default();
            let mut i = 0u64;
            while Instant::now() < end {
                i += 1;
                match cycle(worker, i).await {
                    Ok(latency) => {
                        hist.saturating_record(micros(latency).max(1));
                        tally.cycles += 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e);
                    }
                }
            }
            Ok::<_, String>((hist, tally))
        }));
    }
    let ticker = {
        let bar = bar.clone();
        let done = done.clone();
        tokio::spawn(async move {
            loop {
                let elapsed = started.elapsed().min(duration);
                bar.set_position(output::millis(elapsed));
                bar.set_message(format!(
                    "{:.1}s/{} {}",
                    elapsed.as_secs_f64(),
                    humantime::format_duration(duration),
                    done.load(Ordering::Relaxed)
                ));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let results = futures::future::join_all(tasks).await;
    let elapsed = started.elapsed();
    ticker.abort();

    let mut hist = histogram().map_err(Failure::general)?;
    let mut phase = WorkerTally::default();
    let mut per_worker = Vec::with_capacity(workers);
    for result in results {
        let (h, tally) = result.map_err(|e| Failure::general(format!("bench worker failed: {e}")))?.map_err(Failure::general)?;
        hist.add(&h).map_err(|e| Failure::general(format!("histogram: {e}")))?;
        per_worker.push(tally.cycles);
        phase.cycles += tally.cycles;
        phase.errors += tally.errors;
        if phase.first_error.is_none() {
            phase.first_error = tally.first_error;
        }
    }
    bar.set_position(output::millis(duration));
    bar.finish_with_message(format!("{} cycles, {} errors", phase.cycles, phase.errors));
    Ok(Phase { name, workers, cycles: phase.cycles, errors: phase.errors, first_error: phase.first_error, elapsed, hist, per_worker })
}

/// Uncontended quorum cycles: lock and release a fresh resource.
async fn quorum_phase(rl: &Redlock, name: &str, workers: usize, args: &BenchArgs, run: &str) -> Result<Phase, Failure> {
    let (rl, ttl, run) = (rl.clone(), args.ttl, run.to_string());
    measure(name.to_string(), workers, args.duration, move |worker, i| {
        let rl = rl.clone();
        let resource = format!("redlock-bench:{run}:{worker}:{i}");
        async move {
            let started = Instant::now();
            let lock = rl.lock(&resource, ttl).await.map_err(|e| e.to_string())?;
            let released = rl.release(&lock).await.map_err(|e| e.to_string())?;
            if released.released < rl.quorum() {
                return Err(format!(
                    "{resource}: released on {} server(s) only: {}",
                    released.released,
                    redlock::error::Outcomes(&released.instances)
                ));
            }
            Ok(started.elapsed())
        }
    })
    .await
}

/// The floor: LOCK.ACQUIRE + LOCK.RELEASE on one server.
async fn floor_phase(instance: &Arc<Instance>, workers: usize, args: &BenchArgs, run: &str) -> Result<Phase, Failure> {
    let (instance, ttl, run) = (instance.clone(), args.ttl, run.to_string());
    let name = format!("floor: 1 server ({})", instance.name);
    measure(name, workers, args.duration, move |worker, i| {
        let instance = instance.clone();
        let resource = format!("redlock-bench:{run}:floor:{worker}:{i}");
        let owner = format!("redlock-bench-{run}-{worker}");
        async move {
            let started = Instant::now();
            let acquired = instance.acquire(&resource, &owner, ttl, None, false).await;
            if !matches!(acquired.outcome, Outcome::Granted { .. }) {
                return Err(format!("LOCK.ACQUIRE: {acquired}"));
            }
            let released = instance.release(&resource, &owner).await;
            if released.outcome != Outcome::Done {
                return Err(format!("LOCK.RELEASE: {released}"));
            }
            Ok(started.elapsed())
        }
    })
    .await
}

/// What a contended phase's workers ask for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Contention {
    Exclusive,
    /// Even workers exclusive, odd ones shared, on one read-write lock.
    Mixed,
    /// One of `n` permits of a semaphore.
    Permits(u32),
}

impl Contention {
    fn name(self) -> String {
        match self {
            Contention::Exclusive => "contended: exclusive, lock_until".to_string(),
            Contention::Mixed => "contended: half shared, half exclusive".to_string(),
            Contention::Permits(n) => format!("contended: permits, limit {n}"),
        }
    }
}

/// Contended: every worker has its own client, waits in the resource's
/// line (deadline: one ttl), holds, releases; records the wait.
async fn contended_phase(clients: Arc<Vec<Redlock>>, contention: Contention, args: &BenchArgs, run: &str) -> Result<Phase, Failure> {
    let workers = clients.len();
    let (ttl, hold) = (args.ttl, args.hold);
    let resource = Arc::new(match contention {
        Contention::Exclusive => format!("redlock-bench:{run}:contended"),
        Contention::Mixed => format!("redlock-bench:{run}:contended-rw"),
        Contention::Permits(_) => format!("redlock-bench:{run}:contended-permits"),
    });
    measure(contention.name(), workers, args.duration, move |worker, _| {
        let rl = clients.get(worker).cloned();
        let resource = resource.clone();
        async move {
            let rl = rl.ok_or_else(|| "no client for this worker".to_string())?;
            let started = Instant::now();
            let deadline = started.checked_add(ttl);
            let taken = match contention {
                Contention::Mixed if worker % 2 == 1 => rl.lock_shared_until(&resource, ttl, deadline).await,
                Contention::Permits(n) => rl.permit_until(&resource, n, ttl, deadline).await,
                _ => rl.lock_until(&resource, ttl, deadline).await,
            };
            let lock = taken.map_err(|e| match e {
                redlock::Error::NotAcquired { .. } => {
                    format!("not granted within the ttl ({})", humantime::format_duration(ttl))
                }
                other => other.to_string(),
            })?;
            let waited = started.elapsed();
            tokio::time::sleep(hold).await;
            let released = rl.release(&lock).await.map_err(|e| e.to_string())?;
            if released.released < rl.quorum() {
                return Err(format!("released on {} server(s) only", released.released));
            }
            Ok(waited)
        }
    })
    .await
}

/// Checks that a quorum answers and that a lock can be taken, so a bench
/// against missing servers fails at once with a clear message.
async fn preflight(module: &Redlock, script: &Redlock, ttl: Duration, run: &str) -> Result<(), Failure> {
    let resource = format!("redlock-bench:{run}:preflight");
    let statuses = module.status(&resource).await;
    let answered = statuses.iter().filter(|s| s.reachable && s.error.is_none()).count();
    if answered < module.quorum() {
        let outcomes: Vec<_> = statuses.iter().map(|s| explain::as_outcome(&s.server, s.failure.as_ref())).collect();
        return Err(explain::no_quorum("cannot bench (it needs the redislock module)", &outcomes, module.quorum(), Op::Release));
    }
    // One cycle in each mode also loads the Lua scripts and opens connections.
    for rl in [module, script] {
        let lock = rl.lock(&resource, ttl).await.map_err(|e| explain::not_acquired(&e, rl.quorum()))?;
        rl.release(&lock).await.map_err(|e| explain::other(&e))?;
    }
    Ok(())
}

#[derive(Serialize)]
struct PhaseJson<'a> {
    name: &'a str,
    workers: usize,
    cycles: u64,
    errors: u64,
    first_error: Option<&'a str>,
    seconds: f64,
    cycles_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

#[derive(Serialize)]
struct RatioJson {
    name: String,
    value: f64,
}

#[derive(Serialize)]
struct ContendedJson {
    contenders: usize,
    grants: u64,
    /// Acquisitions not granted within the ttl, or failed.
    not_granted: u64,
    p50_wait_ms: f64,
    p99_wait_ms: f64,
    max_wait_ms: f64,
    ttl_ms: u64,
}

#[derive(Serialize)]
struct BenchJson<'a> {
    servers: Vec<String>,
    quorum: usize,
    cpus: usize,
    ttl_ms: u64,
    phase_ms: u64,
    request_timeout_ms: u64,
    retry_delay_ms: (u64, u64),
    workers: usize,
    phases: Vec<PhaseJson<'a>>,
    /// Measured in this run: module/script and quorum/floor cycles/s, at
    /// 1 and at --workers workers.
    ratios: Vec<RatioJson>,
    contended: Option<ContendedJson>,
    /// Grants per worker of each contended phase: min, max, Jain's index.
    fairness: Vec<FairnessJson<'a>>,
}

#[derive(Serialize)]
struct FairnessJson<'a> {
    phase: &'a str,
    grants_per_worker: &'a [u64],
    min: u64,
    max: u64,
    /// Jain's fairness index: 1 when every worker got as many grants.
    jain: f64,
}

pub async fn bench(global: &Global, args: &BenchArgs, json: bool) -> Result<i32, Failure> {
    let urls = global.urls().map_err(Failure::usage)?;
    let settings = global.settings(Mode::Module);
    let module = Redlock::new(&urls, settings.clone()).map_err(|e| explain::other(&e))?;
    let script = Redlock::new(&urls, Settings { mode: Mode::Script, ..settings.clone() }).map_err(|e| explain::other(&e))?;
    let first = urls.first().ok_or_else(|| Failure::usage("no servers given"))?;
    let floor = Arc::new(Instance::new(first, &settings).map_err(|e| Failure::usage(format!("{first}: {e}")))?);
    let workers = usize::try_from(args.workers).map_err(|e| Failure::usage(e.to_string()))?;
    let contenders = usize::try_from(args.contenders).map_err(|e| Failure::usage(e.to_string()))?;
    let run: String = format!("{:08x}", rand::rng().random::<u32>());
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);

    preflight(&module, &script, args.ttl, &run).await?;
    // Open the floor connection before its phase is timed.
    let warm = format!("redlock-bench:{run}:warm");
    let _ = floor.release(&warm, "warm").await;

    let mut phases = Vec::new();
    for n in [1, workers] {
        phases.push(quorum_phase(&module, "uncontended: module, quorum", n, args, &run).await?);
        phases.push(quorum_phase(&script, "uncontended: script, quorum", n, args, &run).await?);
    }
    for n in [1, workers] {
        phases.push(floor_phase(&floor, n, args, &run).await?);
    }
    let mut clients = Vec::with_capacity(contenders);
    for _ in 0..contenders {
        let client = Redlock::new(&urls, settings.clone()).map_err(|e| explain::other(&e))?;
        let _ = client.status(&warm).await; // connect before the phase starts
        clients.push(client);
    }
    let clients = Arc::new(clients);
    for contention in [Contention::Exclusive, Contention::Mixed, Contention::Permits(2)] {
        phases.push(contended_phase(clients.clone(), contention, args, &run).await?);
    }

    let report = Report::new(&phases, workers, &module);
    if json {
        output::json(&BenchJson {
            servers: module.servers(),
            quorum: module.quorum(),
            cpus,
            ttl_ms: output::millis(args.ttl),
            phase_ms: output::millis(args.duration),
            request_timeout_ms: output::millis(settings.request_timeout),
            retry_delay_ms: (output::millis(settings.retry_delay.0), output::millis(settings.retry_delay.1)),
            workers,
            phases: phases
                .iter()
                .map(|p| PhaseJson {
                    name: &p.name,
                    workers: p.workers,
                    cycles: p.cycles,
                    errors: p.errors,
                    first_error: p.first_error.as_deref(),
                    seconds: p.elapsed.as_secs_f64(),
                    cycles_per_sec: p.rate(),
                    p50_ms: p.quantile_ms(0.5),
                    p99_ms: p.quantile_ms(0.99),
                    max_ms: p.max_ms(),
                })
                .collect(),
            ratios: report.ratios.into_iter().map(|(name, value)| RatioJson { name, value }).collect(),
            contended: contended(&phases).map(|c| ContendedJson {
                contenders: c.workers,
                grants: c.cycles,
                not_granted: c.errors,
                p50_wait_ms: c.quantile_ms(0.5),
                p99_wait_ms: c.quantile_ms(0.99),
                max_wait_ms: c.max_ms(),
                ttl_ms: output::millis(args.ttl),
            }),
            fairness: phases
                .iter()
                .filter(|p| p.name.starts_with("contended"))
                .map(|p| FairnessJson {
                    phase: &p.name,
                    grants_per_worker: &p.per_worker,
                    min: p.min_max().0,
                    max: p.min_max().1,
                    jain: p.jain(),
                })
                .collect(),
        })?;
    } else {
        let header = format!(
            "redlock bench: {} servers, quorum {}, {} CPU core(s), ttl {}, {} per phase, request timeout {}, retry delay {}..{}\n\n",
            module.servers().len(),
            module.quorum(),
            cpus,
            humantime::format_duration(args.ttl),
            humantime::format_duration(args.duration),
            humantime::format_duration(settings.request_timeout),
            humantime::format_duration(settings.retry_delay.0),
            humantime::format_duration(settings.retry_delay.1),
        );
        output::stdout(&(header + &text(&phases, &report, args.ttl)))?;
    }
    Ok(exit::OK)
}

struct Report {
    ratios: Vec<(String, f64)>,
}

fn contended(phases: &[Phase]) -> Option<&Phase> {
    phases.iter().find(|p| p.name.starts_with("contended"))
}

impl Report {
    /// The ratios this run measured, at 1 worker and at `workers`.
    fn new(phases: &[Phase], workers: usize, module_rl: &Redlock) -> Report {
        let find = |prefix: &str, n: usize| phases.iter().find(|p| p.name.starts_with(prefix) && p.workers == n);
        let rate = |prefix: &str, n: usize| find(prefix, n).map(Phase::rate).unwrap_or(0.0);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let mut ratios = Vec::new();
        let mut counts = vec![1];
        if workers != 1 {
            counts.push(workers);
        }
        for &n in &counts {
            ratios.push((
                format!("module/script cycles/s, {n} worker(s)"),
                ratio(rate("uncontended: module", n), rate("uncontended: script", n)),
            ));
        }
        for &n in &counts {
            ratios.push((
                format!("quorum/floor cycles/s, {n} worker(s) (module, {} servers vs 1)", module_rl.servers().len()),
                ratio(rate("uncontended: module", n), rate("floor", n)),
            ));
        }
        Report { ratios }
    }
}

fn text(phases: &[Phase], report: &Report, ttl: Duration) -> String {
    let mut t =
        format!("{:<44} {:>7} {:>10} {:>9} {:>9} {:>9} {:>7}\n", "phase", "workers", "cycles/s", "p50 ms", "p99 ms", "max ms", "errors");
    for p in phases {
        let name = if p.name.starts_with("contended") { format!("{} (wait)", p.name) } else { p.name.clone() };
        t.push_str(&format!(
            "{:<44} {:>7} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>7}\n",
            name,
            p.workers,
            p.rate(),
            p.quantile_ms(0.5),
            p.quantile_ms(0.99),
            p.max_ms(),
            p.errors
        ));
    }
    let errors: Vec<String> =
        phases.iter().filter_map(|p| p.first_error.as_ref().map(|e| format!("  {}, {} worker(s): {e}\n", p.name, p.workers))).collect();
    if !errors.is_empty() {
        t.push_str("\nfirst error of each phase with errors:\n");
        t.push_str(&errors.concat());
    }
    t.push_str("\nratios measured in this run\n");
    for (name, value) in &report.ratios {
        t.push_str(&format!("  {name:<60} {value:>6.2}\n"));
    }
    if let Some(c) = contended(phases) {
        t.push_str(&format!(
            "\ncontended: {} grants to {} worker(s) in {:.1} s, wait p99 {:.2} ms, max {:.2} ms (ttl {}); {} not granted within the ttl or failed\n",
            c.cycles,
            c.workers,
            c.elapsed.as_secs_f64(),
            c.quantile_ms(0.99),
            c.max_ms(),
            humantime::format_duration(ttl),
            c.errors
        ));
    }
    t.push_str("\nfairness of the contended phases: grants per worker\n");
    t.push_str(&format!("  {:<44} {:>6} {:>6} {:>7} {:>6}\n", "phase", "min", "max", "min/max", "Jain"));
    for p in phases.iter().filter(|p| p.name.starts_with("contended")) {
        let (min, max) = p.min_max();
        let ratio = if max > 0 { min as f64 / max as f64 } else { 0.0 };
        t.push_str(&format!("  {:<44} {min:>6} {max:>6} {ratio:>7.2} {:>6.3}\n", p.name, p.jain()));
    }
    t
}
