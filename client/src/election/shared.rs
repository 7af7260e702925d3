//! A valued hold as a binding hands it out (Python's and Node's leadership
//! and membership): shared by the caller's tasks, which proclaim side by
//! side; ended (resigned, left) once, by whichever asks first, after the
//! proclamations under way; ended in the background (`spawn`, as
//! `hold::Hold` is released) when dropped before. Failures are
//! `hold::Failure`s, so a binding raises them as it does a lock's.
//! `SharedLeadership` and `members::SharedMembership` are this over each.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::hold::{Failure, Spawn};
use crate::redlock::Released;

/// What `SharedValued` shares: a `Leadership` or a `members::Membership`,
/// each a valued hold behind its own checks (an empty value refused) and
/// its own bookkeeping (a leader's metrics).
pub trait Valued: Send + Sync + Sized + 'static {
    /// What stays readable once it ended without waiting on a
    /// proclamation: fixed when it was granted.
    type Fixed: Send + Sync;
    /// Why it is lost, as a binding's `LockLost` says it.
    const LOST: &'static str;
    fn fixed(&self) -> Self::Fixed;
    /// The key it holds.
    fn resource(&self) -> String;
    fn value(&self) -> String;
    fn is_lost(&self) -> bool;
    fn lost_token(&self) -> CancellationToken;
    fn proclaim(&self, value: &str) -> impl Future<Output = Result<(), Error>> + Send;
    /// Resigns or leaves: the hold released on every server.
    fn end(self) -> impl Future<Output = Result<Released, Error>> + Send;
}

pub struct SharedValued<H: Valued> {
    held: Arc<tokio::sync::RwLock<Option<H>>>,
    fixed: H::Fixed,
    resource: String,
    /// The value advertised, as of the latest proclamation a quorum stored.
    value: Arc<Mutex<String>>,
    lost: CancellationToken,
    /// Set when the end is asked for; `done` is cancelled once it is over.
    ended: AtomicBool,
    done: CancellationToken,
    spawn: Spawn,
}

impl<H: Valued> SharedValued<H> {
    pub fn new(held: H, spawn: Spawn) -> SharedValued<H> {
        SharedValued {
            fixed: held.fixed(),
            resource: held.resource(),
            value: Arc::new(Mutex::new(held.value())),
            lost: held.lost_token(),
            held: Arc::new(tokio::sync::RwLock::new(Some(held))),
            ended: AtomicBool::new(false),
            done: CancellationToken::new(),
            spawn,
        }
    }

    pub(crate) fn fixed(&self) -> &H::Fixed {
        &self.fixed
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Lost (see `Leadership::is_lost`); once ended, whether it was lost
    /// before.
    pub fn is_lost(&self) -> bool {
        let now = self.held.try_read().ok().and_then(|h| h.as_ref().map(H::is_lost));
        self.lost.is_cancelled() || now.unwrap_or(false)
    }

    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// `true` the moment it is lost, `false` once it was ended (or
    /// dropped) first.
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

    /// `proclaim` of the hold; `Failure::Released` once ended. The check
    /// runs now, the future does the I/O.
    pub fn proclaim(&self, value: String) -> Result<impl Future<Output = Result<(), Failure>> + Send + 'static, Failure> {
        if self.has_ended() {
            return Err(Failure::Released { resource: self.resource.clone() });
        }
        let (held, advertised, resource) = (Arc::clone(&self.held), Arc::clone(&self.value), self.resource.clone());
        Ok(async move {
            let held = held.read().await;
            let Some(held) = held.as_ref() else { return Err(Failure::Released { resource }) };
            held.proclaim(&value).await?;
            *advertised.lock().unwrap_or_else(|p| p.into_inner()) = value;
            Ok(())
        })
    }

    /// Ends it (`Valued::end`) once the proclamations under way are over;
    /// `Failure::Released` if asked before, and `Failure::Lost` (after
    /// ending it) when it had been lost, as a lock's release.
    pub(crate) fn end(&self) -> Result<impl Future<Output = Result<Released, Failure>> + Send + 'static, Failure> {
        let was_lost = self.is_lost();
        if self.ended.swap(true, Ordering::SeqCst) {
            return Err(Failure::Released { resource: self.resource.clone() });
        }
        let (held, done, resource) = (Arc::clone(&self.held), self.done.clone(), self.resource.clone());
        Ok(async move {
            let taken = held.write().await.take();
            let result = match taken {
                Some(held) => held.end().await,
                None => Ok(Released { released: 0, remaining_holds: 0, instances: Vec::new() }),
            };
            done.cancel();
            let released = result?;
            if was_lost {
                return Err(Failure::Lost { resource, why: H::LOST });
            }
            Ok(released)
        })
    }
}

impl<H: Valued> Drop for SharedValued<H> {
    fn drop(&mut self) {
        self.done.cancel();
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        let held = Arc::clone(&self.held);
        (self.spawn)(Box::pin(async move {
            if let Some(held) = held.write().await.take() {
                let _ = held.end().await;
            }
        }));
    }
}
