//! JavaScript arguments to crate values, checked: a bad value throws a
//! `ConfigError` naming the argument (`errors::config_error`), never
//! panics. Types are checked first by the package's JavaScript, which
//! throws `TypeError`s; times are milliseconds.

use std::time::{Duration, Instant};

use napi::bindgen_prelude::Either;
use napi::Result;
use napi_derive::napi;
use redlock::{Mode, Pem, Redlock, Settings, TlsSettings};

use crate::errors::config_error;

/// Stands in for "no time limit" in a deadline-driven wait (`wait: Infinity`).
const FOREVER: Duration = Duration::from_secs(10 * 365 * 86_400);

/// `new Redlock(urls, options)`'s options, as the crate's `Settings`.
#[napi(object)]
#[derive(Default)]
pub struct Options {
    /// Servers that must agree; default a majority (N/2 + 1).
    pub quorum: Option<f64>,
    /// Per-request timeout (ms), much smaller than any ttl. Default 50.
    pub request_timeout: Option<f64>,
    /// Timeout to (re)connect to a server (ms). Default 200.
    pub connect_timeout: Option<f64>,
    /// Attempts after the first one of `acquire(..., { retry: true })`. Default 3.
    pub retry_count: Option<f64>,
    /// Pause between attempts (ms), `retryDelay ± retryJitter`. Default 150.
    pub retry_delay: Option<f64>,
    /// Default 50: pauses of 100 to 200 ms.
    pub retry_jitter: Option<f64>,
    /// Clock drift: ttl × driftFactor + 2 ms. Default 0.01.
    pub drift_factor: Option<f64>,
    /// A kept lock is extended after this fraction of its ttl. Default 1/3.
    pub extend_fraction: Option<f64>,
    /// `"module"` (default) or `"script"` (plain Redis, no tokens).
    pub mode: Option<String>,
    /// Locks end with this process's connections (`SESSION`). Default false.
    pub release_on_disconnect: Option<bool>,
    /// With `releaseOnDisconnect`: the lock-delay (ms). Default: the
    /// extension interval plus a request timeout and the drift
    /// (`Settings::lock_delay_for`); a value, even 0, is taken as given.
    pub lock_delay: Option<f64>,
    /// TLS of the `rediss://` servers (Node's `tls` options' shape).
    pub tls: Option<TlsOptions>,
}

/// `options.tls`: PEM texts (the package joins arrays and turns Buffers
/// into text) and `rejectUnauthorized`, as the crate's `TlsSettings`.
#[napi(object)]
#[derive(Default)]
pub struct TlsOptions {
    /// The CA certificate(s) the servers' certificates must chain to;
    /// default: the system's roots.
    pub ca: Option<String>,
    /// This client's certificate, for servers that check clients.
    pub cert: Option<String>,
    /// The private key of `cert`.
    pub key: Option<String>,
    /// `false`: no certificate checks at all. Default true.
    pub reject_unauthorized: Option<bool>,
}

/// `options.tls` as `TlsSettings`. Given while no server is `rediss://`,
/// it is refused: TLS is chosen per server by its URL (an ioredis habit,
/// `tls: {}` on a `redis://` URL, would otherwise silently send plain
/// text).
fn tls(urls: &[String], options: Option<TlsOptions>) -> Result<TlsSettings> {
    let Some(t) = options else { return Ok(TlsSettings::default()) };
    if !urls.iter().any(|u| redlock::transport::is_tls_url(u)) {
        return Err(config_error(
            "options.tls is given, but no server URL is rediss://: TLS is chosen per server by its URL, rediss://host:port",
        ));
    }
    let pem = |text: Option<String>| text.map(|t| Pem::Text(t.into_bytes()));
    Ok(TlsSettings { ca_cert: pem(t.ca), client_cert: pem(t.cert), client_key: pem(t.key), insecure: t.reject_unauthorized == Some(false) })
}

/// `value` ms as a Duration: finite and not negative.
pub fn millis(what: &str, value: f64) -> Result<Duration> {
    if !value.is_finite() || value < 0.0 {
        return Err(config_error(format!("{what} must be a finite number of milliseconds >= 0, not {value}")));
    }
    Duration::try_from_secs_f64(value / 1000.0).map_err(|e| config_error(format!("{what} = {value}: {e}")))
}

/// A lease: at least the servers' resolution of one millisecond.
pub fn ttl(value: f64) -> Result<Duration> {
    let refused = || config_error(format!("ttl must be a finite number of milliseconds >= 1, not {value}"));
    if !value.is_finite() {
        return Err(refused());
    }
    match Duration::try_from_secs_f64(value / 1000.0) {
        Ok(ttl) if ttl >= Duration::from_millis(1) => Ok(ttl),
        _ => Err(refused()),
    }
}

/// A whole number in `lo..=hi`, for counts.
fn whole(what: &str, value: f64, lo: f64, hi: f64) -> Result<f64> {
    if !value.is_finite() || value.fract() != 0.0 || value < lo || value > hi {
        return Err(config_error(format!("{what} must be a whole number from {lo} to {hi}, not {value}")));
    }
    Ok(value)
}

/// `urls`: an array of URLs, or one URL as a string (one server). One
/// string naming several servers (`'redis://a:1,redis://b:2'`) is an
/// array written as a string: a ConfigError saying to pass an array, not
/// the URL parser's complaint about a port.
pub fn server_list(urls: Either<String, Vec<String>>) -> Result<Vec<String>> {
    match urls {
        Either::A(one) => match redlock::servers_in_one(&one) {
            Some(several) => {
                let array = several.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
                Err(config_error(format!("urls is one string naming {} servers ({one:?}): pass an array, [{array}]", several.len())))
            }
            None => Ok(vec![one]),
        },
        Either::B(list) => Ok(list),
    }
}

pub fn new_redlock(urls: Vec<String>, options: Options) -> Result<Redlock> {
    let defaults = Settings::default();
    let positive = |what: &str, v: Option<f64>, default: Duration| -> Result<Duration> {
        let Some(v) = v else { return Ok(default) };
        let d = millis(what, v)?;
        if d.is_zero() {
            return Err(config_error(format!("{what} must be more than 0 ms, not {v}")));
        }
        Ok(d)
    };
    let quorum = match options.quorum {
        None => None,
        Some(q) => Some(whole("options.quorum", q, 1.0, urls.len().max(1) as f64)? as usize),
    };
    let retry_count = match options.retry_count {
        None => defaults.retry_count,
        Some(n) => whole("options.retryCount", n, 0.0, f64::from(u32::MAX))? as u32,
    };
    let delay = millis("options.retryDelay", options.retry_delay.unwrap_or(150.0))?;
    let jitter = millis("options.retryJitter", options.retry_jitter.unwrap_or(50.0))?;
    let drift_factor = options.drift_factor.unwrap_or(defaults.drift_factor);
    if !drift_factor.is_finite() || drift_factor < 0.0 {
        return Err(config_error(format!("options.driftFactor must be a finite number >= 0, not {drift_factor}")));
    }
    let extend_fraction = options.extend_fraction.unwrap_or(defaults.extend_fraction);
    // The guard clamps it to 0.05..0.9; outside (0, 1) it makes no sense at all.
    if !(extend_fraction > 0.0 && extend_fraction < 1.0) {
        return Err(config_error(format!("options.extendFraction must be between 0 and 1, not {extend_fraction}")));
    }
    let mode = match options.mode.as_deref() {
        None | Some("module") => Mode::Module,
        Some("script") => Mode::Script,
        Some(other) => return Err(config_error(format!("options.mode must be 'module' or 'script', not {other:?}"))),
    };
    let settings = Settings {
        request_timeout: positive("options.requestTimeout", options.request_timeout, defaults.request_timeout)?,
        connect_timeout: positive("options.connectTimeout", options.connect_timeout, defaults.connect_timeout)?,
        retry_count,
        retry_delay: (delay.saturating_sub(jitter), delay.saturating_add(jitter)),
        drift_factor,
        quorum,
        mode,
        extend_fraction,
        release_on_disconnect: options.release_on_disconnect.unwrap_or(false),
        lock_delay: options.lock_delay.map(|v| millis("options.lockDelay", v)).transpose()?,
        tls: tls(&urls, options.tls)?,
    };
    Redlock::new(&urls, settings).map_err(|e| config_error(e.to_string()))
}

/// What to acquire.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Exclusive,
    /// A shared hold of a read-write lock.
    Shared,
    /// A permit of a semaphore of this many.
    Permit(u32),
}

/// How long to try.
#[derive(Clone, Copy, Debug)]
pub enum Patience {
    /// One attempt round.
    Once,
    /// The configured retries (`retryCount`, `retryDelay ± retryJitter`).
    Retries,
    /// Until this long from the start, in the resource's line.
    Wait(Duration),
}

#[derive(Clone, Debug)]
pub struct Request {
    pub resource: String,
    pub ttl: Duration,
    pub kind: Kind,
    pub patience: Patience,
}

impl Request {
    pub fn new(resource: String, ttl_ms: f64, wait_ms: Option<f64>, retry: bool, shared: bool, limit: Option<f64>) -> Result<Request> {
        let kind =
            match (shared, limit) {
                (true, Some(_)) => return Err(config_error(
                    "options.shared and options.limit exclude each other: a shared hold of a read-write lock, or a permit of a semaphore",
                )),
                (true, None) => Kind::Shared,
                (false, None) => Kind::Exclusive,
                (false, Some(n)) => Kind::Permit(whole("options.limit", n, 1.0, f64::from(redlock::semaphore::MAX_PERMITS))? as u32),
            };
        let patience = match (wait_ms, retry) {
            (Some(w), _) if w == f64::INFINITY => Patience::Wait(FOREVER),
            (Some(w), _) => Patience::Wait(millis("options.wait", w)?),
            (None, true) => Patience::Retries,
            (None, false) => Patience::Once,
        };
        Ok(Request { resource, ttl: ttl(ttl_ms)?, kind, patience })
    }

    /// The deadline of a wait starting now.
    pub fn deadline(&self) -> Option<Instant> {
        let now = Instant::now();
        match self.patience {
            Patience::Wait(w) => Some(now.checked_add(w).or_else(|| now.checked_add(FOREVER)).unwrap_or(now)),
            _ => None,
        }
    }
}
