//! `redlock revoke RESOURCE [OWNER]`: a stuck lock taken away on every
//! server (`Redlock::revoke`), and the data store's fences raised to the
//! token it issued.

use redlock::{Outcome, Redlock};
use serde::Serialize;

use super::args::RevokeArgs;
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, outcomes_json, pairs, Op, OutcomeJson};

#[derive(Serialize)]
struct RevokeJson<'a> {
    resource: &'a str,
    /// The highest token the servers issued.
    token: i64,
    /// One above the revoked holds' tokens: what --register rose to.
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<i64>,
    /// The holders' owners that were asked for (empty: every hold).
    owners: &'a [String],
    /// Holds ended, all servers counted.
    ended: i64,
    /// Servers that answered the revocation.
    revoked: usize,
    servers: usize,
    quorum: usize,
    /// The registers raised on --store to `fence` (none when no hold was
    /// found).
    registers: &'a [String],
    instances: Vec<OutcomeJson>,
}

pub async fn revoke(rl: &Redlock, args: &RevokeArgs, json: bool) -> Result<i32, Failure> {
    let revoked = rl.revoke(&args.resource, args.owner.as_deref()).await.map_err(|e| match &e {
        redlock::Error::NoQuorum { outcomes, .. } => {
            explain::no_quorum(&format!("lock {:?} not revoked", args.resource), outcomes, rl.quorum(), Op::Release)
        }
        _ => explain::other(&e),
    })?;
    // The registers rise to one above the revoked holds' tokens: every
    // revoked holder's write is refused there, the next holder's is not
    // (see `Revoked::fence`). No hold found: none to fence out.
    let raised: &[String] = match (&args.store, revoked.fence) {
        (Some(store), Some(fence)) => {
            raise(store, &args.registers, fence, rl.settings().request_timeout).await?;
            &args.registers
        }
        _ => &[],
    };
    let answered = revoked.instances.iter().filter(|o| o.outcome == Outcome::Done).count();
    if json {
        output::json(&RevokeJson {
            resource: &args.resource,
            token: revoked.token,
            fence: revoked.fence,
            owners: &revoked.owners,
            ended: revoked.ended,
            revoked: answered,
            servers: rl.servers().len(),
            quorum: rl.quorum(),
            registers: raised,
            instances: outcomes_json(&revoked.instances, Op::Release),
        })?;
    } else {
        let mut lines = vec![("token", revoked.token.to_string()), ("ended", revoked.ended.to_string()), ("servers", answered.to_string())];
        if !revoked.owners.is_empty() {
            lines.push(("owners", revoked.owners.join(", ")));
        }
        if let Some(fence) = revoked.fence {
            lines.push(("fence", fence.to_string()));
        }
        if !raised.is_empty() {
            lines.push(("raised", raised.join(", ")));
        } else if args.store.is_some() {
            lines.push(("raised", "none (no hold found to fence out)".to_string()));
        }
        output::stdout(&pairs(&lines))?;
    }
    Ok(exit::OK)
}

/// `LOCK.FENCED register fence` for each of `registers` on `store`, each
/// within `timeout`: a register below `token` is raised to it; one above
/// it (`FENCED older token`) already refuses the removed holder.
async fn raise(store: &str, registers: &[String], token: i64, timeout: std::time::Duration) -> Result<(), Failure> {
    let failed = |what: String| Failure::general(format!("lock revoked, but the store's fence was not raised to {token}: {what}"));
    let client = redis::Client::open(store).map_err(|e| Failure::usage(format!("--store {store:?}: {e}")))?;
    let mut con = tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| failed(format!("{store}: no connection within {timeout:?}")))?
        .map_err(|e| failed(format!("{store}: {e}")))?;
    for register in registers {
        let raised =
            tokio::time::timeout(timeout, redis::cmd("LOCK.FENCED").arg(register).arg(token).query_async::<redis::Value>(&mut con))
                .await
                .map_err(|_| failed(format!("{register}: no reply within {timeout:?}")))?;
        match raised {
            Ok(_) => {}
            // Already above the token (a newer holder wrote): the removed
            // holder is refused there as it is.
            Err(e) if e.code() == Some("FENCED") => {}
            Err(e) => return Err(failed(format!("{register}: {e}"))),
        }
    }
    Ok(())
}
