//! The instance's fencing-token counter.
//!
//! One counter for every key and database: a token is never issued twice
//! and every grant gets a larger one than all before it on this instance.
//! The counter always equals the largest token issued or seen (loaded from
//! an RDB, restored, replicated), so a replica that applied its master's
//! grants, once promoted, keeps issuing larger tokens.
//!
//! At load it starts at the Unix time in microseconds: a restart that lost
//! everything still issues larger tokens than before, unless the wall
//! clock stepped back, since one Redis grants far fewer than a million
//! locks a second.

use std::sync::atomic::{AtomicI64, Ordering};

use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::core::token::{next_token, Token};

/// A monotonic token counter.
#[derive(Default)]
pub struct Counter(AtomicI64);

/// The instance's counter. Only Redis's main thread (and a forked child, on
/// its own copy) touches it; the atomic is just a safe, free `static`.
pub static COUNTER: Counter = Counter::new();

impl Counter {
    pub const fn new() -> Self {
        Counter(AtomicI64::new(0))
    }

    /// The largest token issued or seen so far.
    pub fn current(&self) -> Token {
        self.0.load(Ordering::Relaxed)
    }

    /// Raises the counter to at least `token`.
    pub fn observe(&self, token: Token) {
        self.0.fetch_max(token, Ordering::Relaxed);
    }

    /// Issues a new token, at least `min` and larger than every token
    /// before. `None` when the token space is exhausted.
    pub fn issue(&self, min: Token) -> Option<Token> {
        let token = next_token(self.current(), min)?;
        self.0.store(token, Ordering::Relaxed);
        Some(token)
    }

    /// Raises the counter to the wall clock in microseconds.
    pub fn seed_from_clock(&self) {
        self.observe(unix_micros());
    }

    /// Raises the counter above every token an old master can have issued
    /// that this instance never received (asynchronous replication): those
    /// are at most its clock floor plus the allowed lead.
    pub fn seed_for_promotion(&self) {
        self.observe(ceiling(crate::server::config::max_token_lead()));
    }
}

/// A token a client brings (FENCE, a RESTORE payload) may lead the clock
/// floor (Unix µs) by at most `redislock.max-token-lead`. Without a bound
/// one request could push the counter to the end of the token space for
/// every key, or so far ahead of the clock that a restart without data
/// would issue smaller tokens. A token the counter has already reached
/// changes nothing and is always accepted. This server's own data and its
/// master's stream are not client input and are never held to it: they
/// replay what was granted, whatever this clock says now.
/// `Err` carries the largest token accepted now.
pub fn check_lead(token: Token) -> Result<(), Token> {
    if token <= COUNTER.current() {
        return Ok(());
    }
    let ceiling = ceiling(crate::server::config::max_token_lead());
    if token <= ceiling {
        Ok(())
    } else {
        Err(ceiling)
    }
}

/// The largest token allowed with a lead of `lead_ms` over the clock.
fn ceiling(lead_ms: i64) -> Token {
    unix_micros().saturating_add(lead_ms.saturating_mul(1000))
}

/// The error text for a token beyond the bound; `what` names it.
pub fn lead_error(what: &str, ceiling: Token) -> String {
    format!(
        "ERR {what} is ahead of this server's clock by more than redislock.max-token-lead ({} ms); \
         the largest accepted now is {ceiling}",
        crate::server::config::max_token_lead()
    )
}

fn unix_micros() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_token_is_counter_plus_one_without_floor() {
        assert_eq!(next_token(41, 0), Some(42));
    }

    #[test]
    fn next_token_honours_a_higher_floor() {
        assert_eq!(next_token(41, 100), Some(100));
        // A floor equal to the counter still moves forward.
        assert_eq!(next_token(41, 41), Some(42));
        assert_eq!(next_token(41, 42), Some(42));
    }

    #[test]
    fn next_token_refuses_to_wrap() {
        assert_eq!(next_token(i64::MAX, 0), None);
        assert_eq!(next_token(i64::MAX - 1, 0), Some(i64::MAX));
    }

    #[test]
    fn issue_and_observe_only_move_forward() {
        let counter = Counter::new();
        counter.observe(1_000);
        let a = counter.issue(0).expect("token");
        assert_eq!(a, 1_001);
        counter.observe(a - 10);
        let b = counter.issue(0).expect("token");
        assert_eq!(b, a + 1);
        let c = counter.issue(b + 100).expect("token");
        assert_eq!(c, b + 100);
        assert_eq!(counter.current(), c);
    }

    #[test]
    fn the_ceiling_leads_the_clock_by_the_lead() {
        let before = unix_micros();
        let c = ceiling(60_000);
        assert!(c >= before + 60_000_000 && c <= unix_micros() + 60_000_000);
        assert_eq!(ceiling(i64::MAX), i64::MAX, "saturates instead of overflowing");
    }

    #[test]
    fn seed_is_at_least_the_clock_in_micros() {
        let before = unix_micros();
        assert!(before > 1_600_000_000_000_000, "clock reads {before}");
        let counter = Counter::new();
        counter.seed_from_clock();
        assert!(counter.current() >= before);
    }
}
