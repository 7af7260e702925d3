//! The module's integration tests that need no timing of their own: one
//! test program (each file here was its own program, and each program
//! linked the whole dependency tree again). Every test starts its own
//! servers (`tests/common`); they run two at a time, as before.
//!
//! The tests that measure a handoff's promptness are in `tests/handoff/`,
//! away from the CPU-heavy ones here (16-thread hammers and histories,
//! memory fills, clusters). Those that load both cores (`hammer`, the
//! histories of `lock_family`) and those that time a memory fill
//! (`eviction`) hold `common::one_heavy_at_a_time()`: none of them runs
//! beside another, as when each file was a program of its own.

#[path = "../common/mod.rs"]
mod common;

mod acl;
mod bounds;
mod cluster;
mod commands;
mod events;
mod eviction;
mod fence;
mod hammer;
mod interop;
mod largest;
mod lock_family;
mod malformed;
mod members;
mod multi;
mod persistence;
mod quarantine;
mod register;
mod replay;
mod replication;
mod resize;
mod restore;
mod revoke;
mod server_state;
mod stats;
mod values;
