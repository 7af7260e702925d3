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
//!   Exclusive, then half shared / half exclusive, then 2 permits.
//!
//! `--phases` picks some of them (`--phases exclusive`: the contended
//! exclusive phase alone, as `client/benches/rtt.rs` runs it).
//!
//! The hold is exact: a thread sleep on the blocking pool that wakes
//! [`HOLD_SPIN`] early and spins to the end (see [`hold_until`]); each
//! hold's real length is measured, from the grant to the release call,
//! and its mean reported (`hold_mean_ms`). While they hold, the contenders
//! check that nobody holds beside them who may not (two exclusive holders,
//! a shared one beside an exclusive one, a third of 2 permits) and that
//! exclusive tokens rise in grant order: `overlaps` counts what they found,
//! and any makes the exit status 1.
//!
//! The table and the ratios measured in the same run (module against
//! script mode, the quorum against the single-server floor) go to stdout.
//! No absolute targets: what a machine reaches depends on its cores, and
//! the ratios are what this run can tell.

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::Rng;
use redlock::transport::Instance;
use redlock::{Mode, Outcome, Redlock, Settings};
use serde::Serialize;

use super::args::{BenchArgs, BenchPhase, Global};
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
    /// Contended phases: the holds as measured.
    hold: Option<HoldStats>,
    /// Contended phases: holders found beside one another where the lock
    /// allows none, and exclusive tokens out of grant order.
    overlaps: Option<u64>,
}

/// The real length of the holds of a phase.
#[derive(Clone, Copy)]
struct HoldStats {
    mean: Duration,
    max: Duration,
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

    /// The busiest worker's share of the cycles (fair: 1/n).
    fn max_share(&self) -> f64 {
        if self.cycles > 0 {
            self.min_max().1 as f64 / self.cycles as f64
        } else {
            0.0
        }
    }

    fn hold_mean_ms(&self) -> Option<f64> {
        self.hold.map(|h| output::millis_f64(h.mean))
    }

    fn hold_max_ms(&self) -> Option<f64> {
        self.hold.map(|h| output::millis_f64(h.max))
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
    holds: u64,
    hold_sum: Duration,
    hold_max: Duration,
}

/// What one cycle measured.
struct Cycle {
    /// Its latency, or the wait for the lock when contended.
    latency: Duration,
    /// Contended: how long the lock was held, grant to release call.
    hold: Option<Duration>,
}

impl From<Duration> for Cycle {
    fn from(latency: Duration) -> Cycle {
        Cycle { latency, hold: None }
    }
}

/// Runs `workers` loops of `cycle(worker, iteration)` for `duration`; a
/// cycle returns what it measured or an error to count.
async fn measure<F, Fut>(name: String, workers: usize, duration: Duration, cycle: F) -> Result<Phase, Failure>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Cycle, String>> + Send + 'static,
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
                    Ok(c) => {
                        hist.saturating_record(micros(c.latency).max(1));
                        tally.cycles += 1;
                        if let Some(hold) = c.hold {
                            tally.holds += 1;
                            tally.hold_sum = tally.hold_sum.saturating_add(hold);
                            tally.hold_max = tally.hold_max.max(hold);
                        }
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
        phase.holds += tally.holds;
        phase.hold_sum = phase.hold_sum.saturating_add(tally.hold_sum);
        phase.hold_max = phase.hold_max.max(tally.hold_max);
        if phase.first_error.is_none() {
            phase.first_error = tally.first_error;
        }
    }
    bar.set_position(output::millis(duration));
    bar.finish_with_message(format!("{} cycles, {} errors", phase.cycles, phase.errors));
    let hold = (phase.holds > 0)
        .then(|| HoldStats { mean: Duration::from_secs_f64(phase.hold_sum.as_secs_f64() / phase.holds as f64), max: phase.hold_max });
    Ok(Phase {
        name,
        workers,
        cycles: phase.cycles,
        errors: phase.errors,
        first_error: phase.first_error,
        elapsed,
        hist,
        per_worker,
        hold,
        overlaps: None,
    })
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
            Ok(started.elapsed().into())
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
            let acquired = instance.acquire(&resource, &owner, ttl, None, false, None).await;
            if !matches!(acquired.outcome, Outcome::Granted { .. }) {
                return Err(format!("LOCK.ACQUIRE: {acquired}"));
            }
            let released = instance.release(&resource, &owner).await;
            if released.outcome != Outcome::Done {
                return Err(format!("LOCK.RELEASE: {released}"));
            }
            Ok(started.elapsed().into())
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
/// line (deadline: one ttl), holds exactly `--hold`, releases; records the
/// wait and the hold, and checks who holds beside whom.
async fn contended_phase(clients: Arc<Vec<Redlock>>, contention: Contention, args: &BenchArgs, run: &str) -> Result<Phase, Failure> {
    let workers = clients.len();
    let (ttl, hold) = (args.ttl, args.hold);
    let resource = Arc::new(match contention {
        Contention::Exclusive => format!("redlock-bench:{run}:contended"),
        Contention::Mixed => format!("redlock-bench:{run}:contended-rw"),
        Contention::Permits(_) => format!("redlock-bench:{run}:contended-permits"),
    });
    let occupancy = Arc::new(Occupancy::default());
    let seen = occupancy.clone();
    let mut phase = measure(contention.name(), workers, args.duration, move |worker, _| {
        let rl = clients.get(worker).cloned();
        let resource = resource.clone();
        let occupancy = occupancy.clone();
        async move {
            let rl = rl.ok_or_else(|| "no client for this worker".to_string())?;
            let started = Instant::now();
            let deadline = started.checked_add(ttl);
            let shared = contention == Contention::Mixed && worker % 2 == 1;
            let taken = match contention {
                Contention::Mixed if shared => rl.lock_shared_until(&resource, ttl, deadline).await,
                Contention::Permits(n) => rl.permit_until(&resource, n, ttl, deadline).await,
                _ => rl.lock_until(&resource, ttl, deadline).await,
            };
            let lock = taken.map_err(|e| match e {
                redlock::Error::NotAcquired { .. } => {
                    format!("not granted within the ttl ({})", humantime::format_duration(ttl))
                }
                other => other.to_string(),
            })?;
            let granted = Instant::now();
            let waited = granted - started;
            occupancy.enter(contention, shared, lock.token);
            hold_until(granted.checked_add(hold).unwrap_or(granted)).await;
            let held = granted.elapsed();
            occupancy.leave(contention, shared);
            let released = rl.release(&lock).await.map_err(|e| e.to_string())?;
            if released.released < rl.quorum() {
                return Err(format!("released on {} server(s) only", released.released));
            }
            Ok(Cycle { latency: waited, hold: Some(held) })
        }
    })
    .await?;
    phase.overlaps = Some(seen.overlaps.load(Ordering::SeqCst));
    Ok(phase)
}

/// Who holds the contended resource now, as its holders say: exclusive
/// holders, shared holders (or permits), and what was found wrong.
struct Occupancy {
    exclusive: AtomicU64,
    shared: AtomicU64,
    /// The token of the latest exclusive grant (tokens rise in grant order).
    last_token: AtomicI64,
    overlaps: AtomicU64,
}

impl Default for Occupancy {
    fn default() -> Occupancy {
        Occupancy {
            exclusive: AtomicU64::new(0),
            shared: AtomicU64::new(0),
            last_token: AtomicI64::new(i64::MIN),
            overlaps: AtomicU64::new(0),
        }
    }
}

impl Occupancy {
    fn enter(&self, contention: Contention, shared: bool, token: Option<i64>) {
        let wrong = match contention {
            Contention::Permits(n) => self.shared.fetch_add(1, Ordering::SeqCst) >= u64::from(n),
            _ if shared => {
                self.shared.fetch_add(1, Ordering::SeqCst);
                self.exclusive.load(Ordering::SeqCst) > 0
            }
            _ => {
                let before = self.exclusive.fetch_add(1, Ordering::SeqCst);
                let readers = self.shared.load(Ordering::SeqCst);
                let out_of_order = match (contention, token) {
                    (Contention::Exclusive, Some(t)) => self.last_token.swap(t, Ordering::SeqCst) >= t,
                    _ => false,
                };
                before > 0 || readers > 0 || out_of_order
            }
        };
        if wrong {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self, contention: Contention, shared: bool) {
        let count = if shared || matches!(contention, Contention::Permits(_)) { &self.shared } else { &self.exclusive };
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long before the end of a hold its thread wakes from its sleep and
/// spins instead.
const HOLD_SPIN: Duration = Duration::from_micros(20);

/// Holds until `until`, exactly. A tokio sleep rounds up to its 1 ms
/// timer tick (a "1 ms" hold lasted about 2.1 ms); a thread sleep on the
/// blocking pool overshoots by its timer slack and wake-up (1.03–1.11 ms);
/// a spin of `yield_now` is exact while the machine is idle and lasts
/// 2.8–3 ms on average when it is not. So: a thread sleep on the blocking
/// pool with a timer slack of 1 ns that wakes [`HOLD_SPIN`] early, then a
/// spin to the end: a 1 ms hold lasted 1.015–1.07 ms on average (median
/// 1.005–1.012 ms) on 2 shared cores, with or without two busy threads
/// beside it. The tokio task's own wake-up afterwards is part of the hold
/// as measured. Long holds sleep in tokio first, keeping a blocking thread
/// for their last few milliseconds only.
async fn hold_until(until: Instant) {
    const TOKIO_UNTIL_BEFORE: Duration = Duration::from_millis(3);
    if let Some(early) = until.checked_sub(TOKIO_UNTIL_BEFORE) {
        if early > Instant::now() + TOKIO_UNTIL_BEFORE {
            tokio::time::sleep_until(early.into()).await;
        }
    }
    let sleeper = tokio::task::spawn_blocking(move || {
        precise_timer_slack();
        if let Some(left) = until.checked_duration_since(Instant::now()).and_then(|d| d.checked_sub(HOLD_SPIN)) {
            std::thread::sleep(left);
        }
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    });
    if sleeper.await.is_err() {
        tokio::time::sleep_until(until.into()).await;
    }
}

/// This thread's timer slack to 1 ns (the default, 50 µs, is added to
/// every sleep); the blocking pool's threads are the bench's own.
#[cfg(target_os = "linux")]
fn precise_timer_slack() {
    let slack: libc::c_ulong = 1;
    // SAFETY: PR_SET_TIMERSLACK sets a property of the calling thread only;
    // no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, slack);
    }
}

#[cfg(not(target_os = "linux"))]
fn precise_timer_slack() {}

/// Checks that a quorum answers and that a lock can be taken, so a bench
/// against missing servers fails at once with a clear message.
async fn preflight(module: &Redlock, script: Option<&Redlock>, ttl: Duration, run: &str) -> Result<(), Failure> {
    let resource = format!("redlock-bench:{run}:preflight");
    let statuses = module.status(&resource).await;
    let answered = statuses.iter().filter(|s| s.reachable && s.error.is_none()).count();
    if answered < module.quorum() {
        let outcomes: Vec<_> = statuses.iter().map(|s| explain::as_outcome(&s.server, s.failure.as_ref())).collect();
        return Err(explain::no_quorum("cannot bench (it needs the redislock module)", &outcomes, module.quorum(), Op::Release));
    }
    // One cycle in each mode also loads the Lua scripts and opens connections.
    for rl in std::iter::once(module).chain(script) {
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
    /// The longest latency (contended: the longest wait).
    max_ms: f64,
    /// Cycles (contended: grants) of each worker.
    per_worker: &'a [u64],
    /// Jain's fairness index of `per_worker`: 1 when every worker had as
    /// many, 1/n when one had them all.
    jain: f64,
    /// The busiest worker's share of the cycles (fair: 1/workers).
    max_share: f64,
    /// Contended: the measured mean and longest hold (grant to release call).
    hold_mean_ms: Option<f64>,
    hold_max_ms: Option<f64>,
    /// Contended: holders found beside one another where the lock allows
    /// none, or exclusive tokens out of grant order (0 unless broken).
    overlaps: Option<u64>,
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
    hold_mean_ms: Option<f64>,
    jain: f64,
    max_share: f64,
    overlaps: Option<u64>,
}

#[derive(Serialize)]
struct BenchJson<'a> {
    servers: Vec<String>,
    quorum: usize,
    cpus: usize,
    ttl_ms: u64,
    phase_ms: u64,
    /// `--hold` as asked (each contended phase has the measured mean).
    hold_ms: f64,
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
    let uncontended = args.runs(BenchPhase::Uncontended);
    let first = urls.first().ok_or_else(|| Failure::usage("no servers given"))?;
    let floor = Arc::new(Instance::new(first, &settings).map_err(|e| Failure::usage(format!("{first}: {e}")))?);
    let workers = usize::try_from(args.workers).map_err(|e| Failure::usage(e.to_string()))?;
    let contenders = usize::try_from(args.contenders).map_err(|e| Failure::usage(e.to_string()))?;
    let run: String = format!("{:08x}", rand::rng().random::<u32>());
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);

    preflight(&module, uncontended.then_some(&script), args.ttl, &run).await?;
    let warm = format!("redlock-bench:{run}:warm");

    let mut phases = Vec::new();
    if uncontended {
        for n in [1, workers] {
            phases.push(quorum_phase(&module, "uncontended: module, quorum", n, args, &run).await?);
            phases.push(quorum_phase(&script, "uncontended: script, quorum", n, args, &run).await?);
        }
    }
    if args.runs(BenchPhase::Floor) {
        // Open the floor connection before its phase is timed.
        let _ = floor.release(&warm, "warm").await;
        for n in [1, workers] {
            phases.push(floor_phase(&floor, n, args, &run).await?);
        }
    }
    let contentions: Vec<Contention> = [
        (BenchPhase::Exclusive, Contention::Exclusive),
        (BenchPhase::Mixed, Contention::Mixed),
        (BenchPhase::Permits, Contention::Permits(2)),
    ]
    .into_iter()
    .filter(|(phase, _)| args.runs(*phase))
    .map(|(_, contention)| contention)
    .collect();
    if !contentions.is_empty() {
        let mut clients = Vec::with_capacity(contenders);
        for _ in 0..contenders {
            let client = Redlock::new(&urls, settings.clone()).map_err(|e| explain::other(&e))?;
            let _ = client.status(&warm).await; // connect before the phase starts
            clients.push(client);
        }
        let clients = Arc::new(clients);
        for contention in contentions {
            phases.push(contended_phase(clients.clone(), contention, args, &run).await?);
        }
    }
    let overlaps: u64 = phases.iter().filter_map(|p| p.overlaps).sum();

    let report = Report::new(&phases, workers, &module);
    if json {
        output::json(&BenchJson {
            servers: module.servers(),
            quorum: module.quorum(),
            cpus,
            ttl_ms: output::millis(args.ttl),
            phase_ms: output::millis(args.duration),
            hold_ms: output::millis_f64(args.hold),
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
                    per_worker: &p.per_worker,
                    jain: p.jain(),
                    max_share: p.max_share(),
                    hold_mean_ms: p.hold_mean_ms(),
                    hold_max_ms: p.hold_max_ms(),
                    overlaps: p.overlaps,
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
                hold_mean_ms: c.hold_mean_ms(),
                jain: c.jain(),
                max_share: c.max_share(),
                overlaps: c.overlaps,
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
    if overlaps > 0 {
        output::warn(&format!(
            "bench: {overlaps} time(s) a contender held the lock beside another one it excludes, or with a token below an earlier grant's"
        ));
        return Ok(exit::FAILURE);
    }
    Ok(exit::OK)
}

struct Report {
    ratios: Vec<(String, f64)>,
}

/// The exclusive contended phase.
fn contended(phases: &[Phase]) -> Option<&Phase> {
    phases.iter().find(|p| p.name == Contention::Exclusive.name())
}

impl Report {
    /// The ratios this run measured, at 1 worker and at `workers`.
    fn new(phases: &[Phase], workers: usize, module_rl: &Redlock) -> Report {
        let find = |prefix: &str, n: usize| phases.iter().find(|p| p.name.starts_with(prefix) && p.workers == n);
        // Only between two phases this run measured.
        let ratio = |a: &str, b: &str, n: usize| match (find(a, n), find(b, n)) {
            (Some(a), Some(b)) => Some(if b.rate() > 0.0 { a.rate() / b.rate() } else { 0.0 }),
            _ => None,
        };
        let mut ratios = Vec::new();
        let mut counts = vec![1];
        if workers != 1 {
            counts.push(workers);
        }
        for &n in &counts {
            if let Some(r) = ratio("uncontended: module", "uncontended: script", n) {
                ratios.push((format!("module/script cycles/s, {n} worker(s)"), r));
            }
        }
        for &n in &counts {
            if let Some(r) = ratio("uncontended: module", "floor", n) {
                ratios.push((format!("quorum/floor cycles/s, {n} worker(s) (module, {} servers vs 1)", module_rl.servers().len()), r));
            }
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
    if !report.ratios.is_empty() {
        t.push_str("\nratios measured in this run\n");
        for (name, value) in &report.ratios {
            t.push_str(&format!("  {name:<60} {value:>6.2}\n"));
        }
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
    let contended: Vec<&Phase> = phases.iter().filter(|p| p.hold.is_some() || p.overlaps.is_some()).collect();
    if !contended.is_empty() {
        t.push_str("\nfairness of the contended phases: grants per worker; the holds as measured\n");
        t.push_str(&format!(
            "  {:<44} {:>6} {:>6} {:>7} {:>6} {:>9} {:>13} {:>12} {:>8}\n",
            "phase", "min", "max", "min/max", "Jain", "max share", "hold mean ms", "hold max ms", "overlaps"
        ));
        for p in contended {
            let (min, max) = p.min_max();
            let ratio = if max > 0 { min as f64 / max as f64 } else { 0.0 };
            let ms = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".to_string());
            t.push_str(&format!(
                "  {:<44} {min:>6} {max:>6} {ratio:>7.2} {:>6.3} {:>9.3} {:>13} {:>12} {:>8}\n",
                p.name,
                p.jain(),
                p.max_share(),
                ms(p.hold_mean_ms()),
                ms(p.hold_max_ms()),
                p.overlaps.unwrap_or(0)
            ));
        }
    }
    t
}
