//! Python arguments to the crate's options and requests. The checks are
//! the crate's (`redlock::hold::input`), in Python's names and seconds
//! (`hold::NAMES`): bad input is a ValueError (or ConfigError), never a
//! panic.

use std::path::PathBuf;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};
use redlock::hold::{Options, Patience, Request, Span};
use redlock::{Mode, Pem, Redlock, Settings, TlsSettings};

use crate::errors::py;
use crate::hold::NAMES;

/// The keyword arguments (`**options`) a call was given.
pub type Kwargs<'a, 'py> = &'a Bound<'py, PyDict>;

/// A duration argument as Python writes one: a number of seconds (`int`
/// or `float`, not `bool`), a `datetime.timedelta`, or a duration string
/// such as `"10s"` or `"500ms"` (the CLI's, parsed by the crate); checked
/// by the crate (`Names::span`, `Names::ttl`). Anything else is a
/// TypeError naming `argument` (as the caller wrote it: `ttl`,
/// `lock() argument 'wait'`).
pub fn span(argument: &str, value: &Bound<'_, PyAny>) -> PyResult<Span> {
    if !value.is_instance_of::<PyBool>() {
        if let Ok(number) = value.extract::<f64>() {
            return Ok(Span::Number(number));
        }
        if value.is_instance_of::<PyString>() {
            return Ok(Span::Text(value.extract()?));
        }
        let timedelta = value.py().import("datetime")?.getattr("timedelta")?;
        if value.is_instance(&timedelta)? {
            return exact(argument, value).map(Span::Exact);
        }
    }
    let shown = value.repr().map(|r| r.to_string()).unwrap_or_else(|_| "that".into());
    let class = value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into());
    Err(PyTypeError::new_err(format!(
        "{argument} must be a number of seconds, a datetime.timedelta or a duration string such as '10s' or '500ms', \
         not {class} {shown}"
    )))
}

/// A `timedelta` as a Duration, to the microsecond; a negative one is a
/// ValueError naming `argument`.
fn exact(argument: &str, delta: &Bound<'_, PyAny>) -> PyResult<std::time::Duration> {
    let part = |name: &str| delta.getattr(name).and_then(|v| v.extract::<i64>());
    let (days, seconds, micros) = (part("days")?, part("seconds")?, part("microseconds")?);
    // timedelta keeps 0 <= seconds < 86400 and 0 <= microseconds < 10**6;
    // only days carries the sign.
    let whole = days.checked_mul(86_400).and_then(|d| d.checked_add(seconds)).and_then(|s| u64::try_from(s).ok());
    let (Some(whole), Ok(micros)) = (whole, u32::try_from(micros)) else {
        return Err(PyValueError::new_err(format!(
            "{argument} must not be negative, not {}",
            delta.repr().map(|r| r.to_string()).unwrap_or_default()
        )));
    };
    Ok(std::time::Duration::new(whole, micros.saturating_mul(1000)))
}

/// `span` of an optional argument: None is left out.
pub fn optional_span(argument: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Span>> {
    value.filter(|v| !v.is_none()).map(|v| span(argument, v)).transpose()
}

/// The server list: a list of URLs, or one URL as a string (one server).
/// One string naming several servers (`"redis://a:1,redis://b:2"`) is a
/// list written as a string: ConfigError, saying to pass a list.
fn server_list(servers: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(one) = servers.extract::<String>() {
        return NAMES.one_server(one).map_err(py);
    }
    servers.extract::<Vec<String>>().map_err(|_| {
        PyTypeError::new_err(format!(
            "servers must be a list of URLs such as [\"redis://127.0.0.1:7001\", ...] or one URL as a string, not {}",
            servers.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "that".into())
        ))
    })
}

/// redis-py's TLS arguments as the crate's `TlsSettings`: paths of PEM
/// files (read and checked by `Redlock::new`, which names a bad one), and
/// `ssl_cert_reqs` `"required"` (the default) or `"none"` (no certificate
/// checks), as a string or `ssl.CERT_REQUIRED` / `ssl.CERT_NONE`.
fn tls(files: [Option<PathBuf>; 3], ssl_cert_reqs: Option<&Bound<'_, PyAny>>) -> PyResult<TlsSettings> {
    let refused = |what: String| {
        PyValueError::new_err(format!(
            "ssl_cert_reqs must be \"required\" (the default: certificates are checked) or \"none\" (no checks), \
             or ssl.CERT_REQUIRED / ssl.CERT_NONE, not {what}"
        ))
    };
    let insecure = match ssl_cert_reqs {
        None => false,
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
    let [ca, cert, key] = files.map(|f| f.map(Pem::File));
    Ok(TlsSettings { ca_cert: ca, client_cert: cert, client_key: key, insecure })
}

/// `Redlock(servers, **options)` and `AsyncRedlock(...)`: the keyword
/// arguments of docs/python.md (and the stubs), each left out or None the
/// crate's default (`Settings::default`, the only place defaults are
/// written; the stubs state them, checked by the tests). `class` names the caller in a
/// TypeError.
pub fn new_redlock(class: &str, servers: &Bound<'_, PyAny>, options: Option<Kwargs>) -> PyResult<Redlock> {
    let servers = server_list(servers)?;
    let mut o = Options::default();
    let (mut files, mut cert_reqs) = ([None, None, None], None);
    for (key, value) in options.into_iter().flat_map(|d| d.iter()) {
        let key: String = key.extract()?;
        let typed = |e: PyErr| PyTypeError::new_err(format!("{class}() argument '{key}': {e}"));
        if value.is_none() {
            continue; // the default, as left out
        }
        let number = || value.extract::<f64>().map_err(typed);
        let whole = || value.extract::<i64>().map(|n| n as f64).map_err(typed);
        let time = || span(&format!("{class}() argument '{key}'"), &value);
        match key.as_str() {
            "quorum" => o.quorum = Some(whole()?),
            "request_timeout" => o.request_timeout = Some(time()?),
            "connect_timeout" => o.connect_timeout = Some(time()?),
            "retry_count" => o.retry_count = Some(whole()?),
            "retry_delay" => {
                let (lo, hi): (Bound<'_, PyAny>, Bound<'_, PyAny>) = value.extract().map_err(typed)?;
                let bound = |v: &Bound<'_, PyAny>| {
                    let v = span(&format!("{class}() argument 'retry_delay'"), v)?;
                    NAMES.span("retry_delay", v).map_err(py)
                };
                o.retry_delay = Some((bound(&lo)?, bound(&hi)?));
            }
            "drift_factor" => o.drift_factor = Some(number()?),
            "extend_fraction" => o.extend_fraction = Some(number()?),
            "mode" => o.mode = Some(value.extract().map_err(typed)?),
            "release_on_disconnect" => o.release_on_disconnect = Some(value.extract().map_err(typed)?),
            "lock_delay" => o.lock_delay = Some(time()?),
            "ssl_ca_certs" => files[0] = Some(value.extract().map_err(typed)?),
            "ssl_certfile" => files[1] = Some(value.extract().map_err(typed)?),
            "ssl_keyfile" => files[2] = Some(value.extract().map_err(typed)?),
            "ssl_cert_reqs" => cert_reqs = Some(value),
            _ => return Err(unexpected(class, &key)),
        }
    }
    o.tls = tls(files, cert_reqs.as_ref())?;
    let settings = NAMES.settings(o, servers.len()).map_err(py)?;
    Redlock::new(&servers, settings).map_err(|e| py(e.into()))
}

fn unexpected(method: &str, key: &str) -> PyErr {
    PyTypeError::new_err(format!("{method}() got an unexpected keyword argument '{key}'"))
}

/// The resources of a call: one name (`str`), or several as a list or a
/// tuple of `str`, locked all or nothing. Their checks (none named twice,
/// at least one) are the crate's, in `request`.
fn resources(method: &str, resource: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(one) = resource.extract::<String>() {
        return Ok(vec![one]);
    }
    // Not any sequence: a str is one, and a set has no order to keep.
    let listed = resource.is_instance_of::<PyList>() || resource.is_instance_of::<PyTuple>();
    let several = if listed { resource.extract::<Vec<String>>().ok() } else { None };
    several.ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{method}() argument 'resource' must be a str or a list or tuple of str, not {}",
            resource.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "that".into())
        ))
    })
}

/// The request of `try_lock` (one round) or of `lock` and `guard`
/// (`wait`: seconds in the resource's line, `math.inf` for no limit; None
/// for the configured retries), and its `on_lost` callback: the
/// keyword-only arguments `shared`, `limit`, `permits` and (but for
/// `try_lock`) `on_lost`, of the methods of `Redlock` and `AsyncRedlock`
/// alike. `resource` is one name or a list or tuple of names.
pub fn request(
    method: &str,
    resource: &Bound<'_, PyAny>,
    ttl: &Bound<'_, PyAny>,
    wait: Option<&Bound<'_, PyAny>>,
    options: Option<Kwargs>,
) -> PyResult<(Request, Option<Py<PyAny>>)> {
    let once = method == "try_lock";
    let resources = resources(method, resource)?;
    let ttl = span(&format!("{method}() argument 'ttl'"), ttl)?;
    let wait = optional_span(&format!("{method}() argument 'wait'"), wait)?;
    let (mut shared, mut limit, mut permits, mut on_lost) = (false, None, None, None);
    for (key, value) in options.into_iter().flat_map(|d| d.iter()) {
        let key: String = key.extract()?;
        let typed = |e: PyErr| PyTypeError::new_err(format!("{method}() argument '{key}': {e}"));
        match key.as_str() {
            "shared" => shared = value.extract().map_err(typed)?,
            "limit" => limit = value.extract::<Option<i64>>().map_err(typed)?.map(|n| n as f64),
            "permits" => permits = value.extract::<Option<i64>>().map_err(typed)?.map(|n| n as f64),
            "on_lost" if !once => on_lost = (!value.is_none()).then(|| value.unbind()),
            _ => return Err(unexpected(method, &key)),
        }
    }
    let patience = if once { Ok(Patience::Once) } else { NAMES.patience(wait, true) };
    Ok((NAMES.request(&resources, ttl, shared, limit, permits, patience.map_err(py)?).map_err(py)?, on_lost))
}

/// A ttl argument of `method` (an extension's, an election's).
pub fn ttl(method: &str, value: &Bound<'_, PyAny>) -> PyResult<std::time::Duration> {
    NAMES.ttl(span(&format!("{method}() argument 'ttl'"), value)?).map_err(py)
}

/// `_redislock._DEFAULTS`: `Settings::default()` in Python's terms, for
/// the test that keeps the stubs' defaults in step with it.
pub fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = Settings::default();
    let dict = PyDict::new(py);
    dict.set_item("request_timeout", d.request_timeout.as_secs_f64())?;
    dict.set_item("connect_timeout", d.connect_timeout.as_secs_f64())?;
    dict.set_item("retry_count", d.retry_count)?;
    dict.set_item("retry_delay", (d.retry_delay.0.as_secs_f64(), d.retry_delay.1.as_secs_f64()))?;
    dict.set_item("drift_factor", d.drift_factor)?;
    dict.set_item("extend_fraction", d.extend_fraction)?;
    dict.set_item("mode", if d.mode == Mode::Module { "module" } else { "script" })?;
    dict.set_item("release_on_disconnect", d.release_on_disconnect)?;
    dict.set_item("quorum", d.quorum)?;
    dict.set_item("lock_delay", d.lock_delay.map(|l| l.as_secs_f64()))?;
    Ok(dict)
}

/// Whether `__exit__` or `__aexit__` got the exception type of a block
/// that raised (not None, as after a block that ended normally).
pub fn raised(exc_type: Option<&Bound<'_, PyAny>>) -> bool {
    exc_type.is_some_and(|t| !t.is_none())
}
