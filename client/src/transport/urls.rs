//! The entries of a server list: schemes, a Sentinel member's parts, a
//! cluster's seeds, and the checks every URL passes before it is used.

use super::*;

/// The URL scheme of a Redis Cluster instance: seed nodes, comma-separated.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The same over TLS: every node is reached by `rediss://`.
pub const TLS_CLUSTER_SCHEME: &str = "rediss+cluster://";

/// Whether `url` names a Redis Cluster (`redis+cluster://`, `rediss+cluster://`).
pub fn is_cluster_url(url: &str) -> bool {
    url.starts_with(CLUSTER_SCHEME) || url.starts_with(TLS_CLUSTER_SCHEME)
}

/// Whether `url` names a server reached over TLS (`rediss://`,
/// `rediss+cluster://`).
pub fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with(TLS_CLUSTER_SCHEME)
}

/// The URL scheme of a Sentinel-managed master.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// Whether a server-list entry, so far, goes on with more hosts after a
/// comma: a cluster's seed list, or a Sentinel member's sentinels before
/// its `/MASTER_NAME`.
pub fn takes_more_hosts(entry: &str) -> bool {
    is_cluster_url(entry) || entry.strip_prefix(SENTINEL_SCHEME).is_some_and(|rest| !rest.contains('/'))
}

/// The sentinels' port when a `redis+sentinel://` host names none.
const SENTINEL_PORT: u16 = 26379;

/// The option of any member URL but a cluster's: how many replicas must
/// acknowledge each grant, extension and release there (`WAIT`) before it
/// counts (0: none, the default but for a Sentinel member's).
pub(super) const WAIT_REPLICAS: &str = "wait_replicas";

/// A Sentinel member's `wait_replicas` unless its URL says otherwise: its
/// master may be demoted with a grant no replica has (see `replicas`).
pub(super) const SENTINEL_WAIT_REPLICAS: u32 = 1;

/// `wait_replicas=value` of `url`, checked.
fn wait_replicas_value(url: &str, value: &str) -> Result<u32, String> {
    let number = if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) { None } else { value.parse::<u32>().ok() };
    number.ok_or_else(|| {
        format!(
            "{url:?}: {WAIT_REPLICAS}={value:?}: expected how many replicas must acknowledge each lock command, \
             a whole number from 0 (no wait) to {}, e.g. {WAIT_REPLICAS}=1",
            u32::MAX
        )
    })
}

/// A query key that means `wait_replicas` but is spelled otherwise
/// (`wait-replicas`, `WAIT_REPLICAS`): refused rather than passed on to the
/// server's URL, where it would be ignored and nothing waited for.
fn misspells_wait_replicas(key: &str) -> bool {
    key != WAIT_REPLICAS && key.to_ascii_lowercase().replace('-', "_") == WAIT_REPLICAS
}

/// `url` (a `redis://`, `rediss://` or `unix://` member) without its
/// `wait_replicas` option, for the client library (which would ignore it),
/// and the option's value if given.
pub(super) fn without_wait_replicas(url: &str) -> Result<(String, Option<u32>), String> {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (url, None),
    };
    let Some((base, query)) = before_fragment.split_once('?') else { return Ok((url.to_string(), None)) };
    let mut kept = Vec::new();
    let mut wait_replicas = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if misspells_wait_replicas(key) {
            return Err(format!("{url:?}: unknown option {key:?}: did you mean {WAIT_REPLICAS}?"));
        }
        if key != WAIT_REPLICAS {
            kept.push(pair);
        } else if wait_replicas.replace(wait_replicas_value(url, value)?).is_some() {
            return Err(format!("{url:?}: {WAIT_REPLICAS} given twice"));
        }
    }
    let mut stripped = base.to_string();
    if !kept.is_empty() {
        stripped.push('?');
        stripped.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        stripped.push('#');
        stripped.push_str(fragment);
    }
    Ok((stripped, wait_replicas))
}

/// A `redis+sentinel://[user:pass@]host[:port],.../MASTER_NAME[?options]`
/// member: the credentials are the master's (where LOCK.* runs); the
/// sentinels' own, if any, are `sentinel_username` and
/// `sentinel_password`; `role=master` is the only role a lock can use;
/// `wait_replicas` (default 1) how many of the master's replicas must
/// acknowledge a lock command before it counts.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SentinelSpec {
    pub(super) sentinels: Vec<(String, u16)>,
    pub(super) master: String,
    pub(super) wait_replicas: u32,
    username: Option<String>,
    password: Option<String>,
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
}

pub(super) fn sentinel_spec(url: &str) -> Result<SentinelSpec, String> {
    let rest = url.strip_prefix(SENTINEL_SCHEME).ok_or_else(|| format!("not a {SENTINEL_SCHEME} URL"))?;
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let Some((authority, master)) = rest.split_once('/') else {
        return Err(format!("{url:?}: missing master name; e.g. {SENTINEL_SCHEME}127.0.0.1:26379,127.0.0.1:26380/mymaster"));
    };
    let master = master.trim_end_matches('/');
    if master.is_empty() || master.contains('/') {
        return Err(format!("{url:?}: the path must be the master's name as the sentinels know it (sentinel monitor NAME ...)"));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(info) => match info.split_once(':') {
            Some((user, pass)) => ((!user.is_empty()).then(|| user.to_string()), Some(pass.to_string())),
            None => ((!info.is_empty()).then(|| info.to_string()), None),
        },
    };
    let mut sentinels = Vec::new();
    for host in hosts.split(',').map(str::trim) {
        check_host_port(host)?;
        let (name, port) = match host.rsplit_once(':').filter(|_| !host.ends_with(']')) {
            Some((name, port)) => (name, port.parse::<u16>().map_err(|_| format!("port {port:?} out of range 1-65535"))?),
            None => (host, SENTINEL_PORT),
        };
        sentinels.push((name.trim_start_matches('[').trim_end_matches(']').to_string(), port));
    }
    let mut spec = SentinelSpec {
        sentinels,
        master: master.to_string(),
        wait_replicas: SENTINEL_WAIT_REPLICAS,
        username,
        password,
        sentinel_username: None,
        sentinel_password: None,
    };
    let mut wait_replicas_given = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "role" if value == "master" => {}
            "role" => return Err(format!("{url:?}: role={value}: a lock is taken on the master only (role=master)")),
            "sentinel_username" => spec.sentinel_username = Some(value.to_string()),
            "sentinel_password" => spec.sentinel_password = Some(value.to_string()),
            WAIT_REPLICAS if wait_replicas_given => return Err(format!("{url:?}: {WAIT_REPLICAS} given twice")),
            WAIT_REPLICAS => {
                spec.wait_replicas = wait_replicas_value(url, value)?;
                wait_replicas_given = true;
            }
            other if misspells_wait_replicas(other) => {
                return Err(format!("{url:?}: unknown option {other:?}: did you mean {WAIT_REPLICAS}?"))
            }
            other => {
                return Err(format!("{url:?}: unknown option {other:?} (role, sentinel_username, sentinel_password, {WAIT_REPLICAS})"))
            }
        }
    }
    Ok(spec)
}

/// The sentinel client of `spec`, its connections made with `tcp`.
pub(super) fn sentinel_client(spec: &SentinelSpec, tcp: TcpSettings) -> redis::RedisResult<SentinelClient> {
    let sentinels = spec.sentinels.iter().map(|(host, port)| redis::ConnectionAddr::Tcp(host.clone(), *port));
    let mut builder = SentinelClientBuilder::new(sentinels, &spec.master, SentinelServerType::Master)?
        .set_client_to_redis_tcp_settings(tcp.clone())
        .set_client_to_sentinel_tcp_settings(tcp);
    if let Some(user) = &spec.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &spec.password {
        builder = builder.set_client_to_redis_password(password);
    }
    if let Some(user) = &spec.sentinel_username {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = &spec.sentinel_password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    builder.build()
}

/// The seed node URLs of a `redis+cluster://[user:pass@]host:port,host:port`
/// URL (`rediss://` seeds of a `rediss+cluster://` one); credentials given
/// once apply to every seed.
pub(super) fn cluster_seeds(url: &str) -> Result<Vec<String>, String> {
    let (rest, scheme) = match (url.strip_prefix(CLUSTER_SCHEME), url.strip_prefix(TLS_CLUSTER_SCHEME)) {
        (Some(rest), _) => (rest, "redis"),
        (_, Some(rest)) => (rest, "rediss"),
        _ => return Err(format!("not a {CLUSTER_SCHEME} URL")),
    };
    let rest = rest.trim_end_matches('/');
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    hosts
        .split(',')
        .map(str::trim)
        .map(|h| if h.is_empty() { Err(format!("empty seed node in {url:?}")) } else { Ok(format!("{scheme}://{auth}{h}")) })
        .collect()
}

/// A server-list entry with its scheme: `host:port` (no scheme, no path)
/// is `redis://host:port`, for the CLI, the Rust API and both bindings
/// alike; anything else is as given (and checked by `check_url`).
pub fn with_scheme(entry: &str) -> std::borrow::Cow<'_, str> {
    if entry.contains("://") || entry.contains('/') || entry.is_empty() {
        std::borrow::Cow::Borrowed(entry)
    } else {
        std::borrow::Cow::Owned(format!("redis://{entry}"))
    }
}

/// Checks a server URL for what the client library's parser reports only
/// as "did not parse": the scheme, the host, the port. A `host:port`
/// entry is checked as `redis://host:port` (`with_scheme`).
pub fn check_url(url: &str) -> Result<(), String> {
    let entry = with_scheme(url);
    let Some((scheme, rest)) = entry.split_once("://") else {
        return Err(format!("{url:?} has no scheme; use redis://host:port (or host:port) or redis+cluster://host:port,..."));
    };
    let url = entry.as_ref();
    match scheme {
        "redis" | "rediss" => without_wait_replicas(url).and_then(|_| check_host_port(rest)),
        "redis+cluster" | "rediss+cluster" => {
            if without_wait_replicas(url)?.1.is_some() {
                return Err(format!(
                    "{url:?}: {WAIT_REPLICAS} is not taken by a cluster member (its commands go to each key's master; \
                     list the masters' Sentinel groups or servers instead)"
                ));
            }
            let hosts = rest.trim_end_matches('/').rsplit_once('@').map_or(rest, |(_, h)| h);
            for seed in hosts.split(',') {
                check_host_port(seed.trim())?;
            }
            Ok(())
        }
        "redis+sentinel" => sentinel_spec(url).map(|_| ()),
        "unix" | "redis+unix" => {
            if rest.is_empty() {
                Err(format!("{url:?}: missing socket path"))
            } else {
                without_wait_replicas(url).map(|_| ())
            }
        }
        "" => Err(format!(
            "{url:?}: missing scheme; use redis://, rediss:// (TLS), unix://, redis+sentinel://, redis+cluster:// or rediss+cluster://"
        )),
        other => Err(format!(
            "unsupported scheme {other}, use redis://, rediss:// (TLS), unix://, redis+sentinel://, redis+cluster:// or rediss+cluster://"
        )),
    }
}

/// `[user:pass@]host[:port][/db]`.
fn check_host_port(authority_and_path: &str) -> Result<(), String> {
    let authority = authority_and_path.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        match v6.split_once(']') {
            Some((host, rest)) => (host, rest.strip_prefix(':')),
            None => return Err(format!("{host_port:?}: unclosed [ in an IPv6 address")),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err(format!("missing host in {authority_and_path:?}; e.g. redis://127.0.0.1:6379"));
    }
    if let Some(port) = port {
        if port.is_empty() {
            return Err(format!("missing port after {host}:"));
        }
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("port {port:?} is not a number"));
        }
        match port.parse::<u32>() {
            Ok(p) if (1..=65535).contains(&p) => {}
            _ => return Err(format!("port {port} out of range 1-65535")),
        }
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_without_a_scheme_is_a_redis_url() {
        assert_eq!(with_scheme("127.0.0.1:7001"), "redis://127.0.0.1:7001");
        assert_eq!(with_scheme("[::1]:7001"), "redis://[::1]:7001");
        assert_eq!(with_scheme("rediss://h:1"), "rediss://h:1");
        for ok in ["127.0.0.1:7001", "cache-1.internal:6380", "[::1]:7001", "localhost"] {
            assert_eq!(check_url(ok), Ok(()), "{ok}");
        }
        // Refused with the same words as the same entry with its scheme.
        for (bad, words) in [("127.0.0.1:99999", "port 99999 out of range 1-65535"), ("h:port", "port \"port\" is not a number")] {
            assert_eq!(check_url(bad).err().as_deref(), Some(words), "{bad}");
            assert_eq!(check_url(&format!("redis://{bad}")).err().as_deref(), Some(words), "{bad}");
        }
        assert!(check_url("redis:/h:1").is_err_and(|e| e.contains("no scheme")));
    }

    #[test]
    fn a_sentinel_member_names_its_sentinels_its_master_and_both_credentials() {
        let spec =
            sentinel_spec("redis+sentinel://app:s3cret@10.0.0.1:26380,sentinel-b,[::1]:26381/orders?role=master&sentinel_password=sp")
                .expect("parses");
        assert_eq!(spec.sentinels, vec![("10.0.0.1".into(), 26380), ("sentinel-b".into(), SENTINEL_PORT), ("::1".into(), 26381)]);
        assert_eq!(spec.master, "orders");
        assert_eq!((spec.username.as_deref(), spec.password.as_deref()), (Some("app"), Some("s3cret")));
        assert_eq!((spec.sentinel_username, spec.sentinel_password.as_deref()), (None, Some("sp")));
        for (bad, says) in [
            ("redis+sentinel://127.0.0.1:26379", "missing master name"),
            ("redis+sentinel://127.0.0.1:26379/", "master's name"),
            ("redis+sentinel://127.0.0.1:26379/m/0", "master's name"),
            ("redis+sentinel://127.0.0.1:26379/m?role=replica", "master only"),
            ("redis+sentinel://127.0.0.1:26379/m?db=2", "unknown option"),
            ("redis+sentinel://127.0.0.1:99999/m", "out of range"),
            ("redis+sentinel://:26379/m", "missing host"),
        ] {
            let e = sentinel_spec(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wait_replicas_is_a_whole_number_given_once_and_never_on_a_cluster() {
        // A Sentinel member waits for one replica unless told otherwise.
        let wait_of = |url: &str| sentinel_spec(url).map(|spec| spec.wait_replicas);
        assert_eq!(wait_of("redis+sentinel://h:26379/m"), Ok(1));
        assert_eq!(wait_of("redis+sentinel://h:26379/m?wait_replicas=0"), Ok(0));
        assert_eq!(wait_of("redis+sentinel://h/m?role=master&wait_replicas=2&sentinel_password=p"), Ok(2));
        // Any other member: taken out of the URL the client library reads,
        // the rest kept in place.
        let stripped = |url: &str, rest: &str, wait| assert_eq!(without_wait_replicas(url), Ok((rest.to_string(), wait)), "{url}");
        stripped("redis://h:6379/2?wait_replicas=1&protocol=resp3#insecure", "redis://h:6379/2?protocol=resp3#insecure", Some(1));
        stripped("rediss://u:p@h:6379?wait_replicas=0", "rediss://u:p@h:6379", Some(0));
        stripped("unix:///run/redis.sock?db=1&wait_replicas=3", "unix:///run/redis.sock?db=1", Some(3));
        stripped("redis://h:6379", "redis://h:6379", None);
        for (bad, says) in [
            ("redis://h:6379?wait_replicas=", "a whole number from 0 (no wait)"),
            ("redis://h:6379?wait_replicas", "a whole number from 0 (no wait)"),
            ("redis://h:6379?wait_replicas=-1", "a whole number from 0 (no wait)"),
            ("redis://h:6379?wait_replicas=+1", "a whole number from 0 (no wait)"),
            ("redis://h:6379?wait_replicas=one", "a whole number from 0 (no wait)"),
            ("redis://h:6379?wait_replicas=1.5", "a whole number from 0 (no wait)"),
            ("redis://h:6379?wait_replicas=4294967296", "a whole number from 0 (no wait) to 4294967295"),
            ("redis://h:6379?wait_replicas=1&wait_replicas=1", "wait_replicas given twice"),
            ("redis://h:6379?wait-replicas=1", "did you mean wait_replicas?"),
            ("unix:///run/redis.sock?WAIT_REPLICAS=1", "did you mean wait_replicas?"),
            ("redis+sentinel://h/m?wait_replicas=x", "a whole number from 0 (no wait)"),
            ("redis+sentinel://h/m?wait-replicas=0", "did you mean wait_replicas?"),
            ("redis+sentinel://h/m?wait_replicas=0&wait_replicas=1", "wait_replicas given twice"),
            ("redis+cluster://h:7000,h:7001?wait_replicas=1", "not taken by a cluster member"),
            ("rediss+cluster://h:7000?wait-replicas=1", "did you mean wait_replicas?"),
        ] {
            let e = check_url(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
