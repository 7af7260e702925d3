//! Command-line arguments (clap derive) and their conversion to `Settings`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use redlock::transport::takes_more_hosts;
use redlock::{Mode, Pem, Settings, TlsSettings};

pub mod config;
mod control;
mod help;
mod serve;
pub use control::{AskArgs, OnAsk, ResizeArgs, RevokeArgs};
mod watching;
use help::{ELECT_HELP, EXIT_STATUS_HELP, LEADER_HELP, MEMBERS_HELP, RUN_HELP, SERVE_HELP, WATCH_HELP};
pub use serve::{AuthClientsArg, ServeArgs};
pub use watching::{LeaderArgs, MembersArgs, WatchArgs};

/// The five local instances of `make redlock-up`.
pub const DEFAULT_SERVERS: &str = "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003,\
                                   redis://127.0.0.1:7004,redis://127.0.0.1:7005";

/// The longest ttl accepted: the largest `redislock.max-ttl` (365 days).
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// Redlock across independent Redis servers running the redislock module.
#[derive(Parser, Debug)]
#[command(name = "redlock", version, after_help = EXIT_STATUS_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every subcommand (accepted before or after it).
#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Servers, comma-separated (redis://host:port; host:port is accepted too;
    /// rediss://host:port over TLS). A Redis Cluster counts as one server:
    /// redis+cluster://host:port,host:port, over TLS rediss+cluster://... (its
    /// seed nodes run up to the next entry with a scheme); so does a
    /// Sentinel-managed master: redis+sentinel://host:port,host:port/MASTER_NAME;
    /// a local server may be a Unix socket: unix:///path/to/redis.sock
    /// [default: redis://127.0.0.1:7001 ... 7005, the five of `make redlock-up`].
    #[arg(long, env = "REDLOCK_SERVERS", value_delimiter = ',', default_value = DEFAULT_SERVERS,
          value_name = "URL,...", global = true, hide_default_value = true)]
    pub servers: Vec<String>,

    /// module: LOCK.* commands with fencing tokens; script: SET NX PX and Lua, no tokens.
    #[arg(long, value_enum, default_value_t = ModeArg::Module, global = true)]
    pub mode: ModeArg,

    /// Per-request timeout [default: 50ms].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", global = true, allow_hyphen_values = true)]
    pub request_timeout: Option<Duration>,

    /// Timeout to (re)connect to a server [default: 200ms].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", global = true, allow_hyphen_values = true)]
    pub connect_timeout: Option<Duration>,

    /// Acquisition attempts after the first one, when there is no deadline [default: 3].
    #[arg(long, value_name = "N", global = true, allow_negative_numbers = true)]
    pub retry_count: Option<u32>,

    /// Random delay between acquisition attempts, MIN..MAX or one fixed value [default: 100ms..200ms].
    #[arg(long, value_parser = parse_delay_range, value_name = "MIN..MAX", global = true, allow_hyphen_values = true)]
    pub retry_delay: Option<DelayRange>,

    /// Servers that must agree [default: a majority, N/2+1].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), value_name = "N", global = true,
          allow_negative_numbers = true)]
    pub quorum: Option<u32>,

    /// Bind the lock to this program's connections (LOCK.ACQUIRE ... SESSION):
    /// when it exits or dies (even killed -9), each server releases the lock
    /// after the lock-delay (--lock-delay; 0 for at once), not when the ttl
    /// runs out.
    #[arg(long, global = true)]
    pub session: bool,

    /// With --session: how long a server keeps the lock after the connection
    /// closed, for a holder cut off by the network that may still run
    /// [default: the extension interval (ttl/3) + the request timeout + the
    /// clock drift + 200 ms, at most the ttl; run and elect add their grace
    /// between SIGTERM and SIGKILL:
    /// the holder is told of the loss by its own clock, and its command
    /// stopped, before anyone else can be granted the lock]. One too short for
    /// that (below ttl/3 + the request timeout + 100 ms + drift), 0 included,
    /// is taken as given: a holder whose connection is reset may then overlap
    /// the next holder until its next extension, at most ttl/3 + the request
    /// timeout later (measured with 0 at a 1.5 s ttl: p50 150-340 ms, up to
    /// 500 ms); the fencing token is what refuses its late writes.
    #[arg(long, value_parser = parse_any_duration, value_name = "DURATION", global = true, requires = "session",
          allow_hyphen_values = true)]
    pub lock_delay: Option<Duration>,

    /// TLS (rediss:// servers): the CA certificate(s) that signed the servers'
    /// certificates, PEM [default: the system's roots].
    #[arg(long, env = "REDLOCK_CACERT", value_name = "FILE", global = true)]
    pub cacert: Option<PathBuf>,

    /// TLS: this client's certificate, PEM, for servers that check their
    /// clients (tls-auth-clients yes); with --key.
    #[arg(long, env = "REDLOCK_CERT", value_name = "FILE", global = true)]
    pub cert: Option<PathBuf>,

    /// TLS: the private key of --cert, PEM.
    #[arg(long, env = "REDLOCK_KEY", value_name = "FILE", global = true)]
    pub key: Option<PathBuf>,

    /// TLS: check no certificate at all, so anyone on the path can pose as a
    /// server. For tests only; every connection error then says so.
    #[arg(long, global = true)]
    pub insecure: bool,

    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    Module,
    Script,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Module => Mode::Module,
            ModeArg::Script => Mode::Script,
        }
    }
}

/// `--retry-delay MIN..MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayRange(pub Duration, pub Duration);

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Take a lock, or several resources at once (all or nothing), and print resource, owner, token and
    /// validity (it stays held until its ttl ends or a release).
    Acquire(AcquireArgs),
    /// Release a lock (or a set taken at once) held by OWNER (as printed by acquire).
    #[command(override_usage = "redlock release [OPTIONS] <RESOURCE>... --owner <OWNER>\n       \
                                redlock release [OPTIONS] <RESOURCE> <OWNER>")]
    Release(ReleaseArgs),
    /// Extend a lock (or a set taken at once) held by OWNER to --ttl from now.
    #[command(override_usage = "redlock extend [OPTIONS] --ttl <DURATION> <RESOURCE>... --owner <OWNER>\n       \
                                redlock extend [OPTIONS] --ttl <DURATION> <RESOURCE> <OWNER>")]
    Extend(ExtendArgs),
    /// Take a stuck lock away (LOCK.REVOKE on every server): every hold, or
    /// OWNER's; the servers issue a token above it and grant the next in
    /// line. Raise the data store's fences with --store and --register.
    Revoke(RevokeArgs),
    /// Ask every holder of a lock to let it go (LOCK.ASK on every server),
    /// with --message saying why; prints how many holders were asked. The
    /// holder decides: nothing is released here.
    Ask(AskArgs),
    /// Give a held semaphore a new limit (LOCK.RESIZE on every server):
    /// holders keep their permits; a smaller limit lets nobody in while a
    /// holder sits on a permit at or above it.
    Resize(ResizeArgs),
    /// Show each server's view of a resource, or without one each server's
    /// summary (reachable, quarantine, locks held, waiters, highest token).
    Status(StatusArgs),
    /// The most contended locks across the servers (waiters, longest wait,
    /// holders, longest hold), refreshed every --interval until interrupted.
    Top(TopArgs),
    /// Run a command while holding the lock, like flock(1) across machines.
    #[command(after_help = RUN_HELP, override_usage = "redlock run [OPTIONS] <RESOURCE> [--] <COMMAND>...\n       \
                                                       redlock run [OPTIONS] <RESOURCE>... -- <COMMAND>...")]
    Run(RunArgs),
    /// Campaign to lead an election, and run a command while leading.
    #[command(after_help = ELECT_HELP)]
    Elect(ElectArgs),
    /// Print an election's leader (value and term); --watch prints every change.
    #[command(after_help = LEADER_HELP)]
    Leader(LeaderArgs),
    /// Print a lock's changes (grants, ends, ...) as a quorum of servers
    /// announces them, one per line, until interrupted.
    #[command(after_help = WATCH_HELP)]
    Watch(WatchArgs),
    /// Print a group's members (token, owner, value) as a quorum of servers
    /// lists them; --watch then prints each join and leave.
    #[command(after_help = MEMBERS_HELP)]
    Members(MembersArgs),
    /// Measure throughput and latency against the servers.
    Bench(BenchArgs),
    /// Serve the module's LOCK.* commands over the Redis protocol, each run
    /// through the quorum: any language's Redis client gets Redlock.
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
}

#[derive(Args, Debug)]
pub struct AcquireArgs {
    /// The lock's name (a Redis key on every server); several are taken
    /// all or nothing, with one owner and one token (none named twice).
    #[arg(value_parser = non_empty("resource"), required = true, num_args = 1.., value_name = "RESOURCE")]
    pub resources: Vec<String>,
    /// Lease length.
    #[arg(long, value_parser = parse_ttl, value_name = "DURATION", allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Keep trying up to this long [default: no waiting, the retries of --retry-count].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    pub wait: Option<Duration>,
    /// Take one of N permits of a semaphore named RESOURCE; the permit's own
    /// name (RESOURCE:permit:I) is printed; release and extend take it, or
    /// RESOURCE with --limit N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub limit: Option<u32>,
    /// With --limit N: take K of the N permits at once, in one hold (one
    /// owner, one token, one lease) [default: 1]; the permits' names are
    /// printed joined with ", ".
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub permits: Option<u32>,
    /// Take a shared hold of a read-write lock: beside other shared holders,
    /// never beside an exclusive one (release and extend need no flag).
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
}

#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The lock's name (a Redis key on every server); several for a set
    /// taken at once (`acquire a b`). Without --owner the last one is the
    /// owner (`RESOURCE OWNER`).
    #[arg(value_parser = non_empty("resource"), required = true, num_args = 1.., value_name = "RESOURCE")]
    pub names: Vec<String>,
    /// The owner printed by acquire.
    #[arg(long, value_parser = non_empty("owner"))]
    pub owner: Option<String>,
    /// RESOURCE is a semaphore of N permits (`acquire --limit N`): act on
    /// whichever permit OWNER holds (every one, when it took several at
    /// once).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub limit: Option<u32>,
    /// OWNER's hold is shared (`acquire --shared`): only that holder is
    /// affected, the other readers keep theirs (as without the flag).
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
}

#[derive(Args, Debug)]
pub struct ExtendArgs {
    /// The lock's name (a Redis key on every server); several for a set
    /// taken at once (`acquire a b`). Without --owner the last one is the
    /// owner (`RESOURCE OWNER`).
    #[arg(value_parser = non_empty("resource"), required = true, num_args = 1.., value_name = "RESOURCE")]
    pub names: Vec<String>,
    /// The owner printed by acquire.
    #[arg(long, value_parser = non_empty("owner"))]
    pub owner: Option<String>,
    /// New lease length, from now.
    #[arg(long, value_parser = parse_ttl, value_name = "DURATION", allow_hyphen_values = true)]
    pub ttl: Duration,
    /// RESOURCE is a semaphore of N permits (`acquire --limit N`): act on
    /// whichever permit OWNER holds (every one, when it took several at
    /// once).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub limit: Option<u32>,
    /// OWNER's hold is shared (`acquire --shared`): only that holder is
    /// affected, the other readers keep theirs (as without the flag).
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
}

/// The resources and the owner of `release` and `extend`: with `--owner`
/// every name is a resource; without it the last name is the owner
/// (`release RESOURCE OWNER`, the form before `--owner`).
pub fn resources_and_owner<'a>(names: &'a [String], owner: Option<&'a str>) -> Result<(&'a [String], &'a str), String> {
    match (owner, names.split_last()) {
        (Some(owner), _) => Ok((names, owner)),
        (None, Some((owner, resources))) if !resources.is_empty() => Ok((resources, owner.as_str())),
        _ => Err("no OWNER given: name it with --owner OWNER (as printed by acquire)".into()),
    }
}

impl ReleaseArgs {
    /// See `resources_and_owner`.
    pub fn target(&self) -> Result<(&[String], &str), String> {
        resources_and_owner(&self.names, self.owner.as_deref())
    }
}

impl ExtendArgs {
    /// See `resources_and_owner`.
    pub fn target(&self) -> Result<(&[String], &str), String> {
        resources_and_owner(&self.names, self.owner.as_deref())
    }
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The lock's name (a Redis key on every server); without it, each
    /// server's summary: reachable, quarantine, locks held, waiters, highest token.
    #[arg(value_parser = non_empty("resource"))]
    pub resource: Option<String>,
    /// RESOURCE is a semaphore of N permits (`acquire --limit N`): one line
    /// per permit, who holds it on the quorum.
    #[arg(long, value_name = "N", requires = "resource", value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// How many locks to list.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000), allow_negative_numbers = true)]
    pub count: u32,
    /// Time between refreshes.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "1s", allow_hyphen_values = true)]
    pub interval: Duration,
    /// Stop after N refreshes [default: until interrupted].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub iterations: Option<u32>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLost {
    /// SIGTERM the command's group, SIGKILL after --kill-after (at the
    /// latest when the hold's validity ends), exit 76.
    Kill,
    /// Print a warning and let the command finish.
    Warn,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The lock's name (a Redis key on every server); more names before a
    /// `--` are taken with it, all or nothing (`run a b -- COMMAND`).
    #[arg(value_parser = non_empty("resource"), value_name = "RESOURCE")]
    pub resource: String,
    /// The names after RESOURCE, before the `--` (`Cli::resolve`).
    #[arg(skip)]
    pub more: Vec<String>,
    /// Lease length; the lock is extended every ttl/3 while the command runs.
    #[arg(long, value_parser = parse_ttl, value_name = "DURATION", default_value = "10s", allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Wait up to this long for the lock [default: no waiting, the retries of --retry-count].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    pub wait: Option<Duration>,
    /// What to do when the lock is lost while the command runs.
    #[arg(long, value_enum, default_value_t = OnLost::Kill)]
    pub on_lost: OnLost,
    /// What to do when a holder is asked to let go (`redlock ask`) while the command runs.
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = OnAsk::Print)]
    pub on_ask: OnAsk,
    /// Serve this client's metrics (Prometheus text format) at
    /// http://HOST:PORT/metrics while the command runs (port 0: any free
    /// port, printed on stderr).
    #[arg(long, value_name = "HOST:PORT", value_parser = non_empty("metrics"))]
    pub metrics: Option<String>,
    /// Run holding one of N permits of a semaphore named RESOURCE
    /// (REDLOCK_PERMIT names the permit).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub limit: Option<u32>,
    /// With --limit N: run holding K of the N permits at once, in one hold
    /// [default: 1] (REDLOCK_PERMIT names them, joined with ", ").
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub permits: Option<u32>,
    /// Run holding a shared hold of a read-write lock (REDLOCK_TOKEN is this
    /// holder's token).
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
    /// How long the command gets between SIGTERM and SIGKILL once the hold
    /// is lost; never past the hold's own end (its validity), so that it
    /// is dead before another client can be granted the lock. With
    /// --session (always for elect) the default lock-delay grows by it,
    /// so that a connection cut off still leaves the command this grace.
    #[arg(long, value_parser = parse_any_duration, value_name = "DURATION", default_value = "5s", allow_hyphen_values = true)]
    pub kill_after: Duration,
    /// Keep the command in redlock's own process group (for a command that
    /// reads the terminal): signals then reach the command only, not the
    /// processes it starts, which may then outlive the hold. By default the
    /// command has a process group of its own, signalled whole and killed
    /// with redlock.
    #[arg(long)]
    pub foreground: bool,
    /// The command and its arguments (after `--`, or after RESOURCE and the options).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND",
          value_parser = clap::value_parser!(OsString))]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// Every resource named: RESOURCE, then the others before the `--`.
    pub fn resources(&self) -> Vec<String> {
        std::iter::once(self.resource.clone()).chain(self.more.iter().cloned()).collect()
    }
}

impl Cli {
    /// What clap alone cannot tell from `raw`, the command line it
    /// parsed: the resources of `run a b -- COMMAND`. A command may follow
    /// RESOURCE without `--`, so clap takes `b` for the command's first
    /// word and keeps the `--` after it among the command's words. When
    /// the command holds a `--`, the line is read again with `run`'s
    /// command after a `--` only and as many resources as come before it
    /// (options among them); if that reading fails (`run a ls -l -- x`: a
    /// command given without `--`, with one of its own), the first stands.
    pub fn resolve<I: IntoIterator<Item = OsString>>(self, raw: I) -> Cli {
        let Command::Run(run) = &self.command else { return self };
        if !run.command.iter().any(|w| w == "--") {
            return self;
        }
        let strict = Cli::command().mut_subcommand("run", |run| {
            run.mut_arg("resource", |a| a.num_args(1..).action(clap::ArgAction::Append))
                .mut_arg("command", |a| a.trailing_var_arg(false).last(true))
        });
        let Ok(matches) = strict.try_get_matches_from(raw) else { return self };
        let Ok(mut cli) = Cli::from_arg_matches(&matches) else { return self };
        let names: Option<Vec<String>> =
            matches.subcommand_matches("run").and_then(|m| m.get_many::<String>("resource")).map(|names| names.cloned().collect());
        match (&mut cli.command, names) {
            (Command::Run(run), Some(names)) => {
                run.more = names.into_iter().skip(1).collect();
                cli
            }
            _ => self,
        }
    }
}

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// The election's name (its lock is redlock:election:NAME on every server).
    #[arg(value_parser = non_empty("name"))]
    pub name: String,
    /// What this candidate advertises while it leads (an address, a host
    /// name): every `redlock leader NAME` reads it.
    #[arg(long, value_name = "TEXT")]
    pub value: String,
    /// The leader's lease; it is extended every ttl/3, and a leader that dies
    /// is followed after its lock-delay (ttl/3 + the request timeout + drift
    /// + 200 ms + --kill-after, at most the ttl).
    #[arg(long, value_parser = parse_ttl, value_name = "DURATION", default_value = "10s", allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Campaign again after the command ended or was stopped.
    #[arg(long)]
    pub again: bool,
    /// Serve this client's metrics (Prometheus text format) at
    /// http://HOST:PORT/metrics while the command runs (port 0: any free
    /// port, printed on stderr).
    #[arg(long, value_name = "HOST:PORT", value_parser = non_empty("metrics"))]
    pub metrics: Option<String>,
    /// How long the command gets between SIGTERM and SIGKILL once the hold
    /// is lost; never past the hold's own end (its validity), so that it
    /// is dead before another client can be granted the lock. With
    /// --session (always for elect) the default lock-delay grows by it,
    /// so that a connection cut off still leaves the command this grace.
    #[arg(long, value_parser = parse_any_duration, value_name = "DURATION", default_value = "5s", allow_hyphen_values = true)]
    pub kill_after: Duration,
    /// Keep the command in redlock's own process group (for a command that
    /// reads the terminal): signals then reach the command only, not the
    /// processes it starts, which may then outlive the hold. By default the
    /// command has a process group of its own, signalled whole and killed
    /// with redlock.
    #[arg(long)]
    pub foreground: bool,
    /// The command and its arguments (after `--`, or after NAME and the options).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND",
          value_parser = clap::value_parser!(OsString))]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workers of the parallel uncontended and floor phases (each phase also runs with 1).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096), allow_negative_numbers = true)]
    pub workers: u32,
    /// Length of each phase (at most 1h).
    #[arg(long, value_parser = parse_phase, value_name = "DURATION", default_value = "10s", allow_hyphen_values = true)]
    pub duration: Duration,
    /// Lease of every lock taken.
    #[arg(long, value_parser = parse_ttl, value_name = "DURATION", default_value = "10s", allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Workers of the contended phase, each with its own client and connections.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub contenders: u32,
    /// How long a contender holds the lock (exact: a thread sleep and a
    /// short spin; the mean measured is reported as hold_mean_ms).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "1ms", allow_hyphen_values = true)]
    pub hold: Duration,
    /// Phases to run, comma-separated, in their usual order [default: all].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "PHASE,...", default_value = "all", hide_default_value = true)]
    pub phases: Vec<BenchPhase>,
}

/// `redlock bench --phases`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchPhase {
    /// Every phase.
    All,
    /// Uncontended quorum cycles, module and script mode, 1 and --workers workers.
    Uncontended,
    /// The single-server floor, 1 and --workers workers.
    Floor,
    /// The three contended phases: exclusive, mixed, permits.
    Contended,
    /// Contended, every contender exclusive.
    Exclusive,
    /// Contended, half shared and half exclusive.
    Mixed,
    /// Contended, one of 2 permits each.
    Permits,
}

impl BenchArgs {
    /// Whether `--phases` selects `phase` (one of the single phases).
    pub fn runs(&self, phase: BenchPhase) -> bool {
        self.phases.iter().any(|&p| {
            p == phase
                || p == BenchPhase::All
                || (p == BenchPhase::Contended && matches!(phase, BenchPhase::Exclusive | BenchPhase::Mixed | BenchPhase::Permits))
        })
    }
}

/// A positive duration: `500ms`, `10s`, `2m`, `1h 30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_any_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} is zero; give a positive duration such as 500ms, 10s or 2m"));
    }
    Ok(d)
}

/// A lease: at least 1 ms (the servers count in milliseconds), at most 365 days.
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("{s:?} is below 1ms, the smallest lease"));
    }
    if d > MAX_TTL {
        return Err(format!("{s:?} is above 365 days, the largest lease"));
    }
    Ok(d)
}

/// A bench phase: positive, at most an hour.
pub fn parse_phase(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > Duration::from_secs(3600) {
        return Err(format!("{s:?} is above 1h, the longest bench phase"));
    }
    Ok(d)
}

/// `MIN..MAX` or one value (a fixed delay); zero is allowed here.
pub fn parse_delay_range(s: &str) -> Result<DelayRange, String> {
    let (lo, hi) = match s.split_once("..") {
        Some((lo, hi)) => (parse_any_duration(lo)?, parse_any_duration(hi)?),
        None => {
            let d = parse_any_duration(s)?;
            (d, d)
        }
    };
    if lo > hi {
        return Err(format!("{s:?}: MIN is above MAX"));
    }
    if hi > Duration::from_secs(3600) {
        return Err(format!("{s:?}: a retry delay above 1h makes no sense"));
    }
    Ok(DelayRange(lo, hi))
}

/// Any duration, zero too: the library's parser, the bindings' too.
fn parse_any_duration(s: &str) -> Result<Duration, String> {
    redlock::settings::parse_duration(s)
}

fn non_empty(what: &'static str) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync + 'static {
    move |s: &str| if s.is_empty() { Err(format!("the {what} must not be empty")) } else { Ok(s.to_string()) }
}

/// What separates the servers of one entry (no commas there: the list
/// was split on them).
fn separators(entry: &str) -> &'static str {
    match (entry.contains(char::is_whitespace), entry.contains(';')) {
        (true, true) => "spaces and semicolons",
        (false, true) => "semicolons",
        _ => "spaces",
    }
}

impl Global {
    /// The server URLs, trimmed (`host:port` stays: the library reads it as
    /// `redis://host:port`, `redlock::transport::with_scheme`).
    pub fn urls(&self) -> Result<Vec<String>, String> {
        let mut urls = Vec::with_capacity(self.servers.len());
        for raw in &self.servers {
            let s = raw.trim();
            if s.is_empty() {
                let list = self.servers.join(",");
                // Name where the list came from when it is the variable's.
                let from_env = std::env::var("REDLOCK_SERVERS").is_ok_and(|v| v == list);
                return Err(match (from_env, list.trim().is_empty()) {
                    (true, true) => "REDLOCK_SERVERS is set but empty: unset it for the default servers, \
                                     or set it to redis://host:port,redis://host:port,..."
                        .to_string(),
                    (true, false) => format!("empty entry in REDLOCK_SERVERS={list:?}"),
                    (false, true) => "--servers is empty: give redis://host:port,redis://host:port,...".to_string(),
                    (false, false) => format!("empty entry in the server list {list:?} (--servers)"),
                });
            }
            if let Some(servers) = redlock::servers_in_one(s) {
                // A list separated as a shell or a config file might: the
                // URL parser would report a bad port or host instead.
                let list = self.servers.join(",");
                let from_env = std::env::var("REDLOCK_SERVERS").is_ok_and(|v| v == list);
                let (given, by) = (if from_env { "REDLOCK_SERVERS" } else { "--servers" }, separators(s));
                return Err(format!(
                    "{given}: {s:?} names {} servers separated by {by}: separate servers with commas, e.g. {}",
                    servers.len(),
                    servers.join(",")
                ));
            }
            if !s.contains("://") {
                // A scheme-less entry after a cluster URL is one more seed;
                // after a Sentinel URL whose master name has not come yet
                // (`/NAME`), one more sentinel.
                if let Some(group) = urls.last_mut().filter(|u: &&mut String| takes_more_hosts(u)) {
                    group.push(',');
                    group.push_str(s);
                    continue;
                }
            }
            // As given: `host:port` is the library's to read (`with_scheme`),
            // as it is for the bindings, and its errors name it as written.
            urls.push(s.to_string());
        }
        if urls.is_empty() {
            return Err("no servers given".into());
        }
        Ok(urls)
    }

    /// The library settings these options describe, in `mode`.
    pub fn settings(&self, mode: Mode) -> Settings {
        let defaults = Settings::default();
        Settings {
            request_timeout: self.request_timeout.unwrap_or(defaults.request_timeout),
            connect_timeout: self.connect_timeout.unwrap_or(defaults.connect_timeout),
            retry_count: self.retry_count.unwrap_or(defaults.retry_count),
            retry_delay: self.retry_delay.map(|DelayRange(lo, hi)| (lo, hi)).unwrap_or(defaults.retry_delay),
            quorum: self.quorum.and_then(|q| usize::try_from(q).ok()),
            mode,
            release_on_disconnect: self.session,
            lock_delay: self.lock_delay.or(defaults.lock_delay),
            // Read (and checked) by Redlock::new, which names a bad file.
            tls: TlsSettings {
                ca_cert: self.cacert.clone().map(Pem::File),
                client_cert: self.cert.clone().map(Pem::File),
                client_key: self.key.clone().map(Pem::File),
                insecure: self.insecure,
            },
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests;
