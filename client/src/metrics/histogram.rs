//! A histogram of durations with fixed buckets, counted with atomics only:
//! an observation is three relaxed additions (its bucket, the count and the
//! sum), nothing allocated and nothing locked, so the quorum's requests
//! count themselves without waiting on one another.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds, smallest first; the last
/// bucket (`+Inf`) is implied.
pub(crate) type Bounds = &'static [u64];

/// A wait for a lock: from a millisecond to a minute.
pub(crate) const WAIT: Bounds = &[
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000,
    60_000_000,
];
/// A hold, from grant to release: from 10 ms to an hour.
pub(crate) const HOLD: Bounds =
    &[10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000, 300_000_000, 900_000_000, 3_600_000_000];
/// One request to one server: from 100 µs (a local server) to a second.
pub(crate) const ROUND_TRIP: Bounds = &[100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000];

/// The buckets a histogram can have at most (`+Inf` included).
const MAX_BUCKETS: usize = 16;

pub(crate) struct Histogram {
    bounds: Bounds,
    /// Observations per bucket (not cumulative; the text sums them).
    buckets: [AtomicU64; MAX_BUCKETS],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// What a histogram counted, read at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// (upper bound in seconds, observations at most that long), the
    /// cumulative counts of Prometheus, smallest bound first, without
    /// `+Inf` (whose count is `count`).
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    /// The sum of the observations, in seconds.
    pub sum_seconds: f64,
}

impl Histogram {
    pub(crate) fn new(bounds: Bounds) -> Histogram {
        // More bounds than buckets would fold into `+Inf` (the constants
        // above have at most 15).
        let bounds = bounds.get(..MAX_BUCKETS - 1).unwrap_or(bounds);
        Histogram { bounds, buckets: Default::default(), count: AtomicU64::new(0), sum_micros: AtomicU64::new(0) }
    }

    pub(crate) fn observe(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = self.bounds.iter().position(|&b| micros <= b).unwrap_or(self.bounds.len());
        if let Some(b) = self.buckets.get(bucket) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Observations so far (of every bucket).
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Read bucket by bucket, so a scrape during observations may see a
    /// bucket one ahead of the count: the count is taken as the sum of the
    /// buckets read, which keeps `+Inf` equal to `_count` in every scrape.
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0u64;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (i, bound) in self.bounds.iter().enumerate() {
            cumulative = cumulative.saturating_add(self.buckets.get(i).map_or(0, |b| b.load(Ordering::Relaxed)));
            buckets.push((*bound as f64 / 1e6, cumulative));
        }
        let last = self.buckets.get(self.bounds.len()).map_or(0, |b| b.load(Ordering::Relaxed));
        let count = cumulative.saturating_add(last);
        HistogramSnapshot { buckets, count, sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_counts_in_its_bucket_and_every_larger_one() {
        let h = Histogram::new(ROUND_TRIP);
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_micros(101));
        h.observe(Duration::from_secs(5));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets.first(), Some(&(0.0001, 1)));
        assert_eq!(s.buckets.get(1), Some(&(0.00025, 2)));
        assert_eq!(s.buckets.last(), Some(&(1.0, 2)));
        assert!((s.sum_seconds - 5.000201).abs() < 1e-9);
    }
}
