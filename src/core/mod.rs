//! The rules of every lock kind, free of Redis: what a grant, a release, an
//! extension and admission may do for each kind (`grant`), whether a hold
//! is current for an owner and token (`check`, the fence), the order a
//! key's line of waiters is served in (`line`), several keys granted at
//! once and the lines a set waits in (`multi`), the lease on the monotonic
//! clock and its wall-clock mirror (`lease`), fencing tokens as numbers
//! (`token`), the states a stored lock may be in (`stored`), the
//! bounded memory of revoked holds (`revoked`), and a shared holder's own
//! value (`valued`); Redis's glob patterns (which keys announce every
//! change) are the workspace's `redis-glob` crate (glob/), shared with the
//! client. Nothing here imports
//! `redis_module`, uses `unsafe`, or imports from outside `src/core/`; the
//! glue reads the clocks and the keys and calls these functions, and the
//! property tests drive the same functions.
#![forbid(unsafe_code)]

pub mod check;
pub mod grant;
pub mod lease;
pub mod line;
// `Lines`, a set's waiting in line, is called only by the tests until
// LOCK.MACQUIRE's WAIT lands in the glue.
#[cfg_attr(not(test), allow(dead_code))]
pub mod multi;
pub mod revoked;
pub mod stored;
pub mod token;
pub mod valued;
