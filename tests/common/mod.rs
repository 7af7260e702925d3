//! Test harness for the redislock integration tests.
//!
//! Every test starts its own real `redis-server` process(es) on free local
//! ports, bound to 127.0.0.1 only, with a fresh temporary data directory,
//! through the workspace's one launcher (`testkit::Process`, `testkit/`).
//! Servers are killed (by the PID we spawned) and reaped in `Drop`, also when
//! the test panics. Reply helpers for the tests' synchronous connections
//! follow the `Server` type.
#![allow(dead_code, unused_imports)]

pub mod cluster;
pub mod dump;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{Connection, RedisError, Value};

/// One at a time, in `tests/module/`, for the tests that load both cores
/// (the 16-thread hammer and histories) and those that bound how long they
/// take beside a memory fill (eviction): a test holds the guard from its
/// start to its end. Each of their files was a program of its own, so they
/// never ran beside each other's load.
static HEAVY: Mutex<()> = Mutex::new(());

pub fn one_heavy_at_a_time() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Read timeout on every test connection, so a wedged server fails the test
/// instead of hanging it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

pub use testkit::history;
pub use testkit::server::READY_DEADLINE;
pub use testkit::{libfaketime, module_path, now_unix_us, server_binary, valkey_binary, StartError};

/// A fencing token well above anything a server's counter (seeded from
/// the clock in µs at load) reaches by itself during a test, and within
/// the default `redislock.max-token-lead` (60 s): 30 s ahead of the clock.
pub fn far_future_token() -> i64 {
    now_unix_us() + 30_000_000
}

/// Milliseconds since the Unix epoch, from the system clock.
pub fn now_unix_ms() -> i64 {
    now_unix_us() / 1000
}

/// A server of the module tests: testkit's launcher (`testkit::Process`,
/// whose fields and signals, `stop`, `kill9`, `log_tail`... it derefs
/// to) with this suite's defaults: the module loaded, no persistence,
/// DEBUG and MODULE commands enabled, unless the extra args say otherwise.
pub struct Server(testkit::Process);

impl std::ops::Deref for Server {
    type Target = testkit::Process;
    fn deref(&self) -> &testkit::Process {
        &self.0
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut testkit::Process {
        &mut self.0
    }
}

fn spec(binary: &Path, module_args: &[&str], args: &[&str], envs: &[(&str, &str)]) -> testkit::Spec {
    let mut spec = testkit::Spec::new(Some(module_path()));
    spec.binary = binary.to_path_buf();
    spec.module_args = module_args.iter().map(|s| s.to_string()).collect();
    spec.args = args.iter().map(|s| s.to_string()).collect();
    spec.envs = envs.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect();
    spec.defaults = [
        ("--save", ""),
        ("--appendonly", "no"),
        ("--enable-debug-command", "yes"),
        ("--enable-module-command", "yes"),
        ("--loglevel", "notice"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    spec
}

impl Server {
    /// A server with the module loaded without module args.
    pub fn start() -> Server {
        Self::start_full(&[], &[])
    }

    /// A server with extra redis-server args (e.g. `["--appendonly", "yes"]`).
    pub fn start_with(args: &[&str]) -> Server {
        Self::start_full(&[], args)
    }

    /// A server with module args (after the module path on the loadmodule
    /// line) and extra redis-server args.
    pub fn start_full(module_args: &[&str], args: &[&str]) -> Server {
        match Self::try_start_full(module_args, args) {
            Ok(s) => s,
            Err(e) => panic!("redis-server did not start: {e}"),
        }
    }

    /// Like `start_full`, but reports a failed start instead of panicking.
    /// Returns promptly when the process exits during startup.
    pub fn try_start_full(module_args: &[&str], args: &[&str]) -> Result<Server, StartError> {
        Self::try_start_binary(&server_binary(), module_args, args)
    }

    /// A server from the given executable (e.g. `valkey_binary()`).
    pub fn start_binary(binary: &Path, module_args: &[&str], args: &[&str]) -> Server {
        match Self::try_start_binary(binary, module_args, args) {
            Ok(s) => s,
            Err(e) => panic!("{} did not start: {e}", binary.display()),
        }
    }

    pub fn try_start_binary(binary: &Path, module_args: &[&str], args: &[&str]) -> Result<Server, StartError> {
        Self::try_start_binary_env(binary, module_args, args, &[])
    }

    /// A server from `binary` with extra environment variables (e.g.
    /// LD_PRELOAD of libfaketime).
    pub fn start_binary_env(binary: &Path, module_args: &[&str], args: &[&str], envs: &[(&str, &str)]) -> Server {
        match Self::try_start_binary_env(binary, module_args, args, envs) {
            Ok(s) => s,
            Err(e) => panic!("{} did not start: {e}", binary.display()),
        }
    }

    pub fn try_start_binary_env(binary: &Path, module_args: &[&str], args: &[&str], envs: &[(&str, &str)]) -> Result<Server, StartError> {
        testkit::Process::start(spec(binary, module_args, args, envs)).map(Server)
    }

    /// A server of the suite's binary on exactly `port` (one attempt; the
    /// caller picks ports, e.g. a Cluster node whose bus port must be free).
    pub fn try_start_at(port: u16, module_args: &[&str], args: &[&str]) -> Result<Server, StartError> {
        let mut spec = spec(&server_binary(), module_args, args, &[]);
        spec.ports = testkit::Ports::Fixed(port);
        testkit::Process::start(spec).map(Server)
    }

    /// A RESP2 connection (read timeout 30 s).
    pub fn conn(&self) -> Connection {
        self.conn_url(&format!("redis://127.0.0.1:{}/", self.port))
    }

    /// A RESP3 connection (read timeout 30 s).
    pub fn conn_resp3(&self) -> Connection {
        self.conn_url(&format!("redis://127.0.0.1:{}/?protocol=resp3", self.port))
    }

    fn conn_url(&self, url: &str) -> Connection {
        let client = redis::Client::open(url).expect("redis client from URL");
        let con = client.get_connection_with_timeout(Duration::from_secs(5)).unwrap_or_else(|e| {
            panic!("connect to redis-server on port {} failed: {e}\n--- log tail ---\n{}", self.port, self.log_tail(30))
        });
        con.set_read_timeout(Some(READ_TIMEOUT)).expect("set read timeout");
        con.set_write_timeout(Some(READ_TIMEOUT)).expect("set write timeout");
        con
    }

    /// SIGSTOP the server (it stops reading its sockets, like a lagging host).
    pub fn sigstop(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT a server stopped with `sigstop`.
    pub fn sigcont(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Stop gracefully (see `testkit::Process::stop`) if running, then
    /// start again with the same port, dir and args.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Stop gracefully if running, then start again with the same port,
    /// dir and redis-server args but these module args.
    pub fn restart_with_module_args(&mut self, module_args: &[&str]) {
        self.stop();
        self.set_module_args(module_args);
        self.start_again();
    }

    /// redis-server args for the next `start_again` / `restart` (the same
    /// port and dir; e.g. another `--appendfsync`).
    pub fn set_extra_args(&mut self, args: &[&str]) {
        self.0.spec.args = args.iter().map(|s| s.to_string()).collect();
    }

    /// Module args for the next `start_again` / `restart`.
    pub fn set_module_args(&mut self, module_args: &[&str]) {
        self.0.spec.module_args = module_args.iter().map(|s| s.to_string()).collect();
    }

    /// Start a stopped (or killed) server again on the same port, dir, args.
    pub fn start_again(&mut self) {
        if let Err(e) = self.0.start_again() {
            panic!("redis-server did not restart on port {}: {e}", self.port);
        }
    }
}

// ---------------------------------------------------------------------------
// Reply helpers
// ---------------------------------------------------------------------------

/// Full text of a server error as the server sent it, e.g.
/// `ERR owner must not be empty` or `WRONGTYPE Operation against ...`.
pub fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(c), Some(d)) => format!("{c} {d}"),
        (Some(c), None) => c.to_string(),
        _ => format!("<not a server error: {e:?}>"),
    }
}

fn server_err_text(e: &redis::ServerError) -> String {
    match e.details() {
        Some(d) => format!("{} {}", e.code(), d),
        None => e.code().to_string(),
    }
}

/// Send a command and return the raw reply; a top-level server error becomes
/// `Err(full error text)`. Nested errors (e.g. inside EXEC) stay as
/// `Value::ServerError`. I/O errors (dropped connection) panic with context.
pub fn try_cmd(con: &mut Connection, cmd: &redis::Cmd) -> Result<Value, String> {
    let packed = cmd.get_packed_command();
    con.send_packed_command(&packed).unwrap_or_else(|e| panic!("sending {} failed: {e}", describe(&packed)));
    match con.recv_response() {
        Ok(Value::ServerError(e)) => Err(server_err_text(&e)),
        Ok(v) => Ok(v),
        Err(e) if e.code().is_some() && !e.is_io_error() => Err(err_text(&e)),
        Err(e) => panic!("no reply to {}: {e} ({e:?})", describe(&packed)),
    }
}

/// Like `try_cmd` but returns the error text or panics on a non-error reply.
pub fn expect_err(con: &mut Connection, cmd: &redis::Cmd) -> String {
    match try_cmd(con, cmd) {
        Err(t) => t,
        Ok(v) => panic!("expected an error reply to {}, got {v:?}", describe(&cmd.get_packed_command())),
    }
}

/// Like `try_cmd` but panics on an error reply.
pub fn ok_cmd(con: &mut Connection, cmd: &redis::Cmd) -> Value {
    match try_cmd(con, cmd) {
        Ok(v) => v,
        Err(t) => panic!("unexpected error reply to {}: {t}", describe(&cmd.get_packed_command())),
    }
}

/// Short printable description of a packed command (for messages).
pub fn describe(packed: &[u8]) -> String {
    let s = String::from_utf8_lossy(packed).replace("\r\n", " ");
    if s.len() > 200 {
        format!("{}… ({} bytes)", &s[..s.char_indices().nth(200).map(|(i, _)| i).unwrap_or(s.len())], packed.len())
    } else {
        s
    }
}

pub fn int_of(v: &Value, what: &str) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("{what}: expected an integer reply, got {other:?}"),
    }
}

pub fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

/// `LOCK.ACQUIRE key owner ttl` → Some(token) or None (held by another).
pub fn acquire(con: &mut Connection, key: &[u8], owner: &[u8], ttl: i64) -> Option<i64> {
    let v = ok_cmd(con, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(ttl));
    match v {
        Value::Nil => None,
        Value::Int(t) => Some(t),
        other => panic!("LOCK.ACQUIRE replied neither integer nor nil: {other:?}"),
    }
}

/// `LOCK.ACQUIRE key owner ttl FENCE min`.
pub fn acquire_fence(con: &mut Connection, key: &[u8], owner: &[u8], ttl: i64, min: i64) -> Option<i64> {
    let v = ok_cmd(con, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(ttl).arg("FENCE").arg(min));
    match v {
        Value::Nil => None,
        Value::Int(t) => Some(t),
        other => panic!("LOCK.ACQUIRE FENCE replied neither integer nor nil: {other:?}"),
    }
}

/// Acquire that must be granted; returns the token.
pub fn grant(con: &mut Connection, key: &str, owner: &str, ttl: i64) -> i64 {
    acquire(con, key.as_bytes(), owner.as_bytes(), ttl).unwrap_or_else(|| panic!("LOCK.ACQUIRE {key} {owner} {ttl} was not granted"))
}

pub fn release(con: &mut Connection, key: &[u8], owner: &[u8]) -> i64 {
    let v = ok_cmd(con, cmd("LOCK.RELEASE").arg(key).arg(owner));
    int_of(&v, "LOCK.RELEASE")
}

pub fn extend(con: &mut Connection, key: &[u8], owner: &[u8], ttl: i64) -> i64 {
    let v = ok_cmd(con, cmd("LOCK.EXTEND").arg(key).arg(owner).arg(ttl));
    int_of(&v, "LOCK.EXTEND")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub owner: Vec<u8>,
    pub token: i64,
    pub pttl: i64,
    pub waiters: i64,
}

/// LOCK.INFO of any lock, including a plain-string lock (token nil).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnyLockInfo {
    pub owner: Vec<u8>,
    /// `None` for a plain-string lock.
    pub token: Option<i64>,
    pub pttl: i64,
    pub waiters: i64,
}

fn bulk(v: &Value, what: &str) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.as_bytes().to_vec(),
        other => panic!("{what}: expected a string, got {other:?}"),
    }
}

fn token_of(v: &Value) -> Option<i64> {
    match v {
        Value::Nil => None,
        Value::Int(i) => Some(*i),
        other => panic!("LOCK.INFO token must be an integer or nil, got {other:?}"),
    }
}

/// The fields of a LOCK.INFO reply in order, from a RESP2 flat array or a
/// RESP3 map; strictly the documented nine: owner, token, pttl, waiters,
/// mode, limit, holders, taken, value.
pub fn info_fields(v: Value) -> Option<Vec<(Vec<u8>, Value)>> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return None,
        Value::Array(items) => {
            assert_eq!(items.len(), 18, "LOCK.INFO RESP2 reply must have 18 elements: {items:?}");
            let mut it = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        Value::Map(pairs) => pairs,
        other => panic!("LOCK.INFO: unexpected reply {other:?}"),
    };
    let fields: Vec<(Vec<u8>, Value)> = pairs.into_iter().map(|(k, v)| (bulk(&k, "LOCK.INFO field"), v)).collect();
    let names: Vec<&[u8]> = fields.iter().map(|(k, _)| k.as_slice()).collect();
    let expected: [&[u8]; 9] = [b"owner", b"token", b"pttl", b"waiters", b"mode", b"limit", b"holders", b"taken", b"value"];
    assert_eq!(names, expected, "LOCK.INFO fields and their order");
    Some(fields)
}

/// Parse the LOCK.INFO reply of an exclusive lock strictly (see
/// `info_fields`): mode exclusive, no limit, and one holder that repeats
/// owner, token and pttl.
pub fn parse_info_any(v: Value) -> Option<AnyLockInfo> {
    let fields = info_fields(v)?;
    let field = |i: usize| &fields[i].1;
    let owner = match field(0) {
        Value::BulkString(b) => b.clone(),
        other => panic!("LOCK.INFO owner must be a bulk string, got {other:?}"),
    };
    let token = token_of(field(1));
    let pttl = int_of(field(2), "LOCK.INFO pttl");
    let waiters = int_of(field(3), "LOCK.INFO waiters");
    assert_eq!(bulk(field(4), "LOCK.INFO mode"), b"exclusive", "{fields:?}");
    assert_eq!(field(5), &Value::Nil, "an exclusive lock has no limit: {fields:?}");
    assert_eq!(field(7), &Value::Nil, "an exclusive lock has no permits taken: {fields:?}");
    match field(6) {
        Value::Array(holders) => {
            assert_eq!(holders.len(), 1, "an exclusive lock has one holder: {fields:?}");
            match &holders[0] {
                Value::Array(h) if h.len() == 6 || h.len() == 7 => {
                    // Held-for is known for a module lock, not for a plain string.
                    match (&h[1], &h[3]) {
                        (Value::Nil, held) => assert_eq!(held, &Value::Nil, "a plain string's held-ms: {fields:?}"),
                        (_, held) => assert!(int_of(held, "holder held-ms") >= 0, "held-ms: {fields:?}"),
                    }
                    assert!(matches!(h[4], Value::Int(0 | 1)), "session flag: {fields:?}");
                    assert_eq!(h[5], Value::Int(1), "an exclusive hold takes one permit: {fields:?}");
                    assert_eq!(bulk(&h[0], "holder owner"), owner, "{fields:?}");
                    assert_eq!(token_of(&h[1]), token, "{fields:?}");
                    assert_eq!(int_of(&h[2], "holder pttl"), pttl, "{fields:?}");
                }
                other => panic!("LOCK.INFO holder must be [owner, token, pttl, held-ms, session, permits, value?], got {other:?}"),
            }
        }
        other => panic!("LOCK.INFO holders must be an array, got {other:?}"),
    }
    Some(AnyLockInfo { owner, token, pttl, waiters })
}

/// Like `parse_info_any`, for a module lock: the token must be an integer.
pub fn parse_info(v: Value) -> Option<LockInfo> {
    parse_info_any(v).map(|i| LockInfo {
        token: i.token.unwrap_or_else(|| {
            panic!(
                "LOCK.INFO token is nil (a plain-string lock?) where a module lock was expected: owner {:?}",
                String::from_utf8_lossy(&i.owner)
            )
        }),
        owner: i.owner,
        pttl: i.pttl,
        waiters: i.waiters,
    })
}

/// One row of LOCK.INFO's `holders`: `[owner, token, pttl, held-ms,
/// session, permits]`, strictly (a plain string's token and held-ms are
/// nil), and a shared holder's value as a 7th item when it has one.
#[derive(Clone, Debug, PartialEq)]
pub struct HolderRow {
    pub owner: Vec<u8>,
    pub token: Option<i64>,
    pub pttl: i64,
    pub held_ms: Option<i64>,
    pub session: bool,
    pub permits: i64,
    /// A shared holder's value; `None` when its row has six items.
    pub value: Option<Vec<u8>>,
}

/// The `holders` field of a LOCK.INFO reply's fields (`info_fields`), in
/// the order the server lists them.
pub fn holder_rows_of(fields: &[(Vec<u8>, Value)]) -> Vec<HolderRow> {
    let Value::Array(rows) = &fields[6].1 else { panic!("LOCK.INFO holders must be an array: {fields:?}") };
    rows.iter()
        .map(|row| match row {
            Value::Array(h) if h.len() == 6 || h.len() == 7 => {
                let held_ms = match &h[3] {
                    Value::Nil => None,
                    held => Some(int_of(held, "LOCK.INFO holder held-ms")),
                };
                let session = match &h[4] {
                    Value::Int(0) => false,
                    Value::Int(1) => true,
                    other => panic!("LOCK.INFO holder session flag must be 0 or 1, got {other:?}"),
                };
                HolderRow {
                    owner: bulk(&h[0], "LOCK.INFO holder owner"),
                    token: token_of(&h[1]),
                    pttl: int_of(&h[2], "LOCK.INFO holder pttl"),
                    held_ms,
                    session,
                    permits: int_of(&h[5], "LOCK.INFO holder permits"),
                    value: h.get(6).map(|v| bulk(v, "LOCK.INFO holder value")),
                }
            }
            other => panic!("LOCK.INFO holder must be [owner, token, pttl, held-ms, session, permits, value?], got {other:?}"),
        })
        .collect()
}

/// The holders LOCK.INFO lists for `key`; none when the key is free.
pub fn holder_rows(con: &mut Connection, key: &str) -> Vec<HolderRow> {
    info_fields(ok_cmd(con, cmd("LOCK.INFO").arg(key))).map(|fields| holder_rows_of(&fields)).unwrap_or_default()
}

/// LOCK.INFO's `value` of `key`: `None` when nil or when nothing holds it.
pub fn value_of(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    let fields = info_fields(ok_cmd(con, cmd("LOCK.INFO").arg(key)))?;
    match &fields[8].1 {
        Value::Nil => None,
        Value::BulkString(b) => Some(b.clone()),
        other => panic!("LOCK.INFO value must be a bulk string or nil, got {other:?}"),
    }
}

/// LOCK.INFO of any lock (plain-string locks included).
pub fn info_any(con: &mut Connection, key: &[u8]) -> Option<AnyLockInfo> {
    parse_info_any(ok_cmd(con, cmd("LOCK.INFO").arg(key)))
}

/// The `waiters` field of LOCK.INFO, of any kind of lock; panics when the
/// key does not exist.
pub fn waiters(con: &mut Connection, key: &[u8]) -> i64 {
    let fields = info_fields(ok_cmd(con, cmd("LOCK.INFO").arg(key)))
        .unwrap_or_else(|| panic!("LOCK.INFO {}: key does not exist (expected a held lock)", String::from_utf8_lossy(key)));
    int_of(&fields[3].1, "LOCK.INFO waiters")
}

/// Poll LOCK.INFO until `waiters` equals `n` (10 s deadline).
pub fn wait_waiters(con: &mut Connection, key: &[u8], n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let last = waiters(con, key);
        if last == n {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for LOCK.INFO {} waiters == {n} (last seen {last})", String::from_utf8_lossy(key));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// LOCK.MRELEASE of `keys` by `owner`: how many of them it released.
pub fn mrelease(con: &mut Connection, keys: &[&str], owner: &str) -> i64 {
    int_of(&ok_cmd(con, cmd("LOCK.MRELEASE").arg(keys.len()).arg(keys).arg(owner)), "LOCK.MRELEASE")
}

/// How many EXECs the server ran (`calls` of `cmdstat_exec` in INFO
/// commandstats; 0 before the first).
pub fn exec_calls(con: &mut Connection) -> i64 {
    let text: String = cmd("INFO").arg("commandstats").query(con).expect("INFO commandstats");
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_exec:calls="))
        .map_or(0, |rest| rest.split(',').next().and_then(|n| n.parse().ok()).expect("calls is an integer"))
}

/// A connection for one waiter, whose reply is read later
/// (`recv_token`), with a read timeout that bounds the test.
pub fn waiter(s: &Server, read_timeout: Duration) -> Connection {
    let c = s.conn();
    c.set_read_timeout(Some(read_timeout)).expect("set waiter read timeout");
    c
}

/// An ACQUIRE or MACQUIRE reply (`recv_reply`): Some(token), None for nil;
/// panics on errors.
pub fn recv_token(con: &mut Connection, what: &str) -> Option<i64> {
    match recv_reply(con, what) {
        Ok(Value::Int(t)) => Some(t),
        Ok(Value::Nil) => None,
        Ok(other) => panic!("{what}: replied neither integer nor nil: {other:?}"),
        Err(e) => panic!("{what}: replied an error: {e}"),
    }
}

/// `CLIENT ID` of a connection.
pub fn client_id(con: &mut Connection) -> i64 {
    int_of(&ok_cmd(con, cmd("CLIENT").arg("ID")), "CLIENT ID")
}

/// `blocked_clients` from INFO clients.
pub fn blocked_clients(con: &mut Connection) -> i64 {
    info_field_i64(con, "clients", "blocked_clients")
}

/// Send a command without reading its reply (for blocking commands and
/// pipelining across connections); read it later with `recv_reply`.
pub fn send_cmd(con: &mut Connection, cmd: &redis::Cmd) {
    let packed = cmd.get_packed_command();
    con.send_packed_command(&packed).unwrap_or_else(|e| panic!("sending {} failed: {e}", describe(&packed)));
}

/// Read the next reply on `con`; a top-level error becomes `Err(text)`.
/// Panics (naming `what`) on I/O errors, including the read timeout.
pub fn recv_reply(con: &mut Connection, what: &str) -> Result<Value, String> {
    match con.recv_response() {
        Ok(Value::ServerError(e)) => Err(server_err_text(&e)),
        Ok(v) => Ok(v),
        Err(e) if e.code().is_some() && !e.is_io_error() => Err(err_text(&e)),
        Err(e) => panic!("no reply to {what}: {e} ({e:?})"),
    }
}

/// Like `recv_reply`, but `None` when no reply arrives (read timeout or
/// another I/O error) instead of panicking.
pub fn try_recv_reply(con: &mut Connection) -> Option<Result<Value, String>> {
    match con.recv_response() {
        Ok(Value::ServerError(e)) => Some(Err(server_err_text(&e))),
        Ok(v) => Some(Ok(v)),
        Err(e) if e.code().is_some() && !e.is_io_error() => Some(Err(err_text(&e))),
        Err(_) => None,
    }
}

pub fn info(con: &mut Connection, key: &[u8]) -> Option<LockInfo> {
    parse_info(ok_cmd(con, cmd("LOCK.INFO").arg(key)))
}

pub fn pttl(con: &mut Connection, key: &[u8]) -> i64 {
    int_of(&ok_cmd(con, cmd("PTTL").arg(key)), "PTTL")
}

pub fn pexpiretime(con: &mut Connection, key: &[u8]) -> i64 {
    int_of(&ok_cmd(con, cmd("PEXPIRETIME").arg(key)), "PEXPIRETIME")
}

/// `GET key` as text (`None`: no such key).
pub fn get_text(con: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

/// `r` is an error reply starting with `prefix` (`what` says which).
pub fn assert_refused(r: Result<Value, String>, prefix: &str, what: &str) {
    match r {
        Err(e) => assert!(e.starts_with(prefix), "{what}: expected an error starting {prefix:?}, got {e:?}"),
        Ok(v) => panic!("{what}: expected {prefix:?}, got {v:?}"),
    }
}

pub fn exists(con: &mut Connection, key: &[u8]) -> bool {
    int_of(&ok_cmd(con, cmd("EXISTS").arg(key)), "EXISTS") == 1
}

/// One field of `INFO <section>`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap_or_else(|e| panic!("INFO {section} failed: {e}"));
    let prefix = format!("{field}:");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(&prefix) {
            return rest.trim().to_string();
        }
    }
    panic!("INFO {section} has no field {field}:\n{text}")
}

pub fn info_field_i64(con: &mut Connection, section: &str, field: &str) -> i64 {
    let s = info_field(con, section, field);
    s.parse().unwrap_or_else(|e| panic!("INFO {section} {field}={s:?} is not an integer: {e}"))
}

/// Poll `f` until it returns true or `timeout` passes (then panic with `what`).
pub fn wait_until<F: FnMut() -> bool>(timeout: Duration, what: &str, mut f: F) {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Wait until the AOF buffer has been written to the file and return
/// `aof_current_size`. Redis appends propagated commands to its AOF buffer
/// during the command and writes it before replying, except that with
/// `appendfsync everysec` the write may be postponed while a background
/// fsync runs; so wait for `aof_buffer_length:0`.
pub fn wait_aof_flushed(c: &mut Connection) -> i64 {
    let mut size = 0;
    wait_until(Duration::from_secs(10), "AOF buffer to drain", || {
        let text: String = redis::cmd("INFO").arg("persistence").query(c).expect("INFO persistence");
        let get = |f: &str| -> i64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{f}:")))
                .unwrap_or_else(|| panic!("no {f} in INFO persistence"))
                .trim()
                .parse()
                .expect("integer field")
        };
        size = get("aof_current_size");
        get("aof_buffer_length") == 0
    });
    size
}

/// Wait until no AOF rewrite is running or scheduled.
pub fn wait_aof_rewrite_idle(con: &mut Connection) {
    wait_until(Duration::from_secs(30), "AOF rewrite to finish", || {
        info_field(con, "persistence", "aof_rewrite_in_progress") == "0" && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
    });
}

/// BGREWRITEAOF and wait for it to complete successfully.
pub fn bgrewriteaof(con: &mut Connection) {
    wait_aof_rewrite_idle(con);
    let before = info_field_i64(con, "persistence", "aof_rewrites");
    ok_cmd(con, &cmd("BGREWRITEAOF"));
    wait_until(Duration::from_secs(30), "BGREWRITEAOF to complete", || {
        info_field(con, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
            && info_field_i64(con, "persistence", "aof_rewrites") > before
    });
    assert_eq!(info_field(con, "persistence", "aof_last_bgrewrite_status"), "ok", "BGREWRITEAOF failed");
}

/// Make `replica` replicate `master` and wait for the link to be up with
/// equal offsets.
pub fn attach_replica(master: &Server, replica: &Server) {
    let mut r = replica.conn();
    ok_cmd(&mut r, cmd("REPLICAOF").arg("127.0.0.1").arg(master.port));
    wait_replica_synced(master, replica);
}

/// Wait until the replica's link is up and both offsets are equal.
pub fn wait_replica_synced(master: &Server, replica: &Server) {
    let mut m = master.conn();
    let mut r = replica.conn();
    wait_until(Duration::from_secs(20), "replica link up", || info_field(&mut r, "replication", "master_link_status") == "up");
    let n = int_of(&ok_cmd(&mut m, cmd("WAIT").arg(1).arg(5000)), "WAIT");
    assert_eq!(n, 1, "WAIT 1 5000: replica did not acknowledge");
    wait_until(Duration::from_secs(10), "replica offset == master offset", || {
        let mo = info_field_i64(&mut m, "replication", "master_repl_offset");
        let ro = info_field_i64(&mut r, "replication", "slave_repl_offset");
        mo == ro
    });
}

/// `WAIT 1 5000` on the master must report the replica acknowledged.
pub fn wait1(master_con: &mut Connection) {
    let n = int_of(&ok_cmd(master_con, cmd("WAIT").arg(1).arg(5000)), "WAIT");
    assert_eq!(n, 1, "WAIT 1 5000: replica did not acknowledge the writes");
}

/// All regular files under `dir` (recursively), concatenated.
pub fn read_all_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(read_all_files(&p));
            } else if let Ok(b) = fs::read(&p) {
                out.push((p, b));
            }
        }
    }
    out
}

pub fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    let n: Vec<u8> = needle.to_ascii_lowercase();
    hay.windows(n.len()).any(|w| w.to_ascii_lowercase() == n)
}

// ---------------------------------------------------------------------------
// Handoff delays measured by the server's clock (issue 40)
// ---------------------------------------------------------------------------

/// The ttl a measured waiter asks for: its lease starts at its grant, so
/// its PEXPIRETIME less this is the instant of the grant, by the server's
/// own clock (see `granted_at`).
pub const MEASURED_WAITER_TTL: i64 = 60_000;

/// How far apart (ms) the lease ends of one measurement's keys are: nine
/// of them spread over a second, so a poll on a period of one second
/// (Redis's active expiry or cron at `hz 1`) meets each at another phase.
pub const DEADLINE_STEP_MS: i64 = 111;

/// Keys per measurement of handoff delays.
pub const MEASURED_KEYS: usize = 9;

/// The bound on the median delay, see `assert_prompt_handoffs`.
pub const PROMPT_MEDIAN_MS: i64 = 250;

/// When the waiter that asked for `MEASURED_WAITER_TTL` got `key`, by the
/// server's wall clock in ms: the test's own scheduling is not in it.
pub fn granted_at(con: &mut Connection, key: &[u8]) -> i64 {
    pexpiretime(con, key) - MEASURED_WAITER_TTL
}

/// The median of `v` (the upper one of an even count).
pub fn median_i64(v: &[i64]) -> i64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[s.len() / 2]
}

/// Checks the delays (ms, server clock) from `MEASURED_KEYS` lease ends,
/// spread `DEADLINE_STEP_MS` apart, to their waiters' grants.
///
/// Order: no grant before its lease's end (a delay below 0 is a handoff
/// of a lease still running).
///
/// Promptness, as a median: the module arms a timer for each lease's end,
/// so a delay is made of the timer firing late in the event loop (1 ms
/// idle) plus redis-server waiting for a CPU on a loaded machine (tens of
/// ms on a busy 2-core laptop; the test's own process is out of it, since
/// the server stamps the grant). `PROMPT_MEDIAN_MS` is 250 ms: more than
/// half of the nine handoffs would have to be that late. A handoff left to
/// a poll once a second instead of the timer (Redis's active expiry or the
/// cron at `hz 1`) meets the nine deadlines, 111 ms apart, at nine phases:
/// its delays spread over 0..1000 ms and their median is at least 444 ms.
pub fn assert_prompt_handoffs(what: &str, delays: &[i64]) {
    eprintln!("{what}: grants {delays:?} ms after the lease ends (server clock)");
    assert!(delays.iter().all(|d| *d >= 0), "{what}: a grant came before its lease ended: {delays:?} ms");
    let median = median_i64(delays);
    assert!(
        median < PROMPT_MEDIAN_MS,
        "{what}: median handoff {median} ms after the lease ends (bound {PROMPT_MEDIAN_MS} ms, a poll once a second shows >= 444): {delays:?}"
    );
}

/// The keyspace notifications `ps` (subscribed to `__keyspace@0__:*`)
/// receives, as (channel, event), until the first on the key `marker`:
/// the caller changes `marker` after the changes it checks, so that
/// "nothing else" ends at it instead of at a timeout.
pub fn keyspace_events_until(ps: &mut redis::PubSub<'_>, marker: &str) -> Vec<(String, String)> {
    let end = format!("__keyspace@0__:{marker}");
    let mut events = Vec::new();
    loop {
        let m = ps.get_message().unwrap_or_else(|e| panic!("no keyspace message within 5 s ({events:?}): {e}"));
        let channel: String = m.get_channel_name().to_string();
        if channel == end {
            return events;
        }
        events.push((channel, m.get_payload::<String>().expect("payload")));
    }
}
