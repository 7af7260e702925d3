//! The quorum client against real servers: the round and the line, shared
//! holds and permits, fencing write-back, Redis Cluster instances, changed
//! connections, fairness. One test program (each file here was its own
//! program, and each linked the whole dependency tree); its tests run two
//! at a time, as before. The contention runs of `semaphore`,
//! `shared_locks` and the flapping link of `connections` hold
//! `common::serial()`, one at a time.

#[path = "../common/mod.rs"]
mod common;

mod ask;
mod connections;
mod election;
mod fairness;
mod fence_in_store;
mod fence_write_back;
mod line;
mod members;
mod quorum;
mod reconnects;
mod redis_cluster;
mod resize;
mod revoke;
mod semaphore;
mod sets;
mod shared_handle;
mod shared_locks;
mod watch;
