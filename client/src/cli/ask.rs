//! `redlock ask RESOURCE [--message TEXT]`: every holder of a lock asked
//! to let it go (`Redlock::ask`); nothing is released here, the holder
//! decides.

use redlock::Redlock;
use serde::Serialize;

use super::args::AskArgs;
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, outcomes_json, pairs, Op, OutcomeJson};

#[derive(Serialize)]
struct AskJson<'a> {
    resource: &'a str,
    /// The most holders one server asked (0: nobody holds it).
    asked: i64,
    /// Servers that answered.
    answered: usize,
    servers: usize,
    quorum: usize,
    instances: Vec<OutcomeJson>,
}

pub async fn ask(rl: &Redlock, args: &AskArgs, json: bool) -> Result<i32, Failure> {
    let asked = rl.ask(&args.resource, args.message.as_deref()).await.map_err(|e| match &e {
        redlock::Error::NoQuorum { outcomes, .. } => {
            explain::no_quorum(&format!("holders of {:?} not asked", args.resource), outcomes, rl.quorum(), Op::Release)
        }
        _ => explain::other(&e),
    })?;
    if json {
        output::json(&AskJson {
            resource: &args.resource,
            asked: asked.holders,
            answered: asked.answered,
            servers: rl.servers().len(),
            quorum: rl.quorum(),
            instances: outcomes_json(&asked.instances, Op::Release),
        })?;
    } else {
        output::stdout(&pairs(&[("asked", asked.holders.to_string()), ("servers", asked.answered.to_string())]))?;
    }
    Ok(exit::OK)
}
