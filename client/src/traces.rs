//! Spans for the application's traces, with the `tracing` feature: an
//! application whose subscriber exports spans (tracing-opentelemetry, a
//! log of closed spans) sees its lock waits in its traces.
//!
//! - `redlock.acquire` (INFO): one acquisition, from the call to its end;
//!   `resource`, `kind` (exclusive, shared, permits, set), then `outcome`
//!   (granted, refused, timed_out, error) and the granted `token`;
//! - `redlock.round` (DEBUG), inside it: one quorum round, every server
//!   asked at once; `resource`, `wait` (a round of the head of the line,
//!   waiting on each server), then `granted` (how many servers granted)
//!   and `won`;
//! - `redlock.call` (DEBUG), inside a round, an extension or a release: one
//!   lock request to one server; `server`, `command`, then `answer` (the
//!   outcome's stable name: granted, refused, ok, timeout, quarantine, ...)
//!   and the `answer_token` the server granted;
//! - `redlock.extend` (DEBUG) and `redlock.release` (INFO): one extension or
//!   release of a lock on every server; `resource`, then `done` (the servers
//!   that extended or released it).
//!
//! A span that was not entered costs one atomic load when no subscriber
//! wants its level. Without the feature a span is an empty struct and
//! `Traced::traced` returns its future as it is: nothing is built,
//! recorded or linked.

use std::fmt::Display;
use std::future::Future;

#[cfg(feature = "tracing")]
pub(crate) use tracing::Span;

/// Without the `tracing` feature, a span is nothing.
#[cfg(not(feature = "tracing"))]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span;

#[cfg(feature = "tracing")]
pub(crate) type Instrumented<F> = tracing::instrument::Instrumented<F>;
#[cfg(not(feature = "tracing"))]
pub(crate) type Instrumented<F> = F;

/// A future run inside a span (entered each time it is polled).
pub(crate) trait Traced: Future + Sized {
    fn traced(self, span: Span) -> Instrumented<Self>;
}

impl<F: Future> Traced for F {
    #[cfg(feature = "tracing")]
    #[inline]
    fn traced(self, span: Span) -> Instrumented<Self> {
        tracing::Instrument::instrument(self, span)
    }

    #[cfg(not(feature = "tracing"))]
    #[inline(always)]
    fn traced(self, _span: Span) -> Self {
        self
    }
}

/// The span the caller runs in: what a task spawned for it should run in
/// too (a spawned task starts outside every span).
#[inline(always)]
pub(crate) fn current() -> Span {
    #[cfg(feature = "tracing")]
    return Span::current();
    #[cfg(not(feature = "tracing"))]
    Span
}

/// `redlock.acquire` of `resource`, of `kind`.
#[inline(always)]
pub(crate) fn acquisition(resource: &dyn Display, kind: &'static str) -> Span {
    #[cfg(feature = "tracing")]
    return tracing::info_span!("redlock.acquire", resource = %resource, kind, outcome = tracing::field::Empty, token = tracing::field::Empty);
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (resource, kind);
        Span
    }
}

/// The current acquisition ended with `outcome`, its lock's `token`.
#[inline(always)]
pub(crate) fn acquired(outcome: &'static str, token: Option<i64>) {
    ended(("outcome", outcome), ("token", token));
}

/// Records `name = value`, and `token_name = token` when there is one, on
/// the current span (a field it does not have records nothing).
#[inline(always)]
fn ended((name, value): (&'static str, &'static str), (token_name, token): (&'static str, Option<i64>)) {
    #[cfg(feature = "tracing")]
    {
        let span = Span::current();
        span.record(name, value);
        if let Some(token) = token {
            span.record(token_name, token);
        }
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (name, value, token_name, token);
}

/// `redlock.round` of `resource`; `wait`: a round of the head of the line.
#[inline(always)]
pub(crate) fn round(resource: &dyn Display, wait: bool) -> Span {
    #[cfg(feature = "tracing")]
    return tracing::debug_span!("redlock.round", resource = %resource, wait, granted = tracing::field::Empty, won = tracing::field::Empty);
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (resource, wait);
        Span
    }
}

/// The current round ended: `granted` servers granted, a quorum or not.
#[inline(always)]
pub(crate) fn round_ended(granted: usize, won: bool) {
    #[cfg(feature = "tracing")]
    {
        let span = Span::current();
        span.record("granted", granted);
        span.record("won", won);
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (granted, won);
}

/// `redlock.call`: `command` sent to `server`.
#[inline(always)]
pub(crate) fn call(server: &str, command: &'static str) -> Span {
    #[cfg(feature = "tracing")]
    return tracing::debug_span!("redlock.call", server, command, answer = tracing::field::Empty, answer_token = tracing::field::Empty);
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (server, command);
        Span
    }
}

/// The current call was answered `answer` (`Outcome::kind`), with `token`.
/// Recorded on whatever span is current: only `redlock.call` has these
/// fields (a request sent outside one records nothing).
#[inline(always)]
pub(crate) fn answered(answer: &'static str, token: Option<i64>) {
    ended(("answer", answer), ("answer_token", token));
}

/// `redlock.extend` or `redlock.release` (`release`) of `resource`.
#[inline(always)]
pub(crate) fn keeping(resource: &dyn Display, release: bool) -> Span {
    #[cfg(feature = "tracing")]
    return match release {
        true => tracing::info_span!("redlock.release", resource = %resource, done = tracing::field::Empty),
        false => tracing::debug_span!("redlock.extend", resource = %resource, done = tracing::field::Empty),
    };
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (resource, release);
        Span
    }
}

/// The current extension or release reached `done` servers.
#[inline(always)]
pub(crate) fn kept(done: usize) {
    #[cfg(feature = "tracing")]
    Span::current().record("done", done);
    #[cfg(not(feature = "tracing"))]
    let _ = done;
}
