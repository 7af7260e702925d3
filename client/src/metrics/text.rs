//! The Prometheus text exposition format (version 0.0.4), written by hand:
//! a few dozen lines, with every series' HELP and TYPE, and no crate whose
//! registry would stand between the quorum's counters and the scrape.

use std::fmt::Write;

use super::{HistogramSnapshot, Snapshot};

/// The `Content-Type` of the text `Snapshot::to_prometheus` renders.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value escaped as the format asks: `\`, `"` and newlines.
pub(super) fn escaped(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The labels of one server's series: its place in the list and its
/// address.
pub(super) fn server_labels(index: usize, address: &str) -> String {
    format!("server=\"{index}\",address=\"{}\"", escaped(address))
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One histogram's buckets, sum and count; `labels` (already escaped,
/// `a="x",b="y"`) go on every line.
fn histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, count) in &h.buckets {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
    let braces = |s: &str| if s.is_empty() { String::new() } else { format!("{{{s}}}") };
    let _ = writeln!(out, "{name}_sum{} {}", braces(labels), h.sum_seconds);
    let _ = writeln!(out, "{name}_count{} {}", braces(labels), h.count);
}

pub(super) fn render(s: &Snapshot) -> String {
    let mut out = String::with_capacity(16 * 1024);
    header(
        &mut out,
        "redlock_acquire_wait_seconds",
        "histogram",
        "Time from the start of an acquisition to its end, by kind and outcome (granted, refused, timed_out, error, cancelled); its _count is the number of acquisitions.",
    );
    for a in &s.acquisitions {
        histogram(&mut out, "redlock_acquire_wait_seconds", &format!("kind=\"{}\",outcome=\"{}\"", a.kind, a.outcome), &a.wait);
    }
    header(
        &mut out,
        "redlock_hold_seconds",
        "histogram",
        "Time a granted lock was held, from its grant to its release or loss (or the end of its lease, dropped unreleased), by kind.",
    );
    for (kind, h) in &s.holds {
        histogram(&mut out, "redlock_hold_seconds", &format!("kind=\"{kind}\""), h);
    }
    header(
        &mut out,
        "redlock_held",
        "gauge",
        "Locks granted to this client and not yet released or lost (one dropped unreleased counts until its lease ends).",
    );
    let _ = writeln!(out, "redlock_held {}", s.held);
    header(&mut out, "redlock_waiting", "gauge", "Acquisitions of this client under way.");
    let _ = writeln!(out, "redlock_waiting {}", s.waiting);
    header(
        &mut out,
        "redlock_extensions_total",
        "counter",
        "Extensions of held locks, by result (ok: a quorum extended it; failed: it did not).",
    );
    let _ = writeln!(out, "redlock_extensions_total{{result=\"ok\"}} {}", s.extensions_ok);
    let _ = writeln!(out, "redlock_extensions_total{{result=\"failed\"}} {}", s.extensions_failed);
    header(
        &mut out,
        "redlock_lost_total",
        "counter",
        "Kept locks (guards, leaderships) lost, by cause: expired (the validity ran out first), refused (a quorum refused the extension), unreachable (too few servers answered it).",
    );
    for (cause, n) in &s.lost {
        let _ = writeln!(out, "redlock_lost_total{{cause=\"{cause}\"}} {n}");
    }
    let server = |i: usize| server_labels(i, s.servers.get(i).map_or("", |x| x.address.as_str()));
    header(
        &mut out,
        "redlock_server_request_seconds",
        "histogram",
        "Round trip of each request to a server, by server (its place in the list) and address.",
    );
    for (i, srv) in s.servers.iter().enumerate() {
        histogram(&mut out, "redlock_server_request_seconds", &server(i), &srv.round_trip);
    }
    header(&mut out, "redlock_server_errors_total", "counter", "Failed requests to a server, by kind (timeout, connection_refused, dns_failure, connect_timeout, unreachable, auth_failed, tls_failed, module_missing, error).");
    for (i, srv) in s.servers.iter().enumerate() {
        for (kind, n) in &srv.errors {
            let _ = writeln!(out, "redlock_server_errors_total{{{},kind=\"{kind}\"}} {n}", server(i));
        }
    }
    header(
        &mut out,
        "redlock_server_identity_refusals_total",
        "counter",
        "Connections to an entry of the server list that led to a server another entry names (one run_id): never counted.",
    );
    for (i, srv) in s.servers.iter().enumerate() {
        let _ = writeln!(out, "redlock_server_identity_refusals_total{{{}}} {}", server(i), srv.identity_refusals);
    }
    header(
        &mut out,
        "redlock_server_quarantines_total",
        "counter",
        "Lock requests a server answered with its restart quarantine (it grants nothing until it ends).",
    );
    for (i, srv) in s.servers.iter().enumerate() {
        let _ = writeln!(out, "redlock_server_quarantines_total{{{}}} {}", server(i), srv.quarantines);
    }
    header(&mut out, "redlock_election_leading", "gauge", "Elections this client leads now (1 while its candidate leads one election).");
    let _ = writeln!(out, "redlock_election_leading {}", s.leading);
    header(&mut out, "redlock_election_term", "gauge", "The highest election term (fencing token) this client won or saw a leader with.");
    let _ = writeln!(out, "redlock_election_term {}", s.term);
    header(&mut out, "redlock_election_leader_changes_total", "counter", "New leaders (new terms or values) this client's observers saw.");
    let _ = writeln!(out, "redlock_election_leader_changes_total {}", s.leader_changes);
    out
}

#[cfg(test)]
mod tests {
    use super::super::{AcquireKind, AcquireOutcome, Metrics, ServerMetrics};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn every_series_has_its_help_and_type_and_counts_what_happened() {
        let server = Arc::new(ServerMetrics::new(0, "127.0.0.1:7001", true));
        server.answered(Duration::from_micros(300));
        let m = Arc::new(Metrics::new(vec![server], true));
        m.waiting(AcquireKind::Exclusive).ended(AcquireOutcome::Granted);
        let text = m.snapshot().to_prometheus();
        assert!(text.contains("redlock_acquire_wait_seconds_count{kind=\"exclusive\",outcome=\"granted\"} 1\n"), "{text}");
        assert!(
            text.contains("redlock_server_request_seconds_bucket{server=\"0\",address=\"127.0.0.1:7001\",le=\"0.0005\"} 1\n"),
            "{text}"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or("");
            let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
            assert!(text.contains(&format!("# TYPE {family} ")) || text.contains(&format!("# TYPE {name} ")), "{line}");
            assert!(text.contains(&format!("# HELP {family} ")) || text.contains(&format!("# HELP {name} ")), "{line}");
        }
    }
}
