//! How a change leaves a command: replication and the AOF, WATCH and
//! client-side caching, keyspace notifications. And the receiving side of
//! replication, `LOCK.APPLY`.
//!
//! A command that changes nothing calls none of this, so it leaves no
//! trace, as a failed `SET NX` does not.
//!
//! A grant travels as `LOCK.APPLY key owner token deadline` with the
//! absolute deadline (laid out in one place, `args::encode_apply`, whoever made
//! the grant: a command, a handoff, a lock put back; with `VALUE value`
//! when the lock has one, which is also how a LOCK.PROCLAIM travels):
//! replaying a relative ttl would restart the lease on the replica or at
//! AOF load. An extension travels as `PEXPIREAT` with the
//! absolute deadline. A release travels as itself, verbatim: given the same
//! lock state it has the same effect anywhere (on a replica, commands from
//! the master see keys their lease has passed, and at AOF load nothing
//! expires), and it avoids RM_Replicate's per-call command lookup.

use crate::api::{ctx_flags, Arg, Ctx, Piece};
use crate::args::{encode_apply, ApplyShared, APPLY};
use crate::server::fencing::Token;
use crate::server::notify;

/// What every change tells watchers: WATCH and client-side caching
/// (`signal_modified`) and a keyspace notification `event`.
fn signal(ctx: Ctx, key: &Arg, event: &std::ffi::CStr) {
    ctx.signal_modified(key);
    ctx.notify(event, key);
}

/// Tells subscribers of the lock's channel (`changes_channel`) of a
/// change: `KIND TOKEN OWNER-LENGTH OWNER VALUE`, one space between each,
/// the value the rest of the message. A key `redislock.notify` matches
/// announces every change (`Event`); any other key only an exclusive hold
/// with a value that began or was re-granted (`grant`, a handoff's too)
/// and a new value its holder stored (`proclaim`): an election's holds all
/// carry one, so an observer that stays subscribed sees every term on this
/// server, however short, instead of what a poll happens to catch. A lock
/// without a value whose key no pattern matches publishes nothing (the hot
/// path pays one test, a relaxed load while no pattern is set).
fn announce(ctx: Ctx, db: std::ffi::c_int, key: &[u8], kind: Event, owner: &[u8], token: Token, value: &[u8]) {
    let kind = kind.name();
    let mut channel = Vec::with_capacity(CHANNEL_PREFIX.len() + 16 + key.len());
    changes_channel(&mut channel, db, key);
    let mut message = Vec::with_capacity(kind.len() + 48 + owner.len() + value.len());
    message.extend_from_slice(kind);
    message.extend_from_slice(format!(" {token} {} ", owner.len()).as_bytes());
    message.extend_from_slice(owner);
    message.push(b' ');
    message.extend_from_slice(value);
    ctx.publish(&channel, &message);
}

/// A change announced on a lock's channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new hold or a re-grant (made by a command).
    Grant,
    /// A grant made by serving the line (a waiter's).
    Handoff,
    /// A hold its owner released.
    Release,
    /// A hold whose lease ended without a release.
    Expire,
    /// A lease cut short by its connection's close (the value: the new
    /// deadline, Unix ms).
    Cut,
    /// A hold released because its connection closed.
    Session,
    /// A hold LOCK.REVOKE ended (the token: the revocation's).
    Revoke,
    /// A holder's new value.
    Proclaim,
    /// A semaphore's new limit (the value; no hold: token 0, no owner).
    Resize,
    /// A holder asked to let go (LOCK.ASK; the value: why).
    Ask,
}

impl Event {
    fn name(self) -> &'static [u8] {
        match self {
            Event::Grant => b"grant",
            Event::Handoff => b"handoff",
            Event::Release => b"release",
            Event::Expire => b"expire",
            Event::Cut => b"cut",
            Event::Session => b"session",
            Event::Revoke => b"revoke",
            Event::Proclaim => b"proclaim",
            Event::Resize => b"resize",
            Event::Ask => b"ask",
        }
    }
}

/// Whether this server's own changes to `key` are announced: only a
/// master's, never a replica's or a load's (a replica replaying its
/// master's stream, the AOF replayed), so a subscriber hears each change
/// once, from the server that made it.
fn announces(ctx: Ctx) -> bool {
    !ctx.has_flags(ctx_flags::REPLICATED | ctx_flags::LOADING) && !crate::replication::writable::is_replica()
}

/// Announces `event` on `key`'s channel (in the selected database) when
/// `redislock.notify` matches the key and this server made the change.
/// One relaxed load while no pattern is set.
pub fn event(ctx: Ctx, key: &Arg, event: Event, owner: &[u8], token: Token, value: &[u8]) {
    if notify::watched(key.bytes()) && announces(ctx) {
        announce(ctx, ctx.selected_db(), key.bytes(), event, owner, token, value);
    }
}

/// Whether `key`'s changes are announced at all (for a caller that must
/// read the key again to tell what ended).
pub fn watched(ctx: Ctx, key: &Arg) -> bool {
    notify::watched(key.bytes()) && announces(ctx)
}

/// A lock Redis removed (expired, or deleted) after its lease ended, seen
/// by the data type's unlink callback in database `db`, where no command's
/// context is at hand: `expire` for each hold it stored, through the
/// module's detached context.
pub fn removed_after_lease(db: std::ffi::c_int, key: &[u8], holds: &mut dyn Iterator<Item = (&[u8], Token)>) {
    if !notify::watched(key) || crate::replication::writable::is_replica() {
        return;
    }
    let Some(ctx) = crate::api::detached_ctx() else { return };
    for (owner, token) in holds {
        announce(ctx, db, key, Event::Expire, owner, token, b"");
    }
}

/// The holder `owner` of `key` under `token` was asked to let go
/// (LOCK.ASK), with `message`: announced whatever `redislock.notify` says
/// (being heard is all an ask does) and by a replica too (it changes
/// nothing, so nothing travels).
pub fn asked(ctx: Ctx, key: &Arg, owner: &[u8], token: Token, message: &[u8]) {
    announce(ctx, ctx.selected_db(), key.bytes(), Event::Ask, owner, token, message);
}

/// A grant's announcement: every grant of a key `redislock.notify`
/// matches (`handoff` when the line was served), and on any other key a
/// grant with a value, as `grant` whoever made it (what subscribers saw
/// before `notify`).
fn announce_grant(ctx: Ctx, key: &Arg, owner: &[u8], token: Token, value: &[u8], handoff: bool) {
    if watched(ctx, key) {
        let kind = if handoff { Event::Handoff } else { Event::Grant };
        announce(ctx, ctx.selected_db(), key.bytes(), kind, owner, token, value);
    } else if !value.is_empty() {
        announce(ctx, ctx.selected_db(), key.bytes(), Event::Grant, owner, token, value);
    }
}

/// What the channel of a lock's changes starts with: the rest is
/// `DB__:KEY`, as a keyspace notification's channel (`__keyspace@DB__:KEY`).
const CHANNEL_PREFIX: &[u8] = b"__redislock@";

/// Writes the channel of `key`'s changes in `db` to `out`.
fn changes_channel(out: &mut Vec<u8>, db: std::ffi::c_int, key: &[u8]) {
    out.extend_from_slice(CHANNEL_PREFIX);
    out.extend_from_slice(db.to_string().as_bytes());
    out.extend_from_slice(b"__:");
    out.extend_from_slice(key);
}

/// What a shared holder's grant carries beside its own deadline.
#[derive(Clone, Copy)]
pub struct SharedTerms {
    /// The group's limit (0: a read-write lock held shared).
    pub limit: u32,
    /// The key's TTL (0: none).
    pub key_deadline_ms: i64,
    /// The holder's permits (`PERMITS k`, sent only when above 1).
    pub permits: u32,
}

/// Propagates `LOCK.APPLY key owner token deadline [SHARED limit
/// key-deadline [PERMITS k] | VALUE value]`, the replicated form of every
/// grant, as its one encoder lays it out (`args::encode_apply`, beside its
/// parser). `value`: an exclusive lock's (empty: none, and no option).
fn replicate_apply(ctx: Ctx, key: &Arg, owner: Piece<'_>, token: Token, deadline_ms: i64, shared: Option<SharedTerms>, value: &[u8]) {
    let (deadline_ms, shared) = match shared {
        None => (deadline_ms, None),
        Some(terms) => {
            let terms = ApplyShared { limit: terms.limit, key_deadline_ms: terms.key_deadline_ms.max(0), permits: terms.permits };
            (deadline_ms.max(0), Some(terms))
        }
    };
    ctx.replicate_pieces(APPLY, key, encode_apply(owner, token, deadline_ms, shared, value).pieces());
}

/// A lock was granted or re-granted to `owner` with `token` and `value`
/// (empty: none), its key set to expire at `deadline_ms` (the lease's
/// wall-clock mirror).
/// `handoff`: made by serving the key's line.
pub fn granted(ctx: Ctx, key: &Arg, owner: &Arg, token: Token, deadline_ms: i64, value: &[u8], handoff: bool) {
    replicate_apply(ctx, key, Piece::Arg(owner), token, deadline_ms, None, value);
    signal(ctx, key, c"lock.acquire");
    announce_grant(ctx, key, owner.bytes(), token, value, handoff);
}

/// A holder stored a new `value` (LOCK.PROCLAIM): it travels as the whole
/// grant, with the deadline the key has (an exclusive lock's; `shared`: a
/// shared holder's own deadline and its group's terms), so a replica or
/// the AOF sets exactly this hold whatever its own clock says.
pub fn proclaimed(ctx: Ctx, key: &Arg, owner: &[u8], token: Token, deadline_ms: i64, shared: Option<SharedTerms>, value: &[u8]) {
    replicate_apply(ctx, key, Piece::Bytes(owner), token, deadline_ms, shared, value);
    signal(ctx, key, c"lock.proclaim");
    announce(ctx, ctx.selected_db(), key.bytes(), Event::Proclaim, owner, token, value);
}

/// `granted`, for a new grant made by the `LOCK.ACQUIRE` being executed,
/// the hot path: while nothing can receive propagated commands, the
/// command goes verbatim, which Redis drops at no cost and counts for the
/// `save` rules (see `audience`).
pub fn granted_by_command(ctx: Ctx, key: &Arg, owner: &Arg, token: Token, deadline_ms: i64, value: &[u8]) {
    exactly_if_heard(ctx, || replicate_apply(ctx, key, Piece::Arg(owner), token, deadline_ms, None, value));
    signal(ctx, key, c"lock.acquire");
    announce_grant(ctx, key, owner.bytes(), token, value, false);
}

/// The exact effect while anything can receive it; otherwise the command
/// being executed, verbatim: Redis drops it all the same, and counts the
/// change for the `save` rules (see `audience`).
fn exactly_if_heard(ctx: Ctx, replicate_exactly: impl FnOnce()) {
    if crate::replication::audience::heard() {
        replicate_exactly();
    } else {
        ctx.replicate_verbatim();
    }
}

/// A shared holder was granted, re-granted or extended: its token and
/// deadline, the group's limit (0: a read-write lock), the key's TTL, the
/// holder's permits and the value it stores (empty: none). Announced by
/// the caller (`shared_grant_event`, or `event` for an extension), which
/// knows which of these it was.
pub fn shared_granted(ctx: Ctx, key: &Arg, owner: &[u8], token: Token, deadline_ms: i64, terms: SharedTerms, value: &[u8]) {
    replicate_apply(ctx, key, Piece::Bytes(owner), token, deadline_ms, Some(terms), value);
    signal(ctx, key, c"lock.acquire");
}

/// A shared grant's announcement, by the rule of an exclusive one
/// (`announce_grant`): every grant of a key `redislock.notify` matches,
/// and on any other key a grant with a value (a group member joining), as
/// `grant`.
pub fn shared_grant_event(ctx: Ctx, key: &Arg, owner: &[u8], token: Token, value: &[u8], handoff: bool) {
    announce_grant(ctx, key, owner, token, value, handoff);
}

/// The last shared holder left: the key is deleted, and travels as DEL.
pub fn released_last(ctx: Ctx, key: &Arg) {
    ctx.replicate_key(c"DEL", key);
    signal(ctx, key, c"lock.release");
}

/// A lease now ends at `deadline_ms`, by the `LOCK.EXTEND` being executed:
/// verbatim while nothing listens, as `granted_by_command`.
pub fn extended(ctx: Ctx, key: &Arg, deadline_ms: i64) {
    exactly_if_heard(ctx, || ctx.replicate_key_integer(c"PEXPIREAT", key, deadline_ms));
    signal(ctx, key, c"lock.extend");
}

/// A lock Redis removed while its lease ran is back (see `rescue`): each
/// holder travels as the grant it was (`shared`: a group's terms; `value`:
/// an exclusive lock's), then `restored` tells watchers.
pub fn holder_restored(ctx: Ctx, key: &Arg, owner: &[u8], token: Token, deadline_ms: i64, shared: Option<SharedTerms>, value: &[u8]) {
    replicate_apply(ctx, key, Piece::Bytes(owner), token, deadline_ms.max(0), shared, value);
}

pub fn restored(ctx: Ctx, key: &Arg) {
    signal(ctx, key, c"lock.restore");
}

/// A lock whose lease had ended was deleted outside a command (after a
/// clock step, see `realign`): as Redis's own expiry, a DEL.
pub fn expired(ctx: Ctx, key: &Arg) {
    ctx.replicate_key(c"DEL", key);
    signal(ctx, key, c"lock.expired");
}

/// A key's TTL was set at the wall clock of now for the same lease (after
/// a clock step, see `realign`): the lock is unchanged, so only the TTL
/// travels.
pub fn remirrored(ctx: Ctx, key: &Arg, deadline_ms: i64) {
    ctx.replicate_key_integer(c"PEXPIREAT", key, deadline_ms);
}

/// `owner`'s hold was released other than by the LOCK.RELEASE being
/// executed (its connection closed, see `session`; or it is one member of
/// a LOCK.MRELEASE): it travels as the LOCK.RELEASE a client would have
/// sent, which every replica and the AOF replay as such.
pub fn released_by_server(ctx: Ctx, key: &Arg, owner: &[u8]) {
    ctx.replicate_key_bytes(c"LOCK.RELEASE", key, owner);
    signal(ctx, key, c"lock.release");
}

/// An exclusive lock's lease was cut short to end at `deadline_ms` (its
/// holder's connection closed with a lock-delay, see `session`).
pub fn cut_short(ctx: Ctx, key: &Arg, deadline_ms: i64) {
    ctx.replicate_key_integer(c"PEXPIREAT", key, deadline_ms);
    signal(ctx, key, c"lock.delay");
}

/// A lock was released (its key deleted) by the command being executed.
pub fn released(ctx: Ctx, key: &Arg) {
    ctx.replicate_verbatim();
    signal(ctx, key, c"lock.release");
}

/// A lock was set as its master granted it (LOCK.APPLY): passed on as it
/// came.
pub fn applied(ctx: Ctx, key: &Arg) {
    ctx.replicate_verbatim();
    signal(ctx, key, c"lock.acquire");
}

/// Holds were revoked (LOCK.REVOKE): watchers are told once, after the
/// effects below have been propagated.
pub fn revoked(ctx: Ctx, key: &Arg) {
    signal(ctx, key, c"lock.revoke");
}

/// A revoked holder left others holding the key: it travels as the
/// LOCK.RELEASE a client would have sent.
pub fn revoked_holder(ctx: Ctx, key: &Arg, owner: &[u8]) {
    ctx.replicate_key_bytes(c"LOCK.RELEASE", key, owner);
}

/// A revocation removed the key (its only or last holder): it travels as
/// DEL.
pub fn revoked_last(ctx: Ctx, key: &Arg) {
    ctx.replicate_key(c"DEL", key);
}

/// A semaphore was resized to `limit`: it travels as `LOCK.RESIZE key
/// limit` (`command`), explicitly, so that it precedes the grants the
/// resize then makes to the key's line.
pub fn resized(ctx: Ctx, key: &Arg, command: &std::ffi::CStr, limit: u32) {
    signal(ctx, key, c"lock.resize");
    ctx.replicate_key_integer(command, key, i64::from(limit));
    if watched(ctx, key) {
        event(ctx, key, Event::Resize, b"", 0, limit.to_string().as_bytes());
    }
}

/// A resized semaphore Redis removed while held was put back: its mark
/// travels as `LOCK.RESIZE key limit` after its holders' grants.
pub fn resize_restored(ctx: Ctx, key: &Arg, command: &std::ffi::CStr, limit: u32) {
    ctx.replicate_key_integer(command, key, i64::from(limit));
}

/// A register was raised to `token` other than by the LOCK.FENCED being
/// executed (a revocation's FENCE): it travels as `LOCK.FENCED register
/// token`, which every replica and the AOF replay as a raise.
pub fn register_raised(ctx: Ctx, register: &Arg, token: Token) {
    ctx.signal_modified(register);
    ctx.replicate_key_integer(c"LOCK.FENCED", register, token);
}
