//! Through real round trips: this crate's Redlock client (the `redlock
//! bench` program) against `rslock` 0.10, both through the same delaying
//! proxies in front of the same five module-equipped servers.
//!
//!     make bench-rtt      (or: cargo bench -p redlock --bench rtt)
//!
//! A deployment has 0.2–1 ms between client and servers; on loopback a
//! round trip costs less than the CPU around it. Here every server sits
//! behind a proxy (`rtt/proxy.rs`) that holds each chunk, in each direction,
//! for a fixed one-way delay: 0, 0.1, 0.25 and 0.5 ms (BENCH_DELAYS).
//!
//! For each delay and 1, 4 and 16 contenders (BENCH_CONTENDERS), both
//! clients run the same loop on one resource for BENCH_SECONDS: acquire
//! (waiting), hold exactly 1 ms, release. In rounds (BENCH_ROUNDS), each
//! round running every configuration with both clients back to back, the
//! one that goes first alternating from round to round; every figure is
//! the median over the rounds.
//!
//! - ours: the `redlock` program itself, `redlock bench --phases exclusive
//!   --contenders N --hold 1ms --duration D --ttl 10s --json` (each
//!   contender its own `Redlock` client, own connections; `lock_until`, a
//!   deadline of one ttl, in the resource's line), its JSON read back. Its
//!   hold: a thread sleep on the blocking pool with a 1 ns timer slack that
//!   wakes 20 µs early and spins (`hold_until` in `src/cli/bench.rs`). It
//!   checks that no two contenders hold at once and that tokens rise in
//!   grant order (`overlaps`).
//! - rslock: in this process, each contender its own `LockManager` (own
//!   connections, as ours), on its defaults (3 attempts per `lock()`, a
//!   random 0..200 ms between them); `lock()` called again until granted,
//!   the same hold (the same function, copied here), `unlock`. An
//!   AtomicBool set during the hold; finding it set is an overlap. Its
//!   connections are opened (one lock and unlock each) before the clock
//!   starts, as ours are.
//!
//! A wait is the acquire call's start to the grant (retries included);
//! the hold as measured is the grant to the release call, its mean is
//! reported for both. The round trip (RTT) of each delay is the median
//! PING through its five proxies, measured in every round before its
//! measurements; "RTT loaded" is the same PING during a client's
//! measurement (one every 5 ms, on a thread of its own). The ceiling of a
//! handoff is 1 / (hold + RTT): the release travels to the servers and the
//! next grant back. (With 1 contender no handoff happens: a cycle is at
//! least hold + 2 RTT, acquire and release, so the ceiling ratio there is
//! at most (hold + RTT) / (hold + 2 RTT): 0.5–0.9.)
//!
//! Before the rounds, a calibration: PING round trips direct and through
//! each delay's proxies (the proxy's own overhead is the delay-0 RTT minus
//! the direct one), and during every measurement the proxies count how
//! late their couriers wrote (lateness: write time minus due time) and
//! how many chunks they forwarded (per grant: the messages a grant costs;
//! ours over the grants of every phase its process ran, the semaphore's
//! too, since the proxies count them all).
//! The proxies' threads run at nice -20 where allowed (root here), so the
//! simulated network is delayed less by the clients' and servers' CPU
//! load; BENCH_PROXY_PRIORITY=normal leaves them at the default. On 2
//! cores they still take about 0.6 of a core at 16 contenders (mostly
//! kernel time: the loopback work of each extra write), from both clients
//! alike: direct, 16 contenders ran about 7 % more grants/s than through
//! 0 ms proxies.
//!
//! The servers: `redis-server` from PATH, free ports of 127.0.0.1 below
//! 30000, no persistence, temp dirs, killed by PID on exit (also on panic,
//! and by PR_SET_PDEATHSIG when this process dies).
//!
//! Environment:
//!   REDISLOCK_MODULE  the module (default <workspace>/target/release/libredislock.so)
//!   REDLOCK_BIN       the `redlock` program (default: the one cargo builds
//!                     beside this bench, <workspace>/target/release/redlock,
//!                     from the same sources as `make build`'s; its redis
//!                     crate has the rustls feature the dev-dependencies turn
//!                     on, unused with redis:// URLs); copied to a temp dir
//!                     first, so a rebuild during the run changes nothing
//!   BENCH_PROXY_PRIORITY  `normal`: the proxies' threads at the default nice
//!   BENCH_SECONDS     seconds per measurement (default 3)
//!   BENCH_ROUNDS      rounds (default 3)
//!   BENCH_DELAYS      one-way delays in ms, comma-separated (default
//!                     0,0.1,0.25,0.5; `direct`: no proxy at all)
//!   BENCH_CONTENDERS  contender counts (default 1,4,16)
//!   BENCH_OURS_PHASES `redlock bench --phases` for ours (default
//!                     `exclusive,permits`: the exclusive phase measured
//!                     against rslock, then a semaphore of 2 permits, its
//!                     grants/s reported as a multiple of the exclusive
//!                     lock's; `all`: every phase of a plain `redlock
//!                     bench` runs first)
//! Defaults: 4 delays × 3 counts × 3 phases (ours twice) × 3 rounds × 3 s = 5.4 min
//! measured, a little more in all with the calibration and each run's
//! start (plus the build: `make bench-rtt` took 7.7 min from a changed
//! client, LTO included).
//!
//! Output: a progress line per measurement on stderr; the calibration, a
//! table per delay and the targets as measured on stdout. Exit
//! status 0, or 1 on an overlap (either client) or a setup error.

#[path = "rtt/proxy.rs"]
mod proxy;
#[path = "support/servers.rs"]
mod servers;
#[path = "support/stats.rs"]
mod stats;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream as StdStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::Rng;
use rslock::{LockError, LockManager};
use serde_json::Value;

use proxy::{Lateness, Network, Proxy};
use servers::{Res, Server};
use stats::{histogram, median_of, ratio};

const SERVERS: usize = 5;
/// Lease of every lock, both clients.
const TTL: Duration = Duration::from_secs(10);
const HOLD: Duration = Duration::from_millis(1);
const DEFAULT_SECONDS: f64 = 3.0;
const DEFAULT_ROUNDS: usize = 3;
const DEFAULT_DELAYS: &str = "0,0.1,0.25,0.5";
const DEFAULT_CONTENDERS: &str = "1,4,16";
/// PINGs per server for the calibration, and before each delay's measurements.
const CALIBRATION_PINGS: usize = 200;
const ROUND_PINGS: usize = 40;
/// rslock's defaults (not exported): attempts per `lock()`, and the bound
/// of the uniform random delay between them.
const RSLOCK_RETRY_COUNT: u32 = 3;
const RSLOCK_RETRY_DELAY_MS: u64 = 200;
/// The name `redlock bench` gives its exclusive contended phase.
const OURS_PHASE: &str = "contended: exclusive, lock_until";
/// `redlock bench`'s semaphore phase, read beside the exclusive one when
/// BENCH_OURS_PHASES runs it (the default does).
const OURS_PERMITS_PHASE: &str = "contended: permits, limit 2";

// ---------------------------------------------------------------- config

/// What stands between the clients and the servers.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Link {
    Direct,
    /// A proxy of this one-way delay in front of each server.
    Delay(Duration),
}

impl Link {
    fn label(self) -> String {
        match self {
            Link::Direct => "direct".to_string(),
            Link::Delay(d) => format!("{} ms", ms_text(d)),
        }
    }

    fn one_way_ms(self) -> f64 {
        match self {
            Link::Direct => 0.0,
            Link::Delay(d) => d.as_secs_f64() * 1000.0,
        }
    }
}

/// 0.25 ms as "0.25", 1 ms as "1".
fn ms_text(d: Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64() * 1000.0);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

struct Config {
    seconds: f64,
    rounds: usize,
    links: Vec<Link>,
    contenders: Vec<usize>,
    /// `redlock bench --phases` (BENCH_OURS_PHASES).
    ours_phases: String,
}

impl Config {
    fn from_env() -> Res<Config> {
        let seconds = match std::env::var("BENCH_SECONDS") {
            Ok(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.1 && *s <= 3600.0)
                .ok_or(format!("BENCH_SECONDS={v:?}: not a number of seconds from 0.1 to 3600"))?,
            Err(_) => DEFAULT_SECONDS,
        };
        let rounds = match std::env::var("BENCH_ROUNDS") {
            Ok(v) => v.trim().parse::<usize>().ok().filter(|r| *r > 0).ok_or(format!("BENCH_ROUNDS={v:?}: not a positive integer"))?,
            Err(_) => DEFAULT_ROUNDS,
        };
        let delays = std::env::var("BENCH_DELAYS").unwrap_or_else(|_| DEFAULT_DELAYS.to_string());
        let mut links = Vec::new();
        for item in delays.split(',').map(str::trim) {
            let link = if item == "direct" {
                Link::Direct
            } else {
                let ms = item
                    .parse::<f64>()
                    .ok()
                    .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms <= 100.0)
                    .ok_or(format!("BENCH_DELAYS: {item:?} is neither `direct` nor a delay in ms from 0 to 100"))?;
                Link::Delay(Duration::from_secs_f64(ms / 1000.0))
            };
            if !links.contains(&link) {
                links.push(link);
            }
        }
        let counts = std::env::var("BENCH_CONTENDERS").unwrap_or_else(|_| DEFAULT_CONTENDERS.to_string());
        let mut contenders = Vec::new();
        for item in counts.split(',').map(str::trim) {
            let n = item
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or(format!("BENCH_CONTENDERS: {item:?} is not a count from 1 to 1024"))?;
            if !contenders.contains(&n) {
                contenders.push(n);
            }
        }
        // Every phase runs before the measured one, as a plain `redlock
        // bench --contenders N` does: what the servers went through before
        // (other phases' grants) must not slow the contended phase.
        let ours_phases = std::env::var("BENCH_OURS_PHASES").unwrap_or_else(|_| "exclusive,permits".to_string());
        if !ours_phases.split(',').any(|p| matches!(p.trim(), "exclusive" | "contended" | "all")) {
            return Err(format!("BENCH_OURS_PHASES={ours_phases:?}: runs no contended exclusive phase (exclusive, contended or all)"));
        }
        Ok(Config { seconds, rounds, links, contenders, ours_phases })
    }

    fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }
}

/// The `redlock` program, copied into `dir`.
fn redlock_bin(dir: &Path) -> Res<PathBuf> {
    let path = match std::env::var_os("REDLOCK_BIN") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_redlock")),
    };
    if !path.is_file() {
        return Err(format!("the redlock program {} is missing: run make build (or set REDLOCK_BIN)", path.display()));
    }
    let copy = dir.join("redlock");
    fs::copy(&path, &copy).map_err(|e| format!("copying {} to {}: {e}", path.display(), copy.display()))?;
    Ok(copy)
}

// ---------------------------------------------------------------- round trips

/// `n` PING round trips to 127.0.0.1:`port`, on a connection of their own.
fn pings(port: u16, n: usize) -> Res<Vec<Duration>> {
    let mut s = StdStream::connect(("127.0.0.1", port)).map_err(|e| format!("PING: connect to {port}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
    let mut reply = [0u8; 7];
    let mut one = || -> Res<Duration> {
        let started = Instant::now();
        s.write_all(b"*1\r\n$4\r\nPING\r\n").map_err(|e| format!("PING to {port}: {e}"))?;
        s.read_exact(&mut reply).map_err(|e| format!("PING reply from {port}: {e}"))?;
        let took = started.elapsed();
        if &reply != b"+PONG\r\n" {
            return Err(format!("PING to {port}: unexpected reply {:?}", String::from_utf8_lossy(&reply)));
        }
        Ok(took)
    };
    for _ in 0..5 {
        one()?;
    }
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(one()?);
    }
    Ok(all)
}

/// PING round trips through each of `ports`: (median, p99) in ms.
fn rtt(ports: &[u16], n: usize) -> Res<(f64, f64)> {
    let mut all: Vec<f64> = Vec::with_capacity(ports.len() * n);
    for &port in ports {
        all.extend(pings(port, n)?.into_iter().map(|d| d.as_secs_f64() * 1000.0));
    }
    all.sort_by(f64::total_cmp);
    let at = |q: f64| all.get(((all.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    Ok((at(0.5), at(0.99)))
}

/// PINGs through `ports` in turn, one every [`PING_EVERY`], on a thread
/// of its own while a measurement runs: the round trip as the clients
/// meet it, the servers' and proxies' load included.
struct Pinger {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Vec<f64>>,
}

const PING_EVERY: Duration = Duration::from_millis(5);

impl Pinger {
    fn start(ports: &[u16]) -> Res<Pinger> {
        let mut conns = Vec::with_capacity(ports.len());
        for &port in ports {
            let s = StdStream::connect(("127.0.0.1", port)).map_err(|e| format!("PING: connect to {port}: {e}"))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
            conns.push(s);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = thread::Builder::new()
            .name("rtt-pinger".into())
            .spawn(move || {
                let mut all = Vec::new();
                let mut reply = [0u8; 7];
                let pause = PING_EVERY / u32::try_from(conns.len().max(1)).unwrap_or(1);
                'outer: while !stopped.load(Ordering::SeqCst) {
                    for s in conns.iter_mut() {
                        let started = Instant::now();
                        if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() || s.read_exact(&mut reply).is_err() {
                            break 'outer;
                        }
                        all.push(started.elapsed().as_secs_f64() * 1000.0);
                        thread::sleep(pause);
                    }
                }
                all
            })
            .map_err(|e| format!("pinger thread: {e}"))?;
        Ok(Pinger { stop, thread })
    }

    /// The median round trip, ms.
    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::SeqCst);
        median(self.thread.join().unwrap_or_default())
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

/// One measurement of one client.
#[derive(Clone, Debug, Default)]
struct Sample {
    rate: f64,
    grants: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    jain: f64,
    max_share: f64,
    hold_mean_ms: f64,
    errors: u64,
    first_error: Option<String>,
    /// rslock: `lock()` calls that ran out of attempts and were called again.
    gave_up: u64,
    overlaps: u64,
    /// The proxies' couriers during the measurement.
    lateness: Lateness,
    /// The median PING round trip during the measurement, ms.
    loaded_rtt_ms: f64,
    /// Ours: grants/s of the semaphore phase (limit 2), when it ran.
    permits_rate: Option<f64>,
    /// The grants the proxies' chunks were counted over: ours, those of
    /// every phase its process ran (the semaphore's too); rslock, `grants`.
    grants_counted: u64,
}

/// Jain's index and the largest share of `counts`.
fn fairness(counts: &[u64]) -> (f64, f64) {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    let max = counts.iter().copied().max().unwrap_or(0) as f64;
    if squares > 0.0 {
        (sum * sum / (n * squares), max / sum)
    } else {
        (0.0, 0.0)
    }
}

/// Ours: one `redlock bench` run, its exclusive contended phase only.
fn run_ours(bin: &Path, dir: &Path, urls: &[String], n: usize, cfg: &Config) -> Res<Sample> {
    let out_path = dir.join("ours.json");
    let err_path = dir.join("ours.stderr");
    let out = fs::File::create(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let err = fs::File::create(&err_path).map_err(|e| format!("{}: {e}", err_path.display()))?;
    let duration_ms = (cfg.seconds * 1000.0).round() as u64;
    let mut cmd = Command::new(bin);
    cmd.arg("bench")
        .arg("--servers")
        .arg(urls.join(","))
        .args(["--phases", &cfg.ours_phases, "--contenders"])
        .arg(n.to_string())
        .args(["--hold", &format!("{}ms", HOLD.as_millis())])
        .args(["--duration", &format!("{duration_ms}ms")])
        .args(["--ttl", &format!("{}s", TTL.as_secs())])
        .arg("--json")
        .env_remove("REDLOCK_SERVERS")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe; the child dies with this process.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    // Every phase of a plain `redlock bench` (BENCH_OURS_PHASES=all) is nine.
    let deadline = Instant::now() + cfg.duration() * 9 + TTL + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("redlock bench: {e}"))? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("redlock bench ran over its time by a minute; killed".to_string());
        }
        thread::sleep(Duration::from_millis(20));
    };
    let stdout = fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = fs::read_to_string(&err_path).unwrap_or_default();
    let report: Value = match serde_json::from_str(stdout.trim()) {
        Ok(v) => v,
        Err(e) => return Err(format!("redlock bench ({status}): no JSON ({e}); stderr:\n{stderr}\nstdout:\n{stdout}")),
    };
    let phase = report["phases"]
        .as_array()
        .and_then(|phases| phases.iter().find(|p| p["name"] == OURS_PHASE))
        .ok_or(format!("redlock bench ({status}): no phase {OURS_PHASE:?} in its JSON: {report}\nstderr:\n{stderr}"))?;
    let f = |key: &str| {
        phase[key]
            .as_f64()
            .ok_or(format!("redlock bench: no {key:?} in its JSON (a redlock older than this bench? run make build): {phase}"))
    };
    let u = |key: &str| phase[key].as_u64().ok_or(format!("redlock bench: no {key:?} in its JSON (run make build): {phase}"));
    let per_worker: Vec<u64> = phase["per_worker"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .ok_or(format!("redlock bench: no per_worker in its JSON (run make build): {phase}"))?;
    let sample = Sample {
        rate: f("cycles_per_sec")?,
        grants: u("cycles")?,
        p50_ms: f("p50_ms")?,
        p99_ms: f("p99_ms")?,
        max_ms: f("max_ms")?,
        jain: f("jain")?,
        max_share: f("max_share")?,
        hold_mean_ms: f("hold_mean_ms")?,
        errors: u("errors")?,
        first_error: phase["first_error"].as_str().map(String::from),
        gave_up: 0,
        overlaps: u("overlaps")?,
        lateness: Lateness::default(),
        loaded_rtt_ms: f64::NAN,
        permits_rate: report["phases"]
            .as_array()
            .and_then(|phases| phases.iter().find(|p| p["name"] == OURS_PERMITS_PHASE))
            .and_then(|p| p["cycles_per_sec"].as_f64()),
        grants_counted: report["phases"].as_array().map(|phases| phases.iter().filter_map(|p| p["cycles"].as_u64()).sum()).unwrap_or(0),
    };
    if per_worker.len() != n {
        return Err(format!("redlock bench: {} contenders in its JSON, not {n}", per_worker.len()));
    }
    // Exit 1 with overlaps is the bench's verdict, reported as such.
    if !status.success() && sample.overlaps == 0 {
        return Err(format!("redlock bench exited with {status}; stderr:\n{stderr}"));
    }
    Ok(sample)
}

/// Histograms count microseconds, up to ten minutes.
/// One rslock contender's counts.
struct Tally {
    hist: Histogram<u64>,
    grants: u64,
    gave_up: u64,
    errors: u64,
    first_error: Option<String>,
    hold_sum: Duration,
    overlaps: u64,
}

/// rslock: `n` contenders, each its own LockManager, on one fresh resource.
async fn run_rslock(urls: &[String], n: usize, resource: String, cfg: &Config) -> Res<Sample> {
    let managers: Vec<LockManager> = (0..n).map(|_| LockManager::new(urls.to_vec())).collect();
    // Open every connection before the clock starts.
    let warm = futures::future::join_all(managers.iter().enumerate().map(|(i, lm)| {
        let key = format!("{resource}:warm:{i}");
        async move {
            let lock = lm.lock(key.as_str(), TTL).await.map_err(|e| format!("rslock cannot lock through the proxies: {e}"))?;
            lm.unlock(&lock).await;
            Ok::<_, String>(())
        }
    }))
    .await;
    for w in warm {
        w?;
    }
    let busy = Arc::new(AtomicBool::new(false));
    let resource = Arc::new(resource);
    let end = Instant::now() + cfg.duration();
    let mut tasks = Vec::with_capacity(n);
    for lm in managers {
        let (busy, resource) = (busy.clone(), resource.clone());
        tasks.push(tokio::spawn(async move {
            let mut t =
                Tally { hist: histogram()?, grants: 0, gave_up: 0, errors: 0, first_error: None, hold_sum: Duration::ZERO, overlaps: 0 };
            contend_rslock(&lm, &resource, end, &busy, &mut t).await;
            Ok::<_, String>(t)
        }));
    }
    let mut hist = histogram()?;
    let mut counts = Vec::with_capacity(n);
    let mut s = Sample::default();
    let mut hold_sum = Duration::ZERO;
    for t in futures::future::join_all(tasks).await {
        let t = t.map_err(|e| format!("rslock task failed: {e}"))??;
        hist.add(&t.hist).map_err(|e| format!("histogram: {e}"))?;
        counts.push(t.grants);
        s.grants += t.grants;
        s.gave_up += t.gave_up;
        s.errors += t.errors;
        s.overlaps += t.overlaps;
        hold_sum += t.hold_sum;
        if s.first_error.is_none() {
            s.first_error = t.first_error;
        }
    }
    let ms = |v: u64| v as f64 / 1000.0;
    if !hist.is_empty() {
        (s.p50_ms, s.p99_ms, s.max_ms) = (ms(hist.value_at_quantile(0.5)), ms(hist.value_at_quantile(0.99)), ms(hist.max()));
    }
    s.rate = s.grants as f64 / cfg.seconds;
    s.grants_counted = s.grants;
    (s.jain, s.max_share) = fairness(&counts);
    if s.grants > 0 {
        s.hold_mean_ms = hold_sum.as_secs_f64() * 1000.0 / s.grants as f64;
    }
    Ok(s)
}

/// quorum.rs's rslock loop: `lock()` again until granted, hold, unlock.
/// Grants after the end are released at once and not counted.
async fn contend_rslock(lm: &LockManager, resource: &str, end: Instant, busy: &AtomicBool, t: &mut Tally) {
    while Instant::now() < end {
        let started = Instant::now();
        let lock = loop {
            match lm.lock(resource, TTL).await {
                Ok(lock) => break Some(lock),
                Err(LockError::Unavailable) => t.gave_up += 1,
                Err(e) => {
                    t.errors += 1;
                    t.first_error.get_or_insert(e.to_string());
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
            if busy.swap(true, Ordering::SeqCst) {
                t.overlaps += 1;
                eprintln!("VIOLATION: rslock granted {resource} while another contender holds it");
            }
            t.hist.saturating_record(u64::try_from((granted - started).as_micros()).unwrap_or(u64::MAX).max(1));
            t.grants += 1;
            hold_until(granted + HOLD).await;
            t.hold_sum += granted.elapsed();
            busy.store(false, Ordering::SeqCst);
        }
        lm.unlock(&lock).await;
    }
}

/// The hold of `redlock bench` (`hold_until` in src/cli/bench.rs), the
/// same here: a thread sleep on the blocking pool, 1 ns timer slack,
/// waking 20 µs early to spin to the end.
async fn hold_until(until: Instant) {
    const SPIN: Duration = Duration::from_micros(20);
    const TOKIO_UNTIL_BEFORE: Duration = Duration::from_millis(3);
    if let Some(early) = until.checked_sub(TOKIO_UNTIL_BEFORE) {
        if early > Instant::now() + TOKIO_UNTIL_BEFORE {
            tokio::time::sleep_until(early.into()).await;
        }
    }
    let sleeper = tokio::task::spawn_blocking(move || {
        proxy::precise_timer_slack();
        if let Some(left) = until.checked_duration_since(Instant::now()).and_then(|d| d.checked_sub(SPIN)) {
            thread::sleep(left);
        }
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    });
    if sleeper.await.is_err() {
        tokio::time::sleep_until(until.into()).await;
    }
}

// ---------------------------------------------------------------- report

fn median(v: Vec<f64>) -> f64 {
    median_of(v).unwrap_or(f64::NAN)
}

/// Medians over rounds of one configuration, one client.
struct Med {
    rate: f64,
    p50: f64,
    p99: f64,
    max: f64,
    /// The longest wait of any round.
    max_all: f64,
    jain: f64,
    max_share: f64,
    hold: f64,
    loaded_rtt: f64,
    /// Chunks the proxies forwarded per grant, both directions.
    chunks_per_grant: f64,
    errors: u64,
    gave_up: u64,
    first_error: Option<String>,
    /// Ours: the semaphore phase's grants/s (NaN when it did not run).
    permits_rate: f64,
}

fn med(samples: &[Sample]) -> Med {
    let pick = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    Med {
        rate: pick(|s| s.rate),
        p50: pick(|s| s.p50_ms),
        p99: pick(|s| s.p99_ms),
        max: pick(|s| s.max_ms),
        max_all: samples.iter().map(|s| s.max_ms).fold(0.0, f64::max),
        jain: pick(|s| s.jain),
        max_share: pick(|s| s.max_share),
        hold: pick(|s| s.hold_mean_ms),
        loaded_rtt: pick(|s| s.loaded_rtt_ms),
        chunks_per_grant: pick(|s| if s.lateness.chunks > 0 { ratio(s.lateness.chunks as f64, s.grants_counted as f64) } else { f64::NAN }),
        errors: samples.iter().map(|s| s.errors).sum(),
        gave_up: samples.iter().map(|s| s.gave_up).sum(),
        first_error: samples.iter().find_map(|s| s.first_error.clone()),
        permits_rate: median(samples.iter().filter_map(|s| s.permits_rate).collect()),
    }
}

/// `-` where nothing was measured.
fn one_decimal(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "-".to_string()
    }
}

/// Grants/s at most: one hold and one round trip per grant.
fn ceiling(hold_ms: f64, rtt_ms: f64) -> f64 {
    ratio(1000.0, hold_ms + rtt_ms)
}

/// The samples of one (path, contenders): a sample per round each.
#[derive(Default)]
struct Pair {
    ours: Vec<Sample>,
    rslock: Vec<Sample>,
}

/// One link's proxies (none when direct) and what was measured through them.
struct Route {
    link: Link,
    proxies: Vec<Proxy>,
    urls: Vec<String>,
    ports: Vec<u16>,
    /// Median PING RTT in each round, ms.
    rtts: Vec<f64>,
    /// The couriers' lateness over all measurements.
    lateness: Lateness,
    pairs: Vec<(usize, Pair)>,
}

impl Route {
    fn take_lateness(&self) -> Lateness {
        let mut all = Lateness::default();
        for p in &self.proxies {
            all.add(&p.take_lateness());
        }
        all
    }
}

// ---------------------------------------------------------------- main

fn main() -> ExitCode {
    match run() {
        Ok(0) => ExitCode::SUCCESS,
        Ok(n) => {
            eprintln!("rtt bench: FAILED: {n} overlap(s): two contenders held the lock at once");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("rtt bench: error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The number of overlaps, or a setup error.
fn run() -> Res<u64> {
    let started = Instant::now();
    let cfg = Config::from_env()?;
    let module = servers::module_path()?;
    let version = servers::redis_server_version()?;
    let dir = tempfile::Builder::new().prefix("redlock-rtt-bench-").tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let bin = redlock_bin(dir.path())?;
    let servers = Server::start_many(&module, SERVERS)?;
    let direct_ports: Vec<u16> = servers.iter().map(|s| s.port).collect();
    eprintln!(
        "rtt bench: {SERVERS} redis-server {version} (pids {}) on ports {:?}, module {}, redlock {}",
        servers.iter().map(|s| s.pid.to_string()).collect::<Vec<_>>().join(","),
        direct_ports,
        module.display(),
        bin.display()
    );
    let high = std::env::var("BENCH_PROXY_PRIORITY").map_or(true, |v| v != "normal");
    let mut network = Network::new(high).map_err(|e| format!("proxy runtime: {e}"))?;
    let mut routes: Vec<Route> = Vec::new();
    for &link in &cfg.links {
        let proxies = match link {
            Link::Direct => Vec::new(),
            Link::Delay(d) => {
                let mut ps = Vec::with_capacity(SERVERS);
                for &port in &direct_ports {
                    ps.push(network.proxy(port, d).map_err(|e| format!("proxy: {e}"))?);
                }
                ps
            }
        };
        let (urls, ports) = match link {
            Link::Direct => (servers.iter().map(Server::url).collect(), direct_ports.clone()),
            Link::Delay(_) => (proxies.iter().map(Proxy::url).collect(), proxies.iter().map(|p| p.port).collect()),
        };
        let pairs = cfg.contenders.iter().map(|&n| (n, Pair::default())).collect();
        routes.push(Route { link, proxies, urls, ports, rtts: Vec::new(), lateness: Lateness::default(), pairs });
    }

    // Calibration, idle: PING direct and through each path.
    let mut out = String::new();
    let (direct, direct_p99) = rtt(&direct_ports, CALIBRATION_PINGS)?;
    let mut calibration = format!(
        "round trips, idle (PING, {CALIBRATION_PINGS} through each of the {SERVERS} servers' paths; median / p99):\n  {:<8} {direct:>7.3} / {direct_p99:>7.3} ms\n",
        "direct"
    );
    for route in &routes {
        let (m, p99) = rtt(&route.ports, CALIBRATION_PINGS)?;
        let late = route.take_lateness();
        let excess = m - direct - 2.0 * route.link.one_way_ms();
        calibration += &format!(
            "  {:<8} {m:>7.3} / {p99:>7.3} ms  (= direct + 2 x {} ms {} {:.3} ms{})\n",
            route.link.label(),
            route.link.one_way_ms(),
            if excess < 0.0 { "-" } else { "+" },
            excess.abs(),
            if late.chunks > 0 {
                format!(
                    "; couriers late by {:.1} µs on average, at most {:.1} µs",
                    late.mean().as_secs_f64() * 1e6,
                    late.max.as_secs_f64() * 1e6
                )
            } else {
                String::new()
            }
        );
    }
    eprint!("{calibration}");

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"))?;
    let run: String = format!("{:08x}", rand::rng().random::<u32>());
    let mut overlaps = 0u64;
    let mut direct_rtts = Vec::new();
    for round in 0..cfg.rounds {
        let order = if round % 2 == 0 { [Imp::Ours, Imp::Rslock] } else { [Imp::Rslock, Imp::Ours] };
        direct_rtts.push(rtt(&direct_ports, ROUND_PINGS)?.0);
        for route in routes.iter_mut() {
            let (r, _) = rtt(&route.ports, ROUND_PINGS)?;
            route.rtts.push(r);
            let _ = route.take_lateness();
            let label = route.link.label();
            for i in 0..route.pairs.len() {
                let n = route.pairs[i].0;
                for imp in order {
                    let pinger = Pinger::start(&route.ports)?;
                    let mut s = match imp {
                        // Once more after a run that failed (its preflight
                        // timed out on a loaded machine): the figures are
                        // the second run's.
                        Imp::Ours => run_ours(&bin, dir.path(), &route.urls, n, &cfg).or_else(|e| {
                            eprintln!("ours failed, run again: {}", e.lines().next().unwrap_or_default());
                            run_ours(&bin, dir.path(), &route.urls, n, &cfg)
                        })?,
                        Imp::Rslock => {
                            let resource = format!("rtt:{run}:{}:{n}:{round}", route.link.one_way_ms());
                            rt.block_on(run_rslock(&route.urls, n, resource, &cfg))?
                        }
                    };
                    s.loaded_rtt_ms = pinger.stop();
                    s.lateness = route.take_lateness();
                    route.lateness.add(&s.lateness);
                    overlaps += s.overlaps;
                    eprintln!(
                        "[round {}/{}] {label:>7} one way, {n:>2} contender(s), {:<6} {:>5.0} grants/s  p50 {:>7.2}  p99 {:>7.2}  max {:>7.2} ms  Jain {:.3}  max share {:.3}  hold {:.3} ms  RTT {:.3} ms  late {:.0}/{:.0} µs  errors {}{}{}",
                        round + 1,
                        cfg.rounds,
                        imp.name(),
                        s.rate,
                        s.p50_ms,
                        s.p99_ms,
                        s.max_ms,
                        s.jain,
                        s.max_share,
                        s.hold_mean_ms,
                        s.loaded_rtt_ms,
                        s.lateness.mean().as_secs_f64() * 1e6,
                        s.lateness.max.as_secs_f64() * 1e6,
                        s.errors,
                        if s.overlaps > 0 { format!("  OVERLAPS {}", s.overlaps) } else { String::new() },
                        s.first_error.as_ref().map(|e| format!(" (first: {e})")).unwrap_or_default()
                    );
                    let pair = &mut route.pairs[i].1;
                    match imp {
                        Imp::Ours => pair.ours.push(s),
                        Imp::Rslock => pair.rslock.push(s),
                    }
                }
            }
        }
    }
    drop(rt);
    let measured = started.elapsed();

    let cpus = thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    out += &format!(
        "rtt bench: redlock (this crate's `redlock bench`) vs rslock 0.10, through delaying proxies, on {SERVERS} redis-server {version} with the redislock module, 127.0.0.1\n"
    );
    out += &format!(
        "machine: {cpus} CPU(s), shared by the {SERVERS} servers, the proxies and rslock (this process) and `redlock bench` (its own process)\n"
    );
    out += &format!(
        "{} s per measurement, {} round(s) (first client alternating), medians across rounds; hold {} ms (thread sleep + spin, both), ttl {} s; {:.0} s in all\n",
        cfg.seconds,
        cfg.rounds,
        ms_text(HOLD),
        TTL.as_secs(),
        measured.as_secs_f64()
    );
    out += "ours:   `redlock bench --phases exclusive`: each contender its own Redlock client, lock_until (deadline: one ttl), the FIFO line\n";
    out += &format!(
        "rslock: each contender its own LockManager, its defaults (retry count {RSLOCK_RETRY_COUNT}, retry delay uniform 0..{RSLOCK_RETRY_DELAY_MS} ms), lock() called again until granted\n"
    );
    out += "wait: acquire call -> grant, ms. ceiling: 1 / (hold as measured + RTT); with 1 contender a cycle needs hold + 2 RTT.\n";
    out += "RTT: PING median through the proxies before each delay's measurements; RTT loaded: the same during the client's measurements (one PING every 5 ms).\n";
    out += "chunks/grant: what the proxies' couriers forwarded (both directions, all 5 servers) per grant: the messages a grant costs (ours: over every phase its process ran, with its start).\n";
    out += "Jain: fairness of grants per contender (1: equal). share: the busiest contender's share of the grants (fair: 1/N).\n\n";
    out += &calibration;
    out += &format!("  direct RTT during the rounds: {:.3} ms (median of the rounds' medians)\n", median(direct_rtts.clone()));

    let mut errors: Vec<String> = Vec::new();
    for route in &routes {
        let rtt_ms = median(route.rtts.clone());
        let l = route.lateness;
        out += &format!(
            "\n{}: RTT {rtt_ms:.3} ms (PING median {}, median of the rounds){}\n",
            if route.link == Link::Direct { "direct, no proxy".to_string() } else { format!("{} one way", route.link.label()) },
            if route.link == Link::Direct { "to the servers" } else { "through the proxies" },
            if l.chunks > 0 {
                format!(
                    "; couriers late by {:.1} µs on average, {:.2} % over {} µs, at most {:.2} ms",
                    l.mean().as_secs_f64() * 1e6,
                    100.0 * l.late as f64 / l.chunks as f64,
                    proxy::LATE.as_micros(),
                    l.max.as_secs_f64() * 1000.0
                )
            } else {
                String::new()
            }
        );
        out += &format!(
            "{:>4} | {:<21} | {:<11} | {:<13} | {:<20} | {:<15} | {:<11} | {:<11} | {:<11} | {:<11} | {:<12} | {:<9}\n",
            "N",
            "grants/s",
            "/ ceiling",
            "p50 wait",
            "p99 wait",
            "max wait",
            "Jain",
            "max share",
            "hold ms",
            "RTT loaded",
            "chunks/grant",
            "errors"
        );
        out += &format!(
            "{:>4} | {:>6} {:>6} {:>7} | {:>5} {:>5} | {:>6} {:>6} | {:>6} {:>6} {:>6} | {:>7} {:>7} | {:>5} {:>5} | {:>5} {:>5} | {:>5} {:>5} | {:>5} {:>5} | {:>6} {:>5} | {:>4} {:>4}\n",
            "", "ours", "rslock", "ratio", "ours", "rsl", "ours", "rslock", "ours", "rslock", "ratio", "ours", "rslock", "ours", "rsl", "ours",
            "rsl", "ours", "rsl", "ours", "rsl", "ours", "rsl", "ours", "rsl"
        );
        for (n, pair) in &route.pairs {
            let (o, r) = (med(&pair.ours), med(&pair.rslock));
            out += &format!(
                "{:>4} | {:>6.0} {:>6.0} {:>6.2}x | {:>5.2} {:>5.2} | {:>6.2} {:>6.2} | {:>6.2} {:>6.1} {:>6.3} | {:>7.1} {:>7.1} | {:>5.3} {:>5.3} | {:>5.3} {:>5.3} | {:>5.3} {:>5.3} | {:>5.3} {:>5.3} | {:>6} {:>5} | {:>4} {:>4}\n",
                n,
                o.rate,
                r.rate,
                ratio(o.rate, r.rate),
                ratio(o.rate, ceiling(o.hold, rtt_ms)),
                ratio(r.rate, ceiling(r.hold, rtt_ms)),
                o.p50,
                r.p50,
                o.p99,
                r.p99,
                ratio(o.p99, r.p99),
                o.max,
                r.max,
                o.jain,
                r.jain,
                o.max_share,
                r.max_share,
                o.hold,
                r.hold,
                o.loaded_rtt,
                r.loaded_rtt,
                one_decimal(o.chunks_per_grant),
                one_decimal(r.chunks_per_grant),
                o.errors,
                r.errors
            );
            for (name, m) in [("ours", &o), ("rslock", &r)] {
                if m.errors > 0 {
                    errors.push(format!(
                        "  {} one way, {n} contender(s), {name}: {} error(s); first: {}\n",
                        route.link.label(),
                        m.errors,
                        m.first_error.as_deref().unwrap_or("?")
                    ));
                }
            }
        }
        let permits: Vec<String> = route
            .pairs
            .iter()
            .map(|(n, p)| (n, med(&p.ours)))
            .filter(|(_, o)| o.permits_rate.is_finite())
            .map(|(n, o)| format!("{n}: {:.0} ({:.2}x)", o.permits_rate, ratio(o.permits_rate, o.rate)))
            .collect();
        if !permits.is_empty() {
            out += &format!("ours, a semaphore of 2 permits (grants/s, x its exclusive grants/s): {}\n", permits.join(", "));
        }
        let gave_up: Vec<String> = route.pairs.iter().map(|(n, p)| format!("{n}: {}", med(&p.rslock).gave_up)).collect();
        out += &format!("rslock lock() calls out of attempts and called again, summed over the rounds: {}\n", gave_up.join(", "));
    }
    if !errors.is_empty() {
        out += "\nerrors (counted, not fatal):\n";
        out += &errors.concat();
    }

    // The targets, as measured.
    let find_link = |link: Link, n: usize| {
        routes
            .iter()
            .find(|r| r.link == link)
            .and_then(|r| r.pairs.iter().find(|(m, _)| *m == n).map(|(_, p)| (med(&p.ours), med(&p.rslock), median(r.rtts.clone()))))
    };
    let find = |one_way_ms: f64, n: usize| find_link(Link::Delay(Duration::from_secs_f64(one_way_ms / 1000.0)), n);
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    // One target's line: what, the figure measured, whether it is met.
    let target = |what: &str, value: f64, ok: bool| format!("  {what}: {value:.3} ({})\n", verdict(ok));
    out += "\ntargets of issue 32, as measured (medians of the rounds):\n";
    match find(0.25, 16) {
        Some((o, r, rtt_ms)) => {
            let g = ratio(o.rate, r.rate);
            let c = ratio(o.rate, ceiling(o.hold, rtt_ms));
            let p = ratio(o.p99, r.p99);
            out += &target("0.25 ms, 16 contenders: grants/s ours/rslock >= 1.3", g, g >= 1.3);
            out += &target("0.25 ms, 16 contenders: grants/s / ceiling >= 0.85", c, c >= 0.85);
            out += &target("0.25 ms, 16 contenders: p99 wait ours/rslock <= 0.3", p, p <= 0.3);
            out += &format!(
                "  0.25 ms, 16 contenders: no wait over 1 s (longest of any round): {:.1} ms ({})\n",
                o.max_all,
                verdict(o.max_all <= 1000.0)
            );
            out += &target("0.25 ms, 16 contenders: Jain's index >= 0.95", o.jain, o.jain >= 0.95);
        }
        None => out += "  (0.25 ms one way, 16 contenders not measured: BENCH_DELAYS / BENCH_CONTENDERS)\n",
    }
    match find(0.25, 1) {
        Some((o, r, _)) => {
            let g = ratio(o.rate, r.rate);
            out += &target("0.25 ms, 1 contender: grants/s ours/rslock >= 0.9", g, g >= 0.9);
        }
        None => out += "  (0.25 ms one way, 1 contender not measured)\n",
    }
    match find(0.0, 16) {
        Some((o, r, _)) => {
            let g = ratio(o.rate, r.rate);
            out += &target("loopback (0 ms proxies), 16 contenders: grants/s ours/rslock >= 1.1", g, g >= 1.1);
        }
        None => out += "  (0 ms one way, 16 contenders not measured)\n",
    }
    if let Some((o, r, _)) = find_link(Link::Direct, 16) {
        let g = ratio(o.rate, r.rate);
        out += &target("loopback (direct, no proxy), 16 contenders: grants/s ours/rslock >= 1.1", g, g >= 1.1);
    }
    out += "\ntargets of issue 44, as measured (medians of the rounds):\n";
    match find(0.25, 16) {
        Some((o, _, rtt_ms)) => {
            let c = ratio(o.rate, ceiling(o.hold, rtt_ms));
            out += &target("0.25 ms, 16 contenders: grants/s / ceiling >= 0.9", c, c >= 0.9);
            if o.permits_rate.is_finite() {
                let p = ratio(o.permits_rate, o.rate);
                out += &target("0.25 ms, 16 contenders: a semaphore of 2, grants/s / the exclusive lock's >= 1.6", p, p >= 1.6);
            }
        }
        None => out += "  (0.25 ms one way, 16 contenders not measured)\n",
    }
    match find(0.25, 1) {
        Some((o, r, _)) => {
            let g = ratio(o.rate, r.rate);
            out += &target("0.25 ms, 1 contender: grants/s ours/rslock >= 1.0", g, g >= 1.0);
        }
        None => out += "  (0.25 ms one way, 1 contender not measured)\n",
    }
    out += &format!(
        "\nmutual exclusion: {}\n",
        if overlaps == 0 { "no overlap (ours: also tokens in grant order)".to_string() } else { format!("{overlaps} OVERLAP(S)") }
    );
    let out: String = out.lines().map(|l| format!("{}\n", l.trim_end())).collect();
    print!("{out}");
    drop(network);
    drop(servers);
    Ok(overlaps)
}
