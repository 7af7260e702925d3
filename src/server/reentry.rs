//! Module state lives behind mutexes touched only on Redis's main thread.
//! A Redis call the module makes (replication, a notification, a key
//! deletion) can re-enter the module while such a mutex is held further up
//! the stack; blocking there would deadlock the server, so a re-entered
//! caller skips its work instead.

use std::sync::{Mutex, TryLockError};

/// Runs `f` on the state in `m`; `None` when it is in use further up the
/// stack. A poisoned mutex (a panic elsewhere) still hands its state over:
/// the state is plain data and losing it would lose locks.
pub fn with<T, R>(m: &Mutex<T>, f: impl FnOnce(&mut T) -> R) -> Option<R> {
    match m.try_lock() {
        Ok(mut state) => Some(f(&mut state)),
        Err(TryLockError::Poisoned(poisoned)) => Some(f(&mut poisoned.into_inner())),
        Err(TryLockError::WouldBlock) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_re_entered_caller_skips_instead_of_blocking() {
        let m = Mutex::new(1);
        let outer = with(&m, |n| {
            *n += 1;
            with(&m, |n| *n += 1)
        });
        assert_eq!(outer, Some(None));
        assert_eq!(with(&m, |n| *n), Some(2));
    }
}
