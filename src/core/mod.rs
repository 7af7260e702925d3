//! The rules of every lock kind, free of Redis: what a grant, a release, an
//! extension and the wait queue may do (`grant`), the lease on the
//! monotonic clock and its wall-clock mirror (`lease`), and fencing tokens
//! as numbers (`token`). Nothing here imports `redis_module`, uses
//! `unsafe`, or imports from outside `src/core/`; the glue reads the
//! clocks and the keys and calls these functions, and the property tests
//! drive the same functions.
#![forbid(unsafe_code)]

pub mod grant;
pub mod lease;
pub mod token;
