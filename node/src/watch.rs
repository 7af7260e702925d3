//! `NativeWatch`: the crate's `Redlock::watch` read one change at a time,
//! what `Redlock.watch` in index.js turns into an async iterator. What is
//! delivered when is the crate's (docs/client.md, "Watching a lock").

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use napi::bindgen_prelude::{BigInt, Object};
use napi::{Env, Result};
use napi_derive::napi;
use redlock::{Change, Error};
use tokio_util::sync::CancellationToken;

use crate::runtime;

/// One change of a lock a quorum of servers announced.
#[napi(object)]
pub struct NativeChange {
    /// "grant", "handoff", "release", "expire", "cut", "session",
    /// "revoke", "resize" or "proclaim".
    pub kind: String,
    /// The hold's fencing token (a grant's: the lock's); 0 for a resize.
    pub token: BigInt,
    /// The hold's owner as the servers store it; "" for a resize.
    pub owner: String,
    /// A grant's or proclamation's value, a cut's deadline (Unix ms), a
    /// resize's limit; null when none.
    pub value: Option<String>,
}

impl From<Change> for NativeChange {
    fn from(c: Change) -> NativeChange {
        NativeChange { kind: c.kind.as_str().to_string(), token: BigInt::from(c.token), owner: c.owner, value: c.value }
    }
}

type Changes = Arc<tokio::sync::Mutex<Pin<Box<dyn Stream<Item = std::result::Result<Change, Error>> + Send>>>>;

/// The changes `NativeRedlock.watch` yields.
#[napi]
pub struct NativeWatch {
    changes: Changes,
    closed: CancellationToken,
}

impl NativeWatch {
    pub fn new(redlock: &redlock::Redlock, resource: &str) -> NativeWatch {
        NativeWatch::of(redlock.watch(resource))
    }

    /// Reads `changes` (a group's, say) as a lock's.
    pub fn of(changes: impl Stream<Item = std::result::Result<Change, Error>> + Send + 'static) -> NativeWatch {
        NativeWatch { changes: Arc::new(tokio::sync::Mutex::new(Box::pin(changes))), closed: CancellationToken::new() }
    }
}

#[napi]
impl NativeWatch {
    /// A Promise of the next change; `null` once closed (a pending one
    /// too). The stream itself never ends. A server whose
    /// `redislock.notify` names no such key is skipped over here, as in
    /// Python (the crate reports it once; the changes are what is read).
    #[napi(ts_return_type = "Promise<NativeChange | null>")]
    pub fn next<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let (changes, closed) = (Arc::clone(&self.changes), self.closed.clone());
        runtime::promise(env, move || async move {
            // Dropped when closed: a change being read is read again by
            // the next call, none is lost.
            Ok(tokio::select! {
                biased;
                () = closed.cancelled() => None,
                change = async {
                    let mut changes = changes.lock().await;
                    loop {
                        match changes.next().await {
                            Some(Ok(change)) => break Some(change),
                            Some(Err(_)) => continue,
                            None => break None,
                        }
                    }
                } => change.map(NativeChange::from),
            })
        })
    }

    /// Stops reading: pending and later `next` calls resolve to `null`.
    #[napi]
    pub fn close(&self) {
        self.closed.cancel();
    }
}
