//! The `INFO redislock` section: what an operator or an exporter needs to
//! see of the lock service without scripts. Redis prefixes each field with
//! the module's name: `redislock_quarantine_ms_left`.

use std::ffi::CStr;

use crate::api::InfoCtx;
use crate::server::config;
use crate::server::fencing::COUNTER;
use crate::server::quarantine;
use crate::server::stats;
use crate::waiters;

fn field(ctx: InfoCtx, name: &CStr, value: i64) {
    ctx.field(name, value);
}

fn section(ctx: InfoCtx, for_crash_report: bool) {
    // The default section: named after the module, `INFO redislock`.
    if !ctx.default_section() {
        return;
    }
    let counters: [(&CStr, &stats::Counter); 25] = [
        (c"acquire_granted_new", &stats::ACQUIRE_NEW),
        (c"acquire_granted_regrant", &stats::ACQUIRE_REGRANT),
        (c"acquire_granted_handoff", &stats::WAIT_GRANTED),
        (c"acquire_refused_held", &stats::ACQUIRE_REFUSED),
        (c"acquire_refused_quarantine", &stats::QUARANTINE_REFUSED),
        (c"release_done", &stats::RELEASE_DONE),
        (c"release_refused", &stats::RELEASE_REFUSED),
        (c"extend_done", &stats::EXTEND_DONE),
        (c"extend_refused", &stats::EXTEND_REFUSED),
        (c"revoke_calls", &stats::REVOKE_CALLS),
        (c"holds_revoked", &stats::HOLDS_REVOKED),
        (c"resize_calls", &stats::RESIZE_CALLS),
        (c"wait_started", &stats::WAIT_STARTED),
        (c"wait_granted", &stats::WAIT_GRANTED),
        (c"wait_timed_out", &stats::WAIT_TIMED_OUT),
        (c"wait_cancelled", &stats::WAIT_CANCELLED),
        (c"handoff_release", &stats::HANDOFF_RELEASE),
        (c"handoff_expiry", &stats::HANDOFF_EXPIRY),
        (c"handoff_delete", &stats::HANDOFF_DELETE),
        (c"locks_evicted", &stats::LOCKS_EVICTED),
        (c"locks_expired_by_clock_step", &stats::KEPT_AFTER_CLOCK_STEP),
        (c"locks_restored", &stats::LOCKS_RESTORED),
        (c"session_releases", &stats::SESSION_RELEASES),
        (c"session_delays", &stats::SESSION_DELAYS),
        (c"session_end_yields", &stats::SESSION_END_YIELDS),
    ];
    for (name, counter) in counters {
        field(ctx, name, counter.get());
    }
    let (clients_waiting, keys_waited) = waiters::gauges();
    field(ctx, c"locks", stats::LOCKS.load(std::sync::atomic::Ordering::Relaxed).max(0));
    field(ctx, c"evicted_locks_kept", crate::keys::rescue::evicted_kept());
    field(ctx, c"evicted_registers_kept", crate::keys::register::evicted_kept());
    field(ctx, c"locks_evictable", i64::from(locks_evictable()));
    field(ctx, c"clients_waiting", clients_waiting);
    field(ctx, c"keys_waited", keys_waited);
    field(ctx, c"session_holds", crate::server::bindings::bound());
    field(ctx, c"revoked_holds_remembered", crate::server::revoked::remembered());
    field(ctx, c"quarantine_ms_left", quarantine::remaining_ms().unwrap_or(0));
    field(ctx, c"highest_token", COUNTER.current());
    field(ctx, c"max_ttl_ms", config::max_ttl());
    field(ctx, c"max_token_lead_ms", config::max_token_lead());
    field(ctx, c"max_owner_len", config::max_owner_len());
    field(ctx, c"max_set_keys", config::max_set_keys());
    field(ctx, c"notify_patterns", i64::try_from(crate::server::notify::pattern_count()).unwrap_or(i64::MAX));
    field(ctx, c"quarantine_ms", config::quarantine_ms());
    field(ctx, c"oldest_wait_ms", waiters::oldest_wait_ms());
    // A crash report only reads: no walk started from there.
    field(ctx, c"longest_hold_ms", crate::commands::census::longest_hold_ms(!for_crash_report));
    distributions(ctx);
}

/// Per kind of hold: how long waits took (`wait_<kind>_*`) and holds
/// lasted (`hold_<kind>_*`): a count and p50, p99, p99.9 and max in ms,
/// each a plain number (a gauge to a scraper).
fn distributions(ctx: InfoCtx) {
    for (what, of) in
        [("wait", stats::waits as fn(stats::HoldKind) -> &'static crate::server::histogram::Histogram), ("hold", stats::holds)]
    {
        for kind in stats::HoldKind::ALL {
            let h = of(kind);
            let values = [
                ("count", h.count()),
                ("p50_ms", h.percentile(0.5)),
                ("p99_ms", h.percentile(0.99)),
                ("p999_ms", h.percentile(0.999)),
                ("max_ms", h.max()),
            ];
            for (stat, value) in values {
                if let Ok(name) = std::ffi::CString::new(format!("{what}_{}_{stat}", kind.name())) {
                    field(ctx, &name, i64::try_from(value).unwrap_or(i64::MAX));
                }
            }
        }
    }
}

/// Whether the server may evict lock keys now: a memory limit with a
/// policy other than `noeviction` (the module keeps such locks held, at a
/// cost; docs/operations.md recommends `noeviction` for servers that hold
/// locks).
fn locks_evictable() -> bool {
    let memory = crate::api::ServerInfo::read(crate::api::Ctx::new(std::ptr::null_mut()), c"memory");
    memory.integer(c"maxmemory").is_some_and(|m| m > 0) && !memory.text_is(c"maxmemory_policy", c"noeviction")
}

pub fn register(ctx: crate::api::Ctx) -> bool {
    crate::api::register_info(ctx, section)
}
