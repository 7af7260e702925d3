//! What a binding's caller passes (numbers of time in its unit, counts as
//! numbers, options left out), checked and made the crate's values. Bad
//! input is a `Failure` naming the argument as the caller wrote it
//! (`Names`), never a panic: `Invalid` for a request's arguments,
//! `Error::Config` for the client's options.

use std::time::Duration;

use super::{Failure, Kind, Patience, Request, FOREVER};
use crate::error::Error;
use crate::resources::Resources;
use crate::semaphore::MAX_PERMITS;
use crate::settings::{Mode, Names, Settings, TlsSettings};

/// The client's options as a binding's caller gives them: numbers of time
/// in `Names::unit`; each one left out (`None`) is `Settings::default()`'s.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub quorum: Option<f64>,
    pub request_timeout: Option<f64>,
    pub connect_timeout: Option<f64>,
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
    pub lock_delay: Option<f64>,
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

    /// A lease: at least the servers' resolution of one millisecond (a
    /// shorter one would be sent as 0 ms, which the servers refuse).
    pub fn ttl(&self, value: f64) -> Result<Duration, Failure> {
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
            Ok(ttl) if ttl >= Duration::from_millis(1) => Ok(ttl),
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

    /// How long to try: `wait` (a number, or infinity for no limit) in the
    /// resource's line; else the configured retries when `retry`, one
    /// round when not.
    pub fn patience(&self, wait: Option<f64>, retry: bool) -> Result<Patience, Failure> {
        Ok(match wait {
            Some(w) if w == f64::INFINITY => Patience::Wait(FOREVER),
            Some(w) => Patience::Wait(self.duration("wait", w).map_err(Failure::Invalid)?),
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
        ttl: f64,
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
        let time = |option: &str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(v) => self.duration(option, v).map_err(config),
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
            request_timeout: time("request_timeout", options.request_timeout, defaults.request_timeout)?,
            connect_timeout: time("connect_timeout", options.connect_timeout, defaults.connect_timeout)?,
            retry_count: count("retry_count", options.retry_count, 0)?.unwrap_or(defaults.retry_count),
            retry_delay: options.retry_delay.unwrap_or(defaults.retry_delay),
            drift_factor: options.drift_factor.unwrap_or(defaults.drift_factor),
            quorum: count("quorum", options.quorum, 1)?.map(|q| q as usize),
            mode,
            extend_fraction: options.extend_fraction.unwrap_or(defaults.extend_fraction),
            release_on_disconnect: options.release_on_disconnect.unwrap_or(defaults.release_on_disconnect),
            lock_delay: options.lock_delay.map(|v| self.duration("lock_delay", v).map_err(config)).transpose()?,
            tls: options.tls,
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

    #[test]
    fn requests_are_checked_in_the_callers_words() {
        let req = PYTHON.request(&["r".into()], 1.5, false, Some(3.0), None, Patience::Once).expect("a permit");
        assert_eq!((req.kind, req.ttl), (Kind::Permit { limit: 3, count: 1 }, Duration::from_millis(1500)));
        assert_eq!(NODE.request(&["r".into()], 1500.0, true, None, None, Patience::Retries).expect("shared").kind, Kind::Shared);
        let message = |r: Result<Request, Failure>| r.err().map(|f| f.to_string()).unwrap_or_default();
        assert!(message(PYTHON.request(&["r".into()], 0.0, false, None, None, Patience::Once)).contains("> 0"));
        assert!(message(NODE.request(&["r".into()], 0.5, false, None, None, Patience::Once)).contains("milliseconds >= 1"));
        assert!(
            message(NODE.request(&["r".into()], 1.0, true, Some(2.0), None, Patience::Once)).contains("options.shared and options.limit")
        );
        assert!(message(NODE.request(&["r".into()], 1.0, false, Some(0.0), None, Patience::Once)).contains("options.limit"));
        let set = PYTHON.request(&["a".into(), "b".into()], 1.0, true, None, None, Patience::Once).expect("a shared set");
        assert_eq!((set.resources.names(), set.kind), (&["a".to_string(), "b".to_string()][..], Kind::Shared));
        assert!(message(PYTHON.request(&["a".into(), "a".into()], 1.0, false, None, None, Patience::Once)).contains("\"a\" is named twice"));
        assert!(message(PYTHON.request(&[], 1.0, false, None, None, Patience::Once)).contains("no resource"));
        assert!(message(NODE.request(&["a".into(), "b".into()], 1.0, false, Some(2.0), None, Patience::Once)).contains("one semaphore"));
        let three = NODE.request(&["s".into()], 1.0, false, Some(5.0), Some(3.0), Patience::Once).expect("3 of 5");
        assert_eq!(three.kind, Kind::Permit { limit: 5, count: 3 });
        assert!(message(NODE.request(&["s".into()], 1.0, false, Some(5.0), Some(6.0), Patience::Once)).contains("options.permits"));
        assert!(message(PYTHON.request(&["s".into()], 1.0, false, None, Some(2.0), Patience::Once)).contains("permits needs limit"));
        assert_eq!(NODE.patience(Some(f64::INFINITY), false).ok(), Some(Patience::Wait(FOREVER)));
        assert!(NODE.patience(Some(-1.0), false).is_err());
        assert!(NODE.patience(Some(f64::NAN), true).is_err());
    }

    #[test]
    fn options_left_out_are_the_defaults() {
        let s = PYTHON.settings(Options::default(), 5).expect("defaults");
        let d = Settings::default();
        assert_eq!(
            (s.request_timeout, s.retry_count, s.retry_delay, s.quorum),
            (d.request_timeout, d.retry_count, d.retry_delay, d.quorum)
        );
        let s = NODE.settings(Options { request_timeout: Some(20.0), quorum: Some(3.0), ..Options::default() }, 5).expect("set");
        assert_eq!((s.request_timeout, s.quorum), (Duration::from_millis(20), Some(3)));
        let refused = |o: Options| NODE.settings(o, 5).err().map(|f| (f.category(), f.to_string()));
        let (category, message) = refused(Options { quorum: Some(6.0), ..Options::default() }).expect("quorum 6 of 5");
        assert_eq!(category, super::super::Category::Config);
        assert!(message.contains("options.quorum"), "{message}");
        assert!(refused(Options { retry_count: Some(-1.0), ..Options::default() }).is_some());
        assert!(refused(Options { mode: Some("lua".into()), ..Options::default() }).is_some());
        assert!(refused(Options { connect_timeout: Some(f64::INFINITY), ..Options::default() }).is_some());
        assert!(PYTHON.one_server("redis://a:1,redis://b:2".into()).is_err());
    }
}
