//! `redlock resize RESOURCE LIMIT`: a held semaphore given a new limit on
//! every server (`Redlock::resize`).

use redlock::Redlock;
use serde::Serialize;

use super::args::ResizeArgs;
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, outcomes_json, pairs, Op, OutcomeJson};

#[derive(Serialize)]
struct ResizeJson<'a> {
    resource: &'a str,
    limit: u32,
    /// A quorum resized it; false when nobody holds it (nothing resized).
    held: bool,
    /// Servers that resized it.
    resized: usize,
    servers: usize,
    quorum: usize,
    instances: Vec<OutcomeJson>,
}

pub async fn resize(rl: &Redlock, args: &ResizeArgs, json: bool) -> Result<i32, Failure> {
    let resized = rl.resize(&args.resource, args.limit).await.map_err(|e| match &e {
        redlock::Error::NoQuorum { outcomes, .. } => {
            explain::no_quorum(&format!("semaphore {:?} not resized", args.resource), outcomes, rl.quorum(), Op::Release)
        }
        _ => explain::other(&e),
    })?;
    if json {
        output::json(&ResizeJson {
            resource: &args.resource,
            limit: args.limit,
            held: resized.held,
            resized: resized.resized,
            servers: rl.servers().len(),
            quorum: rl.quorum(),
            instances: outcomes_json(&resized.instances, Op::Release),
        })?;
    } else {
        output::stdout(&pairs(&[
            ("limit", args.limit.to_string()),
            ("held", if resized.held { "yes" } else { "no: nothing resized (the next holder's limit is the one it asks)" }.to_string()),
            ("servers", resized.resized.to_string()),
        ]))?;
    }
    Ok(exit::OK)
}
