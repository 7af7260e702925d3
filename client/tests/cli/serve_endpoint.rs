//! Starting `redlock serve` in front of test servers, and speaking to it:
//! byte by byte (`Raw`) or with the `redis` crate (`connect`).

use crate::common;

use std::time::Duration;

use common::cli::redlock_with;
use common::Cluster;
use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Child;

pub const REPLY: Duration = Duration::from_secs(10);

/// A running `redlock serve` and its port; killed when dropped.
pub struct Endpoint {
    pub child: Child,
    pub port: u16,
}

/// Timeouts a loaded machine does not turn into failures: time is not the
/// subject of the tests that use them.
pub const GENEROUS: &[&str] = &["--request-timeout", "1s", "--connect-timeout", "1s", "--retry-delay", "5ms..15ms"];

/// Timeouts short enough that a paused or killed server costs a fault
/// test little time.
pub const BRISK: &[&str] = &["--request-timeout", "200ms", "--connect-timeout", "500ms", "--retry-delay", "5ms..15ms"];

pub async fn endpoint(c: &Cluster, env: &[(&str, &str)]) -> Endpoint {
    endpoint_with(c, env, &[]).await
}

/// `endpoint` with more of `serve`'s options.
pub async fn endpoint_with(c: &Cluster, env: &[(&str, &str)], options: &[&str]) -> Endpoint {
    endpoint_on(c, GENEROUS, 0, env, options).await
}

/// `redlock serve` over `c` with the client `timeouts`, listening on
/// `port` (0: any free one), once it listens.
pub async fn endpoint_on(c: &Cluster, timeouts: &[&str], port: u16, env: &[(&str, &str)], options: &[&str]) -> Endpoint {
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["serve", "--listen", &listen];
    args.extend_from_slice(options);
    let mut cmd = redlock_with(&c.urls().join(","), timeouts, &args);
    cmd.envs(env.iter().copied());
    endpoint_of(cmd).await
}

/// `cmd`, a `redlock serve` with any options, spawned; once it listens.
pub async fn endpoint_of(mut cmd: tokio::process::Command) -> Endpoint {
    let mut child = cmd.spawn().expect("spawn redlock serve");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let line = tokio::time::timeout(REPLY, lines.next_line()).await.expect("serve reports its port").expect("stderr").expect("a line");
    let port = line.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {line:?}"));
    // Its later lines go nowhere: nothing is written there once it listens.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Endpoint { child, port }
}

/// A connection spoken to byte by byte: each reply read whole, as its
/// RESP text.
pub struct Raw {
    stream: BufReader<TcpStream>,
}

impl Raw {
    pub async fn connect(port: u16) -> Raw {
        Raw { stream: BufReader::new(TcpStream::connect(("127.0.0.1", port)).await.expect("connect to the endpoint")) }
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).await.expect("write");
    }

    pub async fn send(&mut self, args: &[&str]) {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.send_bytes(out.as_bytes()).await;
    }

    /// The next whole reply, within `REPLY`.
    pub async fn reply(&mut self) -> String {
        tokio::time::timeout(REPLY, self.read_one()).await.expect("a reply in time")
    }

    /// The next whole reply, however long it takes (a `WAIT` in a long
    /// line).
    pub async fn read_reply(&mut self) -> String {
        self.read_one().await
    }

    pub async fn call(&mut self, args: &[&str]) -> String {
        self.send(args).await;
        self.reply().await
    }

    async fn read_one(&mut self) -> String {
        let mut out = String::new();
        let mut todo = 1usize;
        while todo > 0 {
            todo -= 1;
            let mut line = String::new();
            assert!(self.stream.read_line(&mut line).await.expect("read") > 0, "the endpoint closed the connection");
            let count: i64 = line.get(1..).map(str::trim).and_then(|n| n.parse().ok()).unwrap_or(0);
            match line.as_bytes().first() {
                Some(b'$') if count >= 0 => {
                    let mut body = vec![0u8; count as usize + 2];
                    self.stream.read_exact(&mut body).await.expect("bulk");
                    line.push_str(&String::from_utf8_lossy(&body));
                }
                Some(b'*' | b'>') if count > 0 => todo += count as usize,
                Some(b'%') if count > 0 => todo += 2 * count as usize,
                _ => {}
            }
            out.push_str(&line);
        }
        out
    }

    /// Whether the endpoint closed this connection (after any replies).
    pub async fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        matches!(tokio::time::timeout(REPLY, self.stream.read_to_end(&mut rest)).await, Ok(Ok(_)))
    }
}

pub fn token_of(reply: &str) -> i64 {
    reply.strip_prefix(':').and_then(|t| t.trim().parse().ok()).unwrap_or_else(|| panic!("expected a token, got {reply:?}"))
}

pub async fn connect(port: u16) -> Option<MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection()).await.ok()?.ok()
}
