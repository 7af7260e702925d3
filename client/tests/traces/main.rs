//! The spans of the `tracing` feature, as a subscriber sees them: an
//! acquisition with its rounds inside, each round with one call per
//! server inside (also the waits the head of the line runs as tasks of
//! their own), their outcomes and tokens; a refused acquisition and its
//! round marked so; an extension and a release with their calls.
//! `make test` builds the tests with the feature (scripts/test.sh).
//!
//! A test program of its own: tracing caches whether a span is wanted per
//! call site, for the whole process, so a subscriber set for one test's
//! thread misses spans other tests' threads met first (seen when this ran
//! inside the quorum program); here the subscriber is the process's.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{relaxed, Cluster};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A closed span: its name, its fields, its parent's id and its own.
#[derive(Clone, Debug)]
struct Closed {
    id: u64,
    parent: Option<u64>,
    name: &'static str,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

/// Keeps every span's fields as they are recorded, and the span when it
/// closes.
#[derive(Clone, Default)]
struct Spans {
    open: Arc<Mutex<BTreeMap<u64, Closed>>>,
    closed: Arc<Mutex<Vec<Closed>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
        let span = Closed { id: id.into_u64(), parent, name: attrs.metadata().name(), fields: fields.0 };
        self.open.lock().expect("spans").insert(id.into_u64(), span);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(span) = self.open.lock().expect("spans").get_mut(&id.into_u64()) {
            let mut fields = Fields(std::mem::take(&mut span.fields));
            values.record(&mut fields);
            span.fields = fields.0;
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        if let Some(span) = self.open.lock().expect("spans").remove(&id.into_u64()) {
            self.closed.lock().expect("spans").push(span);
        }
    }
}

impl Spans {
    fn closed(&self) -> Vec<Closed> {
        self.closed.lock().expect("spans").clone()
    }

    /// Waits until `n` spans named `name` closed (a round's late waits end
    /// after it), within 10 s.
    async fn await_closed(&self, name: &str, n: usize) -> Vec<Closed> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found: Vec<Closed> = self.closed().into_iter().filter(|s| s.name == name).collect();
            if found.len() >= n || Instant::now() > deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn field<'a>(span: &'a Closed, name: &str) -> &'a str {
    span.fields.get(name).map(String::as_str).unwrap_or_else(|| panic!("{}: no field {name}: {span:?}", span.name))
}

fn children<'a>(spans: &'a [Closed], parent: &Closed, name: &str) -> Vec<&'a Closed> {
    spans.iter().filter(|s| s.parent == Some(parent.id) && s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_rounds_and_server_calls_are_spans_inside_each_other() {
    let spans = Spans::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(spans.clone())).expect("the one subscriber");
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let servers = rl.servers();

    // Held by another client: a waiter queues and waits at the head of
    // the line, on every server (the waits are tasks of their own).
    let other = c.redlock(relaxed());
    let first = other.try_lock("traced", Duration::from_secs(10)).await.expect("first holder");
    let refused = rl.try_lock("traced", Duration::from_secs(10)).await;
    assert!(refused.is_err(), "held: {refused:?}");
    let waiter = {
        let rl = rl.clone();
        tokio::spawn(async move { rl.lock_until("traced", Duration::from_secs(10), Some(Instant::now() + Duration::from_secs(10))).await })
    };
    common::eventually(Duration::from_secs(10), "the waiter to wait on every server", || async {
        futures::future::join_all(c.servers.iter().map(|s| s.counter("wait_started"))).await.iter().all(|&n| n >= 1)
    })
    .await;
    other.release(&first).await.expect("release the first");
    let lock = waiter.await.expect("waiter task").expect("granted at the release");
    let lock = rl.extend(&lock, Duration::from_secs(10)).await.expect("extend");
    rl.release(&lock).await.expect("release");

    let acquisitions = spans.await_closed("redlock.acquire", 3).await;
    let all = spans.closed();
    let of = |s: &&Closed| s.fields.get("resource").map(String::as_str) == Some("traced");
    let mine: Vec<&Closed> = acquisitions.iter().filter(of).collect();
    assert_eq!(mine.len(), 3, "the first holder's, the refused one, the waiter's: {acquisitions:?}");

    // The refused one: one plain round, lost, every server asked.
    let refused = mine.iter().find(|s| s.fields.get("outcome").map(String::as_str) == Some("refused")).expect("refused acquisition");
    assert_eq!(field(refused, "kind"), "exclusive");
    assert!(!refused.fields.contains_key("token"), "{refused:?}");
    let rounds = children(&all, refused, "redlock.round");
    assert!(!rounds.is_empty(), "{refused:?}: no round inside");
    for round in &rounds {
        assert_eq!((field(round, "wait"), field(round, "won"), field(round, "granted")), ("false", "false", "0"), "{round:?}");
        let calls = children(&all, round, "redlock.call");
        let mut asked: Vec<&str> = calls.iter().map(|c| field(c, "server")).collect();
        asked.sort();
        let mut names: Vec<&str> = servers.iter().map(String::as_str).collect();
        names.sort();
        assert_eq!(asked, names, "{round:?}: {calls:?}");
        assert!(calls.iter().all(|c| field(c, "command") == "acquire" && field(c, "answer") == "refused"), "{calls:?}");
    }

    // The waiter's: granted with the lock's token, its last round a head
    // round whose waits (run as tasks) are its children, each granted.
    let token = lock.token.expect("module token");
    let granted: Vec<&&Closed> = mine.iter().filter(|s| s.fields.get("outcome").map(String::as_str) == Some("granted")).collect();
    let waited = granted.iter().find(|s| field(s, "token") == token.to_string()).expect("the waiter's acquisition with its token");
    let rounds = children(&all, waited, "redlock.round");
    let won: Vec<&&Closed> = rounds.iter().filter(|r| field(r, "won") == "true").collect();
    assert_eq!(won.len(), 1, "one round won: {rounds:?}");
    assert_eq!(field(won[0], "wait"), "true", "a round of the head of the line: {rounds:?}");
    assert!(field(won[0], "granted").parse::<usize>().expect("granted count") >= 3, "{won:?}");
    let waits: Vec<&Closed> = all.iter().filter(|c| c.parent == Some(won[0].id) && field(c, "command") == "wait").collect();
    assert!(waits.len() >= 3, "the head's waits inside its round: {waits:?}");
    for call in &waits {
        if field(call, "answer") == "granted" {
            assert!(field(call, "answer_token").parse::<i64>().expect("token") <= token, "{call:?}");
        }
    }

    // The extension and the release: every server, each a call inside.
    for (name, command) in [("redlock.extend", "extend"), ("redlock.release", "release")] {
        let kept: Vec<Closed> = spans.await_closed(name, 1).await.into_iter().filter(|s| field(s, "resource") == "traced").collect();
        let last = kept.last().unwrap_or_else(|| panic!("no {name} span"));
        assert_eq!(field(last, "done"), "5", "{last:?}");
        let calls = children(&all, last, "redlock.call");
        assert_eq!(calls.len(), 5, "{name}: {calls:?}");
        assert!(calls.iter().all(|c| field(c, "command") == command && field(c, "answer") == "ok"), "{calls:?}");
    }
}
