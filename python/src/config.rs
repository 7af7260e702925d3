//! Python arguments to crate values, checked: bad input is a ValueError
//! (or ConfigError), never a panic.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use redlock::{Mode, Pem, Redlock, Settings, TlsSettings};

use crate::errors::Failure;

/// Stands in for "no deadline" in a deadline-driven wait (`wait=math.inf`).
const FOREVER: Duration = Duration::from_secs(10 * 365 * 86_400);

/// `value` seconds as a Duration: finite and not negative.
pub fn seconds(what: &str, value: f64) -> PyResult<Duration> {
    if !value.is_finite() || value < 0.0 {
        return Err(PyValueError::new_err(format!("{what} must be a finite number of seconds >= 0, not {value}")));
    }
    Duration::try_from_secs_f64(value).map_err(|e| PyValueError::new_err(format!("{what} = {value}: {e}")))
}

/// A lease: at least the servers' resolution of one millisecond (a
/// shorter one would be sent as 0 ms, which the servers refuse).
pub fn ttl(value: f64) -> PyResult<Duration> {
    let refused = || PyValueError::new_err(format!("ttl must be a finite number of seconds > 0 (at least 0.001), not {value}"));
    if !value.is_finite() {
        return Err(refused());
    }
    match Duration::try_from_secs_f64(value) {
        Ok(ttl) if ttl >= Duration::from_millis(1) => Ok(ttl),
        _ => Err(refused()),
    }
}

/// The server list: a list of URLs, or one URL as a string (one server).
/// One string naming several servers (`"redis://a:1,redis://b:2"`) is a
/// list written as a string: ConfigError, saying to pass a list.
pub fn server_list(servers: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(one) = servers.extract::<String>() {
        if let Some(several) = redlock::servers_in_one(&one) {
            let list = several.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
            return Err(crate::errors::ConfigError::new_err(format!(
                "servers is one string naming {} servers ({one:?}): pass a list, [{list}]",
                several.len()
            )));
        }
        return Ok(vec![one]);
    }
    servers.extract::<Vec<String>>().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "servers must be a list of URLs such as [\"redis://127.0.0.1:7001\", ...] or one URL as a string, not {}",
            servers.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "that".into())
        ))
    })
}

/// `wait`: `None` for the configured retries, a number of seconds, or
/// `math.inf` for no time limit.
fn wait(value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(v) if v == f64::INFINITY => Ok(Some(FOREVER)),
        Some(v) => seconds("wait", v).map(Some),
    }
}

/// redis-py's TLS arguments as the crate's `TlsSettings`: paths of PEM
/// files (read and checked by `Redlock::new`, which names a bad one), and
/// `ssl_cert_reqs` `"required"` (the default) or `"none"` (no certificate
/// checks), as a string or `ssl.CERT_REQUIRED` / `ssl.CERT_NONE`.
pub fn tls(
    ssl_ca_certs: Option<PathBuf>,
    ssl_certfile: Option<PathBuf>,
    ssl_keyfile: Option<PathBuf>,
    ssl_cert_reqs: Option<&Bound<'_, PyAny>>,
) -> PyResult<TlsSettings> {
    let refused = |what: String| {
        PyValueError::new_err(format!(
            "ssl_cert_reqs must be \"required\" (the default: certificates are checked) or \"none\" (no checks), \
             or ssl.CERT_REQUIRED / ssl.CERT_NONE, not {what}"
        ))
    };
    let insecure = match ssl_cert_reqs {
        None => false,
        Some(v) if v.is_none() => false,
        Some(v) => {
            if let Ok(text) = v.extract::<String>() {
                match text.to_ascii_lowercase().as_str() {
                    "required" => false,
                    "none" => true,
                    _ => return Err(refused(format!("{text:?}"))),
                }
            } else if let Ok(n) = v.extract::<i64>() {
                // ssl.CERT_NONE is 0, ssl.CERT_REQUIRED 2 (CERT_OPTIONAL,
                // 1, has no meaning for a client's check of a server).
                match n {
                    2 => false,
                    0 => true,
                    _ => return Err(refused(n.to_string())),
                }
            } else {
                return Err(refused(v.repr().map(|r| r.to_string()).unwrap_or_else(|_| "that".into())));
            }
        }
    };
    Ok(TlsSettings {
        ca_cert: ssl_ca_certs.map(Pem::File),
        client_cert: ssl_certfile.map(Pem::File),
        client_key: ssl_keyfile.map(Pem::File),
        insecure,
    })
}

#[allow(clippy::too_many_arguments)]
pub fn new_redlock(
    servers: Vec<String>,
    quorum: Option<i64>,
    request_timeout: f64,
    connect_timeout: f64,
    retry_count: i64,
    retry_delay: (f64, f64),
    drift_factor: f64,
    extend_fraction: f64,
    mode: &str,
    (release_on_disconnect, lock_delay): (bool, Option<f64>),
    tls: TlsSettings,
) -> PyResult<Redlock> {
    let positive = |what: &str, v: f64| -> PyResult<Duration> {
        let d = seconds(what, v)?;
        if d.is_zero() {
            return Err(PyValueError::new_err(format!("{what} must be more than 0 s")));
        }
        Ok(d)
    };
    let quorum = match quorum {
        None => None,
        Some(q) => Some(usize::try_from(q).map_err(|_| PyValueError::new_err(format!("quorum must be >= 1, not {q}")))?),
    };
    let retry_count = u32::try_from(retry_count)
        .map_err(|_| PyValueError::new_err(format!("retry_count must be 0 to {}, not {retry_count}", u32::MAX)))?;
    if !drift_factor.is_finite() || drift_factor < 0.0 {
        return Err(PyValueError::new_err(format!("drift_factor must be a finite number >= 0, not {drift_factor}")));
    }
    // The guard clamps it to 0.05..0.9; outside (0, 1) it makes no sense at all.
    if !(extend_fraction > 0.0 && extend_fraction < 1.0) {
        return Err(PyValueError::new_err(format!("extend_fraction must be between 0 and 1, not {extend_fraction}")));
    }
    let mode = match mode {
        "module" => Mode::Module,
        "script" => Mode::Script,
        other => return Err(PyValueError::new_err(format!("mode must be 'module' or 'script', not {other:?}"))),
    };
    let settings = Settings {
        request_timeout: positive("request_timeout", request_timeout)?,
        connect_timeout: positive("connect_timeout", connect_timeout)?,
        retry_count,
        retry_delay: (seconds("retry_delay", retry_delay.0)?, seconds("retry_delay", retry_delay.1)?),
        drift_factor,
        quorum,
        mode,
        extend_fraction,
        release_on_disconnect,
        // None: the safe default (Settings::lock_delay_for); a value, even
        // 0, is taken as given.
        lock_delay: lock_delay.map(|v| seconds("lock_delay", v)).transpose()?,
        tls,
    };
    Redlock::new(&servers, settings).map_err(|e| Failure::from(e).into())
}

/// Whether `__exit__` or `__aexit__` got the exception type of a block
/// that raised (not None, as after a block that ended normally).
pub fn raised(exc_type: Option<&Bound<'_, PyAny>>) -> bool {
    exc_type.is_some_and(|t| !t.is_none())
}

/// What to acquire.
#[derive(Clone, Debug)]
pub enum Kind {
    Exclusive,
    /// A shared hold of a read-write lock.
    Shared,
    /// A permit of a semaphore of this many.
    Permit(u32),
}

#[derive(Clone, Debug)]
pub struct Request {
    pub resource: String,
    pub ttl: Duration,
    pub kind: Kind,
    /// `None`: the configured retries; else a deadline this far from the
    /// start (which also takes a place in the resource's line).
    pub wait: Option<Duration>,
}

impl Request {
    pub fn new(resource: String, ttl_s: f64, wait_s: Option<f64>, shared: bool, limit: Option<i64>) -> PyResult<Request> {
        let kind = match (shared, limit) {
            (true, Some(_)) => {
                return Err(PyValueError::new_err(
                    "shared and limit exclude each other: a shared hold of a read-write lock, or a permit of a semaphore",
                ))
            }
            (true, None) => Kind::Shared,
            (false, None) => Kind::Exclusive,
            (false, Some(n)) => Kind::Permit(
                u32::try_from(n).map_err(|_| PyValueError::new_err(format!("limit must be a positive number of permits, not {n}")))?,
            ),
        };
        Ok(Request { resource, ttl: ttl(ttl_s)?, kind, wait: wait(wait_s)? })
    }

    /// The deadline of a wait starting now.
    pub fn deadline(&self) -> Option<Instant> {
        let now = Instant::now();
        self.wait.map(|w| now.checked_add(w).or_else(|| now.checked_add(FOREVER)).unwrap_or(now))
    }
}
