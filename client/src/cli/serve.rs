//! `redlock serve`: the endpoint (`crate::serve`) started with the
//! command line's options, until SIGINT or SIGTERM.

use redlock::Redlock;
use tokio::signal::unix::{signal, SignalKind};

use super::args::ServeArgs;
use super::exit::{self, Failure};
use super::output;
use crate::serve::{serve as run_endpoint, Endpoint};

pub async fn serve(redlock: &Redlock, args: &ServeArgs) -> Result<i32, Failure> {
    let endpoint = Endpoint {
        listen: (!args.no_tcp).then(|| args.listen.clone()),
        unixsocket: args.unixsocket.clone(),
        unixsocketperm: args.unixsocketperm,
        requirepass: args.requirepass.clone().filter(|p| !p.is_empty()),
    };
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
