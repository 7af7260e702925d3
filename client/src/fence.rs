//! The fence enforced where the data lives: the commands a holder sends on
//! its own connection to the Redis that keeps its data, so that the store
//! itself refuses a write of a holder whose lock has passed on (a process
//! paused past its lease, a stopped VM), which no client-side check can.
//!
//! - `fenced`: `LOCK.FENCED register token command ...`, for data on
//!   another Redis than the locks (loaded with the module): the register
//!   runs the command only for a token at least as large as every token it
//!   has accepted, and then raises itself to it. The quorum's token is
//!   larger than every earlier holder's, so once a newer holder has written
//!   (or raised the register), every write of an older one is refused.
//! - `guarded`: `LOCK.GUARD key owner token command ...`, for data in a
//!   Redis that holds the lock itself: the command runs only while the
//!   owner holds the key under the token there.
//!
//! The functions only build commands (no I/O, no check of the lock); the
//! methods on `Lock` and `LockGuard` take the key, owner and token from the
//! hold, and refuse a hold whose token cannot fence (`Error::Unfenced`) or
//! whose validity ran out (`Error::Expired`).

use redis::{Cmd, ToRedisArgs};

use crate::error::Error;
use crate::guard::LockGuard;
use crate::redlock::Lock;

/// The register's command: `LOCK.FENCED register token [command [arg ...]]`.
pub const FENCED: &str = "LOCK.FENCED";
/// The guard's command: `LOCK.GUARD key owner token command [arg ...]`.
pub const GUARD: &str = "LOCK.GUARD";

/// `LOCK.FENCED register token command...`: runs `command` (its words in
/// order: `&["SET", "k", "v"]`, a `Vec`, a tuple such as `("SET", "k", 5)`) on the data
/// server only if `token` is at least the highest token `register` has
/// accepted, and raises the register to `token`. With an empty `command`
/// it only raises the register.
pub fn fenced<C: ToRedisArgs>(register: &str, token: i64, command: C) -> Cmd {
    let mut cmd = redis::cmd(FENCED);
    cmd.arg(register).arg(token).arg(command);
    cmd
}

/// `LOCK.GUARD key owner token command...`: runs `command` only while
/// `owner` holds `key` under `token` on the server it is sent to.
pub fn guarded<C: ToRedisArgs>(key: &str, owner: &str, token: i64, command: C) -> Cmd {
    let mut cmd = redis::cmd(GUARD);
    cmd.arg(key).arg(owner).arg(token).arg(command);
    cmd
}

const NO_TOKEN: &str = "it has no fencing token: it was taken in script mode (Mode::Script), which has none; take it in module mode";
const SHARED: &str = "it is a shared hold, whose token other shared holders' tokens follow while it holds: a register would \
                      refuse its writes once a later reader wrote; fence writes under an exclusive hold, or guard this \
                      one with `guarded`";
const PERMIT: &str = "it is a semaphore's permit, held beside the other permits' holders, whose tokens are as large: a \
                      register would refuse its writes once one of them wrote; guard them with `guarded`, or fence with \
                      a register of this permit's own (fence::fenced(lock.resource, token, ...))";
const NO_COMMAND: &str = "LOCK.GUARD needs the command to run: name it and its arguments";

impl Lock {
    /// The token a fenced write carries: this hold's, when it orders the
    /// hold among every holder of its resources (an exclusive lock or a
    /// set). `Error::Unfenced` without a token (script mode), for a shared
    /// hold and for a semaphore's permits, whose holders hold at once.
    pub fn fence_token(&self) -> Result<i64, Error> {
        let unfenced = |why| Err(Error::Unfenced { resource: self.resource.clone(), why });
        let Some(token) = self.token else { return unfenced(NO_TOKEN) };
        if self.shared {
            return unfenced(SHARED);
        }
        if self.permit {
            return unfenced(PERMIT);
        }
        Ok(token)
    }

    /// The words before the command of this hold's fenced write:
    /// `["LOCK.FENCED", register, token]` (see `fenced`). For a binding,
    /// which appends its caller's own arguments.
    pub fn fenced_prefix(&self, register: &str) -> Result<[String; 3], Error> {
        self.usable()?;
        Ok([FENCED.to_string(), register.to_string(), self.fence_token()?.to_string()])
    }

    /// The words before the command of this hold's guarded one:
    /// `["LOCK.GUARD", key, owner, token]` (see `guarded`). The key is the
    /// resource; for a set of resources (or of a semaphore's permit keys)
    /// its first, which the servers hold, extend and free with the rest.
    /// Any hold with a token: exclusive, shared or a permit, as each is
    /// checked on its own.
    pub fn guarded_prefix(&self) -> Result<[String; 4], Error> {
        self.usable()?;
        let Some(token) = self.token else {
            return Err(Error::Unfenced { resource: self.resource.clone(), why: NO_TOKEN });
        };
        let key = self.resources.names().first().map_or(self.resource.as_str(), String::as_str);
        Ok([GUARD.to_string(), key.to_string(), self.owner.clone(), token.to_string()])
    }

    /// `fenced(register, token, command)` with this hold's token, for the
    /// caller's own connection to the Redis that keeps the data:
    ///
    /// ```no_run
    /// # async fn demo(rl: redlock::Redlock, data: redis::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let lock = rl.lock("orders:42", std::time::Duration::from_secs(10)).await?;
    /// let mut conn = data.get_multiplexed_async_connection().await?;
    /// let _: () = lock.fenced("orders:fence", ("SET", "order:42", "paid"))?.query_async(&mut conn).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// `Error::Expired` once the validity of this copy ran out (a guard's
    /// latest copy is `LockGuard::lock()`); `Error::Unfenced` as
    /// `fence_token` says. The command is only built: a holder paused
    /// between building and sending is refused by the register.
    pub fn fenced<C: ToRedisArgs>(&self, register: &str, command: C) -> Result<Cmd, Error> {
        self.usable()?;
        Ok(fenced(register, self.fence_token()?, command))
    }

    /// `guarded(key, owner, token, command)` for this hold (the key as
    /// `guarded_prefix` chooses it), for data in a Redis that holds the
    /// lock: a single server, or one of the quorum's, which refuses it
    /// (`FENCED ...`) when it did not grant the lock. Errors as `fenced`,
    /// and `Error::Unfenced` for an empty command.
    pub fn guarded<C: ToRedisArgs>(&self, command: C) -> Result<Cmd, Error> {
        let [_, key, owner, token] = self.guarded_prefix()?;
        let mut cmd = redis::cmd(GUARD);
        cmd.arg(key).arg(owner).arg(token);
        let words = cmd.args_iter().count();
        cmd.arg(command);
        if cmd.args_iter().count() == words {
            return Err(Error::Unfenced { resource: self.resource.clone(), why: NO_COMMAND });
        }
        Ok(cmd)
    }

    /// `Error::Expired` once the validity of this copy ran out.
    fn usable(&self) -> Result<(), Error> {
        if self.remaining().is_zero() {
            return Err(Error::Expired { resource: self.resource.clone() });
        }
        Ok(())
    }
}

impl LockGuard {
    /// `Lock::fenced` on the lock as of its latest extension;
    /// `Error::Expired` once it is lost.
    pub fn fenced<C: ToRedisArgs>(&self, register: &str, command: C) -> Result<Cmd, Error> {
        self.current()?.fenced(register, command)
    }

    /// `Lock::guarded` on the lock as of its latest extension;
    /// `Error::Expired` once it is lost.
    pub fn guarded<C: ToRedisArgs>(&self, command: C) -> Result<Cmd, Error> {
        self.current()?.guarded(command)
    }

    fn current(&self) -> Result<Lock, Error> {
        let lock = self.lock();
        if self.is_lost() {
            return Err(Error::Expired { resource: lock.resource });
        }
        Ok(lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn lock(token: Option<i64>, shared: bool, permit: bool, resources: &[&str]) -> Lock {
        let resources = Resources::of(resources).expect("resources");
        Lock {
            resource: resources.to_string(),
            resources,
            owner: "o1".to_string(),
            token,
            validity: Duration::from_secs(60),
            acquired_at: Instant::now(),
            ttl: Duration::from_secs(60),
            instances: Vec::new(),
            fenced: 0,
            shared,
            permit,
            session_window: None,
            holds: Arc::new(AtomicUsize::new(1)),
            ended: Arc::new(AtomicBool::new(false)),
            held: None,
        }
    }

    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<not a word>".to_string(),
            })
            .collect()
    }

    #[test]
    fn the_commands_carry_register_key_owner_and_token_before_the_command() {
        assert_eq!(words(&fenced("reg", 42, &["SET", "k", "v"])), ["LOCK.FENCED", "reg", "42", "SET", "k", "v"]);
        assert_eq!(words(&fenced("reg", 42, ("INCRBY", "n", 5))), ["LOCK.FENCED", "reg", "42", "INCRBY", "n", "5"]);
        assert_eq!(words(&fenced("reg", 42, Vec::<String>::new())), ["LOCK.FENCED", "reg", "42"], "only raises the register");
        assert_eq!(words(&guarded("k", "o", 7, &["HSET", "h", "f", "v"])), ["LOCK.GUARD", "k", "o", "7", "HSET", "h", "f", "v"]);
    }

    #[test]
    fn a_hold_fences_with_its_own_token() {
        let one = lock(Some(9), false, false, &["orders:42"]);
        assert_eq!(words(&one.fenced("reg", &["SET", "k", "v"]).expect("fenced")), ["LOCK.FENCED", "reg", "9", "SET", "k", "v"]);
        assert_eq!(words(&one.guarded(&["GET", "k"]).expect("guarded")), ["LOCK.GUARD", "orders:42", "o1", "9", "GET", "k"]);
        assert_eq!(one.fenced_prefix("reg").expect("prefix"), ["LOCK.FENCED", "reg", "9"]);
        assert_eq!(one.guarded_prefix().expect("prefix"), ["LOCK.GUARD", "orders:42", "o1", "9"]);
        // A set has one token for all its members; its first is guarded.
        let set = lock(Some(11), false, false, &["a", "b"]);
        assert_eq!(set.fence_token().expect("a set fences"), 11);
        assert_eq!(set.guarded_prefix().expect("prefix"), ["LOCK.GUARD", "a", "o1", "11"]);
    }

    #[test]
    fn holds_whose_token_cannot_fence_are_refused_by_name() {
        let why = |l: &Lock| match l.fenced("reg", &["SET", "k", "v"]) {
            Err(Error::Unfenced { why, .. }) => why,
            other => panic!("fenced gave {other:?}"),
        };
        assert_eq!(why(&lock(None, false, false, &["r"])), NO_TOKEN);
        assert_eq!(why(&lock(Some(3), true, false, &["r"])), SHARED);
        assert_eq!(why(&lock(Some(3), false, true, &["s:permit:0", "s:permits"])), PERMIT);
        // Guarded: any hold with a token, each checked on its own.
        assert!(lock(Some(3), true, false, &["r"]).guarded(&["GET", "k"]).is_ok());
        assert_eq!(lock(Some(3), false, true, &["s:permit:0", "s:permits"]).guarded_prefix().expect("permit")[1], "s:permit:0");
        assert!(matches!(lock(None, false, false, &["r"]).guarded(&["GET", "k"]), Err(Error::Unfenced { why: NO_TOKEN, .. })));
        assert!(matches!(lock(Some(3), false, false, &["r"]).guarded(Vec::<String>::new()), Err(Error::Unfenced { why: NO_COMMAND, .. })));
    }

    #[test]
    fn a_copy_whose_validity_ran_out_builds_nothing() {
        let mut old = lock(Some(5), false, false, &["r"]);
        old.validity = Duration::ZERO;
        assert!(matches!(old.fenced("reg", &["SET", "k", "v"]), Err(Error::Expired { .. })));
        assert!(matches!(old.guarded(&["SET", "k", "v"]), Err(Error::Expired { .. })));
        assert!(matches!(old.fenced_prefix("reg"), Err(Error::Expired { .. })));
    }
}
