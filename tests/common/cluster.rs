//! A real Redis Cluster for tests: masters and replicas started by the test
//! (each a `Server` with the module), joined by `redis-cli --cluster
//! create`, torn down with them.
//!
//! Node ports are taken from 7100-9999 so that the cluster bus port (port +
//! 10000) stays below the kernel's ephemeral range, where other tests'
//! `127.0.0.1:0` ports come from; a taken port or bus port shows up as a
//! failed start and another is tried.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Connection, Value};

use super::{cmd, info_field, ok_cmd, wait_until, Server};

/// How long a dead master takes to be replaced: well above
/// `cluster-node-timeout` plus an election on a loaded 2-core machine.
pub const FAILOVER_DEADLINE: Duration = Duration::from_secs(30);

pub const NODE_TIMEOUT_MS: &str = "2000";

pub struct Cluster {
    pub nodes: Vec<Server>,
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct NodeLine {
    pub id: String,
    pub port: u16,
    pub master: bool,
    pub failed: bool,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    pub slots: Vec<(u16, u16)>,
}

impl Cluster {
    /// `masters` masters with `replicas` replicas each, all slots covered,
    /// every node agreeing the cluster is ok and every replica in sync.
    pub fn start(masters: usize, replicas: usize) -> Cluster {
        let total = masters * (replicas + 1);
        let mut rng = seed();
        // `redis-cli --cluster create` waits for ever for a node that never
        // joins: it is given CREATE_WITHIN, then the nodes are stopped and
        // new ones, on other ports, tried, up to CREATE_ATTEMPTS times.
        const CREATE_WITHIN: Duration = Duration::from_secs(60);
        const CREATE_ATTEMPTS: usize = 3;
        let mut failures = Vec::new();
        let nodes = loop {
            let nodes: Vec<Server> = (0..total).map(|_| start_node(&mut rng)).collect();
            let mut create = Command::new("redis-cli");
            create.arg("--cluster").arg("create");
            for n in &nodes {
                create.arg(format!("127.0.0.1:{}", n.port));
            }
            create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
            create.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
            let mut child = create.spawn().expect("run redis-cli --cluster create (package redis-tools)");
            let started = std::time::Instant::now();
            let done = loop {
                match child.try_wait() {
                    Ok(Some(_)) => break true,
                    Ok(None) if started.elapsed() < CREATE_WITHIN => std::thread::sleep(Duration::from_millis(50)),
                    _ => break false,
                }
            };
            if !done {
                let _ = child.kill();
                let _ = child.wait();
                failures.push(format!("no cluster within {CREATE_WITHIN:?}"));
            } else {
                let out = child.wait_with_output().expect("redis-cli's output");
                let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
                if out.status.success() && text.contains("All 16384 slots covered") {
                    break nodes;
                }
                failures.push(format!("failed:\n{text}"));
            }
            assert!(failures.len() < CREATE_ATTEMPTS, "redis-cli --cluster create, {CREATE_ATTEMPTS} times: {failures:?}");
        };
        let cluster = Cluster { nodes };
        cluster.wait_healthy(total);
        cluster
    }

    /// Every live node sees `expected` nodes and state ok; every replica's
    /// link to its master is up.
    pub fn wait_healthy(&self, expected: usize) {
        wait_until(Duration::from_secs(30), "cluster state ok on every node, replicas in sync", || {
            self.nodes.iter().all(|n| {
                let mut c = n.conn();
                let info = cluster_info(&mut c);
                let ok = info.contains("cluster_state:ok") && info.contains(&format!("cluster_known_nodes:{expected}"));
                ok && (info_field(&mut c, "replication", "role") == "master"
                    || info_field(&mut c, "replication", "master_link_status") == "up")
            })
        });
    }

    /// The index in `nodes` of the node listening on `port`.
    pub fn index_of_port(&self, port: u16) -> usize {
        self.nodes.iter().position(|n| n.port == port).unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// `CLUSTER NODES` as node `viewer` sees it.
    pub fn topology(&self, viewer: usize) -> Vec<NodeLine> {
        let mut c = self.nodes[viewer].conn();
        let text = match ok_cmd(&mut c, cmd("CLUSTER").arg("NODES")) {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            Value::VerbatimString { text, .. } => text,
            other => panic!("CLUSTER NODES replied {other:?}"),
        };
        text.lines().filter(|l| !l.trim().is_empty()).map(parse_node_line).collect()
    }

    /// Index of the master serving `slot`, as node `viewer` sees it.
    pub fn owner_of(&self, viewer: usize, slot: u16) -> usize {
        let line = self
            .topology(viewer)
            .into_iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .unwrap_or_else(|| panic!("no master serves slot {slot}"));
        self.index_of_port(line.port)
    }

    /// Index of a replica of the master at `master`.
    pub fn replica_of(&self, master: usize) -> usize {
        let id = node_id(&self.nodes[master]);
        let line = self
            .topology(master)
            .into_iter()
            .find(|n| n.master_id.as_deref() == Some(id.as_str()))
            .unwrap_or_else(|| panic!("node {master} has no replica"));
        self.index_of_port(line.port)
    }

    /// Index of a master other than `not`.
    pub fn other_master(&self, not: usize) -> usize {
        let line = self
            .topology(not)
            .into_iter()
            .find(|n| n.master && !n.failed && n.port != self.nodes[not].port && !n.slots.is_empty())
            .expect("another master");
        self.index_of_port(line.port)
    }

    /// The lowest slot `master` serves.
    pub fn first_slot(&self, master: usize) -> u16 {
        let port = self.nodes[master].port;
        let line = self.topology(master).into_iter().find(|n| n.port == port).expect("node sees itself");
        line.slots.iter().map(|&(a, _)| a).min().expect("master serves slots")
    }

    /// A seed URL list for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| format!("redis://127.0.0.1:{}/", n.port)).collect()
    }
}

/// `CLUSTER MYID`.
pub fn node_id(server: &Server) -> String {
    let mut c = server.conn();
    match ok_cmd(&mut c, cmd("CLUSTER").arg("MYID")) {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::SimpleString(s) => s,
        other => panic!("CLUSTER MYID replied {other:?}"),
    }
}

pub fn cluster_info(c: &mut Connection) -> String {
    match ok_cmd(c, cmd("CLUSTER").arg("INFO")) {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("CLUSTER INFO replied {other:?}"),
    }
}

fn parse_node_line(line: &str) -> NodeLine {
    let f: Vec<&str> = line.split_whitespace().collect();
    assert!(f.len() >= 8, "short CLUSTER NODES line: {line}");
    let port = f[1]
        .split('@')
        .next()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line}"));
    let flags = f[2];
    let slots = f[8..]
        .iter()
        .filter(|s| !s.starts_with('['))
        .map(|s| match s.split_once('-') {
            Some((a, b)) => (a.parse().expect("slot"), b.parse().expect("slot")),
            None => {
                let one = s.parse().expect("slot");
                (one, one)
            }
        })
        .collect();
    NodeLine {
        id: f[0].to_string(),
        port,
        master: flags.contains("master"),
        failed: flags.contains("fail"),
        master_id: (f[3] != "-").then(|| f[3].to_string()),
        slots,
    }
}

/// The hash slot of a key (CRC16/XMODEM of the key or its `{tag}`, mod
/// 16384), as Redis computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    let mut hashed = key;
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                hashed = &key[open + 1..open + 1 + len];
            }
        }
    }
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= (byte as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

/// A key named `<prefix><n>` that hashes to `slot`.
pub fn key_in_slot(prefix: &str, slot: u16) -> String {
    (0..10_000_000u64)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| key_slot(k.as_bytes()) == slot)
        .unwrap_or_else(|| panic!("no key {prefix}<n> hashes to slot {slot}"))
}

fn seed() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    nanos ^ ((std::process::id() as u64) << 32) | 1
}

fn next_port(state: &mut u64) -> u16 {
    // xorshift64: a spread of candidates without a dependency.
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    7100 + (*state % 2900) as u16
}

fn free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok() && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok()
}

fn start_node(rng: &mut u64) -> Server {
    let args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        NODE_TIMEOUT_MS,
        // A replica whose link just dropped may still take over (the
        // lost-grant failover test cuts it on purpose).
        "--cluster-replica-validity-factor",
        "0",
    ];
    let mut last = String::new();
    for _ in 0..40 {
        let port = next_port(rng);
        if !free(port) {
            continue;
        }
        match Server::try_start_at(port, &[], &args) {
            Ok(s) => return s,
            Err(e) if e.port_taken() || e.log_tail.contains("in use") => last = e.to_string(),
            Err(e) => panic!("cluster node did not start: {e}"),
        }
    }
    panic!("no free port pair for a cluster node; last error: {last}")
}
