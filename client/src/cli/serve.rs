//! `redlock serve`: the endpoint (`crate::serve`) started with the
//! command line's options, until SIGINT or SIGTERM.

use redlock::Redlock;
use tokio::signal::unix::{signal, SignalKind};

use super::args::{AuthClientsArg, ServeArgs};
use super::exit::{self, Failure};
use super::output;
use crate::serve::tls::{AuthClients, TlsFiles};
use crate::serve::users::Users;
use crate::serve::{serve as run_endpoint, Endpoint};

pub async fn serve(redlock: &Redlock, args: &ServeArgs) -> Result<i32, Failure> {
    let endpoint = endpoint(args)?;
    raise_open_files();
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| Failure::general(format!("SIGINT handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| Failure::general(format!("SIGTERM handler: {e}")))?;
    let served = run_endpoint(redlock.clone(), endpoint, output::warn);
    tokio::select! {
        served = served => served.map_err(|e| Failure::general(format!("redlock serve: {e}")))?,
        _ = sigint.recv() => {}
        _ = sigterm.recv() => {}
    }
    Ok(exit::OK)
}

/// Raises the soft limit of open files to the hard one, as redis-server
/// does for its `maxclients`: each client is a socket, and a waiting one
/// holds a connection to each server too, so a soft limit of 1024 (a
/// common default) would turn clients away at a few hundred. Left as it
/// is when the system refuses.
fn raise_open_files() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a valid pointer to a local.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max.min(1 << 20), rlim_max: limit.rlim_max };
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
        }
    }
}

/// What the options describe, or the usage error (exit 2) that says what
/// is missing or at odds.
fn endpoint(args: &ServeArgs) -> Result<Endpoint, Failure> {
    if args.no_tcp && args.unixsocket.is_none() && args.tls_port.is_none() {
        return Err(Failure::usage("--no-tcp leaves nothing to listen on: give --unixsocket PATH or --tls-port PORT too"));
    }
    if args.unixsocketperm.is_some() && args.unixsocket.is_none() {
        return Err(Failure::usage("--unixsocketperm is the permissions of --unixsocket: give --unixsocket PATH too"));
    }
    let tls = match (args.tls_port, &args.tls_cert_file, &args.tls_key_file) {
        (None, None, None) => None,
        (None, _, _) => {
            return Err(Failure::usage("--tls-cert-file and --tls-key-file are for the TLS listener: give --tls-port PORT too"))
        }
        (Some(port), Some(cert), Some(key)) => {
            // The TLS listener is on the host of --listen, as redis-server's
            // tls-port is on its bind addresses.
            let host = args.listen.rsplit_once(':').map_or(args.listen.as_str(), |(host, _)| host);
            let files = TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca_cert: args.tls_ca_cert_file.clone(),
                auth_clients: match args.tls_auth_clients {
                    AuthClientsArg::Yes => AuthClients::Yes,
                    AuthClientsArg::No => AuthClients::No,
                    AuthClientsArg::Optional => AuthClients::Optional,
                },
            };
            // Read and checked now: an unusable file is a usage error.
            Some((format!("{host}:{port}"), files.acceptor().map_err(Failure::usage)?))
        }
        (Some(_), _, _) => return Err(Failure::usage("--tls-port needs --tls-cert-file and --tls-key-file")),
    };
    let password = args.requirepass.as_deref().filter(|p| !p.is_empty());
    let users = match (&args.aclfile, password) {
        // redis-server ignores requirepass beside an ACL file: refused
        // here, so that neither is ignored without a word.
        (Some(_), Some(_)) => {
            return Err(Failure::usage(
                "--requirepass and --aclfile both set the users: give the default user's password in the users file \
                 (user default on >PASSWORD) and drop --requirepass (or REDLOCK_SERVE_PASSWORD)",
            ))
        }
        (Some(path), None) => Users::load(path).map_err(Failure::usage)?,
        (None, Some(password)) => Users::with_password(password),
        (None, None) => Users::open(),
    };
    Ok(Endpoint {
        listen: (!args.no_tcp).then(|| args.listen.clone()),
        tls,
        unixsocket: args.unixsocket.clone(),
        unixsocketperm: args.unixsocketperm,
        users,
    })
}
