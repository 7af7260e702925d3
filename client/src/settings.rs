//! Client settings: their defaults (`Settings::default`, the only place
//! they are written) and their checks (`Settings::validate`), which speak
//! the language of whoever set them (`Names`: the Rust API, the CLI,
//! Python, Node).
//! The defaults are documented in docs/client.md.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::Error;

/// How much sooner than a server could free a session hold after its
/// connection closed (its lock-delay, less the clock drift) the holder
/// stops believing it holds it (`Settings::session_window`): time for the
/// loss signal to reach the work the lock protects and stop it (a
/// supervised command's SIGKILL, on a busy machine).
pub const SESSION_MARGIN: Duration = Duration::from_millis(100);

/// How the client talks to the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `LOCK.*` commands of the redislock module, with fencing tokens.
    Module,
    /// `SET NX PX` and Lua scripts, for plain Redis servers (no tokens).
    Script,
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// Per-request timeout, much smaller than any ttl. Default 50 ms.
    pub request_timeout: Duration,
    /// Timeout to (re)connect to a server. Default 200 ms.
    pub connect_timeout: Duration,
    /// Attempts after the first one. Default 3.
    pub retry_count: u32,
    /// Random delay between attempts, uniform in this range. Default 100–200 ms.
    pub retry_delay: (Duration, Duration),
    /// Clock drift factor: drift = ttl × factor + 2 ms. Default 0.01.
    pub drift_factor: f64,
    /// Instances that must agree; `None` for a majority (N/2 + 1).
    pub quorum: Option<usize>,
    pub mode: Mode,
    /// A guard extends its lock after this fraction of the ttl. Default 1/3.
    pub extend_fraction: f64,
    /// Holds end with this client's connection to each server
    /// (`LOCK.ACQUIRE ... SESSION`): a process that dies, or loses its
    /// connection, frees its locks `lock_delay` after the server sees the
    /// connection close, not when the lease runs out. A hold whose
    /// connection closed counts as lost on that server, never silently
    /// taken again. Module mode only. Default off.
    pub release_on_disconnect: bool,
    /// With `release_on_disconnect`: how long a server keeps the lock held
    /// after the connection closed (`DELAY`), for a holder cut off by the
    /// network that may still be running. `None` (the default): long enough
    /// that the holder is told of the loss first, see `lock_delay_for` and
    /// `session_window`. A delay too short for that, 0 included, is taken
    /// as given: the lock may then be granted to another while the old
    /// holder still believes it holds it (until its next extension or its
    /// lease's end), and only the fencing token stops that holder's late
    /// writes (docs/client.md, "Session holds").
    pub lock_delay: Option<Duration>,
    /// TLS of the `rediss://` servers: the CA, a client certificate, or
    /// no checks at all. Default: the system's roots, no client
    /// certificate. Given while no server is `rediss://`, it is refused
    /// (`Redlock::new`), never silently unused.
    pub tls: TlsSettings,
    /// Count this handle's metrics (`Redlock::metrics`, `--metrics`).
    /// Default on; off, nothing is counted and every figure stays 0 (what
    /// `make bench-metrics` compares: docs/benchmarks.md).
    pub metrics: bool,
}

/// How the client checks `rediss://` servers and shows itself to them
/// (docs/client.md, "TLS"). The PEM files are read, and every PEM checked,
/// when the client is made (`Redlock::new`): an unreadable file or one
/// that is not what it should be is an `Error::Config` naming it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// The CA certificate(s) the servers' certificates must chain to,
    /// instead of the system's roots (a private CA). PEM, one or more
    /// certificates.
    pub ca_cert: Option<Pem>,
    /// This client's certificate, for servers that check their clients
    /// (`tls-auth-clients yes`). PEM: the certificate, then any
    /// intermediates. Needs `client_key`.
    pub client_cert: Option<Pem>,
    /// The private key of `client_cert`. PEM: PKCS#8, PKCS#1 (RSA) or
    /// SEC1 (EC), unencrypted.
    pub client_key: Option<Pem>,
    /// No certificate checks at all: whatever certificate and name a
    /// server presents is taken, so anyone on the path can pose as it.
    /// For tests and first setups only; every connection error then says
    /// that the checks were off.
    pub insecure: bool,
}

impl TlsSettings {
    /// Whether anything differs from the defaults (the system's roots, no
    /// client certificate, checks on).
    pub fn is_set(&self) -> bool {
        self.ca_cert.is_some() || self.client_cert.is_some() || self.client_key.is_some() || self.insecure
    }
}

/// PEM text, from a file read when the client is made, or given as is.
#[derive(Clone, PartialEq, Eq)]
pub enum Pem {
    File(PathBuf),
    Text(Vec<u8>),
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pem::File(path) => f.debug_tuple("File").field(path).finish(),
            // A private key must not end up in a log.
            Pem::Text(text) => write!(f, "Text(<{} bytes>)", text.len()),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            request_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_millis(200),
            retry_count: 3,
            retry_delay: (Duration::from_millis(100), Duration::from_millis(200)),
            drift_factor: 0.01,
            quorum: None,
            mode: Mode::Module,
            extend_fraction: 1.0 / 3.0,
            release_on_disconnect: false,
            lock_delay: None,
            tls: TlsSettings::default(),
            metrics: true,
        }
    }
}

/// A duration written with its unit, as the CLI's options and the
/// bindings' duration strings take it: `500ms`, `10s`, `2m`, `1h 30m`
/// (zero allowed: a caller that needs more says so). The one parser of
/// such text: the CLI and both bindings call it.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration; examples: 500ms, 10s, 2m".into());
    }
    if t.starts_with('-') {
        return Err(format!("{t:?} is negative: durations must be positive, e.g. 500ms, 10s, 2m"));
    }
    humantime::parse_duration(t).map_err(|e| format!("{t:?} is not a duration ({e}); examples: 500ms, 10s, 2m"))
}

/// How a front end names the settings and measures time, so that one
/// check (`Settings::validate_named`, the checks of `crate::hold::input`)
/// says what is wrong in the words its caller used.
#[derive(Clone, Copy, Debug)]
pub struct Names {
    /// An option as the caller writes it, from its Rust name:
    /// `request_timeout` (Rust, Python), `options.requestTimeout` (Node).
    pub option: fn(&str) -> String,
    /// The unit of the caller's numbers of time.
    pub unit: Unit,
    /// The server list's name (`servers`, `urls`) and what several of
    /// them are passed as (`a list`, `an array`).
    pub servers: &'static str,
    pub list: &'static str,
}

/// Whose session-bound hold a lock-delay rule is checked for, in the
/// words of its errors.
struct BoundHold {
    what: &'static str,
    holder: &'static str,
    stored: &'static str,
}

impl BoundHold {
    const ELECTION: BoundHold = BoundHold { what: "an election", holder: "a leader", stored: "its leader is" };
    const MEMBER: BoundHold = BoundHold { what: "a group", holder: "a member", stored: "its members are" };
}

fn as_is(name: &str) -> String {
    name.to_string()
}

impl Names {
    /// The Rust API's names: the fields of `Settings`.
    pub const RUST: Names = Names { option: as_is, unit: Unit::Milliseconds, servers: "servers", list: "a list" };
}

/// The unit of a front end's numbers of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Milliseconds,
}

impl Unit {
    /// `seconds`, `milliseconds`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Milliseconds => "milliseconds",
        }
    }

    /// `s`, `ms`.
    pub fn symbol(self) -> &'static str {
        match self {
            Unit::Seconds => "s",
            Unit::Milliseconds => "ms",
        }
    }

    /// `value` of this unit in seconds.
    pub fn seconds(self, value: f64) -> f64 {
        match self {
            Unit::Seconds => value,
            Unit::Milliseconds => value / 1000.0,
        }
    }

    /// `d` as a number of this unit.
    pub fn of(self, d: Duration) -> f64 {
        match self {
            Unit::Seconds => d.as_secs_f64(),
            Unit::Milliseconds => d.as_secs_f64() * 1000.0,
        }
    }
}

impl Settings {
    /// Checks what the types do not: timeouts above 0, a drift factor and
    /// an extension fraction that make sense, a quorum of the `servers`
    /// listed, a retry range in order, and the session options together.
    /// `Redlock::new` calls it; an `Error::Config` names the setting.
    pub fn validate(&self, servers: usize) -> Result<(), Error> {
        self.validate_named(servers, &Names::RUST)
    }

    /// `validate`, naming the settings as `names` does.
    pub fn validate_named(&self, servers: usize, names: &Names) -> Result<(), Error> {
        let name = names.option;
        let refuse = |message: String| Err(Error::Config(message));
        for (what, d) in [("request_timeout", self.request_timeout), ("connect_timeout", self.connect_timeout)] {
            if d.is_zero() {
                return refuse(format!("{} must be more than 0 {}", name(what), names.unit.symbol()));
            }
        }
        if !self.drift_factor.is_finite() || self.drift_factor < 0.0 {
            return refuse(format!("{} must be a finite number >= 0, not {}", name("drift_factor"), self.drift_factor));
        }
        // The guard holds it to 0.05..0.9; outside (0, 1) it makes no sense at all.
        if !(self.extend_fraction > 0.0 && self.extend_fraction < 1.0) {
            return refuse(format!("{} must be between 0 and 1, not {}", name("extend_fraction"), self.extend_fraction));
        }
        if let Some(quorum) = self.quorum.filter(|&q| servers > 0 && (q == 0 || q > servers)) {
            return refuse(format!("{} must be a whole number from 1 to {servers}, not {quorum}", name("quorum")));
        }
        if self.retry_delay.0 > self.retry_delay.1 {
            return refuse(format!("{} range is reversed", name("retry_delay")));
        }
        if self.release_on_disconnect && self.mode == Mode::Script {
            return refuse(format!(
                "{} needs the redislock module (module mode): plain Redis cannot bind a lock to a connection",
                name("release_on_disconnect")
            ));
        }
        if !self.release_on_disconnect && self.lock_delay.is_some() {
            return refuse(format!("{} needs {}", name("lock_delay"), name("release_on_disconnect")));
        }
        Ok(())
    }

    /// How often a kept lock of `ttl` is extended: `ttl × extend_fraction`
    /// (the fraction held to 0.05–0.9).
    pub fn extension_interval(&self, ttl: Duration) -> Duration {
        let fraction = if self.extend_fraction.is_nan() { 1.0 / 3.0 } else { self.extend_fraction.clamp(0.05, 0.9) };
        Duration::try_from_secs_f64(ttl.as_secs_f64() * fraction).unwrap_or(ttl)
    }

    /// The lock-delay of a session hold of `ttl`: the one set, or by
    /// default the extension interval plus a request timeout plus the
    /// clock drift of `ttl` plus twice `SESSION_MARGIN`, never longer than
    /// `ttl` (which bounds the hold anyway). A server frees the lock no
    /// sooner than this after the connection closed, and the connection
    /// was open when the server answered the holder's last confirmed
    /// round: so the holder may believe it holds until that round's start
    /// plus `session_window`, one margin short of the delay, and the next
    /// extension has an interval plus a request timeout plus a margin to
    /// be confirmed before that (see `session_window`).
    pub fn lock_delay_for(&self, ttl: Duration) -> Duration {
        match self.lock_delay {
            Some(delay) => delay,
            None => self
                .extension_interval(ttl)
                .saturating_add(self.request_timeout)
                .saturating_add(crate::quorum::drift(ttl, self.drift_factor))
                .saturating_add(SESSION_MARGIN.saturating_mul(2))
                .min(ttl),
        }
    }

    /// How long after the start of a round that confirmed a session hold
    /// of `ttl` (its grant or an extension) its holder may still believe it
    /// holds it, whatever becomes of its connections: the lock-delay less
    /// its clock drift and `SESSION_MARGIN`. A hold's validity never
    /// reaches past it, so its loss signal fires by then at the latest,
    /// from the holder's own clock, before any server can free the lock.
    /// `None` when holds are not bound to connections, and when the
    /// lock-delay is too short for an extension (an interval plus a request
    /// timeout) to confirm the hold inside the window: a delay set that
    /// short is taken as given (see `lock_delay`), and the hold's validity
    /// is its lease's.
    pub fn session_window(&self, ttl: Duration) -> Option<Duration> {
        if !self.release_on_disconnect || self.mode != Mode::Module {
            return None;
        }
        let delay = self.lock_delay_for(ttl);
        let window = delay.saturating_sub(crate::quorum::drift(delay, self.drift_factor)).saturating_sub(SESSION_MARGIN);
        (window > self.extension_interval(ttl).saturating_add(self.request_timeout)).then_some(window)
    }

    /// The lock-delay of an election's hold of `ttl` (see `election`), the
    /// one place its rule is kept: holds bound to the connection
    /// (`release_on_disconnect`, module mode), and a lock-delay that leaves
    /// a session window (`session_window`): a leader cut off from a server
    /// is told of it by its own clock, before that server can grant the
    /// next term. Settings that break it are an `Error::Config` naming
    /// what to change.
    pub fn election_lock_delay(&self, ttl: Duration, names: &Names) -> Result<Duration, Error> {
        self.bound_lock_delay(ttl, names, &BoundHold::ELECTION)
    }

    /// `election_lock_delay` for a group member's hold (see `members`): the
    /// same rule, so a member cut off from a server learns it before that
    /// server lists it no more.
    pub fn member_lock_delay(&self, ttl: Duration, names: &Names) -> Result<Duration, Error> {
        self.bound_lock_delay(ttl, names, &BoundHold::MEMBER)
    }

    fn bound_lock_delay(&self, ttl: Duration, names: &Names, hold: &BoundHold) -> Result<Duration, Error> {
        let name = names.option;
        let BoundHold { what, holder, stored } = hold;
        if self.mode != Mode::Module {
            return Err(Error::Config(format!("{what} needs the redislock module (module mode): {stored} stored with the lock")));
        }
        if !self.release_on_disconnect {
            return Err(Error::Config(format!(
                "{what} needs {} on: {holder}'s hold must end with its connection, not only with its lease",
                name("release_on_disconnect")
            )));
        }
        let delay = self.lock_delay_for(ttl);
        if self.session_window(ttl).is_none() {
            let needed = self
                .extension_interval(ttl)
                .saturating_add(self.request_timeout)
                .saturating_add(SESSION_MARGIN)
                .saturating_add(crate::quorum::drift(delay, self.drift_factor));
            let unit = names.unit;
            return Err(Error::Config(format!(
                "{what}'s lock-delay ({} {}) must be longer than the extension interval plus {} plus a margin of {} ms and the drift ({} {}): raise {} (or leave it unset), lower {}, or take a longer ttl",
                unit.of(delay),
                unit.symbol(),
                name("request_timeout"),
                SESSION_MARGIN.as_millis(),
                unit.of(needed),
                unit.symbol(),
                name("lock_delay"),
                name("extend_fraction"),
            )));
        }
        Ok(delay)
    }

    /// `SESSION DELAY ms` for a grant of `ttl`, when holds end with their
    /// connection: the delay in ms; `None` otherwise.
    pub fn session_delay_ms(&self, ttl: Duration) -> Option<u64> {
        (self.release_on_disconnect && self.mode == Mode::Module)
            .then(|| u64::try_from(self.lock_delay_for(ttl).as_micros().div_ceil(1000)).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lock_delay_outlasts_an_extension_interval_a_request_and_the_margin() {
        let s = Settings { release_on_disconnect: true, ..Settings::default() };
        let ttl = Duration::from_millis(1500);
        // 500 ms interval + 50 ms request + 17 ms drift + 2 × 100 ms margin.
        assert_eq!(s.session_delay_ms(ttl), Some(767));
        // The holder believes one margin and the delay's drift short of it
        // (767 - 9.67 - 100), past the next extension's interval and request.
        let window = s.session_window(ttl).expect("a window");
        assert_eq!(window.as_micros(), 657_330);
        assert!(window > s.extension_interval(ttl) + s.request_timeout);
        // Set explicitly, even to 0, it is taken as given, without a window.
        let zero = Settings { lock_delay: Some(Duration::ZERO), ..s.clone() };
        assert_eq!(zero.session_delay_ms(ttl), Some(0));
        assert_eq!(zero.session_window(ttl), None);
        let long = Settings { lock_delay: Some(Duration::from_secs(5)), ..s.clone() };
        assert_eq!(long.session_window(ttl).map(|w| w.as_millis()), Some(4848));
        // Never past the lease; no session, no delay and no window.
        assert_eq!(s.lock_delay_for(Duration::from_millis(40)), Duration::from_millis(40));
        assert_eq!(s.session_window(Duration::from_millis(40)), None);
        assert_eq!(Settings::default().session_delay_ms(ttl), None);
        assert_eq!(Settings::default().session_window(ttl), None);
        let odd = Settings { extend_fraction: f64::NAN, ..s };
        assert_eq!(odd.extension_interval(ttl), Duration::from_millis(500));
    }

    #[test]
    fn an_election_needs_bound_holds_and_a_session_window() {
        let ttl = Duration::from_millis(1500);
        let bound = Settings { release_on_disconnect: true, ..Settings::default() };
        assert_eq!(bound.election_lock_delay(ttl, &Names::RUST).ok(), Some(Duration::from_millis(767)));
        for (odd, says) in [
            (Settings::default(), "release_on_disconnect"),
            (Settings { mode: Mode::Script, ..Settings::default() }, "module mode"),
            // 650 ms less its drift and the margin leaves no room for an
            // extension's interval and request (550 ms).
            (Settings { lock_delay: Some(Duration::from_millis(650)), ..bound.clone() }, "lock_delay"),
            // 0.9 of the ttl plus a request passes the ttl, which caps the delay.
            (Settings { extend_fraction: 0.9, request_timeout: Duration::from_millis(200), ..bound.clone() }, "extend_fraction"),
        ] {
            match odd.election_lock_delay(ttl, &Names::RUST) {
                Err(Error::Config(message)) => assert!(message.contains(says), "{message}"),
                other => panic!("{odd:?} passed: {other:?}"),
            }
        }
        let longer = Settings { lock_delay: Some(Duration::from_millis(660)), ..bound };
        assert_eq!(longer.election_lock_delay(ttl, &Names::RUST).ok(), Some(Duration::from_millis(660)));
    }

    #[test]
    fn validate_names_the_setting_as_its_caller_does() {
        assert!(Settings::default().validate(5).is_ok());
        let bad = Settings { request_timeout: Duration::ZERO, ..Settings::default() };
        let node = Names { option: |n| format!("options.{n}"), unit: Unit::Milliseconds, servers: "urls", list: "an array" };
        let Err(Error::Config(message)) = bad.validate_named(5, &node) else { panic!("a zero timeout passed") };
        assert_eq!(message, "options.request_timeout must be more than 0 ms");
        for odd in [
            Settings { quorum: Some(6), ..Settings::default() },
            Settings { quorum: Some(0), ..Settings::default() },
            Settings { extend_fraction: 1.0, ..Settings::default() },
            Settings { drift_factor: f64::NAN, ..Settings::default() },
            Settings { retry_delay: (Duration::from_millis(2), Duration::from_millis(1)), ..Settings::default() },
            Settings { lock_delay: Some(Duration::ZERO), ..Settings::default() },
            Settings { release_on_disconnect: true, mode: Mode::Script, ..Settings::default() },
        ] {
            assert!(matches!(odd.validate(5), Err(Error::Config(_))), "{odd:?}");
        }
    }
}
