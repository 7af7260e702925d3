//! Each acquisition counted in its handle's metrics (`crate::metrics`):
//! the public ways to acquire end in `counted`, which counts the wait and
//! its outcome, and marks the lock granted as held until it is released,
//! lost, or (dropped unreleased) its lease ends; and traced (`crate::traces`,
//! with the `tracing` feature) in a span of its own. Counting never changes
//! what the acquisition does.

use std::future::Future;

use super::*;
use crate::metrics::{AcquireKind, AcquireOutcome, Metrics, Snapshot};
use crate::traces::{self, Traced};

impl Redlock {
    /// This handle's metrics now (shared by its clones): acquisitions by
    /// kind and outcome with their waits, holds, extensions, losses, each
    /// server's requests, elections. `Snapshot::to_prometheus` renders
    /// them in Prometheus's text format.
    pub fn metrics(&self) -> Snapshot {
        self.inner.metrics.snapshot()
    }

    /// The registry itself, for the guards and elections that count in it.
    pub(crate) fn registry(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// `acquiring`, an acquisition of `resources` as `share` asks, waiting
    /// until `deadline` (if any), counted.
    pub(crate) async fn counted(
        &self,
        resources: &Resources,
        share: Share,
        deadline: Option<Instant>,
        acquiring: impl Future<Output = Result<Lock, Error>>,
    ) -> Result<Lock, Error> {
        let kind = kind_of(resources, share);
        let span = traces::acquisition(resources, kind.label());
        async {
            if !self.inner.metrics.on {
                let result = acquiring.await;
                traces::acquired(outcome_of(&result, deadline.is_some()).label(), token_of(&result));
                return result;
            }
            let waiting = self.inner.metrics.waiting(kind);
            let result = acquiring.await;
            let outcome = outcome_of(&result, deadline.is_some());
            traces::acquired(outcome.label(), token_of(&result));
            waiting.ended(outcome);
            result.map(|lock| {
                let held = self.inner.metrics.held(kind);
                if let Some(end) = lock.acquired_at.checked_add(lock.validity) {
                    held.valid_until(end);
                }
                Lock { held: Some(held), ..lock }
            })
        }
        .traced(span)
        .await
    }
}

fn token_of(result: &Result<Lock, Error>) -> Option<i64> {
    result.as_ref().ok().and_then(|lock| lock.token)
}

fn kind_of(resources: &Resources, share: Share) -> AcquireKind {
    match share {
        Share::Permits(..) | Share::Slots { .. } => AcquireKind::Permits,
        Share::Shared => AcquireKind::Shared,
        Share::Exclusive if resources.is_set() => AcquireKind::Set,
        Share::Exclusive => AcquireKind::Exclusive,
    }
}

/// How an acquisition that `waited` for a deadline (or not) ended.
fn outcome_of(result: &Result<Lock, Error>, waited: bool) -> AcquireOutcome {
    match result {
        Ok(_) => AcquireOutcome::Granted,
        Err(Error::NotAcquired { why: NotGranted::Held | NotGranted::Quarantine { .. } | NotGranted::NoValidity, .. }) => match waited {
            true => AcquireOutcome::TimedOut,
            false => AcquireOutcome::Refused,
        },
        Err(_) => AcquireOutcome::Error,
    }
}
