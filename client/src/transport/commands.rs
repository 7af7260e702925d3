//! Each lock command on one instance (acquire, extend, release, wait,
//! status, top, summary): the request sent, its reply made an outcome.

use super::*;

const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

const EXTEND_SCRIPT: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// A set in script mode, all or nothing as `LOCK.MACQUIRE`: nothing is
/// set while any key exists.
const ACQUIRE_SET_SCRIPT: &str = "for _, k in ipairs(KEYS) do if redis.call('exists', k) == 1 then return 0 end end \
     for _, k in ipairs(KEYS) do redis.call('set', k, ARGV[1], 'PX', ARGV[2]) end return 1";

/// How many keys of the set `ARGV[1]` held and no longer holds.
const RELEASE_SET_SCRIPT: &str = "local n = 0 for _, k in ipairs(KEYS) do \
     if redis.call('get', k) == ARGV[1] then n = n + redis.call('del', k) end end return n";

/// How many keys of the set `ARGV[1]` holds, their leases now `ARGV[2]` ms.
const EXTEND_SET_SCRIPT: &str = "local n = 0 for _, k in ipairs(KEYS) do \
     if redis.call('get', k) == ARGV[1] then n = n + redis.call('pexpire', k, ARGV[2]) end end return n";

/// The keys one lock request names: one lock (`LOCK.ACQUIRE key ...`), or
/// a set of them, taken, extended and released whole (`LOCK.MACQUIRE
/// numkeys key ... `, Redis's numkeys convention).
#[derive(Clone, Copy, Debug)]
pub enum Keys<'a> {
    One(&'a str),
    Set(&'a [String]),
}

impl<'a> From<&'a str> for Keys<'a> {
    fn from(key: &'a str) -> Keys<'a> {
        Keys::One(key)
    }
}

impl<'a> From<&'a String> for Keys<'a> {
    fn from(key: &'a String) -> Keys<'a> {
        Keys::One(key)
    }
}

/// A slice of one key is that key (`LOCK.ACQUIRE`), of several a set.
impl<'a> From<&'a [String]> for Keys<'a> {
    fn from(keys: &'a [String]) -> Keys<'a> {
        match keys {
            [one] => Keys::One(one),
            set => Keys::Set(set),
        }
    }
}

impl<'a> From<&'a Resources> for Keys<'a> {
    fn from(resources: &'a Resources) -> Keys<'a> {
        resources.names().into()
    }
}

impl Keys<'_> {
    /// `one key` or `set numkeys key ...`.
    fn command(self, one: &str, set: &str) -> Cmd {
        match self {
            Keys::One(key) => {
                let mut cmd = redis::cmd(one);
                cmd.arg(key);
                cmd
            }
            Keys::Set(keys) => {
                let mut cmd = redis::cmd(set);
                cmd.arg(keys.len()).arg(keys);
                cmd
            }
        }
    }

    fn count(self) -> usize {
        match self {
            Keys::One(_) => 1,
            Keys::Set(keys) => keys.len(),
        }
    }

    /// A count of members released or extended: done when it is every
    /// member (a set partly lost is not extended, and counts as not held).
    fn all_or_none(self, reply: i64) -> Outcome {
        match usize::try_from(reply) {
            Ok(n) if n == self.count() => Outcome::Done,
            _ => Outcome::Refused,
        }
    }
}

/// What one grant asks for besides the keys, the owner and the lease:
/// how it holds them (`share`), the least token it takes (`fence`: `FENCE
/// min`), the connection it is bound to (`session`: `SESSION DELAY ms`,
/// the hold ending that long after the connection closes) and the value
/// stored with an exclusive hold (`value`: `VALUE text`, an election's;
/// a re-grant without one keeps it), and the name the caller gave its
/// hold (`owner`: `redlock serve`'s clients name theirs; each round then
/// holds under the name, `:` and 16 random hex digits; `None`, a new
/// random owner per round). Built from `new` (or `exclusive`) with only what
/// differs: `Ask::new(share).session(delay)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask<'a> {
    pub share: Share,
    pub fence: Option<i64>,
    pub session: Option<u64>,
    pub value: Option<&'a str>,
    pub owner: Option<&'a str>,
}

impl<'a> Ask<'a> {
    /// A hold in `share` mode, and nothing else asked.
    pub fn new(share: Share) -> Ask<'a> {
        Ask { share, fence: None, session: None, value: None, owner: None }
    }

    /// An exclusive hold, and nothing else asked.
    pub fn exclusive() -> Ask<'a> {
        Ask::new(Share::Exclusive)
    }

    /// The same, with a token of at least `min` when given.
    pub fn fence(self, min: Option<i64>) -> Ask<'a> {
        Ask { fence: min, ..self }
    }

    /// The same, bound to its connection when `delay` is given.
    pub fn session(self, delay: Option<u64>) -> Ask<'a> {
        Ask { session: delay, ..self }
    }

    /// The same, storing `text` with the hold when given.
    pub fn value(self, text: Option<&'a str>) -> Ask<'a> {
        Ask { value: text, ..self }
    }

    /// The same, each round held under `owner` and a random suffix of its
    /// own instead of a new random owner, when given.
    pub fn owner(self, owner: Option<&'a str>) -> Ask<'a> {
        Ask { owner, ..self }
    }
}

/// Waiters `status` lists per server.
const STATUS_LINE_COUNT: i64 = 20;

/// `VALUE text`, stored with the hold (an election's advertised leader).
fn value_args(cmd: &mut Cmd, value: Option<&str>) {
    if let Some(text) = value {
        cmd.arg("VALUE").arg(text);
    }
}

/// `SESSION DELAY ms`, when the hold ends with its connection.
fn session_args(cmd: &mut Cmd, session: Option<u64>) {
    if let Some(delay) = session {
        cmd.arg("SESSION").arg("DELAY").arg(delay);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Instance {
    /// A release's, an extension's or a proclamation's count of `keys`
    /// (see `Keys::all_or_none`), as it counts once its replicas said.
    fn counted(&self, keys: Keys<'_>, sent: Result<Sent<i64>, CallError>, write: Write) -> Outcome {
        match sent {
            Ok(Sent { reply, replicas, .. }) => self.confirmed(keys.all_or_none(reply), &replicas, write),
            Err(e) => e,
        }
    }

    /// `LOCK.ACQUIRE key owner ttl [SHARED [LIMIT n [PERMITS k]]] [FENCE
    /// min] [SESSION DELAY d] [VALUE text]` as `ask` says, or in script
    /// mode `SET key owner NX PX ttl` (exclusive only, never bound, no
    /// value).
    pub async fn acquire_as(&self, keys: impl Into<Keys<'_>>, owner: &str, ttl: Duration, ask: Ask<'_>) -> InstanceOutcome {
        let Ask { share, fence, session, value, .. } = ask;
        let keys = keys.into();
        let started = Instant::now();
        let ttl_ms = millis(ttl);
        let outcome = match self.mode {
            Mode::Module if matches!((keys, share), (Keys::Set(_), Share::Permits(..))) => {
                Outcome::Failed("a set of several resources takes no semaphore limit".into())
            }
            Mode::Module if matches!((keys, share), (Keys::One(_), Share::Slots { .. })) => {
                Outcome::Failed("a semaphore's slots come with its limit record: two keys at least".into())
            }
            Mode::Module => {
                let mut cmd = keys.command("LOCK.ACQUIRE", "LOCK.MACQUIRE");
                cmd.arg(owner).arg(ttl_ms);
                share.args(&mut cmd);
                if let Some(min) = fence {
                    cmd.arg("FENCE").arg(min);
                }
                session_args(&mut cmd, session);
                value_args(&mut cmd, value);
                let (outcome, connection) = match self.lock_query::<Option<i64>>(&cmd, self.binds_connection(session)).await {
                    Ok(Sent { reply: Some(token), connection, replicas }) => {
                        (self.confirmed(Outcome::Granted { token: Some(token) }, &replicas, Write::Grant), connection)
                    }
                    Ok(Sent { reply: None, .. }) => (Outcome::Refused, None),
                    Err(e) => (e, None),
                };
                // Only a grant that counts is kept bound to its connection.
                let connection = connection.filter(|_| matches!(outcome, Outcome::Granted { .. }));
                return InstanceOutcome { connection, ..self.outcome(started, outcome) };
            }
            Mode::Script if share != Share::Exclusive => {
                Outcome::Failed("shared locks need the redislock module (script mode has none)".into())
            }
            Mode::Script if value.is_some() => Outcome::Failed("a value stored with a lock needs the redislock module".into()),
            Mode::Script => match keys {
                Keys::One(key) => {
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(key).arg(owner).arg("NX").arg("PX").arg(ttl_ms);
                    match self.lock_query::<Value>(&cmd, false).await {
                        Ok(Sent { reply: Value::Okay | Value::SimpleString(_), replicas, .. }) => {
                            self.confirmed(Outcome::Granted { token: None }, &replicas, Write::Grant)
                        }
                        Ok(_) => Outcome::Refused,
                        Err(e) => e,
                    }
                }
                Keys::Set(set) => match self.lock_script::<i64, _>(ACQUIRE_SET_SCRIPT, set, &[owner, &ttl_ms.to_string()]).await {
                    Ok(Sent { reply: 1, replicas, .. }) => self.confirmed(Outcome::Granted { token: None }, &replicas, Write::Grant),
                    Ok(_) => Outcome::Refused,
                    Err(e) => e,
                },
            },
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

    /// Releases `keys` if `owner` holds them; `Done` when every one was
    /// released.
    pub async fn release(&self, keys: impl Into<Keys<'_>>, owner: &str) -> InstanceOutcome {
        let keys = keys.into();
        let started = Instant::now();
        let sent = match (self.mode, keys) {
            (Mode::Module, _) => self.lock_query::<i64>(keys.command("LOCK.RELEASE", "LOCK.MRELEASE").arg(owner), false).await,
            (Mode::Script, Keys::One(key)) => self.lock_script::<i64, _>(RELEASE_SCRIPT, &[key], &[owner]).await,
            (Mode::Script, Keys::Set(set)) => self.lock_script::<i64, _>(RELEASE_SET_SCRIPT, set, &[owner]).await,
        };
        self.outcome(started, self.counted(keys, sent, Write::Release))
    }

    /// `extend` of a hold bound to connection `connection` (see
    /// `Settings::release_on_disconnect`): only on that connection. Once
    /// the shared connection was remade, the server has ended (or will end,
    /// after its lock-delay) the hold it bound to the old one: the hold is
    /// lost here, and not extended as if nothing happened. The server
    /// refuses an extension from another connection too (the lease it cut
    /// to the lock-delay is never revived); the id check here covers a
    /// server that would not.
    pub async fn extend_bound(&self, keys: Keys<'_>, owner: &str, ttl: Duration, connection: Option<u64>) -> InstanceOutcome {
        let Some(bound) = connection.filter(|_| matches!(self.client, Client::Single(_) | Client::Sentinel(_))) else {
            return self.extend(keys, owner, ttl).await;
        };
        let started = Instant::now();
        let mut cmd = keys.command("LOCK.EXTEND", "LOCK.MEXTEND");
        cmd.arg(owner).arg(millis(ttl));
        let outcome = match self.lock_query::<i64>(&cmd, true).await {
            Ok(Sent { connection: Some(id), .. }) if id != bound => Outcome::Refused,
            sent => self.counted(keys, sent, Write::Extension),
        };
        InstanceOutcome { connection, ..self.outcome(started, outcome) }
    }

    /// `LOCK.PROCLAIM key owner value`: the value stored with `owner`'s
    /// exclusive hold replaced. A hold bound to connection `connection` is
    /// proclaimed on that connection only, as `extend_bound` extends it.
    pub async fn proclaim(&self, key: &str, owner: &str, value: &str, connection: Option<u64>) -> InstanceOutcome {
        let started = Instant::now();
        if self.mode == Mode::Script {
            return self.outcome(started, Outcome::Failed("a value stored with a lock needs the redislock module".into()));
        }
        let mut cmd = redis::cmd("LOCK.PROCLAIM");
        cmd.arg(key).arg(owner).arg(value);
        let bound = connection.filter(|_| matches!(self.client, Client::Single(_) | Client::Sentinel(_)));
        let outcome = match self.lock_query::<i64>(&cmd, bound.is_some()).await {
            Ok(Sent { connection: Some(id), .. }) if Some(id) != bound => Outcome::Refused,
            sent => self.counted(Keys::One(key), sent, Write::Proclamation),
        };
        InstanceOutcome { connection, ..self.outcome(started, outcome) }
    }

    /// Who holds `key` exclusively here, with its token and value
    /// (`LOCK.INFO`): `Ok(None)` when nobody does (or it is held shared),
    /// `Err` when the server did not answer.
    pub async fn holding(&self, key: &str) -> Result<Option<Holding>, Outcome> {
        if self.mode == Mode::Script {
            return Err(Outcome::Failed("a value stored with a lock needs the redislock module".into()));
        }
        self.query::<Value>(redis::cmd("LOCK.INFO").arg(key)).await.map(holding_of)
    }

    /// Every holder of `key` here with its token and value (`LOCK.INFO`'s
    /// holder rows: a group's members), oldest first; `Err` when the
    /// server did not answer.
    pub async fn holdings(&self, key: &str) -> Result<Vec<Holding>, Outcome> {
        if self.mode == Mode::Script {
            return Err(Outcome::Failed("a value stored with a lock needs the redislock module".into()));
        }
        self.query::<Value>(redis::cmd("LOCK.INFO").arg(key)).await.map(|reply| holdings_of(&reply))
    }

    /// Sets the lease of `keys` to `ttl` from now if `owner` holds them;
    /// `Done` when it holds every one.
    pub async fn extend(&self, keys: impl Into<Keys<'_>>, owner: &str, ttl: Duration) -> InstanceOutcome {
        let keys = keys.into();
        let started = Instant::now();
        let ttl_ms = millis(ttl).to_string();
        let sent = match (self.mode, keys) {
            (Mode::Module, _) => self.lock_query::<i64>(keys.command("LOCK.EXTEND", "LOCK.MEXTEND").arg(owner).arg(&ttl_ms), false).await,
            (Mode::Script, Keys::One(key)) => self.lock_script::<i64, _>(EXTEND_SCRIPT, &[key], &[owner, &ttl_ms]).await,
            (Mode::Script, Keys::Set(set)) => self.lock_script::<i64, _>(EXTEND_SET_SCRIPT, set, &[owner, &ttl_ms]).await,
        };
        self.outcome(started, self.counted(keys, sent, Write::Extension))
    }

    /// `LOCK.REVOKE key [OWNER owner]`: `owner`'s hold of `key` (every hold
    /// without one) taken away. `Ok((token, ended))`: the token the server
    /// issued for it and the holds it ended (0 when none was held).
    pub async fn revoke(&self, key: &str, owner: Option<&str>) -> Result<(i64, i64), Outcome> {
        if self.mode == Mode::Script {
            return Err(Outcome::Failed("revoking a hold needs the redislock module".into()));
        }
        let mut cmd = redis::cmd("LOCK.REVOKE");
        cmd.arg(key);
        if let Some(owner) = owner {
            cmd.arg("OWNER").arg(owner);
        }
        match self.lock_query::<(i64, i64)>(&cmd, false).await {
            Ok(Sent { reply, .. }) => Ok(reply),
            Err(e) => Err(e),
        }
    }

    /// `LOCK.RESIZE key limit`: the held semaphore `key` given the limit
    /// `limit`. `Ok(Some(granted))`: resized, with the waiters it granted;
    /// `Ok(None)`: nobody holds it here.
    pub async fn resize(&self, key: &str, limit: u32) -> Result<Option<i64>, Outcome> {
        if self.mode == Mode::Script {
            return Err(Outcome::Failed("resizing a semaphore needs the redislock module".into()));
        }
        let mut cmd = redis::cmd("LOCK.RESIZE");
        cmd.arg(key).arg(limit);
        match self.lock_query::<Option<i64>>(&cmd, false).await {
            Ok(Sent { reply, .. }) => Ok(reply),
            Err(e) => Err(e),
        }
    }

    /// `LOCK.ASK key [MESSAGE message]`: each holder of `key` asked to let
    /// it go (an announcement on the lock's channel). `Ok(asked)`: how
    /// many holders the server asked (0 when nobody holds it).
    pub async fn ask(&self, key: &str, message: Option<&str>) -> Result<i64, Outcome> {
        if self.mode == Mode::Script {
            return Err(Outcome::Failed("asking a holder needs the redislock module".into()));
        }
        let mut cmd = redis::cmd("LOCK.ASK");
        cmd.arg(key);
        if let Some(message) = message {
            cmd.arg("MESSAGE").arg(message);
        }
        match self.lock_query::<i64>(&cmd, false).await {
            Ok(Sent { reply, .. }) => Ok(reply),
            Err(e) => Err(e),
        }
    }

    /// Waits in the server's FIFO queue for `key` (`LOCK.ACQUIRE ... WAIT`,
    /// asking `ask`) on a connection of its own: a blocked command must not
    /// hold up the shared connection. Closing it leaves the queue, so a
    /// connection whose wait did not end in a reply is closed, never reused.
    /// A new connection is identified before it waits, as the shared one
    /// is: a grant from an unidentified server never counts.
    pub async fn wait_for(&self, keys: impl Into<Keys<'_>>, owner: &str, ttl: Duration, wait: Duration, ask: Ask<'_>) -> InstanceOutcome {
        let Ask { share, fence, session, value, .. } = ask;
        let keys = keys.into();
        let started = Instant::now();
        let budget = wait.saturating_add(self.request_timeout);
        let mut cmd = keys.command("LOCK.ACQUIRE", "LOCK.MACQUIRE");
        cmd.arg(owner).arg(millis(ttl));
        share.args(&mut cmd);
        if let Some(min) = fence {
            cmd.arg("FENCE").arg(min);
        }
        cmd.arg("WAIT").arg(millis(wait).max(1));
        session_args(&mut cmd, session);
        value_args(&mut cmd, value);
        // A grant made while waiting is confirmed by a `WAIT` behind it on
        // the same connection, which runs once the wait ends; not one bound
        // to its connection, which is granted again on the shared one (and
        // confirmed there) below.
        let confirm = session.is_none();
        let replicated = wait_timeout(self.request_timeout);
        let waited = async {
            match &self.client {
                Client::Single(_) | Client::Sentinel(_) => {
                    let fresh = || async {
                        // No response timeout inside: the whole wait is
                        // bounded below, and a timed-out connection dropped.
                        let config = redis::AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(self.connect_timeout))
                            .set_response_timeout(None);
                        let mut conn = self
                            .paced(async {
                                let client = self.server_client().await.map_err(|e| self.failure(e))?;
                                let conn =
                                    client.get_multiplexed_async_connection_with_config(&config).await.map_err(|e| self.failure(e))?;
                                self.identified(Link::Single(conn.clone())).await?;
                                Ok(conn)
                            })
                            .await?;
                        // Its id, for ending its waits (`abandon_waits`).
                        let id = waits::client_ref(&mut conn, self.request_timeout).await;
                        Ok::<_, CallError>((conn, id))
                    };
                    // A connection whose last wait got its reply goes back.
                    let keep = |conn: MultiplexedConnection, id: Option<waits::ClientRef>| {
                        if let Ok(mut idle) = self.waiting_conns.lock() {
                            if idle.len() < MAX_IDLE_WAITING_CONNS {
                                idle.push((conn, id));
                            }
                        }
                    };
                    let idle = self.waiting_conns.lock().ok().and_then(|mut idle| idle.pop());
                    let reused = idle.is_some();
                    let (mut conn, mut id) = match idle {
                        Some(idle) => idle,
                        None => fresh().await?,
                    };
                    // An owner that already gave up sends nothing.
                    let Some(entry) = self.waits.enter(owner, id.clone(), self.forget_left_after()) else {
                        keep(conn, id);
                        return Ok((Sent { connection: None, reply: None, replicas: Replicas::NotAsked }, None));
                    };
                    let mut reply = self.lock_on::<Option<i64>>(&mut conn, &cmd, confirm, replicated).await;
                    // An idle connection may have died with a server restart
                    // since its last wait, or its server been demoted by a
                    // failover; that says nothing of the server now. Asking
                    // again with the same owner is idempotent.
                    let stale = |e: &RedisError| e.is_connection_dropped() || e.is_io_error() || e.code() == Some("READONLY");
                    if reused && reply.as_ref().is_err_and(stale) {
                        if let Ok(mut idle) = self.waiting_conns.lock() {
                            idle.clear();
                        }
                        (conn, id) = fresh().await?;
                        if !entry.moved_to(id.clone()) {
                            keep(conn, id);
                            return Ok((Sent { connection: None, reply: None, replicas: Replicas::NotAsked }, None));
                        }
                        reply = self.lock_on::<Option<i64>>(&mut conn, &cmd, confirm, replicated).await;
                    }
                    // A connection whose wait was abandoned may be killed:
                    // never kept.
                    if reply.is_ok() && !entry.answered() {
                        keep(conn, id);
                    }
                    match reply {
                        Err(e) if self.demoted(&e) => Err(failing_over(&e)),
                        reply => reply.map(|r| (r, Some(entry))).map_err(|e| self.noted(classify(e))),
                    }
                }
                // Its own cluster connection too: a TRYAGAIN (the key's slot
                // moved while waiting) is retried at the key's new master.
                Client::Cluster(seeds, tls) => {
                    let mut conn = self
                        .paced(async {
                            let client = self.cluster_client(seeds, tls.as_deref(), budget).map_err(|e| self.failure(e))?;
                            client.get_async_connection().await.map_err(|e| self.failure(e))
                        })
                        .await?;
                    let sent = self.lock_on::<Option<i64>>(&mut conn, &cmd, confirm, replicated).await;
                    sent.map(|r| (r, None)).map_err(|e| self.noted(classify(e)))
                }
            }
        };
        let (outcome, entry) = match tokio::time::timeout(budget.saturating_add(self.connect_timeout), waited).await {
            Err(_) => (Outcome::Timeout, None),
            Ok(Ok((Sent { reply: Some(token), replicas, .. }, entry))) => {
                (self.confirmed(Outcome::Granted { token: Some(token) }, &replicas, Write::Grant), entry)
            }
            Ok(Ok((Sent { reply: None, .. }, _))) => (Outcome::Refused, None),
            Ok(Err(e)) => (e, None),
        };
        // A hold bound to the waiting connection would end whenever that
        // connection does (it goes back to a pool, or is a cluster client's
        // own): it is granted again on the shared one, the same owner's
        // re-grant with the same token, which moves the binding there. Not
        // for an owner that gave up: its hold ends with the connection, and
        // `abandon_waits` releases it after this (the entry kept till then).
        if matches!(outcome, Outcome::Granted { .. }) && session.is_some() {
            if entry.as_ref().is_some_and(|e| e.abandoned()) {
                return self.waited(started, Outcome::Refused);
            }
            let again = self.acquire_as(keys, owner, ttl, Ask { fence: None, ..ask }).await;
            return InstanceOutcome { latency: started.elapsed(), ..again };
        }
        self.waited(started, outcome)
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

    /// This instance's `INFO redislock` texts, each node's (named within a
    /// Cluster) when it answered with the module's section; `None` when it
    /// did not answer, answered without the section, or runs no module
    /// (script mode).
    pub async fn module_info(&self) -> Option<Vec<(Option<String>, String)>> {
        if self.mode != Mode::Module {
            return None;
        }
        let reply = self.query::<Value>(redis::cmd("INFO").arg("redislock")).await.ok()?;
        let texts = info_texts_by_node(reply);
        let with_module = texts.iter().any(|(_, text)| text.contains("redislock_"));
        with_module.then_some(texts)
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
            .request(|conn, _| {
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

    /// This server's view of `key`: its holders (`holders`), and in module
    /// mode its quarantine and line too; in script mode the lease.
    pub async fn status(&self, key: &str) -> InstanceStatus {
        let (mut status, answered) = self.holders_answered(key).await;
        if !answered {
            return status;
        }
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
        status
    }

    /// Who holds `key` here, in one request (`LOCK.INFO key`; in script
    /// mode `GET key`): `status` without the quarantine, the line, and a
    /// script-mode lease.
    pub async fn holders(&self, key: &str) -> InstanceStatus {
        self.holders_answered(key).await.0
    }

    /// `holders`, and whether the request was answered without an error.
    async fn holders_answered(&self, key: &str) -> (InstanceStatus, bool) {
        let mut status = InstanceStatus {
            server: self.name.clone(),
            reachable: false,
            owner: None,
            token: None,
            pttl: None,
            waiters: None,
            limit: None,
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
        let answered = reply.is_ok();
        match reply {
            Ok(value) => {
                status.reachable = true;
                fill_status(&mut status, value, self.mode);
            }
            Err(e) => (status.reachable, status.error, status.failure) = for_status(e, &self.name),
        }
        (status, answered)
    }
}
