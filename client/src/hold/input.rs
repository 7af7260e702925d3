//! What a binding's caller passes (durations as bare numbers of its unit,
//! as text with a unit or as its language's exact duration; counts as
//! numbers; options left out), checked and made the crate's values. Bad
//! input is a `Failure` naming the argument as the caller wrote it
//! (`Names`), never a panic: `Invalid` for a request's arguments,
//! `Error::Config` for the client's options, `WrongUnit` for a bare number
//! that is implausible in the caller's unit (`PLAUSIBLE`).

use std::time::Duration;

use super::{Failure, Kind, Patience, Request, FOREVER};
use crate::error::Error;
use crate::resources::Resources;
use crate::semaphore::MAX_PERMITS;
use crate::settings::{parse_duration, Mode, Names, Settings, TlsSettings, Unit};

/// A duration as a binding's caller wrote it.
#[derive(Clone, Debug, PartialEq)]
pub enum Span {
    /// A bare number of the caller's unit (`Names::unit`): checked
    /// against `PLAUSIBLE`, as a slip of units is silent otherwise.
    Number(f64),
    /// Text with its unit, `500ms`, `10s`, `2m` (`settings::parse_duration`,
    /// the CLI's parser).
    Text(String),
    /// A duration of the caller's language (Python's `timedelta`): its
    /// unit is part of it.
    Exact(Duration),
}

/// What a bare number of time may be, per argument: `least` for callers
/// counting in milliseconds (Node: a ttl of 10 meant as 10 s is 10 ms),
/// `most` for callers counting in seconds (Python: a request timeout of
/// 50 meant as 50 ms is 50 s). Zero is no slip of units (no wait, no
/// lock-delay; where it is refused, the setting's own check says why).
/// Text and exact durations are taken as written. Arguments not listed (retry delays) are not
/// bounded. Documented in docs/python.md and docs/node.md.
struct Plausible {
    option: &'static str,
    least: Duration,
    most: Duration,
}

const PLAUSIBLE: &[Plausible] = &[
    // A lease under 100 ms cannot outlast its own quorum round, the
    // drift and a retry; one over an hour is over the servers' default
    // max-ttl (redislock.max-ttl, 3600000 ms).
    Plausible { option: "ttl", least: Duration::from_millis(100), most: Duration::from_secs(3600) },
    // A server's answer takes a millisecond or less on a LAN (the default
    // timeouts are 50 ms and 200 ms); one that has not come in 10 s is a
    // server that is down, and every round would wait that long for it.
    Plausible { option: "request_timeout", least: Duration::from_millis(10), most: Duration::from_secs(10) },
    Plausible { option: "connect_timeout", least: Duration::from_millis(10), most: Duration::from_secs(10) },
    // Waits: 0 is one round (no wait); under 10 ms is less than a round
    // with a retry; over an hour, a likely slip (an exact duration, or
    // infinity, says it is meant).
    Plausible { option: "wait", least: Duration::from_millis(10), most: Duration::from_secs(3600) },
    Plausible { option: "timeout", least: Duration::from_millis(10), most: Duration::from_secs(3600) },
    Plausible { option: "lock_delay", least: Duration::from_millis(10), most: Duration::from_secs(3600) },
    Plausible { option: "observe_interval", least: Duration::from_millis(10), most: Duration::from_secs(3600) },
];

/// `x` without a float's noise: `0.05`, not `0.05000000000000000277`.
fn plain(x: f64) -> String {
    let text = format!("{x:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() || text == "-" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// The client's options as a binding's caller gives them: numbers of time
/// in `Names::unit`; each one left out (`None`) is `Settings::default()`'s.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub quorum: Option<f64>,
    pub request_timeout: Option<Span>,
    pub connect_timeout: Option<Span>,
    pub retry_count: Option<f64>,
    /// The pause between attempts, a range: checked by the binding, whose
    /// callers give it in shapes of their own (a pair, a delay ± jitter).
    pub retry_delay: Option<(Duration, Duration)>,
    pub drift_factor: Option<f64>,
    pub extend_fraction: Option<f64>,
    /// `module` or `script`.
    pub mode: Option<String>,
    pub release_on_disconnect: Option<bool>,
    /// `None`: the safe default (`Settings::lock_delay_for`); a value,
    /// even 0, is taken as given.
    pub lock_delay: Option<Span>,
    pub tls: TlsSettings,
}

impl Names {
    /// `value` of `Names::unit` as a Duration: finite and not negative.
    pub fn duration(&self, option: &str, value: f64) -> Result<Duration, String> {
        let (what, unit) = ((self.option)(option), self.unit);
        if !value.is_finite() || value < 0.0 {
            return Err(format!("{what} must be a finite number of {} >= 0, not {value}", unit.name()));
        }
        Duration::try_from_secs_f64(unit.seconds(value)).map_err(|e| format!("{what} = {value}: {e}"))
    }

    /// A duration argument in any of its spellings (`Span`); a bare number
    /// implausible for `option` in the caller's unit (`PLAUSIBLE`) is a
    /// `Failure::WrongUnit` saying how to write what was likely meant.
    pub fn span(&self, option: &str, span: Span) -> Result<Duration, Failure> {
        match span {
            Span::Number(value) => {
                let d = self.duration(option, value).map_err(Failure::Invalid)?;
                self.plausible(option, value, d)?;
                Ok(d)
            }
            Span::Text(text) => parse_duration(&text).map_err(|e| Failure::Invalid(format!("{}: {e}", (self.option)(option)))),
            Span::Exact(d) => Ok(d),
        }
    }

    /// Refuses `value` (`d`) when it is outside what a bare number of
    /// `option` may be in this caller's unit.
    fn plausible(&self, option: &str, value: f64, d: Duration) -> Result<(), Failure> {
        let Some(p) = PLAUSIBLE.iter().find(|p| p.option == option) else { return Ok(()) };
        let what = (self.option)(option);
        let v = plain(value);
        match self.unit {
            Unit::Seconds if d > p.most => Err(Failure::WrongUnit(format!(
                "{what}={v} is in seconds ({v} s), more than the {} s a bare number of it may be: for {v} ms write {}, \
                 timedelta(milliseconds={v}) or '{v}ms'; for {v} s, timedelta(seconds={v}) or '{v}s'",
                p.most.as_secs(),
                plain(value / 1000.0)
            ))),
            Unit::Milliseconds if d < p.least && !d.is_zero() => Err(Failure::WrongUnit(format!(
                "{what} {v} is in milliseconds ({v} ms), less than the {} ms a bare number of it may be: for {v} s write {} or '{v}s'; \
                 for {v} ms, '{v}ms'",
                p.least.as_millis(),
                plain(value * 1000.0)
            ))),
            _ => Ok(()),
        }
    }

    /// A lease: at least the servers' resolution of one millisecond (a
    /// shorter one would be sent as 0 ms, which the servers refuse); a
    /// bare number within `PLAUSIBLE`'s bounds too.
    pub fn ttl(&self, span: Span) -> Result<Duration, Failure> {
        let value = match span {
            Span::Number(value) => value,
            other => {
                let ttl = self.span("ttl", other)?;
                if ttl < Duration::from_millis(1) {
                    return Err(Failure::Invalid(format!("{} must be at least 1ms, not {ttl:?}", (self.option)("ttl"))));
                }
                return Ok(ttl);
            }
        };
        let least = match self.unit {
            crate::settings::Unit::Seconds => "> 0 (at least 0.001)",
            crate::settings::Unit::Milliseconds => ">= 1",
        };
        let refused =
            || Failure::Invalid(format!("{} must be a finite number of {} {least}, not {value}", (self.option)("ttl"), self.unit.name()));
        if !value.is_finite() {
            return Err(refused());
        }
        match Duration::try_from_secs_f64(self.unit.seconds(value)) {
            Ok(ttl) if ttl >= Duration::from_millis(1) => {
                self.plausible("ttl", value, ttl)?;
                Ok(ttl)
            }
            _ => Err(refused()),
        }
    }

    /// A whole number in `lo..=hi`, for counts.
    pub fn whole(&self, option: &str, value: f64, lo: u32, hi: u32) -> Result<u32, String> {
        if !value.is_finite() || value.fract() != 0.0 || value < f64::from(lo) || value > f64::from(hi) {
            return Err(format!("{} must be a whole number from {lo} to {hi}, not {value}", (self.option)(option)));
        }
        Ok(value as u32)
    }

    /// A semaphore's limit as a binding passes it (`resize`): a whole
    /// number from 1 to `MAX_PERMITS`.
    pub fn limit(&self, value: f64) -> Result<u32, Failure> {
        self.whole("limit", value, 1, MAX_PERMITS).map_err(Failure::Invalid)
    }

    /// How long to try: `wait` (a number, or infinity for no limit) in the
    /// resource's line; else the configured retries when `retry`, one
    /// round when not.
    pub fn patience(&self, wait: Option<Span>, retry: bool) -> Result<Patience, Failure> {
        Ok(match wait {
            Some(Span::Number(w)) if w == f64::INFINITY => Patience::Wait(FOREVER),
            Some(w) => Patience::Wait(self.span("wait", w)?),
            None if retry => Patience::Retries,
            None => Patience::Once,
        })
    }

    /// A request for `resources` (one, or several taken all or nothing,
    /// each named once): `shared` (a shared hold of a read-write lock) or
    /// `limit` (a semaphore of that many, of which it takes `permits`, 1
    /// unless given), never both.
    pub fn request(
        &self,
        resources: &[String],
        ttl: Span,
        shared: bool,
        limit: Option<f64>,
        permits: Option<f64>,
        patience: Patience,
    ) -> Result<Request, Failure> {
        let resources = Resources::of(resources).map_err(Failure::Invalid)?;
        let limit = limit.map(|n| self.whole("limit", n, 1, MAX_PERMITS)).transpose().map_err(Failure::Invalid)?;
        let permits = match (permits, limit) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(Failure::Invalid(format!(
                    "{} needs {}: permits are taken from a semaphore of that many",
                    (self.option)("permits"),
                    (self.option)("limit")
                )))
            }
            (Some(k), Some(n)) => Some(self.whole("permits", k, 1, n).map_err(Failure::Invalid)?),
        };
        let kind = Kind::of(shared, limit, permits).ok_or_else(|| {
            Failure::Invalid(format!(
                "{} and {} exclude each other: a shared hold of a read-write lock, or a permit of a semaphore",
                (self.option)("shared"),
                (self.option)("limit")
            ))
        })?;
        if let (true, Kind::Permit { .. }) = (resources.is_set(), kind) {
            return Err(Failure::Invalid(format!(
                "{} takes a permit of one semaphore: name one resource, not {}",
                (self.option)("limit"),
                resources.len()
            )));
        }
        Ok(Request { resources, ttl: self.ttl(ttl)?, kind, patience })
    }

    /// The server list given as one string: one server, unless the string
    /// names several (`"redis://a:1,redis://b:2"`), a list written as a
    /// string: an `Error::Config` saying to pass a list, not the URL
    /// parser's complaint about a port.
    pub fn one_server(&self, one: String) -> Result<Vec<String>, Failure> {
        match crate::redlock::servers_in_one(&one) {
            None => Ok(vec![one]),
            Some(several) => {
                let list = several.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
                Err(Error::Config(format!(
                    "{} is one string naming {} servers ({one:?}): pass {}, [{list}]",
                    self.servers,
                    several.len(),
                    self.list
                ))
                .into())
            }
        }
    }

    /// The settings `options` describe for `servers` servers, checked.
    pub fn settings(&self, options: Options, servers: usize) -> Result<Settings, Failure> {
        let config = |message: String| Failure::Redlock(Error::Config(message));
        let defaults = Settings::default();
        // A bad value is the client's configuration error; a slip of units
        // stays what it is.
        let time = |option: &str, value: Option<Span>| {
            value
                .map(|v| {
                    self.span(option, v).map_err(|f| match f {
                        Failure::Invalid(message) => config(message),
                        other => other,
                    })
                })
                .transpose()
        };
        let count =
            |option: &str, value: Option<f64>, lo: u32| value.map(|v| self.whole(option, v, lo, u32::MAX).map_err(config)).transpose();
        let mode = match options.mode.as_deref() {
            None => defaults.mode,
            Some("module") => Mode::Module,
            Some("script") => Mode::Script,
            Some(other) => return Err(config(format!("{} must be 'module' or 'script', not {other:?}", (self.option)("mode")))),
        };
        let settings = Settings {
            request_timeout: time("request_timeout", options.request_timeout)?.unwrap_or(defaults.request_timeout),
            connect_timeout: time("connect_timeout", options.connect_timeout)?.unwrap_or(defaults.connect_timeout),
            retry_count: count("retry_count", options.retry_count, 0)?.unwrap_or(defaults.retry_count),
            retry_delay: options.retry_delay.unwrap_or(defaults.retry_delay),
            drift_factor: options.drift_factor.unwrap_or(defaults.drift_factor),
            quorum: count("quorum", options.quorum, 1)?.map(|q| q as usize),
            mode,
            extend_fraction: options.extend_fraction.unwrap_or(defaults.extend_fraction),
            release_on_disconnect: options.release_on_disconnect.unwrap_or(defaults.release_on_disconnect),
            lock_delay: time("lock_delay", options.lock_delay)?,
            tls: options.tls,
            metrics: defaults.metrics,
        };
        settings.validate_named(servers, self)?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Unit;

    const NODE: Names = Names { option: |n| format!("options.{n}"), unit: Unit::Milliseconds, servers: "urls", list: "an array" };
    const PYTHON: Names = Names { option: |n| n.to_string(), unit: Unit::Seconds, servers: "servers", list: "a list" };

    fn n(value: f64) -> Span {
        Span::Number(value)
    }

    #[test]
    fn a_bare_number_implausible_in_its_unit_is_refused_naming_the_unit() {
        let unit = |r: Result<Duration, Failure>| match r {
            Err(Failure::WrongUnit(message)) => message,
            other => panic!("not refused as a slip of units: {other:?}"),
        };
        let node = unit(NODE.ttl(n(10.0)));
        assert!(node.contains("ttl 10 is in milliseconds (10 ms)") && node.contains("for 10 s write 10000 or '10s'"), "{node}");
        let python = unit(PYTHON.span("request_timeout", n(50.0)));
        assert!(python.contains("request_timeout=50 is in seconds (50 s)"), "{python}");
        assert!(python.contains("for 50 ms write 0.05, timedelta(milliseconds=50) or '50ms'"), "{python}");
        assert!(unit(PYTHON.ttl(n(30_000.0))).contains("ttl=30000 is in seconds"));
        assert!(unit(NODE.span("wait", n(5.0))).contains("options.wait 5 is in milliseconds"));
        // Within bounds, zero where it means something, text and exact
        // durations: taken as written.
        assert_eq!(NODE.ttl(n(100.0)).ok(), Some(Duration::from_millis(100)));
        assert_eq!(PYTHON.ttl(n(3600.0)).ok(), Some(Duration::from_secs(3600)));
        assert_eq!(NODE.span("wait", n(0.0)).ok(), Some(Duration::ZERO));
        assert_eq!(NODE.span("lock_delay", n(0.0)).ok(), Some(Duration::ZERO));
        assert_eq!(NODE.ttl(Span::Text("10ms".into())).ok(), Some(Duration::from_millis(10)));
        assert_eq!(PYTHON.ttl(Span::Text("2h".into())).ok(), Some(Duration::from_secs(7200)));
        assert_eq!(PYTHON.span("request_timeout", Span::Exact(Duration::from_secs(90))).ok(), Some(Duration::from_secs(90)));
        assert_eq!(PYTHON.span("retry_delay", n(120.0)).ok(), Some(Duration::from_secs(120)));
        let text = |r: Result<Duration, Failure>| r.err().map(|f| f.to_string()).unwrap_or_default();
        assert!(text(PYTHON.ttl(Span::Text("abc".into()))).starts_with("ttl: \"abc\" is not a duration"));
        assert!(text(NODE.ttl(Span::Text("0s".into()))).contains("at least 1ms"));
        // In the client's options, a slip of units is still one.
        let slip = PYTHON.settings(Options { request_timeout: Some(n(50.0)), ..Options::default() }, 5).err();
        assert!(matches!(slip, Some(Failure::WrongUnit(_))), "{slip:?}");
    }

    #[test]
    fn requests_are_checked_in_the_callers_words() {
        let req = PYTHON.request(&["r".into()], n(1.5), false, Some(3.0), None, Patience::Once).expect("a permit");
        assert_eq!((req.kind, req.ttl), (Kind::Permit { limit: 3, count: 1 }, Duration::from_millis(1500)));
        assert_eq!(NODE.request(&["r".into()], n(1500.0), true, None, None, Patience::Retries).expect("shared").kind, Kind::Shared);
        let message = |r: Result<Request, Failure>| r.err().map(|f| f.to_string()).unwrap_or_default();
        assert!(message(PYTHON.request(&["r".into()], n(0.0), false, None, None, Patience::Once)).contains("> 0"));
        assert!(message(NODE.request(&["r".into()], n(0.5), false, None, None, Patience::Once)).contains("milliseconds >= 1"));
        assert!(message(NODE.request(&["r".into()], n(1000.0), true, Some(2.0), None, Patience::Once))
            .contains("options.shared and options.limit"));
        assert!(message(NODE.request(&["r".into()], n(1000.0), false, Some(0.0), None, Patience::Once)).contains("options.limit"));
        let set = PYTHON.request(&["a".into(), "b".into()], n(1.0), true, None, None, Patience::Once).expect("a shared set");
        assert_eq!((set.resources.names(), set.kind), (&["a".to_string(), "b".to_string()][..], Kind::Shared));
        assert!(
            message(PYTHON.request(&["a".into(), "a".into()], n(1.0), false, None, None, Patience::Once)).contains("\"a\" is named twice")
        );
        assert!(message(PYTHON.request(&[], n(1.0), false, None, None, Patience::Once)).contains("no resource"));
        assert!(
            message(NODE.request(&["a".into(), "b".into()], n(1000.0), false, Some(2.0), None, Patience::Once)).contains("one semaphore")
        );
        let three = NODE.request(&["s".into()], n(1000.0), false, Some(5.0), Some(3.0), Patience::Once).expect("3 of 5");
        assert_eq!(three.kind, Kind::Permit { limit: 5, count: 3 });
        assert!(message(NODE.request(&["s".into()], n(1000.0), false, Some(5.0), Some(6.0), Patience::Once)).contains("options.permits"));
        assert!(message(PYTHON.request(&["s".into()], n(1.0), false, None, Some(2.0), Patience::Once)).contains("permits needs limit"));
        assert_eq!(NODE.patience(Some(n(f64::INFINITY)), false).ok(), Some(Patience::Wait(FOREVER)));
        assert!(NODE.patience(Some(n(-1.0)), false).is_err());
        assert!(NODE.patience(Some(n(f64::NAN)), true).is_err());
    }

    #[test]
    fn options_left_out_are_the_defaults() {
        let s = PYTHON.settings(Options::default(), 5).expect("defaults");
        let d = Settings::default();
        assert_eq!(
            (s.request_timeout, s.retry_count, s.retry_delay, s.quorum),
            (d.request_timeout, d.retry_count, d.retry_delay, d.quorum)
        );
        let s = NODE.settings(Options { request_timeout: Some(n(20.0)), quorum: Some(3.0), ..Options::default() }, 5).expect("set");
        assert_eq!((s.request_timeout, s.quorum), (Duration::from_millis(20), Some(3)));
        let refused = |o: Options| NODE.settings(o, 5).err().map(|f| (f.category(), f.to_string()));
        let (category, message) = refused(Options { quorum: Some(6.0), ..Options::default() }).expect("quorum 6 of 5");
        assert_eq!(category, super::super::Category::Config);
        assert!(message.contains("options.quorum"), "{message}");
        assert!(refused(Options { retry_count: Some(-1.0), ..Options::default() }).is_some());
        assert!(refused(Options { mode: Some("lua".into()), ..Options::default() }).is_some());
        assert!(refused(Options { connect_timeout: Some(n(f64::INFINITY)), ..Options::default() }).is_some());
        assert!(PYTHON.one_server("redis://a:1,redis://b:2".into()).is_err());
    }
}
