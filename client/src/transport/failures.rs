//! A failed request classified: what went wrong, in words that say what
//! to do about it.

use super::*;

/// For `status` and `summary`: whether the server was reached (it replied,
/// if with an error), what went wrong as text, and classified.
pub(super) fn for_status(e: CallError, server: &str) -> (bool, Option<String>, Option<Outcome>) {
    let reached = !matches!(e, Outcome::Timeout | Outcome::Unreachable { .. } | Outcome::TlsFailed(_));
    let text = match &e {
        Outcome::ModuleMissing => format!("LOCK.* unknown: is the redislock module loaded on {server}?"),
        other => other.to_string(),
    };
    (reached, Some(text), Some(e))
}

impl Instance {
    /// Whether `e` is a Sentinel member's master refusing a write because
    /// it was demoted (`READONLY`): a failover, passed by asking the
    /// sentinels again (see `failing_over`).
    pub(super) fn demoted(&self, e: &RedisError) -> bool {
        self.is_sentinel() && e.code() == Some("READONLY")
    }
}

/// `READONLY` from the master the sentinels named: a failover under way,
/// which passes; not the configuration error it is from a listed replica.
pub(super) fn failing_over(e: &RedisError) -> Outcome {
    Outcome::Unreachable {
        cause: UnreachableCause::Io,
        detail: format!("{}: the master the sentinels named was demoted (a failover); asking them again", reply_text(e)),
    }
}

pub(super) fn connect_timeout(after: Duration, tls: bool) -> Outcome {
    // A plain server may never answer a TLS handshake.
    let detail = if tls {
        format!(
            "no TLS connection within {} (the connection, the TLS handshake and the server's identity must fit in it: \
             a busy machine may need a longer connect timeout; a plain port never answers the handshake: use redis:// for it)",
            ms_text(after)
        )
    } else {
        format!("no connection within {}", ms_text(after))
    };
    Outcome::Unreachable { cause: UnreachableCause::ConnectTimeout, detail }
}

fn ms_text(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// A failed connection attempt: refused, DNS, timeout, authentication or
/// another I/O error.
fn classify_connect(e: RedisError) -> Outcome {
    let text = e.to_string();
    if let Some(auth) = auth_failure(&e) {
        return auth;
    }
    if let Some(tls) = tls::failure(&e) {
        return Outcome::TlsFailed(tls);
    }
    let cause = if e.is_connection_refusal() || text.contains("Connection refused") {
        UnreachableCause::ConnectionRefused
    } else if is_dns_failure(&text) {
        UnreachableCause::Dns
    } else if e.is_timeout() {
        UnreachableCause::ConnectTimeout
    } else if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) || e.code().is_some() {
        // An error reply while setting the connection up (e.g. SELECT).
        return Outcome::Failed(text);
    } else {
        UnreachableCause::Io
    };
    Outcome::Unreachable { cause, detail: text }
}

/// The resolver's own words (std's getaddrinfo error, the redis crate's
/// empty lookup), as no error kind tells a DNS failure apart.
fn is_dns_failure(text: &str) -> bool {
    text.contains("failed to lookup address information") || text.contains("No address found for host")
}

/// `NOAUTH`, `WRONGPASS`, `NOPERM`, or a failed `AUTH` while connecting.
fn auth_failure(e: &RedisError) -> Option<Outcome> {
    let auth_code = matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"));
    (e.kind() == redis::ErrorKind::AuthenticationFailed || auth_code).then(|| Outcome::AuthFailed(reply_text(e)))
}

/// `CODE detail`, as the server sent it, for error replies; the client
/// library's text otherwise.
pub(super) fn reply_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// `TRYAGAIN restart quarantine: 57800 ms left` → 57800.
fn quarantine_ms_left(e: &RedisError) -> Option<u64> {
    if e.code() != Some("TRYAGAIN") {
        return None;
    }
    let rest = e.detail()?.trim().strip_prefix("restart quarantine:")?;
    rest.trim().strip_suffix("ms left")?.trim().parse().ok()
}

/// `REVOKED the hold was revoked (token 1795774162761569)` → its token.
fn revoked_token(e: &RedisError) -> Option<i64> {
    if e.code() != Some("REVOKED") {
        return None;
    }
    let rest = e.detail()?.rsplit_once("(token ")?.1;
    rest.trim_end().strip_suffix(')')?.trim().parse().ok()
}

/// A failed request on an established connection.
pub(super) fn classify(e: RedisError) -> Outcome {
    if e.is_timeout() {
        return Outcome::Timeout;
    }
    if let Some(ms_left) = quarantine_ms_left(&e) {
        return Outcome::Quarantine { ms_left };
    }
    if let Some(token) = revoked_token(&e) {
        return Outcome::Revoked { token };
    }
    if let Some(auth) = auth_failure(&e) {
        return auth;
    }
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_unrecoverable_error() {
        // A TLS failure among them (with TLS 1.3 a server refuses a client
        // certificate after the client's side of the handshake is done).
        return classify_connect(e);
    }
    if e.code().is_some() && e.detail().is_some_and(|d| d.to_ascii_lowercase().contains("unknown command")) {
        return Outcome::ModuleMissing;
    }
    Outcome::Failed(reply_text(&e))
}

impl Instance {
    /// A failed connection attempt, classified, with what this instance
    /// adds (see `closed_at_once`). The client library's own connect
    /// timeout says what ours says: its words alone ("timed out") name no
    /// cause, and a request backing off after it repeats them.
    pub(super) fn failure(&self, e: RedisError) -> Outcome {
        if e.is_timeout() {
            return self.noted(connect_timeout(self.connect_timeout, self.tls));
        }
        let closed = e.is_connection_dropped();
        let outcome = classify_connect(e);
        if closed {
            self.closed_at_once(outcome, true)
        } else {
            self.noted(outcome)
        }
    }

    /// A connection closed while connecting (`connecting`) or at its first
    /// command, named for what usually closes it at once: a plain client
    /// at a TLS port, a TLS client at a plain one, a TLS server that wants
    /// a client certificate. With certificate checks off, noted too.
    pub(super) fn closed_at_once(&self, outcome: Outcome, connecting: bool) -> Outcome {
        // A server killed at that moment, or a forwarder whose target is
        // down, closes the connection too: a hint only, and still a server
        // that did not answer.
        let hint = match (self.tls, connecting) {
            (false, _) => "the server closed the connection before answering: is it a TLS port? use rediss:// for it",
            (true, true) => "the server closed the connection during the TLS handshake: is it a plain port? use redis:// for it",
            (true, false) => {
                "the server closed the TLS connection before answering: does it require a client certificate (tls-auth-clients)?"
            }
        };
        let outcome = match outcome {
            Outcome::Unreachable { cause: UnreachableCause::Io, detail } => {
                Outcome::Unreachable { cause: UnreachableCause::Io, detail: format!("{detail}: {hint}") }
            }
            other => other,
        };
        self.noted(outcome)
    }

    /// `outcome`, with the note that certificates go unchecked when they
    /// do: whatever the checks would have caught looks like something else.
    pub(super) fn noted(&self, outcome: Outcome) -> Outcome {
        if !self.insecure {
            return outcome;
        }
        match outcome {
            Outcome::Unreachable { cause, detail } => Outcome::Unreachable { cause, detail: format!("{detail} {}", tls::INSECURE_NOTE) },
            Outcome::TlsFailed(text) => Outcome::TlsFailed(format!("{text} {}", tls::INSECURE_NOTE)),
            Outcome::AuthFailed(text) => Outcome::AuthFailed(format!("{text} {}", tls::INSECURE_NOTE)),
            Outcome::Failed(text) => Outcome::Failed(format!("{text} {}", tls::INSECURE_NOTE)),
            other => other,
        }
    }
}
