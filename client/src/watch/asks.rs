//! A holder hearing the asks for its own hold (`LockGuard::asks`): every
//! server's `ask` announcements on the lock's channel, those naming the
//! hold's owner, each delivered once although every server announces it.
//!
//! The dedupe rule needs no clock: the servers announce the asks of one
//! hold in the order they receive them, so each server's k-th ask for the
//! hold is the k-th ask it heard. The k-th ask is delivered when the first
//! server's k-th arrives (whichever server that is); a server that missed
//! asks (its subscription was lost, or made late) counts fewer and lags
//! behind: it never causes a repeat, and delivers again only once it
//! announces more asks than any server did. An ask is thus delivered at
//! most once; one that reached only lagging servers is not delivered (an
//! ask is a request: the asker may ask again).

use std::pin::Pin;

use futures::stream::{select_all, Stream, StreamExt};

use super::heard::{every_server, Heard};
use super::DEFAULT_WATCH_INTERVAL;
use crate::redlock::Redlock;
use crate::transport::ChangeKind;

/// An ask for this hold (`Redlock::ask`), heard once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskRequest {
    /// The resource asked for (one of a set's, for a set held whole).
    pub resource: String,
    /// Why, as the asker said it; `None` when it gave no message.
    pub message: Option<String>,
}

/// The asks each server announced for one hold, and how many were
/// delivered: the dedupe rule of this module, as a pure count.
#[derive(Debug)]
pub struct AskCount {
    heard: Vec<u64>,
    delivered: u64,
}

impl AskCount {
    pub fn new(servers: usize) -> AskCount {
        AskCount { heard: vec![0; servers], delivered: 0 }
    }

    /// Server `server` announced an ask for the hold: whether it is one no
    /// server announced before (deliver it). A server out of range is
    /// never heard.
    pub fn hear(&mut self, server: usize) -> bool {
        let Some(heard) = self.heard.get_mut(server) else { return false };
        *heard += 1;
        if *heard > self.delivered {
            self.delivered = *heard;
            true
        } else {
            false
        }
    }
}

type Requests = Pin<Box<dyn Stream<Item = AskRequest> + Send>>;

/// The asks for `owner`'s hold of `resources` heard from every server of
/// `redlock`, each once (see the module); ends when `ended` completes.
/// Subscribes when first polled, on a connection of its own per server
/// and resource.
pub(crate) fn asks_for(
    redlock: &Redlock,
    resources: &[String],
    owner: &str,
    ended: impl std::future::Future<Output = ()> + Send + 'static,
) -> impl Stream<Item = AskRequest> + Send + 'static {
    let servers = redlock.inner.instances.len();
    let each: Vec<Requests> = resources
        .iter()
        .map(|resource| {
            let heard = every_server(redlock, resource, DEFAULT_WATCH_INTERVAL, false, false);
            let (owner, resource) = (owner.to_string(), resource.clone());
            let mut count = AskCount::new(servers);
            Box::pin(heard.filter_map(move |heard| {
                let request = match heard {
                    Heard::Said(server, said) if said.kind == ChangeKind::Ask && said.owner == owner && count.hear(server) => {
                        Some(AskRequest { resource: resource.clone(), message: said.value })
                    }
                    _ => None,
                };
                futures::future::ready(request)
            })) as Requests
        })
        .collect();
    select_all(each).take_until(ended)
}

#[cfg(test)]
mod tests {
    use super::AskCount;

    /// Which of `heard` (server by server, in arrival order) are delivered.
    fn delivered(servers: usize, heard: &[usize]) -> Vec<bool> {
        let mut count = AskCount::new(servers);
        heard.iter().map(|&s| count.hear(s)).collect()
    }

    #[test]
    fn each_ask_is_delivered_once_from_whichever_server_says_it_first() {
        // Two asks, each from all three servers, interleaved.
        assert_eq!(delivered(3, &[0, 1, 2, 1, 0, 2]), [true, false, false, true, false, false]);
        // The second ask first heard from a server still behind on the first.
        assert_eq!(delivered(3, &[0, 0, 1, 1, 2, 2]), [true, true, false, false, false, false]);
    }

    #[test]
    fn a_server_that_missed_asks_lags_and_never_repeats_one() {
        // Server 2 missed ask 1: its first ask is the others' second.
        assert_eq!(delivered(3, &[0, 1, 0, 1, 2]), [true, false, true, false, false]);
        // It catches up only by announcing more asks than any server did.
        let mut count = AskCount::new(3);
        for s in [0, 1, 0, 1, 2] {
            count.hear(s);
        }
        assert!(!count.hear(2), "its second is the others' second");
        assert!(count.hear(2), "a third ask, heard from it first");
        assert!(!count.hear(0) && !count.hear(1));
    }

    #[test]
    fn a_server_out_of_range_is_never_heard() {
        assert_eq!(delivered(2, &[2, 0, 5]), [false, true, false]);
    }
}
