//! The module's own numbers on each server (`INFO redislock`), read
//! through the handle's connections when metrics are scraped
//! (`Redlock::server_info`) and rendered beside the client's: the counts
//! of grants, waits, handoffs, quarantine and the rest, every server
//! labelled, without an exporter of their own.

use std::fmt::Write;

/// One server's `INFO redislock`, as read at a scrape.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInfo {
    /// Its place in the server list, from 0 (the `server` label).
    pub index: usize,
    /// The entry as errors name it, never with credentials.
    pub address: String,
    /// What each node answered (one, but a Cluster's every master); `None`
    /// when the server did not answer, or answered without the module.
    pub nodes: Option<Vec<NodeInfo>>,
}

/// One node's fields: `node` names it within a Cluster (`None` for a
/// server of its own).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub node: Option<String>,
    /// Each numeric `redislock_*` field, as Prometheus takes it: a field
    /// in milliseconds (`ms` in its name) as seconds, named `_seconds`
    /// (`quarantine_ms_left` as `quarantine_left_seconds`); a
    /// distribution's count (`_count`, which Prometheus keeps for
    /// histograms) named `_total`, a counter.
    pub fields: Vec<(String, f64)>,
}

/// The numeric `redislock_*` fields of an INFO reply (`name:value`
/// lines); a field whose name is no valid metric name is left out.
pub fn fields(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.trim_end().split_once(':')?;
            let valid = name.starts_with("redislock_") && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            let value: f64 = value.parse().ok().filter(|v: &f64| v.is_finite())?;
            if !valid {
                return None;
            }
            let in_ms = name.split('_').any(|word| word == "ms");
            Some(if in_ms {
                let stem: Vec<&str> = name.split('_').filter(|word| *word != "ms").collect();
                (format!("{}_seconds", stem.join("_")), value / 1000.0)
            } else if let Some(stem) = name.strip_suffix("_count") {
                (format!("{stem}_total"), value)
            } else {
                (name.to_string(), value)
            })
        })
        .collect()
}

/// `infos` in the text format: `redlock_server_info_up` for every server,
/// then each field under its own name, a gauge (INFO does not say which
/// are counters: `rate()` takes either) but for a distribution's count
/// (`_total`), labelled `server`, `address` and, within a Cluster, `node`.
pub fn render(infos: &[ServerInfo]) -> String {
    let mut out = String::with_capacity(infos.len() * 4096);
    if infos.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "# HELP redlock_server_info_up Whether the server answered INFO redislock at this scrape (1) or not (0: unreachable, or no module).\n# TYPE redlock_server_info_up gauge"
    );
    for info in infos {
        let _ = writeln!(out, "redlock_server_info_up{{{}}} {}", labels(info, None), u8::from(info.nodes.is_some()));
    }
    // Each field's samples together, in the order the servers give them.
    let mut names: Vec<&str> = Vec::new();
    for node in infos.iter().filter_map(|i| i.nodes.as_ref()).flatten() {
        for (name, _) in &node.fields {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    for name in names {
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(
            out,
            "# HELP {name} The module's INFO redislock field of that name on each server (docs/operations.md).\n# TYPE {name} {kind}"
        );
        for info in infos {
            for node in info.nodes.iter().flatten() {
                for (_, value) in node.fields.iter().filter(|(n, _)| n == name) {
                    let _ = writeln!(out, "{name}{{{}}} {value}", labels(info, node.node.as_deref()));
                }
            }
        }
    }
    out
}

fn labels(info: &ServerInfo, node: Option<&str>) -> String {
    let mut out = super::text::server_labels(info.index, &info.address);
    if let Some(node) = node {
        let _ = write!(out, ",node=\"{}\"", super::text::escaped(node));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_module_fields_are_taken_and_milliseconds_become_seconds() {
        let text = "# redislock\r\nredislock_acquire_granted_new:42\r\nredislock_oldest_wait_ms:1520\r\nredislock_hold_shared_count:7\r\nredislock_quarantine_ms_left:250\r\nredislock_version:x\r\nused_memory:9\r\nredislock_Bad:1\r\nredislock_inf:inf\r\n";
        let got = fields(text);
        let want = [
            ("redislock_acquire_granted_new", 42.0),
            ("redislock_oldest_wait_seconds", 1.52),
            ("redislock_hold_shared_total", 7.0),
            ("redislock_quarantine_left_seconds", 0.25),
        ];
        assert_eq!(got, want.map(|(n, v)| (n.to_string(), v)).to_vec());
    }

    #[test]
    fn every_server_is_labelled_and_one_that_did_not_answer_is_down() {
        let node = |n: Option<&str>, v: f64| NodeInfo { node: n.map(str::to_string), fields: vec![("redislock_locks".to_string(), v)] };
        let infos = [
            ServerInfo { index: 0, address: "a:1".into(), nodes: Some(vec![node(None, 3.0)]) },
            ServerInfo { index: 1, address: "b:\"2".into(), nodes: None },
            ServerInfo { index: 2, address: "cluster:c:3".into(), nodes: Some(vec![node(Some("c:3"), 1.0), node(Some("d:4"), 2.0)]) },
        ];
        let text = render(&infos);
        for line in [
            "redlock_server_info_up{server=\"0\",address=\"a:1\"} 1",
            "redlock_server_info_up{server=\"1\",address=\"b:\\\"2\"} 0",
            "# TYPE redislock_locks gauge",
            "redislock_locks{server=\"0\",address=\"a:1\"} 3",
            "redislock_locks{server=\"2\",address=\"cluster:c:3\",node=\"d:4\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert_eq!(text.matches("# HELP redislock_locks ").count(), 1, "one family, every server's samples in it");
        assert_eq!(render(&[]), "", "no servers, nothing (script mode)");
    }
}
