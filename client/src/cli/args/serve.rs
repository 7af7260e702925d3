//! `redlock serve`'s own options (the servers, TLS, timeouts and the rest
//! are the global ones, as for every subcommand). Each has an environment
//! variable, and each may be given in a config file (`--config`, read by
//! `args::config`): a flag beats its variable, which beats the file.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Where `redlock serve` listens by default: local only, and clear of the
/// 7001-7005 of `make redlock-up`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7379";

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Read options from FILE, one `option value` per line with the long
    /// names of the flags without `--` (e.g. `listen 127.0.0.1:7379`,
    /// `servers redis://a:6379,redis://b:6379`; a flag alone, e.g. `no-tcp`,
    /// or with yes/no); `#` starts a comment line. A flag or an environment
    /// variable given too beats the file; an option the file does not know
    /// is an error naming its line.
    #[arg(long, env = "REDLOCK_SERVE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Accept Redis clients on HOST:PORT (port 0: any free port, printed
    /// on stderr). Local only by default: anyone who reaches the endpoint
    /// can take and release locks, so give --requirepass or --aclfile
    /// before listening on other interfaces.
    #[arg(long, env = "REDLOCK_SERVE_LISTEN", value_name = "HOST:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,

    /// Also accept clients over TLS on PORT, on the host of --listen (0: any
    /// free port, printed on stderr); needs --tls-cert-file and
    /// --tls-key-file. With --no-tcp, TLS alone.
    #[arg(long, env = "REDLOCK_SERVE_TLS_PORT", value_name = "PORT")]
    pub tls_port: Option<u16>,

    /// The endpoint's TLS certificate (chain), PEM.
    #[arg(long, env = "REDLOCK_SERVE_TLS_CERT_FILE", value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// The private key of --tls-cert-file, PEM (unencrypted).
    #[arg(long, env = "REDLOCK_SERVE_TLS_KEY_FILE", value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,

    /// The CA certificate(s) that signed the clients' certificates, PEM;
    /// needed unless --tls-auth-clients no.
    #[arg(long, env = "REDLOCK_SERVE_TLS_CA_CERT_FILE", value_name = "FILE")]
    pub tls_ca_cert_file: Option<PathBuf>,

    /// Whether a TLS client must show a certificate signed by
    /// --tls-ca-cert-file (yes), may (optional: one shown must be), or is
    /// not asked for one (no), as redis-server's tls-auth-clients.
    #[arg(long, env = "REDLOCK_SERVE_TLS_AUTH_CLIENTS", value_enum, value_name = "yes|no|optional", default_value = "yes")]
    pub tls_auth_clients: AuthClientsArg,

    /// Serve the quorum client's metrics (Prometheus text format) at
    /// http://HOST:PORT/metrics (port 0: any free port, printed on stderr).
    #[arg(long, env = "REDLOCK_SERVE_METRICS", value_name = "HOST:PORT")]
    pub metrics: Option<String>,

    /// Also accept clients on this Unix socket (replaced if it exists).
    #[arg(long, env = "REDLOCK_SERVE_UNIXSOCKET", value_name = "PATH")]
    pub unixsocket: Option<PathBuf>,

    /// The Unix socket's permissions, in octal (e.g. 700) [default: as the
    /// umask leaves them]; with --unixsocket.
    #[arg(long, env = "REDLOCK_SERVE_UNIXSOCKETPERM", value_parser = parse_octal, value_name = "OCTAL")]
    pub unixsocketperm: Option<u32>,

    /// No plain TCP listener: only the Unix socket (--unixsocket) and/or TLS
    /// (--tls-port).
    #[arg(long, env = "REDLOCK_SERVE_NO_TCP")]
    pub no_tcp: bool,

    /// The password clients give with AUTH (or HELLO 3 AUTH default PASS),
    /// the `default` user's, as redis-server's requirepass; until then every
    /// command but AUTH, HELLO and QUIT is refused with NOAUTH. Prefer the
    /// environment variable: an argument is visible to other local users.
    /// Not with --aclfile (the file names the default user's password).
    #[arg(long, env = "REDLOCK_SERVE_PASSWORD", value_name = "PASSWORD", hide_env_values = true)]
    pub requirepass: Option<String>,

    /// The users who may log in, one `user NAME RULE...` line each in
    /// redis-server's ACL file syntax: on, off, nopass, >password,
    /// <password, resetpass, reset; every logged-in user may run every
    /// served command (~*, &*, +@all, allkeys, allchannels, allcommands are
    /// taken, any narrower rule is an error). Only the users named exist,
    /// `default` too: a client logs in (AUTH user pass, HELLO 3 AUTH user
    /// pass) unless the file has `user default on nopass`.
    #[arg(long, env = "REDLOCK_SERVE_ACLFILE", value_name = "FILE")]
    pub aclfile: Option<PathBuf>,

    /// Threads that serve clients and speak to the servers. One, like
    /// redis-server's main thread, is the fastest where the endpoint shares
    /// a few cores with other processes (no hand-offs between threads;
    /// docs/benchmarks.md); more spread a busy endpoint over more cores.
    #[arg(long, env = "REDLOCK_SERVE_THREADS", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: u16,
}

/// `--tls-auth-clients`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthClientsArg {
    Yes,
    No,
    Optional,
}

/// `--unixsocketperm`: octal digits, at most 0o777.
fn parse_octal(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|&mode| mode <= 0o777)
        .ok_or_else(|| format!("{text:?} is not a file mode in octal (000 to 777, e.g. 700)"))
}
