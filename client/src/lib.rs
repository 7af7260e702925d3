//! redlock: the Redlock algorithm across independent Redis instances that
//! run the redislock module (or, in script mode, plain Redis).
//!
//! - `quorum`: quorum, drift, validity and token arithmetic (no I/O)
//! - `outcome`: what each server answered, as data (outcomes, rejections)
//! - `transport`: one reconnecting connection per server, with timeouts
//! - `tls`: `rediss://` servers: certificates read and checked, failures named
//! - `resources`: what one acquisition locks: one resource, or a set
//! - `redlock`: acquire, extend, release, status; explicit reentrancy (`Lock::reenter`)
//! - `semaphore`: permits of a semaphore, each a slot lock on a majority
//! - `guard`: automatic extension and the lost-lock signal
//! - `fence`: the fenced (`LOCK.FENCED`) and guarded (`LOCK.GUARD`)
//!   commands a holder sends to the Redis that keeps its data
//! - `election`: leader election (campaign, proclaim, leader, observe,
//!   resign), the leader stored with the hold
//! - `members`: group membership (join, proclaim, leave, members), each
//!   member's value stored with its shared hold
//! - `semaphore`: permits of a counting semaphore, one slot lock each
//! - `hold`: what every front end (the CLI, the Python and Node bindings)
//!   does with a lock: requests, holds, input checks, failures by category
//! - `metrics`: each handle's counts (acquisitions, waits, holds, losses,
//!   servers, elections) and their Prometheus text
//! - `traces`: the spans of acquisitions, rounds and server calls (the
//!   `tracing` feature)
//! - `settings` (defaults and checks), `error`

pub mod election;
pub mod error;
pub mod fence;
pub mod guard;
pub mod hold;
pub mod members;
pub mod metrics;
pub mod outcome;
pub mod quorum;
pub mod redlock;
pub mod resources;
pub mod semaphore;
pub mod settings;
pub mod tls;
mod traces;
pub mod transport;
pub mod watch;

#[cfg(doctest)]
mod doctests;

pub use election::{Election, Leader, Leadership, SharedLeadership};
pub use error::Error;
pub use guard::{LockGuard, Watch};
pub use members::{Group, Member, Membership, SharedMembership};
pub use outcome::{InstanceOutcome, Outcome, Rejection, UnreachableCause};
pub use quorum::NotGranted;
pub use redlock::{servers_in_one, Asked, Kind, Lock, Redlock, Released, Retry, Revoked};
pub use resources::Resources;
pub use semaphore::Resized;
pub use settings::{Mode, Names, Pem, Settings, TlsSettings, Unit, SESSION_MARGIN};
pub use transport::{is_tls_url, ContendedLock, InstanceStatus, InstanceSummary, InstanceTop};
pub use watch::{AskRequest, Change, ChangeKind};
