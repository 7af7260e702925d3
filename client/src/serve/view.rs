//! What the quorum shows of a lock: `LOCK.INFO` (what a quorum of the
//! servers agrees on) and `LOCK.WAITERS` (who waits, as any server lists
//! them), in the module's reply shapes.

use redlock::transport::{HolderState, WaiterState};
use redlock::{InstanceStatus, Kind};

use super::args::{parse_waiters, text};
use super::lock::shown;
use super::resp::{wrong_arity, Reply};
use super::state::Shared;

/// `LOCK.INFO key`: what a quorum of the servers agrees on: nil when no
/// holder is held on a quorum; otherwise the module's fields, each
/// holder's lease the shortest a quorum gives it.
pub async fn info(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key] = args else { return Err(wrong_arity("lock.info")) };
    let key = text(key, "key")?;
    let redlock = &shared.redlock;
    let statuses = redlock.status(&key).await;
    let answered: Vec<&InstanceStatus> = statuses.iter().filter(|s| s.reachable && s.error.is_none()).collect();
    let quorum = redlock.quorum();
    if answered.len() < quorum {
        return Err(Reply::error(format!(
            "ERR LOCK.INFO: {} of {} servers answered, fewer than the quorum of {quorum}",
            answered.len(),
            statuses.len()
        )));
    }
    let holders = agreed(&answered, quorum);
    let Some(first) = holders.first() else { return Ok(Reply::Nil) };
    let exclusive = holders.len() == 1 && answered.iter().any(|s| s.owner.as_deref() == Some(first.owner.as_str()));
    let waiters = answered.iter().filter_map(|s| s.waiters).max().unwrap_or(0);
    let pttl = holders.iter().map(|h| h.pttl).max().unwrap_or(0);
    let (owner, token) = match exclusive {
        true => (Reply::bulk(shown(&first.owner)), first.token.map_or(Reply::Nil, Reply::Int)),
        false => (Reply::Nil, Reply::Nil),
    };
    let listed = holders
        .iter()
        .map(|h| {
            Reply::Array(vec![
                Reply::bulk(shown(&h.owner)),
                h.token.map_or(Reply::Nil, Reply::Int),
                Reply::Int(h.pttl),
                h.held_ms.map_or(Reply::Nil, Reply::Int),
                Reply::Int(i64::from(h.session)),
                Reply::Int(1),
            ])
        })
        .collect();
    Ok(Reply::Map(vec![
        (Reply::bulk("owner"), owner),
        (Reply::bulk("token"), token),
        (Reply::bulk("pttl"), Reply::Int(pttl)),
        (Reply::bulk("waiters"), Reply::Int(waiters)),
        (Reply::bulk("mode"), Reply::bulk(if exclusive { "exclusive" } else { "shared" })),
        (Reply::bulk("limit"), Reply::Nil),
        (Reply::bulk("holders"), Reply::Array(listed)),
        (Reply::bulk("taken"), Reply::Nil),
        (Reply::bulk("value"), Reply::Nil),
    ]))
}

/// The holders that a quorum of `answered` lists (by owner, first seen
/// first), each with the lowest token and the shortest lease among them.
fn agreed(answered: &[&InstanceStatus], quorum: usize) -> Vec<HolderState> {
    let mut seen: Vec<(HolderState, usize)> = Vec::new();
    for holder in answered.iter().flat_map(|s| s.holders.iter()) {
        match seen.iter_mut().find(|(h, _)| h.owner == holder.owner) {
            Some((h, count)) => {
                *count += 1;
                h.pttl = h.pttl.min(holder.pttl);
                h.token = h.token.min(holder.token);
            }
            None => seen.push((holder.clone(), 1)),
        }
    }
    seen.into_iter().filter(|(_, count)| *count >= quorum).map(|(h, _)| h).collect()
}

/// `LOCK.WAITERS key [COUNT n]`: the clients waiting for `key` through
/// the quorum, longest waiting first, in the module's shape. A waiter at
/// the head of the key's line waits on the lock on every server, and the
/// others wait in the line (`redlock::Kind::line_key`) on its one line
/// server, behind the head's place: both are listed, the head's
/// waits first. A waiter is shown when any server that answered lists
/// it (a server the head's wait did not reach, or one that granted it
/// already, does not hide it): once per owner, with the longest wait
/// any server gives it and the most of its `WAIT` left. Waiters in the
/// line are shown under the owner of their place in it (the quorum
/// client's, not the client's).
pub async fn waiters(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (key, count) = parse_waiters(args)?;
    let redlock = &shared.redlock;
    let line = Kind::Exclusive.line_key(&key);
    let (on_key, in_line) = futures::join!(redlock.status(&key), redlock.status(&line));
    let mut listed = merged(&on_key);
    let behind: Vec<WaiterState> = merged(&in_line).into_iter().filter(|w| !listed.iter().any(|l| l.owner == w.owner)).collect();
    listed.extend(behind);
    let entries = listed
        .iter()
        .take(count.unwrap_or(usize::MAX))
        .zip(1i64..)
        .map(|(w, position)| {
            Reply::Map(vec![
                (Reply::bulk("position"), Reply::Int(position)),
                (Reply::bulk("owner"), Reply::bulk(shown(&w.owner))),
                (Reply::bulk("mode"), Reply::bulk(w.mode.as_str())),
                (Reply::bulk("limit"), w.limit.map_or(Reply::Nil, Reply::Int)),
                (Reply::bulk("waited_ms"), Reply::Int(w.waited_ms)),
                (Reply::bulk("wait_left_ms"), Reply::Int(w.wait_left_ms)),
            ])
        })
        .collect();
    Ok(Reply::Array(entries))
}

/// The waiters any of `statuses` lists, once per owner (the longest wait
/// and the most left of it), longest waiting first.
fn merged(statuses: &[InstanceStatus]) -> Vec<WaiterState> {
    let mut all: Vec<WaiterState> = Vec::new();
    for w in statuses.iter().filter(|s| s.reachable && s.error.is_none()).flat_map(|s| s.line.iter()) {
        match all.iter_mut().find(|a| a.owner == w.owner) {
            Some(a) => {
                a.waited_ms = a.waited_ms.max(w.waited_ms);
                // -1: no limit, the most there is.
                a.wait_left_ms = if a.wait_left_ms < 0 || w.wait_left_ms < 0 { -1 } else { a.wait_left_ms.max(w.wait_left_ms) };
            }
            None => all.push(w.clone()),
        }
    }
    all.sort_by_key(|w| std::cmp::Reverse(w.waited_ms));
    all
}
