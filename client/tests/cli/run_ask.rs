//! `redlock run --on-ask`: an ask for the hold (`redlock ask`) is printed
//! on stderr while the command runs on (the default), or stops the command
//! (`term`: SIGTERM, then the release lets the next waiter in); an ask made
//! for the hold before this one was granted is not acted on.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::cli::{finish, redlock, run};
use common::{relaxed, Cluster};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout};

const CLI_DEADLINE: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(15);
const ASKED: &str = "redlock: asked to let go";

/// A running `redlock run`, its stdout and stderr read line by line.
struct Running {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Lines<BufReader<ChildStderr>>,
    started: std::time::Instant,
}

impl Running {
    fn spawn(servers: &str, args: &[&str]) -> Running {
        let mut cmd = redlock(servers, args);
        // The command reads its go-ahead from redlock's stdin (inherited).
        cmd.stdin(Stdio::piped());
        let started = std::time::Instant::now();
        let mut child = cmd.spawn().expect("spawn redlock run");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
        Running { child, stdout, stderr, started }
    }

    async fn line(lines: &mut Lines<BufReader<impl tokio::io::AsyncRead + Unpin>>, what: &str) -> String {
        tokio::time::timeout(WAIT, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{what} within {WAIT:?}"))
            .expect("reading redlock's output")
            .unwrap_or_else(|| panic!("{what}: redlock's output ended"))
    }

    /// The command's first line, `started TOKEN`: its token.
    async fn started(&mut self) -> String {
        let line = Running::line(&mut self.stdout, "the command started").await;
        line.strip_prefix("started ").unwrap_or_else(|| panic!("not a start: {line:?}")).to_string()
    }

    /// The next line on stderr that says an ask was heard.
    async fn asked(&mut self) -> String {
        loop {
            let line = Running::line(&mut self.stderr, "an ask heard").await;
            if line.starts_with(ASKED) {
                return line;
            }
        }
    }

    /// Lets the command go on past its `read`.
    async fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").await.expect("the go-ahead");
        stdin.flush().await.expect("the go-ahead");
    }

    /// Its exit, and the rest of its stdout and stderr. Its stdin stays
    /// open: a command not told to go on ends only by a signal (closed,
    /// its `read` would end and the command finish on its own, racing the
    /// SIGTERM an ask sends just after printing that it heard it).
    async fn end(mut self, what: &str) -> (Option<i32>, String, String) {
        let (mut out, mut err) = (String::new(), String::new());
        let rest = async {
            while let Some(l) = self.stdout.next_line().await.expect("stdout") {
                out.push_str(&l);
                out.push('\n');
            }
            while let Some(l) = self.stderr.next_line().await.expect("stderr") {
                err.push_str(&l);
                err.push('\n');
            }
        };
        tokio::time::timeout(CLI_DEADLINE, rest).await.unwrap_or_else(|_| panic!("{what}: redlock did not end"));
        let ran = finish(self.child, self.started, CLI_DEADLINE, what).await;
        (ran.code, out, err)
    }
}

/// Starts, prints its token, then waits for a line on stdin and says it
/// finished; a SIGTERM makes it say so and exit 3. (The `read` runs in the
/// background so that the shell takes the trap at once; a background job
/// reads /dev/null unless told otherwise, hence fd 3.)
const COMMAND: &str =
    r#"trap 'echo terminated; exit 3' TERM; exec 3<&0; echo "started $REDLOCK_TOKEN"; read go <&3 & wait $!; echo finished"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_ask_term_stops_the_command_and_the_next_waiter_gets_the_lock() {
    let c = Cluster::start(3);
    let servers = c.urls().join(",");
    let mut first = Running::spawn(&servers, &["run", "asked", "--on-ask", "term", "--", "sh", "-c", COMMAND]);
    let token = first.started().await;
    common::subscribed_everywhere(&c, "asked", 1, WAIT, "redlock run listens for asks").await;
    let waiter = redlock(&servers, &["run", "asked", "--wait", "30s", "--", "sh", "-c", "echo second $REDLOCK_TOKEN"])
        .spawn()
        .expect("spawn the waiter");
    let waiter_started = std::time::Instant::now();

    let asked = run(redlock(&servers, &["ask", "asked", "--message", "m"]), CLI_DEADLINE, "ask").await;
    assert!(asked.stdout.lines().any(|l| l == "asked: 1"), "{}", asked.stdout);
    assert_eq!(first.asked().await, format!("{ASKED} asked token {token}: m"));
    let (code, out, _) = first.end("the asked run").await;
    assert_eq!((code, out.as_str()), (Some(3), "terminated\n"), "stopped by SIGTERM, not finished");

    let second = finish(waiter, waiter_started, CLI_DEADLINE, "the waiter").await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    let second_token: i64 = second.stdout.trim().strip_prefix("second ").and_then(|t| t.parse().ok()).expect("the waiter's token");
    assert!(second_token > token.parse::<i64>().expect("a token"), "{second_token} after {token}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_an_ask_is_printed_and_the_command_runs_to_its_end() {
    let c = Cluster::start(3);
    let servers = c.urls().join(",");
    let mut running = Running::spawn(&servers, &["run", "asked", "--", "sh", "-c", COMMAND]);
    let token = running.started().await;
    common::subscribed_everywhere(&c, "asked", 1, WAIT, "redlock run listens for asks").await;
    let asked = run(redlock(&servers, &["ask", "asked", "--message", "deploy at 10:00"]), CLI_DEADLINE, "ask").await;
    assert_eq!(asked.code, Some(0), "{}", asked.stderr);
    assert_eq!(running.asked().await, format!("{ASKED} asked token {token}: deploy at 10:00"));
    // Asked again without a message: a line of its own, still running.
    run(redlock(&servers, &["ask", "asked"]), CLI_DEADLINE, "ask again").await;
    assert_eq!(running.asked().await, format!("{ASKED} asked token {token}"));
    running.go().await;
    let (code, out, err) = running.end("the asked run").await;
    assert_eq!((code, out.as_str()), (Some(0), "finished\n"), "it ran to its end: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_for_the_hold_before_this_one_is_not_acted_on() {
    let c = Cluster::start(3);
    let servers = c.urls().join(",");
    let rl = c.redlock(relaxed());
    let before = rl.guard("asked", Duration::from_secs(30), None).await.expect("the earlier hold");
    let mut waiting = Running::spawn(&servers, &["run", "asked", "--wait", "30s", "--on-ask", "term", "--", "sh", "-c", COMMAND]);
    let operator = c.redlock(relaxed());
    let asked = operator.ask("asked", Some("for the one before")).await.expect("ask");
    assert_eq!(asked.holders, 1, "the earlier hold was asked");
    before.release().await.expect("release");

    let token = waiting.started().await;
    common::subscribed_everywhere(&c, "asked", 1, WAIT, "redlock run listens for asks").await;
    // Its own ask is the first it acts on.
    operator.ask("asked", Some("for this one")).await.expect("ask this one");
    assert_eq!(waiting.asked().await, format!("{ASKED} asked token {token}: for this one"));
    let (code, out, err) = waiting.end("the run granted after an ask").await;
    assert_eq!((code, out.as_str()), (Some(3), "terminated\n"));
    assert!(!err.contains("for the one before"), "{err}");
}
