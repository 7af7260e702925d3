//! How a request holds its keys (`Share`), the arguments that say it, and
//! what a semaphore's limit record answers a request under other terms.

use redis::Cmd;

use crate::outcome::Outcome;

/// How a request holds a key: alone, shared, or as a holder of `k` of a
/// semaphore's `n` permits (`LOCK.ACQUIRE ... [SHARED [LIMIT n [PERMITS
/// k]]]`); or, for a set, a quorum semaphore's permit slots and its limit
/// record (`Slots`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    Exclusive,
    Shared,
    Permits(u32, u32),
    /// A set's keys alone but the last `largest - limit` of its locks,
    /// held shared, and its last key one permit of a semaphore whose limit
    /// in force is `limit` and whose largest limit since it was created is
    /// `largest` (`LOCK.MACQUIRE ... [SHARED largest-limit] SEMAPHORE limit
    /// LARGEST largest`): a quorum semaphore's slots below the limit, its
    /// slots from the limit to the largest, and its limit record. A record
    /// whose limit or largest differ refuses the set, naming its own
    /// (`semaphore_terms`).
    Slots {
        limit: u32,
        largest: u32,
    },
}

/// The limit in force and the largest limit a semaphore's limit record
/// named when it refused a `Share::Slots` request asking others (`LIMIT K
/// M semaphore resized: ...`); `None` for any other answer.
pub fn semaphore_terms(outcome: &Outcome) -> Option<(u32, u32)> {
    let Outcome::Failed(text) = outcome else { return None };
    let mut words = text.strip_prefix("LIMIT ")?.split_ascii_whitespace();
    let limit: u32 = words.next()?.parse().ok()?;
    let largest: u32 = words.next()?.parse().ok()?;
    (limit >= 1 && largest >= limit).then_some((limit, largest))
}

impl Share {
    /// Shared when `shared`, else exclusive.
    pub fn of(shared: bool) -> Share {
        if shared {
            Share::Shared
        } else {
            Share::Exclusive
        }
    }

    pub(super) fn args(self, cmd: &mut Cmd) {
        match self {
            Share::Exclusive => {}
            Share::Shared => {
                cmd.arg("SHARED");
            }
            Share::Permits(n, k) => {
                cmd.arg("SHARED").arg("LIMIT").arg(n);
                // One permit is the module's default; older modules know no PERMITS.
                if k != 1 {
                    cmd.arg("PERMITS").arg(k);
                }
            }
            Share::Slots { limit, largest } => {
                if largest > limit {
                    cmd.arg("SHARED").arg(largest - limit);
                }
                cmd.arg("SEMAPHORE").arg(limit).arg("LARGEST").arg(largest.max(limit));
            }
        }
    }
}
