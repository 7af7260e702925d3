//! Restart quarantine: a node that restarted without every grant it made
//! may have granted locks, before it lost them, that clients still hold.
//! Until the longest lease could have run out, it must not grant again
//! (the delayed restart the Redlock design asks for, built in).
//!
//! The quarantine starts when the module loads and is lifted early only
//! by data that cannot have lost a grant or an extension, loaded while the
//! server starts:
//! - an AOF written with `appendfsync always` (every write is on disk
//!   before its reply leaves). What counts is the policy the data was
//!   written under, not the new start's: a run with `appendonly yes` and
//!   `appendfsync always` from its start keeps a record beside the data,
//!   removed (durably) as soon as the policy changes;
//! - exactly the data a clean shutdown left, as this module recorded it:
//!   at the SHUTDOWN event (after Redis's final save and AOF fsync) it
//!   writes a marker beside the data with the fencing counter and a
//!   content identity of the RDB when it holds every write, and of the
//!   AOF (its manifest and every file named there) when it was fsynced.
//!   The marker is read and deleted at the next load, so it speaks for one
//!   start only; the data loaded must have the identity it names, so an
//!   older backup put back, or another server's files, are not vouched
//!   for.
//!
//! A stale RDB (saved, then more grants, then a crash), an AOF with
//! `everysec` after a crash, and any load once the server runs (DEBUG
//! RELOAD, a replica's sync) lift nothing.
//!
//! A replica promoted to master quarantines too (`promoted`): it may lack
//! grants its old master acknowledged, as a restart without data does.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::api::{Ctx, ServerInfo};
use crate::server::fencing::COUNTER;

/// Monotonic ms (`clock::mono_ms`) until which ACQUIRE is refused; 0 = off.
static UNTIL: AtomicI64 = AtomicI64::new(0);

/// The server is still starting: its event loop has not run yet.
static STARTING: AtomicBool = AtomicBool::new(true);

/// Any load (RDB, AOF, a replica's sync, DEBUG RELOAD) is running.
static LOADING: AtomicBool = AtomicBool::new(false);

/// What the load running at startup reads.
static STARTUP_LOAD: AtomicU8 = AtomicU8::new(NO_LOAD);
const NO_LOAD: u8 = 0;
const RDB_LOAD: u8 = 1;
const AOF_LOAD: u8 = 2;

/// The fencing counter saved in the RDB being loaded (aux data).
static LOADED_COUNTER: AtomicI64 = AtomicI64::new(-1);

/// The marker of the previous clean shutdown, read at load.
static MARKER: Mutex<Option<Marker>> = Mutex::new(None);

/// The marker file, in Redis's working directory (its `dir`, beside
/// dump.rdb and the AOF directory).
const MARKER_FILE: &str = "redislock-clean-shutdown";

/// Records that this run writes its AOF with `appendfsync always`.
const ALWAYS_FILE: &str = "redislock-aof-always";
const ALWAYS_PREFIX: &str = "redislock appendfsync always v2 ";

/// The previous run wrote its AOF with `appendfsync always` throughout
/// since it started at these clocks.
static PREVIOUS_ALWAYS: Mutex<Option<ClockStamp>> = Mutex::new(None);

fn parse_always_record(text: &str) -> Option<ClockStamp> {
    let rest = text.strip_suffix('\n')?.strip_prefix(ALWAYS_PREFIX)?;
    let mut fields = rest.split(' ');
    let clock = ClockStamp::parse(&mut fields)?;
    fields.next().is_none().then_some(clock)
}

/// What a clean shutdown recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Marker {
    /// The fencing counter, when the last RDB held every write.
    rdb_counter: Option<i64>,
    /// The identity of that RDB.
    rdb: Option<u64>,
    /// The identity of the AOF, when it was on, written without error, and
    /// fsynced at exit.
    aof: Option<u64>,
    /// The clocks at the shutdown.
    clock: ClockStamp,
}

fn render_optional(v: Option<impl std::fmt::Display>) -> String {
    v.map_or_else(|| "none".to_string(), |v| v.to_string())
}

impl Marker {
    fn render(&self) -> String {
        format!(
            "redislock clean shutdown v3 rdb-counter={} rdb={} aof={} {}\n",
            render_optional(self.rdb_counter),
            render_optional(self.rdb.map(|id| format!("{id:016x}"))),
            render_optional(self.aof.map(|id| format!("{id:016x}"))),
            self.clock.render(),
        )
    }

    fn parse(text: &str) -> Option<Marker> {
        let rest = text.strip_suffix('\n')?.strip_prefix("redislock clean shutdown v3 ")?;
        let mut fields = rest.split(' ');
        let mut field = |name: &str| fields.next()?.strip_prefix(name).map(|v| (v != "none").then_some(v));
        let (rdb_counter, rdb, aof) = (field("rdb-counter=")?, field("rdb=")?, field("aof=")?);
        let rdb_counter = match rdb_counter {
            Some(n) => Some(crate::args::parse_i64(n.as_bytes())?),
            None => None,
        };
        let hex = |v: &str| (v.len() == 16).then(|| u64::from_str_radix(v, 16).ok()).flatten();
        let rdb = match rdb {
            Some(v) => Some(hex(v)?),
            None => None,
        };
        let aof = match aof {
            Some(v) => Some(hex(v)?),
            None => None,
        };
        let clock = ClockStamp::parse(&mut fields)?;
        if fields.next().is_some() || rdb.is_some() != rdb_counter.is_some() {
            return None;
        }
        Some(Marker { rdb_counter, rdb, aof, clock })
    }
}

/// FNV-1a, 64 bits: enough to tell data files apart, no dependency.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Where the clocks stood when a record was written: the boot, the time
/// since boot (which no clock step moves) and the wall clock (which TTL
/// deadlines follow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ClockStamp {
    boot: u128,
    uptime_ms: i64,
    wall_ms: i64,
}

/// How much more the wall clock may have advanced than the time since
/// boot between two stamps: /proc/uptime has 10 ms steps, NTP slews.
const CLOCK_TOLERANCE_MS: i64 = 2_000;

impl ClockStamp {
    /// The clocks now; `None` where /proc does not tell (then nothing is
    /// vouched for).
    fn now() -> Option<ClockStamp> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
        // The server's own clock, which key deadlines follow (a time shim
        // such as libfaketime may move it and not the module's libc).
        let wall_ms = crate::api::unix_millis();
        (wall_ms > 0).then_some(())?;
        Some(ClockStamp { boot: parse_boot_id(&boot)?, uptime_ms: parse_uptime_ms(&uptime)?, wall_ms })
    }

    fn render(&self) -> String {
        format!("boot={:032x} uptime-ms={} wall-ms={}", self.boot, self.uptime_ms, self.wall_ms)
    }

    fn parse(fields: &mut std::str::Split<'_, char>) -> Option<ClockStamp> {
        let boot = u128::from_str_radix(fields.next()?.strip_prefix("boot=")?, 16).ok()?;
        let uptime_ms = crate::args::parse_i64(fields.next()?.strip_prefix("uptime-ms=")?.as_bytes())?;
        let wall_ms = crate::args::parse_i64(fields.next()?.strip_prefix("wall-ms=")?.as_bytes())?;
        Some(ClockStamp { boot, uptime_ms, wall_ms })
    }

    /// Whether deadlines written by the wall clock at `self` still mean
    /// the same at `now`: the same boot, and the wall clock advanced no
    /// more than real time did. A forward step while the server was down
    /// would end every restored lease early; a backward one only makes
    /// them last longer. Across a reboot nobody can tell.
    fn still_holds_at(&self, now: &ClockStamp) -> bool {
        let real = now.uptime_ms.saturating_sub(self.uptime_ms);
        let wall = now.wall_ms.saturating_sub(self.wall_ms);
        now.boot == self.boot && real >= 0 && wall <= real.saturating_add(CLOCK_TOLERANCE_MS)
    }
}

fn parse_boot_id(text: &str) -> Option<u128> {
    let hex: String = text.trim().chars().filter(|c| *c != '-').collect();
    (hex.len() == 32).then(|| u128::from_str_radix(&hex, 16).ok()).flatten()
}

/// `/proc/uptime`'s first field, "5076.04", in milliseconds.
fn parse_uptime_ms(text: &str) -> Option<i64> {
    let (secs, frac) = text.split_whitespace().next()?.split_once('.')?;
    let secs = crate::args::parse_i64(secs.as_bytes())?;
    let centis = match frac.as_bytes() {
        [a @ b'0'..=b'9', b @ b'0'..=b'9', ..] => i64::from(a - b'0') * 10 + i64::from(b - b'0'),
        _ => return None,
    };
    secs.checked_mul(1000)?.checked_add(centis * 10)
}

/// How much of a file's end its identity reads.
const TAIL: u64 = 4096;

/// Adds a data file's size and last 4 KiB to `hash`. An RDB ends with the
/// CRC64 of its whole content; an AOF only grows at its end, so an older
/// copy differs in size, and another server's in its content.
fn hash_file(hash: &mut Fnv, path: &std::path::Path) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    hash.write(&size.to_le_bytes());
    file.seek(SeekFrom::Start(size.saturating_sub(TAIL)))?;
    let mut tail = Vec::with_capacity(TAIL as usize);
    file.take(TAIL).read_to_end(&mut tail)?;
    hash.write(&tail);
    Ok(())
}

/// A configuration value as text (empty when unknown).
fn config_text(ctx: Ctx, name: &std::ffi::CStr) -> String {
    ctx.config_get(name, |v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default()
}

/// The identity of the RDB file in the server's directory.
fn rdb_identity(ctx: Ctx) -> Option<u64> {
    let name = config_text(ctx, c"dbfilename");
    let mut hash = Fnv::new();
    hash_file(&mut hash, std::path::Path::new(&name)).ok()?;
    Some(hash.0)
}

/// The identity of the AOF: its manifest and every file it names. `None`
/// when a file cannot be read or named plainly (quoted names).
fn aof_identity(ctx: Ctx) -> Option<u64> {
    let dir = std::path::PathBuf::from(config_text(ctx, c"appenddirname"));
    let manifest_path = dir.join(format!("{}.manifest", config_text(ctx, c"appendfilename")));
    let manifest = std::fs::read(&manifest_path).ok()?;
    let mut hash = Fnv::new();
    hash.write(&manifest);
    for line in String::from_utf8_lossy(&manifest).lines() {
        let mut words = line.split(' ');
        if words.next() != Some("file") {
            continue;
        }
        let name = words.next().filter(|n| !n.is_empty() && !n.starts_with('"'))?;
        hash.write(name.as_bytes());
        hash_file(&mut hash, &dir.join(name)).ok()?;
    }
    Some(hash.0)
}

/// Writes or removes a small file durably (the file, then its directory).
fn write_durably(name: &str, text: Option<&str>) -> std::io::Result<()> {
    use std::io::Write;
    match text {
        Some(text) => {
            let mut file = std::fs::File::create(name)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
        }
        None => match std::fs::remove_file(name) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        },
    }
    std::fs::File::open(".")?.sync_all()
}

/// Keeps the `appendfsync always` record true of this run: present only
/// while the AOF is on with `always` since the start. A run that turns
/// `always` on later may have acknowledged writes not yet on disk, so
/// only the start writes it; any change away removes it.
fn keep_always_record(ctx: Ctx, at_start: bool) {
    let always = config_text(ctx, c"appendonly") == "yes" && config_text(ctx, c"appendfsync") == "always";
    let present = std::path::Path::new(ALWAYS_FILE).exists();
    let wanted = always && (at_start || present);
    if wanted == present && !at_start {
        return;
    }
    let text = match (wanted, ClockStamp::now()) {
        (true, Some(clock)) => Some(format!("{ALWAYS_PREFIX}{}\n", clock.render())),
        _ => None,
    };
    if let Err(e) = write_durably(ALWAYS_FILE, text.as_deref()) {
        ctx.log_warning(&format!("could not update {ALWAYS_FILE}: {e}; a start after a crash will quarantine"));
        // Unsure what is on disk: make sure it does not vouch.
        let _ = std::fs::remove_file(ALWAYS_FILE);
    }
}

/// A configuration change, possibly of the AOF's policy.
pub fn config_changed(ctx: Ctx) {
    keep_always_record(ctx, false);
}

/// At module load: consumes the previous shutdown's marker, starts the
/// quarantine if configured, and notes when startup ends.
pub fn start(ctx: Ctx) {
    let marker = std::fs::read_to_string(MARKER_FILE).ok().and_then(|text| Marker::parse(&text));
    // A marker speaks for this start only; if it cannot be removed it
    // could vouch for data after a later crash, so it is not used.
    let removed = matches!(std::fs::remove_file(MARKER_FILE), Ok(())) || !std::path::Path::new(MARKER_FILE).exists();
    if let Ok(mut slot) = MARKER.lock() {
        *slot = marker.filter(|_| removed);
    }
    let previous_always = std::fs::read_to_string(ALWAYS_FILE).ok().and_then(|text| parse_always_record(&text));
    if let Ok(mut slot) = PREVIOUS_ALWAYS.lock() {
        *slot = previous_always;
    }
    keep_always_record(ctx, true);
    let ms = crate::server::config::quarantine_ms();
    if ms > 0 {
        UNTIL.store(crate::server::clock::mono_ms().saturating_add(ms).max(1), Ordering::Relaxed);
    }
    // Timers run only in the event loop, after the startup load.
    crate::api::after(0, on_started);
}

/// This node was promoted from replica to master (failover, `REPLICAOF NO
/// ONE`). Replication is asynchronous: its old master may have granted
/// locks, and acknowledged them to clients, that never reached it, and a
/// client holding one on a bare quorum would see a second holder granted
/// here at once. So a promotion quarantines as a restart without data
/// does, for the configured time (0: not at all), whatever was loaded.
pub fn promoted() {
    let ms = crate::server::config::quarantine_ms();
    if ms > 0 {
        let until = crate::server::clock::mono_ms().saturating_add(ms).max(1);
        UNTIL.fetch_max(until, Ordering::Relaxed);
    }
}

fn on_started(_ctx: Ctx) {
    STARTING.store(false, Ordering::Relaxed);
}

/// Milliseconds left, or `None` when ACQUIRE may grant. When a quarantine
/// runs out, the counter is raised to the clock: tokens issued before the
/// restart may lead the clock by up to `max-token-lead`, which a
/// quarantine at least that long has now passed.
pub fn remaining_ms() -> Option<i64> {
    let until = UNTIL.load(Ordering::Relaxed);
    if until == 0 {
        return None;
    }
    let left = until - crate::server::clock::mono_ms();
    if left > 0 {
        Some(left)
    } else {
        UNTIL.store(0, Ordering::Relaxed);
        COUNTER.seed_from_clock();
        None
    }
}

/// A load of any kind is running: data comes from this server's own files
/// or its master, not from a client.
pub fn loading() -> bool {
    LOADING.load(Ordering::Relaxed)
}

/// The RDB being loaded saved this fencing counter.
pub fn loaded_counter(counter: i64) {
    LOADED_COUNTER.store(counter, Ordering::Relaxed);
}

/// What a load reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Load {
    Rdb,
    Aof,
    /// A replica's sync from its master.
    Other,
}

/// A load started.
pub fn loading_started(load: Load) {
    LOADING.store(true, Ordering::Relaxed);
    LOADED_COUNTER.store(-1, Ordering::Relaxed);
    let load = match load {
        Load::Rdb => RDB_LOAD,
        Load::Aof => AOF_LOAD,
        Load::Other => NO_LOAD,
    };
    STARTUP_LOAD.store(if STARTING.load(Ordering::Relaxed) { load } else { NO_LOAD }, Ordering::Relaxed);
}

pub fn loading_failed() {
    LOADING.store(false, Ordering::Relaxed);
    STARTUP_LOAD.store(NO_LOAD, Ordering::Relaxed);
}

/// A load ended: the quarantine is lifted if this is the startup load and
/// it brought back every grant (see the top of this file).
pub fn loading_ended(ctx: Ctx) {
    LOADING.store(false, Ordering::Relaxed);
    let load = STARTUP_LOAD.swap(NO_LOAD, Ordering::Relaxed);
    if STARTING.load(Ordering::Relaxed) && load != NO_LOAD && loaded_everything(ctx, load) {
        UNTIL.store(0, Ordering::Relaxed);
    }
}

/// Whether the data just loaded at startup holds every grant and
/// extension this server acknowledged before it stopped.
fn loaded_everything(ctx: Ctx, load: u8) -> bool {
    let Some(now) = ClockStamp::now() else {
        return false;
    };
    // Deadlines in the data follow the wall clock of when they were written.
    let marker = MARKER.lock().ok().and_then(|m| *m).filter(|m| m.clock.still_holds_at(&now));
    let always = PREVIOUS_ALWAYS.lock().ok().and_then(|a| *a).is_some_and(|clock| clock.still_holds_at(&now));
    match load {
        AOF_LOAD => always || marker.and_then(|m| m.aof).is_some_and(|id| aof_identity(ctx) == Some(id)),
        RDB_LOAD => {
            marker.and_then(|m| m.rdb_counter).is_some_and(|c| c == LOADED_COUNTER.load(Ordering::Relaxed))
                && marker.and_then(|m| m.rdb).is_some_and(|id| rdb_identity(ctx) == Some(id))
        }
        _ => false,
    }
}

/// A clean shutdown, after the final save and AOF fsync: records what
/// the data files hold for the next start.
pub fn shutting_down(ctx: Ctx) {
    let persistence = ServerInfo::read(ctx, c"persistence");
    let rdb_complete = persistence.integer(c"rdb_changes_since_last_save") == Some(0);
    let aof = persistence.integer(c"aof_enabled") == Some(1) && persistence.text_is(c"aof_last_write_status", c"ok");
    drop(persistence);
    if !rdb_complete && !aof {
        return;
    }
    let rdb = rdb_complete.then(|| rdb_identity(ctx)).flatten();
    let aof = aof.then(|| aof_identity(ctx)).flatten();
    if rdb.is_none() && aof.is_none() {
        ctx.log_warning("could not identify the data files at shutdown; the next start will quarantine");
        return;
    }
    let Some(clock) = ClockStamp::now() else {
        ctx.log_warning("could not read the clocks (/proc) at shutdown; the next start will quarantine");
        return;
    };
    let marker = Marker { rdb_counter: rdb.map(|_| COUNTER.current()), rdb, aof, clock };
    if let Err(e) = write_marker(&marker) {
        ctx.log_warning(&format!("could not record the clean shutdown in {MARKER_FILE}: {e}; the next start will quarantine"));
    }
}

fn write_marker(marker: &Marker) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(MARKER_FILE)?;
    file.write_all(marker.render().as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_and_rejects_anything_else() {
        let clock = ClockStamp { boot: 0xeeb4_b45d_8e47_4b24_803c_1d32_ebfa_1ee3, uptime_ms: 5_076_040, wall_ms: 1_795_000_000_000 };
        for m in [
            Marker { rdb_counter: Some(1_795_000_000_000_123), rdb: Some(0x0123_4567_89ab_cdef), aof: None, clock },
            Marker { rdb_counter: None, rdb: None, aof: Some(7), clock },
            Marker { rdb_counter: Some(0), rdb: Some(u64::MAX), aof: Some(0), clock },
        ] {
            assert_eq!(Marker::parse(&m.render()), Some(m));
        }
        for bad in [
            "",
            // v1 named no data, v2 no clocks: they cannot vouch.
            "redislock clean shutdown v1 rdb-counter=12 aof=1\n",
            "redislock clean shutdown v2 rdb-counter=12 rdb=0000000000000001 aof=none\n",
            "redislock clean shutdown v3 rdb-counter=12 rdb=0000000000000001 aof=none\n",
            "redislock clean shutdown v2 rdb-counter=12 rdb=0000000000000001 aof=none",
            "redislock clean shutdown v2 rdb-counter=+12 rdb=0000000000000001 aof=none\n",
            "redislock clean shutdown v2 rdb-counter=12 rdb=none aof=none\n",
            "redislock clean shutdown v2 rdb-counter=none rdb=0000000000000001 aof=none\n",
            "redislock clean shutdown v2 rdb-counter=12 rdb=1 aof=none\n",
            "redislock clean shutdown v2 rdb-counter=12 rdb=0000000000000001 aof=none extra\n",
            "redislock clean shutdown v2 rdb-counter=12 rdb=0000000000000001\n",
        ] {
            assert_eq!(Marker::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_clock_stamp_holds_unless_the_wall_clock_outran_real_time_or_the_boot_changed() {
        let then = ClockStamp { boot: 1, uptime_ms: 10_000, wall_ms: 1_000_000 };
        let later = |uptime: i64, wall: i64| ClockStamp { boot: 1, uptime_ms: 10_000 + uptime, wall_ms: 1_000_000 + wall };
        assert!(then.still_holds_at(&later(5_000, 5_000)), "both clocks moved alike");
        assert!(then.still_holds_at(&later(5_000, 6_500)), "within the tolerance");
        assert!(!then.still_holds_at(&later(5_000, 65_000)), "+60 s while down");
        assert!(then.still_holds_at(&later(5_000, -55_000)), "-60 s only makes leases last longer");
        assert!(!then.still_holds_at(&ClockStamp { boot: 2, ..later(5_000, 5_000) }), "another boot");
        assert!(!then.still_holds_at(&later(-1, 0)), "uptime went back: another boot");
        let round = ClockStamp::parse(&mut then.render().split(' '));
        assert_eq!(round, Some(then));
        assert_eq!(parse_uptime_ms("5076.04 2256.02\n"), Some(5_076_040));
        assert_eq!(parse_uptime_ms("5076 2256.02\n"), None);
        assert_eq!(parse_boot_id("eeb4b45d-8e47-4b24-803c-1d32ebfa1ee3\n"), Some(0xeeb4_b45d_8e47_4b24_803c_1d32_ebfa_1ee3));
        assert_eq!(parse_boot_id("eeb4b45d"), None);
        assert!(parse_always_record(&format!("{ALWAYS_PREFIX}{}\n", then.render())) == Some(then));
        assert!(parse_always_record("redislock appendfsync always v1\n").is_none());
    }

    #[test]
    fn a_file_identity_follows_size_and_content() {
        let dir = std::env::temp_dir().join(format!("redislock-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("data");
        let id = |bytes: &[u8]| {
            std::fs::write(&path, bytes).expect("write");
            let mut h = Fnv::new();
            hash_file(&mut h, &path).expect("hash");
            h.0
        };
        let long: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut changed_at_end = long.clone();
        changed_at_end[9_999] ^= 1;
        assert_eq!(id(&long), id(&long));
        assert_ne!(id(&long), id(&long[..9_999]), "a shorter (older) copy");
        assert_ne!(id(&long), id(&changed_at_end), "other content at the end");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
