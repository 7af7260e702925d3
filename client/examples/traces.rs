//! The spans of the `tracing` feature, printed as each closes: a lock
//! taken (`redlock.acquire`, with its `redlock.round`s and each server's
//! `redlock.call` inside), extended and released.
//!
//!     cargo run -p redlock --features tracing --example traces -- \
//!         redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//!
//! An application that exports its traces adds the layer of its exporter
//! (tracing-opentelemetry's `OpenTelemetryLayer`, for one) to its
//! subscriber in place of, or beside, the printing one here: its lock
//! waits are then spans of the requests that waited.

use std::time::{Duration, Instant};

use redlock::{Redlock, Settings};
use tracing_subscriber::fmt::format::FmtSpan;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DEBUG: the rounds, calls and extensions too (acquisitions and
    // releases are INFO).
    tracing_subscriber::fmt().with_span_events(FmtSpan::CLOSE).with_max_level(tracing::Level::DEBUG).init();
    let servers: Vec<String> = std::env::args().skip(1).collect();
    if servers.is_empty() {
        return Err("usage: traces REDIS_URL...".into());
    }
    let redlock = Redlock::new(&servers, Settings::default())?;
    let lock = redlock.lock_until("report", Duration::from_secs(10), Some(Instant::now() + Duration::from_secs(5))).await?;
    // The work the lock protects runs here, inside the application's own span.
    let lock = redlock.extend(&lock, Duration::from_secs(10)).await?;
    redlock.release(&lock).await?;
    Ok(())
}
