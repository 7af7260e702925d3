//! One connection per server: a multiplexed connection that reconnects,
//! with connect and per-request timeouts. Requests to one server travel on
//! one connection in order, so a release sent after an acquire that timed
//! out is executed after it: a late acquire cannot land after its release.

use std::fmt;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, RedisError, Script, Value};
use tokio::sync::Mutex;

use crate::settings::{Mode, Settings};

/// What one server did with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Granted (module mode carries the token).
    Granted { token: Option<i64> },
    /// Held by another owner (acquire), or not held by us (release, extend).
    Refused,
    /// Released or extended.
    Done,
    Timeout,
    Unreachable(String),
    /// An error reply.
    Failed(String),
    /// The server does not know the module's commands.
    ModuleMissing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceOutcome {
    pub server: String,
    pub outcome: Outcome,
    pub latency: Duration,
}

impl fmt::Display for InstanceOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.server)?;
        match &self.outcome {
            Outcome::Granted { token: Some(t) } => write!(f, "granted (token {t})"),
            Outcome::Granted { token: None } => write!(f, "granted"),
            Outcome::Refused => write!(f, "refused"),
            Outcome::Done => write!(f, "ok"),
            Outcome::Timeout => write!(f, "timeout"),
            Outcome::Unreachable(e) => write!(f, "unreachable ({e})"),
            Outcome::Failed(e) => write!(f, "error ({e})"),
            Outcome::ModuleMissing => write!(f, "LOCK.* unknown"),
        }
    }
}

const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
const EXTEND_SCRIPT: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

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
    pub error: Option<String>,
}

pub struct Instance {
    /// `host:port`, as errors name the server.
    pub name: String,
    client: redis::Client,
    conn: Mutex<Option<ConnectionManager>>,
    request_timeout: Duration,
    connect_timeout: Duration,
    mode: Mode,
}

enum CallError {
    Timeout,
    Unreachable(String),
    Reply(String),
}

impl Instance {
    pub fn new(url: &str, settings: &Settings) -> Result<Instance, RedisError> {
        let client = redis::Client::open(url)?;
        let info = client.get_connection_info();
        let name = format!("{}", info.addr());
        Ok(Instance {
            name,
            client,
            conn: Mutex::new(None),
            request_timeout: settings.request_timeout,
            connect_timeout: settings.connect_timeout,
            mode: settings.mode,
        })
    }

    async fn connection(&self) -> Result<ConnectionManager, CallError> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.request_timeout))
            .set_number_of_retries(1);
        let connecting = ConnectionManager::new_with_config(self.client.clone(), config);
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(conn)) => {
                *slot = Some(conn.clone());
                Ok(conn)
            }
            Ok(Err(e)) => Err(CallError::Unreachable(e.to_string())),
            Err(_) => Err(CallError::Unreachable("connect timeout".into())),
        }
    }

    /// Runs a request within the request timeout. A connection that died
    /// while idle (a server restarted between two requests) only shows it
    /// on use; the request is then sent once more on the reconnected
    /// connection, within the same timeout. Every request here is
    /// idempotent (an acquire repeats with the same owner).
    async fn request<T, F, Fut>(&self, send: F) -> Result<T, CallError>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let now = tokio::time::Instant::now();
        let deadline = now.checked_add(self.request_timeout).unwrap_or(now + Duration::from_secs(86_400));
        let mut retried = false;
        loop {
            let conn = match tokio::time::timeout_at(deadline, self.connection()).await {
                Err(_) => return Err(CallError::Timeout),
                Ok(conn) => conn?,
            };
            match tokio::time::timeout_at(deadline, send(conn)).await {
                Err(_) => return Err(CallError::Timeout),
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if !retried && (e.is_connection_dropped() || e.is_io_error()) => retried = true,
                Ok(Err(e)) => return Err(classify(e)),
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
        InstanceOutcome { server: self.name.clone(), outcome, latency: started.elapsed() }
    }

    /// `LOCK.ACQUIRE key owner ttl [FENCE min]`, or `SET key owner NX PX ttl`.
    pub async fn acquire(&self, key: &str, owner: &str, ttl: Duration, fence: Option<i64>) -> InstanceOutcome {
        let started = Instant::now();
        let ttl_ms = millis(ttl);
        let outcome = match self.mode {
            Mode::Module => {
                let mut cmd = redis::cmd("LOCK.ACQUIRE");
                cmd.arg(key).arg(owner).arg(ttl_ms);
                if let Some(min) = fence {
                    cmd.arg("FENCE").arg(min);
                }
                match self.query::<Option<i64>>(&cmd).await {
                    Ok(Some(token)) => Outcome::Granted { token: Some(token) },
                    Ok(None) => Outcome::Refused,
                    Err(e) => e.into(),
                }
            }
            Mode::Script => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(owner).arg("NX").arg("PX").arg(ttl_ms);
                match self.query::<Value>(&cmd).await {
                    Ok(Value::Okay) | Ok(Value::SimpleString(_)) => Outcome::Granted { token: None },
                    Ok(_) => Outcome::Refused,
                    Err(e) => e.into(),
                }
            }
        };
        self.outcome(started, outcome)
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

    /// Waits in the server's FIFO queue for `key` (`LOCK.ACQUIRE ... WAIT`)
    /// on a connection of its own: a blocked command must not hold up the
    /// shared connection. Closing it leaves the queue.
    pub async fn wait_for(&self, key: &str, owner: &str, ttl: Duration, wait: Duration) -> InstanceOutcome {
        let started = Instant::now();
        let budget = wait.saturating_add(self.request_timeout);
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(budget));
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(key).arg(owner).arg(millis(ttl)).arg("WAIT").arg(millis(wait).max(1));
        let waited = async {
            let mut conn = self.client.get_multiplexed_async_connection_with_config(&config).await?;
            cmd.query_async::<Option<i64>>(&mut conn).await
        };
        let outcome = match tokio::time::timeout(budget.saturating_add(self.connect_timeout), waited).await {
            Err(_) => Outcome::Timeout,
            Ok(Ok(Some(token))) => Outcome::Granted { token: Some(token) },
            Ok(Ok(None)) => Outcome::Refused,
            Ok(Err(e)) => classify(e).into(),
        };
        self.outcome(started, outcome)
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
                    let info = self.query::<String>(redis::cmd("INFO").arg("redislock")).await.ok();
                    status.quarantine_ms_left = info.as_deref().and_then(|text| info_field(text, "redislock_quarantine_ms_left"));
                }
            }
            Err(CallError::Reply(e)) => {
                status.reachable = true;
                status.error = Some(e);
            }
            Err(CallError::Timeout) => status.error = Some("timeout".into()),
            Err(CallError::Unreachable(e)) => status.error = Some(e),
        }
        status
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
        (Mode::Module, Value::Map(pairs)) => {
            for (k, v) in pairs {
                set_field(status, k, v);
            }
        }
        (Mode::Module, Value::Array(items)) => {
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
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
        _ => {}
    }
}

fn one_or_zero(reply: Result<i64, CallError>) -> Outcome {
    match reply {
        Ok(1) => Outcome::Done,
        Ok(_) => Outcome::Refused,
        Err(e) => e.into(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn classify(e: RedisError) -> CallError {
    if e.is_timeout() {
        CallError::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_unrecoverable_error() {
        CallError::Unreachable(e.to_string())
    } else {
        CallError::Reply(e.to_string())
    }
}

impl From<CallError> for Outcome {
    fn from(e: CallError) -> Outcome {
        match e {
            CallError::Timeout => Outcome::Timeout,
            CallError::Unreachable(msg) => Outcome::Unreachable(msg),
            CallError::Reply(msg) if msg.to_ascii_lowercase().contains("unknown command") => Outcome::ModuleMissing,
            CallError::Reply(msg) => Outcome::Failed(msg),
        }
    }
}
