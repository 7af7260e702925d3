//! The module's monotonic clock, and noticing steps of the wall clock.
//!
//! Every supported server keys module timers (`ustime()`) and
//! blocked-client timeouts (`mstime()`) to the wall clock, so an NTP step,
//! a resumed VM or `date -s` fires them early (forward) or late, by the
//! whole step (backward). A duration the module promises (a WAIT timeout,
//! the restart quarantine) is therefore measured here, on the monotonic
//! clock, and a timer is only a wake-up: its callback checks the monotonic
//! time and re-arms when early, and a backward step, which would hold
//! timers back, is noticed from the server's cron (an event-loop timer
//! on the monotonic clock) and answered by re-arming them.

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Milliseconds on the monotonic clock since the module first asked.
pub fn mono_ms() -> i64 {
    let epoch = EPOCH.get_or_init(Instant::now);
    i64::try_from(epoch.elapsed().as_millis()).unwrap_or(i64::MAX)
}

pub use crate::core::lease::STEP_MS;

/// Watches the offset between the wall clock and the monotonic clock.
#[derive(Debug, Default)]
pub struct StepDetector {
    offset_ms: Option<i64>,
}

impl StepDetector {
    pub const fn new() -> StepDetector {
        StepDetector { offset_ms: None }
    }

    /// Takes the current `wall_ms` and `mono_ms`; true when the wall clock
    /// stepped (either way) since the last look.
    pub fn stepped(&mut self, wall_ms: i64, mono_ms: i64) -> bool {
        let offset = wall_ms.saturating_sub(mono_ms);
        let stepped = self.offset_ms.is_some_and(|last| offset.saturating_sub(last).saturating_abs() > STEP_MS);
        self.offset_ms = Some(offset);
        stepped
    }
}

/// Both clocks, read once per command.
pub fn now() -> crate::core::lease::Now {
    crate::core::lease::Now { wall: crate::api::unix_millis(), mono: mono_ms() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_seen_either_way_and_drift_is_not() {
        let mut d = StepDetector::default();
        assert!(!d.stepped(1_000_000, 5), "the first look has nothing to compare");
        assert!(!d.stepped(1_000_105, 105), "both moved alike");
        assert!(!d.stepped(1_000_215, 205), "10 ms of drift is no step");
        assert!(d.stepped(1_060_305, 305), "+60 s");
        assert!(!d.stepped(1_060_405, 405));
        assert!(d.stepped(1_000_505, 505), "-60 s");
        assert!(!d.stepped(i64::MAX, i64::MIN) || d.stepped(i64::MIN, i64::MAX), "no overflow");
    }

    #[test]
    fn the_monotonic_clock_does_not_go_back() {
        let a = mono_ms();
        let b = mono_ms();
        assert!(b >= a && a >= 0);
    }
}
