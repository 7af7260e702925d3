//! One server's line: the cost of a handoff to the head of a long line,
//! against Redis's own blocking list, and of `LOCK.TOP` over many waited keys.
//!
//!     cargo bench --bench line
//!
//! - `handoff`: `WAITERS` clients (default 11,000) wait in `LOCK.ACQUIRE key
//!   w-i 600000 WAIT 600000` (WAIT_SECONDS); a control connection sends `LOCK.RELEASE key
//!   <holder>`, which hands the lock to the head of the line within the
//!   command. Measured: the RELEASE's round trip, and the time until the
//!   head's grant is read. The client served before joins the tail again
//!   once it holds nothing, so the line keeps its length.
//! - `blpop`: the same with `WAITERS` clients in `BLPOP list 600` and `LPUSH
//!   list x` on the control connection.
//! - `top`: `TOP_KEYS` clients (default 10,000) each wait for a key of its own,
//!   held by the control connection; `LOCK.TOP` (10 by default) is timed.
//!
//! Both lines stand at once, on two servers, and their handoffs alternate in
//! blocks of 100, so both see the same load on the machine; the ratio is the
//! lock's p99 over BLPOP's from the same run. Also printed: each server's
//! CPU per handoff (/proc/PID/schedstat, which scheduling noise moves less
//! than p99), and its CPU while the whole line disconnects at once.
//!
//! Environment: REDISLOCK_MODULE, BENCH_HANDOFFS (measured handoffs of each
//! line, default 10,000), WAITERS, WAIT_SECONDS (each wait's timeout,
//! default 600; 0: none), TOP_KEYS.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

type Res<T> = Result<T, String>;

/// Lease of every grant: far beyond the run, so only RELEASE frees it.
const LEASE_MS: u64 = 600_000;
/// Handoffs before the measured ones, per round.
const WARMUP: usize = 500;
/// Handoffs of one line before the other's turn.
const BLOCK: usize = 100;
/// `LOCK.TOP` calls timed.
const TOP_CALLS: usize = 300;

fn env_usize(name: &str, default: usize) -> Res<usize> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| format!("{name} must be a positive integer, got {v:?}")),
        _ => Ok(default),
    }
}

fn start(module: &Path, clients: usize) -> Res<testkit::Process> {
    let mut spec = testkit::Spec::new(Some(module.to_path_buf()));
    spec.dir_prefix = "redislock-bench-".into();
    spec.defaults =
        vec![("--save".into(), String::new()), ("--appendonly".into(), "no".into()), ("--maxclients".into(), (clients + 64).to_string())];
    spec.die_with_parent = true;
    testkit::Process::start(spec).map_err(|e| e.to_string())
}

/// A plain RESP connection: commands written whole, replies read until
/// their lines are complete.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(port: u16) -> Res<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        Ok(Conn { stream, buf: Vec::with_capacity(256) })
    }

    fn send(&mut self, args: &[&[u8]]) -> Res<()> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).map_err(|e| format!("write: {e}"))
    }

    /// Reads one reply of `lines` CRLF-ended lines; returns its first line.
    fn read_lines(&mut self, lines: usize) -> Res<String> {
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        while self.buf.windows(2).filter(|w| w == b"\r\n").count() < lines {
            let n = self.stream.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("connection closed".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let first = self.buf.split(|b| *b == b'\r').next().unwrap_or_default();
        Ok(String::from_utf8_lossy(first).into_owned())
    }

    /// Reads a bulk or array reply whole (LOCK.WAITERS, LOCK.TOP, INFO).
    fn read_any(&mut self) -> Res<Vec<u8>> {
        self.buf.clear();
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(end) = complete(&self.buf, 0) {
                return Ok(self.buf[..end].to_vec());
            }
            let n = self.stream.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("connection closed".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> Res<Vec<u8>> {
        self.send(args)?;
        self.read_any()
    }
}

/// The end of the RESP value starting at `at`, if it is all in `buf`.
fn complete(buf: &[u8], at: usize) -> Option<usize> {
    let line_end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let n: i64 = std::str::from_utf8(buf.get(at + 1..line_end)?).ok()?.parse().unwrap_or(0);
    let next = line_end + 2;
    match buf.get(at)? {
        b'$' if n < 0 => Some(next),
        b'$' => (buf.len() >= next + n as usize + 2).then_some(next + n as usize + 2),
        b'*' if n < 0 => Some(next),
        b'*' => (0..n).try_fold(next, |pos, _| complete(buf, pos)),
        _ => Some(next),
    }
}

/// How long the server's main thread has run, ns (/proc/PID/schedstat).
fn cpu_ns(pid: u32) -> Res<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).map_err(|e| format!("schedstat: {e}"))?;
    text.split_whitespace().next().and_then(|v| v.parse().ok()).ok_or_else(|| "schedstat unreadable".into())
}

/// Redis's count of blocked clients.
fn blocked(ctl: &mut Conn) -> Res<usize> {
    let info = ctl.call(&[b"INFO", b"clients"])?;
    let text = String::from_utf8_lossy(&info);
    text.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no blocked_clients in INFO".into())
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Lock,
    Blpop,
}

struct Figures {
    /// The freeing command's round trip, µs.
    command: Histogram<u64>,
    /// From sending it to reading the head's reply, µs.
    head: Histogram<u64>,
    /// The server's main thread on the CPU over the measured handoffs, ns,
    /// and how many handoffs.
    cpu_ns: u64,
    handoffs: u64,
    /// The server's CPU while the whole line disconnected, ns.
    leave_cpu_ns: u64,
}

impl Figures {
    fn new() -> Res<Figures> {
        let h = || Histogram::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string());
        Ok(Figures { command: h()?, head: h()?, cpu_ns: 0, handoffs: 0, leave_cpu_ns: 0 })
    }
}

fn wait_args(variant: Variant, owner: &[u8], timeout_s: u64) -> Vec<Vec<u8>> {
    match variant {
        Variant::Lock => {
            let wait = (timeout_s * 1000).to_string().into_bytes();
            vec![b"LOCK.ACQUIRE".to_vec(), b"key".to_vec(), owner.to_vec(), LEASE_MS.to_string().into_bytes(), b"WAIT".to_vec(), wait]
        }
        Variant::Blpop => vec![b"BLPOP".to_vec(), b"list".to_vec(), timeout_s.to_string().into_bytes()],
    }
}

fn send_wait(conn: &mut Conn, variant: Variant, owner: &[u8], timeout_s: u64) -> Res<()> {
    let args = wait_args(variant, owner, timeout_s);
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    conn.send(&refs)
}

/// A server with a line of `waiters` clients, one by one (so the line's
/// order is known), and the control connection that frees the head.
struct Line {
    variant: Variant,
    server: testkit::Process,
    ctl: Conn,
    line: Vec<Conn>,
    owners: Vec<Vec<u8>>,
    holder: Vec<u8>,
    timeout_s: u64,
    /// Handoffs so far.
    n: usize,
}

impl Line {
    fn new(module: &Path, variant: Variant, waiters: usize, timeout_s: u64) -> Res<Line> {
        let server = start(module, waiters)?;
        let mut ctl = Conn::open(server.port)?;
        if variant == Variant::Lock {
            let reply = ctl.call(&[b"LOCK.ACQUIRE", b"key", b"h", LEASE_MS.to_string().as_bytes()])?;
            if !reply.starts_with(b":") {
                return Err(format!("first ACQUIRE: {}", String::from_utf8_lossy(&reply)));
            }
        }
        let mut line: Vec<Conn> = Vec::with_capacity(waiters);
        let owners: Vec<Vec<u8>> = (0..waiters).map(|i| format!("w-{i}").into_bytes()).collect();
        for (i, owner) in owners.iter().enumerate() {
            let mut conn = Conn::open(server.port)?;
            send_wait(&mut conn, variant, owner, timeout_s)?;
            line.push(conn);
            // In line one at a time, so the i-th connection is i-th in line.
            let started = Instant::now();
            while blocked(&mut ctl)? < i + 1 {
                if started.elapsed() > Duration::from_secs(10) {
                    return Err(format!("waiter {i} never blocked"));
                }
            }
        }
        Ok(Line { variant, server, ctl, line, owners, holder: b"h".to_vec(), timeout_s, n: 0 })
    }

    /// One handoff: free the head, read its reply, put the one served
    /// before back at the tail; recorded unless `warmup`.
    fn handoff(&mut self, figures: &mut Figures, warmup: bool) -> Res<()> {
        let (n, waiters, variant) = (self.n, self.line.len(), self.variant);
        let head = n % waiters;
        let sent = Instant::now();
        match variant {
            Variant::Lock => self.ctl.send(&[b"LOCK.RELEASE", b"key", &self.holder])?,
            Variant::Blpop => self.ctl.send(&[b"LPUSH", b"list", b"x"])?,
        }
        let reply = self.ctl.read_lines(1)?;
        let command = sent.elapsed();
        if reply != ":1" {
            return Err(format!("freeing command answered {reply}"));
        }
        let granted = self.line[head].read_lines(if variant == Variant::Lock { 1 } else { 5 })?;
        let at_head = sent.elapsed();
        if !granted.starts_with(if variant == Variant::Lock { ":" } else { "*2" }) {
            return Err(format!("head {head} answered {granted}"));
        }
        // The one served before joins the tail again, now that it holds
        // nothing (an ACQUIRE by the holder would be granted at once).
        if n > 0 {
            let last = (n - 1) % waiters;
            send_wait(&mut self.line[last], variant, &self.owners[last], self.timeout_s)?;
        }
        self.holder.clone_from(&self.owners[head]);
        self.n += 1;
        if !warmup {
            let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
            figures.command.record(us(command)).map_err(|e| e.to_string())?;
            figures.head.record(us(at_head)).map_err(|e| e.to_string())?;
            figures.handoffs += 1;
        }
        Ok(())
    }

    /// Every waiter disconnects at once (each leaves from wherever it is):
    /// the server's CPU until none is blocked, ns.
    fn disconnect_all(mut self) -> Res<u64> {
        let (left, cpu_before) = (Instant::now(), cpu_ns(self.server.pid)?);
        self.line.clear();
        while blocked(&mut self.ctl)? > 0 {
            if left.elapsed() > Duration::from_secs(120) {
                return Err("the waiters never all left".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(cpu_ns(self.server.pid)?.saturating_sub(cpu_before))
    }
}

/// One line's figures as its process hands them back.
struct Summary {
    /// The freeing command's p50, p99, max, µs.
    command: [u64; 3],
    /// The head's reply's p50, p99, max, µs.
    head: [u64; 3],
    cpu_per_handoff_us: f64,
    leave_cpu_ms: f64,
}

impl Summary {
    fn of(f: &Figures) -> Summary {
        let q = |h: &Histogram<u64>| [h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max()];
        Summary {
            command: q(&f.command),
            head: q(&f.head),
            cpu_per_handoff_us: f.cpu_ns as f64 / f.handoffs.max(1) as f64 / 1000.0,
            leave_cpu_ms: f.leave_cpu_ns as f64 / 1e6,
        }
    }

    fn line(&self) -> String {
        let [a, b, c] = self.command;
        let [d, e, g] = self.head;
        format!("summary {a} {b} {c} {d} {e} {g} {} {}", self.cpu_per_handoff_us, self.leave_cpu_ms)
    }

    fn parse(line: &str) -> Option<Summary> {
        let v: Vec<&str> = line.strip_prefix("summary ")?.split(' ').collect();
        let u = |i: usize| v.get(i).and_then(|x| x.parse::<u64>().ok());
        let f = |i: usize| v.get(i).and_then(|x| x.parse::<f64>().ok());
        Some(Summary { command: [u(0)?, u(1)?, u(2)?], head: [u(3)?, u(4)?, u(5)?], cpu_per_handoff_us: f(6)?, leave_cpu_ms: f(7)? })
    }
}

/// A line in a process of its own (each holds `WAITERS` descriptors, and
/// both at once may not fit in one process's limit): it sets its line up,
/// says `ready`, runs `BLOCK` handoffs for each `go` it reads and says
/// `done`, and at `end` disconnects its line and prints its summary.
fn serve_line(module: &Path, variant: Variant, waiters: usize, timeout_s: u64) -> Res<()> {
    use std::io::BufRead;
    let mut line = Line::new(module, variant, waiters, timeout_s)?;
    let mut figures = Figures::new()?;
    for _ in 0..WARMUP {
        line.handoff(&mut figures, true)?;
    }
    let mut cpu = 0;
    let mut out = std::io::stdout();
    writeln!(out, "ready").map_err(|e| e.to_string())?;
    for cmd in std::io::stdin().lock().lines() {
        match cmd.map_err(|e| e.to_string())?.as_str() {
            "go" => {
                let at = cpu_ns(line.server.pid)?;
                for _ in 0..BLOCK {
                    line.handoff(&mut figures, false)?;
                }
                cpu += cpu_ns(line.server.pid)?.saturating_sub(at);
                writeln!(out, "done").map_err(|e| e.to_string())?;
            }
            _ => break,
        }
    }
    figures.cpu_ns = cpu;
    figures.leave_cpu_ns = line.disconnect_all()?;
    writeln!(out, "{}", Summary::of(&figures).line()).map_err(|e| e.to_string())
}

type Child = (std::process::Child, std::process::ChildStdin, std::io::BufReader<std::process::ChildStdout>);

/// Reads the next line of a line's process, which must start with `word`.
fn expect(out: &mut std::io::BufReader<std::process::ChildStdout>, word: &str) -> Res<String> {
    use std::io::BufRead;
    let mut got = String::new();
    out.read_line(&mut got).map_err(|e| e.to_string())?;
    let got = got.trim_end();
    if got.starts_with(word) {
        Ok(got.to_string())
    } else {
        Err(format!("a line's process said {got:?}, not {word}"))
    }
}

/// Both lines at once, each in a process of its own, their handoffs
/// alternating in blocks of `BLOCK` so that both see the same load.
fn handoffs(waiters: usize, handoffs: usize, timeout_s: u64) -> Res<(Summary, Summary)> {
    use std::process::{Command, Stdio};
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    eprintln!("a lock line and a BLPOP line of {waiters}");
    let mut children: Vec<Child> = Vec::new();
    for role in ["lock", "blpop"] {
        let mut child = Command::new(&me)
            .env("LINE_ROLE", role)
            .env("WAITERS", waiters.to_string())
            .env("WAIT_SECONDS", timeout_s.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        children.push((child, stdin, stdout));
    }
    for (_, _, out) in children.iter_mut() {
        expect(out, "ready")?;
    }
    for block in 0..handoffs.div_ceil(BLOCK) {
        // Which goes first alternates too.
        for i in [block % 2, 1 - block % 2] {
            let (_, stdin, out) = &mut children[i];
            writeln!(stdin, "go").map_err(|e| e.to_string())?;
            expect(out, "done")?;
        }
    }
    let mut summaries = Vec::new();
    for (mut child, mut stdin, mut out) in children {
        writeln!(stdin, "end").map_err(|e| e.to_string())?;
        let line = expect(&mut out, "summary")?;
        summaries.push(Summary::parse(&line).ok_or_else(|| format!("unreadable summary {line:?}"))?);
        child.wait().map_err(|e| e.to_string())?;
    }
    let blpop = summaries.pop().ok_or("no summary")?;
    let lock = summaries.pop().ok_or("no summary")?;
    Ok((lock, blpop))
}

/// `LOCK.TOP` with `keys` waited keys, one waiter each.
fn top(module: &Path, keys: usize) -> Res<Histogram<u64>> {
    let server = start(module, keys)?;
    let mut ctl = Conn::open(server.port)?;
    let mut line = Vec::with_capacity(keys);
    for i in 0..keys {
        let key = format!("k-{i}");
        ctl.call(&[b"LOCK.ACQUIRE", key.as_bytes(), b"h", LEASE_MS.to_string().as_bytes()])?;
        let mut conn = Conn::open(server.port)?;
        conn.send(&[b"LOCK.ACQUIRE", key.as_bytes(), b"w", LEASE_MS.to_string().as_bytes(), b"WAIT", b"0"])?;
        line.push(conn);
    }
    let started = Instant::now();
    while blocked(&mut ctl)? < keys {
        if started.elapsed() > Duration::from_secs(30) {
            return Err("the waiters never all blocked".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut hist = Histogram::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?;
    for n in 0..TOP_CALLS + 20 {
        let sent = Instant::now();
        let reply = ctl.call(&[b"LOCK.TOP"])?;
        let took = sent.elapsed();
        if !reply.starts_with(b"*10\r\n") {
            return Err(format!("LOCK.TOP answered {}", String::from_utf8_lossy(&reply[..reply.len().min(80)])));
        }
        if n >= 20 {
            hist.record(u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1)).map_err(|e| e.to_string())?;
        }
    }
    drop(line);
    drop(server);
    Ok(hist)
}

fn ms(us: u64) -> String {
    format!("{us} µs")
}

fn run() -> Res<()> {
    let module = testkit::try_module_path()?;
    let handoffs_n = env_usize("BENCH_HANDOFFS", 10_000)?;
    let waiters = env_usize("WAITERS", 11_000)?.max(2);
    let top_keys = env_usize("TOP_KEYS", 10_000)?.max(10);
    let timeout_s = u64::try_from(env_usize("WAIT_SECONDS", 600)?).unwrap_or(600);
    match std::env::var("LINE_ROLE").as_deref() {
        Ok("lock") => return serve_line(&module, Variant::Lock, waiters, timeout_s),
        Ok("blpop") => return serve_line(&module, Variant::Blpop, waiters, timeout_s),
        _ => {}
    }
    let (lock, blpop) = handoffs(waiters, handoffs_n, timeout_s)?;
    println!("line of {waiters} waiters (timeout {timeout_s} s, 0: none), {handoffs_n} handoffs each, alternating in blocks of {BLOCK}");
    println!("{:<34} {:>10} {:>10} {:>10}", "", "p50", "p99", "max");
    for (name, [p50, p99, max]) in [
        ("LOCK.RELEASE (hands over)", lock.command),
        ("LPUSH (to BLPOP)", blpop.command),
        ("RELEASE sent -> head granted", lock.head),
        ("LPUSH sent -> head served", blpop.head),
    ] {
        println!("{name:<34} {:>10} {:>10} {:>10}", ms(p50), ms(p99), ms(max));
    }
    println!(
        "server CPU per handoff (with the rejoin): lock {:.1} µs, BLPOP {:.1} µs ({:.2}x)",
        lock.cpu_per_handoff_us,
        blpop.cpu_per_handoff_us,
        lock.cpu_per_handoff_us / blpop.cpu_per_handoff_us.max(f64::MIN_POSITIVE)
    );
    println!("server CPU for the whole line to disconnect: lock {:.1} ms, BLPOP {:.1} ms", lock.leave_cpu_ms, blpop.leave_cpu_ms);
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    println!(
        "p99 ratio lock/BLPOP: command {:.2}x, head {:.2}x",
        ratio(lock.command[1], blpop.command[1]),
        ratio(lock.head[1], blpop.head[1])
    );
    eprintln!("LOCK.TOP with {top_keys} waited keys");
    let t = top(&module, top_keys)?;
    println!(
        "LOCK.TOP, {top_keys} waited keys: p50 {}, p99 {}, max {}",
        ms(t.value_at_quantile(0.5)),
        ms(t.value_at_quantile(0.99)),
        ms(t.max())
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("line: error: {e}");
            ExitCode::FAILURE
        }
    }
}
