//! A session-bound hold that carries a value, kept by a guard: what a
//! leadership (`Leadership`, an exclusive hold) and a group membership
//! (`members::Membership`, a shared one) both are. Its value is
//! proclaimed on the connection the hold is bound to on each server.

use std::sync::Mutex;

use crate::error::Error;
use crate::guard::LockGuard;
use crate::redlock::{Redlock, Released};

pub(crate) struct ValuedHold {
    guard: LockGuard,
    /// The value stored with the hold, as of the latest proclamation a
    /// quorum stored.
    value: Mutex<String>,
}

impl ValuedHold {
    pub fn new(guard: LockGuard, value: String) -> ValuedHold {
        ValuedHold { guard, value: Mutex::new(value) }
    }

    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_value(&self, value: &str) {
        value.clone_into(&mut self.value.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// `LOCK.PROCLAIM` of `value` with this hold on every server, on the
    /// connection it is bound to there; `Ok` (and the value kept) only
    /// when a quorum stored it. `Error::Expired` once the hold is lost.
    pub async fn proclaim(&self, redlock: &Redlock, value: &str) -> Result<(), Error> {
        let lock = self.guard.lock();
        if self.guard.is_lost() {
            return Err(Error::Expired { resource: lock.resource });
        }
        let bound = |i: usize| lock.instances.get(i).and_then(|o| o.connection);
        redlock.proclaim_on(&lock.resource, &lock.owner, value, bound).await?;
        self.set_value(value);
        Ok(())
    }

    /// Releases the hold on every server.
    pub async fn release(self) -> Result<Released, Error> {
        self.guard.release().await
    }
}
