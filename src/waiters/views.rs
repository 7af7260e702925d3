//! What the registry shows: LOCK.WAITERS, LOCK.TOP, LOCK.INFO's waiter
//! count, INFO's gauges.

use super::*;

/// One waiter as LOCK.WAITERS lists it.
pub struct WaiterView {
    pub owner: Box<[u8]>,
    pub request: Request,
    /// How long it has waited, ms.
    pub waited_ms: i64,
    /// What is left of its WAIT, ms; `None` without a limit (`WAIT 0`).
    pub left_ms: Option<i64>,
}

/// The first `count` waiters of `key` in `db`, in line order.
pub fn list(db: c_int, key: &[u8], count: usize) -> Vec<WaiterView> {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    let now = clock::mono_ms();
    with_registry(|r| {
        let Registry { queues, sets, .. } = r;
        let sets = &*sets;
        let Some(queue) = queues.get_mut(&db).and_then(|keys| keys.get_mut(key)) else { return Vec::new() };
        queue
            .waiters
            .iter_mut()
            .take(count)
            .filter_map(|p| waiter_at(sets, &*p))
            .map(|w| WaiterView {
                owner: w.owner.bytes().into(),
                request: w.request,
                waited_ms: now.saturating_sub(w.joined_mono_ms),
                left_ms: w.deadline.map(|_| w.due_mono_ms.saturating_sub(now).max(0)),
            })
            .collect()
    })
    .unwrap_or_default()
}

/// One waited key as LOCK.TOP lists it.
pub struct Contended {
    pub key: Box<[u8]>,
    pub waiters: usize,
    /// How long its head has waited, ms.
    pub oldest_wait_ms: i64,
}

/// The waited keys of `db` in LOCK.TOP's order (`line::busiest`); at most
/// `count`. Each key is looked at once and borrowed; only the names listed
/// are copied.
pub fn busiest(db: c_int, count: usize) -> Vec<Contended> {
    if WAITING.load(Ordering::Relaxed) == 0 || count == 0 {
        return Vec::new();
    }
    let now = clock::mono_ms();
    with_registry(|r| {
        let Some(keys) = r.queues.get(&db) else { return Vec::new() };
        let lines = keys
            .iter()
            .map(|(key, q)| {
                let joined = q.waiters.first().and_then(|p| waiter_at(&r.sets, p)).map_or(now, |w| w.joined_mono_ms);
                line::Busy { waiters: q.waiters.len(), oldest_wait_ms: now.saturating_sub(joined), key: &key[..] }
            })
            .collect();
        line::busiest(lines, count)
            .into_iter()
            .map(|b| Contended { key: b.key.into(), waiters: b.waiters, oldest_wait_ms: b.oldest_wait_ms })
            .collect()
    })
    .unwrap_or_default()
}

/// How long the longest-waiting client has waited, ms (0: nobody waits).
pub fn oldest_wait_ms() -> i64 {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let now = clock::mono_ms();
    let oldest = with_registry(|r| {
        let heads = r.queues.values().flat_map(|keys| keys.values()).filter_map(|q| q.waiters.first().and_then(|p| waiter_at(&r.sets, p)));
        heads.map(|w| w.joined_mono_ms).min()
    });
    oldest.flatten().map_or(0, |joined| now.saturating_sub(joined))
}

/// Clients waiting now, and the keys they wait for (for INFO).
pub fn gauges() -> (i64, i64) {
    let clients = i64::try_from(WAITING.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
    if clients == 0 {
        return (0, 0);
    }
    let keys = with_registry(|r| r.queues.values().map(HashMap::len).sum::<usize>()).unwrap_or(0);
    (clients, i64::try_from(keys).unwrap_or(i64::MAX))
}

/// How many wait for `key` in `db`. Free when nobody waits anywhere.
fn waiter_count(db: c_int, key: &[u8]) -> usize {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    with_registry(|r| r.queue_mut(db, key).map_or(0, |q| q.waiters.len())).unwrap_or(0)
}

/// How many wait for `key` in the command's database. Nothing is looked
/// up (not even the database) when nobody waits anywhere.
pub fn count_in(ctx: Ctx, key: &[u8]) -> usize {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    waiter_count(ctx.selected_db(), key)
}

/// The command's database when someone waits for `key` there.
pub fn queued_in(ctx: Ctx, key: &[u8]) -> Option<c_int> {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let db = ctx.selected_db();
    (waiter_count(db, key) > 0).then_some(db)
}
