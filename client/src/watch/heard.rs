//! Every server's announcements of one lock's changes, as one stream of
//! what is heard: what `Election::observe` and `Redlock::watch` both
//! count. Each server is subscribed on a connection of its own; after a
//! lost connection it is subscribed again an interval later (and every
//! interval after, until it answers), and what it holds then is read on
//! the same connection, so a change made while it was not heard is
//! learned from that reading.

use std::pin::Pin;
use std::time::Duration;

use futures::stream::{select_all, unfold, Stream};

use crate::redlock::Redlock;
use crate::transport::{Announcement, Barrier, Changes, Reading};

/// What a watcher hears.
pub enum Heard {
    /// Server `.0` is subscribed (again) and says what it holds now; `.2`
    /// confirms, when asked, that what it announced so far was heard.
    Up(usize, Reading, Barrier),
    /// Server `.0` announced a change.
    Said(usize, Announcement),
    /// Server `.0`'s subscription is lost.
    Down(usize),
    /// An interval passed (only with `ticking`).
    Tick,
}

type Heards = Pin<Box<dyn Stream<Item = Heard> + Send>>;

/// Every server of `redlock` heard about `resource`, merged; with
/// `ticking`, a `Tick` every `every` too. `notify`: each reading also asks
/// for the server's `redislock.notify` patterns.
pub fn every_server(
    redlock: &Redlock,
    resource: &str,
    every: Duration,
    ticking: bool,
    notify: bool,
) -> impl Stream<Item = Heard> + Send + 'static {
    let servers = redlock.inner.instances.len();
    let mut sources: Vec<Heards> =
        (0..servers).map(|i| Box::pin(server_changes(redlock.clone(), resource.to_string(), every, notify, i)) as Heards).collect();
    if ticking {
        sources.push(Box::pin(ticks(every)));
    }
    select_all(sources)
}

/// One server's announcements: subscribed, then each change, then `Down`
/// when the connection is lost, and subscribed again `every` later (and
/// every one after, until it answers).
fn server_changes(
    redlock: Redlock,
    resource: String,
    every: Duration,
    notify: bool,
    server: usize,
) -> impl Stream<Item = Heard> + Send + 'static {
    enum State {
        Subscribing { pause: bool },
        Subscribed(Changes),
    }
    unfold(State::Subscribing { pause: false }, move |state| {
        let (redlock, resource) = (redlock.clone(), resource.clone());
        async move {
            let instance = redlock.inner.instances.get(server)?;
            match state {
                State::Subscribing { mut pause } => loop {
                    if pause {
                        tokio::time::sleep(every).await;
                    }
                    match instance.changes(&resource, notify).await {
                        Ok((now, changes)) => {
                            let barrier = changes.barrier();
                            return Some((Heard::Up(server, now, barrier), State::Subscribed(changes)));
                        }
                        Err(_) => pause = true,
                    }
                },
                State::Subscribed(mut changes) => match changes.next().await {
                    Some(said) => Some((Heard::Said(server, said), State::Subscribed(changes))),
                    None => Some((Heard::Down(server), State::Subscribing { pause: true })),
                },
            }
        }
    })
}

fn ticks(every: Duration) -> impl Stream<Item = Heard> + Send + 'static {
    unfold((), move |()| async move {
        tokio::time::sleep(every).await;
        Some((Heard::Tick, ()))
    })
}
