//! The Redlock arithmetic, free of I/O: quorum size, clock drift, the
//! validity left after an acquisition, and fencing-token reconciliation.

use std::time::Duration;

/// A majority of `n` instances: n/2 + 1.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The clock drift allowed for a lease of `ttl`: `ttl * factor + 2 ms`
/// (the 2 ms cover Redis's millisecond expiry resolution).
pub fn drift(ttl: Duration, factor: f64) -> Duration {
    let scaled = ttl.as_secs_f64() * factor.max(0.0);
    Duration::try_from_secs_f64(scaled).unwrap_or(Duration::MAX).saturating_add(Duration::from_millis(2))
}

/// What is left of a lease of `ttl` after `elapsed` and `drift`, or `None`
/// when nothing is (never a wrapped-around "huge" validity).
pub fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?.checked_sub(drift).filter(|v| !v.is_zero())
}

/// Fencing reconciliation. Given the tokens the granting instances issued,
/// the token of the lock is their maximum; the instances that issued a
/// smaller one must be raised to it (`LOCK.ACQUIRE ... FENCE max`).
///
/// Why this keeps tokens monotonic across the quorum: a lock counts as
/// taken only when a quorum holds its token T (after the write-back), so
/// every instance of that quorum has a counter >= T, and counters never go
/// back (they are persisted, and a node that lost its memory restarts
/// from the wall clock in microseconds, above any token it issued, and is
/// quarantined until old leases ran out). Any later lock is granted by a
/// quorum too, and two quorums share at least one instance; that instance
/// issues a token > T, so the later lock's maximum is > T. Without the
/// write-back, the shared instance could be one that had issued a smaller
/// token for the first lock, and the later token could be smaller than T.
#[derive(Debug, PartialEq, Eq)]
pub struct Reconciliation {
    /// The lock's token.
    pub token: i64,
    /// Indexes (into the input) of the grants to raise to `token`.
    pub behind: Vec<usize>,
}

pub fn reconcile(tokens: &[i64]) -> Option<Reconciliation> {
    let token = *tokens.iter().max()?;
    let behind = tokens.iter().enumerate().filter(|(_, t)| **t < token).map(|(i, _)| i).collect();
    Some(Reconciliation { token, behind })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn majority_of_common_sizes() {
        assert_eq!([1, 2, 3, 4, 5, 6, 7].map(majority), [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(MS(10_000), 0.01), MS(102));
        assert_eq!(drift(MS(100), 0.01), MS(3));
        assert_eq!(drift(MS(100), 0.0), MS(2));
        // A nonsensical factor cannot make the drift negative.
        assert_eq!(drift(MS(100), -1.0), MS(2));
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        assert_eq!(validity(MS(10_000), MS(30), MS(102)), Some(MS(9_868)));
    }

    #[test]
    fn validity_is_none_when_nothing_is_left_never_wrapped() {
        assert_eq!(validity(MS(10), MS(8), MS(2)), None);
        assert_eq!(validity(MS(10), MS(9), MS(2)), None);
        assert_eq!(validity(MS(10), MS(50), MS(2)), None);
        assert_eq!(validity(MS(10), MS(7), MS(2)), Some(MS(1)));
    }

    #[test]
    fn reconciliation_raises_everyone_below_the_maximum() {
        assert_eq!(reconcile(&[5, 9, 7, 9]), Some(Reconciliation { token: 9, behind: vec![0, 2] }));
        assert_eq!(reconcile(&[4, 4, 4]), Some(Reconciliation { token: 4, behind: vec![] }));
        assert_eq!(reconcile(&[]), None);
    }
}
