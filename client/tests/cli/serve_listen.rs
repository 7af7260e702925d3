//! `redlock serve`'s listeners and logins: TLS for its own clients
//! (`--tls-port`, client certificates as redis-server's tls-auth-clients),
//! the users of an ACL file (`--aclfile`), and a config file (`--config`)
//! beneath the environment and the flags.

use crate::common;

use std::process::Stdio;

use common::cli::run;
use common::tls::Certs;
use common::Cluster;
use redis::{ClientTlsConfig, TlsCertificates};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use crate::serve_endpoint::{token_of, Raw, GENEROUS, REPLY};

/// `redlock serve` with `args` (the servers and timeouts not among them:
/// they are the caller's, flags or a file's), once it printed `lines`
/// lines (one per listener): the child and those lines.
async fn start(args: &[&str], env: &[(&str, &str)], lines: usize) -> (Child, Vec<String>) {
    let mut child = serve_command(args, env).spawn().expect("spawn redlock serve");
    let mut out = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut printed = Vec::new();
    for _ in 0..lines {
        let line = tokio::time::timeout(REPLY, out.next_line()).await.expect("serve reports where it listens").expect("stderr");
        printed.push(line.unwrap_or_else(|| panic!("redlock serve ended after {printed:?}")));
    }
    tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
    (child, printed)
}

fn serve_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlock"));
    cmd.env_remove("REDLOCK_SERVERS")
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in ["REDLOCK_SERVE_LISTEN", "REDLOCK_SERVE_PASSWORD", "REDLOCK_SERVE_CONFIG", "REDLOCK_SERVE_ACLFILE"] {
        if !env.iter().any(|(k, _)| *k == var) {
            cmd.env_remove(var);
        }
    }
    cmd
}

/// `--servers` of `c` and the generous timeouts, as flags.
fn servers_of(c: &Cluster) -> Vec<String> {
    let mut args = vec!["--servers".to_string(), c.urls().join(",")];
    args.extend(GENEROUS.iter().map(|s| s.to_string()));
    args
}

/// The port of a line `listening ... on HOST:PORT`.
fn port_of(line: &str) -> u16 {
    line.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {line:?}"))
}

/// A TLS client of the endpoint trusting the test CA, showing the
/// certificate `<cert>.crt` if given.
fn tls_client(certs: &Certs, port: u16, cert: Option<&str>) -> redis::Client {
    let read = |name: &str| std::fs::read(certs.path(name)).expect("a test certificate");
    let client_tls = cert.map(|c| ClientTlsConfig { client_cert: read(&format!("{c}.crt")), client_key: read(&format!("{c}.key")) });
    let tls = TlsCertificates { client_tls, root_cert: Some(read("ca.crt")) };
    redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}"), tls).expect("a TLS client")
}

/// `PING` through a new TLS connection: its reply, or the error.
async fn tls_ping(certs: &Certs, port: u16, cert: Option<&str>) -> Result<String, String> {
    let client = tls_client(certs, port, cert);
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(REPLY)).set_connection_timeout(Some(REPLY));
    let mut con = client.get_multiplexed_async_connection_with_config(&config).await.map_err(|e| e.to_string())?;
    redis::cmd("PING").query_async::<String>(&mut con).await.map_err(|e| e.to_string())
}

/// What a plain-text client gets from the TLS port for a PING: every byte
/// until the endpoint closes the connection.
async fn plain_text_on(port: u16) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect to the TLS port");
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.expect("write");
    let mut got = Vec::new();
    tokio::time::timeout(REPLY, stream.read_to_end(&mut got)).await.expect("the endpoint closes a plain-text client").ok();
    got
}

fn tls_options(certs: &Certs) -> Vec<String> {
    let path = |name: &str| certs.path(name).to_str().expect("a UTF-8 path").to_string();
    vec![
        "--tls-port".into(),
        "0".into(),
        "--tls-cert-file".into(),
        path("server.crt"),
        "--tls-key-file".into(),
        path("server.key"),
        "--tls-ca-cert-file".into(),
        path("ca.crt"),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_over_tls_takes_and_releases_a_lock_for_a_client_with_a_certificate() {
    let c = Cluster::start(3);
    let certs = Certs::make();
    let mut args = servers_of(&c);
    args.extend(tls_options(&certs));
    args.extend(["--listen".into(), "127.0.0.1:0".into(), "--no-tcp".into()]);
    let (_e, lines) = start(&strs(&args), &[], 1).await;
    assert!(lines[0].starts_with("redlock: listening for TLS on 127.0.0.1:"), "TLS alone with --no-tcp: {lines:?}");
    let port = port_of(&lines[0]);

    let mut con = tls_client(&certs, port, Some("client")).get_multiplexed_async_connection().await.expect("a TLS connection");
    let token: i64 = redis::cmd("LOCK.ACQUIRE").arg("tls-job").arg("a").arg(10_000).query_async(&mut con).await.expect("acquire");
    assert!(c.infos("tls-job").await.iter().all(|i| i.as_ref().and_then(|i| i.token) == Some(token)), "held everywhere with {token}");
    let released: i64 = redis::cmd("LOCK.RELEASE").arg("tls-job").arg("a").query_async(&mut con).await.expect("release");
    assert_eq!(released, 1);
    assert_eq!(c.infos("tls-job").await, vec![None; 3], "released on every server");

    // redis-cli, when it speaks TLS.
    let help = std::process::Command::new("redis-cli").arg("--help").output();
    if help.is_ok_and(|h| String::from_utf8_lossy(&h.stdout).contains("--tls") || String::from_utf8_lossy(&h.stderr).contains("--tls")) {
        let path = |name: &str| certs.path(name).to_str().expect("a UTF-8 path").to_string();
        let cli = |command: &[&str]| {
            let out = std::process::Command::new("redis-cli")
                .args(["-p", &port.to_string(), "--tls", "--cacert", &path("ca.crt"), "--cert", &path("client.crt")])
                .args(["--key", &path("client.key")])
                .args(command)
                .output()
                .expect("run redis-cli");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let printed = cli(&["LOCK.ACQUIRE", "tls-cli", "o", "10000"]);
        let token: i64 = printed.trim_start_matches("(integer) ").parse().unwrap_or_else(|_| panic!("redis-cli printed {printed:?}"));
        assert_eq!(c.servers[0].info("tls-cli").await.and_then(|i| i.token), Some(token));
        assert_eq!(cli(&["LOCK.RELEASE", "tls-cli", "o"]), "1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_tls_refuses_clients_without_a_certificate_by_its_ca_and_plain_text() {
    let c = Cluster::start(3);
    let certs = Certs::make();
    let mut args = servers_of(&c);
    args.extend(tls_options(&certs));
    args.extend(["--listen".into(), "127.0.0.1:0".into()]);
    let (_required, lines) = start(&strs(&args), &[], 2).await;
    let (plain, tls) = (port_of(&lines[0]), port_of(&lines[1]));
    assert!(lines[1].contains("listening for TLS on"), "{lines:?}");

    assert_eq!(tls_ping(&certs, tls, Some("client")).await.as_deref(), Ok("PONG"));
    let without = tls_ping(&certs, tls, None).await;
    assert!(without.is_err(), "a client without a certificate is served: {without:?}");
    let other_ca = tls_ping(&certs, tls, Some("other-client")).await;
    assert!(other_ca.is_err(), "a certificate by another CA is taken: {other_ca:?}");
    let got = plain_text_on(tls).await;
    assert!(!String::from_utf8_lossy(&got).contains("PONG"), "a plain-text client served on the TLS port: {got:?}");
    // The plain port beside it serves as before.
    assert_eq!(Raw::connect(plain).await.call(&["PING"]).await, "+PONG\r\n");

    // optional: asked, not required; one shown must be by the CA.
    args.extend(["--tls-auth-clients".into(), "optional".into()]);
    let (_optional, lines) = start(&strs(&args), &[], 2).await;
    let tls = port_of(&lines[1]);
    assert_eq!(tls_ping(&certs, tls, None).await.as_deref(), Ok("PONG"), "optional: served without a certificate");
    assert_eq!(tls_ping(&certs, tls, Some("client")).await.as_deref(), Ok("PONG"));
    assert!(tls_ping(&certs, tls, Some("other-client")).await.is_err(), "optional: a certificate by another CA is refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_start_with_unusable_tls_files() {
    let c = Cluster::start(1);
    let certs = Certs::make();
    let path = |name: &str| certs.path(name).to_str().expect("a UTF-8 path").to_string();
    for (cert, key, ca, said) in [
        ("ca.key", "server.key", Some("ca.crt"), "--tls-cert-file"),
        ("server.crt", "client.key", Some("ca.crt"), "are not a certificate and its key"),
        ("server.crt", "server.key", None, "--tls-auth-clients yes or optional needs --tls-ca-cert-file"),
        ("server.crt", "missing.key", Some("ca.crt"), "--tls-key-file"),
    ] {
        let mut args = servers_of(&c);
        args.extend(["--listen", "127.0.0.1:0", "--tls-port", "0"].map(String::from));
        args.extend(["--tls-cert-file".into(), path(cert), "--tls-key-file".into(), path(key)]);
        if let Some(ca) = ca {
            args.extend(["--tls-ca-cert-file".into(), path(ca)]);
        }
        let ran = run(serve_command(&strs(&args), &[]), REPLY, "serve with unusable TLS files").await;
        assert_eq!(ran.code, Some(2), "a usage error: {ran:?}");
        assert!(ran.stderr.contains(said), "{said:?} not in {:?}", ran.stderr);
    }
}

/// The users file of these tests: `default` disabled, alice with two
/// passwords, bob disabled, carol without a password.
const USERS: &str =
    "# who may take locks\n\nuser default off\nuser alice on >one >two ~* &* +@all\nuser bob off >pw\nuser carol on nopass\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_logs_in_the_users_of_an_aclfile() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("users.acl");
    std::fs::write(&file, USERS).expect("write the users file");
    let mut args = servers_of(&c);
    args.extend(["--listen".into(), "127.0.0.1:0".into(), "--aclfile".into(), file.to_str().expect("UTF-8").into()]);
    let (_e, lines) = start(&strs(&args), &[], 1).await;
    let port = port_of(&lines[0]);

    let wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    let mut raw = Raw::connect(port).await;
    assert_eq!(raw.call(&["PING"]).await, "-NOAUTH Authentication required.\r\n");
    assert_eq!(raw.call(&["LOCK.ACQUIRE", "acl", "o", "10000"]).await, "-NOAUTH Authentication required.\r\n");
    assert_eq!(c.infos("acl").await, vec![None; 3], "nothing taken before AUTH");
    assert_eq!(raw.call(&["AUTH", "alice", "three"]).await, wrongpass, "a wrong password");
    assert_eq!(raw.call(&["AUTH", "bob", "pw"]).await, wrongpass, "a disabled user");
    assert_eq!(raw.call(&["AUTH", "nobody", "one"]).await, wrongpass, "a user the file does not name");
    assert_eq!(raw.call(&["AUTH", "one"]).await, wrongpass, "the default user is off");
    assert_eq!(raw.call(&["PING"]).await, "-NOAUTH Authentication required.\r\n", "still logged out");
    assert_eq!(raw.call(&["AUTH", "alice", "two"]).await, "+OK\r\n");
    let token = token_of(&raw.call(&["LOCK.ACQUIRE", "acl", "o", "10000"]).await);
    assert!(c.infos("acl").await.iter().all(|i| i.as_ref().and_then(|i| i.token) == Some(token)));

    let mut hello = Raw::connect(port).await;
    assert!(hello.call(&["HELLO", "3", "AUTH", "alice", "wrong"]).await.starts_with("-WRONGPASS"));
    assert!(hello.call(&["HELLO", "3", "AUTH", "alice", "one"]).await.starts_with("%7\r\n"), "HELLO 3 AUTH logs in");
    assert_eq!(hello.call(&["LOCK.RELEASE", "acl", "o"]).await, ":1\r\n");
    let mut carol = Raw::connect(port).await;
    assert_eq!(carol.call(&["AUTH", "carol", "anything"]).await, "+OK\r\n", "nopass takes any password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_start_on_a_users_file_line_it_does_not_honour() {
    let c = Cluster::start(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("users.acl");
    let file_arg = file.to_str().expect("UTF-8").to_string();
    for (text, said) in [
        ("user alice on >one\nuser bob on >pw -@all +lock.info\n", "users.acl:2: user 'bob': rule '-@all' is not honoured"),
        ("user alice on >one\nrequirepass x\n", "users.acl:2: 'requirepass' is not a users file line"),
    ] {
        std::fs::write(&file, text).expect("write the users file");
        let mut args = servers_of(&c);
        args.extend(["--listen".into(), "127.0.0.1:0".into(), "--aclfile".into(), file_arg.clone()]);
        let ran = run(serve_command(&strs(&args), &[]), REPLY, "serve with a bad users file").await;
        assert_eq!(ran.code, Some(2), "a usage error: {ran:?}");
        assert!(ran.stderr.contains(said), "{said:?} not in {:?}", ran.stderr);
    }
    // redis-server would ignore requirepass beside an ACL file: refused.
    std::fs::write(&file, USERS).expect("write the users file");
    let mut args = servers_of(&c);
    args.extend(["--listen".into(), "127.0.0.1:0".into(), "--aclfile".into(), file_arg.clone()]);
    let ran = run(serve_command(&strs(&args), &[("REDLOCK_SERVE_PASSWORD", "pw")]), REPLY, "serve with both").await;
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("--requirepass and --aclfile"), "{:?}", ran.stderr);
}

/// A config file's options apply (its servers, its password); an
/// environment variable beats the file, and a flag beats both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_a_config_file_beneath_the_environment_and_the_flags() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("from-file.sock");
    let conf = dir.path().join("serve.conf");
    let text = format!(
        "# redlock serve\nservers {}\nrequest-timeout 1s\nconnect-timeout 1s\n\n  listen 127.0.0.1:0\nrequirepass from-file\nunixsocket {}\n",
        c.urls().join(","),
        socket.display()
    );
    std::fs::write(&conf, text).expect("write the config file");
    let conf_arg = conf.to_str().expect("UTF-8");

    // The file alone: its servers, its password, its Unix socket.
    let (_e, lines) = start(&["--config", conf_arg], &[], 2).await;
    assert_eq!(lines[1], format!("redlock: listening on unix:{}", socket.display()), "{lines:?}");
    let mut raw = Raw::connect(port_of(&lines[0])).await;
    assert_eq!(raw.call(&["PING"]).await, "-NOAUTH Authentication required.\r\n", "the file's requirepass");
    assert_eq!(raw.call(&["AUTH", "from-file"]).await, "+OK\r\n");
    let token = token_of(&raw.call(&["LOCK.ACQUIRE", "conf", "o", "10000"]).await);
    assert!(c.infos("conf").await.iter().all(|i| i.as_ref().and_then(|i| i.token) == Some(token)), "taken on the file's servers");

    // The environment beats the file (the file named by its variable too).
    let (_e, lines) = start(&[], &[("REDLOCK_SERVE_CONFIG", conf_arg), ("REDLOCK_SERVE_PASSWORD", "from-env")], 2).await;
    let mut raw = Raw::connect(port_of(&lines[0])).await;
    assert!(raw.call(&["AUTH", "from-file"]).await.starts_with("-WRONGPASS"), "the file's password is overridden");
    assert_eq!(raw.call(&["AUTH", "from-env"]).await, "+OK\r\n");

    // A flag beats both.
    let (_e, lines) = start(&["--config", conf_arg, "--requirepass", "from-flag"], &[("REDLOCK_SERVE_PASSWORD", "from-env")], 2).await;
    let mut raw = Raw::connect(port_of(&lines[0])).await;
    assert!(raw.call(&["AUTH", "from-env"]).await.starts_with("-WRONGPASS"), "the variable's password is overridden");
    assert_eq!(raw.call(&["AUTH", "from-flag"]).await, "+OK\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_start_on_a_config_line_it_does_not_know() {
    let dir = tempfile::tempdir().expect("temp dir");
    let conf = dir.path().join("serve.conf");
    for (text, said) in [
        ("listen 127.0.0.1:0\n# a comment\nlistn 127.0.0.1:0\n", "serve.conf:3: unknown option 'listn'"),
        ("tls-port many\n", "serve.conf:1: invalid value 'many' for '--tls-port <PORT>'"),
        ("listen 127.0.0.1:0\nlisten 127.0.0.1:1\n", "serve.conf:2: 'listen' is given twice"),
        ("no-tcp maybe\n", "serve.conf:1: 'no-tcp' is a flag"),
        ("requirepass\n", "serve.conf:1: 'requirepass' needs a value"),
    ] {
        std::fs::write(&conf, text).expect("write the config file");
        let ran = run(serve_command(&["--config", conf.to_str().expect("UTF-8")], &[]), REPLY, "serve with a bad config").await;
        assert_eq!(ran.code, Some(2), "a usage error: {ran:?}");
        assert!(ran.stderr.contains(said), "{said:?} not in {:?}", ran.stderr);
    }
    let missing = dir.path().join("missing.conf");
    let ran = run(serve_command(&["--config", missing.to_str().expect("UTF-8")], &[]), REPLY, "serve without its config").await;
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("missing.conf: cannot read it"), "{:?}", ran.stderr);
}
