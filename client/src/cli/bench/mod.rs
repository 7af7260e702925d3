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
//! [`phases::HOLD_SPIN`] early and spins to the end (see [`phases::hold_until`]); each
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

mod phases;
mod report;

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use redlock::transport::Instance;
use redlock::{Mode, Redlock, Settings};

use super::args::{BenchArgs, BenchPhase, Global};
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, Op};
use phases::{contended_phase, floor_phase, quorum_phase, Contention};
use report::{contended, text, BenchJson, ContendedJson, FairnessJson, PhaseJson, RatioJson, Report};

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
