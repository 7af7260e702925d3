//! Taking a hold away: `LOCK.REVOKE` on every server, an operator's way
//! out of a stuck lock that raises the fence instead of deleting its key.

use super::*;

/// What a revocation came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revoked {
    /// The highest token the servers issued for it. Each server grants
    /// only tokens above its own from now on; the next holder's token,
    /// reconciled across a quorum, is above every revoked hold's token, but
    /// may be below this one (a server outside its quorum may count
    /// higher): raise a fenced store's registers to `fence`, not to this.
    pub token: i64,
    /// One above the highest token of the holds the revocation found
    /// (looked up on every server first), `None` when it found none: the
    /// value to raise a fenced store's registers to (`LOCK.FENCED register
    /// fence`). It refuses every revoked holder's writes and admits the
    /// next holder's, whose token is above every revoked one. A hold
    /// granted between the look-up and the revocation is revoked too, its
    /// token perhaps above `fence`: revoke again to fence it.
    pub fence: Option<i64>,
    /// The owners whose holds were taken away, as the servers name them
    /// (a quorum client's hold named `NAME` is held as `NAME:` and 16 hex
    /// digits).
    pub owners: Vec<String>,
    /// The holds the servers ended, all servers counted (0: nothing was
    /// held, or not by that owner; the token is issued all the same).
    pub ended: i64,
    /// Each server's answer: `Done`, or why it did not answer.
    pub instances: Vec<InstanceOutcome>,
}

impl Redlock {
    /// Takes the holds of `resource` away on every server: `owner`'s (a
    /// name as `lock_as` takes it, or a server's owner as `holders` shows
    /// it), or every hold without one. Each server issues a token above
    /// every token it issued before, ends the holds, and grants the lock
    /// to the next in its line at once; the removed holder's next
    /// extension is answered `REVOKED`, which its guard reports as lost
    /// with `LossCause::Revoked`.
    ///
    /// Until then the removed holder may still act: only a fence stops
    /// it. Its `LOCK.GUARD` writes are refused at once (it holds nothing
    /// now); raise every `LOCK.FENCED` register it writes through to the
    /// returned token, and its fenced writes are refused there too.
    ///
    /// An error unless a quorum of servers answered: the hold may then
    /// still stand on a quorum.
    pub async fn revoke(&self, resource: &str, owner: Option<&str>) -> Result<Revoked, Error> {
        self.verify_servers().await?;
        // Who holds it, and with which tokens: the holds to revoke (all, or
        // those of `owner`) and the fence above them.
        let held: Vec<(String, Option<i64>)> = self
            .holders(resource)
            .await
            .into_iter()
            .flat_map(|status| {
                let exclusive = status.owner.map(|o| (o, status.token));
                status.holders.into_iter().map(|h| (h.owner, h.token)).chain(exclusive)
            })
            .filter(|(o, _)| owner.is_none_or(|name| named(o, name)))
            .collect();
        let fence = held.iter().filter_map(|&(_, t)| t).max().and_then(|t| t.checked_add(1));
        let owners: Vec<String> = match owner {
            None => Vec::new(),
            Some(name) => {
                let mut found: Vec<String> = held.into_iter().map(|(o, _)| o).collect();
                found.sort();
                found.dedup();
                if found.is_empty() {
                    // Nobody holds it under that name (any more): the
                    // revocation still raises the token.
                    found.push(name.to_string());
                }
                found
            }
        };
        let asked = self.inner.instances.iter().map(|instance| {
            let owners = &owners;
            async move {
                let started = Instant::now();
                let mut token = 0;
                let mut ended = 0;
                let mut failure = None;
                let each: Vec<Option<&str>> =
                    if owners.is_empty() { vec![None] } else { owners.iter().map(|o| Some(o.as_str())).collect() };
                for owner in each {
                    match instance.revoke(resource, owner).traced(traces::call(&instance.name, "revoke")).await {
                        Ok((t, n)) => {
                            token = token.max(t);
                            ended += n;
                        }
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                let outcome = failure.unwrap_or(Outcome::Done);
                (InstanceOutcome { server: instance.name.clone(), outcome, latency: started.elapsed(), connection: None }, token, ended)
            }
        });
        let answers = join_all(asked).await;
        let answered = answers.iter().filter(|(o, ..)| o.outcome == Outcome::Done).count();
        let token = answers.iter().map(|&(_, t, _)| t).max().unwrap_or(0);
        let ended = answers.iter().map(|&(_, _, n)| n).sum();
        let instances: Vec<InstanceOutcome> = answers.into_iter().map(|(o, ..)| o).collect();
        if let Some(e) = repeated_server(&instances, self.insecure()) {
            return Err(e);
        }
        if answered < self.inner.quorum {
            return Err(Error::NoQuorum { resource: resource.to_string(), what: "revocation", outcomes: instances });
        }
        let owners = if owner.is_some() { owners } else { Vec::new() };
        Ok(Revoked { token, fence, owners, ended, instances })
    }
}

/// Whether the server's owner `owner` is the hold named `name`: `name`
/// itself, or `name` and a round's suffix (`:` and 16 hex digits, see
/// `round_owner`).
fn named(owner: &str, name: &str) -> bool {
    match owner.strip_prefix(name) {
        Some("") => true,
        Some(rest) => rest.strip_prefix(':').is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::named;

    #[test]
    fn a_name_matches_its_rounds_and_itself_only() {
        assert!(named("alice", "alice"));
        assert!(named("alice:00ff00ff00ff00ff", "alice"));
        assert!(!named("alice:00ff", "alice"));
        assert!(!named("alicex:00ff00ff00ff00ff", "alice"));
        assert!(!named("alice:00ff00ff00ff00fg", "alice"));
        assert!(!named("bob", "alice"));
    }
}
