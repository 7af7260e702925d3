//! Delaying proxies for benches written in other languages
//! (`node/bench/run.mjs`): the network of fixed latency that
//! `benches/rtt.rs` puts in front of the servers, as a process of its own.
//!
//!   cargo bench -p redlock --bench delay_proxy -- DELAY_MS PORT [PORT ...]
//!
//! Starts one proxy per server port (127.0.0.1) delaying each direction by
//! DELAY_MS (e.g. 0.25), prints one line, `ready URL [URL ...]` (the
//! proxies' redis:// URLs, in the order of the ports), then forwards until
//! its standard input is closed (its parent exiting closes it), and
//! prints the couriers' lateness on standard error as it stops. The
//! proxies' threads run at a high priority where allowed, as in rtt.rs
//! (BENCH_PROXY_PRIORITY=normal leaves them at the default).

#[path = "rtt/proxy.rs"]
mod proxy;

use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use proxy::{Lateness, Network};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("delay_proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    // `cargo bench` adds `--bench` to a bench without a harness.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let usage = "usage: delay_proxy DELAY_MS PORT [PORT ...]";
    let (delay, ports) = args.split_first().ok_or(usage)?;
    let delay_ms: f64 = delay
        .parse()
        .ok()
        .filter(|d: &f64| (0.0..=100.0).contains(d))
        .ok_or(format!("{delay:?}: not a delay in ms from 0 to 100; {usage}"))?;
    let ports: Vec<u16> = ports.iter().map(|p| p.parse().map_err(|_| format!("{p:?}: not a port; {usage}"))).collect::<Result<_, _>>()?;
    if ports.is_empty() {
        return Err(usage.to_string());
    }
    let high = std::env::var("BENCH_PROXY_PRIORITY").map_or(true, |v| v != "normal");
    let mut network = Network::new(high).map_err(|e| format!("proxy runtime: {e}"))?;
    let delay = Duration::from_secs_f64(delay_ms / 1000.0);
    let proxies =
        ports.iter().map(|&p| network.proxy(p, delay).map_err(|e| format!("proxy for port {p}: {e}"))).collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = proxies.iter().map(|p| p.url()).collect();
    let mut out = io::stdout();
    writeln!(out, "ready {}", urls.join(" ")).and_then(|()| out.flush()).map_err(|e| format!("stdout: {e}"))?;
    // Forward until the parent closes our standard input.
    let mut line = String::new();
    let stdin = io::stdin();
    while stdin.lock().read_line(&mut line).is_ok_and(|n| n > 0) {
        line.clear();
    }
    let mut late = Lateness::default();
    for p in &proxies {
        late.add(&p.take_lateness());
    }
    eprintln!("delay_proxy: couriers late by {:.1} µs on average", late.mean().as_secs_f64() * 1e6);
    drop(network);
    Ok(())
}
