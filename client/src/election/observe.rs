//! `Election::observe`: every server's announcements of the election
//! lock's changes, merged and counted (`tally`), with the leader read
//! every `observe_interval` while fewer than a quorum of servers can be
//! heard.

use futures::stream::{unfold, Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::tally::Tally;
use super::{Election, Leader};
use crate::watch::heard::{every_server, Heard};

/// The stream `Election::observe` returns, each leader with its holder
/// (the owner the servers store the hold under). `subscribed`, when
/// given, is cancelled once a quorum of servers are subscribed.
pub fn changes_of_leader(
    election: Election,
    subscribed: Option<CancellationToken>,
) -> impl Stream<Item = (String, Leader)> + Send + 'static {
    let servers = election.redlock.inner.instances.len();
    let heard = every_server(&election.redlock, &election.resource, election.observe_every, true, false);
    let tally = Tally::new(servers, election.redlock.quorum());
    let live = vec![false; servers];
    let state = (Box::pin(heard), tally, live, election, subscribed);
    unfold(state, |(mut heard, mut tally, mut live, election, subscribed)| async move {
        loop {
            let news = match heard.next().await? {
                Heard::Up(i, now, _) => {
                    if let Some(up) = live.get_mut(i) {
                        *up = true;
                    }
                    if let Some(subscribed) =
                        subscribed.as_ref().filter(|_| live.iter().filter(|up| **up).count() >= election.redlock.quorum())
                    {
                        subscribed.cancel();
                    }
                    now.holding().and_then(|h| tally.hear(i, h))
                }
                Heard::Said(i, said) => said.holding().and_then(|h| tally.hear(i, h)),
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
