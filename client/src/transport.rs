//! One connection per instance: a multiplexed connection that reconnects,
//! with connect and per-request timeouts. Requests to one server travel on
//! one connection in order, so a release sent after an acquire that timed
//! out is executed after it: a late acquire cannot land after its release.
//!
//! An instance is a standalone server (`redis://host:port`,
//! `unix:///path/to/redis.sock`), a Sentinel-managed master
//! (`redis+sentinel://host:port,.../MASTER_NAME`: the sentinels are asked
//! for the master at every connection, so a failover moves the instance
//! to the promoted replica), or a whole Redis Cluster
//! (`redis+cluster://host:port,host:port,...`, its seed nodes): the
//! cluster connection sends each command to its key's master over one
//! connection per node, follows MOVED/ASK and retries TRYAGAIN.
//!
//! `rediss://` (and `rediss+cluster://`) servers are reached over TLS
//! (`crate::tls`), with the same TCP settings, the same identification
//! of every connection and the same timeouts as plain ones.

use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::io::tcp::{socket2, TcpSettings};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Cmd, ConnectionAddr, FromRedisValue, Pipeline, RedisError, RedisFuture, Script, TlsMode, Value};
use tokio::sync::Mutex;

// Re-exported: the data of what servers answered lives in `outcome`.
pub use crate::outcome::{seconds_left, InstanceOutcome, Outcome, Rejection, UnreachableCause};
use crate::settings::{Mode, Settings};
use crate::tls::{self, Tls};

const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
const EXTEND_SCRIPT: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// How a request holds a key: alone, shared, or as one of a semaphore's
/// `n` holders (`LOCK.ACQUIRE ... [SHARED [LIMIT n]]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    Exclusive,
    Shared,
    Limit(u32),
}

impl Share {
    fn args(self, cmd: &mut Cmd) {
        match self {
            Share::Exclusive => {}
            Share::Shared => {
                cmd.arg("SHARED");
            }
            Share::Limit(n) => {
                cmd.arg("SHARED").arg("LIMIT").arg(n);
            }
        }
    }
}

/// One server's view of a resource, for `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceStatus {
    pub server: String,
    pub reachable: bool,
    pub owner: Option<String>,
    pub token: Option<i64>,
    /// Remaining lease in ms (-1: no TTL).
    pub pttl: Option<i64>,
    pub waiters: Option<i64>,
    /// Restart quarantine left on the instance, in ms (0: none; `None`:
    /// unknown, e.g. script mode).
    pub quarantine_ms_left: Option<i64>,
    /// What went wrong, as text.
    pub error: Option<String>,
    /// What went wrong, classified (`Timeout`, `Unreachable`, `AuthFailed`,
    /// `ModuleMissing`, `Failed`); `None` when the server answered.
    pub failure: Option<Outcome>,
    /// Who holds it there (`LOCK.INFO`'s holders), oldest first.
    pub holders: Vec<HolderState>,
    /// Who waits for it there (`LOCK.WAITERS`), the head first.
    pub line: Vec<WaiterState>,
}

/// One holder on one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderState {
    pub owner: String,
    pub token: Option<i64>,
    pub pttl: i64,
    /// How long it has held the lock, ms (`None`: a plain-string lock).
    pub held_ms: Option<i64>,
    /// Bound to its connection (`SESSION`).
    pub session: bool,
}

/// One waiter in one server's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterState {
    pub owner: String,
    /// `exclusive` or `shared`.
    pub mode: String,
    /// The semaphore's limit a permit waits for.
    pub limit: Option<i64>,
    pub waited_ms: i64,
    /// What is left of its WAIT, ms (-1: no limit).
    pub wait_left_ms: i64,
}

/// Waiters `status` lists per server.
const STATUS_LINE_COUNT: i64 = 20;

/// One instance's lock service as a whole (`INFO redislock`), for
/// `status` without a resource. A cluster's nodes are added up (locks,
/// waiters) or the largest taken (quarantine, highest token).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceSummary {
    pub server: String,
    pub reachable: bool,
    pub quarantine_ms_left: Option<i64>,
    pub locks: Option<i64>,
    pub clients_waiting: Option<i64>,
    pub keys_waited: Option<i64>,
    pub highest_token: Option<i64>,
    pub error: Option<String>,
    /// What went wrong, classified, as in `InstanceStatus::failure`.
    pub failure: Option<Outcome>,
}

/// One contended lock in one server's `LOCK.TOP`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContendedLock {
    pub key: String,
    pub waiters: i64,
    /// How long the oldest of them has waited, ms.
    pub oldest_wait_ms: i64,
    /// `exclusive` or `shared`; `None` when nobody holds it.
    pub mode: Option<String>,
    pub holders: i64,
    /// How long the longest holder has held it, ms (`None`: unknown or free).
    pub longest_hold_ms: Option<i64>,
}

/// One instance's most contended locks (`LOCK.TOP`; a cluster's masters
/// together), for `redlock top`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceTop {
    pub server: String,
    pub reachable: bool,
    pub locks: Vec<ContendedLock>,
    pub error: Option<String>,
    /// What went wrong, classified, as in `InstanceStatus::failure`.
    pub failure: Option<Outcome>,
}

/// The servers of one client by what they are, not how they were
/// spelled: each `run_id` (the random identity `INFO server` gives a
/// server process, never shared by two processes) with the entry of the
/// server list it was found at. Two entries with one `run_id` (the same
/// URL twice, `localhost` and `127.0.0.1`, a host name and its address,
/// two db numbers of one server, a cluster and one of its nodes) are one
/// server: counted twice, it would let one server pose as a quorum.
#[derive(Default)]
pub struct Identities {
    /// run_id → (entry index, entry name).
    claimed: std::sync::Mutex<std::collections::HashMap<String, (usize, String)>>,
    /// Entries found to repeat another: (entry name, the other's name, run_id).
    duplicates: std::sync::Mutex<Vec<(String, String, String)>>,
}

impl Identities {
    /// Records that entry `index` (`name`) is the server(s) `run_ids`, or
    /// names the entry that already is one of them.
    fn claim(&self, index: usize, name: &str, run_ids: &[String]) -> Result<(), Outcome> {
        let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        for id in run_ids {
            if let Some((other, other_name)) = claimed.get(id) {
                if *other != index {
                    let duplicate = Outcome::Duplicate { of: other_name.clone(), run_id: id.clone() };
                    let mut found = self.duplicates.lock().unwrap_or_else(|p| p.into_inner());
                    if !found.iter().any(|(n, _, _)| n == name) {
                        found.push((name.to_string(), other_name.clone(), id.clone()));
                    }
                    return Err(duplicate);
                }
            }
        }
        // A restarted server has a new run_id: forget the old one. An entry
        // whose address repeated another's (a moved VIP or DNS name) and
        // now reaches a server of its own is no longer one.
        claimed.retain(|_, (i, _)| *i != index);
        self.duplicates.lock().unwrap_or_else(|p| p.into_inner()).retain(|(n, _, _)| n != name);
        for id in run_ids {
            claimed.insert(id.clone(), (index, name.to_string()));
        }
        Ok(())
    }

    /// Entries found to repeat another: (entry, the other entry, run_id).
    pub fn duplicates(&self) -> Vec<(String, String, String)> {
        self.duplicates.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

pub struct Instance {
    /// `host:port` (`cluster:host:port,...` for a cluster), as errors name
    /// the instance.
    pub name: String,
    /// Its place in the server list, and the list's identities.
    index: usize,
    /// `host:port` of the server (of each seed, for a cluster), lower
    /// case: two entries sharing one are one server, as spelled.
    pub addresses: Vec<String>,
    identities: std::sync::Arc<Identities>,
    client: Client,
    /// The shared connection, with its number: a request that finds it
    /// dropped retires that one (never a newer one another request made).
    conn: Mutex<Option<(u64, Link)>>,
    /// Numbers the shared connections made.
    connections_made: std::sync::atomic::AtomicU64,
    /// Idle connections for blocking waits (`wait_for`), kept after a
    /// wait that got its reply: a connection per wait would cost a TCP
    /// handshake on every handoff of a contended lock.
    waiting_conns: std::sync::Mutex<Vec<MultiplexedConnection>>,
    request_timeout: Duration,
    connect_timeout: Duration,
    mode: Mode,
    /// Its connections speak TLS (`rediss://`, `rediss+cluster://`).
    tls: bool,
    /// ... and check no certificate (`TlsSettings::insecure`, or
    /// `#insecure` in the URL): every connection error says so.
    insecure: bool,
}

/// Idle wait connections kept per instance; more waits at once open more.
const MAX_IDLE_WAITING_CONNS: usize = 64;

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

enum Client {
    /// Boxed: far larger than a seed list, and used only to connect.
    Single(Box<redis::Client>),
    /// Seed node URLs (`redis://...`, or `rediss://...` with the TLS of
    /// every node).
    Cluster(Vec<String>, Option<Box<Tls>>),
    /// A Sentinel-managed master, asked of the sentinels at every new
    /// connection (one asks at a time).
    Sentinel(Box<Mutex<SentinelClient>>),
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

/// A `redis+sentinel://[user:pass@]host[:port],.../MASTER_NAME[?options]`
/// member: the credentials are the master's (where LOCK.* runs); the
/// sentinels' own, if any, are `sentinel_username` and
/// `sentinel_password`; `role=master` is the only role a lock can use.
#[derive(Debug, PartialEq, Eq)]
struct SentinelSpec {
    sentinels: Vec<(String, u16)>,
    master: String,
    username: Option<String>,
    password: Option<String>,
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
}

fn sentinel_spec(url: &str) -> Result<SentinelSpec, String> {
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
    let mut spec =
        SentinelSpec { sentinels, master: master.to_string(), username, password, sentinel_username: None, sentinel_password: None };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "role" if value == "master" => {}
            "role" => return Err(format!("{url:?}: role={value}: a lock is taken on the master only (role=master)")),
            "sentinel_username" => spec.sentinel_username = Some(value.to_string()),
            "sentinel_password" => spec.sentinel_password = Some(value.to_string()),
            other => return Err(format!("{url:?}: unknown option {other:?} (role, sentinel_username, sentinel_password)")),
        }
    }
    Ok(spec)
}

/// The sentinel client of `spec`, its connections made with `tcp`.
fn sentinel_client(spec: &SentinelSpec, tcp: TcpSettings) -> redis::RedisResult<SentinelClient> {
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

/// A live connection to an instance; cheap to clone (both kinds multiplex).
/// A single server's is made by `Instance::connection` and never remade
/// behind its back: every connection is identified before it is used.
#[derive(Clone)]
enum Link {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Single(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(&'a mut self, pipeline: &'a Pipeline, offset: usize, count: usize) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// The seed node URLs of a `redis+cluster://[user:pass@]host:port,host:port`
/// URL (`rediss://` seeds of a `rediss+cluster://` one); credentials given
/// once apply to every seed.
fn cluster_seeds(url: &str) -> Result<Vec<String>, String> {
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

/// How long sent data may stay unacknowledged before the kernel gives the
/// connection up (`TCP_USER_TIMEOUT`): a connection into a network that
/// went dark fails then, and the next request connects afresh (and
/// identifies the server again), instead of waiting out TCP's
/// retransmission backoff (seconds) after the network heals. A server that
/// is slow or stopped still has its kernel acknowledge, so this never
/// retires a connection to a merely slow server, whose requests stay in
/// order behind one another.
fn unacked_limit(request_timeout: Duration) -> Duration {
    request_timeout.saturating_mul(4).max(Duration::from_secs(1))
}

/// TCP settings of every connection: no Nagle delay on small requests;
/// keepalive probes, so that an idle connection through NAT or a load
/// balancer stays known to it and a dead one is found while idle; and the
/// unacknowledged-data limit above.
fn tcp_settings(request_timeout: Duration) -> TcpSettings {
    let keepalive = socket2::TcpKeepalive::new().with_time(KEEPALIVE_IDLE).with_interval(KEEPALIVE_INTERVAL);
    TcpSettings::default().set_nodelay(true).set_keepalive(keepalive).set_user_timeout(unacked_limit(request_timeout))
}

/// Keepalive: the first probe after this long idle, then one per interval.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);

/// A failed request, classified: one of the failure variants of `Outcome`.
type CallError = Outcome;

/// For `status` and `summary`: whether the server was reached (it replied,
/// if with an error), what went wrong as text, and classified.
fn for_status(e: CallError, server: &str) -> (bool, Option<String>, Option<Outcome>) {
    let reached = !matches!(e, Outcome::Timeout | Outcome::Unreachable { .. } | Outcome::TlsFailed(_));
    let text = match &e {
        Outcome::ModuleMissing => format!("LOCK.* unknown: is the redislock module loaded on {server}?"),
        other => other.to_string(),
    };
    (reached, Some(text), Some(e))
}

impl Instance {
    /// An instance on its own (a list of one); a `rediss://` one reads
    /// `settings.tls` itself.
    pub fn new(url: &str, settings: &Settings) -> Result<Instance, RedisError> {
        Instance::in_list(url, settings, 0, std::sync::Arc::new(Identities::default()), None)
    }

    /// Entry `index` of a server list whose servers are told apart by
    /// `identities`; `tls`: the list's TLS settings, read once for every
    /// `rediss://` entry (`None`: read here if this entry needs them).
    pub fn in_list(
        url: &str,
        settings: &Settings,
        index: usize,
        identities: std::sync::Arc<Identities>,
        tls: Option<&Tls>,
    ) -> Result<Instance, RedisError> {
        let config_error = |what: &'static str, e: String| RedisError::from((redis::ErrorKind::InvalidClientConfig, what, e));
        check_url(url).map_err(|e| config_error("bad server URL", e))?;
        let tls = match (is_tls_url(url), tls) {
            (false, _) => None,
            (true, Some(tls)) => Some(tls.clone()),
            (true, None) => Some(Tls::load(&settings.tls).map_err(|e| config_error("bad TLS settings", e))?),
        };
        let (client, name, addresses, insecure) = if url.starts_with(SENTINEL_SCHEME) {
            let spec = sentinel_spec(url).map_err(|e| config_error("bad sentinel URL", e))?;
            let client = sentinel_client(&spec, tcp_settings(settings.request_timeout))?;
            let hosts: Vec<String> = spec.sentinels.iter().map(|(h, p)| format!("{h}:{p}")).collect();
            // Two entries naming one master of the same sentinels are one;
            // another master of the same sentinels is another member.
            let addresses = hosts.iter().map(|h| format!("{h}/{}", spec.master).to_ascii_lowercase()).collect();
            (Client::Sentinel(Box::new(Mutex::new(client))), format!("sentinel:{}/{}", hosts.join(","), spec.master), addresses, false)
        } else if is_cluster_url(url) {
            let seeds = cluster_seeds(url).map_err(|e| config_error("bad cluster URL", e))?;
            let mut names = Vec::with_capacity(seeds.len());
            for seed in &seeds {
                names.push(redis::Client::open(seed.as_str())?.get_connection_info().addr().to_string());
            }
            let addresses = names.iter().map(|n| n.to_ascii_lowercase()).collect();
            let insecure = tls.as_ref().is_some_and(|t| t.insecure);
            (Client::Cluster(seeds, tls.map(Box::new)), format!("cluster:{}", names.join(",")), addresses, insecure)
        } else {
            let info = redis::Client::open(url)?.get_connection_info().clone().set_tcp_settings(tcp_settings(settings.request_timeout));
            let (client, insecure) = match (info.addr().clone(), &tls) {
                (ConnectionAddr::TcpTls { host, port, insecure, .. }, Some(tls)) => {
                    // `#insecure` in the URL, or the settings' switch.
                    let insecure = insecure || tls.insecure;
                    let info = info.set_addr(ConnectionAddr::TcpTls { host, port, insecure, tls_params: None });
                    (redis::Client::build_with_tls(info, tls.certificates.clone())?, insecure)
                }
                _ => (redis::Client::open(info)?, false),
            };
            let name = client.get_connection_info().addr().to_string();
            let addresses = vec![name.to_ascii_lowercase()];
            (Client::Single(Box::new(client)), name, addresses, insecure)
        };
        Ok(Instance {
            name,
            index,
            addresses,
            identities,
            client,
            conn: Mutex::new(None),
            connections_made: std::sync::atomic::AtomicU64::new(0),
            waiting_conns: std::sync::Mutex::new(Vec::new()),
            request_timeout: settings.request_timeout,
            connect_timeout: settings.connect_timeout,
            mode: settings.mode,
            tls: is_tls_url(url),
            insecure,
        })
    }

    /// Whether this instance's certificates go unchecked (insecure TLS).
    pub fn insecure(&self) -> bool {
        self.insecure
    }

    /// A failed connection attempt, classified, with what this instance
    /// adds (see `closed_at_once`).
    fn failure(&self, e: RedisError) -> Outcome {
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
    fn closed_at_once(&self, outcome: Outcome, connecting: bool) -> Outcome {
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
    fn noted(&self, outcome: Outcome) -> Outcome {
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

    /// The shared connection, made and identified if there is none: a
    /// connection is used only once its server was found to be this entry
    /// (see `Identities`), so an address that now leads to another listed
    /// server (a moved VIP or DNS name, a forwarder retargeted) never
    /// counts twice, and one whose identity cannot be read in time counts
    /// as not answering.
    async fn connection(&self) -> Result<(u64, Link), CallError> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let connecting = async {
            match &self.client {
                Client::Single(_) | Client::Sentinel(_) => {
                    // No response timeout inside: `request` bounds each one.
                    let config =
                        redis::AsyncConnectionConfig::new().set_connection_timeout(Some(self.connect_timeout)).set_response_timeout(None);
                    self.server_client().await?.get_multiplexed_async_connection_with_config(&config).await.map(Link::Single)
                }
                Client::Cluster(seeds, tls) => {
                    let client = self.cluster_client(seeds, tls.as_deref(), self.request_timeout)?;
                    client.get_async_connection().await.map(Link::Cluster)
                }
            }
        };
        let conn = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(self.failure(e)),
            Err(_) => return Err(self.noted(connect_timeout(self.connect_timeout, self.tls))),
        };
        self.identified(conn.clone()).await?;
        let number = self.connections_made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *slot = Some((number, conn.clone()));
        Ok((number, conn))
    }

    /// A client for the server this entry leads to now: the one its URL
    /// names, or the master the sentinels name (they check it answers
    /// `ROLE` as a master). Not for a cluster.
    async fn server_client(&self) -> redis::RedisResult<redis::Client> {
        match &self.client {
            Client::Single(client) => Ok(redis::Client::clone(client)),
            // Behind a trait object: the sentinel client's own future is
            // deep, and every request's future would carry its type.
            Client::Sentinel(sentinels) => {
                let asking: std::pin::Pin<Box<dyn std::future::Future<Output = redis::RedisResult<redis::Client>> + Send + '_>> =
                    Box::pin(async { sentinels.lock().await.async_get_client().await });
                asking.await
            }
            Client::Cluster(..) => Err(RedisError::from((redis::ErrorKind::InvalidClientConfig, "a cluster has no single server"))),
        }
    }

    /// Checks that `conn` leads to this entry's server, before any other
    /// command is sent on it: reads its `run_id` within the request
    /// timeout and claims it for this entry; an entry that repeats another
    /// is refused (`Outcome::Duplicate`, naming both).
    async fn identified(&self, conn: Link) -> Result<(), CallError> {
        let run_ids = match tokio::time::timeout(self.request_timeout, identify(conn)).await {
            // An I/O error at the first command is a connection closed or
            // reset at once.
            Ok(ids) => ids.map_err(|e| self.closed_at_once(e, false))?,
            Err(_) => return Err(Outcome::Timeout),
        };
        self.identities.claim(self.index, &self.name, &run_ids)
    }

    /// Forgets shared connection `number` (dropped under a request), so
    /// that the next request connects and identifies afresh. A newer one,
    /// made meanwhile by another request, stays.
    async fn retire(&self, number: u64) {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|(n, _)| *n == number) {
            *slot = None;
        }
    }

    /// Connects (and so identifies the server) unless connected already.
    pub async fn contact(&self) -> Result<(), Outcome> {
        self.connection().await.map(|_| ())
    }

    /// A cluster client whose commands give up after `response_timeout`;
    /// the request deadline above bounds MOVED/ASK/TRYAGAIN retries too.
    /// Over TLS with `tls`, to every node.
    fn cluster_client(&self, seeds: &[String], tls: Option<&Tls>, response_timeout: Duration) -> redis::RedisResult<ClusterClient> {
        let mut builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
            .connection_timeout(self.connect_timeout)
            .response_timeout(response_timeout);
        if let Some(tls) = tls {
            builder = builder.tls(if tls.insecure { TlsMode::Insecure } else { TlsMode::Secure }).certs(tls.certificates.clone());
        }
        builder.build()
    }

    /// Runs a request within the request timeout. A connection that died
    /// (a server restarted between two requests, a reset by a proxy or an
    /// idle timeout, the kernel giving up on unacknowledged data) is
    /// retired, and the request is sent once more on a new, identified
    /// connection, within the same timeout. Every request here is
    /// idempotent (an acquire repeats with the same owner). A request that
    /// only timed out leaves its connection in place: what it sent may
    /// still run, and whatever follows it (a release after an acquire)
    /// must run after it.
    async fn request<T, F, Fut>(&self, send: F) -> Result<T, CallError>
    where
        F: Fn(Link) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let now = tokio::time::Instant::now();
        let deadline = now.checked_add(self.request_timeout).unwrap_or(now + Duration::from_secs(86_400));
        let mut retried = false;
        loop {
            let (number, conn) = match tokio::time::timeout_at(deadline, self.connection()).await {
                // Still connecting when the request's time ran out.
                Err(_) => return Err(self.noted(connect_timeout(self.request_timeout.min(self.connect_timeout), self.tls))),
                Ok(conn) => conn?,
            };
            match tokio::time::timeout_at(deadline, send(conn)).await {
                Err(_) => return Err(CallError::Timeout),
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() => {
                    self.retire(number).await;
                    if retried {
                        return Err(self.noted(classify(e)));
                    }
                    retried = true;
                }
                // The master the sentinels named was demoted (a failover):
                // ask them again; until they name the new one, the member
                // is not answering, which a retry or a wait gets past.
                Ok(Err(e)) if self.is_sentinel() && e.code() == Some("READONLY") => {
                    self.retire(number).await;
                    if retried {
                        return Err(failing_over(&e));
                    }
                    retried = true;
                }
                Ok(Err(e)) => return Err(self.noted(classify(e))),
            }
        }
    }

    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, CallError> {
        self.request(|mut conn| async move { cmd.query_async::<T>(&mut conn).await }).await
    }

    async fn script<T: FromRedisValue>(&self, script: &Script, key: &str, args: &[&str]) -> Result<T, CallError> {
        self.request(|mut conn| async move {
            let mut invocation = script.key(key);
            for a in args {
                invocation.arg(*a);
            }
            invocation.invoke_async::<T>(&mut conn).await
        })
        .await
    }

    fn outcome(&self, started: Instant, outcome: Outcome) -> InstanceOutcome {
        InstanceOutcome { server: self.name.clone(), outcome, latency: started.elapsed(), connection: None }
    }

    fn is_sentinel(&self) -> bool {
        matches!(self.client, Client::Sentinel(_))
    }

    /// Whether a grant with `session` here is bound to the connection that
    /// asks, whose id the client then keeps: a single server's shared
    /// connection (a cluster's commands go to whichever node serves the
    /// key, over a connection of the cluster client's; there the server
    /// alone checks the binding).
    fn binds_connection(&self, session: Option<u64>) -> bool {
        session.is_some() && matches!(self.client, Client::Single(_) | Client::Sentinel(_))
    }

    /// `cmd` on the shared connection, preceded by `CLIENT ID` in one
    /// pipeline: its reply and the id of the connection that ran it.
    async fn query_on_connection<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<(u64, T), CallError> {
        self.request(|mut conn| async move {
            let mut pipe = redis::pipe();
            pipe.cmd("CLIENT").arg("ID").add_command(cmd.clone());
            pipe.query_async::<(u64, T)>(&mut conn).await
        })
        .await
    }

    /// `LOCK.ACQUIRE key owner ttl [SHARED] [FENCE min] [SESSION DELAY d]`,
    /// or `SET key owner NX PX ttl` (which has no shared hold: script mode
    /// refuses one).
    pub async fn acquire(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        fence: Option<i64>,
        shared: bool,
        session: Option<u64>,
    ) -> InstanceOutcome {
        self.acquire_as(key, owner, ttl, fence, if shared { Share::Shared } else { Share::Exclusive }, session).await
    }

    /// `LOCK.ACQUIRE key owner ttl [SHARED [LIMIT n]] [FENCE min] [SESSION
    /// DELAY d]` (`session`: the hold ends `d` ms after this connection
    /// closes), or in script mode `SET key owner NX PX ttl` (exclusive
    /// only, never bound).
    pub async fn acquire_as(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        fence: Option<i64>,
        share: Share,
        session: Option<u64>,
    ) -> InstanceOutcome {
        let started = Instant::now();
        let ttl_ms = millis(ttl);
        let outcome = match self.mode {
            Mode::Module => {
                let mut cmd = redis::cmd("LOCK.ACQUIRE");
                cmd.arg(key).arg(owner).arg(ttl_ms);
                share.args(&mut cmd);
                if let Some(min) = fence {
                    cmd.arg("FENCE").arg(min);
                }
                session_args(&mut cmd, session);
                if self.binds_connection(session) {
                    let (outcome, connection) = match self.query_on_connection::<Option<i64>>(&cmd).await {
                        Ok((id, Some(token))) => (Outcome::Granted { token: Some(token) }, Some(id)),
                        Ok((_, None)) => (Outcome::Refused, None),
                        Err(e) => (e, None),
                    };
                    return InstanceOutcome { connection, ..self.outcome(started, outcome) };
                }
                match self.query::<Option<i64>>(&cmd).await {
                    Ok(Some(token)) => Outcome::Granted { token: Some(token) },
                    Ok(None) => Outcome::Refused,
                    Err(e) => e,
                }
            }
            Mode::Script if share != Share::Exclusive => {
                Outcome::Failed("shared locks need the redislock module (script mode has none)".into())
            }
            Mode::Script => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(owner).arg("NX").arg("PX").arg(ttl_ms);
                match self.query::<Value>(&cmd).await {
                    Ok(Value::Okay) | Ok(Value::SimpleString(_)) => Outcome::Granted { token: None },
                    Ok(_) => Outcome::Refused,
                    Err(e) => e,
                }
            }
        };
        self.outcome(started, outcome)
    }

    /// `PING` within the request timeout: whether the server answers now.
    pub async fn ping(&self) -> Outcome {
        match self.query::<Value>(&redis::cmd("PING")).await {
            Ok(_) => Outcome::Done,
            Err(e) => e,
        }
    }

    /// Whether `key` exists here (`EXISTS`); `None` when the server did not
    /// answer it.
    pub async fn exists(&self, key: &str) -> Option<bool> {
        self.query::<i64>(redis::cmd("EXISTS").arg(key)).await.ok().map(|n| n > 0)
    }

    /// Releases `key` if `owner` holds it.
    pub async fn release(&self, key: &str, owner: &str) -> InstanceOutcome {
        let started = Instant::now();
        let reply = match self.mode {
            Mode::Module => self.query::<i64>(redis::cmd("LOCK.RELEASE").arg(key).arg(owner)).await,
            Mode::Script => self.script::<i64>(&Script::new(RELEASE_SCRIPT), key, &[owner]).await,
        };
        self.outcome(started, one_or_zero(reply))
    }

    /// `extend` of a hold bound to connection `connection` (see
    /// `Settings::release_on_disconnect`): only on that connection. Once
    /// the shared connection was remade, the server has ended (or will end,
    /// after its lock-delay) the hold it bound to the old one: the hold is
    /// lost here, and not extended as if nothing happened. The server
    /// refuses an extension from another connection too (the lease it cut
    /// to the lock-delay is never revived); the id check here covers a
    /// server that would not.
    pub async fn extend_bound(&self, key: &str, owner: &str, ttl: Duration, connection: Option<u64>) -> InstanceOutcome {
        let Some(bound) = connection.filter(|_| matches!(self.client, Client::Single(_) | Client::Sentinel(_))) else {
            return self.extend(key, owner, ttl).await;
        };
        let started = Instant::now();
        let mut cmd = redis::cmd("LOCK.EXTEND");
        cmd.arg(key).arg(owner).arg(millis(ttl));
        let outcome = match self.query_on_connection::<i64>(&cmd).await {
            Ok((id, _)) if id != bound => Outcome::Refused,
            Ok((_, reply)) => one_or_zero(Ok(reply)),
            Err(e) => e,
        };
        InstanceOutcome { connection, ..self.outcome(started, outcome) }
    }

    /// Sets the lease of `key` to `ttl` from now if `owner` holds it.
    pub async fn extend(&self, key: &str, owner: &str, ttl: Duration) -> InstanceOutcome {
        let started = Instant::now();
        let ttl_ms = millis(ttl).to_string();
        let reply = match self.mode {
            Mode::Module => self.query::<i64>(redis::cmd("LOCK.EXTEND").arg(key).arg(owner).arg(&ttl_ms)).await,
            Mode::Script => self.script::<i64>(&Script::new(EXTEND_SCRIPT), key, &[owner, &ttl_ms]).await,
        };
        self.outcome(started, one_or_zero(reply))
    }

    /// Waits in the server's FIFO queue for `key` (`LOCK.ACQUIRE ... [FENCE
    /// min] WAIT`) on a connection of its own: a blocked command must not
    /// hold up the shared connection. Closing it leaves the queue, so a
    /// connection whose wait did not end in a reply is closed, never reused.
    /// A new connection is identified before it waits, as the shared one
    /// is: a grant from an unidentified server never counts.
    #[allow(clippy::too_many_arguments)]
    pub async fn wait_for(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
        wait: Duration,
        fence: Option<i64>,
        share: Share,
        session: Option<u64>,
    ) -> InstanceOutcome {
        let started = Instant::now();
        let budget = wait.saturating_add(self.request_timeout);
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(key).arg(owner).arg(millis(ttl));
        share.args(&mut cmd);
        if let Some(min) = fence {
            cmd.arg("FENCE").arg(min);
        }
        cmd.arg("WAIT").arg(millis(wait).max(1));
        session_args(&mut cmd, session);
        let waited = async {
            match &self.client {
                Client::Single(_) | Client::Sentinel(_) => {
                    let fresh = || async {
                        // No response timeout inside: the whole wait is
                        // bounded below, and a timed-out connection dropped.
                        let config = redis::AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(self.connect_timeout))
                            .set_response_timeout(None);
                        let client = self.server_client().await.map_err(|e| self.failure(e))?;
                        let conn = client.get_multiplexed_async_connection_with_config(&config).await.map_err(|e| self.failure(e))?;
                        self.identified(Link::Single(conn.clone())).await?;
                        Ok::<_, CallError>(conn)
                    };
                    let idle = self.waiting_conns.lock().ok().and_then(|mut idle| idle.pop());
                    let reused = idle.is_some();
                    let mut conn = match idle {
                        Some(conn) => conn,
                        None => fresh().await?,
                    };
                    let mut reply = cmd.query_async::<Option<i64>>(&mut conn).await;
                    // An idle connection may have died with a server restart
                    // since its last wait, or its server been demoted by a
                    // failover; that says nothing of the server now. Asking
                    // again with the same owner is idempotent.
                    let stale = |e: &RedisError| e.is_connection_dropped() || e.is_io_error() || e.code() == Some("READONLY");
                    if reused && reply.as_ref().is_err_and(stale) {
                        if let Ok(mut idle) = self.waiting_conns.lock() {
                            idle.clear();
                        }
                        conn = fresh().await?;
                        reply = cmd.query_async::<Option<i64>>(&mut conn).await;
                    }
                    if reply.is_ok() {
                        if let Ok(mut idle) = self.waiting_conns.lock() {
                            if idle.len() < MAX_IDLE_WAITING_CONNS {
                                idle.push(conn);
                            }
                        }
                    }
                    match reply {
                        Err(e) if self.is_sentinel() && e.code() == Some("READONLY") => Err(failing_over(&e)),
                        reply => reply.map_err(|e| self.noted(classify(e))),
                    }
                }
                // Its own cluster connection too: a TRYAGAIN (the key's slot
                // moved while waiting) is retried at the key's new master.
                Client::Cluster(seeds, tls) => {
                    let mut conn = self
                        .cluster_client(seeds, tls.as_deref(), budget)
                        .map_err(|e| self.failure(e))?
                        .get_async_connection()
                        .await
                        .map_err(|e| self.failure(e))?;
                    cmd.query_async::<Option<i64>>(&mut conn).await.map_err(|e| self.noted(classify(e)))
                }
            }
        };
        let outcome = match tokio::time::timeout(budget.saturating_add(self.connect_timeout), waited).await {
            Err(_) => Outcome::Timeout,
            Ok(Ok(Some(token))) => Outcome::Granted { token: Some(token) },
            Ok(Ok(None)) => Outcome::Refused,
            Ok(Err(e)) => e,
        };
        // A hold bound to the waiting connection would end whenever that
        // connection does (it goes back to a pool, or is a cluster client's
        // own): it is granted again on the shared one, the same owner's
        // re-grant with the same token, which moves the binding there.
        if matches!(outcome, Outcome::Granted { .. }) && session.is_some() {
            let again = self.acquire_as(key, owner, ttl, None, share, session).await;
            return InstanceOutcome { latency: started.elapsed(), ..again };
        }
        self.outcome(started, outcome)
    }

    /// This instance's lock service as a whole.
    pub async fn summary(&self) -> InstanceSummary {
        let mut summary = InstanceSummary { server: self.name.clone(), ..InstanceSummary::default() };
        let reply = match self.mode {
            Mode::Module => self.query::<Value>(redis::cmd("INFO").arg("redislock")).await,
            Mode::Script => self.query::<Value>(&redis::cmd("PING")).await,
        };
        match reply {
            Ok(value) => {
                summary.reachable = true;
                if self.mode == Mode::Module {
                    summarize(&mut summary, &info_texts(value));
                }
            }
            Err(e) => (summary.reachable, summary.error, summary.failure) = for_status(e, &self.name),
        }
        summary
    }

    /// This instance's `count` most contended locks, most waiters first
    /// (a cluster's masters asked together).
    pub async fn top(&self, count: usize) -> InstanceTop {
        let mut top = InstanceTop { server: self.name.clone(), ..InstanceTop::default() };
        if self.mode == Mode::Script {
            top.error = Some(format!("{}: top needs the redislock module (script mode has no line)", self.name));
            return top;
        }
        let mut cmd = redis::cmd("LOCK.TOP");
        cmd.arg("COUNT").arg(count);
        let reply = self
            .request(|conn| {
                let cmd = cmd.clone();
                async move {
                    match conn {
                        Link::Cluster(mut c) => {
                            let every_master =
                                RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, Some(ResponsePolicy::CombineArrays)));
                            c.route_command(cmd, every_master).await
                        }
                        mut single => cmd.query_async::<Value>(&mut single).await,
                    }
                }
            })
            .await;
        match reply {
            Ok(value) => {
                top.reachable = true;
                top.locks = contended_locks(value);
                // A cluster's masters each answered their own, in turn.
                top.locks.sort_by(|a, b| {
                    b.waiters.cmp(&a.waiters).then(b.oldest_wait_ms.cmp(&a.oldest_wait_ms)).then_with(|| a.key.cmp(&b.key))
                });
                top.locks.truncate(count);
            }
            Err(e) => (top.reachable, top.error, top.failure) = for_status(e, &self.name),
        }
        top
    }

    /// This server's view of `key`.
    pub async fn status(&self, key: &str) -> InstanceStatus {
        let mut status = InstanceStatus {
            server: self.name.clone(),
            reachable: false,
            owner: None,
            token: None,
            pttl: None,
            waiters: None,
            quarantine_ms_left: None,
            error: None,
            failure: None,
            holders: Vec::new(),
            line: Vec::new(),
        };
        let reply = match self.mode {
            Mode::Module => self.query::<Value>(redis::cmd("LOCK.INFO").arg(key)).await,
            Mode::Script => self.query::<Value>(redis::cmd("GET").arg(key)).await,
        };
        match reply {
            Ok(value) => {
                status.reachable = true;
                fill_status(&mut status, value, self.mode);
                if self.mode == Mode::Script && status.owner.is_some() {
                    status.pttl = self.query::<i64>(redis::cmd("PTTL").arg(key)).await.ok();
                }
                if self.mode == Mode::Module {
                    let info = self.query::<Value>(redis::cmd("INFO").arg("redislock")).await.ok();
                    status.quarantine_ms_left = info.and_then(quarantine_left);
                    if status.waiters.is_some_and(|n| n > 0) {
                        let line = self.query::<Value>(redis::cmd("LOCK.WAITERS").arg(key).arg("COUNT").arg(STATUS_LINE_COUNT)).await;
                        status.line = line.map(waiter_states).unwrap_or_default();
                    }
                }
            }
            Err(e) => (status.reachable, status.error, status.failure) = for_status(e, &self.name),
        }
        status
    }
}

/// `READONLY` from the master the sentinels named: a failover under way,
/// which passes; not the configuration error it is from a listed replica.
fn failing_over(e: &RedisError) -> Outcome {
    Outcome::Unreachable {
        cause: UnreachableCause::Io,
        detail: format!("{}: the master the sentinels named was demoted (a failover); asking them again", reply_text(e)),
    }
}

/// `SESSION DELAY ms`, when the hold ends with its connection.
fn session_args(cmd: &mut Cmd, session: Option<u64>) {
    if let Some(delay) = session {
        cmd.arg("SESSION").arg("DELAY").arg(delay);
    }
}

/// The run_id of each server behind `conn` (one; a cluster's nodes).
async fn identify(mut conn: Link) -> Result<Vec<String>, Outcome> {
    let reply = redis::cmd("INFO").arg("server").query_async::<Value>(&mut conn).await.map_err(|e| match classify(e) {
        Outcome::AuthFailed(reply) => Outcome::AuthFailed(format!(
            "{reply}; the client tells servers apart by the run_id of INFO server: allow it, e.g. ACL SETUSER <user> +info"
        )),
        other => other,
    })?;
    let mut ids: Vec<String> = info_texts(reply)
        .iter()
        .filter_map(|text| text.lines().find_map(|l| l.strip_prefix("run_id:")).map(|id| id.trim().to_string()))
        .filter(|id| !id.is_empty())
        .collect();
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return Err(Outcome::Failed("INFO server gave no run_id: cannot tell this server from the others".into()));
    }
    Ok(ids)
}

/// `redislock_quarantine_ms_left` of an `INFO redislock` reply; from a
/// cluster (one reply per node) the longest, since any node may refuse.
fn quarantine_left(reply: Value) -> Option<i64> {
    info_texts(reply).iter().filter_map(|text| info_field(text, "redislock_quarantine_ms_left")).max()
}

/// The text of each node's INFO reply: one for a server, one per node for
/// a cluster.
fn info_texts(reply: Value) -> Vec<String> {
    match reply {
        Value::Map(per_node) => per_node.into_iter().flat_map(|(_, v)| info_texts(v)).collect(),
        other => String::from_redis_value(other).ok().into_iter().collect(),
    }
}

fn summarize(summary: &mut InstanceSummary, texts: &[String]) {
    let each = |name: &str| texts.iter().filter_map(|t| info_field(t, name)).collect::<Vec<i64>>();
    let sum = |name: &str| {
        let values = each(name);
        (!values.is_empty()).then(|| values.iter().sum())
    };
    let max = |name: &str| each(name).into_iter().max();
    summary.quarantine_ms_left = max("redislock_quarantine_ms_left");
    summary.highest_token = max("redislock_highest_token");
    summary.locks = sum("redislock_locks");
    summary.clients_waiting = sum("redislock_clients_waiting");
    summary.keys_waited = sum("redislock_keys_waited");
    if summary.highest_token.is_none() {
        summary.error = Some(format!("no redislock section in INFO: is the redislock module loaded on {}?", summary.server));
        summary.failure = Some(Outcome::ModuleMissing);
    }
}

/// An integer field of an INFO reply (`name:value` lines).
fn info_field(text: &str, name: &str) -> Option<i64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

fn fill_status(status: &mut InstanceStatus, value: Value, mode: Mode) {
    match (mode, value) {
        (_, Value::Nil) => {}
        (Mode::Script, v) => status.owner = String::from_redis_value(v).ok(),
        (Mode::Module, v @ (Value::Map(_) | Value::Array(_))) => {
            for (k, v) in field_pairs(v).unwrap_or_default() {
                set_field(status, k, v);
            }
        }
        (Mode::Module, other) => status.error = Some(format!("unexpected LOCK.INFO reply {other:?}")),
    }
}

fn set_field(status: &mut InstanceStatus, key: Value, value: Value) {
    let Ok(key) = String::from_redis_value(key) else { return };
    match key.as_str() {
        "owner" => status.owner = String::from_redis_value(value).ok(),
        "token" => status.token = i64::from_redis_value(value).ok(),
        "pttl" => status.pttl = i64::from_redis_value(value).ok(),
        "waiters" => status.waiters = i64::from_redis_value(value).ok(),
        // A lock held shared has no single owner (LOCK.INFO's owner is nil):
        // its holders stand in for it, so `status` does not call it free.
        "holders" => {
            status.holders = holder_states(&value);
            if status.owner.is_none() {
                status.owner = shared_holders(value);
            }
        }
        _ => {}
    }
}

/// LOCK.INFO's holder rows `[owner, token, pttl, held-ms, session]`.
fn holder_states(value: &Value) -> Vec<HolderState> {
    let Value::Array(rows) = value else { return Vec::new() };
    rows.iter()
        .filter_map(|row| match row {
            Value::Array(f) => Some(HolderState {
                owner: String::from_redis_value(f.first()?.clone()).ok()?,
                token: f.get(1).and_then(|v| i64::from_redis_value(v.clone()).ok()),
                pttl: f.get(2).and_then(|v| i64::from_redis_value(v.clone()).ok()).unwrap_or(-1),
                held_ms: f.get(3).and_then(|v| i64::from_redis_value(v.clone()).ok()),
                session: f.get(4).and_then(|v| i64::from_redis_value(v.clone()).ok()) == Some(1),
            }),
            _ => None,
        })
        .collect()
}

/// One entry of a reply made of maps (RESP3), or of flat field/value
/// arrays (RESP2), as its field/value pairs.
fn field_pairs(entry: Value) -> Option<Vec<(Value, Value)>> {
    match entry {
        Value::Map(pairs) => Some(pairs),
        Value::Array(items) => {
            let mut it = items.into_iter();
            Some(std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect())
        }
        _ => None,
    }
}

/// LOCK.WAITERS' entries (maps, or field/value arrays in RESP2).
fn waiter_states(value: Value) -> Vec<WaiterState> {
    let Value::Array(entries) = value else { return Vec::new() };
    entries
        .into_iter()
        .filter_map(|entry| {
            let pairs = field_pairs(entry)?;
            let mut w = WaiterState { owner: String::new(), mode: String::new(), limit: None, waited_ms: 0, wait_left_ms: -1 };
            for (k, v) in pairs {
                match String::from_redis_value(k).ok()?.as_str() {
                    "owner" => w.owner = String::from_redis_value(v).ok()?,
                    "mode" => w.mode = String::from_redis_value(v).ok()?,
                    "limit" => w.limit = i64::from_redis_value(v).ok(),
                    "waited_ms" => w.waited_ms = i64::from_redis_value(v).unwrap_or(0),
                    "wait_left_ms" => w.wait_left_ms = i64::from_redis_value(v).unwrap_or(-1),
                    _ => {}
                }
            }
            Some(w)
        })
        .collect()
}

/// The entries of a `LOCK.TOP` reply (maps, or flat arrays on RESP2).
fn contended_locks(value: Value) -> Vec<ContendedLock> {
    let Value::Array(entries) = value else { return Vec::new() };
    entries
        .into_iter()
        .filter_map(|entry| {
            let pairs = field_pairs(entry)?;
            let mut c = ContendedLock::default();
            for (k, v) in pairs {
                match String::from_redis_value(k).ok()?.as_str() {
                    "key" => c.key = String::from_utf8_lossy(&Vec::<u8>::from_redis_value(v).ok()?).into_owned(),
                    "waiters" => c.waiters = i64::from_redis_value(v).unwrap_or(0),
                    "oldest_wait_ms" => c.oldest_wait_ms = i64::from_redis_value(v).unwrap_or(0),
                    "mode" => c.mode = Option::<String>::from_redis_value(v).ok().flatten(),
                    "holders" => c.holders = i64::from_redis_value(v).unwrap_or(0),
                    "longest_hold_ms" => c.longest_hold_ms = Option::<i64>::from_redis_value(v).ok().flatten(),
                    _ => {}
                }
            }
            Some(c)
        })
        .collect()
}

/// `shared(N): owner,owner,...` from LOCK.INFO's holders, `None` when
/// there are none.
fn shared_holders(value: Value) -> Option<String> {
    let Value::Array(holders) = value else { return None };
    let owners: Vec<String> = holders
        .into_iter()
        .filter_map(|h| match h {
            Value::Array(fields) => fields.into_iter().next().and_then(|o| String::from_redis_value(o).ok()),
            _ => None,
        })
        .collect();
    (!owners.is_empty()).then(|| format!("shared({}): {}", owners.len(), owners.join(",")))
}

fn one_or_zero(reply: Result<i64, CallError>) -> Outcome {
    match reply {
        Ok(1) => Outcome::Done,
        Ok(_) => Outcome::Refused,
        Err(e) => e,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn connect_timeout(after: Duration, tls: bool) -> Outcome {
    // A plain server may never answer a TLS handshake.
    let detail = if tls {
        format!("no TLS connection within {} (a plain port may never answer the handshake: use redis:// for it)", ms_text(after))
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
fn reply_text(e: &RedisError) -> String {
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

/// A failed request on an established connection.
fn classify(e: RedisError) -> Outcome {
    if e.is_timeout() {
        return Outcome::Timeout;
    }
    if let Some(ms_left) = quarantine_ms_left(&e) {
        return Outcome::Quarantine { ms_left };
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

/// Checks a server URL for what the client library's parser reports only
/// as "did not parse": the scheme, the host, the port.
pub fn check_url(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("{url:?} has no scheme; use redis://host:port or redis+cluster://host:port,..."));
    };
    match scheme {
        "redis" | "rediss" => check_host_port(rest),
        "redis+cluster" | "rediss+cluster" => {
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
                Ok(())
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
}
