//! `redlock serve`'s own options (the servers, TLS, timeouts and the rest
//! are the global ones, as for every subcommand).

use std::path::PathBuf;

use clap::Args;

/// Where `redlock serve` listens by default: local only, and clear of the
/// 7001-7005 of `make redlock-up`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7379";

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Accept Redis clients on HOST:PORT (port 0: any free port, printed
    /// on stderr). Local only by default: anyone who reaches the endpoint
    /// can take and release locks, so give --requirepass before listening
    /// on other interfaces.
    #[arg(long, env = "REDLOCK_SERVE_LISTEN", value_name = "HOST:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,

    /// Also accept clients on this Unix socket (replaced if it exists).
    #[arg(long, env = "REDLOCK_SERVE_UNIXSOCKET", value_name = "PATH")]
    pub unixsocket: Option<PathBuf>,

    /// The Unix socket's permissions, in octal (e.g. 700) [default: as the umask leaves them].
    #[arg(long, value_parser = parse_octal, value_name = "OCTAL", requires = "unixsocket")]
    pub unixsocketperm: Option<u32>,

    /// Only the Unix socket: no TCP listener (needs --unixsocket).
    #[arg(long, requires = "unixsocket")]
    pub no_tcp: bool,

    /// The password clients give with AUTH (or HELLO 3 AUTH default PASS),
    /// the `default` user's, as redis-server's requirepass; until then every
    /// command but AUTH, HELLO and QUIT is refused with NOAUTH. Prefer the
    /// environment variable: an argument is visible to other local users.
    #[arg(long, env = "REDLOCK_SERVE_PASSWORD", value_name = "PASSWORD", hide_env_values = true)]
    pub requirepass: Option<String>,
}

/// `--unixsocketperm`: octal digits, at most 0o777.
fn parse_octal(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|&mode| mode <= 0o777)
        .ok_or_else(|| format!("{text:?} is not a file mode in octal (000 to 777, e.g. 700)"))
}
