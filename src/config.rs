//! Module configuration: `redislock.<name>`, settable on the `loadmodule`
//! line (`max-ttl 60000`), as a config-file line, or with CONFIG SET.

use std::sync::atomic::{AtomicI64, Ordering};

use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
use redis_module::{raw, Context, RedisString};

use crate::api::{rm, ERR, OK};

/// Names accepted on the `loadmodule` line, each followed by its value.
pub const KNOWN_ARGS: &[&str] = &["max-ttl"];

pub const MAX_TTL_DEFAULT: i64 = 3_600_000;
/// A year: keeps `now + ttl` far from overflow and any lease sane.
pub const MAX_TTL_LIMIT: i64 = 31_536_000_000;

/// The longest lease a command may ask for, in milliseconds.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(MAX_TTL_DEFAULT);

pub fn max_ttl() -> i64 {
    MAX_TTL.load(Ordering::Relaxed)
}

/// Registers the configuration with Redis, taking defaults from the
/// `loadmodule` arguments, then lets Redis apply config-file lines.
pub fn register(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
    apply_module_args(args)?;
    register_i64_configuration::<AtomicI64>(
        ctx,
        "max-ttl",
        &MAX_TTL,
        max_ttl(),
        1,
        MAX_TTL_LIMIT,
        ConfigurationFlags::DEFAULT,
        None,
    );
    if rm!(RedisModule_LoadConfigs(ctx.ctx) else ERR) != OK {
        return Err("Redis refused the module configuration (see the lines above)".into());
    }
    Ok(())
}

/// Applies the `loadmodule` arguments: name/value pairs of known names,
/// each value checked as CONFIG SET would.
fn apply_module_args(args: &[RedisString]) -> Result<(), String> {
    if args.len() % 2 != 0 {
        return Err("module arguments must be name/value pairs, e.g. `max-ttl 60000`".into());
    }
    for pair in args.chunks(2) {
        let [name, value] = pair else { continue };
        let (name, value) = (name.to_string_lossy(), value.to_string_lossy());
        match name.as_str() {
            "max-ttl" => MAX_TTL.store(parse_max_ttl(&value)?, Ordering::Relaxed),
            _ => return Err(format!("unknown module argument '{name}' (known: {})", KNOWN_ARGS.join(", "))),
        }
    }
    Ok(())
}

fn parse_max_ttl(value: &str) -> Result<i64, String> {
    match crate::args::parse_i64(value.as_bytes()) {
        Some(ttl) if (1..=MAX_TTL_LIMIT).contains(&ttl) => Ok(ttl),
        _ => Err(format!("max-ttl must be an integer from 1 to {MAX_TTL_LIMIT} (milliseconds), got '{value}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_ttl_values_are_range_checked() {
        assert_eq!(parse_max_ttl("60000"), Ok(60000));
        assert_eq!(parse_max_ttl("31536000000"), Ok(MAX_TTL_LIMIT));
        for bad in ["0", "-1", "31536000001", "banana", "", "1e3"] {
            assert!(parse_max_ttl(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
