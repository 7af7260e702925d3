//! What counting metrics costs the quorum client: one handle with its
//! metrics on (`Settings::default()`) against one with them off
//! (`Settings { metrics: false, .. }`), on the same five module-equipped
//! servers, side by side (issue 60: at most 3 % of the throughput).
//!
//!     cargo bench -p redlock --bench metrics        (make bench-metrics)
//!
//! Uncontended acquire + release cycles/s, 32 workers and 1 worker, each
//! on a fresh key every cycle (`try_lock` + `release` on the one shared
//! handle). The two handles are measured in pairs of short slices, back
//! to back, the one that goes first alternating from pair to pair, and
//! the figure is the median of the pairs' ratios (on / off): on a shared
//! 2-core machine the throughput drifts by ±10 % from one 5 s window to
//! the next, far more than what is measured, and a ratio taken within
//! one pair cancels the drift that medians taken apart keep. The table
//! also shows each handle's median and the middle half of the ratios
//! (their spread). A cycle whose grant or release fails is an error: the
//! bench then fails (exit 1).
//!
//! The bench starts five `redis-server`s (from PATH) on free ports of
//! 127.0.0.1 below 30000, no persistence, with the module loaded, and
//! kills them by PID on exit, also on panic.
//!
//! Environment:
//!   REDISLOCK_MODULE  module to load (default <workspace>/target/release/libredislock.so)
//!   BENCH_SECONDS     seconds per slice (default 1: 2 × 2 × 25 pairs × 1 s = 100 s)
//!   BENCH_ROUNDS      pairs of slices per worker count (default 25)

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rand::Rng;
use redlock::{Redlock, Settings};

#[path = "support/servers.rs"]
mod servers;
#[path = "support/stats.rs"]
mod stats;

use servers::{module_path, redis_server_version, Res, Server};
use stats::{median_of, ratio};

const SERVERS: usize = 5;
const TTL: Duration = Duration::from_secs(10);
const WORKERS: [usize; 2] = [32, 1];

fn env_number(name: &str, default: f64) -> Res<f64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0).ok_or(format!("{name}={v:?}: not a positive number")),
        Err(_) => Ok(default),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("metrics bench: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Res<()> {
    let seconds = env_number("BENCH_SECONDS", 1.0)?;
    let rounds = match std::env::var("BENCH_ROUNDS") {
        Ok(v) => v.trim().parse::<usize>().ok().filter(|r| *r > 0).ok_or(format!("BENCH_ROUNDS={v:?}: not a positive integer"))?,
        Err(_) => 25,
    };
    let module = module_path()?;
    let version = redis_server_version()?;
    let servers = Server::start_many(&module, SERVERS)?;
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"))?;
    let result = rt.block_on(bench(&urls, &version, Duration::from_secs_f64(seconds), rounds));
    drop(rt);
    drop(servers);
    result
}

async fn bench(urls: &[String], version: &str, each: Duration, rounds: usize) -> Res<()> {
    let on = Redlock::new(urls, Settings::default()).map_err(|e| format!("client: {e}"))?;
    let off = Redlock::new(urls, Settings { metrics: false, ..Settings::default() }).map_err(|e| format!("client: {e}"))?;
    let run: String = format!("{:08x}", rand::rng().random::<u32>());
    // Connections made and scripts loaded before anything is timed.
    for (name, rl) in [("on", &on), ("off", &off)] {
        cycles(rl, 1, Duration::from_millis(300), &format!("mb:{run}:warm:{name}")).await?;
    }
    let started = Instant::now();
    // Per worker count: (on, off) of each pair of slices.
    let mut results: Vec<(usize, Vec<(f64, f64)>)> = WORKERS.iter().map(|&w| (w, Vec::new())).collect();
    for round in 0..rounds {
        for (workers, pairs) in results.iter_mut() {
            let order = if round % 2 == 0 { [true, false] } else { [false, true] };
            let (mut with, mut without) = (f64::NAN, f64::NAN);
            for counting in order {
                let rl = if counting { &on } else { &off };
                let prefix = format!("mb:{run}:{round}:{workers}:{counting}");
                let per_second = cycles(rl, *workers, each, &prefix).await?;
                *(if counting { &mut with } else { &mut without }) = per_second;
            }
            eprintln!("pair {}/{rounds}: {workers} worker(s), cycles/s with metrics on {with:.0}, off {without:.0}", round + 1);
            pairs.push((with, without));
        }
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("metrics bench: the quorum client with its metrics on and off, on {SERVERS} redis-server {version} with the redislock module, 127.0.0.1");
    println!(
        "machine: {cpus} CPU(s), shared by the servers and the bench; {rounds} pairs of {:.0} s slices (first way alternating); measured {:.0} s in all",
        each.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!();
    println!("uncontended: each worker on a fresh key every cycle, try_lock + release, cycles/s (medians)");
    println!("workers | metrics on | metrics off | on/off (median of pairs) | middle half of pairs | cost");
    let mut worst: f64 = 0.0;
    for (workers, pairs) in &results {
        let a = median_of(pairs.iter().map(|p| p.0).collect()).unwrap_or(f64::NAN);
        let b = median_of(pairs.iter().map(|p| p.1).collect()).unwrap_or(f64::NAN);
        let mut ratios: Vec<f64> = pairs.iter().map(|&(x, y)| ratio(x, y)).filter(|r| r.is_finite()).collect();
        ratios.sort_by(f64::total_cmp);
        let r = median_of(ratios.clone()).unwrap_or(f64::NAN);
        let (low, high) = match ratios.len() {
            0 => (f64::NAN, f64::NAN),
            n => (ratios[n / 4], ratios[(3 * n) / 4 - usize::from(n % 4 == 0)]),
        };
        worst = worst.max(1.0 - r);
        println!(
            "{workers:>7} | {a:>10.0} | {b:>11.0} | {r:>24.3} | {:>20} | {:>+5.1} %",
            format!("{low:.3} to {high:.3}"),
            (1.0 - r) * 100.0
        );
    }
    println!();
    println!(
        "target, as measured: metrics cost at most 3 % of the throughput: {:.1} % at worst ({})",
        worst * 100.0,
        if worst <= 0.03 { "met" } else { "not met" }
    );
    Ok(())
}

/// `workers` tasks cycling try_lock + release on fresh keys for `each`;
/// cycles per second.
async fn cycles(rl: &Redlock, workers: usize, each: Duration, prefix: &str) -> Res<f64> {
    let end = Instant::now() + each;
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let (rl, prefix) = (rl.clone(), prefix.to_string());
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            let mut i = 0u64;
            while Instant::now() < end {
                i += 1;
                let lock = rl.try_lock(&format!("{prefix}:{worker}:{i}"), TTL).await.map_err(|e| format!("try_lock: {e}"))?;
                let released = rl.release(&lock).await.map_err(|e| format!("release: {e}"))?;
                if released.released < rl.quorum() {
                    return Err(format!("released on {} server(s) only", released.released));
                }
                done += 1;
            }
            Ok::<u64, String>(done)
        }));
    }
    let mut total = 0u64;
    for t in tasks {
        total += t.await.map_err(|e| format!("worker: {e}"))??;
    }
    Ok(total as f64 / each.as_secs_f64())
}
