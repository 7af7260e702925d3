//! JavaScript arguments to the crate's options and requests. The checks
//! are the crate's (`redlock::hold::input`), in this package's names
//! (`NAMES`: `options.retryCount`) and unit (milliseconds); a bad value
//! throws a `ConfigError` naming the argument, never panics. Types are
//! checked first by the package's JavaScript, which throws `TypeError`s.

use napi::bindgen_prelude::Either;
use napi::Env;
use napi::Result;
use napi_derive::napi;
use redlock::hold::{self, Patience, Request, Span};
use redlock::{Names, Pem, Redlock, Settings, TlsSettings, Unit};

use crate::errors::{config_error, thrown, thrown_in};

/// An option as JavaScript callers write it: `options.` and camelCase
/// (`retry_count` is `options.retryCount`); the lease is the `ttl` argument.
fn option(name: &str) -> String {
    if name == "ttl" {
        return name.to_string();
    }
    let mut spelled = String::from("options.");
    let mut upper = false;
    for c in name.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                spelled.extend(c.to_uppercase());
                upper = false;
            }
            c => spelled.push(c),
        }
    }
    spelled
}

pub const NAMES: Names = Names { option, unit: Unit::Milliseconds, servers: "urls", list: "an array" };

/// A duration as JavaScript passes one: a number of milliseconds, or a
/// string with its unit (`'10s'`, `'500ms'`, the CLI's), both checked by
/// the crate (`Names::span`; the package's JavaScript checked the type).
pub type Duration = Either<f64, String>;

/// `value` as the crate's `Span`.
pub fn span(value: Duration) -> Span {
    match value {
        Either::A(ms) => Span::Number(ms),
        Either::B(text) => Span::Text(text),
    }
}

/// `new Redlock(urls, options)`'s options; each left out is the Rust
/// client's default (`Settings::default()`, docs/node.md).
#[napi(object)]
#[derive(Default)]
pub struct Options {
    /// Servers that must agree; default a majority (N/2 + 1).
    pub quorum: Option<f64>,
    /// Per-request timeout (ms, or a string such as `'50ms'`), much
    /// smaller than any ttl.
    pub request_timeout: Option<Duration>,
    /// Timeout to (re)connect to a server (ms).
    pub connect_timeout: Option<Duration>,
    /// Attempts after the first one of `acquire(..., { retry: true })`.
    pub retry_count: Option<f64>,
    /// Pause between attempts (ms), `retryDelay ± retryJitter`: by
    /// default the middle of the Rust client's range.
    pub retry_delay: Option<Duration>,
    /// By default half the Rust client's range.
    pub retry_jitter: Option<Duration>,
    /// Clock drift: ttl × driftFactor + 2 ms.
    pub drift_factor: Option<f64>,
    /// A kept lock is extended after this fraction of its ttl.
    pub extend_fraction: Option<f64>,
    /// `"module"` (default) or `"script"` (plain Redis, no tokens).
    pub mode: Option<String>,
    /// Locks end with this process's connections (`SESSION`). Default false.
    pub release_on_disconnect: Option<bool>,
    /// With `releaseOnDisconnect`: the lock-delay (ms). Default: the
    /// extension interval plus a request timeout, the drift and twice
    /// `SESSION_MARGIN` (`Settings::lock_delay_for`); a value, even 0, is
    /// taken as given.
    pub lock_delay: Option<Duration>,
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
    if !urls.iter().any(|u| redlock::is_tls_url(u)) {
        return Err(config_error(
            "options.tls is given, but no server URL is rediss://: TLS is chosen per server by its URL, rediss://host:port",
        ));
    }
    let pem = |text: Option<String>| text.map(|t| Pem::Text(t.into_bytes()));
    Ok(TlsSettings { ca_cert: pem(t.ca), client_cert: pem(t.cert), client_key: pem(t.key), insecure: t.reject_unauthorized == Some(false) })
}

/// `urls`: an array of URLs, or one URL as a string (one server).
pub fn server_list(urls: Either<String, Vec<String>>) -> Result<Vec<String>> {
    match urls {
        Either::A(one) => NAMES.one_server(one).map_err(thrown),
        Either::B(list) => Ok(list),
    }
}

/// `retryDelay ± retryJitter` as the range of pauses, each left out taken
/// from the Rust client's default range.
fn retry_delay(env: &Env, delay: Option<Duration>, jitter: Option<Duration>) -> Result<Option<(std::time::Duration, std::time::Duration)>> {
    if delay.is_none() && jitter.is_none() {
        return Ok(None);
    }
    let (lo, hi) = Settings::default().retry_delay;
    let delay = match delay {
        Some(d) => NAMES.span("retry_delay", span(d)).map_err(|f| thrown_in(env, f))?,
        None => (lo + hi) / 2,
    };
    let jitter = match jitter {
        Some(j) => NAMES.span("retry_jitter", span(j)).map_err(|f| thrown_in(env, f))?,
        None => (hi - lo) / 2,
    };
    Ok(Some((delay.saturating_sub(jitter), delay.saturating_add(jitter))))
}

pub fn new_redlock(env: &Env, urls: Vec<String>, options: Options) -> Result<Redlock> {
    let options = hold::Options {
        quorum: options.quorum,
        request_timeout: options.request_timeout.map(span),
        connect_timeout: options.connect_timeout.map(span),
        retry_count: options.retry_count,
        retry_delay: retry_delay(env, options.retry_delay, options.retry_jitter)?,
        drift_factor: options.drift_factor,
        extend_fraction: options.extend_fraction,
        mode: options.mode,
        release_on_disconnect: options.release_on_disconnect,
        lock_delay: options.lock_delay.map(span),
        tls: tls(&urls, options.tls)?,
    };
    let settings = NAMES.settings(options, urls.len()).map_err(|f| thrown_in(env, f))?;
    Redlock::new(&urls, settings).map_err(|e| config_error(e.to_string()))
}

/// `acquire`'s arguments: `resource`, one name or an array of names
/// locked all or nothing; `ttl`; `wait` in the resource's line (`Infinity`:
/// no limit), else `retry` for the configured retries, else one round;
/// `permits` of a semaphore of `limit`.
#[allow(clippy::too_many_arguments)]
pub fn request(
    env: &Env,
    resource: Either<String, Vec<String>>,
    ttl: Duration,
    wait: Option<Duration>,
    retry: bool,
    shared: bool,
    limit: Option<f64>,
    permits: Option<f64>,
) -> Result<Request> {
    let resources = match resource {
        Either::A(one) => vec![one],
        Either::B(several) => several,
    };
    let patience: Patience = NAMES.patience(wait.map(span), retry).map_err(|f| thrown_in(env, f))?;
    NAMES.request(&resources, span(ttl), shared, limit, permits, patience).map_err(|f| thrown_in(env, f))
}
