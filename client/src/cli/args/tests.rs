//! The command line as clap parses it: values, defaults, refusals.

use super::*;
use clap::error::ErrorKind;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    let raw = || std::iter::once("redlock").chain(args.iter().copied());
    Cli::try_parse_from(raw()).map(|cli| cli.resolve(raw().map(OsString::from)))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn acquire_with_ttl_and_wait() {
    let cli = parse(&["acquire", "orders:42", "--ttl", "10s", "--wait", "2m"]).expect("parses");
    let Command::Acquire(a) = cli.command else { panic!("not acquire") };
    assert_eq!(a.resources, ["orders:42"]);
    assert_eq!(a.ttl, ms(10_000));
    assert_eq!(a.wait, Some(ms(120_000)));
    assert!(!cli.global.json);
}

#[test]
fn durations_in_humantime_units() {
    for (text, want) in [("500ms", ms(500)), ("10s", ms(10_000)), ("2m", ms(120_000)), ("1h 30m", ms(5_400_000))] {
        let cli = parse(&["acquire", "r", "--ttl", text]).expect(text);
        let Command::Acquire(a) = cli.command else { panic!("not acquire") };
        assert_eq!(a.ttl, want, "{text}");
    }
}

#[test]
fn zero_or_unparsable_durations_are_usage_errors() {
    for bad in ["0s", "0ms", "abc", "10", "", "100us", "400d", "5 parsecs"] {
        let err = parse(&["acquire", "r", "--ttl", bad]).expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::ValueValidation, "{bad}");
        assert_eq!(err.exit_code(), 2, "{bad}");
    }
    // A negative one is a value, refused as negative (not clap's tip
    // about an unknown option).
    for args in [
        ["acquire", "r", "--ttl", "-5s", "--wait", "1s"],
        ["acquire", "r", "--ttl", "1s", "--wait", "-1s"],
        ["acquire", "r", "--ttl", "1s", "--request-timeout", "-5ms"],
    ] {
        let err = parse(&args).expect_err("negative");
        assert_eq!(err.kind(), ErrorKind::ValueValidation, "{args:?}");
        assert_eq!(err.exit_code(), 2);
        let text = err.to_string();
        assert!(text.contains("must be positive"), "{text}");
        assert!(!text.contains("tip:"), "{text}");
    }
    assert!(parse_delay_range("-5ms..1s").is_err_and(|e| e.contains("must be positive")));
    let err = parse(&["acquire", "r", "--ttl", "1s", "--wait", "0s"]).expect_err("zero wait");
    assert_eq!(err.exit_code(), 2);
    let err = parse(&["bench", "--duration", "soon"]).expect_err("bad bench duration");
    assert_eq!(err.exit_code(), 2);
    assert_eq!(parse(&["bench", "--duration", "2h"]).expect_err("too long").exit_code(), 2);
}

#[test]
fn acquire_needs_a_ttl_and_a_resource() {
    assert_eq!(parse(&["acquire", "r"]).expect_err("no ttl").kind(), ErrorKind::MissingRequiredArgument);
    assert_eq!(parse(&["acquire", "--ttl", "1s"]).expect_err("no resource").kind(), ErrorKind::MissingRequiredArgument);
    assert_eq!(parse(&["acquire", "", "--ttl", "1s"]).expect_err("empty").kind(), ErrorKind::ValueValidation);
}

#[test]
fn release_and_extend_take_resource_and_owner() {
    let cli = parse(&["release", "r", "abc123"]).expect("release");
    let Command::Release(r) = cli.command else { panic!("not release") };
    assert_eq!(r.target(), Ok((&["r".to_string()][..], "abc123")));
    let cli = parse(&["extend", "r", "abc123", "--ttl", "30s"]).expect("extend");
    let Command::Extend(e) = cli.command else { panic!("not extend") };
    assert_eq!(e.ttl, ms(30_000));
    assert!(parse(&["extend", "r", "abc123"]).is_err());
    let Command::Release(r) = parse(&["release", "r"]).expect("parses").command else { panic!("not release") };
    assert!(r.target().is_err_and(|e| e.contains("--owner")), "no owner");
    assert!(parse(&["release", "r", ""]).is_err());
    assert!(parse(&["release", "r", "--owner", ""]).is_err());
}

#[test]
fn release_and_extend_take_a_set_with_owner() {
    let cli = parse(&["release", "a", "b", "--owner", "abc123"]).expect("release");
    let Command::Release(r) = cli.command else { panic!("not release") };
    assert_eq!(r.target(), Ok((&["a".to_string(), "b".to_string()][..], "abc123")));
    let cli = parse(&["extend", "a", "b", "abc123", "--ttl", "30s"]).expect("extend");
    let Command::Extend(e) = cli.command else { panic!("not extend") };
    assert_eq!(e.target(), Ok((&["a".to_string(), "b".to_string()][..], "abc123")), "without --owner the last name is the owner");
}

#[test]
fn acquire_takes_several_resources_and_permits() {
    let cli = parse(&["acquire", "a", "b", "--ttl", "1s"]).expect("acquire");
    let Command::Acquire(a) = cli.command else { panic!("not acquire") };
    assert_eq!(a.resources, ["a", "b"]);
    let cli = parse(&["acquire", "pool", "--ttl", "1s", "--limit", "5", "--permits", "3"]).expect("acquire");
    let Command::Acquire(a) = cli.command else { panic!("not acquire") };
    assert_eq!((a.limit, a.permits), (Some(5), Some(3)));
    assert!(parse(&["acquire", "pool", "--ttl", "1s", "--limit", "5", "--permits", "0"]).is_err());
}

/// `run a b -- cmd` names two resources; one resource may still be
/// followed by its command without `--`, and a command's own `--` stands.
#[test]
fn run_takes_several_resources_before_double_dash() {
    let resources_and_command = |args: &[&str]| {
        let Command::Run(r) = parse(args).expect("run").command else { panic!("not run") };
        let command: Vec<String> = r.command.iter().map(|w| w.to_string_lossy().into_owned()).collect();
        (r.resources(), command, r.ttl)
    };
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases: [(&[&str], &[&str], &[&str]); 8] = [
        (&["run", "a", "b", "--", "sh", "-c", "x"], &["a", "b"], &["sh", "-c", "x"]),
        (&["run", "a", "b", "c", "--ttl", "5s", "--", "ls"], &["a", "b", "c"], &["ls"]),
        (&["run", "a", "--ttl", "5s", "b", "--", "ls"], &["a", "b"], &["ls"]),
        (&["run", "a", "--", "b", "--", "c"], &["a"], &["b", "--", "c"]),
        (&["run", "a", "--", "ls"], &["a"], &["ls"]),
        (&["run", "a", "ls", "-l"], &["a"], &["ls", "-l"]),
        (&["run", "a", "ls", "-l", "--", "x"], &["a"], &["ls", "-l", "--", "x"]),
        (&["run", "a", "ls", "--ttl", "5s"], &["a"], &["ls", "--ttl", "5s"]),
    ];
    for (args, resources, command) in cases {
        let ttl = if args.contains(&"5s") && !command.contains(&"5s") { ms(5000) } else { ms(10_000) };
        assert_eq!(resources_and_command(args), (strings(resources), strings(command), ttl), "{args:?}");
    }
    // Global options among the resources are still global.
    let cli = parse(&["run", "a", "b", "--json", "--", "true"]).expect("run");
    assert!(cli.global.json);
    let Command::Run(r) = cli.command else { panic!("not run") };
    assert_eq!(r.resources(), ["a", "b"]);
    // The usage shows both forms.
    let usage = Cli::command().find_subcommand_mut("run").map(|c| c.render_usage().to_string()).unwrap_or_default();
    assert!(usage.contains("<RESOURCE>... -- <COMMAND>..."), "{usage}");
}

#[test]
fn global_options_go_before_or_after_the_subcommand() {
    let cli = parse(&["--json", "--mode", "script", "status", "r"]).expect("before");
    assert!(cli.global.json);
    assert_eq!(cli.global.mode, ModeArg::Script);
    let cli = parse(&["status", "r", "--json", "--mode", "script", "--quorum", "2"]).expect("after");
    assert!(cli.global.json);
    assert_eq!(cli.global.quorum, Some(2));
    assert!(parse(&["status", "r", "--mode", "lua"]).is_err());
    assert!(parse(&["status", "r", "--quorum", "0"]).is_err());
}

#[test]
fn servers_split_on_commas_and_default_to_the_five_local_ones() {
    let cli = parse(&["status", "r", "--servers", "redis://a:1, b:2 ,redis://c:3"]).expect("servers");
    assert_eq!(cli.global.urls().expect("urls"), ["redis://a:1", "b:2", "redis://c:3"].map(String::from).to_vec());
    let cli = parse(&["status", "r", "--servers", "redis+sentinel://s1:26379,s2,s3:26381/m,b:2,unix:///run/r.sock"]).expect("sentinel");
    assert_eq!(
        cli.global.urls().expect("urls"),
        ["redis+sentinel://s1:26379,s2,s3:26381/m", "b:2", "unix:///run/r.sock"].map(String::from).to_vec()
    );
    let cli = parse(&["status", "r", "--servers", "redis+cluster://a:1,b:2,redis://c:3,redis+cluster://d:4"]).expect("cluster");
    assert_eq!(
        cli.global.urls().expect("urls"),
        ["redis+cluster://a:1,b:2", "redis://c:3", "redis+cluster://d:4"].map(String::from).to_vec()
    );
    let cli = parse(&["status", "r", "--servers", "a:1,,b:2"]).expect("parses");
    assert!(cli.global.urls().is_err());
    for (list, by) in [
        ("redis://a:1 redis://b:2", "spaces"),
        ("redis://a:1;redis://b:2", "semicolons"),
        ("a:1; b:2", "spaces and semicolons"),
        ("redis://c:3,redis://a:1 redis://b:2", "spaces"),
    ] {
        let cli = parse(&["status", "r", "--servers", list]).expect("parses");
        let e = cli.global.urls().expect_err(list);
        assert!(e.contains(&format!("separated by {by}: separate servers with commas")), "{list}: {e}");
    }
    if std::env::var_os("REDLOCK_SERVERS").is_none() {
        let cli = parse(&["status", "r"]).expect("default");
        let urls = cli.global.urls().expect("urls");
        assert_eq!(urls.len(), 5);
        assert_eq!(urls[0], "redis://127.0.0.1:7001");
        assert_eq!(urls[4], "redis://127.0.0.1:7005");
    }
}

#[test]
fn settings_follow_the_flags_and_the_library_defaults() {
    let cli = parse(&["status", "r"]).expect("defaults");
    let s = cli.global.settings(Mode::Module);
    let d = Settings::default();
    assert_eq!(
        (s.request_timeout, s.connect_timeout, s.retry_count, s.retry_delay, s.quorum),
        (d.request_timeout, d.connect_timeout, d.retry_count, d.retry_delay, d.quorum)
    );
    let cli = parse(&[
        "status",
        "r",
        "--request-timeout",
        "20ms",
        "--connect-timeout",
        "1s",
        "--retry-count",
        "7",
        "--retry-delay",
        "5ms..15ms",
        "--quorum",
        "4",
    ])
    .expect("flags");
    let s = cli.global.settings(Mode::Script);
    assert_eq!(s.request_timeout, ms(20));
    assert_eq!(s.connect_timeout, ms(1000));
    assert_eq!(s.retry_count, 7);
    assert_eq!(s.retry_delay, (ms(5), ms(15)));
    assert_eq!(s.quorum, Some(4));
    assert_eq!(s.mode, Mode::Script);
    assert!(!s.release_on_disconnect && s.lock_delay.is_none(), "no session by default");
    let cli = parse(&["run", "r", "--session", "--", "true"]).expect("session");
    let s = cli.global.settings(Mode::Module);
    assert_eq!(s.lock_delay, None, "the safe default: longer than an extension interval and a request");
    let cli = parse(&["run", "r", "--session", "--lock-delay", "0ms", "--", "true"]).expect("an explicit 0 is taken");
    assert_eq!(cli.global.settings(Mode::Module).lock_delay, Some(Duration::ZERO));
    let cli = parse(&["run", "r", "--session", "--lock-delay", "250ms", "--", "true"]).expect("session");
    let s = cli.global.settings(Mode::Module);
    assert_eq!((s.release_on_disconnect, s.lock_delay), (true, Some(ms(250))));
    assert!(parse(&["run", "r", "--lock-delay", "1s", "--", "true"]).is_err(), "--lock-delay needs --session");
}

#[test]
fn tls_files_and_insecure_become_tls_settings() {
    let cli = parse(&["status", "r", "--servers", "rediss://a:1", "--cacert", "ca.pem", "--cert", "me.pem", "--key", "me.key"])
        .expect("tls flags");
    let tls = cli.global.settings(Mode::Module).tls;
    assert_eq!(tls.ca_cert, Some(Pem::File("ca.pem".into())));
    assert_eq!((tls.client_cert, tls.client_key), (Some(Pem::File("me.pem".into())), Some(Pem::File("me.key".into()))));
    assert!(!tls.insecure);
    let cli = parse(&["--insecure", "status", "r"]).expect("insecure");
    assert!(cli.global.settings(Mode::Module).tls.insecure);
    if ["REDLOCK_CACERT", "REDLOCK_CERT", "REDLOCK_KEY"].iter().all(|v| std::env::var_os(v).is_none()) {
        assert!(!parse(&["status", "r"]).expect("no tls").global.settings(Mode::Module).tls.is_set());
    }
    let cli = parse(&["status", "r", "--servers", "rediss+cluster://a:1,b:2,rediss://c:3"]).expect("tls cluster");
    assert_eq!(cli.global.urls().expect("urls"), ["rediss+cluster://a:1,b:2", "rediss://c:3"].map(String::from).to_vec());
}

#[test]
fn retry_delay_is_a_range_or_one_value() {
    assert_eq!(parse_delay_range("10ms..20ms"), Ok(DelayRange(ms(10), ms(20))));
    assert_eq!(parse_delay_range("0ms..5ms"), Ok(DelayRange(ms(0), ms(5))));
    assert_eq!(parse_delay_range("50ms"), Ok(DelayRange(ms(50), ms(50))));
    assert!(parse_delay_range("20ms..10ms").is_err());
    assert!(parse_delay_range("10ms..").is_err());
    assert!(parse_delay_range("x..1s").is_err());
    assert!(parse(&["status", "r", "--retry-delay", "2s..1s"]).is_err());
}

#[test]
fn run_takes_the_command_after_double_dash_or_directly() {
    let cli = parse(&["run", "r", "--ttl", "5s", "--wait", "30s", "--", "sh", "-c", "echo $REDLOCK_TOKEN"]).expect("run");
    let Command::Run(r) = cli.command else { panic!("not run") };
    assert_eq!(r.command, ["sh", "-c", "echo $REDLOCK_TOKEN"].map(OsString::from).to_vec());
    assert_eq!((r.ttl, r.wait, r.on_lost), (ms(5000), Some(ms(30_000)), OnLost::Kill));

    // Options after the command belong to the command.
    let cli = parse(&["run", "r", "--on-lost", "warn", "ls", "-l", "--ttl", "1s", "--json"]).expect("run");
    assert!(!cli.global.json);
    let Command::Run(r) = cli.command else { panic!("not run") };
    assert_eq!(r.command, ["ls", "-l", "--ttl", "1s", "--json"].map(OsString::from).to_vec());
    assert_eq!((r.ttl, r.wait, r.on_lost), (ms(10_000), None, OnLost::Warn));

    assert_eq!(parse(&["run", "r"]).expect_err("no command").kind(), ErrorKind::MissingRequiredArgument);
    assert_eq!(parse(&["run", "r", "--"]).expect_err("no command").kind(), ErrorKind::MissingRequiredArgument);
    assert!(parse(&["run", "r", "--on-lost", "ignore", "--", "true"]).is_err());
}

#[test]
fn run_prints_asks_unless_told_otherwise() {
    let on_ask = |args: &[&str]| match parse(args).map(|cli| cli.command) {
        Ok(Command::Run(r)) => Some(r.on_ask),
        _ => None,
    };
    assert_eq!(on_ask(&["run", "r", "--", "true"]), Some(OnAsk::Print));
    assert_eq!(on_ask(&["run", "r", "--on-ask", "term", "--", "true"]), Some(OnAsk::Term));
    assert_eq!(on_ask(&["run", "r", "--on-ask", "ignore", "true"]), Some(OnAsk::Ignore));
    assert_eq!(on_ask(&["run", "r", "--on-ask", "kill", "--", "true"]), None);
}

#[test]
fn bench_defaults() {
    let cli = parse(&["bench"]).expect("bench");
    let Command::Bench(b) = cli.command else { panic!("not bench") };
    assert_eq!((b.workers, b.duration, b.ttl, b.contenders, b.hold), (32, ms(10_000), ms(10_000), 16, ms(1)));
    let cli = parse(&["bench", "--workers", "4", "--duration", "500ms"]).expect("bench");
    let Command::Bench(b) = cli.command else { panic!("not bench") };
    assert_eq!((b.workers, b.duration), (4, ms(500)));
    assert!(parse(&["bench", "--workers", "0"]).is_err());
    assert_eq!(b.phases, [BenchPhase::All]);
    for phase in [BenchPhase::Uncontended, BenchPhase::Floor, BenchPhase::Exclusive, BenchPhase::Mixed, BenchPhase::Permits] {
        assert!(b.runs(phase), "{phase:?} runs by default");
    }
}

#[test]
fn bench_phases_select_what_runs() {
    let bench = |args: &[&str]| {
        let cli = parse(&[&["bench"], args].concat()).expect("bench");
        let Command::Bench(b) = cli.command else { panic!("not bench") };
        b
    };
    let b = bench(&["--phases", "exclusive", "--contenders", "4", "--hold", "1ms", "--duration", "3s", "--json"]);
    assert_eq!((b.phases.as_slice(), b.contenders, b.hold, b.duration), ([BenchPhase::Exclusive].as_slice(), 4, ms(1), ms(3000)));
    assert!(b.runs(BenchPhase::Exclusive));
    for phase in [BenchPhase::Uncontended, BenchPhase::Floor, BenchPhase::Mixed, BenchPhase::Permits] {
        assert!(!b.runs(phase), "{phase:?}");
    }
    let b = bench(&["--phases", "contended"]);
    assert!(b.runs(BenchPhase::Exclusive) && b.runs(BenchPhase::Mixed) && b.runs(BenchPhase::Permits));
    assert!(!b.runs(BenchPhase::Uncontended) && !b.runs(BenchPhase::Floor));
    let b = bench(&["--phases", "uncontended,floor"]);
    assert_eq!(b.phases, [BenchPhase::Uncontended, BenchPhase::Floor]);
    assert!(b.runs(BenchPhase::Floor) && !b.runs(BenchPhase::Exclusive));
    for bad in ["", "contention", "exclusive,", "all,nope"] {
        let err = parse(&["bench", "--phases", bad]).expect_err(bad);
        assert_eq!(err.exit_code(), 2, "{bad:?}");
    }
    assert_eq!(parse(&["bench", "--hold", "0ms"]).expect_err("zero hold").exit_code(), 2);
}

#[test]
fn clap_definition_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn elect_takes_a_name_a_value_and_a_command_and_leader_a_name() {
    let cli = parse(&["elect", "nightly", "--value", "host-a", "--again", "--", "./jobs.sh", "--all"]).expect("parses");
    let Command::Elect(e) = cli.command else { panic!("not elect") };
    assert_eq!((e.name.as_str(), e.value.as_str(), e.ttl, e.again), ("nightly", "host-a", ms(10_000), true));
    assert_eq!(e.command, vec![OsString::from("./jobs.sh"), OsString::from("--all")]);
    for bad in [&["elect", "n", "--", "true"][..], &["elect", "n", "--value", "v"], &["elect", "", "--value", "v", "--", "true"]] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
    let cli = parse(&["leader", "nightly", "--watch", "--interval", "50ms", "--json"]).expect("parses");
    let Command::Leader(l) = cli.command else { panic!("not leader") };
    assert_eq!((l.name.as_str(), l.watch, l.interval), ("nightly", true, ms(50)));
    assert!(cli.global.json);
    assert!(parse(&["leader", "nightly", "--interval", "50ms"]).is_err(), "--interval needs --watch");
}

#[test]
fn serve_runs_on_one_thread_unless_told_more() {
    let cli = parse(&["serve"]).expect("parses");
    let Command::Serve(s) = cli.command else { panic!("not serve") };
    assert_eq!(s.threads, 1);
    let cli = parse(&["serve", "--threads", "4"]).expect("parses");
    let Command::Serve(s) = cli.command else { panic!("not serve") };
    assert_eq!(s.threads, 4);
    for bad in ["0", "-1", "1025", "two", ""] {
        assert_eq!(parse(&["serve", "--threads", bad]).expect_err(bad).exit_code(), 2, "{bad:?}");
    }
}

#[test]
fn members_takes_a_name_and_with_watch_an_interval() {
    let cli = parse(&["members", "web", "--json"]).expect("parses");
    let Command::Members(m) = cli.command else { panic!("not members") };
    assert_eq!((m.name.as_str(), m.watch, m.interval), ("web", false, ms(200)));
    let cli = parse(&["members", "web", "--watch", "--interval", "50ms"]).expect("parses");
    let Command::Members(m) = cli.command else { panic!("not members") };
    assert_eq!((m.watch, m.interval), (true, ms(50)));
    assert!(parse(&["members", "web", "--interval", "50ms"]).is_err(), "--interval needs --watch");
    assert!(parse(&["members", ""]).is_err(), "a name");
    assert!(parse(&["members"]).is_err(), "a name");
}

#[test]
fn watch_takes_a_name_and_an_interval() {
    let cli = parse(&["watch", "jobs:1", "--json"]).expect("parses");
    let Command::Watch(w) = cli.command else { panic!("not watch") };
    assert_eq!((w.name.as_str(), w.interval), ("jobs:1", ms(200)));
    assert!(cli.global.json);
    let cli = parse(&["watch", "jobs:1", "--interval", "50ms"]).expect("parses");
    let Command::Watch(w) = cli.command else { panic!("not watch") };
    assert_eq!(w.interval, ms(50));
    assert!(parse(&["watch", ""]).is_err(), "a name");
    assert!(parse(&["watch"]).is_err(), "a name");
}
