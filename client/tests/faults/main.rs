//! The tests whose figures are timing or grant counts under faults and
//! load: the fault suite, wall-clock steps, 16-client contention, request
//! timeouts, session handoffs. Every test holds `common::serial()` from
//! start to end, so each runs alone in this program, as when each file was
//! its own program (the fault and clock-step suites were one at a time
//! already; `contention` was its own program to be alone).

#[path = "../common/mod.rs"]
mod common;

mod clock_steps;
mod contention;
mod election;
mod faults;
mod session;
mod supervised;
mod timing;
