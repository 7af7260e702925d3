//! The crate's failures as plain objects the package's JavaScript turns
//! into its error classes (`lib/errors.js`), by the failure's category
//! (`code`). A failed operation resolves its Promise with a `Failure`
//! rather than rejecting it: the object carries the stable `code` and
//! each server's outcome, which an `Error` made by napi could not. Bad
//! arguments throw at once, as `InvalidArg` errors (`config_error`), which
//! the package throws as `ConfigError`; a bare number of time implausible
//! in milliseconds as a RangeError (`thrown_in`).

use napi::{Env, Error, Status};
use napi_derive::napi;
use redlock::hold;
use redlock::InstanceOutcome;

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

impl From<hold::Failure> for Failure {
    fn from(f: hold::Failure) -> Failure {
        Failure {
            code: f.category().code().to_string(),
            message: f.to_string(),
            resource: f.resource().map(str::to_string),
            reason: f.reason().map(str::to_string),
            attempts: f.attempts(),
            quarantine_ms_left: f.quarantine_ms_left().map(|ms| ms as f64),
            outcomes: outcomes(f.outcomes()),
        }
    }
}

/// A bad argument, thrown at once (the package throws it as `ConfigError`).
pub fn config_error(message: impl Into<String>) -> Error {
    Error::new(Status::InvalidArg, message.into())
}

/// A failure of the arguments' checks, thrown at once: its message without
/// the `configuration:` of a client's error.
pub fn thrown(f: hold::Failure) -> Error {
    match f {
        hold::Failure::Redlock(redlock::Error::Config(message)) => config_error(message),
        other => config_error(other.to_string()),
    }
}

/// `thrown`, but a bare number implausible in milliseconds (a ttl of 10:
/// `Failure::WrongUnit`) is a RangeError with code `ERR_OUT_OF_RANGE`,
/// Node's own for a number outside its range, thrown in `env` (the
/// package passes it on as it is).
pub fn thrown_in(env: &Env, f: hold::Failure) -> Error {
    match f {
        hold::Failure::WrongUnit(message) => match env.throw_range_error(&message, Some("ERR_OUT_OF_RANGE")) {
            // Pending: napi-rs leaves the thrown RangeError as it is.
            Ok(()) => Error::new(Status::PendingException, message),
            Err(e) => e,
        },
        other => thrown(other),
    }
}
