//! What `redlock bench` reports: the JSON document, the ratios measured
//! in the run and the text table.

use std::time::Duration;

use redlock::Redlock;
use serde::Serialize;

use super::phases::{Contention, Phase};

#[derive(Serialize)]
pub(super) struct PhaseJson<'a> {
    pub(super) name: &'a str,
    pub(super) workers: usize,
    pub(super) cycles: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<&'a str>,
    pub(super) seconds: f64,
    pub(super) cycles_per_sec: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    /// The longest latency (contended: the longest wait).
    pub(super) max_ms: f64,
    /// Cycles (contended: grants) of each worker.
    pub(super) per_worker: &'a [u64],
    /// Jain's fairness index of `per_worker`: 1 when every worker had as
    /// many, 1/n when one had them all.
    pub(super) jain: f64,
    /// The busiest worker's share of the cycles (fair: 1/workers).
    pub(super) max_share: f64,
    /// Contended: the measured mean and longest hold (grant to release call).
    pub(super) hold_mean_ms: Option<f64>,
    pub(super) hold_max_ms: Option<f64>,
    /// Contended: holders found beside one another where the lock allows
    /// none, or exclusive tokens out of grant order (0 unless broken).
    pub(super) overlaps: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct RatioJson {
    pub(super) name: String,
    pub(super) value: f64,
}

#[derive(Serialize)]
pub(super) struct ContendedJson {
    pub(super) contenders: usize,
    pub(super) grants: u64,
    /// Acquisitions not granted within the ttl, or failed.
    pub(super) not_granted: u64,
    pub(super) p50_wait_ms: f64,
    pub(super) p99_wait_ms: f64,
    pub(super) max_wait_ms: f64,
    pub(super) ttl_ms: u64,
    pub(super) hold_mean_ms: Option<f64>,
    pub(super) jain: f64,
    pub(super) max_share: f64,
    pub(super) overlaps: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct BenchJson<'a> {
    pub(super) servers: Vec<String>,
    pub(super) quorum: usize,
    pub(super) cpus: usize,
    pub(super) ttl_ms: u64,
    pub(super) phase_ms: u64,
    /// `--hold` as asked (each contended phase has the measured mean).
    pub(super) hold_ms: f64,
    pub(super) request_timeout_ms: u64,
    pub(super) retry_delay_ms: (u64, u64),
    pub(super) workers: usize,
    pub(super) phases: Vec<PhaseJson<'a>>,
    /// Measured in this run: module/script and quorum/floor cycles/s, at
    /// 1 and at --workers workers.
    pub(super) ratios: Vec<RatioJson>,
    pub(super) contended: Option<ContendedJson>,
    /// Grants per worker of each contended phase: min, max, Jain's index.
    pub(super) fairness: Vec<FairnessJson<'a>>,
}

#[derive(Serialize)]
pub(super) struct FairnessJson<'a> {
    pub(super) phase: &'a str,
    pub(super) grants_per_worker: &'a [u64],
    pub(super) min: u64,
    pub(super) max: u64,
    /// Jain's fairness index: 1 when every worker got as many grants.
    pub(super) jain: f64,
}

pub(super) struct Report {
    pub(super) ratios: Vec<(String, f64)>,
}

/// The exclusive contended phase.
pub(super) fn contended(phases: &[Phase]) -> Option<&Phase> {
    phases.iter().find(|p| p.name == Contention::Exclusive.name())
}

impl Report {
    /// The ratios this run measured, at 1 worker and at `workers`.
    pub(super) fn new(phases: &[Phase], workers: usize, module_rl: &Redlock) -> Report {
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

pub(super) fn text(phases: &[Phase], report: &Report, ttl: Duration) -> String {
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
