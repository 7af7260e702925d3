//! One connection of `redlock serve`: its protocol, name and login, and
//! the commands a Redis client sends around the lock commands (HELLO,
//! AUTH, PING, CLIENT, COMMAND, INFO, ...), answered as redis-server
//! answers them.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::AsyncRead;
use tokio_util::sync::CancellationToken;

use super::observe::{self, Subscriptions};
use super::resp::{printable, wrong_arity, Reply};
use super::state::{Next, Shared};
use super::{lock, sets, view};

pub struct Session {
    pub id: u64,
    pub resp3: bool,
    name: Option<Vec<u8>>,
    authenticated: bool,
    pub shared: Arc<Shared>,
    /// Cancelled when a hold bound to this connection may be lost: the
    /// connection is then closed (`binding`).
    pub lost: CancellationToken,
    /// The channels this connection follows (`SUBSCRIBE`).
    pub subscriptions: Subscriptions,
}

/// The commands this endpoint serves: name, arity (negative: at least),
/// flags, as `COMMAND` lists them.
const SERVED: &[(&str, i64, &[&str])] = &[
    ("lock.acquire", -4, &["write", "denyoom"]),
    ("lock.release", 3, &["write", "fast"]),
    ("lock.extend", 4, &["write", "fast"]),
    ("lock.info", 2, &["readonly", "fast"]),
    ("lock.proclaim", 4, &["write", "denyoom", "fast"]),
    ("subscribe", -2, &["pubsub", "noscript", "loading", "stale"]),
    ("unsubscribe", -1, &["pubsub", "noscript", "loading", "stale"]),
    ("psubscribe", -2, &["pubsub", "noscript", "loading", "stale"]),
    ("punsubscribe", -1, &["pubsub", "noscript", "loading", "stale"]),
    ("lock.macquire", -5, &["write", "denyoom", "movablekeys"]),
    ("lock.mrelease", -4, &["write", "fast", "movablekeys"]),
    ("lock.mextend", -5, &["write", "fast", "movablekeys"]),
    ("lock.waiters", -2, &["readonly"]),
    ("hello", -1, &["noscript", "loading", "stale", "fast", "no_auth"]),
    ("auth", -2, &["noscript", "loading", "stale", "fast", "no_auth"]),
    ("ping", -1, &["fast"]),
    ("echo", 2, &["fast"]),
    ("select", 2, &["loading", "stale", "fast"]),
    ("client", -2, &[]),
    ("command", -1, &["loading", "stale"]),
    ("info", -1, &["loading", "stale"]),
    ("quit", -1, &["loading", "stale", "fast", "no_auth"]),
    ("reset", 1, &["noscript", "loading", "stale", "fast", "no_auth"]),
];

impl Session {
    pub fn new(id: u64, shared: &Arc<Shared>) -> Session {
        Session {
            id,
            resp3: false,
            name: None,
            authenticated: shared.users.open_to_all(),
            shared: Arc::clone(shared),
            lost: CancellationToken::new(),
            subscriptions: Subscriptions::new(shared),
        }
    }

    /// Runs one request (`args`, not empty). `reader` and `pending`: the
    /// connection's input, read on while a lock command waits, so that a
    /// client that goes away gives its wait up.
    pub async fn run<R: AsyncRead + Unpin>(&mut self, args: &[Vec<u8>], reader: &mut R, pending: &mut Vec<u8>) -> (Option<Reply>, Next) {
        let Some((name, rest)) = args.split_first() else { return (None, Next::Serve) };
        let command = String::from_utf8_lossy(name).to_ascii_lowercase();
        if !self.authenticated && !matches!(command.as_str(), "auth" | "hello" | "quit") {
            return (Some(Reply::error("NOAUTH Authentication required.")), Next::Serve);
        }
        if let Some(refused) = self.refused_in_subscribe_mode(&command) {
            return (Some(refused), Next::Serve);
        }
        let reply = match command.as_str() {
            "lock.acquire" | "lock.release" | "lock.extend" => {
                let client = lock::Client { id: self.id, lost: &self.lost };
                return lock::run(&self.shared, client, &command, rest, reader, pending).await;
            }
            "lock.proclaim" => observe::proclaim(&self.shared, rest).await,
            "subscribe" => self.subscriptions.subscribe(rest).await,
            "unsubscribe" => self.subscriptions.unsubscribe(rest),
            "psubscribe" => observe::psubscribe_refused(),
            "punsubscribe" => self.subscriptions.punsubscribe(rest),
            "lock.macquire" => {
                let client = lock::Client { id: self.id, lost: &self.lost };
                return sets::macquire(&self.shared, client, rest, reader, pending).await;
            }
            "lock.mrelease" => sets::mrelease(&self.shared, rest).await.unwrap_or_else(|e| e),
            "lock.mextend" => sets::mextend(&self.shared, rest).await.unwrap_or_else(|e| e),
            "lock.info" => view::info(&self.shared, rest).await.unwrap_or_else(|e| e),
            "lock.waiters" => view::waiters(&self.shared, rest).await.unwrap_or_else(|e| e),
            "quit" => return (Some(Reply::ok()), Next::Close),
            "hello" => self.hello(rest),
            "auth" => self.auth(rest),
            "ping" => self.ping(rest),
            "echo" => match rest {
                [text] => Reply::Bulk(text.clone()),
                _ => wrong_arity("echo"),
            },
            "select" => match rest {
                [db] if db.as_slice() == b"0" => Reply::ok(),
                [_] => Reply::error("ERR DB index is out of range (redlock serve has database 0 only)"),
                _ => wrong_arity("select"),
            },
            "client" => self.client(rest),
            "command" => command_info(rest),
            "info" => self.info().await,
            "reset" => {
                self.resp3 = false;
                self.name = None;
                self.authenticated = self.shared.users.open_to_all();
                self.subscriptions.clear();
                Reply::Status("RESET".to_string())
            }
            "lock.resize" | "lock.revoke" => Reply::error(format!(
                "ERR '{command}' is not served by this endpoint (redlock serve): an operator's command, which this endpoint's \
                 clients would all be allowed (it knows no ACL rules beyond logging in); run `redlock {}` with the servers' \
                 credentials; see docs/serve.md",
                command.trim_start_matches("lock.")
            )),
            "lock.top" | "lock.apply" => {
                Reply::error(format!("ERR '{command}' is not served yet by this endpoint (redlock serve); see docs/serve.md"))
            }
            _ => Reply::error(format!(
                "ERR unknown command '{}': this endpoint (redlock serve) serves the LOCK.* commands only",
                printable(name)
            )),
        };
        (Some(reply), Next::Serve)
    }

    /// In RESP2 a connection that follows a channel takes the pub/sub
    /// commands only, as redis-server's (RESP3 carries its messages as
    /// pushes, between any replies).
    fn refused_in_subscribe_mode(&self, command: &str) -> Option<Reply> {
        let allowed = matches!(command, "subscribe" | "unsubscribe" | "psubscribe" | "punsubscribe" | "ping" | "quit" | "reset");
        (!allowed && !self.resp3 && self.subscriptions.count() > 0).then(|| {
            Reply::error(format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                printable(command.as_bytes())
            ))
        })
    }

    fn ping(&self, rest: &[Vec<u8>]) -> Reply {
        // In RESP2 subscribe mode redis-server answers ["pong", text].
        if !self.resp3 && self.subscriptions.count() > 0 {
            return match rest {
                [] => Reply::Array(vec![Reply::bulk("pong"), Reply::bulk("")]),
                [text] => Reply::Array(vec![Reply::bulk("pong"), Reply::Bulk(text.clone())]),
                _ => wrong_arity("ping"),
            };
        }
        match rest {
            [] => Reply::Status("PONG".to_string()),
            [text] => Reply::Bulk(text.clone()),
            _ => wrong_arity("ping"),
        }
    }

    /// `AUTH [user] password`: without a user, the `default` one.
    fn auth(&mut self, rest: &[Vec<u8>]) -> Reply {
        let users = &self.shared.users;
        let (user, password) = match rest {
            [_] if users.default_needs_no_password() => {
                return Reply::error(
                    "ERR AUTH <password> called without any password configured for the default user. \
                     Are you sure your configuration is correct?",
                );
            }
            [password] => (b"default".as_slice(), password),
            [user, password] => (user.as_slice(), password),
            _ => return wrong_arity("auth"),
        };
        if users.check(user, password) {
            self.authenticated = true;
            Reply::ok()
        } else {
            Reply::error("WRONGPASS invalid username-password pair or user is disabled.")
        }
    }

    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`.
    fn hello(&mut self, rest: &[Vec<u8>]) -> Reply {
        let mut resp3 = self.resp3;
        let mut options = rest;
        if let Some((version, more)) = rest.split_first() {
            resp3 = match version.as_slice() {
                b"2" => false,
                b"3" => true,
                v if std::str::from_utf8(v).ok().and_then(|v| v.parse::<i64>().ok()).is_some() => {
                    return Reply::error("NOPROTO unsupported protocol version");
                }
                _ => return Reply::error("ERR Protocol version is not an integer or out of range"),
            };
            options = more;
        }
        let mut name = None;
        let mut login = None;
        while let Some((option, more)) = options.split_first() {
            match (option.to_ascii_lowercase().as_slice(), more) {
                (b"auth", [user, password, after @ ..]) => {
                    login = Some((user, password));
                    options = after;
                }
                (b"setname", [n, after @ ..]) => {
                    name = Some(n);
                    options = after;
                }
                _ => return Reply::error(format!("ERR Syntax error in HELLO option '{}'", printable(option))),
            }
        }
        if let Some((user, password)) = login {
            if let Reply::Error(e) = self.auth(&[user.clone(), password.clone()]) {
                return Reply::Error(e);
            }
        }
        if !self.authenticated {
            return Reply::error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH \
                 <user> <pass> option can be used to authenticate the client and select the RESP protocol version at \
                 the same time",
            );
        }
        if let Some(n) = name {
            if let Err(e) = self.set_name(n) {
                return e;
            }
        }
        self.resp3 = resp3;
        Reply::Map(vec![
            (Reply::bulk("server"), Reply::bulk("redlock")),
            (Reply::bulk("version"), Reply::bulk(env!("CARGO_PKG_VERSION"))),
            (Reply::bulk("proto"), Reply::Int(if resp3 { 3 } else { 2 })),
            (Reply::bulk("id"), Reply::Int(i64::try_from(self.id).unwrap_or(i64::MAX))),
            (Reply::bulk("mode"), Reply::bulk("standalone")),
            (Reply::bulk("role"), Reply::bulk("master")),
            (Reply::bulk("modules"), Reply::Array(Vec::new())),
        ])
    }

    fn set_name(&mut self, name: &[u8]) -> Result<(), Reply> {
        if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
            return Err(Reply::error("ERR Client names cannot contain spaces, newlines or special characters."));
        }
        self.name = (!name.is_empty()).then(|| name.to_vec());
        Ok(())
    }

    /// `CLIENT SETNAME | GETNAME | ID | SETINFO | INFO`.
    fn client(&mut self, rest: &[Vec<u8>]) -> Reply {
        let Some((sub, args)) = rest.split_first() else { return wrong_arity("client") };
        match (sub.to_ascii_lowercase().as_slice(), args) {
            (b"setname", [name]) => self.set_name(name).map_or_else(|e| e, |()| Reply::ok()),
            (b"getname", []) => self.name.clone().map_or(Reply::Nil, Reply::Bulk),
            (b"id", []) => Reply::Int(i64::try_from(self.id).unwrap_or(i64::MAX)),
            (b"setinfo", [_, _]) => Reply::ok(),
            (b"info", []) => {
                let name = self.name.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
                let resp = if self.resp3 { 3 } else { 2 };
                Reply::bulk(format!("id={} name={name} db=0 resp={resp} lib=redlock-serve\n", self.id))
            }
            (b"setname" | b"getname" | b"id" | b"setinfo" | b"info", _) => {
                Reply::error(format!("ERR wrong number of arguments for 'client|{}' command", printable(sub).to_ascii_lowercase()))
            }
            _ => Reply::error(format!("ERR unknown subcommand '{}'. Try CLIENT HELP.", printable(sub))),
        }
    }

    /// `INFO`: a server section and a `# redlock` one: the servers and
    /// whether each answers now, the quorum, and this endpoint's clients
    /// and acquisitions.
    async fn info(&self) -> Reply {
        let shared = &self.shared;
        let redlock = &shared.redlock;
        let summary = redlock.summary().await;
        let mut text = String::new();
        let _ = write!(
            text,
            "# Server\r\nredis_version:7.2.0\r\nredlock_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id()
        );
        let reachable = summary.iter().filter(|s| s.reachable).count();
        let _ = write!(
            text,
            "# redlock\r\nservers:{}\r\nservers_reachable:{reachable}\r\nquorum:{}\r\nconnected_clients:{}\r\n\
             acquisitions_waiting:{}\r\nacquisitions_granted:{}\r\nacquisitions_refused:{}\r\nsession_holds:{}\r\n",
            summary.len(),
            redlock.quorum(),
            shared.connected.load(Ordering::Relaxed),
            shared.waiting.load(Ordering::Relaxed),
            shared.granted.load(Ordering::Relaxed),
            shared.refused.load(Ordering::Relaxed),
            shared.bindings.count(),
        );
        let _ = write!(text, "subscribers:{}\r\nobservers:{}\r\n", observe::subscribers(shared), observe::observers(shared));
        for (i, s) in summary.iter().enumerate() {
            let _ = write!(text, "server{i}:url={},reachable={}\r\n", s.server.replace([',', '\r', '\n'], "_"), u8::from(s.reachable));
        }
        Reply::bulk(text)
    }
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name...`, `COMMAND DOCS`:
/// the served commands, in the shape of redis-server's replies.
fn command_info(rest: &[Vec<u8>]) -> Reply {
    let Some((sub, names)) = rest.split_first() else { return Reply::Array(SERVED.iter().map(entry).collect()) };
    match sub.to_ascii_lowercase().as_slice() {
        b"count" => Reply::Int(i64::try_from(SERVED.len()).unwrap_or(i64::MAX)),
        b"info" if names.is_empty() => Reply::Array(SERVED.iter().map(entry).collect()),
        b"info" => Reply::Array(
            names
                .iter()
                .map(|n| {
                    let n = String::from_utf8_lossy(n).to_ascii_lowercase();
                    SERVED.iter().find(|c| c.0 == n).map_or(Reply::Nil, entry)
                })
                .collect(),
        ),
        // No documentation is served: an empty map is a well-formed reply.
        b"docs" => Reply::Map(Vec::new()),
        b"list" => Reply::Array(SERVED.iter().map(|c| Reply::bulk(c.0)).collect()),
        _ => Reply::error(format!("ERR unknown subcommand '{}'. Try COMMAND HELP.", printable(sub))),
    }
}

fn entry(command: &(&str, i64, &[&str])) -> Reply {
    let (name, arity, flags) = *command;
    // A set's keys move with numkeys (the module's movable keys).
    let key = i64::from(name.starts_with("lock.") && !name.starts_with("lock.m"));
    Reply::Array(vec![
        Reply::bulk(name),
        Reply::Int(arity),
        Reply::Array(flags.iter().map(|f| Reply::Status((*f).to_string())).collect()),
        Reply::Int(key),
        Reply::Int(key),
        Reply::Int(key),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}
