//! A delaying TCP proxy for `benches/rtt.rs`: a network of fixed latency
//! in front of one server.
//!
//! Each proxy listens on a free port of 127.0.0.1 and forwards every
//! connection to its server. Every chunk read, in either direction, is
//! written on after a fixed one-way delay, in the order read (per
//! direction: one FIFO queue for all of a proxy's connections, so with a
//! fixed delay the queue is also in due order).
//!
//! Tokio's timer ticks in milliseconds, far too coarse for 0.1 ms, so the
//! chunks are delivered by two OS threads per proxy (one per direction,
//! "couriers"): a courier takes the next chunk, sleeps with a timer slack
//! of 1 ns until [`SPIN`] before it is due, spins to the due time and
//! writes it. The reading side is a tokio runtime of its own (two
//! threads), apart from the bench's. A delay of 0 bypasses the couriers:
//! each chunk is written as soon as it is read, as a plain proxy.
//!
//! Each courier counts how late it wrote (actual write time minus due
//! time): `Lateness`, which the bench prints beside the round trips it
//! measures through the proxies.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{Shutdown, TcpStream as StdStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

/// How long before a chunk is due its courier wakes and spins instead.
const SPIN: Duration = Duration::from_micros(20);
/// Lateness above this is counted apart.
pub const LATE: Duration = Duration::from_micros(100);

/// The proxies' own tokio runtime (reading and accepting).
pub struct Network {
    rt: Option<Runtime>,
    couriers: Vec<Arc<Courier>>,
    threads: Vec<thread::JoinHandle<()>>,
    high: bool,
}

impl Network {
    /// `high`: the proxies' threads (readers and couriers) run at nice -20
    /// where allowed, so that a network's latency does not grow with the
    /// CPU load of the clients and servers sharing the machine.
    pub fn new(high: bool) -> io::Result<Network> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rtt-proxy")
            .on_thread_start(move || {
                if high {
                    high_priority();
                }
            })
            .enable_all()
            .build()?;
        Ok(Network { rt: Some(rt), couriers: Vec::new(), threads: Vec::new(), high })
    }

    /// A proxy to `127.0.0.1:upstream` delaying each direction by `delay`.
    pub fn proxy(&mut self, upstream: u16, delay: Duration) -> io::Result<Proxy> {
        let rt = self.rt.as_ref().ok_or_else(|| io::Error::other("network stopped"))?;
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let port = listener.local_addr()?.port();
        let couriers = if delay.is_zero() {
            None
        } else {
            let mut pair = Vec::with_capacity(2);
            for direction in ["up", "down"] {
                let courier = Arc::new(Courier::new(delay));
                let c = courier.clone();
                let high = self.high;
                let t = thread::Builder::new().name(format!("rtt-courier-{port}-{direction}")).spawn(move || {
                    if high {
                        high_priority();
                    }
                    c.run()
                })?;
                self.threads.push(t);
                self.couriers.push(courier.clone());
                pair.push(courier);
            }
            Some((pair[0].clone(), pair[1].clone()))
        };
        let lateness = couriers.as_ref().map(|(up, down)| [up.clone(), down.clone()]);
        rt.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let couriers = couriers.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    match couriers {
                        None => forward_at_once(client, server).await,
                        Some((up, down)) => {
                            let _ = forward_delayed(client, server, up, down);
                        }
                    }
                });
            }
        });
        Ok(Proxy { port, couriers: lateness })
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for c in &self.couriers {
            c.stop();
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

pub struct Proxy {
    pub port: u16,
    couriers: Option<[Arc<Courier>; 2]>,
}

impl Proxy {
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Both directions' lateness since the last call, and resets it.
    pub fn take_lateness(&self) -> Lateness {
        let mut all = Lateness::default();
        for c in self.couriers.iter().flatten() {
            all.add(&c.take_lateness());
        }
        all
    }
}

/// How late the couriers wrote.
#[derive(Clone, Copy, Default, Debug)]
pub struct Lateness {
    pub chunks: u64,
    pub sum: Duration,
    pub max: Duration,
    /// Chunks written more than [`LATE`] after their due time.
    pub late: u64,
}

impl Lateness {
    pub fn add(&mut self, o: &Lateness) {
        self.chunks += o.chunks;
        self.sum += o.sum;
        self.max = self.max.max(o.max);
        self.late += o.late;
    }

    pub fn mean(&self) -> Duration {
        if self.chunks == 0 {
            Duration::ZERO
        } else {
            self.sum / u32::try_from(self.chunks).unwrap_or(u32::MAX)
        }
    }
}

/// A delay of 0: both directions copied as read.
async fn forward_at_once(client: TcpStream, server: TcpStream) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = cr.read(&mut buf).await {
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = sr.read(&mut buf).await {
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// A delay above 0: each direction read by a task here, written by its
/// courier, through a std handle of the same socket.
fn forward_delayed(client: TcpStream, server: TcpStream, up: Arc<Courier>, down: Arc<Courier>) -> io::Result<()> {
    let client = client.into_std()?;
    let server = server.into_std()?;
    let client_w = Arc::new(client.try_clone()?);
    let server_w = Arc::new(server.try_clone()?);
    let client_r = TcpStream::from_std(client)?;
    let server_r = TcpStream::from_std(server)?;
    tokio::spawn(pump(client_r, server_w, up));
    tokio::spawn(pump(server_r, client_w, down));
    Ok(())
}

async fn pump(mut from: TcpStream, to: Arc<StdStream>, courier: Arc<Courier>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => courier.push(&to, Some(buf[..n].to_vec())),
        }
    }
    // The end of the stream travels with the same delay, after the data.
    courier.push(&to, None);
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    /// The courier sleeps on `ready`: a push must wake it (otherwise it
    /// finds the item itself, without a futex call per chunk).
    idle: bool,
}

struct Item {
    due: Instant,
    to: Arc<StdStream>,
    /// None: shut down writing (the other side's end of stream).
    data: Option<Vec<u8>>,
}

/// One direction of one proxy: a FIFO of chunks and the thread that
/// writes each when it is due.
struct Courier {
    delay: Duration,
    queue: Mutex<Queue>,
    ready: Condvar,
    stopped: AtomicBool,
    chunks: AtomicU64,
    late_sum_ns: AtomicU64,
    late_max_ns: AtomicU64,
    late: AtomicU64,
}

impl Courier {
    fn new(delay: Duration) -> Courier {
        Courier {
            delay,
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            stopped: AtomicBool::new(false),
            chunks: AtomicU64::new(0),
            late_sum_ns: AtomicU64::new(0),
            late_max_ns: AtomicU64::new(0),
            late: AtomicU64::new(0),
        }
    }

    fn push(&self, to: &Arc<StdStream>, data: Option<Vec<u8>>) {
        let Ok(mut q) = self.queue.lock() else { return };
        // Due time taken under the lock: the queue stays in due order.
        q.items.push_back(Item { due: Instant::now() + self.delay, to: to.clone(), data });
        let idle = q.idle;
        drop(q);
        if idle {
            self.ready.notify_one();
        }
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _q = self.queue.lock();
        self.ready.notify_all();
    }

    fn run(&self) {
        precise_timer_slack();
        loop {
            let item = {
                let Ok(mut q) = self.queue.lock() else { return };
                loop {
                    if self.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(item) = q.items.pop_front() {
                        break item;
                    }
                    q.idle = true;
                    q = match self.ready.wait(q) {
                        Ok(q) => q,
                        Err(_) => return,
                    };
                    q.idle = false;
                }
            };
            wait_until(item.due);
            let late = item.due.elapsed();
            self.record(late);
            match item.data {
                Some(data) => write_all(&item.to, &data),
                None => {
                    let _ = item.to.shutdown(Shutdown::Write);
                }
            }
        }
    }

    fn record(&self, late: Duration) {
        let ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        self.chunks.fetch_add(1, Ordering::Relaxed);
        self.late_sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.late_max_ns.fetch_max(ns, Ordering::Relaxed);
        if late > LATE {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn take_lateness(&self) -> Lateness {
        Lateness {
            chunks: self.chunks.swap(0, Ordering::Relaxed),
            sum: Duration::from_nanos(self.late_sum_ns.swap(0, Ordering::Relaxed)),
            max: Duration::from_nanos(self.late_max_ns.swap(0, Ordering::Relaxed)),
            late: self.late.swap(0, Ordering::Relaxed),
        }
    }
}

/// Sleeps until [`SPIN`] before `due`, then spins to it.
fn wait_until(due: Instant) {
    if let Some(left) = due.checked_duration_since(Instant::now()).and_then(|d| d.checked_sub(SPIN)) {
        thread::sleep(left);
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

/// Writes all of `data` to a non-blocking socket (the tokio side shares
/// its file description), waiting in poll(2) when its buffer is full; a
/// closed connection drops the rest.
fn write_all(to: &StdStream, mut data: &[u8]) {
    let mut to_ref = to;
    while !data.is_empty() {
        match to_ref.write(data) {
            Ok(0) => return,
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut fd = libc::pollfd { fd: to.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe {
                    libc::poll(&mut fd, 1, 100);
                }
            }
            Err(_) => return,
        }
    }
}

/// Threads that asked for nice -20 and were refused.
pub static PRIORITY_REFUSED: AtomicU64 = AtomicU64::new(0);

/// This thread at nice -20 (on Linux a nice value is the thread's own).
#[cfg(target_os = "linux")]
fn high_priority() {
    // SAFETY: setpriority(2) with who = 0: the calling thread; no memory passed.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) } != 0 {
        PRIORITY_REFUSED.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(not(target_os = "linux"))]
fn high_priority() {
    PRIORITY_REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// This thread's timer slack to 1 ns (the default adds 50 µs to a sleep).
#[cfg(target_os = "linux")]
pub fn precise_timer_slack() {
    let slack: libc::c_ulong = 1;
    // SAFETY: PR_SET_TIMERSLACK sets a property of the calling thread only.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, slack);
    }
}

#[cfg(not(target_os = "linux"))]
pub fn precise_timer_slack() {}
