//! What `LOCK.INFO`, `LOCK.TOP` and `INFO redislock` replies say, as data.

use super::*;

/// One server's view of a resource, for `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceStatus {
    pub server: String,
    pub reachable: bool,
    pub owner: Option<String>,
    pub token: Option<i64>,
    /// Remaining lease in ms (-1: no TTL).
    pub pttl: Option<i64>,
    pub waiters: Option<i64>,
    /// A semaphore's limit (`LOCK.INFO`'s `limit`); `None` for a lock.
    pub limit: Option<i64>,
    /// Restart quarantine left on the instance, in ms (0: none; `None`:
    /// unknown, e.g. script mode).
    pub quarantine_ms_left: Option<i64>,
    /// What went wrong, as text.
    pub error: Option<String>,
    /// What went wrong, classified (`Timeout`, `Unreachable`, `AuthFailed`,
    /// `ModuleMissing`, `Failed`); `None` when the server answered.
    pub failure: Option<Outcome>,
    /// Who holds it there (`LOCK.INFO`'s holders), oldest first.
    pub holders: Vec<HolderState>,
    /// Who waits for it there (`LOCK.WAITERS`), the head first.
    pub line: Vec<WaiterState>,
}

/// The exclusive holder of a key on one server, as an election reads it
/// (`LOCK.INFO`'s owner, token and value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub owner: String,
    pub token: Option<i64>,
    /// The value stored with the hold; `None` when it has none.
    pub value: Option<String>,
}

/// A LOCK.INFO reply as `Holding`: `None` when nobody holds the key, or
/// it is held shared (no single owner), or the reply is not one.
pub(super) fn holding_of(reply: Value) -> Option<Holding> {
    let mut held = Holding { owner: String::new(), token: None, value: None };
    let mut owner = None;
    for (k, v) in field_pairs(reply)? {
        let Ok(k) = String::from_redis_value(k) else { continue };
        match k.as_str() {
            "owner" => owner = Option::<Vec<u8>>::from_redis_value(v).ok().flatten(),
            "token" => held.token = i64::from_redis_value(v).ok(),
            "value" => held.value = Option::<Vec<u8>>::from_redis_value(v).ok().flatten().map(|b| String::from_utf8_lossy(&b).into_owned()),
            _ => {}
        }
    }
    held.owner = String::from_utf8_lossy(&owner?).into_owned();
    Some(held)
}

/// One holder on one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderState {
    pub owner: String,
    pub token: Option<i64>,
    pub pttl: i64,
    /// How long it has held the lock, ms (`None`: a plain-string lock).
    pub held_ms: Option<i64>,
    /// Bound to its connection (`SESSION`).
    pub session: bool,
    /// The value stored with this holder (a group member's, the row's
    /// seventh item); `None` when it has none.
    pub value: Option<String>,
}

/// One waiter in one server's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterState {
    pub owner: String,
    /// `exclusive` or `shared`.
    pub mode: String,
    /// The semaphore's limit a permit waits for.
    pub limit: Option<i64>,
    pub waited_ms: i64,
    /// What is left of its WAIT, ms (-1: no limit).
    pub wait_left_ms: i64,
}

/// One instance's lock service as a whole (`INFO redislock`), for
/// `status` without a resource. A cluster's nodes are added up (locks,
/// waiters) or the largest taken (quarantine, highest token).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceSummary {
    pub server: String,
    pub reachable: bool,
    pub quarantine_ms_left: Option<i64>,
    pub locks: Option<i64>,
    pub clients_waiting: Option<i64>,
    pub keys_waited: Option<i64>,
    pub highest_token: Option<i64>,
    pub error: Option<String>,
    /// What went wrong, classified, as in `InstanceStatus::failure`.
    pub failure: Option<Outcome>,
}

/// One contended lock in one server's `LOCK.TOP`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContendedLock {
    pub key: String,
    pub waiters: i64,
    /// How long the oldest of them has waited, ms.
    pub oldest_wait_ms: i64,
    /// `exclusive` or `shared`; `None` when nobody holds it.
    pub mode: Option<String>,
    pub holders: i64,
    /// How long the longest holder has held it, ms (`None`: unknown or free).
    pub longest_hold_ms: Option<i64>,
}

/// One instance's most contended locks (`LOCK.TOP`; a cluster's masters
/// together), for `redlock top`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceTop {
    pub server: String,
    pub reachable: bool,
    pub locks: Vec<ContendedLock>,
    pub error: Option<String>,
    /// What went wrong, classified, as in `InstanceStatus::failure`.
    pub failure: Option<Outcome>,
}

/// `redislock_quarantine_ms_left` of an `INFO redislock` reply; from a
/// cluster (one reply per node) the longest, since any node may refuse.
pub(super) fn quarantine_left(reply: Value) -> Option<i64> {
    info_texts(reply).iter().filter_map(|text| info_field(text, "redislock_quarantine_ms_left")).max()
}

/// The text of each node's INFO reply: one for a server, one per node for
/// a cluster.
pub(super) fn info_texts(reply: Value) -> Vec<String> {
    match reply {
        Value::Map(per_node) => per_node.into_iter().flat_map(|(_, v)| info_texts(v)).collect(),
        other => String::from_redis_value(other).ok().into_iter().collect(),
    }
}

/// `info_texts`, each with the node that gave it within a Cluster.
pub(super) fn info_texts_by_node(reply: Value) -> Vec<(Option<String>, String)> {
    match reply {
        Value::Map(per_node) => per_node
            .into_iter()
            .filter_map(|(node, v)| Some((String::from_redis_value(node).ok(), String::from_redis_value(v).ok()?)))
            .collect(),
        other => String::from_redis_value(other).ok().map(|text| (None, text)).into_iter().collect(),
    }
}

pub(super) fn summarize(summary: &mut InstanceSummary, texts: &[String]) {
    let each = |name: &str| texts.iter().filter_map(|t| info_field(t, name)).collect::<Vec<i64>>();
    let sum = |name: &str| {
        let values = each(name);
        (!values.is_empty()).then(|| values.iter().sum())
    };
    let max = |name: &str| each(name).into_iter().max();
    summary.quarantine_ms_left = max("redislock_quarantine_ms_left");
    summary.highest_token = max("redislock_highest_token");
    summary.locks = sum("redislock_locks");
    summary.clients_waiting = sum("redislock_clients_waiting");
    summary.keys_waited = sum("redislock_keys_waited");
    if summary.highest_token.is_none() {
        summary.error = Some(format!("no redislock section in INFO: is the redislock module loaded on {}?", summary.server));
        summary.failure = Some(Outcome::ModuleMissing);
    }
}

/// An integer field of an INFO reply (`name:value` lines).
fn info_field(text: &str, name: &str) -> Option<i64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

pub(super) fn fill_status(status: &mut InstanceStatus, value: Value, mode: Mode) {
    match (mode, value) {
        (_, Value::Nil) => {}
        (Mode::Script, v) => status.owner = String::from_redis_value(v).ok(),
        (Mode::Module, v @ (Value::Map(_) | Value::Array(_))) => {
            for (k, v) in field_pairs(v).unwrap_or_default() {
                set_field(status, k, v);
            }
        }
        (Mode::Module, other) => status.error = Some(format!("unexpected LOCK.INFO reply {other:?}")),
    }
}

fn set_field(status: &mut InstanceStatus, key: Value, value: Value) {
    let Ok(key) = String::from_redis_value(key) else { return };
    match key.as_str() {
        "owner" => status.owner = String::from_redis_value(value).ok(),
        "token" => status.token = i64::from_redis_value(value).ok(),
        "pttl" => status.pttl = i64::from_redis_value(value).ok(),
        "waiters" => status.waiters = i64::from_redis_value(value).ok(),
        "limit" => status.limit = i64::from_redis_value(value).ok(),
        // A lock held shared has no single owner (LOCK.INFO's owner is nil):
        // its holders stand in for it, so `status` does not call it free.
        "holders" => {
            status.holders = holder_states(&value);
            if status.owner.is_none() {
                status.owner = shared_holders(value);
            }
        }
        _ => {}
    }
}

/// LOCK.INFO's holder rows `[owner, token, pttl, held-ms, session,
/// permits, value]` (a holder without a value has no seventh item).
fn holder_states(value: &Value) -> Vec<HolderState> {
    let Value::Array(rows) = value else { return Vec::new() };
    rows.iter()
        .filter_map(|row| match row {
            Value::Array(f) => Some(HolderState {
                owner: String::from_redis_value(f.first()?.clone()).ok()?,
                token: f.get(1).and_then(|v| i64::from_redis_value(v.clone()).ok()),
                pttl: f.get(2).and_then(|v| i64::from_redis_value(v.clone()).ok()).unwrap_or(-1),
                held_ms: f.get(3).and_then(|v| i64::from_redis_value(v.clone()).ok()),
                session: f.get(4).and_then(|v| i64::from_redis_value(v.clone()).ok()) == Some(1),
                value: f.get(6).and_then(text_of),
            }),
            _ => None,
        })
        .collect()
}

/// A bulk or simple string as text (invalid UTF-8 replaced); `None` for nil
/// or anything else.
fn text_of(v: &Value) -> Option<String> {
    Option::<Vec<u8>>::from_redis_value(v.clone()).ok().flatten().map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Every holder with a token in a LOCK.INFO reply: owner and token.
pub(super) fn holders_of(reply: &Value) -> Vec<(String, i64)> {
    holder_rows(reply).into_iter().filter_map(|h| Some((h.owner, h.token?))).collect()
}

/// Every holder with a token in a LOCK.INFO reply, with its value: a
/// group's members as one server lists them.
pub(super) fn holdings_of(reply: &Value) -> Vec<Holding> {
    holder_rows(reply).into_iter().filter_map(|h| Some(Holding { owner: h.owner, token: Some(h.token?), value: h.value })).collect()
}

/// The `holders` rows of a LOCK.INFO reply (a map in RESP3, a flat
/// field/value array in RESP2); none for nil.
fn holder_rows(reply: &Value) -> Vec<HolderState> {
    let Value::Map(pairs) = reply else {
        let Value::Array(items) = reply else { return Vec::new() };
        let mut it = items.iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            if matches!(k, Value::BulkString(b) if b == b"holders") {
                return holder_states(v);
            }
        }
        return Vec::new();
    };
    pairs
        .iter()
        .find(|(k, _)| matches!(k, Value::BulkString(b) if b == b"holders") || matches!(k, Value::SimpleString(s) if s == "holders"))
        .map(|(_, v)| holder_states(v))
        .unwrap_or_default()
}

/// One entry of a reply made of maps (RESP3), or of flat field/value
/// arrays (RESP2), as its field/value pairs.
fn field_pairs(entry: Value) -> Option<Vec<(Value, Value)>> {
    match entry {
        Value::Map(pairs) => Some(pairs),
        Value::Array(items) => {
            let mut it = items.into_iter();
            Some(std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect())
        }
        _ => None,
    }
}

/// LOCK.WAITERS' entries (maps, or field/value arrays in RESP2).
pub(super) fn waiter_states(value: Value) -> Vec<WaiterState> {
    let Value::Array(entries) = value else { return Vec::new() };
    entries
        .into_iter()
        .filter_map(|entry| {
            let pairs = field_pairs(entry)?;
            let mut w = WaiterState { owner: String::new(), mode: String::new(), limit: None, waited_ms: 0, wait_left_ms: -1 };
            for (k, v) in pairs {
                match String::from_redis_value(k).ok()?.as_str() {
                    "owner" => w.owner = String::from_redis_value(v).ok()?,
                    "mode" => w.mode = String::from_redis_value(v).ok()?,
                    "limit" => w.limit = i64::from_redis_value(v).ok(),
                    "waited_ms" => w.waited_ms = i64::from_redis_value(v).unwrap_or(0),
                    "wait_left_ms" => w.wait_left_ms = i64::from_redis_value(v).unwrap_or(-1),
                    _ => {}
                }
            }
            Some(w)
        })
        .collect()
}

/// The entries of a `LOCK.TOP` reply (maps, or flat arrays on RESP2).
pub(super) fn contended_locks(value: Value) -> Vec<ContendedLock> {
    let Value::Array(entries) = value else { return Vec::new() };
    entries
        .into_iter()
        .filter_map(|entry| {
            let pairs = field_pairs(entry)?;
            let mut c = ContendedLock::default();
            for (k, v) in pairs {
                match String::from_redis_value(k).ok()?.as_str() {
                    "key" => c.key = String::from_utf8_lossy(&Vec::<u8>::from_redis_value(v).ok()?).into_owned(),
                    "waiters" => c.waiters = i64::from_redis_value(v).unwrap_or(0),
                    "oldest_wait_ms" => c.oldest_wait_ms = i64::from_redis_value(v).unwrap_or(0),
                    "mode" => c.mode = Option::<String>::from_redis_value(v).ok().flatten(),
                    "holders" => c.holders = i64::from_redis_value(v).unwrap_or(0),
                    "longest_hold_ms" => c.longest_hold_ms = Option::<i64>::from_redis_value(v).ok().flatten(),
                    _ => {}
                }
            }
            Some(c)
        })
        .collect()
}

/// `shared(N): owner,owner,...` from LOCK.INFO's holders, `None` when
/// there are none.
fn shared_holders(value: Value) -> Option<String> {
    let Value::Array(holders) = value else { return None };
    let owners: Vec<String> = holders
        .into_iter()
        .filter_map(|h| match h {
            Value::Array(fields) => fields.into_iter().next().and_then(|o| String::from_redis_value(o).ok()),
            _ => None,
        })
        .collect();
    (!owners.is_empty()).then(|| format!("shared({}): {}", owners.len(), owners.join(",")))
}
