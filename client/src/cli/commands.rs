//! acquire, release, extend (status is in `status.rs`).

use std::time::{Duration, Instant};

use redlock::hold::{self, Kind, Patience, Request};
use redlock::{Lock, Redlock, Resources};
use serde::Serialize;

use super::args::{AcquireArgs, ExtendArgs, ReleaseArgs};
use super::exit::{self, Failure};
use super::explain;
use super::output::{self, millis, outcomes_json, pairs, Op, OutcomeJson};
use super::progress::Waiting;

/// What `acquire` and `run` ask for: `names`, all or nothing; with
/// `--wait` a wait in the line, else the configured retries.
pub fn request(names: &[String], ttl: Duration, wait: Option<Duration>, flags: Flags) -> Result<Request, Failure> {
    let resources = resources(names, flags.limit)?;
    let Flags { shared, limit, permits } = flags;
    let kind = match (limit, permits) {
        (None, Some(k)) => return Err(Failure::usage(format!("--permits {k} needs --limit N, the number of permits of the semaphore"))),
        (Some(n), Some(k)) if k > n => {
            return Err(Failure::usage(format!("--permits {k} is more than --limit {n}: a semaphore of {n} has {n} permits")))
        }
        // clap refuses --shared with --limit; this says so again for any caller.
        _ => Kind::of(shared, limit, permits).ok_or_else(|| Failure::usage("--shared and --limit exclude each other"))?,
    };
    let patience = wait.map_or(Patience::Retries, Patience::Wait);
    Ok(Request { resources, ttl, kind, patience })
}

/// The options of `acquire` and `run` that say what kind of hold to take.
#[derive(Clone, Copy, Debug, Default)]
pub struct Flags {
    pub shared: bool,
    pub limit: Option<u32>,
    pub permits: Option<u32>,
}

/// The resources a command names: none twice, and one alone with
/// `--limit` (a semaphore is one resource).
pub fn resources(names: &[String], limit: Option<u32>) -> Result<Resources, Failure> {
    let resources = Resources::of(names).map_err(Failure::usage)?;
    if let (Some(n), true) = (limit, resources.is_set()) {
        return Err(Failure::usage(format!("--limit {n} names one semaphore: give one RESOURCE, not {} ({resources})", resources.len())));
    }
    Ok(resources)
}

/// `now + wait`, or a usage error for a wait too long to represent.
pub fn deadline(wait: Option<Duration>) -> Result<Option<Instant>, Failure> {
    match wait {
        None => Ok(None),
        Some(w) => Instant::now()
            .checked_add(w)
            .map(Some)
            .ok_or_else(|| Failure::usage(format!("--wait {} is too long", humantime::format_duration(w)))),
    }
}

#[derive(Serialize)]
struct AcquireJson<'a> {
    /// The names joined with ", " (one name: the name).
    resource: &'a str,
    resources: Vec<&'a str>,
    owner: &'a str,
    token: Option<i64>,
    validity_ms: u64,
    ttl_ms: u64,
    fenced: usize,
    instances: Vec<OutcomeJson>,
}

pub async fn acquire(rl: &Redlock, args: &AcquireArgs, json: bool) -> Result<i32, Failure> {
    let deadline = deadline(args.wait)?;
    // Installed before the wait: Ctrl-C must clear the waiting line and
    // give up the place in line, not leave both behind.
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| Failure::general(format!("SIGINT handler: {e}")))?;
    let flags = Flags { shared: args.shared, limit: args.limit, permits: args.permits };
    let req = request(&args.resources, args.ttl, args.wait, flags)?;
    let named = req.resources.to_string();
    let waiting = Waiting::start(&named, rl.servers().len(), deadline);
    let taken = tokio::select! {
        taken = hold::take(rl, &req, waiting.observer()) => taken,
        _ = sigint.recv() => {
            waiting.finish();
            return Err(Failure::new(
                128 + libc::SIGINT,
                "interrupted",
                format!("interrupted while waiting for the lock on {named:?}; not acquired"),
            ));
        }
    };
    waiting.finish();
    let lock = match taken {
        Ok(lock) => lock,
        Err(e) => return Err(super::status::with_holders(rl, &e, &req, explain::not_acquired(&e, rl.quorum())).await),
    };
    explain::warn_misconfigured(&lock.instances, rl.quorum());
    let lock = renewed(rl, lock).await;
    // Validity left now, after the round trips, not at the acquisition.
    let validity_ms = millis(lock.remaining());
    if json {
        // A permit hold's keys but the semaphore's limit record: its permits.
        let record = args.limit.map(|_| redlock::semaphore::limit_key(&named));
        let resources = lock.resources.names().iter().map(String::as_str).filter(|n| Some(*n) != record.as_deref()).collect();
        output::json(&AcquireJson {
            resource: &lock.resource,
            resources,
            owner: &lock.owner,
            token: lock.token,
            validity_ms,
            ttl_ms: millis(lock.ttl),
            fenced: lock.fenced,
            instances: outcomes_json(&lock.instances, Op::Acquire),
        })?;
    } else {
        let mut lines = vec![("resource", lock.resource.clone()), ("owner", lock.owner.clone())];
        // Script mode has no fencing tokens: no empty `token:` line.
        if let Some(token) = lock.token {
            lines.push(("token", token.to_string()));
        }
        lines.push(("validity_ms", validity_ms.to_string()));
        output::stdout(&pairs(&lines))?;
    }
    Ok(exit::OK)
}

/// A lock granted at the end of a wait counts its validity from the
/// round that waited for it (no server can have started the lease before
/// it was sent), up to a third of the ttl before the grant: one extension
/// then gives it the whole ttl from now, which is what a script that
/// asked for `--ttl` plans with. Kept as it is when the extension fails
/// (it is held, with what it had left).
async fn renewed(rl: &Redlock, lock: Lock) -> Lock {
    if lock.remaining() >= lock.ttl.mul_f64(RENEW_BELOW) {
        return lock;
    }
    match rl.extend(&lock, lock.ttl).await {
        // What each server answered to the acquisition is what is shown.
        Ok(mut extended) => {
            extended.instances = lock.instances;
            extended
        }
        Err(_) => lock,
    }
}

/// `acquire` renews a lock whose validity left is below this share of
/// its ttl (the drift alone takes 1 %).
const RENEW_BELOW: f64 = 0.9;

#[derive(Serialize)]
struct ReleaseJson<'a> {
    /// The names joined with ", " (one name: the name).
    resource: &'a str,
    resources: &'a [String],
    /// With --limit: the permit's key that OWNER held.
    #[serde(skip_serializing_if = "Option::is_none")]
    permit: Option<&'a str>,
    released: usize,
    servers: usize,
    quorum: usize,
    instances: Vec<OutcomeJson>,
}

pub async fn release(rl: &Redlock, args: &ReleaseArgs, json: bool) -> Result<i32, Failure> {
    let (names, owner) = args.target().map_err(Failure::usage)?;
    let resources = resources(names, args.limit)?;
    let resource = resources.to_string();
    // A shared hold is released like any other: the servers release
    // OWNER's hold alone, so `--shared` needs nothing more.
    let (permit, released) = match args.limit {
        Some(limit) => rl.release_permit(&resource, limit, owner).await,
        None => rl.release_owner_all(&resources, owner).await.map(|r| (None, r)),
    }
    .map_err(|e| explain::other(&e))?;
    let (servers, quorum) = (rl.servers().len(), rl.quorum());
    if released.released < quorum {
        return Err(explain::not_released(&resource, owner, released.released, &released.instances, quorum));
    }
    if json {
        output::json(&ReleaseJson {
            resource: &resource,
            resources: resources.names(),
            permit: permit.as_deref(),
            released: released.released,
            servers,
            quorum,
            instances: outcomes_json(&released.instances, Op::Release),
        })?;
    } else {
        let mut lines = Vec::new();
        if let Some(p) = &permit {
            lines.push(("permit", p.clone()));
        }
        lines.extend([("released", released.released.to_string()), ("servers", servers.to_string())]);
        output::stdout(&pairs(&lines))?;
    }
    Ok(exit::OK)
}

#[derive(Serialize)]
struct ExtendJson<'a> {
    /// The names joined with ", " (one name: the name).
    resource: &'a str,
    resources: &'a [String],
    /// With --limit: the permit's key that OWNER holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    permit: Option<&'a str>,
    owner: &'a str,
    validity_ms: u64,
    ttl_ms: u64,
    extended: usize,
    instances: Vec<OutcomeJson>,
}

pub async fn extend(rl: &Redlock, args: &ExtendArgs, json: bool) -> Result<i32, Failure> {
    let (names, owner) = args.target().map_err(Failure::usage)?;
    let resources = resources(names, args.limit)?;
    let resource = resources.to_string();
    let extended = match args.limit {
        Some(limit) => rl.extend_permit(&resource, limit, owner, args.ttl).await,
        None => rl.extend_owner_all(&resources, owner, args.ttl).await,
    };
    let lock = extended.map_err(|e| explain::not_extended(&e, rl.quorum(), owner))?;
    let extended = lock.instances.iter().filter(|o| o.outcome == redlock::Outcome::Done).count();
    let validity_ms = millis(lock.remaining());
    if json {
        output::json(&ExtendJson {
            resource: &resource,
            resources: resources.names(),
            permit: args.limit.map(|_| lock.resource.as_str()),
            owner,
            validity_ms,
            ttl_ms: millis(args.ttl),
            extended,
            instances: outcomes_json(&lock.instances, Op::Extend),
        })?;
    } else {
        let mut lines = vec![("resource", resource.clone())];
        if args.limit.is_some() {
            lines.push(("permit", lock.resource.clone()));
        }
        lines.extend([("owner", owner.to_string()), ("validity_ms", validity_ms.to_string()), ("extended", extended.to_string())]);
        output::stdout(&pairs(&lines))?;
    }
    Ok(exit::OK)
}
