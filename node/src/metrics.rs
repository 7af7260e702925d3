//! The client's metrics (`redlock::metrics::Snapshot`) as plain
//! JavaScript objects: `NativeRedlock.metrics()` is the snapshot's fields
//! (camelCase), each list of (label, value) pairs an object keyed by the
//! label (`timed_out`, `connection_refused`: Prometheus's label values);
//! `metricsText()` is the crate's own Prometheus text. Times in seconds,
//! Prometheus's base unit (the rest of the package speaks milliseconds).
//! Counts are numbers, exact up to 2^53. Nothing is counted or rendered here.

use std::collections::BTreeMap;

use napi_derive::napi;
use redlock::metrics::{HistogramSnapshot, ServerSnapshot, Snapshot};

/// One bucket: observations of at most `le` seconds (cumulative).
#[napi(object)]
pub struct MetricsBucket {
    pub le: f64,
    pub count: f64,
}

/// A histogram: its buckets smallest first, without `+Inf` (whose count
/// is `count`), and the sum of the observations in seconds.
#[napi(object)]
pub struct MetricsHistogram {
    pub buckets: Vec<MetricsBucket>,
    pub count: f64,
    pub sum_seconds: f64,
}

/// One server's counts.
#[napi(object)]
pub struct MetricsServer {
    /// Its place in the server list, from 0.
    pub index: u32,
    pub address: String,
    pub round_trip: MetricsHistogram,
    /// Failed requests by kind (`timeout`, `connection_refused`, ...).
    pub errors: BTreeMap<String, f64>,
    pub identity_refusals: f64,
    pub quarantines: f64,
}

/// What `NativeRedlock.metrics()` returns.
#[napi(object)]
pub struct Metrics {
    /// Wait times by kind, then outcome; each `count` is how many ended so.
    pub acquisitions: BTreeMap<String, BTreeMap<String, MetricsHistogram>>,
    /// Hold times by kind.
    pub holds: BTreeMap<String, MetricsHistogram>,
    pub held: f64,
    pub waiting: f64,
    pub extensions_ok: f64,
    pub extensions_failed: f64,
    /// Kept holds lost, by cause.
    pub lost: BTreeMap<String, f64>,
    pub servers: Vec<MetricsServer>,
    pub leading: f64,
    pub term: f64,
    pub leader_changes: f64,
}

fn histogram(h: &HistogramSnapshot) -> MetricsHistogram {
    MetricsHistogram {
        buckets: h.buckets.iter().map(|&(le, count)| MetricsBucket { le, count: count as f64 }).collect(),
        count: h.count as f64,
        sum_seconds: h.sum_seconds,
    }
}

fn by_label(pairs: &[(&'static str, u64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|&(label, n)| (label.to_string(), n as f64)).collect()
}

fn server(s: &ServerSnapshot) -> MetricsServer {
    MetricsServer {
        index: u32::try_from(s.index).unwrap_or(u32::MAX),
        address: s.address.clone(),
        round_trip: histogram(&s.round_trip),
        errors: by_label(&s.errors),
        identity_refusals: s.identity_refusals as f64,
        quarantines: s.quarantines as f64,
    }
}

pub fn snapshot(s: &Snapshot) -> Metrics {
    let mut acquisitions: BTreeMap<String, BTreeMap<String, MetricsHistogram>> = BTreeMap::new();
    for a in &s.acquisitions {
        acquisitions.entry(a.kind.to_string()).or_default().insert(a.outcome.to_string(), histogram(&a.wait));
    }
    Metrics {
        acquisitions,
        holds: s.holds.iter().map(|(kind, h)| (kind.to_string(), histogram(h))).collect(),
        held: s.held as f64,
        waiting: s.waiting as f64,
        extensions_ok: s.extensions_ok as f64,
        extensions_failed: s.extensions_failed as f64,
        lost: by_label(&s.lost),
        servers: s.servers.iter().map(server).collect(),
        leading: s.leading as f64,
        term: s.term as f64,
        leader_changes: s.leader_changes as f64,
    }
}
