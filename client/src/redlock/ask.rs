//! Asking a lock's holders to let go: `LOCK.ASK` on every server, a
//! cooperative request that changes nothing (the holder decides).

use super::*;

/// What an ask came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    /// The servers that answered.
    pub answered: usize,
    /// The most holders one server asked (0: nobody holds it, as far as
    /// the servers that answered know). Not a sum: every server asks the
    /// same holders.
    pub holders: i64,
    /// Each server's answer: `Done`, or why it did not answer.
    pub instances: Vec<InstanceOutcome>,
}

impl Redlock {
    /// Asks every holder of `resource` to let it go, with `message` (why,
    /// for the holder to log or weigh): each server announces the ask to
    /// each holder it has (`LOCK.ASK`), and a holder's guard that listens
    /// (`LockGuard::asks`) hears it once. Nothing is released here: the
    /// holder decides.
    ///
    /// `Error::NoQuorum` unless a quorum of servers answered: the holder
    /// may then not hear it (a guard hears an ask from any one server, but
    /// only from one it is subscribed to).
    pub async fn ask(&self, resource: &str, message: Option<&str>) -> Result<Asked, Error> {
        self.verify_servers().await?;
        let answers = self.answers_everywhere("ask", |instance| instance.ask(resource, message)).await;
        let answered = answers.iter().filter(|(_, n)| n.is_some()).count();
        let holders = answers.iter().filter_map(|&(_, n)| n).max().unwrap_or(0);
        let instances: Vec<InstanceOutcome> = answers.into_iter().map(|(o, _)| o).collect();
        if let Some(e) = repeated_server(&instances, self.insecure()) {
            return Err(e);
        }
        if answered < self.inner.quorum {
            return Err(Error::NoQuorum { resource: resource.to_string(), what: "ask", outcomes: instances });
        }
        Ok(Asked { answered, holders, instances })
    }
}
