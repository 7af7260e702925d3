//! While `acquire --wait` or `run --wait` waits: one line on stderr, when
//! it is a terminal, saying why (`waiting for restart quarantine: 57 s
//! left on 5 of 5 servers`). Nothing is drawn into pipes or files.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redlock::{NotGranted, Retry};
use tokio::task::JoinHandle;

use super::output::ceil_secs;

/// How often the line is redrawn.
const TICK: Duration = Duration::from_millis(200);
/// A wait shorter than this shows nothing until a reason is known.
const QUIET: Duration = Duration::from_millis(500);

/// The last failed attempt: when, and why.
type Latest = Arc<Mutex<Option<(Instant, NotGranted)>>>;

pub struct Waiting {
    latest: Latest,
    ticker: Option<JoinHandle<()>>,
    bar: Option<ProgressBar>,
}

impl Waiting {
    /// Starts the line for a wait until `deadline` on a terminal; a no-op
    /// without a deadline or a terminal.
    pub fn start(resource: &str, servers: usize, deadline: Option<Instant>) -> Waiting {
        let latest: Latest = Arc::new(Mutex::new(None));
        let Some(deadline) = deadline.filter(|_| std::io::stderr().is_terminal()) else {
            return Waiting { latest, ticker: None, bar: None };
        };
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
            bar.set_style(style);
        }
        let started = Instant::now();
        let ticker = {
            let (bar, latest, resource) = (bar.clone(), latest.clone(), resource.to_string());
            tokio::spawn(async move {
                loop {
                    let now = Instant::now();
                    let report = *latest.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(text) = line(&resource, servers, started, deadline, now, report) {
                        bar.set_message(text);
                        bar.tick();
                    }
                    tokio::time::sleep(TICK).await;
                }
            })
        };
        Waiting { latest, ticker: Some(ticker), bar: Some(bar) }
    }

    /// For `Redlock::lock_until_observed`: notes each failed attempt.
    pub fn observer(&self) -> impl FnMut(&Retry<'_>) + Send + 'static {
        let latest = self.latest.clone();
        move |retry: &Retry<'_>| {
            *latest.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), retry.why));
        }
    }

    /// Removes the line.
    pub fn finish(self) {
        if let Some(ticker) = self.ticker {
            ticker.abort();
        }
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The line to show now, if any.
fn line(
    resource: &str,
    servers: usize,
    started: Instant,
    deadline: Instant,
    now: Instant,
    report: Option<(Instant, NotGranted)>,
) -> Option<String> {
    let waited = now.saturating_duration_since(started).as_secs();
    let left = ceil_secs(u64::try_from(deadline.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX));
    let Some((at, why)) = report else {
        return (now.saturating_duration_since(started) >= QUIET)
            .then(|| format!("waiting for {resource:?}: {waited} s so far, giving up in {left} s"));
    };
    Some(match why {
        NotGranted::Quarantine { ms_left, instances } => {
            let since = u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX);
            format!(
                "waiting for restart quarantine: {} s left on {instances} of {servers} servers",
                ceil_secs(ms_left.saturating_sub(since))
            )
        }
        NotGranted::Held => format!("waiting for {resource:?}: held by another owner; {waited} s so far, giving up in {left} s"),
        NotGranted::NoQuorum => {
            format!("waiting for a quorum of servers to answer: {waited} s so far, giving up in {left} s")
        }
        NotGranted::NoValidity => format!("retrying {resource:?}: granted too late to be valid; giving up in {left} s"),
        NotGranted::Rejected { rejection, instances } => format!(
            "retrying {resource:?}: {instances} of {servers} servers answer with an error ({}); giving up in {left} s",
            rejection.kind()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_the_quarantine_down() {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(70);
        let why = NotGranted::Quarantine { ms_left: 57_800, instances: 5 };
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(
            line("r", 5, t0, deadline, at(0), Some((t0, why))).as_deref(),
            Some("waiting for restart quarantine: 58 s left on 5 of 5 servers")
        );
        assert_eq!(
            line("r", 5, t0, deadline, at(10_900), Some((t0, why))).as_deref(),
            Some("waiting for restart quarantine: 47 s left on 5 of 5 servers")
        );
        assert_eq!(line("r", 5, t0, deadline, at(100), None), None, "quiet at first");
        assert!(line("r", 5, t0, deadline, at(2_000), Some((t0, NotGranted::Held))).is_some_and(|l| l.contains("held")));
    }
}
