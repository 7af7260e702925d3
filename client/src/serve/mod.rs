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
//! - `state`: what the connections share
//!
//! Each connection is a task of its own: a `WAIT` blocks only its own
//! client, and a client that goes away while it waits gives its
//! acquisition up at once (the acquisition's future is dropped, which
//! takes it out of the line).

mod args;
mod binding;
mod lock;
pub mod resp;
mod session;
mod sets;
mod state;
mod view;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use redlock::Redlock;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

use resp::{Reply, MAX_PENDING};
use session::Session;
use state::{Next, Shared};

/// Where `redlock serve` listens and whom it lets in.
#[derive(Clone, Debug, Default)]
pub struct Endpoint {
    /// host:port; `None` with a Unix socket alone.
    pub listen: Option<String>,
    pub unixsocket: Option<PathBuf>,
    /// The Unix socket's permissions (e.g. 0o700).
    pub unixsocketperm: Option<u32>,
    /// The password of the `default` user; `None`: no AUTH needed.
    pub requirepass: Option<String>,
}

/// Binds the endpoint's sockets, then reports where on `bound` (one line
/// per socket) and serves until the process ends. Fails when no socket
/// can be bound.
pub async fn serve(redlock: Redlock, endpoint: Endpoint, bound: impl Fn(&str)) -> io::Result<()> {
    let tcp = match &endpoint.listen {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| named(e, addr))?),
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
    if let Some(path) = &endpoint.unixsocket {
        bound(&format!("listening on unix:{}", path.display()));
    }
    let shared = Arc::new(Shared {
        redlock,
        requirepass: endpoint.requirepass,
        next_id: AtomicU64::new(1),
        connected: AtomicUsize::new(0),
        waiting: AtomicUsize::new(0),
        granted: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        bindings: state::Bindings::default(),
    });
    let tcp_loop = async {
        let Some(listener) = &tcp else { return std::future::pending::<()>().await };
        loop {
            // A failed accept (too many open files, a reset) costs that
            // client alone; the listener goes on.
            if let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection(stream, Arc::clone(&shared)));
            }
        }
    };
    let unix_loop = async {
        let Some(listener) = &unix else { return std::future::pending::<()>().await };
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(connection(stream, Arc::clone(&shared)));
            }
        }
    };
    tokio::join!(tcp_loop, unix_loop);
    Ok(())
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
        }
    }
    if !out.is_empty() && !session.lost.is_cancelled() {
        let _ = writer.write_all(&out).await;
    }
    let _ = writer.shutdown().await;
    binding::closed(&shared, id);
    shared.connected.fetch_sub(1, Ordering::Relaxed);
}
