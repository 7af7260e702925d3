//! A membership as a binding hands it out (Python's and Node's), as
//! `election::SharedLeadership` is a leadership: both are
//! `election::SharedValued`, shared by the caller's tasks, left once, left
//! in the background when dropped before.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use super::Membership;
use crate::election::{SharedValued, Valued};
use crate::error::Error;
use crate::hold::Failure;
use crate::redlock::Released;

pub type SharedMembership = SharedValued<Membership>;

/// What a shared membership reads without waiting, fixed when it joined.
pub struct Joined {
    token: i64,
    owner: String,
    /// The group's name.
    group: String,
}

impl Valued for Membership {
    type Fixed = Joined;
    const LOST: &'static str = "an extension reached no quorum in time or its validity ran out; readers may list the member no more";

    fn fixed(&self) -> Joined {
        Joined { token: self.token, owner: self.owner.clone(), group: self.group.name().to_string() }
    }

    fn resource(&self) -> String {
        self.group.resource().to_string()
    }

    fn value(&self) -> String {
        self.value()
    }

    fn is_lost(&self) -> bool {
        self.is_lost()
    }

    fn lost_token(&self) -> CancellationToken {
        self.lost_token()
    }

    fn proclaim(&self, value: &str) -> impl Future<Output = Result<(), Error>> + Send {
        self.proclaim(value)
    }

    fn end(self) -> impl Future<Output = Result<Released, Error>> + Send {
        self.leave()
    }
}

impl SharedMembership {
    /// The hold's fencing token (`Member::token`).
    pub fn token(&self) -> i64 {
        self.fixed().token
    }

    /// The owner the servers list this member under (`Member::owner`).
    pub fn owner(&self) -> &str {
        &self.fixed().owner
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.fixed().group
    }

    pub fn has_left(&self) -> bool {
        self.has_ended()
    }

    /// `Membership::leave`, once the proclamations under way are over;
    /// `Failure::Released` if asked before, and `Failure::Lost` (after
    /// leaving) when the membership had been lost, as a lock's release.
    pub fn leave(&self) -> Result<impl Future<Output = Result<Released, Failure>> + Send + 'static, Failure> {
        self.end()
    }
}
