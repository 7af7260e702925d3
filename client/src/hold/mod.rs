//! The one home of what every front end of the client does with a lock
//! (the CLI, the Python and the Node bindings): what to acquire
//! (`Request`: a `Kind` and a `Patience`), the acquisition itself
//! (`take`, `acquire`), the hold that results (`Hold`: plain, or kept by a
//! guard; lost, validity, extend, release, reenter), the checks of what a
//! caller passes (`input`, in the caller's own names and units) and what
//! went wrong, each failure in one `Category`. A binding only translates
//! types, names and errors into its language.
//!
//! - `input`: numbers and options as a caller gives them, checked
//! - `state`: `Hold`
//! - `failure`: `Failure` and its `Category`

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::redlock::{Lock, Redlock, Retry};
use crate::resources::Resources;
use crate::transport::{Ask, Share};

pub mod failure;
pub mod input;
pub mod state;

pub use crate::redlock::Kind;
pub use failure::{Category, Failure};
pub use input::{Options, Span};
pub use state::Hold;

/// Stands in for "no time limit" in a deadline-driven wait (`wait=math.inf`,
/// `wait: Infinity`): ten years.
pub const FOREVER: Duration = Duration::from_secs(10 * 365 * 86_400);

/// How long to try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patience {
    /// One attempt round.
    Once,
    /// The configured retries (`Settings::retry_count`, `retry_delay`).
    Retries,
    /// Until this long from the start, in the resource's line.
    Wait(Duration),
}

/// What to acquire, and how long to try.
#[derive(Clone, Debug)]
pub struct Request {
    /// As asked: a permit's semaphore, not its slot key; several for a
    /// set, taken all or nothing.
    pub resources: Resources,
    pub ttl: Duration,
    pub kind: Kind,
    pub patience: Patience,
}

impl Request {
    /// The deadline of a wait starting now; `None` without one.
    pub fn deadline(&self) -> Option<Instant> {
        let Patience::Wait(wait) = self.patience else { return None };
        let now = Instant::now();
        Some(now.checked_add(wait).or_else(|| now.checked_add(FOREVER)).unwrap_or(now))
    }
}

impl Kind {
    /// The kind the flags every front end has ask for: `shared`, a shared
    /// hold of a read-write lock; `limit`, `permits` (1 unless given) of a
    /// semaphore of that many; neither, the lock itself. `None` for
    /// `shared` with `limit`, which exclude each other, and for `permits`
    /// without `limit` or above it.
    pub fn of(shared: bool, limit: Option<u32>, permits: Option<u32>) -> Option<Kind> {
        match (shared, limit, permits) {
            (true, Some(_), _) | (_, None, Some(_)) => None,
            (true, None, None) => Some(Kind::Shared),
            (false, None, None) => Some(Kind::Exclusive),
            (false, Some(limit), count) => {
                let count = count.unwrap_or(1);
                (1..=limit).contains(&count).then_some(Kind::Permit { limit, count })
            }
        }
    }
}

/// Takes the lock `req` asks for, calling `observe` after each failed
/// attempt of an exclusive lock that will be retried (the CLI shows why it
/// waits).
pub async fn take<F>(redlock: &Redlock, req: &Request, observe: F) -> Result<Lock, Error>
where
    F: FnMut(&Retry<'_>) + Send,
{
    let deadline = req.deadline();
    let (resources, ttl) = (&req.resources, req.ttl);
    if let (true, Kind::Permit { .. }) = (resources.is_set(), req.kind) {
        return Err(Error::Config(format!(
            "permits are taken from one semaphore, not from several resources at once ({resources}): name one semaphore"
        )));
    }
    // A permit's semaphore: the one resource.
    let semaphore = || resources.to_string();
    match (req.kind, req.patience) {
        (Kind::Exclusive, Patience::Once) => redlock.try_acquire(resources, ttl, false).await,
        (Kind::Shared, Patience::Once) => redlock.try_acquire(resources, ttl, true).await,
        (Kind::Permit { limit, count }, Patience::Once) => redlock.try_permits(&semaphore(), limit, count, ttl).await,
        (Kind::Exclusive, _) => redlock.acquire_until(resources, ttl, deadline, Ask::exclusive(), observe).await,
        (Kind::Shared, _) => redlock.acquire_until(resources, ttl, deadline, Ask::new(Share::Shared), |_| {}).await,
        (Kind::Permit { limit, count }, _) => redlock.permits_until(&semaphore(), limit, count, ttl, deadline).await,
    }
}

/// Work a hold or an acquisition dropped unreleased leaves to be done: the
/// release of its lock.
pub type Work = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Runs such work in the background. A `Drop` runs on whatever thread
/// drops the value, often none of tokio's, so each binding says where its
/// runtime is (and what to do when there is none, e.g. in a forked child).
pub type Spawn = fn(Work);

/// Acquires as `req` asks, kept by a guard (`keep`) or not; `spawn` runs
/// the releases of what is dropped unreleased. Runs on a tokio runtime (a
/// guard's keeper is a task of it).
pub async fn acquire(redlock: Redlock, req: Request, keep: bool, spawn: Spawn) -> Result<Acquired, Error> {
    let lock = take(&redlock, &req, |_| {}).await?;
    let hold = if keep {
        let guard = redlock.keep(lock);
        Hold::keeping(redlock, req.resources, guard, spawn)
    } else {
        Hold::plain(redlock, req.resources, lock, spawn)
    };
    Ok(Acquired(hold))
}

/// A lock just acquired, on its way to its caller. Until it gets there (a
/// task cancelled at the wrong moment, a Ctrl-C during a blocking wait),
/// dropping it releases the lock, plain or kept, instead of leaving it
/// held for a whole ttl.
pub struct Acquired(Hold);

impl Acquired {
    /// The hold, handed to its caller: from now on a plain lock dropped
    /// unreleased stays held until its lease ends, as `Lock` does.
    pub fn hold(mut self) -> Hold {
        self.0.hand_over();
        self.0
    }
}
