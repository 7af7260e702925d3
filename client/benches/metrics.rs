//! What counting metrics costs the quorum client: one handle with its
//! metrics on (`Settings::default()`) against one with them off
//! (`Settings { metrics: false, .. }`), on the same five module-equipped
//! servers, side by side (issue 60: at most 3 % of the throughput).
//!
//!     cargo bench -p redlock --bench metrics        (make bench-metrics)
//!
//! Uncontended acquire + release cycles/s, 32 workers and 1 worker, each
//! on a fresh key every cycle (`try_lock` + `release` on the one shared
//! handle), BENCH_SECONDS per measurement, BENCH_ROUNDS rounds; each
//! round measures both handles back to back, the one that goes first
//! alternating from round to round; the table shows the medians of the
//! rounds and their ratio (on / off). A cycle whose grant or release
//! fails is an error: the bench then fails (exit 1).
//!
//! The bench starts five `redis-server`s (from PATH) on free ports of
//! 127.0.0.1 below 30000, no persistence, with the module loaded, and
//! kills them by PID on exit, also on panic.
//!
//! Environment:
//!   REDISLOCK_MODULE  module to load (default <workspace>/target/release/libredislock.so)
//!   BENCH_SECONDS     seconds per measurement (default 5: 2 × 2 × 5 rounds × 5 s = 100 s)
//!   BENCH_ROUNDS      rounds (default 5)

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
    let seconds = env_number("BENCH_SECONDS", 5.0)?;
    let rounds = match std::env::var("BENCH_ROUNDS") {
        Ok(v) => v.trim().parse::<usize>().ok().filter(|r| *r > 0).ok_or(format!("BENCH_ROUNDS={v:?}: not a positive integer"))?,
        Err(_) => 5,
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
    let mut results: Vec<(usize, Vec<f64>, Vec<f64>)> = WORKERS.iter().map(|&w| (w, Vec::new(), Vec::new())).collect();
    for round in 0..rounds {
        for (workers, with, without) in results.iter_mut() {
            let order = if round % 2 == 0 { [true, false] } else { [false, true] };
            for counting in order {
                let (rl, into) = if counting { (&on, &mut *with) } else { (&off, &mut *without) };
                let prefix = format!("mb:{run}:{round}:{workers}:{counting}");
                let per_second = cycles(rl, *workers, each, &prefix).await?;
                eprintln!(
                    "round {}/{rounds}: {workers} worker(s), metrics {}: {per_second:.0} cycles/s",
                    round + 1,
                    if counting { "on" } else { "off" }
                );
                into.push(per_second);
            }
        }
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("metrics bench: the quorum client with its metrics on and off, on {SERVERS} redis-server {version} with the redislock module, 127.0.0.1");
    println!("machine: {cpus} CPU(s), shared by the servers and the bench; {:.0} s per measurement, {rounds} rounds (first way alternating), medians; measured {:.0} s in all", each.as_secs_f64(), started.elapsed().as_secs_f64());
    println!();
    println!("uncontended: each worker on a fresh key every cycle, try_lock + release, cycles/s");
    println!("workers | metrics on | metrics off | on/off | cost");
    let mut worst: f64 = 0.0;
    for (workers, with, without) in &results {
        let (a, b) = (median_of(with.clone()).unwrap_or(f64::NAN), median_of(without.clone()).unwrap_or(f64::NAN));
        let r = ratio(a, b);
        worst = worst.max(1.0 - r);
        println!("{workers:>7} | {a:>10.0} | {b:>11.0} | {r:>6.3} | {:>+5.1} %", (1.0 - r) * 100.0);
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
