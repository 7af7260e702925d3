//! A membership as a binding hands it out (Python's and Node's), as
//! `election::SharedLeadership` is a leadership: shared by the caller's
//! tasks, which proclaim side by side; left once, by whichever asks first,
//! after the proclamations under way; left in the background (`spawn`, as
//! `hold::Hold` is released) when dropped before. Failures are
//! `hold::Failure`s, so a binding raises them as it does a lock's.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::Membership;
use crate::hold::{Failure, Spawn};
use crate::redlock::Released;

/// Why a membership is lost, as a binding's `LockLost` says it.
const LOST: &str = "an extension reached no quorum in time or its validity ran out; readers may list the member no more";

pub struct SharedMembership {
    membership: Arc<tokio::sync::RwLock<Option<Membership>>>,
    token: i64,
    owner: String,
    /// The group's name and key.
    group: String,
    resource: String,
    /// The value advertised, as of the latest proclamation a quorum stored.
    value: Arc<Mutex<String>>,
    lost: CancellationToken,
    /// Set when leaving is asked for; `done` is cancelled once it is over.
    left: AtomicBool,
    done: CancellationToken,
    spawn: Spawn,
}

impl SharedMembership {
    pub fn new(membership: Membership, spawn: Spawn) -> SharedMembership {
        SharedMembership {
            token: membership.token(),
            owner: membership.owner().to_string(),
            group: membership.group().name().to_string(),
            resource: membership.group().resource().to_string(),
            value: Arc::new(Mutex::new(membership.value())),
            lost: membership.lost_token(),
            membership: Arc::new(tokio::sync::RwLock::new(Some(membership))),
            left: AtomicBool::new(false),
            done: CancellationToken::new(),
            spawn,
        }
    }

    /// The hold's fencing token (`Member::token`).
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The owner the servers list this member under (`Member::owner`).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The group's key (`redlock:group:NAME`).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Lost (see `Membership::is_lost`); after leaving, whether it was
    /// lost before.
    pub fn is_lost(&self) -> bool {
        let now = self.membership.try_read().ok().and_then(|m| m.as_ref().map(Membership::is_lost));
        self.lost.is_cancelled() || now.unwrap_or(false)
    }

    pub fn has_left(&self) -> bool {
        self.left.load(Ordering::SeqCst)
    }

    /// `true` the moment the membership is lost, `false` once it was left
    /// (or dropped) first.
    pub fn when_lost(&self) -> impl Future<Output = bool> + Send + 'static {
        let (lost, done) = (self.lost.clone(), self.done.clone());
        async move {
            tokio::select! {
                biased;
                () = lost.cancelled() => true,
                () = done.cancelled() => false,
            }
        }
    }

    /// `Membership::proclaim`; `Failure::Released` once left. The check
    /// runs now, the future does the I/O.
    pub fn proclaim(&self, value: String) -> Result<impl Future<Output = Result<(), Failure>> + Send + 'static, Failure> {
        if self.has_left() {
            return Err(Failure::Released { resource: self.resource.clone() });
        }
        let (membership, advertised, resource) = (Arc::clone(&self.membership), Arc::clone(&self.value), self.resource.clone());
        Ok(async move {
            let held = membership.read().await;
            let Some(membership) = held.as_ref() else { return Err(Failure::Released { resource }) };
            membership.proclaim(&value).await?;
            *advertised.lock().unwrap_or_else(|p| p.into_inner()) = value;
            Ok(())
        })
    }

    /// `Membership::leave`, once the proclamations under way are over;
    /// `Failure::Released` if asked before, and `Failure::Lost` (after
    /// leaving) when the membership had been lost, as a lock's release.
    pub fn leave(&self) -> Result<impl Future<Output = Result<Released, Failure>> + Send + 'static, Failure> {
        let was_lost = self.is_lost();
        if self.left.swap(true, Ordering::SeqCst) {
            return Err(Failure::Released { resource: self.resource.clone() });
        }
        let (membership, done, resource) = (Arc::clone(&self.membership), self.done.clone(), self.resource.clone());
        Ok(async move {
            let taken = membership.write().await.take();
            let result = match taken {
                Some(membership) => membership.leave().await,
                None => Ok(Released { released: 0, remaining_holds: 0, instances: Vec::new() }),
            };
            done.cancel();
            let released = result?;
            if was_lost {
                return Err(Failure::Lost { resource, why: LOST });
            }
            Ok(released)
        })
    }
}

impl Drop for SharedMembership {
    fn drop(&mut self) {
        self.done.cancel();
        if self.left.swap(true, Ordering::SeqCst) {
            return;
        }
        let membership = Arc::clone(&self.membership);
        (self.spawn)(Box::pin(async move {
            if let Some(membership) = membership.write().await.take() {
                let _ = membership.leave().await;
            }
        }));
    }
}
