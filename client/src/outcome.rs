//! What servers answered, as data: each instance's outcome of a request,
//! why a server could not be reached, and the rejections (error replies no
//! retry fixes). The quorum arithmetic and the errors use these without
//! knowing how requests travel (`transport`).

use std::fmt;
use std::time::Duration;

/// What one server did with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Granted (module mode carries the token).
    Granted { token: Option<i64> },
    /// Held by another owner (acquire), or not held by us (release, extend).
    Refused,
    /// Released or extended.
    Done,
    /// Connected, but no reply within the request timeout (the server may
    /// still execute the request).
    Timeout,
    /// No connection: `cause` says why, `detail` is the client library's text.
    Unreachable { cause: UnreachableCause, detail: String },
    /// The instance is in its restart quarantine (`TRYAGAIN restart
    /// quarantine`): it grants nothing for `ms_left` more. A temporary
    /// refusal, never a grant.
    Quarantine { ms_left: u64 },
    /// The server refused our credentials or permissions (`NOAUTH`,
    /// `WRONGPASS`, `NOPERM`, a failed `AUTH` while connecting).
    AuthFailed(String),
    /// No TLS connection: a certificate refused (an unknown CA, expired,
    /// for another name), a client certificate the server requires or
    /// refuses, or a TLS client at a plain port. What it says is the cause
    /// and the fix.
    TlsFailed(String),
    /// Any other error reply.
    Failed(String),
    /// The server does not know the module's commands (`unknown command`).
    ModuleMissing,
    /// The hold was taken away by `LOCK.REVOKE`, which issued `token` (an
    /// extension's answer, `REVOKED ...`): held no more, as `Refused`, and
    /// told apart so the holder hears why.
    Revoked { token: i64 },
    /// This entry of the server list is the same server as the entry
    /// `of` (one `run_id`): it never counts toward a quorum, and nothing
    /// is sent to it.
    Duplicate { of: String, run_id: String },
}

/// An error reply that refuses the request itself, whatever the state of
/// the lock: asking again the same way cannot help. (Temporary refusals,
/// `LOADING`, `TRYAGAIN`, a busy queue, are not rejections.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The ttl is over the server's `redislock.max-ttl`.
    MaxTtl,
    /// The owner is longer than the server's `redislock.max-owner-len`.
    OwnerTooLong,
    /// The key holds another type (`WRONGTYPE`) or another kind of lock.
    WrongType,
    /// Credentials or ACL permissions (`NOAUTH`, `WRONGPASS`, `NOPERM`).
    Permission,
    /// No TLS connection: certificates, CA, client certificate or port
    /// (`Outcome::TlsFailed`).
    Tls,
    /// A read-only replica (`READONLY`): the server list must name masters.
    ReadOnly,
    /// No redislock module on the server.
    ModuleMissing,
    /// One server listed twice (`Outcome::Duplicate`).
    DuplicateServer,
    /// Any other error reply.
    Other,
}

impl Rejection {
    /// A stable name for scripts: `max_ttl`, `owner_too_long`,
    /// `wrong_type`, `auth_failed`, `tls_failed`, `readonly`,
    /// `module_missing`, `duplicate_server`, `error`.
    pub fn kind(self) -> &'static str {
        match self {
            Rejection::MaxTtl => "max_ttl",
            Rejection::OwnerTooLong => "owner_too_long",
            Rejection::WrongType => "wrong_type",
            Rejection::Permission => "auth_failed",
            Rejection::Tls => "tls_failed",
            Rejection::ReadOnly => "readonly",
            Rejection::ModuleMissing => "module_missing",
            Rejection::DuplicateServer => "duplicate_server",
            Rejection::Other => "error",
        }
    }

    /// Whether the request or the configuration must change (a usage or
    /// configuration error), rather than a server being in trouble.
    pub fn is_configuration(self) -> bool {
        self != Rejection::Other
    }

    /// What it means, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Rejection::MaxTtl => "the ttl exceeds the servers' redislock.max-ttl (ask for less, or raise the setting)",
            Rejection::OwnerTooLong => "the owner is longer than the servers' redislock.max-owner-len",
            Rejection::WrongType => {
                "the key holds another type or another kind of lock (a mutex, read-write lock or semaphore of another limit)"
            }
            Rejection::Permission => "the servers refused the credentials or the ACL permissions",
            Rejection::Tls => "no TLS connection could be made (see each server's cause: certificates, CA, client certificate or port)",
            Rejection::ReadOnly => "a server is a read-only replica: list masters",
            Rejection::ModuleMissing => "the redislock module is not loaded on the servers",
            Rejection::DuplicateServer => "one server is listed more than once",
            Rejection::Other => "the servers answered with an error",
        }
    }
}

/// Why a server could not be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnreachableCause {
    /// Nothing listens there (`ECONNREFUSED`).
    ConnectionRefused,
    /// The host name does not resolve.
    Dns,
    /// No connection within the connect (or request) timeout.
    ConnectTimeout,
    /// Any other I/O error (reset, broken pipe, no route, ...).
    Io,
}

impl UnreachableCause {
    /// A stable name for scripts: `connection_refused`, `dns_failure`,
    /// `connect_timeout`, `unreachable`.
    pub fn kind(self) -> &'static str {
        match self {
            UnreachableCause::ConnectionRefused => "connection_refused",
            UnreachableCause::Dns => "dns_failure",
            UnreachableCause::ConnectTimeout => "connect_timeout",
            UnreachableCause::Io => "unreachable",
        }
    }
}

impl Outcome {
    /// A stable, machine-readable name of the outcome: `granted`,
    /// `refused`, `ok`, `timeout`, `connection_refused`, `dns_failure`,
    /// `connect_timeout`, `unreachable`, `quarantine`, `auth_failed`,
    /// `tls_failed`, `module_missing`, `duplicate_server`, `revoked`, `error`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Granted { .. } => "granted",
            Outcome::Refused => "refused",
            Outcome::Done => "ok",
            Outcome::Timeout => "timeout",
            Outcome::Unreachable { cause, .. } => cause.kind(),
            Outcome::Quarantine { .. } => "quarantine",
            Outcome::AuthFailed(_) => "auth_failed",
            Outcome::TlsFailed(_) => "tls_failed",
            Outcome::Failed(_) => "error",
            Outcome::ModuleMissing => "module_missing",
            Outcome::Duplicate { .. } => "duplicate_server",
            Outcome::Revoked { .. } => "revoked",
        }
    }

    /// The rejection this outcome is, if it is one.
    pub fn rejection(&self) -> Option<Rejection> {
        match self {
            Outcome::AuthFailed(_) => Some(Rejection::Permission),
            Outcome::TlsFailed(_) => Some(Rejection::Tls),
            Outcome::ModuleMissing => Some(Rejection::ModuleMissing),
            Outcome::Duplicate { .. } => Some(Rejection::DuplicateServer),
            Outcome::Failed(reply) => rejection_of(reply),
            _ => None,
        }
    }

    /// Whether the server answered the lock question itself: granted,
    /// refused, done, revoked, or in quarantine. Timeouts, unreachable
    /// servers and error replies (auth, module missing, ...) did not.
    pub fn answered(&self) -> bool {
        matches!(self, Outcome::Granted { .. } | Outcome::Refused | Outcome::Done | Outcome::Quarantine { .. } | Outcome::Revoked { .. })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Granted { token: Some(t) } => write!(f, "granted (token {t})"),
            Outcome::Granted { token: None } => write!(f, "granted"),
            Outcome::Refused => write!(f, "refused"),
            Outcome::Done => write!(f, "ok"),
            Outcome::Timeout => write!(f, "timeout (no reply within the request timeout)"),
            Outcome::Unreachable { cause: UnreachableCause::ConnectionRefused, .. } => write!(f, "connection refused"),
            Outcome::Unreachable { cause: UnreachableCause::Dns, detail } => write!(f, "DNS lookup failed ({detail})"),
            Outcome::Unreachable { cause: UnreachableCause::ConnectTimeout, detail } => write!(f, "connect timeout ({detail})"),
            Outcome::Unreachable { cause: UnreachableCause::Io, detail } => write!(f, "unreachable ({detail})"),
            Outcome::Quarantine { ms_left } => write!(f, "in restart quarantine, {} left", seconds_left(*ms_left)),
            // NOPERM is about the user's rights, not its credentials.
            Outcome::AuthFailed(e) if e.starts_with("NOPERM") => write!(f, "not permitted by the ACL ({e})"),
            Outcome::AuthFailed(e) => write!(f, "authentication failed ({e})"),
            Outcome::TlsFailed(e) => write!(f, "TLS failed: {e}"),
            Outcome::Failed(e) => write!(f, "error ({e})"),
            Outcome::ModuleMissing => write!(f, "LOCK.* unknown: is the redislock module loaded there?"),
            Outcome::Duplicate { of, run_id } => {
                write!(f, "the same server as {of} (run_id {run_id}): listed twice, counted once, never used")
            }
            Outcome::Revoked { token } => write!(f, "revoked (LOCK.REVOKE, token {token})"),
        }
    }
}

/// `57.8 s`, `850 ms`: a remaining time for messages.
pub fn seconds_left(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// The rejection an error reply is, `None` for a temporary one.
fn rejection_of(reply: &str) -> Option<Rejection> {
    let code = reply.split_whitespace().next().unwrap_or("");
    // NOREPLICAS: `min-replicas-to-write` unmet, or a write fewer replicas
    // acknowledged than a member waits for (`wait_replicas`).
    let temporary = ["LOADING", "TRYAGAIN", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "MOVED", "ASK", "NOREPLICAS"];
    if temporary.contains(&code) || reply.contains("queue busy") || reply.contains("max-token-lead") {
        return None;
    }
    Some(if reply.contains("redislock.max-ttl") {
        Rejection::MaxTtl
    } else if reply.contains("redislock.max-owner-len") {
        Rejection::OwnerTooLong
    } else if code == "WRONGTYPE" || reply.contains("wrong lock kind") {
        Rejection::WrongType
    } else if code == "READONLY" {
        Rejection::ReadOnly
    } else if matches!(code, "NOPERM" | "NOAUTH" | "WRONGPASS") {
        Rejection::Permission
    } else {
        Rejection::Other
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceOutcome {
    pub server: String,
    pub outcome: Outcome,
    pub latency: Duration,
    /// A grant bound to the connection that asked for it
    /// (`Settings::release_on_disconnect`): that connection's id on the
    /// server (`CLIENT ID`).
    pub connection: Option<u64>,
}

impl fmt::Display for InstanceOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.server, self.outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noreplicas_is_a_temporary_failure_not_a_rejection() {
        // The server's own (`min-replicas-to-write`) and a write fewer
        // replicas acknowledged than a member waits for: a retry may pass.
        for text in ["NOREPLICAS Not enough good replicas to write.", "NOREPLICAS granted here, but 0 of 1 replica(s) acknowledged it"] {
            assert_eq!(Outcome::Failed(text.into()).rejection(), None, "{text}");
        }
        assert_eq!(Outcome::Failed("READONLY You can't write against a read only replica.".into()).rejection(), Some(Rejection::ReadOnly));
    }
}
