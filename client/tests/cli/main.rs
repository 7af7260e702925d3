//! The `redlock` command-line program, run as users run it: its output,
//! exit statuses, errors and input checks. One test program (each file
//! here was its own program, and each linked the whole dependency tree).

#[path = "../common/mod.rs"]
mod common;

mod ask;
mod cli;
mod cli_errors;
mod elect;
mod fenced;
mod group;
mod input;
mod members;
mod metrics;
mod prometheus;
mod resize;
mod revoke;
mod run_ask;
mod serve;
mod serve_endpoint;
mod serve_family;
mod serve_faults;
mod serve_listen;
mod serve_observe;
mod serve_scale;
mod serve_session;
mod sets;
mod watch;
