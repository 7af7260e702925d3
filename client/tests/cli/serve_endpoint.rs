//! Starting `redlock serve` for the tests that fault it or its clients,
//! and connecting to it with the `redis` crate.

use crate::common;

use std::time::Duration;

use common::cli::redlock_with;
use common::Cluster;
use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

/// `redlock serve` on `port` (0: any), its port once it listens.
pub async fn start_endpoint(c: &Cluster, port: u16) -> (Child, u16) {
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = redlock_with(
        &c.urls().join(","),
        &["--request-timeout", "200ms", "--connect-timeout", "500ms", "--retry-delay", "5ms..15ms"],
        &["serve", "--listen", &listen],
    );
    let mut child = cmd.spawn().expect("spawn redlock serve");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("serve reports its port")
        .expect("stderr")
        .expect("a line");
    let port = line.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {line:?}"));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, port)
}

pub async fn connect(port: u16) -> Option<MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection()).await.ok()?.ok()
}
