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
//!
//! Its jobs, each in a file: this one, the connections (made, identified,
//! retired, and every request's timeout); `backoff` (new connections to a
//! server that does not answer, spaced out); `commands` (each lock command
//! and its outcome); `replies` (what status replies say, as data);
//! `failures` (a failed request classified); `replicas` (a lock command
//! counted only once replicas acknowledged it, `WAIT`); `urls` (the server
//! list's entries checked and taken apart); `waits` (the waits running on
//! their own connections, and ending those of an acquisition given up).

mod backoff;
mod changes;
mod commands;
mod failures;
mod replicas;
mod replies;
mod share;
mod urls;
mod waits;

pub use backoff::Recoveries;
pub use changes::{announcement, changes_channel, Announcement, Barrier, ChangeKind, Changes, Reading};
pub use commands::{Ask, Keys};
use failures::{classify, connect_timeout, failing_over, for_status, reply_text};
use replicas::{wait_timeout, Replicas, Sent, Write};
use replies::{
    contended_locks, fill_status, holders_of, holding_of, holdings_of, info_texts, info_texts_by_node, quarantine_left, summarize,
    waiter_states,
};
pub use replies::{ContendedLock, HolderState, Holding, InstanceStatus, InstanceSummary, InstanceTop, WaiterState};
pub use share::{semaphore_terms, Share};
pub use urls::{check_url, is_cluster_url, is_tls_url, takes_more_hosts, with_scheme, CLUSTER_SCHEME, SENTINEL_SCHEME, TLS_CLUSTER_SCHEME};
use urls::{cluster_seeds, sentinel_client, sentinel_spec, without_wait_replicas};

use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::io::tcp::{socket2, TcpSettings};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Cmd, ConnectionAddr, FromRedisValue, Pipeline, RedisError, RedisFuture, Script, TlsMode, ToRedisArgs, Value};
use tokio::sync::Mutex;

// Re-exported: the data of what servers answered lives in `outcome`.
pub use crate::outcome::{seconds_left, InstanceOutcome, Outcome, Rejection, UnreachableCause};
use crate::resources::Resources;
use crate::settings::{Mode, Settings};
use crate::tls::{self, Tls};

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
    /// Each as its server knows it (`CLIENT INFO`), when known.
    waiting_conns: std::sync::Mutex<Vec<(MultiplexedConnection, Option<waits::ClientRef>)>>,
    /// The waits running on those connections, by owner (`abandon_waits`).
    waits: waits::Waits,
    /// New connections of every kind to this entry, spaced out while they
    /// fail (see `backoff`).
    backoff: backoff::Backoff,
    request_timeout: Duration,
    connect_timeout: Duration,
    mode: Mode,
    /// How many replicas must acknowledge a grant, extension or release
    /// here before it counts (`wait_replicas`; 0: none, see `replicas`).
    wait_replicas: u32,
    /// Its connections speak TLS (`rediss://`, `rediss+cluster://`).
    tls: bool,
    /// ... and check no certificate (`TlsSettings::insecure`, or
    /// `#insecure` in the URL): every connection error says so.
    insecure: bool,
    /// What this entry's lock requests met (its handle's registry reads it).
    pub metrics: std::sync::Arc<crate::metrics::ServerMetrics>,
}

/// Idle wait connections kept per instance; more waits at once open more.
const MAX_IDLE_WAITING_CONNS: usize = 64;

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

impl Instance {
    /// An instance on its own (a list of one); a `rediss://` one reads
    /// `settings.tls` itself.
    pub fn new(url: &str, settings: &Settings) -> Result<Instance, RedisError> {
        Instance::in_list(url, settings, 0, std::sync::Arc::new(Identities::default()), std::sync::Arc::default(), None)
    }

    /// Entry `index` of a server list whose servers are told apart by
    /// `identities`, and whose entries back off together (`recoveries`,
    /// see `Recoveries`); `tls`: the list's TLS settings, read once for
    /// every `rediss://` entry (`None`: read here if this entry needs them).
    pub fn in_list(
        url: &str,
        settings: &Settings,
        index: usize,
        identities: std::sync::Arc<Identities>,
        recoveries: std::sync::Arc<Recoveries>,
        tls: Option<&Tls>,
    ) -> Result<Instance, RedisError> {
        let config_error = |what: &'static str, e: String| RedisError::from((redis::ErrorKind::InvalidClientConfig, what, e));
        check_url(url).map_err(|e| config_error("bad server URL", e))?;
        // `host:port` is `redis://host:port`.
        let url = &*with_scheme(url);
        let tls = match (is_tls_url(url), tls) {
            (false, _) => None,
            (true, Some(tls)) => Some(tls.clone()),
            (true, None) => Some(Tls::load(&settings.tls).map_err(|e| config_error("bad TLS settings", e))?),
        };
        let (client, name, addresses, insecure, wait_replicas) = if url.starts_with(SENTINEL_SCHEME) {
            let spec = sentinel_spec(url).map_err(|e| config_error("bad sentinel URL", e))?;
            let client = sentinel_client(&spec, tcp_settings(settings.request_timeout))?;
            let hosts: Vec<String> = spec.sentinels.iter().map(|(h, p)| format!("{h}:{p}")).collect();
            // Two entries naming one master of the same sentinels are one;
            // another master of the same sentinels is another member.
            let addresses = hosts.iter().map(|h| format!("{h}/{}", spec.master).to_ascii_lowercase()).collect();
            let name = format!("sentinel:{}/{}", hosts.join(","), spec.master);
            (Client::Sentinel(Box::new(Mutex::new(client))), name, addresses, false, spec.wait_replicas)
        } else if is_cluster_url(url) {
            let seeds = cluster_seeds(url).map_err(|e| config_error("bad cluster URL", e))?;
            let mut names = Vec::with_capacity(seeds.len());
            for seed in &seeds {
                names.push(redis::Client::open(seed.as_str())?.get_connection_info().addr().to_string());
            }
            let addresses = names.iter().map(|n| n.to_ascii_lowercase()).collect();
            let insecure = tls.as_ref().is_some_and(|t| t.insecure);
            (Client::Cluster(seeds, tls.map(Box::new)), format!("cluster:{}", names.join(",")), addresses, insecure, 0)
        } else {
            let (url, wait_replicas) = without_wait_replicas(url).map_err(|e| config_error("bad server URL", e))?;
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
            (Client::Single(Box::new(client)), name, addresses, insecure, wait_replicas.unwrap_or(0))
        };
        Ok(Instance {
            metrics: std::sync::Arc::new(crate::metrics::ServerMetrics::new(index, &name, settings.metrics)),
            name,
            index,
            addresses,
            identities,
            client,
            conn: Mutex::new(None),
            connections_made: std::sync::atomic::AtomicU64::new(0),
            waiting_conns: std::sync::Mutex::new(Vec::new()),
            waits: waits::Waits::default(),
            backoff: backoff::Backoff::new(recoveries),
            request_timeout: settings.request_timeout,
            connect_timeout: settings.connect_timeout,
            mode: settings.mode,
            wait_replicas,
            tls: is_tls_url(url),
            insecure,
        })
    }

    /// How long until a new connection to this entry may be tried, while
    /// its connections fail (see `backoff`); `None` while they do not.
    pub fn paused_for(&self) -> Option<Duration> {
        self.backoff.paused_for()
    }

    /// Whether this instance's certificates go unchecked (insecure TLS).
    pub fn insecure(&self) -> bool {
        self.insecure
    }

    /// The shared connection, made and identified if there is none: a
    /// connection is used only once its server was found to be this entry
    /// (see `Identities`), so an address that now leads to another listed
    /// server (a moved VIP or DNS name, a forwarder retargeted) never
    /// counts twice, and one whose identity cannot be read in time counts
    /// as not answering. `by`: the deadline of the request that needs it.
    async fn connection(&self, by: Option<tokio::time::Instant>) -> Result<(u64, Link), CallError> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let conn = self.paced(self.connect_by(by)).await?;
        let number = self.connections_made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *slot = Some((number, conn.clone()));
        Ok((number, conn))
    }

    /// A new shared connection, made and identified within the connect and
    /// request timeouts, and by `by`: one that the request's deadline cuts
    /// short fails (a connect timeout) rather than being dropped, so that
    /// it counts as the failed attempt it is (see `backoff`).
    async fn connect_by(&self, by: Option<tokio::time::Instant>) -> Result<Link, CallError> {
        let attempt = async {
            let connecting = async {
                match &self.client {
                    Client::Single(_) | Client::Sentinel(_) => {
                        // No response timeout inside: `request` bounds each one.
                        let config = redis::AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(self.connect_timeout))
                            .set_response_timeout(None);
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
            Ok(conn)
        };
        match by {
            None => attempt.await,
            Some(by) => tokio::time::timeout_at(by, attempt)
                .await
                .unwrap_or_else(|_| Err(self.noted(connect_timeout(self.request_timeout.min(self.connect_timeout), self.tls)))),
        }
    }

    /// `attempt` (a new connection of any kind to this entry, made and
    /// identified) now, or its failure at once while the entry backs off
    /// (see `backoff`); how it ended is recorded there. Behind a trait
    /// object, as `server_client`'s: every request's future would carry
    /// the connection's deep type.
    fn paced<'a, T: Send + 'a>(
        &'a self,
        attempt: impl std::future::Future<Output = Result<T, CallError>> + Send + 'a,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, CallError>> + Send + 'a>> {
        Box::pin(async move {
            let admitted = self.backoff.admit()?;
            let result = attempt.await;
            self.backoff.ended(admitted, result.as_ref().map(|_| ()));
            result
        })
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
        let claimed = self.identities.claim(self.index, &self.name, &run_ids);
        if claimed.is_err() {
            self.metrics.identity_refused();
        }
        claimed
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
        self.connection(None).await.map(|_| ())
    }

    /// A cluster client whose commands give up after `response_timeout`;
    /// the request deadline above bounds MOVED/ASK/TRYAGAIN retries too.
    /// Over TLS with `tls`, to every node.
    fn cluster_client(&self, seeds: &[String], tls: Option<&Tls>, response_timeout: Duration) -> redis::RedisResult<ClusterClient> {
        self.cluster_builder(seeds, tls, response_timeout).build()
    }

    /// `cluster_client`, before it is built.
    fn cluster_builder(&self, seeds: &[String], tls: Option<&Tls>, response_timeout: Duration) -> ClusterClientBuilder {
        let mut builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
            .connection_timeout(self.connect_timeout)
            .response_timeout(response_timeout);
        if let Some(tls) = tls {
            builder = builder.tls(if tls.insecure { TlsMode::Insecure } else { TlsMode::Secure }).certs(tls.certificates.clone());
        }
        builder
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
    /// `send` is given the request's deadline too (a `WAIT` it sends must
    /// end before it).
    async fn request<T, F, Fut>(&self, send: F) -> Result<T, CallError>
    where
        F: Fn(Link, tokio::time::Instant) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let now = tokio::time::Instant::now();
        let far = now + Duration::from_secs(86_400);
        let mut deadline = now.checked_add(self.request_timeout).unwrap_or(far);
        // The first contact of an entry (a TLS handshake, a Sentinel
        // look-up, the identity) gets the whole connect timeout, whatever
        // request needs it, and the request its own time after it: on a
        // busy machine they outlast a request timeout, and an entry that
        // never connected would never start. Later reconnects fit in the
        // request's time.
        let first_contact = self.connections_made.load(std::sync::atomic::Ordering::Relaxed) == 0;
        let connected_by = match first_contact {
            true => now.checked_add(self.connect_timeout.saturating_add(self.request_timeout)).unwrap_or(far),
            false => deadline,
        };
        let mut retried = false;
        loop {
            let (number, conn) =
                match tokio::time::timeout_at(connected_by.max(deadline), self.connection(Some(connected_by.max(deadline)))).await {
                    // Still waiting for another request's connection when the
                    // request's time ran out.
                    Err(_) => {
                        let within = if first_contact { self.connect_timeout } else { self.request_timeout.min(self.connect_timeout) };
                        return Err(self.noted(connect_timeout(within, self.tls)));
                    }
                    Ok(conn) => conn?,
                };
            if first_contact {
                let now = tokio::time::Instant::now();
                deadline = deadline.max(now.checked_add(self.request_timeout).unwrap_or(far));
            }
            match tokio::time::timeout_at(deadline, send(conn, deadline)).await {
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
                Ok(Err(e)) if self.demoted(&e) => {
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
        self.request(|mut conn, _| async move { cmd.query_async::<T>(&mut conn).await }).await
    }

    async fn script<T: FromRedisValue, K: ToRedisArgs + Sync>(&self, script: &Script, keys: &[K], args: &[&str]) -> Result<T, CallError> {
        self.request(|mut conn, _| async move {
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(key);
            }
            for a in args {
                invocation.arg(*a);
            }
            invocation.invoke_async::<T>(&mut conn).await
        })
        .await
    }

    /// What a lock request sent at `started` came to, counted: its round
    /// trip, and its failure or quarantine.
    fn outcome(&self, started: Instant, outcome: Outcome) -> InstanceOutcome {
        let latency = started.elapsed();
        self.metrics.answered(latency);
        self.metrics.outcome(&outcome);
        crate::traces::answered(outcome.kind(), granted_token(&outcome));
        InstanceOutcome { server: self.name.clone(), outcome, latency, connection: None }
    }

    /// `outcome` of a blocking wait (`wait_for`): its time is the wait's,
    /// not a round trip, and a wait its acquisition gave up ends as a
    /// killed connection, no failure of the server: only a quarantine
    /// counts.
    fn waited(&self, started: Instant, outcome: Outcome) -> InstanceOutcome {
        if matches!(outcome, Outcome::Quarantine { .. }) {
            self.metrics.outcome(&outcome);
        }
        crate::traces::answered(outcome.kind(), granted_token(&outcome));
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
}

/// The token of a grant, for its trace.
fn granted_token(outcome: &Outcome) -> Option<i64> {
    match outcome {
        Outcome::Granted { token } => *token,
        _ => None,
    }
}
