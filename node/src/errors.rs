//! The crate's errors as plain objects the package's JavaScript turns into
//! its error classes (`lib/errors.js`). A failed operation resolves its
//! Promise with a `Failure` rather than rejecting it: the object carries
//! the stable `code` and each server's outcome, which an `Error` made by
//! napi could not. Bad arguments throw at once, as `InvalidArg` errors
//! (`config_error`), which the package throws as `ConfigError`.

use napi::{Error, Status};
use napi_derive::napi;
use redlock::{InstanceOutcome, NotGranted};

/// What one server answered.
#[napi(object)]
pub struct ServerOutcome {
    /// `host:port`.
    pub server: String,
    /// A stable name: `granted`, `refused`, `ok`, `timeout`,
    /// `connection_refused`, `quarantine`, `module_missing`, ...
    pub kind: String,
    /// The client's text for it, e.g. `granted (token 42)`.
    pub message: String,
}

/// A failed operation.
#[napi(object)]
pub struct Failure {
    /// `NOT_ACQUIRED`, `QUORUM_UNREACHABLE`, `LOCK_LOST`, `CONFIG`,
    /// `RELEASED`, `ABORTED`, `REDLOCK`.
    pub code: String,
    pub message: String,
    pub resource: Option<String>,
    /// Why no quorum granted: `held`, `quarantine`, `no_quorum`,
    /// `no_validity`, `rejected`; or what the servers refused
    /// (`max_ttl`, `wrong_type`, ...).
    pub reason: Option<String>,
    pub attempts: Option<u32>,
    /// Until enough servers leave their restart quarantine.
    pub quarantine_ms_left: Option<f64>,
    pub outcomes: Vec<ServerOutcome>,
}

pub fn outcomes(outcomes: &[InstanceOutcome]) -> Vec<ServerOutcome> {
    outcomes
        .iter()
        .map(|o| ServerOutcome { server: o.server.clone(), kind: o.outcome.kind().to_string(), message: o.outcome.to_string() })
        .collect()
}

/// What went wrong, on either side of the binding.
#[derive(Debug)]
pub enum Fault {
    Redlock(redlock::Error),
    /// The lock was lost before this operation asked for it.
    Lost {
        resource: String,
        why: &'static str,
    },
    /// This lock was released already.
    Released {
        resource: String,
    },
    /// The wait was cancelled (`AbortSignal`).
    Aborted {
        resource: String,
    },
}

impl From<redlock::Error> for Fault {
    fn from(e: redlock::Error) -> Fault {
        Fault::Redlock(e)
    }
}

fn failure(code: &str, message: String, resource: Option<String>) -> Failure {
    Failure { code: code.to_string(), message, resource, reason: None, attempts: None, quarantine_ms_left: None, outcomes: Vec::new() }
}

impl From<Fault> for Failure {
    fn from(f: Fault) -> Failure {
        match f {
            Fault::Redlock(e) => from_redlock(e),
            Fault::Lost { resource, why } => failure("LOCK_LOST", format!("lock {resource:?} lost: {why}"), Some(resource)),
            Fault::Released { resource } => failure("RELEASED", format!("this lock of {resource:?} was released already"), Some(resource)),
            Fault::Aborted { resource } => failure("ABORTED", format!("the wait for lock {resource:?} was aborted"), Some(resource)),
        }
    }
}

fn from_redlock(e: redlock::Error) -> Failure {
    let message = e.to_string();
    match e {
        redlock::Error::NotAcquired { resource, attempts, why, outcomes: each } => {
            // Too few servers answered at all: nothing was decided about
            // the lock, unlike a refusal by a quorum.
            let code = if why == NotGranted::NoQuorum { "QUORUM_UNREACHABLE" } else { "NOT_ACQUIRED" };
            let quarantine_ms_left = match why {
                NotGranted::Quarantine { ms_left, .. } => Some(ms_left as f64),
                _ => None,
            };
            Failure {
                code: code.to_string(),
                message,
                resource: Some(resource),
                reason: Some(why.kind().to_string()),
                attempts: Some(attempts),
                quarantine_ms_left,
                outcomes: outcomes(&each),
            }
        }
        redlock::Error::QuorumLost { resource, outcomes: each } => {
            Failure { outcomes: outcomes(&each), ..failure("LOCK_LOST", message, Some(resource)) }
        }
        redlock::Error::Expired { resource } => failure("LOCK_LOST", message, Some(resource)),
        redlock::Error::Config(_) => failure("CONFIG", message, None),
        // The request itself was refused: a ttl over max-ttl, a server
        // listed twice, NOPERM, ... are configuration, not an outage.
        redlock::Error::Rejected { resource, rejection, outcomes: each, .. } => {
            let code = if rejection.is_configuration() { "CONFIG" } else { "REDLOCK" };
            Failure { reason: Some(rejection.kind().to_string()), outcomes: outcomes(&each), ..failure(code, message, Some(resource)) }
        }
        redlock::Error::Server { .. } => failure("REDLOCK", message, None),
    }
}

/// A bad argument, thrown at once (the package throws it as `ConfigError`).
pub fn config_error(message: impl Into<String>) -> Error {
    Error::new(Status::InvalidArg, message.into())
}
