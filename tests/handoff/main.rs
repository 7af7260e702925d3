//! The module's tests that bound how soon a waiter is served (a handoff
//! within its margin, a WAIT ending at its timeout, kill-to-grant medians):
//! one test program of their own, so the tests beside them are only these
//! (two at a time, as when each file was its own program), never the
//! CPU-heavy ones of `tests/module/`.

#[path = "../common/mod.rs"]
mod common;

mod clock_steps;
mod lease_changes;
mod multi_wait;
mod session;
mod waiting;
