//! The server list: one server per entry, each listed once.

use super::*;

/// The servers one entry of a server list names when it names several: a
/// list written as one string, its URLs joined by commas (outside a
/// `redis+cluster://` seed list or a `redis+sentinel://` list of
/// sentinels), spaces or semicolons. `None` for an entry
/// that names one server (a cluster's seed list is one), and for anything
/// else the URL check should judge: a piece after a separator counts as
/// another server only if it has a scheme (`redis://...`) or is a bare
/// `host:port`, so a password with a space or a semicolon stays one URL.
pub fn servers_in_one(entry: &str) -> Option<Vec<String>> {
    let mut servers: Vec<String> = Vec::new();
    let mut after_comma = false;
    for piece in entry.split_inclusive(|c: char| c == ',' || c == ';' || c.is_whitespace()) {
        let sep_comma = after_comma;
        after_comma = piece.ends_with(',');
        let piece = piece.trim_end_matches(|c: char| c == ',' || c == ';' || c.is_whitespace());
        if piece.is_empty() {
            // A run of separators: a comma anywhere in it is a comma.
            after_comma |= sep_comma;
            continue;
        }
        let seed = sep_comma && servers.last().is_some_and(|last| crate::transport::takes_more_hosts(last));
        if servers.is_empty() || piece.contains("://") || (!seed && is_host_port(piece)) {
            servers.push(piece.to_string());
        } else if let Some(cluster) = servers.last_mut().filter(|_| seed) {
            // One more seed node of the cluster before it.
            cluster.push(',');
            cluster.push_str(piece);
        } else {
            return None;
        }
    }
    (servers.len() > 1).then_some(servers)
}

/// `host:port` or `[v6]:port`, nothing more (no credentials, no path).
fn is_host_port(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    let host_ok = match host.strip_prefix('[') {
        Some(v6) => v6.strip_suffix(']').is_some_and(|a| !a.is_empty() && a.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')),
        None => !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_'),
    };
    host_ok && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses a server list whose entries spell one server twice: the same
/// `host:port` (the same URL, another db number of it, `host:port` and
/// `redis://host:port`, a cluster seed listed as a server too).
pub(super) fn spelled_once<S: AsRef<str>>(urls: &[S], instances: &[Instance]) -> Result<(), Error> {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, instance) in instances.iter().enumerate() {
        for address in &instance.addresses {
            match seen.get(address.as_str()) {
                Some(&j) if j != i => {
                    let (first, second) = (urls.get(j).map_or("", |u| u.as_ref()), urls.get(i).map_or("", |u| u.as_ref()));
                    return Err(Error::Config(format!(
                        "{first:?} and {second:?} are the same server ({address}): list each server once; \
                         a server listed twice would count twice toward the quorum"
                    )));
                }
                _ => {
                    seen.insert(address, i);
                }
            }
        }
    }
    Ok(())
}

/// `Error::Config` when a round found an entry to repeat another server.
pub(super) fn repeated_server(outcomes: &[InstanceOutcome], insecure: bool) -> Option<Error> {
    outcomes.iter().find_map(|o| match &o.outcome {
        Outcome::Duplicate { of, run_id } => Some(duplicate_server(&o.server, of, run_id, insecure)),
        _ => None,
    })
}

/// The error for an entry found to be the same server as another
/// (`insecure`: reached with certificate checks off, which would have told
/// a server posing as another).
pub(super) fn duplicate_server(entry: &str, other: &str, run_id: &str, insecure: bool) -> Error {
    let note = if insecure { format!(" {}", crate::tls::INSECURE_NOTE) } else { String::new() };
    Error::Config(format!(
        "{entry} and {other} are the same server (run_id {run_id}): list each server once; \
         a server listed twice would count twice toward the quorum{note}"
    ))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_naming_several_servers_is_told_from_one_server() {
        let several = |entry: &str| servers_in_one(entry);
        let v = |list: &[&str]| Some(list.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(several("redis://a:1,redis://b:2"), v(&["redis://a:1", "redis://b:2"]));
        assert_eq!(several("redis://a:1, redis://b:2 ,redis://c:3"), v(&["redis://a:1", "redis://b:2", "redis://c:3"]));
        assert_eq!(several("redis://a:1 redis://b:2"), v(&["redis://a:1", "redis://b:2"]));
        assert_eq!(several("redis://a:1;redis://b:2"), v(&["redis://a:1", "redis://b:2"]));
        assert_eq!(several("a:1 b:2\tc:3"), v(&["a:1", "b:2", "c:3"]));
        assert_eq!(several("redis://a:1 [::1]:2"), v(&["redis://a:1", "[::1]:2"]));
        // A cluster's seed list is one server; a URL after it is another.
        assert_eq!(several("redis+cluster://a:1,b:2"), None);
        assert_eq!(several("redis+cluster://a:1,b:2,redis://c:3"), v(&["redis+cluster://a:1,b:2", "redis://c:3"]));
        assert_eq!(several("redis+cluster://a:1,b:2 redis+cluster://c:3,d:4"), v(&["redis+cluster://a:1,b:2", "redis+cluster://c:3,d:4"]));
        // So is a Sentinel member's list of sentinels, up to its master's name.
        assert_eq!(several("redis+sentinel://s1:26379,s2:26379,s3:26379/m"), None);
        assert_eq!(
            several("redis+sentinel://s1:26379,s2:26379/m,redis://c:3"),
            v(&["redis+sentinel://s1:26379,s2:26379/m", "redis://c:3"])
        );
        // One server, or something the URL check judges.
        for one in ["redis://a:1", " redis://a:1 ", "a:1", "redis://:pa ss@a:1", "redis://:p;w@a:1", "redis://a:1 x", "", "redis://a:1,"] {
            assert_eq!(several(one), None, "{one:?}");
        }
    }

    #[test]
    fn the_library_refuses_an_entry_naming_several_servers() {
        let Err(Error::Config(message)) = Redlock::new(&["redis://127.0.0.1:1,redis://127.0.0.1:2"], Settings::default()) else {
            panic!("accepted");
        };
        assert!(message.contains("names 2 servers in one entry"), "{message}");
        assert!(!message.contains("missing port"), "{message}");
    }
}
