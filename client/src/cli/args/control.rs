//! The operator's requests to a lock's holders: `revoke` takes a hold
//! away, `ask` asks its holder to let go, `resize` changes a held
//! semaphore's limit.

use clap::{Args, ValueEnum};

use super::non_empty;

#[derive(Args, Debug)]
pub struct RevokeArgs {
    /// The lock's name (a Redis key on every server).
    #[arg(value_parser = non_empty("resource"), value_name = "RESOURCE")]
    pub resource: String,
    /// Only this holder's hold: a name a quorum client held it as (its
    /// rounds' owners, NAME:<16 hex digits>, are found on the servers), or
    /// a server's owner as `status` shows it [default: every hold].
    #[arg(value_parser = non_empty("owner"), value_name = "OWNER")]
    pub owner: Option<String>,
    /// The Redis (with the module) that keeps the data the lock protects:
    /// each --register there is raised to one above the revoked holds'
    /// tokens (LOCK.FENCED register fence), so the removed holder's fenced
    /// writes are refused and the next holder's are not.
    #[arg(long, value_name = "URL", requires = "registers")]
    pub store: Option<String>,
    /// A LOCK.FENCED register on --store to raise (repeat for several).
    #[arg(long = "register", value_name = "KEY", value_parser = non_empty("register"), requires = "store")]
    pub registers: Vec<String>,
}

#[derive(Args, Debug)]
pub struct AskArgs {
    /// The lock's name (a Redis key on every server).
    #[arg(value_parser = non_empty("resource"), value_name = "RESOURCE")]
    pub resource: String,
    /// Why, for the holder to log or weigh (at most the servers'
    /// redislock.max-owner-len bytes).
    #[arg(long, value_name = "TEXT")]
    pub message: Option<String>,
}

#[derive(Args, Debug)]
pub struct ResizeArgs {
    /// The semaphore's name (the one `acquire --limit` takes permits of).
    #[arg(value_parser = non_empty("resource"), value_name = "RESOURCE")]
    pub resource: String,
    /// The new limit, 1 to 1024.
    #[arg(value_name = "LIMIT", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub limit: u32,
}

/// What `redlock run` does with an ask for its hold (`--on-ask`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnAsk {
    /// Print one line on stderr; the command runs on.
    Print,
    /// Print the line, then SIGTERM the command's group (as a SIGTERM sent
    /// to redlock is passed on); the lock is released when it exits.
    Term,
    /// Do not listen for asks.
    Ignore,
}
