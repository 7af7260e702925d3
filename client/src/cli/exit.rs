//! Exit statuses (also listed in `redlock --help`) and the failure that
//! main reports: one line on stderr, and with `--json` one error object on
//! stdout.

use serde::Serialize;
use serde_json::{Map, Value};

pub const OK: i32 = 0;
/// Anything else: writing the output, starting the runtime, a server
/// error no retry can fix.
pub const FAILURE: i32 = 1;
/// Bad arguments or configuration (clap's own usage errors are 2 too), and
/// requests the servers refused as such (max-ttl, WRONGTYPE, NOPERM, ...).
pub const USAGE: i32 = 2;
/// acquire: not acquired, held by another owner (or granted too late).
pub const NOT_ACQUIRED: i32 = 3;
/// release: the servers answered, and fewer than a quorum released.
pub const NOT_RELEASED: i32 = 4;
/// extend: the servers answered, and fewer than a quorum extended.
pub const QUORUM_LOST: i32 = 5;
/// Any command: fewer than a quorum of servers answered at all
/// (unreachable, timeouts): nothing could be decided.
pub const NO_QUORUM: i32 = 6;
/// acquire: not acquired because servers are in their restart quarantine
/// (temporary: `--wait` outlasts it).
pub const QUARANTINE: i32 = 7;
/// run: the lock was not taken; the command did not run (EX_TEMPFAIL).
pub const RUN_NOT_LOCKED: i32 = 75;
/// run: the lock was lost while the command ran (stopped or not).
pub const RUN_LOCK_LOST: i32 = 76;
/// run: the command exists but could not be executed (as in sh).
pub const CANNOT_EXECUTE: i32 = 126;
/// run: the command was not found (as in sh).
pub const NOT_FOUND: i32 = 127;

/// What went wrong: the exit status, a stable `kind` for scripts, one
/// line for people, and the details of the JSON error object.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    /// `usage`, `error`, `held`, `no_validity`, `quarantine`, `no_quorum`,
    /// `not_released`, `lock_lost`, `command_not_found`, `cannot_execute`,
    /// `interrupted`, `leadership_lost` (elect), `no_leader` (leader).
    pub kind: &'static str,
    pub message: String,
    /// More fields of the JSON error object (resource, quorum, instances...).
    pub details: Map<String, Value>,
}

impl Failure {
    pub fn new(code: i32, kind: &'static str, message: impl Into<String>) -> Failure {
        Failure { code, kind, message: message.into(), details: Map::new() }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, "usage", message)
    }

    pub fn general(message: impl Into<String>) -> Failure {
        Failure::new(FAILURE, "error", message)
    }

    /// Adds a field to the JSON error object (a value that does not
    /// serialize is left out).
    pub fn with(mut self, key: &str, value: impl Serialize) -> Failure {
        if let Ok(v) = serde_json::to_value(value) {
            self.details.insert(key.to_string(), v);
        }
        self
    }

    /// `{"error": {"kind", "message", "exit_code", ...details}}`.
    pub fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("kind".into(), Value::from(self.kind));
        error.insert("message".into(), Value::from(self.message.as_str()));
        error.insert("exit_code".into(), Value::from(self.code));
        for (k, v) in &self.details {
            error.insert(k.clone(), v.clone());
        }
        let mut top = Map::new();
        top.insert("error".into(), Value::Object(error));
        Value::Object(top)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::general(format!("writing output: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_error_object_has_kind_message_exit_code_and_details() {
        let f = Failure::new(NO_QUORUM, "no_quorum", "nobody home").with("quorum", 3).with("instances", vec!["a", "b"]);
        let v = f.to_json();
        assert_eq!(v["error"]["kind"], "no_quorum");
        assert_eq!(v["error"]["message"], "nobody home");
        assert_eq!(v["error"]["exit_code"], 6);
        assert_eq!(v["error"]["quorum"], 3);
        assert_eq!(v["error"]["instances"][1], "b");
    }
}
