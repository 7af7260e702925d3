//! Leaving a command: marking a key changed, keyspace notifications and
//! propagation to replicas and the AOF.

use std::ffi::{c_char, CStr};
use std::ptr;

use redis_module::raw;

use super::{log, rm, Arg, Ctx, RedisModuleCtx, RedisModuleIO, RedisModuleString, ERR};

impl Ctx {
    /// Marks a key as changed: WATCH and client-side caching see it.
    pub fn signal_modified(self, key: &Arg) {
        rm!(RedisModule_SignalModifiedKey(self.0, key.raw()) else ERR);
    }

    /// A keyspace notification of the generic class (`g`).
    pub fn notify(self, event: &CStr, key: &Arg) {
        rm!(RedisModule_NotifyKeyspaceEvent(self.0, raw::REDISMODULE_NOTIFY_GENERIC, event.as_ptr(), key.raw()) else ERR);
    }

    /// `PUBLISH channel message` (in a cluster, to every node), from a
    /// command or outside one: Redis's publication needs no client.
    pub fn publish(self, channel: &[u8], message: &[u8]) {
        let create = |bytes: &[u8]| {
            OwnedString(rm!(RedisModule_CreateString(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len()) else ptr::null_mut()), self.0)
        };
        let (channel, message) = (create(channel), create(message));
        if channel.0.is_null() || message.0.is_null() {
            return;
        }
        rm!(RedisModule_PublishMessage(self.0, channel.0, message.0) else ERR);
    }

    /// Propagates the command exactly as received.
    pub fn replicate_verbatim(self) {
        rm!(RedisModule_ReplicateVerbatim(self.0) else ERR);
    }

    /// Propagates `cmd key pieces...` (`LOCK.APPLY` as `args::encode_apply`
    /// lays it out). The key and a caller's argument are shared rather than
    /// copied; integers are made as Redis strings, which is cheaper than the
    /// `l` format (a fresh sds shrunk per number).
    pub fn replicate_pieces(self, cmd: &CStr, key: &Arg, pieces: &[Piece<'_>]) {
        let Some(argv) = Argv::new(self.0, pieces) else {
            return log(Some(self), c"warning", "could not build a replicated command's arguments");
        };
        rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"sv".as_ptr(), key.raw(), argv.ptrs.as_ptr(), argv.len) else ERR);
    }

    /// Propagates `cmd key bytes`, e.g. `LOCK.RELEASE key owner` for a
    /// release the module makes outside a command.
    pub fn replicate_key_bytes(self, cmd: &CStr, key: &Arg, bytes: &[u8]) {
        rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"sb".as_ptr(), key.raw(), bytes.as_ptr().cast::<c_char>(), bytes.len()) else ERR);
    }

    /// Propagates `cmd key`, e.g. `DEL key`.
    pub fn replicate_key(self, cmd: &CStr, key: &Arg) {
        rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"s".as_ptr(), key.raw()) else ERR);
    }

    /// Propagates `cmd key n`, e.g. `PEXPIREAT key deadline`.
    pub fn replicate_key_integer(self, cmd: &CStr, key: &Arg, n: i64) {
        let n_s = self.integer_string(n);
        if n_s.0.is_null() {
            rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"sl".as_ptr(), key.raw(), n) else ERR);
            return;
        }
        rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"ss".as_ptr(), key.raw(), n_s.0) else ERR);
    }

    /// An integer as a Redis string. Cheaper for replication than the
    /// `l` format, which builds a fresh sds and shrinks it per number.
    fn integer_string(self, n: i64) -> OwnedString {
        OwnedString(rm!(RedisModule_CreateStringFromLongLong(self.0, n) else ptr::null_mut()), self.0)
    }
}

/// One argument after the key of a command this module propagates or
/// writes into the AOF: a caller's argument (shared, not copied), bytes,
/// an integer or a keyword.
#[derive(Clone, Copy)]
pub enum Piece<'a> {
    Arg(&'a Arg),
    Bytes(&'a [u8]),
    Int(i64),
    Word(&'static CStr),
}

/// The most pieces a command takes after its key.
pub const MAX_PIECES: usize = 10;

/// A command's pieces as Redis strings, for the `v` format (the key goes
/// before them as `s`: the AOF rewrite's key is a static object Redis
/// copies for `s` but may not take a reference to in a `v` vector). The
/// strings made here are freed on drop, after Redis took its own
/// references.
struct Argv {
    ptrs: [*mut RedisModuleString; MAX_PIECES],
    len: usize,
    _made: [Option<OwnedString>; MAX_PIECES],
}

impl Argv {
    /// `None` when there are too many pieces or a string could not be made.
    fn new(ctx: *mut RedisModuleCtx, pieces: &[Piece<'_>]) -> Option<Argv> {
        let mut argv = Argv { ptrs: [ptr::null_mut(); MAX_PIECES], len: 0, _made: Default::default() };
        for (i, piece) in pieces.iter().enumerate() {
            let made = match *piece {
                Piece::Arg(_) => None,
                Piece::Bytes(bytes) => Some(create(ctx, bytes)),
                Piece::Int(n) => Some(OwnedString(rm!(RedisModule_CreateStringFromLongLong(ctx, n) else ptr::null_mut()), ctx)),
                Piece::Word(word) => Some(create(ctx, word.to_bytes())),
            };
            let raw = match (&made, piece) {
                (None, Piece::Arg(arg)) => arg.raw(),
                (made, _) => made.as_ref().map_or(ptr::null_mut(), |m| m.0),
            };
            *argv._made.get_mut(i)? = made;
            if raw.is_null() {
                return None;
            }
            *argv.ptrs.get_mut(i)? = raw;
            argv.len = i + 1;
        }
        Some(argv)
    }
}

fn create(ctx: *mut RedisModuleCtx, bytes: &[u8]) -> OwnedString {
    OwnedString(rm!(RedisModule_CreateString(ctx, bytes.as_ptr().cast::<c_char>(), bytes.len()) else ptr::null_mut()), ctx)
}

/// Writes `cmd key pieces...` into the AOF being rewritten (`LOCK.APPLY`
/// as `args::encode_apply` lays it out).
///
/// # Safety
/// `aof` and `key` are the handles of Redis's `aof_rewrite` callback.
pub unsafe fn emit_aof(aof: *mut RedisModuleIO, cmd: &CStr, key: *mut RedisModuleString, pieces: &[Piece<'_>]) {
    // No context here: the strings are made and freed without one.
    let Some(argv) = Argv::new(ptr::null_mut(), pieces) else {
        return log(None, c"warning", "could not build a rewritten command's arguments");
    };
    rm!(RedisModule_EmitAOF(aof, cmd.as_ptr(), c"sv".as_ptr(), key, argv.ptrs.as_ptr(), argv.len) else ());
}

/// A string this module created, freed on drop.
struct OwnedString(*mut RedisModuleString, *mut RedisModuleCtx);

impl Drop for OwnedString {
    fn drop(&mut self) {
        if !self.0.is_null() {
            rm!(RedisModule_FreeString(self.1, self.0) else ());
        }
    }
}
