//! A lock's lease, measured on the monotonic clock.
//!
//! Redis expires keys by the wall clock, so a lease that was only the
//! key's TTL ended early when the wall clock stepped forward (an NTP step,
//! a resumed VM, `date -s`) and lasted longer when it stepped back. The
//! lock value therefore carries its lease end on the module's monotonic
//! clock, and that decides whether the lock is held. The key keeps a
//! Redis TTL at the wall-clock deadline beside it, the "mirror": PTTL,
//! persistence, the AOF and replication see a deadline they can use, and
//! Redis reclaims the memory.
//!
//! The two can disagree in three ways, each handled where it shows:
//! - someone changed the TTL (PEXPIRE, PERSIST, a replicated PEXPIREAT, a
//!   load from RDB that knows only the TTL): the key's TTL no longer equals
//!   the mirror, and the lease is taken from the TTL again (`judge`), so an
//!   operator's TTL commands still set the lease as on any key;
//! - the wall clock stepped back: the TTL outlives the lease, and the lock
//!   is free although its key is still there (`judge`);
//! - the wall clock stepped forward: Redis deletes the key while the lease
//!   runs, and the module keeps the lock (`rescue`).
//!
//! Nothing here knows Redis: the caller reads the clocks and the key's TTL.

/// A wall-clock move larger than this, between two reads of both clocks,
/// is a step (NTP, a resumed VM, `date -s`), not drift.
pub const STEP_MS: i64 = 20;

/// The longest lease any command gives: a year, the most
/// `redislock.max-ttl` allows (it keeps `now + ttl` far from overflow and
/// any lease sane).
pub const LONGEST_LEASE_MS: i64 = 31_536_000_000;

/// No end: a persisted lock.
pub const NO_END: i64 = i64::MAX;
/// Not known yet: take it from the key's TTL at the next look (a lock
/// loaded from an RDB file, RESTORE, or an AOF rewrite's LOCK.APPLY).
pub const UNKNOWN: i64 = i64::MIN;
/// The mirror of a lease without a TTL.
pub const NO_TTL: i64 = -1;

/// Both clocks, read once per command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Unix ms, as the server reads it.
    pub wall: i64,
    /// The module's monotonic clock, ms (`clock::mono_ms`).
    pub mono: i64,
}

/// A lease as the lock value stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// When it ends on the monotonic clock (`NO_END`, `UNKNOWN`).
    pub end: i64,
    /// The key's absolute Redis TTL set with it, Unix ms (`NO_TTL`).
    pub mirror: i64,
}

impl Lease {
    pub const UNKNOWN: Lease = Lease { end: UNKNOWN, mirror: NO_TTL };

    /// This lease cut short to end at `end` (monotonic; its holder's
    /// connection closed, with a lock-delay): `None` when it ends by then
    /// anyway. A lease is never lengthened this way.
    pub fn cut_to(self, end: i64, now: Now) -> Option<Lease> {
        (end < self.end).then(|| Lease::starting(now, end.saturating_sub(now.mono)))
    }

    /// A lease of `ttl_ms` from `now`; its mirror is the wall deadline.
    pub fn starting(now: Now, ttl_ms: i64) -> Lease {
        Lease { end: now.mono.saturating_add(ttl_ms), mirror: now.wall.saturating_add(ttl_ms) }
    }

    /// The lease a wall-clock deadline gives, read with `now`'s clocks
    /// (`None`: no TTL, no end).
    pub fn until(deadline: Option<i64>, now: Now) -> Lease {
        match deadline {
            Some(at) => Lease { end: now.mono.saturating_add(at.saturating_sub(now.wall)), mirror: at },
            None => Lease { end: NO_END, mirror: NO_TTL },
        }
    }

    /// The same end, with its mirror at `now`'s wall clock: the TTL to
    /// set when the wall clock moved since the mirror was taken (a step),
    /// or when a kept lock's key is put back.
    pub fn remirrored(self, now: Now) -> Lease {
        if self.end == NO_END {
            return Lease { end: NO_END, mirror: NO_TTL };
        }
        Lease { end: self.end, mirror: now.wall.saturating_add(self.end.saturating_sub(now.mono)) }
    }

    /// What is left of it at `now`.
    pub fn left(self, now: Now) -> Left {
        if self.end == NO_END {
            Left::Forever
        } else if self.end == UNKNOWN || self.end <= now.mono {
            Left::Ended
        } else {
            Left::Ms(self.end - now.mono)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    Ms(i64),
    Forever,
    Ended,
}

impl Left {
    pub fn is_running(self) -> bool {
        self != Left::Ended
    }

    /// As PTTL shows it: -1 without an end.
    pub fn pttl(self) -> i64 {
        match self {
            Left::Ms(ms) => ms,
            Left::Forever => -1,
            Left::Ended => 0,
        }
    }
}

/// Decides what is left of `lease` at `now`, given the key's TTL (`ttl`,
/// Unix ms or `None`). While the TTL is still the mirror, the monotonic
/// end decides, whatever the wall clock did since. A TTL that is not the
/// mirror was set by someone else (PEXPIRE, PERSIST, a replicated
/// extension, a load): it is the lease from now on, returned to be stored.
pub fn judge(lease: Lease, now: Now, ttl: impl FnOnce() -> Option<i64>) -> (Left, Option<Lease>) {
    let current = ttl();
    if lease.end != UNKNOWN && current.unwrap_or(NO_TTL) == lease.mirror {
        return (lease.left(now), None);
    }
    let taken = Lease::until(current, now);
    (taken.left(now), Some(taken))
}

/// Whether the lock is held, for a command that only needs to know that:
/// a lease running on the monotonic clock is held whatever the TTL says
/// (the key exists, so its TTL has not passed), and no TTL is read; the
/// hot path of RELEASE, EXTEND and a re-grant. Otherwise as `judge`.
pub fn held(lease: Lease, now: Now, ttl: impl FnOnce() -> Option<i64>) -> (Left, Option<Lease>) {
    let left = lease.left(now);
    if left.is_running() {
        return (left, None);
    }
    judge(lease, now, ttl)
}

/// Whether a lock's key left the keyspace while its lease runs because
/// the wall clock stepped forward: the wall clock has passed the mirror
/// (so Redis expired it, or would have) while the monotonic lease has more
/// than a step's tolerance left.
pub fn removed_by_step(lease: Lease, now: Now) -> bool {
    lease.mirror != NO_TTL && now.wall >= lease.mirror && matches!(lease.left(now), Left::Ms(ms) if ms > STEP_MS)
}

/// The wall-clock deadline of a lease ending at `end` (monotonic), read
/// at `now`: how a shared holder's lease and a group key's TTL are
/// mirrored, replicated and rewritten; `NO_TTL` without an end.
pub fn wall_deadline(end: i64, now: Now) -> i64 {
    if end == NO_END {
        return NO_TTL;
    }
    now.wall.saturating_add(end.saturating_sub(now.mono))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: Now = Now { wall: 1_700_000_000_000, mono: 5_000 };

    fn at(now: Now, elapsed: i64, wall_step: i64) -> Now {
        Now { wall: now.wall + elapsed + wall_step, mono: now.mono + elapsed }
    }

    #[test]
    fn a_lease_runs_on_the_monotonic_clock_whatever_the_wall_clock_does() {
        let lease = Lease::starting(T0, 30_000);
        for step in [-60_000, 0, 60_000] {
            let now = at(T0, 10_000, step);
            let (left, resynced) = judge(lease, now, || Some(lease.mirror));
            assert_eq!((left, resynced), (Left::Ms(20_000), None), "step {step}");
        }
        // Backward step: the TTL (the mirror) outlives the lease; it ended.
        let late = at(T0, 30_000, -60_000);
        assert_eq!(judge(lease, late, || Some(lease.mirror)), (Left::Ended, None));
    }

    #[test]
    fn a_ttl_set_by_someone_else_becomes_the_lease() {
        let lease = Lease::starting(T0, 1_000);
        let now = at(T0, 2_000, 0);
        // PEXPIRE k 60000 after the lease ended by the module's count.
        let (left, resynced) = judge(lease, now, || Some(now.wall + 60_000));
        assert_eq!(left, Left::Ms(60_000));
        assert_eq!(resynced, Some(Lease { end: now.mono + 60_000, mirror: now.wall + 60_000 }));
        // PEXPIRE k 100 while it runs: the lease is cut.
        let early = at(T0, 200, 0);
        assert_eq!(judge(lease, early, || Some(early.wall + 100)).0, Left::Ms(100));
        // PERSIST: no end.
        assert_eq!(judge(lease, now, || None).0, Left::Forever);
        // Loaded from RDB: known only from the TTL.
        assert_eq!(judge(Lease::UNKNOWN, now, || Some(now.wall + 5)).0, Left::Ms(5));
        assert_eq!(judge(Lease::UNKNOWN, now, || Some(now.wall - 5)).0, Left::Ended);
    }

    #[test]
    fn held_reads_the_ttl_only_once_the_monotonic_lease_has_ended() {
        let lease = Lease::starting(T0, 1_000);
        let running = at(T0, 500, 60_000);
        assert!(held(lease, running, || panic!("no TTL read while the lease runs")).0.is_running());
        let ended = at(T0, 1_500, -60_000);
        assert_eq!(held(lease, ended, || Some(lease.mirror)).0, Left::Ended);
        assert_eq!(held(lease, ended, || None).0, Left::Forever, "PERSIST");
    }

    #[test]
    fn a_remirrored_lease_keeps_its_end_and_takes_the_wall_clock_of_now() {
        let lease = Lease::starting(T0, 30_000);
        let stepped = at(T0, 10_000, 60_000);
        assert_eq!(lease.remirrored(stepped), Lease { end: lease.end, mirror: stepped.wall + 20_000 });
        assert_eq!(Lease::until(None, T0).remirrored(stepped), Lease::until(None, T0));
    }

    #[test]
    fn a_lease_is_cut_short_never_lengthened() {
        let lease = Lease::starting(T0, 30_000);
        let cut = lease.cut_to(T0.mono + 500, T0).expect("shorter");
        assert_eq!(cut, Lease { end: T0.mono + 500, mirror: T0.wall + 500 });
        assert_eq!(lease.cut_to(T0.mono + 30_000, T0), None);
        assert_eq!(lease.cut_to(T0.mono + 40_000, T0), None);
        assert_eq!(Lease { end: NO_END, mirror: NO_TTL }.cut_to(T0.mono, T0).map(|l| l.end), Some(T0.mono));
    }

    #[test]
    fn a_wall_deadline_is_the_lease_mirrored_at_now() {
        let lease = Lease::starting(T0, 30_000);
        assert_eq!(wall_deadline(lease.end, T0), lease.mirror);
        // Read after a step: the deadline moves with the wall clock, the
        // end does not.
        let stepped = at(T0, 10_000, 60_000);
        assert_eq!(wall_deadline(lease.end, stepped), lease.mirror + 60_000);
        assert_eq!(wall_deadline(lease.end, stepped), lease.remirrored(stepped).mirror);
        assert_eq!(wall_deadline(NO_END, T0), NO_TTL, "no end, no TTL");
        // An end already passed is a deadline already passed.
        assert_eq!(wall_deadline(T0.mono - 5, T0), T0.wall - 5);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// A shared holder's lease as a grant or an extension makes it
        /// (`Lease::starting`) and as the key, the stream and the AOF
        /// rewrite mirror it (`wall_deadline`) agree, and nothing
        /// overflows whatever the clocks read.
        #[test]
        fn a_lease_and_its_wall_deadline_agree(
            wall in any::<i64>(),
            mono in any::<i64>(),
            ttl in 1..=LONGEST_LEASE_MS,
            later in 0i64..=LONGEST_LEASE_MS,
            step in -LONGEST_LEASE_MS..=LONGEST_LEASE_MS,
        ) {
            let now = Now { wall, mono };
            let lease = Lease::starting(now, ttl);
            let exact = wall.checked_add(ttl).is_some() && mono.checked_add(ttl).is_some();
            if exact {
                prop_assert_eq!(wall_deadline(lease.end, now), lease.mirror);
            }
            let then = Now { wall: wall.saturating_add(later).saturating_add(step), mono: mono.saturating_add(later) };
            let deadline = wall_deadline(lease.end, then);
            prop_assert_eq!(deadline, lease.remirrored(then).mirror);
        }
    }

    #[test]
    fn only_a_forward_step_makes_an_expiry_premature() {
        let lease = Lease::starting(T0, 30_000);
        assert!(removed_by_step(lease, at(T0, 300, 60_000)));
        assert!(!removed_by_step(lease, at(T0, 30_000, 0)), "expired on time");
        assert!(!removed_by_step(lease, at(T0, 300, 0)), "DEL, PEXPIRE or eviction, not a step");
        assert!(!removed_by_step(lease, at(T0, 29_990, 15)), "drift within tolerance");
        assert!(!removed_by_step(Lease::until(None, T0), at(T0, 300, 60_000)), "no TTL, nothing to expire");
    }
}
