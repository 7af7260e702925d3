//! `redislock.notify`: the keys whose every change is announced on their
//! lock's channel (see `propagate::announce`), as space-separated glob
//! patterns. Parsed once when set; a lock command whose key matches none
//! pays one relaxed load while the setting is empty (the default).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

use redis_glob::Glob;
use redis_module::configuration::{ConfigurationContext, ConfigurationValue};
use redis_module::{RedisError, RedisString};

/// The longest setting, in bytes: a list to read, not a keyspace.
pub const MAX_NOTIFY_LEN: usize = 4096;
/// The most patterns: each lock change matches its key against them all.
pub const MAX_NOTIFY_PATTERNS: usize = 64;

/// Whether any pattern is set: the one test a change pays otherwise.
static ANY: AtomicBool = AtomicBool::new(false);

struct Patterns {
    text: Vec<u8>,
    globs: Vec<Glob>,
}

static PATTERNS: LazyLock<Mutex<Patterns>> = LazyLock::new(|| Mutex::new(Patterns { text: Vec::new(), globs: Vec::new() }));

/// Whether `key`'s changes are announced: a relaxed load while no
/// pattern is set, a match against each pattern otherwise.
#[inline]
pub fn watched(key: &[u8]) -> bool {
    ANY.load(Ordering::Relaxed) && matched(key)
}

fn matched(key: &[u8]) -> bool {
    // Matching calls nothing that re-enters the module: a plain lock.
    let patterns = PATTERNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    patterns.globs.iter().any(|g| g.matches(key))
}

/// Parses a setting: its patterns, or why it is refused (the old value
/// then stays).
pub fn parse(text: &[u8]) -> Result<Vec<Glob>, String> {
    if text.len() > MAX_NOTIFY_LEN {
        return Err(format!("notify is {} bytes, longer than {MAX_NOTIFY_LEN}", text.len()));
    }
    if text.contains(&0) {
        return Err("notify must not contain a NUL byte".into());
    }
    let globs: Vec<Glob> = text.split(|&b| b == b' ').filter(|p| !p.is_empty()).map(Glob::parse).collect();
    if globs.len() > MAX_NOTIFY_PATTERNS {
        return Err(format!("notify has {} patterns, more than {MAX_NOTIFY_PATTERNS}", globs.len()));
    }
    Ok(globs)
}

/// Sets the patterns from `text`; the old ones stay when it is refused.
pub fn set(text: &[u8]) -> Result<(), String> {
    let globs = parse(text)?;
    let mut patterns = PATTERNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    ANY.store(!globs.is_empty(), Ordering::Relaxed);
    *patterns = Patterns { text: text.to_vec(), globs };
    Ok(())
}

/// How many patterns are set (what INFO shows). Without waiting: a crash
/// report reads it too.
pub fn pattern_count() -> usize {
    crate::server::reentry::with(&PATTERNS, |p| p.globs.len()).unwrap_or(0)
}

/// The setting as given (what CONFIG GET shows).
pub fn text() -> Vec<u8> {
    PATTERNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).text.clone()
}

/// The setting as Redis's configuration sees it.
pub struct NotifySetting;

pub static NOTIFY: NotifySetting = NotifySetting;

impl ConfigurationValue<RedisString> for NotifySetting {
    fn get(&self, _ctx: &ConfigurationContext) -> RedisString {
        RedisString::create_from_slice(std::ptr::null_mut(), &text())
    }

    fn set(&self, _ctx: &ConfigurationContext, val: RedisString) -> Result<(), RedisError> {
        set(val.as_slice()).map_err(RedisError::String)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_bounded_and_split_on_spaces() {
        assert_eq!(parse(b"").map(|g| g.len()), Ok(0));
        assert_eq!(parse(b"  jobs:*  el[ae]ction ").map(|g| g.len()), Ok(2));
        let many = vec!["k*"; MAX_NOTIFY_PATTERNS].join(" ");
        assert_eq!(parse(many.as_bytes()).map(|g| g.len()), Ok(MAX_NOTIFY_PATTERNS));
        let too_many = vec!["k*"; MAX_NOTIFY_PATTERNS + 1].join(" ");
        assert_eq!(parse(too_many.as_bytes()).err(), Some("notify has 65 patterns, more than 64".into()));
        let long = vec![b'k'; MAX_NOTIFY_LEN + 1];
        assert_eq!(parse(&long).err(), Some("notify is 4097 bytes, longer than 4096".into()));
        assert!(parse(b"a\0b").is_err());
    }

    #[test]
    fn a_refused_setting_keeps_the_old_patterns() {
        set(b"jobs:* x?").unwrap();
        assert!(watched(b"jobs:1") && watched(b"xy") && !watched(b"other"));
        assert!(set(&vec![b'k'; MAX_NOTIFY_LEN + 1]).is_err());
        assert_eq!(text(), b"jobs:* x?");
        assert!(watched(b"jobs:1"));
        set(b"").unwrap();
        assert!(!watched(b"jobs:1"));
    }
}
