//! The arguments of the commands that read and follow what the servers
//! hold: `leader`, `watch`, `members`.

use std::time::Duration;

use clap::Args;

use super::{non_empty, parse_duration};

#[derive(Args, Debug)]
pub struct LeaderArgs {
    /// The election's name.
    #[arg(value_parser = non_empty("name"))]
    pub name: String,
    /// Print every change of leader until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// Serve this client's metrics (Prometheus text format) at
    /// http://HOST:PORT/metrics while it watches (needs --watch) (port 0: any free
    /// port, printed on stderr).
    #[arg(long, value_name = "HOST:PORT", value_parser = non_empty("metrics"), requires = "watch")]
    pub metrics: Option<String>,
    /// With --watch: how often a lost server is subscribed again.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "200ms", requires = "watch",
          allow_hyphen_values = true)]
    pub interval: Duration,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The lock's name (a Redis key on every server, named by their
    /// redislock.notify).
    #[arg(value_parser = non_empty("name"))]
    pub name: String,
    /// How often a lost server is subscribed again.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "200ms", allow_hyphen_values = true)]
    pub interval: Duration,
}

#[derive(Args, Debug)]
pub struct MembersArgs {
    /// The group's name (its key is redlock:group:NAME).
    #[arg(value_parser = non_empty("name"))]
    pub name: String,
    /// Then print each join, new value and leave until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: how often a lost server is subscribed again.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "200ms", requires = "watch",
          allow_hyphen_values = true)]
    pub interval: Duration,
}
