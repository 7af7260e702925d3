//! `Election::observe`: every server's announcements of the election
//! lock's changes, merged and counted (`tally`), with the leader read
//! every `observe_interval` while fewer than a quorum of servers can be
//! heard.

use std::pin::Pin;

use futures::stream::{select_all, unfold, Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::tally::Tally;
use super::{Election, Leader};
use crate::transport::{Changes, Holding};

/// What an observer hears.
enum Heard {
    /// Server `.0` is subscribed (again) and names its holder now.
    Up(usize, Option<Holding>),
    /// Server `.0` announced a grant or a new value.
    Said(usize, Holding),
    /// Server `.0`'s subscription is lost.
    Down(usize),
    /// `observe_interval` passed.
    Tick,
}

type Heards = Pin<Box<dyn Stream<Item = Heard> + Send>>;

/// The stream `Election::observe` returns, each leader with its holder
/// (the owner the servers store the hold under). `subscribed`, when
/// given, is cancelled once a quorum of servers are subscribed.
pub fn changes_of_leader(
    election: Election,
    subscribed: Option<CancellationToken>,
) -> impl Stream<Item = (String, Leader)> + Send + 'static {
    let servers = election.redlock.inner.instances.len();
    let mut sources: Vec<Heards> = (0..servers).map(|i| Box::pin(server_changes(election.clone(), i)) as Heards).collect();
    sources.push(Box::pin(ticks(election.observe_every)));
    let tally = Tally::new(servers, election.redlock.quorum());
    let live = vec![false; servers];
    let state = (select_all(sources), tally, live, election, subscribed);
    unfold(state, |(mut heard, mut tally, mut live, election, subscribed)| async move {
        loop {
            let news = match heard.next().await? {
                Heard::Up(i, now) => {
                    if let Some(up) = live.get_mut(i) {
                        *up = true;
                    }
                    if let Some(subscribed) =
                        subscribed.as_ref().filter(|_| live.iter().filter(|up| **up).count() >= election.redlock.quorum())
                    {
                        subscribed.cancel();
                    }
                    now.and_then(|h| tally.hear(i, h))
                }
                Heard::Said(i, holding) => tally.hear(i, holding),
                Heard::Down(i) => {
                    if let Some(up) = live.get_mut(i) {
                        *up = false;
                    }
                    None
                }
                Heard::Tick if live.iter().filter(|up| **up).count() < election.redlock.quorum() => match election.holder().await {
                    Ok(Some((owner, leader))) => tally.report(&owner, leader),
                    _ => None,
                },
                Heard::Tick => None,
            };
            if let Some(leader) = news {
                let holder = tally.last_owner().to_string();
                return Some(((holder, leader), (heard, tally, live, election, subscribed)));
            }
        }
    })
}

/// One server's announcements: subscribed, then each change, then `Down`
/// when the connection is lost, and subscribed again an `observe_interval`
/// later (and every one after, until it answers).
fn server_changes(election: Election, server: usize) -> impl Stream<Item = Heard> + Send + 'static {
    enum State {
        Subscribing { pause: bool },
        Subscribed(Changes),
    }
    unfold(State::Subscribing { pause: false }, move |state| {
        let election = election.clone();
        async move {
            let instance = election.redlock.inner.instances.get(server)?;
            match state {
                State::Subscribing { mut pause } => loop {
                    if pause {
                        tokio::time::sleep(election.observe_every).await;
                    }
                    match instance.changes(&election.resource).await {
                        Ok((now, changes)) => return Some((Heard::Up(server, now), State::Subscribed(changes))),
                        Err(_) => pause = true,
                    }
                },
                State::Subscribed(mut changes) => match changes.next().await {
                    Some(holding) => Some((Heard::Said(server, holding), State::Subscribed(changes))),
                    None => Some((Heard::Down(server), State::Subscribing { pause: true })),
                },
            }
        }
    })
}

fn ticks(every: std::time::Duration) -> impl Stream<Item = Heard> + Send + 'static {
    unfold((), move |()| async move {
        tokio::time::sleep(every).await;
        Some((Heard::Tick, ()))
    })
}
