//! Contended-lock benchmark: N clients fight over ONE key, each holding the
//! lock for ~1 ms per grant.
//!
//!     cargo bench --bench contended
//!
//! Variants (each with N = 16 and N = 64 client threads, one connection each;
//! the semaphore pair with 16 clients and 4 permits):
//! - `module`:  `LOCK.ACQUIRE key owner-i 10000 WAIT 2000` (the client blocks on
//!   the server until granted; FIFO handoff on release), hold ~1 ms,
//!   `LOCK.RELEASE key owner-i` (must answer 1). A nil reply is a WAIT timeout:
//!   counted as a failure, and the client tries again.
//! - `polling`: the usual way without the module: `SET key owner-i NX PX 10000`,
//!   on nil sleep 10 ms and retry; hold ~1 ms; release with `EVALSHA` of the
//!   compare-and-delete script (must answer 1).
//! - `sem-mod`: `LOCK.ACQUIRE key owner-i 10000 SHARED LIMIT 4 WAIT 2000`, hold,
//!   `LOCK.RELEASE`; `sem-lua`: the common Lua sorted-set semaphore (drop
//!   expired holders, add if fewer than 4), polled every 10 ms, released
//!   with ZREM. At most 4 clients may believe they hold a permit at once.
//!
//! Each wait (ACQUIRE sent -> grant received) goes into an HdrHistogram in
//! microseconds. Mutual exclusion is checked with an AtomicBool held during
//! the hold (and, for the module, fencing tokens must strictly increase); a
//! violation aborts the run with an error.
//!
//! The benchmark starts its own redis-server (127.0.0.1, free port, temp dir,
//! no persistence; the workspace's launcher, testkit/) with the module
//! loaded, and kills it (by PID) on exit,
//! also on panic (Drop guard) and, on Linux, when this process dies
//! (PR_SET_PDEATHSIG).
//!
//! Environment:
//!   REDISLOCK_MODULE  module to load (default <crate>/target/release/libredislock.so)
//!   BENCH_SECONDS     measured seconds per run (default 5; 4 runs in total)
//!
//! Output: progress on stderr, the result table on stdout. Exit status 0 when
//! every run completed without errors, 1 otherwise (module missing or without
//! WAIT support, mutual-exclusion or fencing violation, a release that
//! answered 0, an unexpected reply, server not starting, ...). WAIT timeouts
//! are reported, not treated as errors.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use redis::{Connection, Value};

/// Lease of every grant, both variants (ms).
const LEASE_MS: u64 = 10_000;
/// WAIT timeout of the module variant (ms). Modest, so that a client blocked
/// in WAIT at the deadline returns promptly even if it is never granted.
const WAIT_TIMEOUT_MS: u64 = 2_000;
/// The workload: how long each client holds the lock per grant.
const HOLD: Duration = Duration::from_millis(1);
/// Sleep between two SET NX attempts of the polling variant.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Client counts, each run for both variants.
const CLIENTS: [usize; 2] = [16, 64];
/// Default measured time per run (s); BENCH_SECONDS overrides.
const DEFAULT_SECONDS: f64 = 5.0;
/// Read timeout on every connection: well above the WAIT timeout, so only a
/// wedged server trips it.
const READ_TIMEOUT: Duration = Duration::from_millis(WAIT_TIMEOUT_MS + 10_000);
/// The usual compare-and-delete release script.
const RELEASE_SCRIPT: &str = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

type Res<T> = Result<T, String>;

// ---------------------------------------------------------------- server

/// A private redis-server with the module, from the workspace's one
/// launcher (`testkit::Process`, whose `pid`, `port` and `log_tail` it
/// derefs to); killed by PID when dropped.
struct Server(testkit::Process);

impl std::ops::Deref for Server {
    type Target = testkit::Process;
    fn deref(&self) -> &testkit::Process {
        &self.0
    }
}

impl Server {
    /// Start on a free port; retried (fresh port) on a port race.
    fn start(module: &Path) -> Res<Server> {
        let mut spec = testkit::Spec::new(Some(module.to_path_buf()));
        spec.dir_prefix = "redislock-bench-".into();
        spec.defaults = vec![("--save".into(), String::new()), ("--appendonly".into(), "no".into())];
        spec.die_with_parent = true;
        testkit::Process::start(spec).map(Server).map_err(|e| e.to_string())
    }

    fn connect(&self) -> Res<Connection> {
        let client = self.0.client()?;
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .map_err(|e| format!("connect to redis-server on port {}: {e}", self.port))?;
        con.set_read_timeout(Some(READ_TIMEOUT)).map_err(|e| e.to_string())?;
        con.set_write_timeout(Some(READ_TIMEOUT)).map_err(|e| e.to_string())?;
        Ok(con)
    }
}

/// `$REDISLOCK_MODULE`, else `<workspace>/target/release/libredislock.so`,
/// made absolute (redis-server runs in its temp dir).
fn module_path() -> Res<PathBuf> {
    testkit::try_module_path()
}

fn bench_seconds() -> Res<f64> {
    match std::env::var("BENCH_SECONDS") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
            _ => Err(format!("BENCH_SECONDS must be a positive number of seconds, got {v:?}")),
        },
        _ => Ok(DEFAULT_SECONDS),
    }
}

// ---------------------------------------------------------------- one run

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Module,
    Polling,
    /// A semaphore of `SEM_LIMIT`: LOCK.ACQUIRE ... SHARED LIMIT ... WAIT.
    SemModule,
    /// The same with the Lua sorted-set semaphore, polled.
    SemLua,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Module => "module",
            Variant::Polling => "polling",
            Variant::SemModule => "sem-mod",
            Variant::SemLua => "sem-lua",
        }
    }

    fn semaphore(self) -> bool {
        matches!(self, Variant::SemModule | Variant::SemLua)
    }

    fn waits_on_server(self) -> bool {
        matches!(self, Variant::Module | Variant::SemModule)
    }
}

/// Permits of the contended semaphore, and its clients.
const SEM_LIMIT: usize = 4;
const SEM_CLIENTS: usize = 16;

/// The common Lua semaphore: holders in a sorted set scored by expiry.
const SEM_ACQUIRE_SCRIPT: &str = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) \
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) \
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then \
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1 end return 0";
const SEM_RELEASE_SCRIPT: &str = "return redis.call('ZREM', KEYS[1], ARGV[1])";

/// SHA1s of the loaded scripts.
#[derive(Clone)]
struct Scripts {
    release: String,
    sem_acquire: String,
    sem_release: String,
}

/// Shared by the clients of one run.
struct RunCtx {
    variant: Variant,
    key: String,
    sha: Scripts,
    deadline: Instant,
    /// Clients that believe they hold a permit (semaphore variants).
    holders: AtomicUsize,
    /// Set by a client that hit an error: everybody stops.
    stop: AtomicBool,
    /// Set while some client believes it holds the lock.
    held: AtomicBool,
    /// Last fencing token seen inside the critical section (module only).
    last_token: AtomicI64,
    /// Client that had the previous grant.
    last_owner: AtomicUsize,
    /// (client, message) of every client that failed.
    errors: Mutex<Vec<(usize, String)>>,
}

impl RunCtx {
    fn fail(&self, who: usize, msg: String) {
        self.stop.store(true, Ordering::SeqCst);
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).push((who, msg));
    }

    fn over(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || Instant::now() >= self.deadline
    }
}

/// What one client (or, merged, one run) measured.
struct Stats {
    /// Waits of the grants received before the deadline (µs).
    waits: Histogram<u64>,
    /// Grants received before the deadline.
    grants: u64,
    /// Of `grants`, those that went to the client that had the previous grant.
    repeats: u64,
    /// Grants received after the deadline (released, not counted).
    late_grants: u64,
    /// WAIT answered nil (module only).
    timeouts: u64,
    /// Sum of (grant received -> release answered), over all grants (ns).
    hold_ns: u128,
    holds: u64,
    /// Waits still open at the deadline (polling gave up; module granted or
    /// timed out later): not in `waits`. Count and longest (µs, up to the deadline).
    cut_waits: u64,
    cut_wait_max_us: u64,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            // 1 µs .. 1 h, 3 significant digits.
            waits: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
            grants: 0,
            repeats: 0,
            late_grants: 0,
            timeouts: 0,
            hold_ns: 0,
            holds: 0,
            cut_waits: 0,
            cut_wait_max_us: 0,
        }
    }

    fn merge(&mut self, o: &Stats) {
        self.waits.add(&o.waits).expect("histograms with equal bounds merge");
        self.grants += o.grants;
        self.repeats += o.repeats;
        self.late_grants += o.late_grants;
        self.timeouts += o.timeouts;
        self.hold_ns += o.hold_ns;
        self.holds += o.holds;
        self.cut_waits += o.cut_waits;
        self.cut_wait_max_us = self.cut_wait_max_us.max(o.cut_wait_max_us);
    }

    fn cut(&mut self, t0: Instant, deadline: Instant) {
        self.cut_waits += 1;
        let us = deadline.saturating_duration_since(t0).as_micros() as u64;
        self.cut_wait_max_us = self.cut_wait_max_us.max(us);
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::ServerError(e) => format!("error reply {e:?}"),
        other => format!("{other:?}"),
    }
}

/// One benchmark client: its number and its lock owner name.
struct Client {
    id: usize,
    owner: String,
}

/// The critical section and the release, common to both variants.
fn hold_and_release(
    ctx: &RunCtx,
    con: &mut Connection,
    me: &Client,
    t0: Instant,
    granted: Instant,
    token: Option<i64>,
    st: &mut Stats,
) -> Res<()> {
    let (id, owner) = (me.id, me.owner.as_str());
    if ctx.variant.semaphore() {
        return hold_permit_and_release(ctx, con, me, t0, granted, st);
    }
    if ctx.held.swap(true, Ordering::SeqCst) {
        return Err(format!("MUTUAL EXCLUSION VIOLATED: {owner} was granted the lock while another client held it"));
    }
    let repeat = ctx.last_owner.swap(id, Ordering::SeqCst) == id;
    if let Some(t) = token {
        let prev = ctx.last_token.swap(t, Ordering::SeqCst);
        if t <= prev {
            return Err(format!("FENCING VIOLATED: {owner} got token {t} after token {prev} had been issued"));
        }
    }
    thread::sleep(HOLD);
    // Cleared before the release is sent: the next owner may be granted as
    // soon as the server has processed it.
    ctx.held.store(false, Ordering::SeqCst);
    let (what, reply) = match ctx.variant {
        Variant::Module => ("LOCK.RELEASE", redis::cmd("LOCK.RELEASE").arg(&ctx.key).arg(owner).query::<Value>(con)),
        Variant::Polling | Variant::SemModule | Variant::SemLua => {
            ("EVALSHA compare-and-delete", redis::cmd("EVALSHA").arg(&ctx.sha.release).arg(1).arg(&ctx.key).arg(owner).query::<Value>(con))
        }
    };
    match reply {
        Ok(Value::Int(1)) => {}
        Ok(Value::Int(0)) => return Err(format!("{what} answered 0: {owner} no longer held the lock it was granted")),
        Ok(v) => return Err(format!("{what} answered {}, expected 1", describe(&v))),
        Err(e) => return Err(format!("{what} failed: {e}")),
    }
    let released = Instant::now();
    st.hold_ns += released.duration_since(granted).as_nanos();
    st.holds += 1;
    if granted <= ctx.deadline {
        st.grants += 1;
        st.repeats += u64::from(repeat);
        st.waits.saturating_record(granted.duration_since(t0).as_micros() as u64);
    } else {
        st.late_grants += 1;
        st.cut(t0, ctx.deadline);
    }
    Ok(())
}

/// The semaphore's critical section: never more than `SEM_LIMIT` holders.
fn hold_permit_and_release(ctx: &RunCtx, con: &mut Connection, me: &Client, t0: Instant, granted: Instant, st: &mut Stats) -> Res<()> {
    let owner = me.owner.as_str();
    let holding = ctx.holders.fetch_add(1, Ordering::SeqCst) + 1;
    if holding > SEM_LIMIT {
        return Err(format!("SEMAPHORE VIOLATED: {owner} was granted a permit while {} others held one", holding - 1));
    }
    let repeat = ctx.last_owner.swap(me.id, Ordering::SeqCst) == me.id;
    thread::sleep(HOLD);
    ctx.holders.fetch_sub(1, Ordering::SeqCst);
    let reply = match ctx.variant {
        Variant::SemModule => redis::cmd("LOCK.RELEASE").arg(&ctx.key).arg(owner).query::<Value>(con),
        _ => redis::cmd("EVALSHA").arg(&ctx.sha.sem_release).arg(1).arg(&ctx.key).arg(owner).query::<Value>(con),
    };
    match reply {
        Ok(Value::Int(1)) => {}
        Ok(v) => return Err(format!("the permit's release answered {}, expected 1", describe(&v))),
        Err(e) => return Err(format!("the permit's release failed: {e}")),
    }
    let released = Instant::now();
    st.hold_ns += released.duration_since(granted).as_nanos();
    st.holds += 1;
    if granted <= ctx.deadline {
        st.grants += 1;
        st.repeats += u64::from(repeat);
        st.waits.saturating_record(granted.duration_since(t0).as_micros() as u64);
    } else {
        st.late_grants += 1;
        st.cut(t0, ctx.deadline);
    }
    Ok(())
}

fn client_module(ctx: &RunCtx, con: &mut Connection, id: usize, st: &mut Stats) -> Res<()> {
    let me = Client { id, owner: format!("owner-{id}") };
    let owner = &me.owner;
    while !ctx.over() {
        let t0 = Instant::now();
        let mut acquire = redis::cmd("LOCK.ACQUIRE");
        acquire.arg(&ctx.key).arg(owner).arg(LEASE_MS);
        if ctx.variant == Variant::SemModule {
            acquire.arg("SHARED").arg("LIMIT").arg(SEM_LIMIT);
        }
        let reply = acquire.arg("WAIT").arg(WAIT_TIMEOUT_MS).query::<Value>(con);
        let granted = Instant::now();
        let token = match reply {
            Ok(Value::Int(t)) => t,
            Ok(Value::Nil) => {
                if t0 < ctx.deadline && granted > ctx.deadline {
                    st.cut(t0, ctx.deadline);
                } else {
                    st.timeouts += 1;
                }
                continue;
            }
            Ok(v) => return Err(format!("LOCK.ACQUIRE ... WAIT answered {}, expected a token or nil", describe(&v))),
            Err(e) => return Err(format!("LOCK.ACQUIRE ... WAIT failed: {e}")),
        };
        hold_and_release(ctx, con, &me, t0, granted, Some(token), st)?;
    }
    Ok(())
}

fn client_polling(ctx: &RunCtx, con: &mut Connection, id: usize, st: &mut Stats) -> Res<()> {
    let me = Client { id, owner: format!("owner-{id}") };
    let owner = &me.owner;
    'outer: while !ctx.over() {
        let t0 = Instant::now();
        let granted = loop {
            if ctx.over() {
                st.cut(t0, ctx.deadline);
                break 'outer;
            }
            let reply = if ctx.variant == Variant::SemLua {
                redis::cmd("EVALSHA")
                    .arg(&ctx.sha.sem_acquire)
                    .arg(1)
                    .arg(&ctx.key)
                    .arg(owner)
                    .arg(SEM_LIMIT)
                    .arg(LEASE_MS)
                    .query::<Value>(con)
            } else {
                redis::cmd("SET").arg(&ctx.key).arg(owner).arg("NX").arg("PX").arg(LEASE_MS).query::<Value>(con)
            };
            match reply {
                Ok(Value::Okay) | Ok(Value::Int(1)) => break Instant::now(),
                Ok(Value::Nil) | Ok(Value::Int(0)) => thread::sleep(POLL_INTERVAL),
                Ok(v) => return Err(format!("SET NX PX answered {}, expected OK or nil", describe(&v))),
                Err(e) => return Err(format!("SET NX PX failed: {e}")),
            }
        };
        hold_and_release(ctx, con, &me, t0, granted, None, st)?;
    }
    Ok(())
}

struct RunResult {
    variant: Variant,
    clients: usize,
    seconds: f64,
    stats: Stats,
    errors: Vec<String>,
    /// Why the run did not take place at all.
    skipped: Option<String>,
}

fn run_one(server: &Server, variant: Variant, n: usize, seconds: f64, sha: &Scripts) -> RunResult {
    let key = format!("bench:contended:{}:{n}", variant.name());
    let mut result = RunResult { variant, clients: n, seconds, stats: Stats::new(), errors: Vec::new(), skipped: None };
    let mut cons = Vec::with_capacity(n);
    for _ in 0..n {
        match server.connect() {
            Ok(c) => cons.push(c),
            Err(e) => {
                result.errors.push(e);
                return result;
            }
        }
    }
    let start = Instant::now();
    let ctx = RunCtx {
        variant,
        key: key.clone(),
        sha: sha.clone(),
        deadline: start + Duration::from_secs_f64(seconds),
        holders: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        held: AtomicBool::new(false),
        last_token: AtomicI64::new(i64::MIN),
        last_owner: AtomicUsize::new(usize::MAX),
        errors: Mutex::new(Vec::new()),
    };
    let per_client: Vec<Stats> = thread::scope(|s| {
        let handles: Vec<_> = cons
            .into_iter()
            .enumerate()
            .map(|(id, mut con)| {
                let ctx = &ctx;
                s.spawn(move || {
                    let mut st = Stats::new();
                    let r = match ctx.variant {
                        Variant::Module | Variant::SemModule => client_module(ctx, &mut con, id, &mut st),
                        Variant::Polling | Variant::SemLua => client_polling(ctx, &mut con, id, &mut st),
                    };
                    if let Err(e) = r {
                        ctx.fail(id, e);
                    }
                    st
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(st) => st,
                Err(_) => {
                    ctx.fail(usize::MAX, "a client thread panicked".into());
                    Stats::new()
                }
            })
            .collect()
    });
    let finished = Instant::now();
    for st in &per_client {
        result.stats.merge(st);
    }
    // One line per distinct message, naming the clients that hit it.
    let mut errs = ctx.errors.into_inner().unwrap_or_else(|p| p.into_inner());
    errs.sort();
    let mut grouped: Vec<(String, Vec<usize>)> = Vec::new();
    for (who, msg) in errs {
        match grouped.iter_mut().find(|(m, _)| *m == msg) {
            Some((_, whos)) => whos.push(who),
            None => grouped.push((msg, vec![who])),
        }
    }
    result.errors = grouped
        .into_iter()
        .map(|(msg, whos)| {
            let whos: Vec<String> = whos.iter().map(|&w| if w == usize::MAX { "?".into() } else { w.to_string() }).collect();
            format!("{msg} (client {})", whos.join(", "))
        })
        .collect();
    // Every grant was released: the key must be gone. A leftover holder would
    // mean the lock was handed to a client that never saw the grant.
    if result.errors.is_empty() {
        match server.connect().and_then(|mut c| redis::cmd("GET").arg(&key).query::<Option<String>>(&mut c).map_err(|e| e.to_string())) {
            Ok(None) => {}
            Ok(Some(holder)) => result.errors.push(format!(
                "after all clients finished, {key} is still held by {holder:?} \
                 (granted to a client that never received the grant?)"
            )),
            Err(e) => {
                // A module lock is not a string: GET gives WRONGTYPE.
                result.errors.push(format!("after all clients finished, {key} still exists ({e})"))
            }
        }
    }
    if let Ok(mut c) = server.connect() {
        let _ = redis::cmd("DEL").arg(&key).query::<Value>(&mut c);
    }
    let stopped = if finished >= ctx.deadline {
        format!("all clients stopped {} ms after the deadline", finished.duration_since(ctx.deadline).as_millis())
    } else {
        format!("all clients stopped early, {} ms into the run", finished.duration_since(start).as_millis())
    };
    eprintln!(
        "contended: {:<7} N={:<3} done: {} grants in {:.2} s, {stopped}{}",
        variant.name(),
        n,
        result.stats.grants,
        seconds,
        if result.errors.is_empty() { "" } else { " -- ERRORS" }
    );
    result
}

// ---------------------------------------------------------------- preflight

/// Is the module loaded, and does its ACQUIRE support WAIT?
fn module_check(server: &Server) -> Res<()> {
    let mut con = server.connect()?;
    match redis::cmd("LOCK.INFO").arg("bench:preflight").query::<Value>(&mut con) {
        Ok(_) => {}
        Err(e) => return Err(format!("the module is not loaded: LOCK.INFO failed: {e}")),
    }
    let reply = redis::cmd("LOCK.ACQUIRE").arg("bench:preflight").arg("preflight").arg(1000).arg("WAIT").arg(100).query::<Value>(&mut con);
    match reply {
        Ok(Value::Int(_)) => {}
        Ok(v) => return Err(format!("LOCK.ACQUIRE on a free key with WAIT answered {}, expected a token", describe(&v))),
        Err(e) => {
            return Err(format!(
                "this module build does not support LOCK.ACQUIRE ... WAIT: \
                 `LOCK.ACQUIRE bench:preflight preflight 1000 WAIT 100` answered: {e}"
            ))
        }
    }
    match redis::cmd("LOCK.RELEASE").arg("bench:preflight").arg("preflight").query::<Value>(&mut con) {
        Ok(Value::Int(1)) => Ok(()),
        Ok(v) => Err(format!("LOCK.RELEASE of the preflight lock answered {}", describe(&v))),
        Err(e) => Err(format!("LOCK.RELEASE of the preflight lock failed: {e}")),
    }
}

fn load_script(server: &Server) -> Res<Scripts> {
    let mut con = server.connect()?;
    let mut load = |script: &str, what: &str| {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query::<String>(&mut con)
            .map_err(|e| format!("SCRIPT LOAD of the {what} script failed: {e}"))
    };
    Ok(Scripts {
        release: load(RELEASE_SCRIPT, "compare-and-delete")?,
        sem_acquire: load(SEM_ACQUIRE_SCRIPT, "semaphore acquire")?,
        sem_release: load(SEM_RELEASE_SCRIPT, "semaphore release")?,
    })
}

// ---------------------------------------------------------------- report

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

struct Row {
    grants_per_s: f64,
    p99_us: u64,
}

fn report(results: &[RunResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\ncontended lock: one key, N clients (one connection each), hold {} ms per grant, {:.1} s per run",
        HOLD.as_millis(),
        results.first().map(|r| r.seconds).unwrap_or(0.0)
    );
    let _ = writeln!(out, "  module : LOCK.ACQUIRE key owner {LEASE_MS} WAIT {WAIT_TIMEOUT_MS}, hold, LOCK.RELEASE");
    let _ = writeln!(
        out,
        "  polling: SET key owner NX PX {LEASE_MS} (retry after {} ms), hold, EVALSHA compare-and-delete",
        POLL_INTERVAL.as_millis()
    );
    let _ = writeln!(
        out,
        "  sem-mod: LOCK.ACQUIRE key owner {LEASE_MS} SHARED LIMIT {SEM_LIMIT} WAIT {WAIT_TIMEOUT_MS}, hold, LOCK.RELEASE ({SEM_CLIENTS} clients)"
    );
    let _ = writeln!(
        out,
        "  sem-lua: EVALSHA sorted-set acquire (limit {SEM_LIMIT}, retry after {} ms), hold, EVALSHA ZREM ({SEM_CLIENTS} clients)",
        POLL_INTERVAL.as_millis()
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<8} {:>3} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6} {:>11} {:>8} {:>8}",
        "variant", "N", "grants/s", "p50 ms", "p99 ms", "max ms", "timeouts", "same", "hold+rel ms", "limit/s", "of limit"
    );
    let mut rows: Vec<(Variant, usize, Option<Row>)> = Vec::new();
    for r in results {
        if let Some(why) = &r.skipped {
            let _ = writeln!(out, "{:<8} {:>3}   not run: {why}", r.variant.name(), r.clients);
            rows.push((r.variant, r.clients, None));
            continue;
        }
        let s = &r.stats;
        let gps = s.grants as f64 / r.seconds;
        let (p50, p99, max) = if s.waits.is_empty() {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            (ms(s.waits.value_at_quantile(0.50)), ms(s.waits.value_at_quantile(0.99)), ms(s.waits.max()))
        };
        let (hold, limit, frac) = if s.holds == 0 {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            let mean_ms = s.hold_ns as f64 / s.holds as f64 / 1e6;
            let limit = 1000.0 / mean_ms;
            (format!("{mean_ms:.3}"), format!("{limit:.0}"), format!("{:.0}%", 100.0 * gps / limit))
        };
        let _ = writeln!(
            out,
            "{:<8} {:>3} {:>9.1} {:>8} {:>8} {:>8} {:>8} {:>6} {:>11} {:>8} {:>8}{}",
            r.variant.name(),
            r.clients,
            gps,
            p50,
            p99,
            max,
            if r.variant.waits_on_server() { s.timeouts.to_string() } else { "-".into() },
            if s.grants > 0 { format!("{:.0}%", 100.0 * s.repeats as f64 / s.grants as f64) } else { "-".into() },
            hold,
            limit,
            frac,
            if r.errors.is_empty() { "" } else { "  ERRORS (see below)" }
        );
        let ok = r.errors.is_empty() && !s.waits.is_empty();
        rows.push((r.variant, r.clients, ok.then(|| Row { grants_per_s: gps, p99_us: s.waits.value_at_quantile(0.99) })));
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "ratios  N  grants/s module/polling  p99 wait polling/module");
    for &n in &CLIENTS {
        let get = |v: Variant| rows.iter().find(|(rv, rn, _)| *rv == v && *rn == n).and_then(|(_, _, row)| row.as_ref());
        let (g, p) = match (get(Variant::Module), get(Variant::Polling)) {
            (Some(m), Some(p)) => (
                if p.grants_per_s > 0.0 { format!("{:.2}x", m.grants_per_s / p.grants_per_s) } else { "-".into() },
                format!("{:.2}x", p.p99_us as f64 / m.p99_us.max(1) as f64),
            ),
            _ => ("n/a".into(), "n/a".into()),
        };
        let _ = writeln!(out, "       {n:>2}  {g:>23}  {p:>23}");
    }
    let get = |v: Variant| rows.iter().find(|(rv, _, _)| *rv == v).and_then(|(_, _, row)| row.as_ref());
    if let (Some(m), Some(l)) = (get(Variant::SemModule), get(Variant::SemLua)) {
        let _ = writeln!(
            out,
            "semaphore (limit {SEM_LIMIT}, N={SEM_CLIENTS}): grants/s sem-mod/sem-lua {:.2}x, p99 wait sem-mod/sem-lua {:.2} (target <= 0.3)",
            m.grants_per_s / l.grants_per_s.max(f64::MIN_POSITIVE),
            m.p99_us as f64 / l.p99_us.max(1) as f64
        );
    }
    // Waits the table does not contain.
    let mut cut = String::new();
    for r in results.iter().filter(|r| r.skipped.is_none()) {
        let s = &r.stats;
        if s.cut_waits > 0 || s.late_grants > 0 {
            let _ = writeln!(
                cut,
                "  {:<7} N={:<3} {} wait(s) still open at the deadline (longest {} ms so far), {} grant(s) after it",
                r.variant.name(),
                r.clients,
                s.cut_waits,
                ms(s.cut_wait_max_us),
                s.late_grants
            );
        }
    }
    if !cut.is_empty() {
        let _ = writeln!(out, "\nwaits cut off by the deadline (not in the percentiles, nor in grants/s):");
        out.push_str(&cut);
    }
    let _ = write!(
        out,
        "
How to read it:
- wait = from sending the acquire (the first SET NX for polling) until holding the lock.
  grants/s = grants received before the deadline / run time. p50/p99/max are over those
  grants' waits; waits still open at the deadline are listed separately (if any).
- timeouts = WAIT answered nil after {WAIT_TIMEOUT_MS} ms: failed acquisitions, should be 0.
- same = share of grants that went to the client that had the previous grant. With FIFO
  handoff it is ~0%: the releaser queues behind the others. With polling the releaser
  retries at once while everybody else sleeps, so it often wins again: that is what a
  polling p50 of ~0 ms means, and it is why polling's grants/s stays close to the limit
  while its p99/max (the clients that keep losing) explode.
- hold+rel ms = mean time from receiving a grant until the release was answered (the
  {} ms sleep, its overshoot, one round trip). limit/s = 1000 / that: what one key could
  give if the next owner started exactly when the release reply arrived. 'of limit' =
  grants/s / limit/s. The module can pass 100%: it grants the next waiter while the
  releaser's reply is still on its way back.
- With N clients always waiting, mean wait ~ N / grants/s - hold (Little's law). FIFO
  keeps p50, p99 and max all close to N holds; compare the p99 column, and the ratios.
- The server and all clients share two noisy cores: trust ratios more than absolute
  numbers, and re-run before reading much into a difference of a few percent.
",
        HOLD.as_millis()
    );
    out
}

// ---------------------------------------------------------------- main

fn run() -> Res<bool> {
    let seconds = bench_seconds()?;
    let module = module_path()?;
    eprintln!("contended: module {}", module.display());
    let server = Server::start(&module)?;
    eprintln!("contended: redis-server pid {} on 127.0.0.1:{}", server.pid, server.port);
    let module_ok = module_check(&server);
    if let Err(e) = &module_ok {
        eprintln!("contended: module variant cannot run: {e}");
    }
    let sha = load_script(&server)?;

    let mut results = Vec::new();
    for &n in &CLIENTS {
        for variant in [Variant::Module, Variant::Polling] {
            if variant == Variant::Module {
                if let Err(e) = &module_ok {
                    results.push(RunResult {
                        variant,
                        clients: n,
                        seconds,
                        stats: Stats::new(),
                        errors: vec![e.clone()],
                        skipped: Some("module check failed (see errors)".into()),
                    });
                    continue;
                }
            }
            eprintln!("contended: {:<7} N={:<3} running for {seconds:.1} s ...", variant.name(), n);
            results.push(run_one(&server, variant, n, seconds, &sha));
        }
    }
    // A semaphore of SEM_LIMIT under SEM_CLIENTS clients: the module's
    // fair wait against the Lua semaphore polled.
    for variant in [Variant::SemModule, Variant::SemLua] {
        if variant == Variant::SemModule && module_ok.is_err() {
            continue;
        }
        eprintln!("contended: {:<7} N={SEM_CLIENTS:<3} running for {seconds:.1} s ...", variant.name());
        results.push(run_one(&server, variant, SEM_CLIENTS, seconds, &sha));
    }

    print!("{}", report(&results));

    let mut ok = true;
    let mut seen = std::collections::HashSet::new();
    for r in &results {
        if r.errors.is_empty() {
            continue;
        }
        ok = false;
        eprintln!("contended: ERROR in {} N={}:", r.variant.name(), r.clients);
        for e in r.errors.iter().take(5) {
            if seen.insert(e.clone()) {
                eprintln!("  {e}");
            } else {
                eprintln!("  (same as above)");
            }
        }
    }
    // The server log helps with errors that happened during a run.
    if results.iter().any(|r| r.skipped.is_none() && !r.errors.is_empty()) {
        let tail = server.log_tail(10);
        if !tail.is_empty() {
            eprintln!("--- redis-server log tail ---\n{tail}");
        }
    }
    Ok(ok)
    // `server` dropped here: redis-server killed by PID.
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("contended: FAILED (see errors above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("contended: error: {e}");
            ExitCode::FAILURE
        }
    }
}
