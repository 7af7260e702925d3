//! ACL and command metadata, on Redis 7.0 and on Valkey 8.1.
//!
//! Everywhere: real arity, a read-only key spec for LOCK.INFO (so `%R~`
//! users can read a lock) and docs, through the command-info API (7.0+);
//! restricting by command name. Where the server can categorise module
//! commands (Redis 7.2+, Valkey 8.1): ACQUIRE/RELEASE/EXTEND/PROCLAIM in
//! @write and @fast, ACQUIRE also in @blocking, INFO in @read and @fast.

use crate::common;

use std::path::PathBuf;

use common::*;
use redis::{Connection, Value};

/// The servers these tests run on: the suite's server, and Valkey 8.1
/// (installed by `make test`; the test fails without it, rather than
/// passing without having checked it).
pub(crate) fn servers() -> Vec<(String, PathBuf)> {
    let valkey = valkey_binary().expect("Valkey 8.1 not found: run `make deps` or set REDISLOCK_VALKEY");
    vec![("default".into(), server_binary()), ("valkey-8.1".into(), valkey)]
}

/// A connection authenticated as `name`, a user made with `rules` (ACL
/// SETUSER ... reset on >pw RULES).
pub(crate) fn user(srv: &Server, name: &str, rules: &[&str]) -> Connection {
    let mut admin = srv.conn();
    let mut setuser = cmd("ACL");
    setuser.arg("SETUSER").arg(name).arg("reset").arg("on").arg(">pw");
    for r in rules {
        setuser.arg(*r);
    }
    ok_cmd(&mut admin, &setuser);
    let mut c = srv.conn();
    ok_cmd(&mut c, cmd("AUTH").arg(name).arg("pw"));
    c
}

/// The COMMAND INFO entry of one command (name, arity, flags, ..., key specs at 8).
fn command_info(c: &mut Connection, command: &str) -> Vec<Value> {
    match ok_cmd(c, cmd("COMMAND").arg("INFO").arg(command)) {
        Value::Array(mut entries) if entries.len() == 1 => match entries.remove(0) {
            Value::Array(entry) => entry,
            other => panic!("COMMAND INFO {command}: {other:?}"),
        },
        other => panic!("COMMAND INFO {command}: {other:?}"),
    }
}

fn is_noperm(r: Result<Value, String>) -> bool {
    matches!(r, Err(e) if e.starts_with("NOPERM"))
}

/// Whether the server categorises module commands (checked from outside:
/// LOCK.INFO lists ACL categories in COMMAND INFO).
fn categorises(c: &mut Connection) -> bool {
    let v = ok_cmd(c, cmd("COMMAND").arg("INFO").arg("lock.info"));
    format!("{v:?}").contains("@read")
}

#[test]
fn arity_key_specs_and_docs_are_declared() {
    for (name, bin) in servers() {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut c = srv.conn();
        let arities =
            [("lock.acquire", -4), ("lock.release", 3), ("lock.extend", 4), ("lock.proclaim", 4), ("lock.info", 2), ("lock.apply", -5)];
        for (command, arity) in arities {
            let entry = command_info(&mut c, command);
            assert_eq!(entry.get(1), Some(&Value::Int(arity)), "{name}: arity of {command}: {entry:?}");
        }
        for (args, command) in [(&["k"][..], "lock.acquire"), (&["k", "o", "1"][..], "lock.release"), (&["k", "extra"][..], "lock.info")] {
            let mut c2 = cmd(command);
            for a in args {
                c2.arg(*a);
            }
            let e = expect_err(&mut c, &c2);
            assert_eq!(e, format!("ERR wrong number of arguments for '{command}' command"), "{name}");
        }
        let docs = format!("{:?}", ok_cmd(&mut c, cmd("COMMAND").arg("DOCS").arg("lock.acquire")));
        assert!(docs.contains("fencing token"), "{name}: summary in COMMAND DOCS: {docs}");
        // LOCK.INFO reads its key (RO); ACQUIRE reads and writes it (RW).
        let key_spec = |c: &mut Connection, command: &str| format!("{:?}", command_info(c, command).get(8));
        let ro = key_spec(&mut c, "lock.info");
        assert!(ro.contains("\"RO\"") && !ro.contains("\"RW\""), "{name}: {ro}");
        let rw = key_spec(&mut c, "lock.acquire");
        assert!(rw.contains("\"RW\""), "{name}: {rw}");
    }
}

#[test]
fn read_only_key_patterns_read_locks_and_cannot_take_them() {
    for (name, bin) in servers() {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut admin = srv.conn();
        grant(&mut admin, "app:x", "owner", 60_000);
        let mut reader = user(&srv, "reader", &["%R~app:*", "+@all"]);
        let i = info(&mut reader, b"app:x").unwrap_or_else(|| panic!("{name}: %R~app:* reads LOCK.INFO"));
        assert_eq!(i.owner, b"owner");
        for c in [
            cmd("LOCK.ACQUIRE").arg("app:y").arg("me").arg(1000).clone(),
            cmd("LOCK.RELEASE").arg("app:x").arg("owner").clone(),
            cmd("LOCK.EXTEND").arg("app:x").arg("owner").arg(1000).clone(),
        ] {
            assert!(is_noperm(try_cmd(&mut reader, &c)), "{name}: a read-only key pattern may not write");
        }
        assert_eq!(info(&mut admin, b"app:x").expect("still held").owner, b"owner");
    }
}

#[test]
fn restricting_by_command_name_works_everywhere() {
    for (name, bin) in servers() {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut admin = srv.conn();
        grant(&mut admin, "k", "owner", 60_000);
        let mut observer = user(&srv, "observer", &["~*", "+@all", "-lock.acquire", "-lock.release", "-lock.extend"]);
        assert!(is_noperm(try_cmd(&mut observer, cmd("LOCK.ACQUIRE").arg("j").arg("me").arg(1000))), "{name}");
        assert!(is_noperm(try_cmd(&mut observer, cmd("LOCK.RELEASE").arg("k").arg("owner"))), "{name}");
        assert!(is_noperm(try_cmd(&mut observer, cmd("LOCK.EXTEND").arg("k").arg("owner").arg(1000))), "{name}");
        assert!(info(&mut observer, b"k").is_some(), "{name}: LOCK.INFO still allowed");
    }
}

#[test]
fn categories_where_the_server_supports_them() {
    let mut checked = Vec::new();
    for (name, bin) in servers() {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut admin = srv.conn();
        if !categorises(&mut admin) {
            continue; // Redis 7.0: no API for it; see the test above.
        }
        checked.push(name.clone());
        grant(&mut admin, "k", "owner", 60_000);
        let mut no_write = user(&srv, "nowrite", &["~*", "+@all", "-@write"]);
        for c in [
            cmd("LOCK.ACQUIRE").arg("j").arg("me").arg(1000).clone(),
            cmd("LOCK.RELEASE").arg("k").arg("owner").clone(),
            cmd("LOCK.EXTEND").arg("k").arg("owner").arg(1000).clone(),
            cmd("LOCK.PROCLAIM").arg("k").arg("owner").arg("v").clone(),
        ] {
            assert!(is_noperm(try_cmd(&mut no_write, &c)), "{name}: -@write");
        }
        assert!(info(&mut no_write, b"k").is_some(), "{name}: LOCK.INFO is not @write");
        let mut read_only = user(&srv, "readonly", &["~*", "+@read"]);
        assert!(info(&mut read_only, b"k").is_some(), "{name}: +@read runs LOCK.INFO");
        assert!(try_cmd(&mut read_only, &cmd("LOCK.TOP")).is_ok(), "{name}: +@read runs LOCK.TOP");
        // LOCK.TOP names keys beyond the user's patterns, as SCAN does.
        let mut no_keyspace = user(&srv, "nokeyspace", &["~*", "+@all", "-@keyspace"]);
        assert!(is_noperm(try_cmd(&mut no_keyspace, &cmd("LOCK.TOP"))), "{name}: -@keyspace");
        assert!(info(&mut no_keyspace, b"k").is_some(), "{name}: LOCK.INFO is not @keyspace");
        assert!(is_noperm(try_cmd(&mut read_only, cmd("LOCK.ACQUIRE").arg("j").arg("me").arg(1000))), "{name}");
        let mut no_blocking = user(&srv, "noblock", &["~*", "+@all", "-@blocking"]);
        assert!(
            is_noperm(try_cmd(&mut no_blocking, cmd("LOCK.ACQUIRE").arg("k").arg("me").arg(1000).arg("WAIT").arg(100))),
            "{name}: -@blocking"
        );
        assert!(grant(&mut srv.conn(), "free", "me", 1000) > 0);
        let mut fast_only = user(&srv, "fast", &["~*", "+@fast"]);
        assert!(info(&mut fast_only, b"k").is_some(), "{name}: @fast");
        assert_eq!(release(&mut fast_only, b"k", b"owner"), 1, "{name}: @fast");
    }
    assert!(checked.contains(&"valkey-8.1".to_string()), "Valkey 8.1 categorises module commands: {checked:?}");
}

/// A RESP2 field/value array (COMMAND DOCS) as pairs.
fn fields(v: &Value) -> Vec<(String, Value)> {
    let Value::Array(items) = v else { panic!("expected a field/value array: {v:?}") };
    items
        .chunks(2)
        .map(|pair| match pair {
            [Value::BulkString(k), value] => (String::from_utf8_lossy(k).into_owned(), value.clone()),
            [Value::SimpleString(k), value] => (k.clone(), value.clone()),
            other => panic!("not a field/value pair: {other:?}"),
        })
        .collect()
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        Value::Array(items) | Value::Set(items) => items.iter().map(text).collect::<Vec<_>>().join(","),
        other => panic!("not text: {other:?}"),
    }
}

/// One argument of COMMAND DOCS as "name type [token T] [flags F]".
fn describe_argument(arg: &Value) -> String {
    let f = fields(arg);
    let get = |k: &str| f.iter().find(|(name, _)| name == k).map(|(_, v)| text(v));
    let mut out = format!("{} {}", get("name").unwrap_or_default(), get("type").unwrap_or_default());
    if let Some(t) = get("token") {
        out.push_str(&format!(" token {t}"));
    }
    if let Some(flags) = get("flags") {
        out.push_str(&format!(" flags {flags}"));
    }
    out
}

fn documented_arguments(c: &mut Connection, command: &str) -> Vec<String> {
    let reply = ok_cmd(c, cmd("COMMAND").arg("DOCS").arg(command));
    let Value::Array(outer) = &reply else { panic!("COMMAND DOCS {command}: {reply:?}") };
    let [_, doc] = outer.as_slice() else { panic!("COMMAND DOCS {command}: {reply:?}") };
    let args = fields(doc).into_iter().find(|(k, _)| k == "arguments").map(|(_, v)| v);
    match args {
        Some(Value::Array(args)) => args.iter().map(describe_argument).collect(),
        other => panic!("COMMAND DOCS {command} lists no arguments: {other:?}"),
    }
}

fn flags_of(c: &mut Connection, command: &str) -> Vec<String> {
    match command_info(c, command).get(2) {
        Some(Value::Array(f)) | Some(Value::Set(f)) => f.iter().map(text).collect(),
        other => panic!("COMMAND INFO {command} flags: {other:?}"),
    }
}

/// COMMAND DOCS lists each command's arguments (it listed none), and
/// COMMAND INFO's flags say what each command does: LOCK.ACQUIRE may
/// block (WAIT), as BLPOP does (the `blocking` flag was missing).
#[test]
fn command_docs_list_the_arguments_and_command_info_the_blocking_flag() {
    for (name, bin) in servers() {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut c = srv.conn();
        let expected: [(&str, &[&str]); 6] = [
            (
                "lock.acquire",
                &[
                    "key key",
                    "owner string",
                    "ttl-ms integer",
                    "shared pure-token token SHARED flags optional",
                    "holders integer token LIMIT flags optional",
                    "permits integer token PERMITS flags optional",
                    "min-token integer token FENCE flags optional",
                    "timeout-ms integer token WAIT flags optional",
                    "session pure-token token SESSION flags optional",
                    "lock-delay-ms integer token DELAY flags optional",
                    "value string token VALUE flags optional",
                ],
            ),
            ("lock.release", &["key key", "owner string"]),
            ("lock.proclaim", &["key key", "owner string", "value string"]),
            ("lock.extend", &["key key", "owner string", "ttl-ms integer"]),
            ("lock.info", &["key key"]),
            ("lock.apply", &["key key", "owner string", "token integer", "deadline-unix-ms unix-time"]),
        ];
        for (command, args) in expected {
            assert_eq!(documented_arguments(&mut c, command), args, "{name}: COMMAND DOCS {command}");
        }
        let flags: [(&str, &[&str], &[&str]); 6] = [
            ("lock.acquire", &["write", "denyoom", "fast", "blocking"], &["readonly"]),
            ("lock.release", &["write", "fast"], &["readonly", "blocking", "denyoom"]),
            ("lock.extend", &["write", "fast"], &["readonly", "blocking", "denyoom"]),
            ("lock.proclaim", &["write", "denyoom", "fast"], &["readonly", "blocking"]),
            ("lock.info", &["readonly", "fast"], &["write", "blocking", "denyoom"]),
            ("lock.apply", &["write"], &["readonly", "blocking", "fast"]),
        ];
        for (command, must, must_not) in flags {
            let got = flags_of(&mut c, command);
            for f in must {
                assert!(got.iter().any(|g| g == f), "{name}: {command} lacks {f}: {got:?}");
            }
            for f in must_not {
                assert!(!got.iter().any(|g| g == f), "{name}: {command} must not have {f}: {got:?}");
            }
        }
    }
}

/// The NOPERM error the server gives `user` for LOCK.ACQUIRE of `key` now.
fn servers_own_refusal(srv: &Server, user: &str, key: &str) -> String {
    let mut c = srv.conn();
    ok_cmd(&mut c, cmd("AUTH").arg(user).arg("pw"));
    expect_err(&mut c, cmd("LOCK.ACQUIRE").arg(key).arg("probe").arg(1000))
}

/// Redis checks ACLs when a command starts; a waiter's LOCK.ACQUIRE started
/// before it blocked. A waiter whose user lost the key or the command
/// while it waited is refused when it is served, with the NOPERM error the
/// server gives that user's LOCK.ACQUIRE now, and the next waiter gets the
/// lock (before, the first waiter was granted it, where BLPOP's is refused).
#[test]
fn a_waiter_whose_rights_were_taken_away_is_refused_when_served() {
    for (name, bin) in servers() {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut admin = srv.conn();
        grant(&mut admin, "k", "holder", 60_000);
        let taken_away =
            [("nokey", "resetkeys"), ("readkey", "resetkeys %R~*"), ("nothing", "resetkeys -@all"), ("nocmd", "-lock.acquire")];
        let mut waiting = Vec::new();
        for (n, (who, _)) in taken_away.iter().chain([("kept", "")].iter()).enumerate() {
            let mut c = user(&srv, who, &["~*", "+@all"]);
            send_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg(*who).arg(60_000).arg("WAIT").arg(0));
            wait_waiters(&mut admin, b"k", n as i64 + 1);
            waiting.push((*who, c));
        }
        for (who, rules) in taken_away {
            let mut setuser = cmd("ACL");
            setuser.arg("SETUSER").arg(who);
            for r in rules.split(' ') {
                setuser.arg(r);
            }
            ok_cmd(&mut admin, &setuser);
        }
        assert_eq!(release(&mut admin, b"k", b"holder"), 1);
        let mut token = None;
        for (who, mut c) in waiting {
            let reply = recv_reply(&mut c, who);
            if who == "kept" {
                token = match reply {
                    Ok(Value::Int(t)) => Some(t),
                    other => panic!("{name}: the waiter that kept its rights: {other:?}"),
                };
                continue;
            }
            let own = servers_own_refusal(&srv, who, "k");
            assert!(own.starts_with("NOPERM"), "{name}: {who} is refused by the server itself: {own}");
            assert_eq!(reply, Err(own), "{name}: {who} gets the server's own refusal at handoff");
        }
        let i = info(&mut admin, b"k").expect("the lock went to the next waiter");
        assert_eq!((i.owner.as_slice(), Some(i.token), i.waiters), (&b"kept"[..], token, 0), "{name}");
    }
}
