//! A lock command counted only once replicas have it. On a member that
//! waits for replicas (a Sentinel member, 1 unless its URL says otherwise;
//! any other but a cluster with `wait_replicas=N`), every grant,
//! extension, release and proclamation is followed, in the same pipeline,
//! by `WAIT N ms`, and counts only when at least N replicas acknowledged
//! it within the request's time (as Redisson's replica sync does).
//!
//! Why: after `SENTINEL FAILOVER` the promoted replica answers as master
//! at once, but the old master goes on answering as one for seconds,
//! until the sentinels reconfigure it, and a connection made to it before
//! the switch keeps reaching it. A grant it makes then reaches no replica (the promoted one left it) and
//! is gone when it is demoted, while its holder believes it for its
//! ttl; the new master's promotion quarantine started before that grant
//! and does not cover it. Such a master has no replica to acknowledge,
//! so its grants do not count: `Outcome::Failed` with `NOREPLICAS ...`, a
//! temporary failure like a timeout, which the round releases as it does
//! any failed member's.
//!
//! One round trip: the `WAIT` rides behind the command. Its timeout is
//! most of what is left of the request's time (`wait_timeout`), so that
//! its reply, a short count included, comes back before the request times
//! out and says why. `WAIT` holds up the connection it runs on: the
//! requests behind it on the shared connection wait for it (a replica's
//! acknowledgement when the replicas are healthy); a member whose replicas
//! do not acknowledge is a member down, each of its requests ending after
//! its `WAIT`'s timeout.
//!
//! What it does not do: `WAIT` is not consensus. A replica that
//! acknowledged may not be the one promoted, and an acknowledged write can
//! still be lost in a failover Sentinel runs without it; what it closes is
//! the window above, a grant no replica had.

use super::*;

/// What a member's replicas said of a lock command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Replicas {
    /// The member waits for none: no `WAIT` was sent.
    NotAsked,
    /// `WAIT` answered: this many replicas acknowledged within `within`
    /// (its timeout).
    Acked { count: i64, within: Duration },
    /// `WAIT` failed (the ACL refused it, a replica asked): its error.
    Failed(String),
}

/// A lock command's reply, with the id of the connection that ran it when
/// asked for (`CLIENT ID`), and what the replicas said.
pub(super) struct Sent<T> {
    pub(super) connection: Option<u64>,
    pub(super) reply: T,
    pub(super) replicas: Replicas,
}

/// What a lock command did, for `Instance::confirmed`'s message.
#[derive(Clone, Copy, Debug)]
pub(super) enum Write {
    Grant,
    Extension,
    Release,
    Proclamation,
}

impl Write {
    fn done(self) -> &'static str {
        match self {
            Write::Grant => "granted",
            Write::Extension => "extended",
            Write::Release => "released",
            Write::Proclamation => "proclaimed",
        }
    }

    /// What a write no replica had means if the master is demoted now.
    fn if_demoted(self) -> &'static str {
        match self {
            Write::Grant => "a replica promoted now would not have it",
            Write::Extension => "a replica promoted now would keep the lease as it was",
            Write::Release => "a replica promoted now would still hold the lock until its lease ends",
            Write::Proclamation => "a replica promoted now would keep the value as it was",
        }
    }
}

/// `WAIT`'s timeout with `left` of a request's time: half, the other half
/// kept for its reply to come back within the request timeout; at least
/// 1 ms (`WAIT n 0` would block for ever). A server ends a timed-out
/// `WAIT` from its cron, up to 100 ms late at the default `hz 10`: with a
/// fifth kept (100 ms of a 500 ms request) the reply of a member without
/// its replica raced the request's timeout and lost on a loaded machine,
/// a timeout instead of `NOREPLICAS` saying why.
pub(super) fn wait_timeout(left: Duration) -> Duration {
    (left / 2).max(Duration::from_millis(1))
}

impl Instance {
    /// Whether this member's lock commands wait for replicas.
    pub(super) fn waits_for_replicas(&self) -> bool {
        self.wait_replicas > 0
    }

    /// `cmd` as one pipeline: after `CLIENT ID` when `with_id`, before
    /// `WAIT n wait` when `wait` is given. Errors stay in the replies (see
    /// `lock_replies`).
    fn lock_pipeline(&self, cmd: &Cmd, with_id: bool, wait: Option<Duration>) -> Pipeline {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        if with_id {
            pipe.cmd("CLIENT").arg("ID");
        }
        pipe.add_command(cmd.clone());
        if let Some(wait) = wait {
            pipe.cmd("WAIT").arg(self.wait_replicas).arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1));
        }
        pipe
    }

    /// The replies of `lock_pipeline`: the command's error is the request's
    /// (as the server sent it, so that a quarantine, `READONLY` or a lost
    /// connection are told apart as for a lone command); `WAIT`'s is only
    /// an unconfirmed write.
    fn lock_replies<T: FromRedisValue>(&self, replies: Vec<Value>, with_id: bool, wait: Option<Duration>) -> redis::RedisResult<Sent<T>> {
        let missing = || RedisError::from((redis::ErrorKind::UnexpectedReturnType, "fewer replies than commands in a pipeline"));
        let mut replies = replies.into_iter();
        let connection = match with_id {
            true => Some(u64::from_redis_value(replies.next().ok_or_else(missing)?.extract_error()?)?),
            false => None,
        };
        let reply = T::from_redis_value(replies.next().ok_or_else(missing)?.extract_error()?)?;
        let replicas = match (wait, replies.next()) {
            (None, _) => Replicas::NotAsked,
            (Some(within), Some(Value::Int(count))) => Replicas::Acked { count, within },
            (Some(_), Some(Value::ServerError(e))) => Replicas::Failed(reply_text(&RedisError::from(e))),
            (Some(_), other) => Replicas::Failed(format!("unexpected WAIT reply {other:?}")),
        };
        Ok(Sent { connection, reply, replicas })
    }

    /// `cmd` on connection `conn` (a wait's own), with `WAIT` behind it
    /// when this member waits for replicas and `confirm`: on a connection,
    /// a `WAIT` runs after the command before it, however long that one
    /// blocks, so `wait` is counted from its grant.
    pub(super) async fn lock_on<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
        cmd: &Cmd,
        confirm: bool,
        wait: Duration,
    ) -> redis::RedisResult<Sent<T>> {
        if !confirm || !self.waits_for_replicas() {
            return cmd.query_async::<T>(conn).await.map(|reply| Sent { connection: None, reply, replicas: Replicas::NotAsked });
        }
        let replies = self.lock_pipeline(cmd, false, Some(wait)).query_async::<Vec<Value>>(conn).await?;
        self.lock_replies(replies, false, Some(wait))
    }

    /// `cmd` on the shared connection within the request timeout, after
    /// `CLIENT ID` when `with_id`, and confirmed by `WAIT` when this
    /// member waits for replicas, all in one pipeline.
    pub(super) async fn lock_query<T: FromRedisValue>(&self, cmd: &Cmd, with_id: bool) -> Result<Sent<T>, CallError> {
        if !with_id && !self.waits_for_replicas() {
            return self.query::<T>(cmd).await.map(|reply| Sent { connection: None, reply, replicas: Replicas::NotAsked });
        }
        self.request(|mut conn, deadline| async move {
            let wait = self.waits_for_replicas().then(|| wait_timeout(deadline.saturating_duration_since(tokio::time::Instant::now())));
            let replies = self.lock_pipeline(cmd, with_id, wait).query_async::<Vec<Value>>(&mut conn).await?;
            self.lock_replies(replies, with_id, wait)
        })
        .await
    }

    /// A script-mode lock command (`source` on `keys` with `args`), as
    /// `lock_query` sends it: by `EVALSHA` when no `WAIT` follows, by
    /// `EVAL` in the pipeline when one does.
    pub(super) async fn lock_script<T: FromRedisValue, K: ToRedisArgs + Sync>(
        &self,
        source: &str,
        keys: &[K],
        args: &[&str],
    ) -> Result<Sent<T>, CallError> {
        if !self.waits_for_replicas() {
            let reply = self.script::<T, K>(&Script::new(source), keys, args).await?;
            return Ok(Sent { connection: None, reply, replicas: Replicas::NotAsked });
        }
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(source).arg(keys.len());
        for key in keys {
            cmd.arg(key);
        }
        for a in args {
            cmd.arg(*a);
        }
        self.lock_query(&cmd, false).await
    }

    /// `outcome` of a lock command as it counts: a grant, or a command
    /// done, that fewer replicas acknowledged than this member waits for
    /// is a failure of this member (`NOREPLICAS ...`, temporary, as the
    /// server's own for `min-replicas-to-write`), saying why. A refusal
    /// stays one: it needs no replica.
    pub(super) fn confirmed(&self, outcome: Outcome, replicas: &Replicas, write: Write) -> Outcome {
        if !matches!(outcome, Outcome::Granted { .. } | Outcome::Done) {
            return outcome;
        }
        let wanted = self.wait_replicas;
        let why = match replicas {
            Replicas::NotAsked => return outcome,
            Replicas::Acked { count, .. } if *count >= i64::from(wanted) => return outcome,
            Replicas::Acked { count, within } => format!("{count} of {wanted} replica(s) acknowledged it within {} ms", within.as_millis()),
            Replicas::Failed(e) => format!("WAIT failed ({e})"),
        };
        Outcome::Failed(format!(
            "NOREPLICAS {} here, but {why} (wait_replicas={wanted}): not counted, as {}",
            write.done(),
            write.if_demoted()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_keeps_a_fifth_of_the_time_left_for_its_reply_and_never_asks_for_0() {
        assert_eq!(wait_timeout(Duration::from_millis(500)), Duration::from_millis(250));
        assert_eq!(wait_timeout(Duration::from_millis(1)), Duration::from_millis(1));
        assert_eq!(wait_timeout(Duration::ZERO), Duration::from_millis(1));
    }
}
