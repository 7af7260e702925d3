//! Token registers (`LOCK.FENCED`): a key holding the highest fencing
//! token the writes to a resource have carried. It only ever goes up, and
//! it persists like a lock (its own data type, `edge::register`).
//!
//! A register must not go down behind anyone's back either: a register
//! Redis evicted under `maxmemory` (an `allkeys-*` policy picks any key)
//! would admit the oldest token again. As for locks (`rescue`), the unlink
//! callback remembers the last register that left the keyspace, and the
//! `evicted` event that follows at once makes it kept here: until a
//! LOCK.FENCED writes the register again, it and LOCK.FENCEINFO read the
//! kept token for the empty key. A DEL, an overwrite, an expiry (a TTL
//! someone set on it) or FLUSHDB removes it by intent, and it is gone.
//! What is kept here lives in memory: a restart before the register is
//! written again forgets it, as it forgets the eviction.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use crate::api::{Key, KeyKind, RedisModuleType};
use crate::core::token::Token;
use crate::replication::writable;

/// What a key is as a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Register {
    /// No register (and none evicted under this name): every token is
    /// admitted.
    Absent,
    /// The highest token accepted.
    Highest(Token),
    /// The key is empty, but Redis evicted the register that held this
    /// token: it is kept here until it is written again.
    Evicted(Token),
    /// Another type.
    WrongType,
}

static REGISTERED: AtomicPtr<RedisModuleType> = AtomicPtr::new(ptr::null_mut());

pub fn remember_registered_type(registered: *mut RedisModuleType) -> bool {
    REGISTERED.store(registered, Ordering::Relaxed);
    !registered.is_null()
}

pub fn registered_type() -> *mut RedisModuleType {
    REGISTERED.load(Ordering::Relaxed)
}

/// A register's value as stored: the token, boxed (Redis keeps a pointer).
pub fn new_value(token: Token) -> *mut c_void {
    Box::into_raw(Box::new(token)).cast()
}

/// The token of a register value.
///
/// # Safety
/// `value` is a live value of the register type.
pub unsafe fn token_of(value: *const c_void) -> Token {
    // SAFETY: every register value is a boxed token (`new_value`).
    unsafe { *value.cast::<Token>() }
}

/// Frees a register value.
///
/// # Safety
/// `value` is a value of the register type no key holds any more.
pub unsafe fn free_value(value: *mut c_void) {
    // SAFETY: made by `new_value`, and nobody else holds it.
    drop(unsafe { Box::from_raw(value.cast::<Token>()) });
}

/// The register at `key` (`db`, `name`), or what was evicted under its
/// name.
pub fn read(key: &Key, db: c_int, name: &[u8]) -> Register {
    match key.kind() {
        KeyKind::Empty => kept(db, name).map_or(Register::Absent, Register::Evicted),
        KeyKind::Module(t) if t == registered_type() && !t.is_null() => {
            // SAFETY: the key holds a value of the register type.
            Register::Highest(unsafe { token_of(key.module_value()) })
        }
        _ => Register::WrongType,
    }
}

/// Raises the register at `key` (open for writing) to `token`, creating
/// it when the key is empty; a lower `token` leaves it as it is. False
/// when the key could not be written (it holds another type, or Redis
/// refused the value).
pub fn raise(key: &Key, db: c_int, name: &[u8], token: Token) -> bool {
    match key.kind() {
        KeyKind::Module(t) if t == registered_type() && !t.is_null() => {
            // SAFETY: the key holds a value of the register type, which
            // this module alone writes, on Redis's main thread.
            unsafe { *key.module_value().cast::<Token>() = token.max(token_of(key.module_value())) };
            true
        }
        KeyKind::Empty => {
            let token = kept(db, name).map_or(token, |k| k.max(token));
            let value = new_value(token);
            // SAFETY: a value of the register type.
            if unsafe { key.set_module_value(registered_type(), value) } {
                forget(db, name);
                true
            } else {
                // SAFETY: the key did not take it: still ours.
                unsafe { free_value(value) };
                false
            }
        }
        _ => false,
    }
}

/// A register's database and key.
type Name = (c_int, Box<[u8]>);

#[derive(Default)]
struct State {
    kept: HashMap<Name, Token>,
    /// The last register removed, for no reason known yet: an `evicted`
    /// event for it makes it kept.
    unexplained: Option<(Name, Token)>,
}

// SAFETY: only touched on Redis's main thread (callbacks, commands).
unsafe impl Send for State {}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));
/// Registers kept: lets LOCK.FENCED on an empty key skip the map while
/// there are none.
static KEPT: AtomicUsize = AtomicUsize::new(0);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    crate::server::reentry::with(&STATE, f)
}

fn kept(db: c_int, name: &[u8]) -> Option<Token> {
    if KEPT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    with_state(|s| s.kept.get(&(db, name.into())).copied()).flatten()
}

fn forget(db: c_int, name: &[u8]) {
    if KEPT.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_state(|s| {
        s.kept.remove(&(db, name.into()));
        KEPT.store(s.kept.len(), Ordering::Relaxed);
    });
}

/// The unlink callback saw a register leave the keyspace. A replica
/// follows its master (which keeps its own), and a load is not a removal.
pub fn removed(db: c_int, name: &[u8], token: Token) {
    if writable::is_replica() || crate::server::quarantine::loading() {
        return;
    }
    with_state(|s| s.unexplained = Some(((db, name.into()), token)));
}

/// The `evicted` keyspace event for `name` in `db`, sent right after the
/// unlink callback: the register removed last is kept.
pub fn evicted(db: c_int, name: &[u8]) {
    with_state(|s| {
        if s.unexplained.as_ref().is_some_and(|((d, k), _)| *d == db && **k == *name) {
            if let Some((name, token)) = s.unexplained.take() {
                let highest = s.kept.get(&name).map_or(token, |k| token.max(*k));
                s.kept.insert(name, highest);
                KEPT.store(s.kept.len(), Ordering::Relaxed);
            }
        }
    });
}

/// Registers kept after an eviction (for INFO).
pub fn evicted_kept() -> i64 {
    i64::try_from(KEPT.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

/// FLUSHDB/FLUSHALL (`db` -1: all) take kept registers with the keys.
pub fn flushed(db: c_int) {
    with_state(|s| {
        s.kept.retain(|(d, _), _| db >= 0 && *d != db);
        s.unexplained = None;
        KEPT.store(s.kept.len(), Ordering::Relaxed);
    });
}

/// SWAPDB moves kept registers with their databases.
pub fn swapped(a: c_int, b: c_int) {
    with_state(|s| {
        let all = std::mem::take(&mut s.kept);
        s.kept = all.into_iter().map(|((d, k), t)| ((super::rescue::after_swap(d, a, b), k), t)).collect();
    });
}
