'use strict';
// The package's error classes, each with a stable `code`, and the
// translation of the native layer's failures (plain objects, see
// src/errors.rs) and thrown argument errors into them.

/** Every error of the lock client itself. */
class RedlockError extends Error {
  constructor(message, details = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.code = new.target.code;
    if (details.resource !== undefined) this.resource = details.resource;
  }
}
RedlockError.code = 'ERR_REDLOCK';

/**
 * No quorum granted the lock: held by another owner (`reason` 'held'),
 * servers in their restart quarantine ('quarantine'), granted too late
 * ('no_validity'). `outcomes`: each server's answer.
 */
class NotAcquiredError extends RedlockError {
  constructor(message, details = {}) {
    super(message, details);
    this.reason = details.reason ?? null;
    this.attempts = details.attempts ?? 0;
    this.outcomes = details.outcomes ?? [];
    this.quarantineMsLeft = details.quarantineMsLeft ?? null;
  }
}
NotAcquiredError.code = 'ERR_REDLOCK_NOT_ACQUIRED';

/** Too few servers answered at all to decide (a NotAcquiredError). */
class QuorumUnreachableError extends NotAcquiredError {}
QuorumUnreachableError.code = 'ERR_REDLOCK_QUORUM_UNREACHABLE';

/**
 * The lock is lost: an extension reached no quorum, or its validity ran
 * out. Another client may hold it now, with a larger token.
 */
class LockLostError extends RedlockError {
  constructor(message, details = {}) {
    super(message, details);
    this.outcomes = details.outcomes ?? [];
  }
}
LockLostError.code = 'ERR_REDLOCK_LOCK_LOST';

/**
 * A bad argument value (negative ttl, no servers, a bad URL, limit 0, ...)
 * or a request the servers refuse as configured (a ttl over their
 * redislock.max-ttl, a server listed twice, ...).
 */
class ConfigError extends RedlockError {
  constructor(message, details = {}) {
    super(message, details);
    if (details.reason !== undefined) this.reason = details.reason;
    if (details.outcomes !== undefined) this.outcomes = details.outcomes;
  }
}
ConfigError.code = 'ERR_REDLOCK_CONFIG';

/** The lock was released already. */
class LockReleasedError extends RedlockError {}
LockReleasedError.code = 'ERR_REDLOCK_RELEASED';

/** A failure object of the native layer as an error of its class. */
function fromFailure(f) {
  const details = {
    resource: f.resource ?? undefined,
    reason: f.reason ?? undefined,
    attempts: f.attempts ?? undefined,
    outcomes: f.outcomes,
    quarantineMsLeft: f.quarantineMsLeft ?? undefined,
  };
  switch (f.code) {
    case 'NOT_ACQUIRED': return new NotAcquiredError(f.message, details);
    case 'QUORUM_UNREACHABLE': return new QuorumUnreachableError(f.message, details);
    case 'LOCK_LOST': return new LockLostError(f.message, details);
    case 'CONFIG': return new ConfigError(f.message, details);
    case 'RELEASED': return new LockReleasedError(f.message, details);
    default: return new RedlockError(f.message, details);
  }
}

/** Whether a native Promise's value is a failure object. */
function isFailure(value) {
  return value !== null && typeof value === 'object' && typeof value.code === 'string' && typeof value.message === 'string';
}

/**
 * Runs a native call; its thrown argument errors become ConfigError
 * (a value, `InvalidArg`) or TypeError (a type napi could not convert).
 */
function callNative(fn) {
  try {
    return fn();
  } catch (e) {
    if (e && e.code === 'InvalidArg') throw new ConfigError(e.message);
    if (e && typeof e.code === 'string' && /Expected$/.test(e.code)) {
      const err = new TypeError(e.message);
      err.code = 'ERR_INVALID_ARG_TYPE';
      throw err;
    }
    throw e;
  }
}

module.exports = {
  RedlockError,
  NotAcquiredError,
  QuorumUnreachableError,
  LockLostError,
  ConfigError,
  LockReleasedError,
  fromFailure,
  isFailure,
  callNative,
};
