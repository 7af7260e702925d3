//! Mutexes of the binding.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, poisoned or not. Every mutex of the binding guards plain
/// values (a lock, a slot) that a panic cannot leave half-written.
pub fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
