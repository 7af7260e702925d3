//! Failures that name their cause: the library's outcomes turned into an
//! exit status, a `kind` for scripts and a message for people.
//!
//! The rule for every command: only servers that answered the lock
//! question (granted, refused, done, in quarantine) count. When fewer than
//! a quorum answered, nothing was decided: `no_quorum` (exit 6), whatever
//! the few that answered said. Otherwise the command's own verdict: held
//! (3), quarantine (7), not released (4), lock lost (5).

use redlock::{Error, InstanceOutcome, NotGranted, Outcome, Rejection};

use super::exit::{self, Failure};
use super::output::{ceil_secs, outcome_kind, outcomes_json, outcomes_text, warn, Op};

/// The kind shared by every server that did not answer (`connection_refused`,
/// `dns_failure`, `timeout`, `auth_failed`, `module_missing`, ...), `mixed`
/// when they differ, `none` when all answered.
pub fn failure_cause(outcomes: &[InstanceOutcome], op: Op) -> &'static str {
    let mut kinds = outcomes.iter().filter(|o| !o.outcome.answered()).map(|o| outcome_kind(&o.outcome, op));
    match kinds.next() {
        None => "none",
        Some(first) if kinds.all(|k| k == first) => first,
        Some(_) => "mixed",
    }
}

/// What to do about each kind of failure present, once per kind.
fn hints(outcomes: &[InstanceOutcome]) -> Vec<String> {
    let servers =
        |pick: fn(&Outcome) -> bool| outcomes.iter().filter(|o| pick(&o.outcome)).map(|o| o.server.as_str()).collect::<Vec<_>>().join(", ");
    let mut hints = Vec::new();
    let any = |pick: fn(&Outcome) -> bool| outcomes.iter().any(|o| pick(&o.outcome));
    let refused = |o: &Outcome| matches!(o, Outcome::Unreachable { cause: redlock::UnreachableCause::ConnectionRefused, .. });
    if any(refused) {
        hints.push(format!(
            "nothing listens at {}: is redis-server running there? (`make redlock-up` starts the five default servers)",
            servers(refused)
        ));
    }
    let dns = |o: &Outcome| matches!(o, Outcome::Unreachable { cause: redlock::UnreachableCause::Dns, .. });
    if any(dns) {
        hints.push(format!("{} does not resolve: check the host names in --servers or REDLOCK_SERVERS", servers(dns)));
    }
    let slow = |o: &Outcome| matches!(o, Outcome::Timeout | Outcome::Unreachable { cause: redlock::UnreachableCause::ConnectTimeout, .. });
    if any(slow) {
        hints.push(format!(
            "{} did not answer in time: down, frozen, overloaded or firewalled? (--request-timeout, --connect-timeout)",
            servers(slow)
        ));
    }
    // Credentials, not rights: a NOPERM reply (a user without a command,
    // e.g. +info) names its own fix, and new credentials would not help.
    let auth = |o: &Outcome| matches!(o, Outcome::AuthFailed(reply) if !reply.starts_with("NOPERM"));
    if any(auth) {
        hints.push(format!(
            "{} refused the credentials: give them in the URL, redis://:PASSWORD@host:port or redis://USER:PASSWORD@host:port",
            servers(auth)
        ));
    }
    let tls = |o: &Outcome| matches!(o, Outcome::TlsFailed(_));
    if any(tls) {
        hints.push(format!(
            "no TLS connection to {}: --cacert names the CA that signed the servers' certificates, --cert and --key this \
             client's certificate for servers with tls-auth-clients; connect by a name the certificate lists; \
             rediss:// for TLS ports, redis:// for plain ones",
            servers(tls)
        ));
    }
    let missing = |o: &Outcome| matches!(o, Outcome::ModuleMissing);
    if any(missing) {
        hints.push(format!(
            "no redislock module on {}: load it there (--loadmodule .../libredislock.so), or use --mode script for plain Redis",
            servers(missing)
        ));
    }
    hints
}

/// `message; hint; hint`.
fn with_hints(message: String, outcomes: &[InstanceOutcome]) -> String {
    let hints = hints(outcomes);
    if hints.is_empty() {
        message
    } else {
        format!("{message}; {}", hints.join("; "))
    }
}

/// Fewer than a quorum answered: `what` (e.g. `lock "r" not acquired`)
/// could not even be decided.
pub fn no_quorum(what: &str, outcomes: &[InstanceOutcome], quorum: usize, op: Op) -> Failure {
    let answered = outcomes.iter().filter(|o| o.outcome.answered()).count();
    let n = outcomes.len();
    let message =
        format!("{what}: no quorum reachable: {answered} of {n} servers answered (quorum {quorum}): {}", outcomes_text(outcomes, op));
    Failure::new(exit::NO_QUORUM, "no_quorum", with_hints(message, outcomes))
        .with("cause", failure_cause(outcomes, op))
        .with("servers", n)
        .with("answered", answered)
        .with("quorum", quorum)
        .with("instances", outcomes_json(outcomes, op))
}

/// A status row as an outcome, for `no_quorum`: its failure, or `Done`
/// for a server that answered.
pub fn as_outcome(server: &str, failure: Option<&Outcome>) -> InstanceOutcome {
    InstanceOutcome {
        server: server.to_string(),
        outcome: failure.cloned().unwrap_or(Outcome::Done),
        latency: std::time::Duration::ZERO,
        connection: None,
    }
}

/// Servers refused the request itself (`Error::Rejected`): a usage or
/// configuration error (exit 2) named by its cause, or a server error no
/// retry fixed (exit 1); never "no quorum reachable".
pub fn rejected(what: &str, rejection: Rejection, outcomes: &[InstanceOutcome], quorum: usize, op: Op) -> Failure {
    let refusing: Vec<InstanceOutcome> = outcomes.iter().filter(|o| o.outcome.rejection().is_some()).cloned().collect();
    let message = format!(
        "{what}: {} ({} of {} servers, quorum {quorum}): {}",
        rejection.describe(),
        refusing.len(),
        outcomes.len(),
        outcomes_text(outcomes, op)
    );
    let code = if rejection.is_configuration() { exit::USAGE } else { exit::FAILURE };
    Failure::new(code, rejection.kind(), with_hints(message, outcomes))
        .with("servers", outcomes.len())
        .with("quorum", quorum)
        .with("refused", refusing.len())
        .with("cause", rejection.kind())
        .with("instances", outcomes_json(outcomes, op))
}

/// An acquisition that failed (acquire; `run` adjusts it with `for_run`).
pub fn not_acquired(e: &Error, quorum: usize) -> Failure {
    if let Error::Rejected { resource, rejection, outcomes, .. } = e {
        return rejected(&format!("lock {resource:?} not acquired"), *rejection, outcomes, quorum, Op::Acquire).with("resource", resource);
    }
    let Error::NotAcquired { resource, attempts, why, outcomes } = e else {
        return other(e);
    };
    if let NotGranted::Rejected { rejection, .. } = why {
        return rejected(&format!("lock {resource:?} not acquired"), *rejection, outcomes, quorum, Op::Acquire)
            .with("resource", resource)
            .with("attempts", attempts);
    }
    let n = outcomes.len();
    let list = outcomes_text(outcomes, Op::Acquire);
    let failure = match why {
        NotGranted::NoQuorum => no_quorum(&format!("lock {resource:?} not acquired"), outcomes, quorum, Op::Acquire),
        NotGranted::Held => {
            let held = outcomes.iter().filter(|o| o.outcome == Outcome::Refused).count();
            Failure::new(
                exit::NOT_ACQUIRED,
                "held",
                format!(
                    "lock {resource:?} not acquired: held by another owner (refused by {held} of {n} servers, quorum {quorum}; \
                     {attempts} attempt(s)): {list}"
                ),
            )
        }
        NotGranted::Quarantine { ms_left, instances } => {
            let secs = ceil_secs(*ms_left);
            Failure::new(
                exit::QUARANTINE,
                "quarantine",
                format!(
                    "lock {resource:?} not acquired: {instances} of {n} servers are in restart quarantine for another {secs} s \
                     (a restarted server grants nothing until every lease it may have given out has run out); \
                     retry then, or wait for it with --wait {}s: {list}",
                    secs + 2
                ),
            )
            .with("quarantine_ms_left", ms_left)
        }
        NotGranted::NoValidity | NotGranted::Rejected { .. } => Failure::new(
            exit::NOT_ACQUIRED,
            "no_validity",
            format!(
                "lock {resource:?} not acquired: a quorum granted it, but too late: no validity was left after the \
                 round trips and the clock drift allowance (a longer --ttl helps): {list}"
            ),
        ),
    };
    let mut failure = failure;
    if !matches!(why, NotGranted::NoQuorum) {
        failure.message = with_hints(failure.message, outcomes);
    }
    failure
        .with("resource", resource)
        .with("attempts", attempts)
        .with("quorum", quorum)
        .with("servers", n)
        .with("cause", failure_cause(outcomes, Op::Acquire))
        .with("instances", outcomes_json(outcomes, Op::Acquire))
}

/// An extension that reached no quorum.
/// An owner (or resource) for a message: in full up to 80 bytes, else
/// its start and its length, so a huge argument is not echoed back whole.
pub fn shown(value: &str) -> String {
    const MAX: usize = 80;
    if value.len() <= MAX {
        return format!("{value:?}");
    }
    let mut end = MAX;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &value[..end], value.len())
}

pub fn not_extended(e: &Error, quorum: usize, owner: &str) -> Failure {
    let owner_shown = shown(owner);
    if let Error::Rejected { resource, rejection, outcomes, .. } = e {
        return rejected(
            &format!("lock {resource:?} of owner {owner_shown} not extended (its lease is as it was)"),
            *rejection,
            outcomes,
            quorum,
            Op::Extend,
        )
        .with("resource", resource)
        .with("owner", owner);
    }
    let Error::QuorumLost { resource, outcomes } = e else {
        return match e {
            Error::Expired { resource } => Failure::new(exit::QUORUM_LOST, "lock_lost", e.to_string()).with("resource", resource),
            other_error => other(other_error),
        };
    };
    let answered = outcomes.iter().filter(|o| o.outcome.answered()).count();
    let failure = if answered < quorum {
        no_quorum(&format!("lock {resource:?} of owner {owner_shown} not extended (treat it as lost)"), outcomes, quorum, Op::Extend)
    } else {
        let extended = outcomes.iter().filter(|o| o.outcome == Outcome::Done).count();
        Failure::new(
            exit::QUORUM_LOST,
            "lock_lost",
            format!(
                "lock {resource:?} of owner {owner_shown} not extended: extended on {extended} of {} servers, quorum {quorum}; \
                 the lock is lost (expired, released or never held): {}",
                outcomes.len(),
                outcomes_text(outcomes, Op::Extend)
            ),
        )
        .with("extended", extended)
        .with("servers", outcomes.len())
        .with("quorum", quorum)
        .with("cause", failure_cause(outcomes, Op::Extend))
        .with("instances", outcomes_json(outcomes, Op::Extend))
    };
    failure.with("resource", resource).with("owner", owner)
}

/// A release that reached fewer than a quorum.
pub fn not_released(resource: &str, owner: &str, released: usize, outcomes: &[InstanceOutcome], quorum: usize) -> Failure {
    let answered = outcomes.iter().filter(|o| o.outcome.answered()).count();
    let owner_shown = shown(owner);
    let what = format!("lock {resource:?} of owner {owner_shown} not released");
    let failure = match redlock::quorum::rejections(outcomes) {
        Some((rejection, n)) if released < quorum && released + n >= quorum => rejected(&what, rejection, outcomes, quorum, Op::Release),
        _ if answered < quorum => no_quorum(&what, outcomes, quorum, Op::Release),
        _ => Failure::new(
            exit::NOT_RELEASED,
            "not_released",
            format!(
                "lock {resource:?} of owner {owner_shown} released on {released} of {} servers, quorum {quorum}: {}",
                outcomes.len(),
                outcomes_text(outcomes, Op::Release)
            ),
        )
        .with("servers", outcomes.len())
        .with("quorum", quorum)
        .with("cause", failure_cause(outcomes, Op::Release))
        .with("instances", outcomes_json(outcomes, Op::Release)),
    };
    failure.with("resource", resource).with("owner", owner).with("released", released)
}

/// Errors that are not about a quorum: configuration (usage) and the rest.
pub fn other(e: &Error) -> Failure {
    match e {
        Error::Config(_) => Failure::usage(e.to_string()),
        _ => Failure::general(e.to_string()),
    }
}

/// For `run`: the lock was not taken, so the command did not run (exit 75
/// whatever the reason but a usage or configuration error, which stays 2;
/// the kind still tells it).
pub fn for_run(mut failure: Failure, command: &str) -> Failure {
    // A usage or configuration error stays one (exit 2): no retry helps.
    if failure.code != exit::USAGE {
        failure.code = exit::RUN_NOT_LOCKED;
    }
    failure.message = format!("{}; {command:?} not run", failure.message);
    failure
}

/// A lock was taken, but some servers are set up wrong (no module, bad
/// credentials): worth a line on stderr, as they count for nothing.
pub fn warn_misconfigured(outcomes: &[InstanceOutcome], quorum: usize) {
    let wrong: Vec<InstanceOutcome> = outcomes
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::ModuleMissing | Outcome::AuthFailed(_) | Outcome::TlsFailed(_)))
        .cloned()
        .collect();
    if wrong.is_empty() {
        return;
    }
    let granted = outcomes.iter().filter(|o| matches!(o.outcome, Outcome::Granted { .. })).count();
    warn(&with_hints(
        format!(
            "warning: granted by {granted} of {} servers (quorum {quorum}); {} cannot take part: {}",
            outcomes.len(),
            wrong.len(),
            outcomes_text(&wrong, Op::Acquire)
        ),
        &wrong,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlock::UnreachableCause;
    use std::time::Duration;

    fn o(server: &str, outcome: Outcome) -> InstanceOutcome {
        InstanceOutcome { server: server.into(), outcome, latency: Duration::from_millis(1), connection: None }
    }

    fn refused_conn() -> Outcome {
        Outcome::Unreachable { cause: UnreachableCause::ConnectionRefused, detail: "Connection refused (os error 111)".into() }
    }

    #[test]
    fn two_held_and_three_unreachable_is_no_quorum_not_held() {
        let outcomes = vec![
            o("a", Outcome::Refused),
            o("b", Outcome::Refused),
            o("c", refused_conn()),
            o("d", refused_conn()),
            o("e", Outcome::Timeout),
        ];
        let why = redlock::quorum::not_granted(&outcomes, 3);
        let e = Error::NotAcquired { resource: "r".into(), attempts: 4, why, outcomes };
        let f = not_acquired(&e, 3);
        assert_eq!((f.code, f.kind), (exit::NO_QUORUM, "no_quorum"));
        assert!(f.message.contains("2 of 5 servers answered (quorum 3)"), "{}", f.message);
        assert!(f.message.contains("c connection refused"), "{}", f.message);
        assert!(f.message.contains("a held by another owner"), "{}", f.message);
        assert!(f.message.contains("nothing listens at c, d"), "{}", f.message);
        assert_eq!(f.details["cause"], "mixed");
    }

    #[test]
    fn a_quarantine_names_the_time_and_suggests_wait() {
        let outcomes: Vec<_> = (0..5).map(|i| o(&format!("s{i}"), Outcome::Quarantine { ms_left: 57_800 })).collect();
        let why = redlock::quorum::not_granted(&outcomes, 3);
        let f = not_acquired(&Error::NotAcquired { resource: "orders:42".into(), attempts: 1, why, outcomes }, 3);
        assert_eq!((f.code, f.kind), (exit::QUARANTINE, "quarantine"));
        assert!(f.message.contains("5 of 5 servers are in restart quarantine for another 58 s"), "{}", f.message);
        assert!(f.message.contains("--wait 60s"), "{}", f.message);
        assert_eq!(f.details["quarantine_ms_left"], 57_800);
        assert_eq!(f.details["instances"][0]["kind"], "quarantine");
    }

    #[test]
    fn a_missing_acl_right_gets_no_hint_about_credentials() {
        let noperm = "NOPERM this user has no permissions to run the 'info' command; the client tells servers apart \
                      by the run_id of INFO server: allow it, e.g. ACL SETUSER <user> +info";
        let rights = vec![o("a", Outcome::AuthFailed(noperm.into())), o("b", Outcome::AuthFailed(noperm.into()))];
        assert_eq!(hints(&rights), Vec::<String>::new());
        assert!(rights[0].to_string().starts_with("a not permitted by the ACL (NOPERM"), "{}", rights[0]);
        let mixed = vec![o("a", Outcome::AuthFailed("NOAUTH Authentication required.".into())), rights[1].clone()];
        let hints = hints(&mixed);
        assert_eq!(hints.len(), 1, "{hints:?}");
        assert!(hints[0].starts_with("a refused the credentials: give them in the URL"), "{hints:?}");
        assert!(mixed[0].to_string().starts_with("a authentication failed (NOAUTH"), "{}", mixed[0]);
    }

    #[test]
    fn the_cause_is_shared_or_mixed() {
        let all = vec![o("a", refused_conn()), o("b", refused_conn()), o("c", Outcome::Done)];
        assert_eq!(failure_cause(&all, Op::Release), "connection_refused");
        let mixed = vec![o("a", refused_conn()), o("b", Outcome::ModuleMissing)];
        assert_eq!(failure_cause(&mixed, Op::Release), "mixed");
        assert_eq!(failure_cause(&[o("a", Outcome::Done)], Op::Release), "none");
    }
}
