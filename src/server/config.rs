//! Module configuration: `redislock.<name>`, settable on the `loadmodule`
//! line (`max-ttl 60000`), as a config-file line, or with CONFIG SET.

use std::sync::atomic::{AtomicI64, Ordering};

use redis_module::configuration::{register_i64_configuration, register_string_configuration, ConfigurationFlags};
use redis_module::{Context, RedisString};

use crate::api;

/// A year, the longest lease (`lease::LONGEST_LEASE_MS`): the most any
/// duration setting allows.
pub const DURATION_LIMIT: i64 = crate::core::lease::LONGEST_LEASE_MS;

pub const MAX_TTL_DEFAULT: i64 = 3_600_000;

/// The longest lease a command may ask for, in milliseconds.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(MAX_TTL_DEFAULT);

pub fn max_ttl() -> i64 {
    MAX_TTL.load(Ordering::Relaxed)
}

/// A minute: far more than clocks kept by NTP disagree, so the quorum
/// client can still raise one instance to another's token, and short
/// enough for a quarantine to cover it.
pub const MAX_TOKEN_LEAD_DEFAULT: i64 = 60_000;

/// How far ahead of the clock floor (Unix µs) a token a client brings may
/// be, in milliseconds (see `fencing::check_lead`).
pub static MAX_TOKEN_LEAD: AtomicI64 = AtomicI64::new(MAX_TOKEN_LEAD_DEFAULT);

pub fn max_token_lead() -> i64 {
    MAX_TOKEN_LEAD.load(Ordering::Relaxed)
}

/// An owner is an identifier (a host and process, a UUID), not a payload:
/// without a bound any client could park megabytes in every lock it takes,
/// and in every replica and AOF after it.
pub const MAX_OWNER_LEN_DEFAULT: i64 = 256;

/// The longest `redislock.max-owner-len` may be set to: the longest text
/// a stored lock may hold (`stored::MAX_TEXT_LEN`).
pub const MAX_OWNER_LEN_LIMIT: i64 = crate::core::stored::MAX_TEXT_LEN as i64;

/// The longest owner LOCK.ACQUIRE stores, in bytes.
pub static MAX_OWNER_LEN: AtomicI64 = AtomicI64::new(MAX_OWNER_LEN_DEFAULT);

pub fn max_owner_len() -> i64 {
    MAX_OWNER_LEN.load(Ordering::Relaxed)
}

/// The most keys one set command (LOCK.MACQUIRE, MRELEASE, MEXTEND) may
/// name: a set's cost grows with its keys, in the server's one thread. A
/// set of 1024 takes about 1.4 ms to acquire and 1.2 ms to release here
/// (docs/operations.md); 100,000 blocked the server 0.4 s to 2 s.
pub const MAX_SET_KEYS_DEFAULT: i64 = 1024;

/// The highest `redislock.max-set-keys` may be set to.
pub const MAX_SET_KEYS_LIMIT: i64 = 1_000_000;

/// The most keys a set command names.
pub static MAX_SET_KEYS: AtomicI64 = AtomicI64::new(MAX_SET_KEYS_DEFAULT);

pub fn max_set_keys() -> i64 {
    MAX_SET_KEYS.load(Ordering::Relaxed)
}

pub const QUARANTINE_DEFAULT: i64 = 0;

/// `redislock.quarantine`, in milliseconds (see `quarantine`).
pub static QUARANTINE_MS: AtomicI64 = AtomicI64::new(QUARANTINE_DEFAULT);

pub fn quarantine_ms() -> i64 {
    QUARANTINE_MS.load(Ordering::Relaxed)
}

/// The string setting of the keys whose changes are announced (see
/// `notify`).
const NOTIFY: &str = "notify";

/// A numeric setting.
struct Setting {
    name: &'static str,
    value: &'static AtomicI64,
    default: i64,
    min: i64,
    max: i64,
    /// What the number counts, for error messages.
    unit: &'static str,
    /// Fixed once the server runs: CONFIG SET refuses it rather than
    /// accept a value that would change nothing.
    immutable: bool,
}

const MS: &str = "milliseconds";

const SETTINGS: [Setting; 5] = [
    Setting { name: "max-ttl", value: &MAX_TTL, default: MAX_TTL_DEFAULT, min: 1, max: DURATION_LIMIT, unit: MS, immutable: false },
    // The quarantine is decided when the module loads.
    Setting {
        name: "quarantine",
        value: &QUARANTINE_MS,
        default: QUARANTINE_DEFAULT,
        min: 0,
        max: DURATION_LIMIT,
        unit: MS,
        immutable: true,
    },
    Setting {
        name: "max-token-lead",
        value: &MAX_TOKEN_LEAD,
        default: MAX_TOKEN_LEAD_DEFAULT,
        min: 0,
        max: DURATION_LIMIT,
        unit: MS,
        immutable: false,
    },
    Setting {
        name: "max-owner-len",
        value: &MAX_OWNER_LEN,
        default: MAX_OWNER_LEN_DEFAULT,
        min: 1,
        max: MAX_OWNER_LEN_LIMIT,
        unit: "bytes",
        immutable: false,
    },
    Setting {
        name: "max-set-keys",
        value: &MAX_SET_KEYS,
        default: MAX_SET_KEYS_DEFAULT,
        min: 1,
        max: MAX_SET_KEYS_LIMIT,
        unit: "keys",
        immutable: false,
    },
];

/// Registers the configuration with Redis, taking defaults from the
/// `loadmodule` arguments, then lets Redis apply config-file lines.
pub fn register(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
    for s in &SETTINGS {
        s.value.store(s.default, Ordering::Relaxed);
    }
    super::notify::set(b"")?;
    apply_module_args(args)?;
    for s in &SETTINGS {
        let default = s.value.load(Ordering::Relaxed);
        register_i64_configuration::<AtomicI64>(
            ctx,
            s.name,
            s.value,
            default,
            s.min,
            s.max,
            if s.immutable { ConfigurationFlags::IMMUTABLE } else { ConfigurationFlags::DEFAULT },
            None,
        );
    }
    // The default is what the loadmodule line gave (checked there, no NUL).
    let notify = String::from_utf8_lossy(&super::notify::text()).into_owned();
    register_string_configuration(ctx, NOTIFY, &super::notify::NOTIFY, &notify, ConfigurationFlags::DEFAULT, None);
    if !api::load_configs(api::Ctx::new(ctx.ctx)) {
        return Err("Redis refused the module configuration (see the lines above)".into());
    }
    Ok(())
}

/// Applies the `loadmodule` arguments: name/value pairs of known names,
/// each value checked as CONFIG SET would.
fn apply_module_args(args: &[RedisString]) -> Result<(), String> {
    if !args.len().is_multiple_of(2) {
        return Err("module arguments must be name/value pairs, e.g. `max-ttl 60000`".into());
    }
    for pair in args.chunks(2) {
        let [name, value] = pair else { continue };
        if name.as_slice() == NOTIFY.as_bytes() {
            super::notify::set(value.as_slice())?;
            continue;
        }
        let (name, value) = (name.to_string_lossy(), value.to_string_lossy());
        let Some(setting) = SETTINGS.iter().find(|s| s.name == name) else {
            let known: Vec<&str> = SETTINGS.iter().map(|s| s.name).chain([NOTIFY]).collect();
            return Err(format!("unknown module argument '{name}' (known: {})", known.join(", ")));
        };
        setting.value.store(parse_value(setting, &value)?, Ordering::Relaxed);
    }
    Ok(())
}

fn parse_value(setting: &Setting, value: &str) -> Result<i64, String> {
    match crate::args::parse_i64(value.as_bytes()) {
        Some(n) if (setting.min..=setting.max).contains(&n) => Ok(n),
        _ => Err(format!("{} must be an integer from {} to {} ({}), got '{value}'", setting.name, setting.min, setting.max, setting.unit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_range_checked() {
        let [max_ttl, quarantine, _lead, owner, set_keys] = &SETTINGS;
        assert_eq!(parse_value(max_ttl, "60000"), Ok(60000));
        assert_eq!(parse_value(max_ttl, "31536000000"), Ok(DURATION_LIMIT));
        for bad in ["0", "-1", "31536000001", "banana", "", "1e3"] {
            assert!(parse_value(max_ttl, bad).is_err(), "max-ttl {bad:?} must be refused");
        }
        assert_eq!(parse_value(quarantine, "0"), Ok(0));
        assert!(parse_value(quarantine, "-1").is_err());
        assert_eq!(parse_value(owner, "1"), Ok(1));
        assert_eq!(parse_value(owner, "1048576"), Ok(MAX_OWNER_LEN_LIMIT));
        assert_eq!(parse_value(owner, "1048577"), Err("max-owner-len must be an integer from 1 to 1048576 (bytes), got '1048577'".into()));
        assert!(parse_value(owner, "0").is_err());
        assert_eq!((parse_value(set_keys, "1"), parse_value(set_keys, "1000000")), (Ok(1), Ok(MAX_SET_KEYS_LIMIT)));
        for bad in ["0", "-1", "1000001", "many", ""] {
            assert!(parse_value(set_keys, bad).is_err(), "max-set-keys {bad:?} must be refused");
        }
    }
}
