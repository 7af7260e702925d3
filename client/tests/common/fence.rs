//! A real fenced resource: a hash in a separate, plain Redis, written only
//! through a script that compares fencing tokens and refuses a write whose
//! token is not above the last accepted one. This is the recipe
//! docs/safety.md ("Safety under faults") shows: a token nobody checks
//! protects nothing.

use redis::Value;

use super::{Opts, Server};

/// KEYS[1] the resource, ARGV[1] the writer's token, ARGV[2] the value.
/// 1 accepted, 0 refused. Tokens are Unix microseconds (about 1.8e15),
/// exact in Lua's doubles up to 2^53.
pub const FENCED_WRITE: &str = "\
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '-1') \
local token = tonumber(ARGV[1]) \
if token == nil or token <= last then \
  redis.call('HINCRBY', KEYS[1], 'refused', 1) \
  return 0 \
end \
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2]) \
redis.call('HINCRBY', KEYS[1], 'accepted', 1) \
return 1";

pub struct Fence {
    pub server: Server,
    pub key: String,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct FenceState {
    pub token: Option<i64>,
    pub value: Option<String>,
    pub accepted: i64,
    pub refused: i64,
}

impl Fence {
    pub fn start() -> Fence {
        Fence { server: Server::start_opts(Opts { plain: true, ..Opts::default() }), key: "fenced".into() }
    }

    /// Writes `value` under `token`; true when the resource accepted it.
    pub async fn write(&self, token: i64, value: &str) -> bool {
        let cmd = redis::cmd("EVAL").arg(FENCED_WRITE).arg(1).arg(&self.key).arg(token).arg(value).clone();
        match self.server.ok(&cmd).await {
            Value::Int(1) => true,
            Value::Int(0) => false,
            other => panic!("fenced write replied {other:?}"),
        }
    }

    pub async fn state(&self) -> FenceState {
        let v = self.server.ok(redis::cmd("HGETALL").arg(&self.key)).await;
        let pairs: Vec<(String, String)> = match v {
            Value::Array(items) => items.chunks(2).map(|kv| (to_string(&kv[0]), to_string(&kv[1]))).collect(),
            Value::Map(m) => m.iter().map(|(k, v)| (to_string(k), to_string(v))).collect(),
            other => panic!("HGETALL replied {other:?}"),
        };
        let mut s = FenceState::default();
        for (k, v) in pairs {
            match k.as_str() {
                "token" => s.token = v.parse().ok(),
                "value" => s.value = Some(v),
                "accepted" => s.accepted = v.parse().unwrap_or(0),
                "refused" => s.refused = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        s
    }
}

fn to_string(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        other => panic!("expected a string, got {other:?}"),
    }
}
