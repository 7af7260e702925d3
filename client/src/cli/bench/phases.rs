//! The phases of `redlock bench`: each one measured by `measure`, the
//! contended ones with their exact holds and their check of who holds
//! beside whom.
use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use redlock::transport::{Ask, Instance};
use redlock::{Outcome, Redlock};

use crate::cli::args::BenchArgs;
use crate::cli::exit::Failure;
use crate::cli::output;

/// Histograms count microseconds, up to one hour.
fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).map_err(|e| format!("histogram: {e}"))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One measured phase.
pub(super) struct Phase {
    pub(super) name: String,
    pub(super) workers: usize,
    pub(super) cycles: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) elapsed: Duration,
    /// Cycle latency (µs), or the wait for the lock when contended.
    pub(super) hist: Histogram<u64>,
    /// Cycles of each worker, for fairness.
    pub(super) per_worker: Vec<u64>,
    /// Contended phases: the holds as measured.
    pub(super) hold: Option<HoldStats>,
    /// Contended phases: holders found beside one another where the lock
    /// allows none, and exclusive tokens out of grant order.
    pub(super) overlaps: Option<u64>,
}

/// The real length of the holds of a phase.
#[derive(Clone, Copy)]
pub(super) struct HoldStats {
    mean: Duration,
    max: Duration,
}

impl Phase {
    /// Jain's fairness index of the cycles per worker: 1 when every worker
    /// got as many, 1/n when one got them all.
    pub(super) fn jain(&self) -> f64 {
        let n = self.per_worker.len() as f64;
        let sum: f64 = self.per_worker.iter().map(|&c| c as f64).sum();
        let squares: f64 = self.per_worker.iter().map(|&c| (c as f64) * (c as f64)).sum();
        if squares > 0.0 {
            sum * sum / (n * squares)
        } else {
            0.0
        }
    }

    pub(super) fn min_max(&self) -> (u64, u64) {
        (self.per_worker.iter().copied().min().unwrap_or(0), self.per_worker.iter().copied().max().unwrap_or(0))
    }

    /// The busiest worker's share of the cycles (fair: 1/n).
    pub(super) fn max_share(&self) -> f64 {
        if self.cycles > 0 {
            self.min_max().1 as f64 / self.cycles as f64
        } else {
            0.0
        }
    }

    pub(super) fn hold_mean_ms(&self) -> Option<f64> {
        self.hold.map(|h| output::millis_f64(h.mean))
    }

    pub(super) fn hold_max_ms(&self) -> Option<f64> {
        self.hold.map(|h| output::millis_f64(h.max))
    }

    pub(super) fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.cycles as f64 / secs
        } else {
            0.0
        }
    }

    pub(super) fn quantile_ms(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    pub(super) fn max_ms(&self) -> f64 {
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
pub(super) async fn quorum_phase(rl: &Redlock, name: &str, workers: usize, args: &BenchArgs, run: &str) -> Result<Phase, Failure> {
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
pub(super) async fn floor_phase(instance: &Arc<Instance>, workers: usize, args: &BenchArgs, run: &str) -> Result<Phase, Failure> {
    let (instance, ttl, run) = (instance.clone(), args.ttl, run.to_string());
    let name = format!("floor: 1 server ({})", instance.name);
    measure(name, workers, args.duration, move |worker, i| {
        let instance = instance.clone();
        let resource = format!("redlock-bench:{run}:floor:{worker}:{i}");
        let owner = format!("redlock-bench-{run}-{worker}");
        async move {
            let started = Instant::now();
            let acquired = instance.acquire_as(&resource, &owner, ttl, Ask::exclusive()).await;
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
pub(super) enum Contention {
    Exclusive,
    /// Even workers exclusive, odd ones shared, on one read-write lock.
    Mixed,
    /// One of `n` permits of a semaphore.
    Permits(u32),
}

impl Contention {
    pub(super) fn name(self) -> String {
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
pub(super) async fn contended_phase(
    clients: Arc<Vec<Redlock>>,
    contention: Contention,
    args: &BenchArgs,
    run: &str,
) -> Result<Phase, Failure> {
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
pub(super) const HOLD_SPIN: Duration = Duration::from_micros(20);

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
pub(super) async fn hold_until(until: Instant) {
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
