//! Distributions of waits and holds, for `INFO redislock`: how long
//! clients waited in line before a grant, and how long holders held a
//! lock before releasing it, per kind of hold.
//!
//! Fixed buckets, log-linear (each power of two of milliseconds cut into
//! `SUB` equal parts, so a value is known within 1/`SUB` of itself), in
//! static counters: recording a value is an index computation and a
//! relaxed store on Redis's main thread, no allocation and no system
//! call. Percentiles are computed when INFO asks. `CONFIG RESETSTAT`
//! empties them, as it does the server's own statistics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Sub-buckets per power of two: values are kept within 12.5 %.
const SUB: usize = 8;
/// Powers of two of milliseconds covered: up to 2^40 ms (35 years).
const POWERS: usize = 40;
const BUCKETS: usize = SUB + POWERS * SUB;

pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    max: AtomicU64,
}

/// The bucket of `ms`: values below `SUB` have one each; above, each
/// power of two `[2^p, 2^(p+1))` is cut into `SUB` parts.
fn bucket(ms: u64) -> usize {
    if ms < SUB as u64 {
        return ms as usize;
    }
    let power = 63 - ms.leading_zeros() as usize; // 2^power <= ms
    let shift = power - SUB.trailing_zeros() as usize;
    let sub = ((ms >> shift) as usize) - SUB; // 0..SUB
    (SUB + (power - SUB.trailing_zeros() as usize) * SUB + sub).min(BUCKETS - 1)
}

/// The largest value a bucket holds (what a percentile reports: an
/// upper bound, never below the true value).
fn upper(index: usize) -> u64 {
    if index < SUB {
        return index as u64;
    }
    let group = (index - SUB) / SUB;
    let sub = (index - SUB) % SUB;
    let shift = group as u32;
    (((SUB + sub + 1) as u64) << shift) - 1
}

impl Histogram {
    pub const fn new() -> Histogram {
        Histogram { counts: [const { AtomicU64::new(0) }; BUCKETS], max: AtomicU64::new(0) }
    }

    /// Records one value (ms; a negative one counts as 0). Main thread
    /// only: a load and a store, no locked instruction.
    #[inline]
    pub fn record(&self, ms: i64) {
        let ms = u64::try_from(ms).unwrap_or(0);
        let counter = &self.counts[bucket(ms)];
        counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
        if ms > self.max.load(Relaxed) {
            self.max.store(ms, Relaxed);
        }
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    pub fn max(&self) -> u64 {
        self.max.load(Relaxed)
    }

    /// The value at `fraction` (0.5 for the median) of the recorded ones,
    /// as its bucket's upper bound (and never above the maximum); 0 when
    /// nothing was recorded.
    pub fn percentile(&self, fraction: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((fraction * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Relaxed);
            if seen >= rank {
                return upper(i).min(self.max());
            }
        }
        self.max()
    }

    pub fn reset(&self) {
        for c in &self.counts {
            c.store(0, Relaxed);
        }
        self.max.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_values_are_exact_and_percentiles_follow_a_known_schedule() {
        let h = Histogram::new();
        assert_eq!((h.count(), h.percentile(0.5), h.max()), (0, 0, 0));
        // 90 holds of 5 ms, 9 of 100 ms, 1 of 2000 ms.
        for _ in 0..90 {
            h.record(5);
        }
        for _ in 0..9 {
            h.record(100);
        }
        h.record(2_000);
        h.record(-3);
        assert_eq!(h.count(), 101);
        assert_eq!(h.percentile(0.5), 5, "below 8 ms every value has its own bucket");
        let p99 = h.percentile(0.99);
        assert!((100..=112).contains(&p99), "p99 {p99}: within 1/8 of 100");
        assert_eq!(h.percentile(0.999), 2_000, "never above the maximum");
        assert_eq!(h.max(), 2_000);
        h.reset();
        assert_eq!((h.count(), h.max(), h.percentile(0.99)), (0, 0, 0));
    }

    proptest! {
        /// A value's bucket reports it within 1/8 above, never below.
        #[test]
        fn a_bucket_bounds_its_values_within_an_eighth(ms in prop_oneof![0u64..10_000, 0u64..(1u64 << 42)]) {
            let up = upper(bucket(ms));
            prop_assert!(up >= ms || bucket(ms) == BUCKETS - 1, "{ms} reported as {up}");
            prop_assert!(up as f64 <= ms as f64 * 1.125 + 1.0 || bucket(ms) == BUCKETS - 1, "{ms} reported as {up}");
        }
    }
}
