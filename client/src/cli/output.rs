//! Printing: `key: value` lines, tables, JSON. Nothing here panics on a
//! closed pipe: write errors come back as `Failure`s.

use std::io::Write;
use std::time::Duration;

use redlock::{InstanceOutcome, Outcome};
use serde::Serialize;

use super::exit::Failure;

/// Writes `text` to stdout in one go.
pub fn stdout(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// One line on stderr, prefixed `redlock: `; errors writing it are ignored.
/// (Also with `--json`: stdout carries the JSON, stderr the words.)
pub fn warn(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "redlock: {message}");
}

/// One compact JSON document and a newline on stdout.
pub fn json<T: Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string(value).map_err(|e| Failure::general(format!("encoding JSON: {e}")))?;
    stdout(&format!("{text}\n"))
}

/// `key: value` lines.
pub fn pairs(rows: &[(&str, String)]) -> String {
    rows.iter().map(|(k, v)| if v.is_empty() { format!("{k}:\n") } else { format!("{k}: {v}\n") }).collect()
}

/// Milliseconds with microsecond precision, for JSON.
pub fn millis_f64(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  "));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// A value for a text cell: printable, without whitespace that would break
/// the columns.
pub fn cell(s: &str) -> String {
    if s.chars().all(|c| c.is_ascii_graphic() || (!c.is_ascii() && !c.is_control() && !c.is_whitespace())) {
        s.to_string()
    } else {
        format!("{s:?}")
    }
}

/// The operation an outcome answers: a refusal means "held by another
/// owner" to an acquire and "not held by this owner" to a release or an
/// extend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Acquire,
    Release,
    Extend,
}

/// The stable name of one server's outcome for scripts: the library's
/// `Outcome::kind`, with a refusal named for the operation (`held`,
/// `not_held`).
pub fn outcome_kind(outcome: &Outcome, op: Op) -> &'static str {
    match (outcome, op) {
        (Outcome::Refused, Op::Acquire) => "held",
        (Outcome::Refused, _) => "not_held",
        // An error reply by what it says: max_ttl, wrong_type, readonly, ...
        (Outcome::Failed(_), _) => outcome.rejection().map_or("error", |r| r.kind()),
        (other, _) => other.kind(),
    }
}

/// One server's outcome for people, named for the operation.
pub fn outcome_text(o: &InstanceOutcome, op: Op) -> String {
    match (&o.outcome, op) {
        (Outcome::Refused, Op::Acquire) => format!("{} held by another owner", o.server),
        (Outcome::Refused, _) => format!("{} not held by this owner", o.server),
        (Outcome::ModuleMissing, _) => format!("{} LOCK.* unknown (no redislock module)", o.server),
        _ => o.to_string(),
    }
}

/// `a, b, c` of `outcome_text`.
pub fn outcomes_text(outcomes: &[InstanceOutcome], op: Op) -> String {
    outcomes.iter().map(|o| outcome_text(o, op)).collect::<Vec<_>>().join(", ")
}

/// One server's answer, for JSON.
#[derive(Serialize)]
pub struct OutcomeJson {
    pub server: String,
    /// granted, refused, ok, timeout, unreachable, quarantine,
    /// auth_failed, tls_failed, module_missing, error
    pub outcome: &'static str,
    /// The finer, stable name: granted, held, not_held, ok, timeout,
    /// connection_refused, dns_failure, connect_timeout, unreachable,
    /// quarantine, auth_failed, tls_failed, module_missing, duplicate_server, and for
    /// error replies max_ttl, owner_too_long, wrong_type, readonly, error
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine_ms_left: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub latency_ms: f64,
}

impl OutcomeJson {
    pub fn new(o: &InstanceOutcome, op: Op) -> OutcomeJson {
        let (outcome, token, quarantine_ms_left, error) = match &o.outcome {
            Outcome::Granted { token } => ("granted", *token, None, None),
            Outcome::Refused => ("refused", None, None, None),
            Outcome::Done => ("ok", None, None, None),
            Outcome::Timeout => ("timeout", None, None, Some(o.outcome.to_string())),
            Outcome::Unreachable { .. } => ("unreachable", None, None, Some(o.outcome.to_string())),
            Outcome::Quarantine { ms_left } => ("quarantine", None, Some(*ms_left), Some(o.outcome.to_string())),
            Outcome::AuthFailed(_) => ("auth_failed", None, None, Some(o.outcome.to_string())),
            Outcome::TlsFailed(_) => ("tls_failed", None, None, Some(o.outcome.to_string())),
            Outcome::Failed(_) => ("error", None, None, Some(o.outcome.to_string())),
            Outcome::ModuleMissing => ("module_missing", None, None, Some(o.outcome.to_string())),
            Outcome::Duplicate { .. } => ("duplicate_server", None, None, Some(o.outcome.to_string())),
            Outcome::Revoked { token } => ("revoked", Some(*token), None, Some(o.outcome.to_string())),
        };
        OutcomeJson {
            server: o.server.clone(),
            outcome,
            kind: outcome_kind(&o.outcome, op),
            token,
            quarantine_ms_left,
            error,
            latency_ms: millis_f64(o.latency),
        }
    }
}

pub fn outcomes_json(outcomes: &[InstanceOutcome], op: Op) -> Vec<OutcomeJson> {
    outcomes.iter().map(|o| OutcomeJson::new(o, op)).collect()
}

/// Whole seconds left, rounded up: never "0 s" while something is left.
pub fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let t = table(&["A", "LONGER"], &[vec!["xyz".into(), "1".into()], vec!["x".into(), "22".into()]]);
        assert_eq!(t, "A    LONGER\nxyz  1\nx    22\n");
    }

    #[test]
    fn pairs_without_value_have_no_trailing_space() {
        assert_eq!(pairs(&[("token", String::new()), ("owner", "ab".into())]), "token:\nowner: ab\n");
    }

    #[test]
    fn cells_quote_whitespace_and_control_characters() {
        assert_eq!(cell("abc123"), "abc123");
        assert_eq!(cell("a b"), "\"a b\"");
        assert_eq!(cell("a\nb"), "\"a\\nb\"");
    }
}
