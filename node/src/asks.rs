//! The release request: `NativeRedlock.ask`'s answer, and `NativeAsks`,
//! the crate's `Hold::asks` read one ask at a time, which `Lock.asks` in
//! index.js turns into an async iterator. Who hears an ask, and how often,
//! is the crate's (docs/client.md, "Asking a holder to let go").

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use napi::bindgen_prelude::Object;
use napi::{Env, Result};
use napi_derive::napi;
use redlock::{AskRequest, Asked};
use tokio_util::sync::CancellationToken;

use crate::runtime;

/// What an ask reached.
#[napi(object)]
pub struct NativeAsked {
    /// The most holders one server asked (0: nobody holds it, as far as
    /// the servers that answered know).
    pub asked: u32,
    /// The servers that answered.
    pub answered: u32,
}

impl From<Asked> for NativeAsked {
    fn from(a: Asked) -> NativeAsked {
        NativeAsked { asked: u32::try_from(a.holders.max(0)).unwrap_or(u32::MAX), answered: u32::try_from(a.answered).unwrap_or(u32::MAX) }
    }
}

/// What `Redlock.resize` came to (the crate's `Resized`).
#[napi(object)]
pub struct NativeResized {
    /// A quorum resized it; false when a quorum answered that nobody
    /// holds the semaphore (nothing resized).
    pub held: bool,
    /// The servers that resized it.
    pub resized: u32,
}

impl From<redlock::Resized> for NativeResized {
    fn from(r: redlock::Resized) -> NativeResized {
        NativeResized { held: r.held, resized: u32::try_from(r.resized).unwrap_or(u32::MAX) }
    }
}

/// An ask for a held lock.
#[napi(object)]
pub struct NativeAskRequest {
    /// The resource asked for (one of a set's, for a set held whole).
    pub resource: String,
    /// Why, as the asker said it; null when it gave no message.
    pub message: Option<String>,
}

impl From<AskRequest> for NativeAskRequest {
    fn from(a: AskRequest) -> NativeAskRequest {
        NativeAskRequest { resource: a.resource, message: a.message }
    }
}

type Requests = Arc<tokio::sync::Mutex<Pin<Box<dyn Stream<Item = AskRequest> + Send>>>>;

/// The asks `NativeLock.asks` yields.
#[napi]
pub struct NativeAsks {
    requests: Requests,
    closed: CancellationToken,
}

impl NativeAsks {
    pub fn new(requests: impl Stream<Item = AskRequest> + Send + 'static) -> NativeAsks {
        NativeAsks { requests: Arc::new(tokio::sync::Mutex::new(Box::pin(requests))), closed: CancellationToken::new() }
    }
}

#[napi]
impl NativeAsks {
    /// A Promise of the next ask; `null` once the lock is lost or released,
    /// or this reader closed (a pending one too).
    #[napi(ts_return_type = "Promise<NativeAskRequest | null>")]
    pub fn next<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let (requests, closed) = (Arc::clone(&self.requests), self.closed.clone());
        runtime::promise(env, move || async move {
            // Dropped when closed: an ask being read is read again by the
            // next call, none is lost.
            Ok(tokio::select! {
                biased;
                () = closed.cancelled() => None,
                request = async { requests.lock().await.next().await } => request.map(NativeAskRequest::from),
            })
        })
    }

    /// Stops reading: pending and later `next` calls resolve to `null`.
    #[napi]
    pub fn close(&self) {
        self.closed.cancel();
    }
}
