//! A controllable TCP forwarder on 127.0.0.1 in front of a server: what
//! production networks do to a client's connections, on demand. It can
//! reset every connection through it (as an idle timeout or a restarted
//! proxy does), stall them (bytes held both ways, as a frozen link: the
//! kernel still acknowledges), refuse new ones, accept new ones and close
//! them at once (a proxy whose server is down), delay replies, and be
//! retargeted to another server (a VIP or DNS name that moved): new
//! connections then go there. Stops when dropped, closing every connection.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Default)]
struct Control {
    upstream: AtomicU16,
    refusing: AtomicBool,
    /// New connections are accepted (and counted), then closed at once.
    dead_backend: AtomicBool,
    /// Each reply chunk is held a random time in this range (ms) before it
    /// is passed on, in order.
    reply_delay_lo_ms: AtomicU64,
    reply_delay_hi_ms: AtomicU64,
    /// Connections made through it.
    accepted: AtomicU64,
    conns: Mutex<Vec<JoinHandle<()>>>,
}

pub struct Forwarder {
    pub port: u16,
    control: Arc<Control>,
    stalled: watch::Sender<bool>,
    severed: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Forwarder {
    /// A forwarder to `127.0.0.1:upstream` whose replies are delayed by a
    /// random `delay_ms` each (a slow network in front of one server).
    pub async fn start_delayed(upstream: u16, delay_ms: std::ops::RangeInclusive<u64>) -> Forwarder {
        let f = Forwarder::start(upstream).await;
        f.delay_replies(delay_ms);
        f
    }

    /// A forwarder to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind forwarder");
        let port = listener.local_addr().expect("forwarder addr").port();
        let control = Arc::new(Control::default());
        control.upstream.store(upstream, Ordering::SeqCst);
        let (stalled, stall_rx) = watch::channel(false);
        let (severed, sever_rx) = watch::channel(false);
        let ctl = Arc::clone(&control);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if ctl.refusing.load(Ordering::SeqCst) {
                    abortive(&client);
                    drop(client);
                    continue;
                }
                ctl.accepted.fetch_add(1, Ordering::SeqCst);
                if ctl.dead_backend.load(Ordering::SeqCst) {
                    // An orderly close (FIN), as HAProxy, Envoy or a cloud
                    // load balancer close a client whose server they
                    // cannot reach.
                    drop(client);
                    continue;
                }
                let target = ctl.upstream.load(Ordering::SeqCst);
                let links = Links { stalled: stall_rx.clone(), severed: sever_rx.clone() };
                let conn = tokio::spawn(forward(client, target, Arc::clone(&ctl), links));
                if let Ok(mut conns) = ctl.conns.lock() {
                    conns.retain(|c| !c.is_finished());
                    conns.push(conn);
                }
            }
        });
        Forwarder { port, control, stalled, severed, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// New connections go to `127.0.0.1:upstream` from now on.
    pub fn retarget(&self, upstream: u16) {
        self.control.upstream.store(upstream, Ordering::SeqCst);
    }

    /// Closes every connection through it at once, both ways.
    pub fn reset(&self) {
        if let Ok(mut conns) = self.control.conns.lock() {
            for c in conns.drain(..) {
                c.abort();
            }
        }
    }

    /// Holds every byte both ways while `on`; passes them on when off.
    pub fn stall(&self, on: bool) {
        let _ = self.stalled.send(on);
    }

    /// Closes every connection through it on the server's side only: the
    /// server sees it end, while the client's side stays open and silent
    /// (a half-open connection, as a NAT or a proxy that dropped its
    /// state leaves one): the client learns nothing until its requests
    /// time out. New connections are closed at once from now on.
    pub fn sever(&self) {
        self.refuse(true);
        let _ = self.severed.send(true);
    }

    /// New connections are closed at once while `on`.
    pub fn refuse(&self, on: bool) {
        self.control.refusing.store(on, Ordering::SeqCst);
    }

    /// While `on`, new connections are accepted, counted and closed at
    /// once, before a byte is read: a proxy whose server is down. Those
    /// made before stay as they are.
    pub fn dead_backend(&self, on: bool) {
        self.control.dead_backend.store(on, Ordering::SeqCst);
    }

    /// Holds each reply chunk a random time in `ms` before passing it on.
    pub fn delay_replies(&self, ms: std::ops::RangeInclusive<u64>) {
        self.control.reply_delay_lo_ms.store(*ms.start(), Ordering::SeqCst);
        self.control.reply_delay_hi_ms.store(*ms.end().max(ms.start()), Ordering::SeqCst);
    }

    /// Connections accepted so far: made through it, or closed at once
    /// (`dead_backend`); refused ones not counted.
    pub fn accepted(&self) -> u64 {
        self.control.accepted.load(Ordering::SeqCst)
    }
}

/// Copies `from` to `to` chunk by chunk, holding chunks while stalled and,
/// for replies, `reply_delay_ms`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    control: Arc<Control>,
    links: Links,
    replies: bool,
) {
    let Links { mut stalled, mut severed } = links;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = severed.wait_for(|s| *s) => break,
        };
        if stalled.wait_for(|s| !*s).await.is_err() {
            break;
        }
        let delay = match replies {
            true => {
                let (lo, hi) = (control.reply_delay_lo_ms.load(Ordering::SeqCst), control.reply_delay_hi_ms.load(Ordering::SeqCst));
                rand::Rng::random_range(&mut rand::rng(), lo..=hi.max(lo))
            }
            false => 0,
        };
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    if *severed.borrow() {
        // The requests' direction ends the server's side; the replies'
        // keeps the client's open, silent, until a reset or the end.
        if !replies {
            let _ = to.shutdown().await;
        }
        std::future::pending::<()>().await;
    }
    let _ = to.shutdown().await;
}

/// What every connection through a forwarder watches.
#[derive(Clone)]
struct Links {
    stalled: watch::Receiver<bool>,
    severed: watch::Receiver<bool>,
}

async fn forward(client: TcpStream, upstream: u16, control: Arc<Control>, links: Links) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // Aborted (reset), the sockets are dropped with no lingering: a reset.
    abortive(&client);
    abortive(&server);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = AbortOnDrop(tokio::spawn(pump(cr, sw, Arc::clone(&control), links.clone(), false)));
    pump(sr, cw, control, links, true).await;
    drop(up);
}

/// Closed, `stream` resets the connection (`SO_LINGER` 0: an RST, no
/// lingering; closing never blocks with a zero linger).
fn abortive(stream: &TcpStream) {
    let _ = redis::io::tcp::socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// The request direction's task, ended with the connection's own task.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        self.reset();
    }
}
