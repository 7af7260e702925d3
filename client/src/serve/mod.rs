//! `redlock serve`: the module's own commands over the Redis protocol,
//! each run through the quorum (`Redlock`), so that any language's Redis
//! client gets Redlock by sending `LOCK.ACQUIRE` to one endpoint.
//!
//! - `resp`: requests parsed within bounds, replies in RESP2 or RESP3
//! - `session`: one connection's state and its commands
//! - `args`: the module's arguments and error texts
//! - `lock`: the LOCK.* commands, through the quorum
//! - `sets`: sets of keys taken whole (LOCK.MACQUIRE, MRELEASE, MEXTEND)
//! - `view`: what the quorum shows (LOCK.INFO, LOCK.WAITERS)
//! - `binding`: holds bound to a connection (`SESSION`), kept extended
//!   while it lives
//! - `own`: the holds this endpoint granted, where a client's release or
//!   extension goes without a look-up first
//! - `observe`: `LOCK.PROCLAIM`, and `SUBSCRIBE` to a lock's changes as
//!   a quorum announced them (the crate's observer)
//! - `state`: what the connections share
//! - `users`: who may log in (`--requirepass`, `--aclfile`)
//! - `tls`: the endpoint's own TLS listener (`--tls-port`)
//!
//! Each connection is a task of its own: a `WAIT` blocks only its own
//! client, and a client that goes away while it waits gives its
//! acquisition up at once (the acquisition's future is dropped, which
//! takes it out of the line).

mod args;
mod binding;
mod lock;
mod observe;
mod own;
pub mod resp;
mod session;
mod sets;
mod state;
pub mod tls;
pub mod users;
mod view;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redlock::Redlock;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio_rustls::TlsAcceptor;

use resp::{Reply, MAX_PENDING};
use session::Session;
use state::{Next, Shared};
use users::Users;

/// How long a client of the TLS port has to finish its handshake: one
/// that sends nothing (or plain text) holds no task longer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where `redlock serve` listens and whom it lets in.
#[derive(Clone)]
pub struct Endpoint {
    /// host:port of plain TCP; `None` without it.
    pub listen: Option<String>,
    /// host:port of TLS, and its certificates (`tls::TlsFiles::acceptor`);
    /// `None` without it.
    pub tls: Option<(String, TlsAcceptor)>,
    pub unixsocket: Option<PathBuf>,
    /// The Unix socket's permissions (e.g. 0o700).
    pub unixsocketperm: Option<u32>,
    /// Who may log in.
    pub users: Users,
}

/// Binds the endpoint's sockets, then reports where on `bound` (one line
/// per socket) and serves until the process ends. Fails when a socket
/// cannot be bound.
pub async fn serve(redlock: Redlock, endpoint: Endpoint, bound: impl Fn(&str)) -> io::Result<()> {
    let tcp = match &endpoint.listen {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| named(e, addr))?),
        None => None,
    };
    let tls = match &endpoint.tls {
        Some((addr, acceptor)) => Some((TcpListener::bind(addr).await.map_err(|e| named(e, addr))?, acceptor.clone())),
        None => None,
    };
    let unix = match &endpoint.unixsocket {
        Some(path) => {
            // A socket file left by an earlier run is replaced, as redis-server does.
            let _ = std::fs::remove_file(path);
            let listener = UnixListener::bind(path).map_err(|e| named(e, &path.display().to_string()))?;
            if let Some(mode) = endpoint.unixsocketperm {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| named(e, &path.display().to_string()))?;
            }
            Some(listener)
        }
        None => None,
    };
    if let Some(listener) = &tcp {
        bound(&format!("listening on {}", listener.local_addr()?));
    }
    if let Some((listener, _)) = &tls {
        bound(&format!("listening for TLS on {}", listener.local_addr()?));
    }
    if let Some(path) = &endpoint.unixsocket {
        bound(&format!("listening on unix:{}", path.display()));
    }
    // Holds are taken over by their client's name (`lock::lookup`): never
    // one whose release this endpoint may still be sending.
    redlock.remember_given_up();
    let shared = Arc::new(Shared {
        redlock,
        users: endpoint.users,
        next_id: AtomicU64::new(1),
        connected: AtomicUsize::new(0),
        waiting: AtomicUsize::new(0),
        granted: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        bindings: state::Bindings::default(),
        own: own::Own::default(),
        subscribers: AtomicUsize::new(0),
        observers: AtomicUsize::new(0),
    });
    let tcp_loop = async {
        let Some(listener) = &tcp else { return std::future::pending::<()>().await };
        loop {
            // A failed accept (too many open files, a reset) costs that
            // client alone; the listener goes on, after a pause.
            match listener.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, Arc::clone(&shared)));
                }
                Err(_) => accept_failed().await,
            }
        }
    };
    let tls_loop = async {
        let Some((listener, acceptor)) = &tls else { return std::future::pending::<()>().await };
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                accept_failed().await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (acceptor, shared) = (acceptor.clone(), Arc::clone(&shared));
            // The handshake in the client's own task: a slow or
            // broken one holds up no other client. A client that
            // fails it (no certificate when one is required, plain
            // text) is closed with nothing served.
            tokio::spawn(async move {
                if let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    connection(stream, shared).await;
                }
            });
        }
    };
    let unix_loop = async {
        let Some(listener) = &unix else { return std::future::pending::<()>().await };
        loop {
            match listener.accept().await {
                Ok((stream, _)) => drop(tokio::spawn(connection(stream, Arc::clone(&shared)))),
                Err(_) => accept_failed().await,
            }
        }
    };
    tokio::join!(tcp_loop, tls_loop, unix_loop);
    Ok(())
}

/// The pause after a failed accept. Out of file descriptors, the
/// listener stays ready and every accept fails at once: without a pause
/// the loop would spin on a CPU until a client leaves.
async fn accept_failed() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

fn named(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Serves one client until it closes, sends QUIT, or breaks the protocol
/// (answered with the error, then closed).
async fn connection<S: AsyncRead + AsyncWrite + Unpin>(stream: S, shared: Arc<Shared>) {
    shared.connected.fetch_add(1, Ordering::Relaxed);
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut session = Session::new(id, &shared);
    let mut pending: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    'serve: loop {
        // Every complete request buffered, answered in order.
        let mut used = 0;
        loop {
            let rest = pending.get(used..).unwrap_or_default();
            match resp::parse(rest) {
                Ok(Some((request, took))) => {
                    used += took;
                    if request.is_empty() {
                        continue;
                    }
                    let (reply, next) = session.run(&request, &mut reader, &mut pending).await;
                    if let Some(reply) = reply {
                        reply.write(session.resp3, &mut out);
                    }
                    match next {
                        Next::Serve => {}
                        Next::Close => break 'serve,
                        // The client went away while its request ran.
                        Next::Gone => {
                            out.clear();
                            break 'serve;
                        }
                    }
                }
                Ok(None) => break,
                Err(text) => {
                    Reply::error(format!("ERR Protocol error: {text}")).write(session.resp3, &mut out);
                    break 'serve;
                }
            }
        }
        pending.drain(..used.min(pending.len()));
        if !out.is_empty() {
            if writer.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
        if pending.len() > MAX_PENDING {
            Reply::error("ERR Protocol error: request too large").write(session.resp3, &mut out);
            break;
        }
        tokio::select! {
            read = reader.read(&mut chunk) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => pending.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            },
            // A hold bound to this connection may be lost: closed at once,
            // as a module server ends a SESSION hold's connection.
            () = session.lost.cancelled() => break,
            // A change a quorum announced on a subscribed channel.
            message = session.subscriptions.next() => message.write(session.resp3, &mut out),
        }
    }
    if !out.is_empty() && !session.lost.is_cancelled() {
        let _ = writer.write_all(&out).await;
    }
    let _ = writer.shutdown().await;
    binding::closed(&shared, id);
    shared.connected.fetch_sub(1, Ordering::Relaxed);
}
