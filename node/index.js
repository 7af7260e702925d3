'use strict';
// redislock: the Redlock quorum client of the redislock project, for
// Node.js. The algorithm is the Rust crate `redlock` (client/ in the
// repository), bound with napi-rs (node/src); this file only gives it
// Node's idioms: Promises, AbortSignal, error classes, `using`,
// Symbol.asyncDispose, async iterators (`Election.observe`). Every network call runs on the crate's runtime,
// off the JavaScript thread. Times are milliseconds.

const util = require('node:util');
const native = require('./lib/native.js');
const args = require('./lib/args.js');
const errors = require('./lib/errors.js');

const { LockLostError, callNative, fromFailure, isFailure } = errors;

/**
 * Runs a native wait (`start(cancel)`) that `signal`, an AbortSignal,
 * ends: an abort cancels the native wait (its place in line given up)
 * and rejects with the signal's reason; any other failure is thrown as
 * its error. Resolves to the native result.
 */
async function untilAborted(signal, start) {
  signal?.throwIfAborted();
  let cancel;
  let onAbort;
  if (signal) {
    cancel = new native.Cancel();
    onAbort = () => cancel.cancel();
    signal.addEventListener('abort', onAbort, { once: true });
  }
  let result;
  try {
    result = await callNative(() => start(cancel));
  } finally {
    if (signal) signal.removeEventListener('abort', onAbort);
  }
  if (isFailure(result)) {
    if (result.code === 'ABORTED' && signal?.aborted) throw signal.reason;
    throw fromFailure(result);
  }
  return result;
}

// Node 20 has Symbol.asyncDispose; on an engine without it, the symbol
// TypeScript's and core-js's polyfills use.
const asyncDispose = typeof Symbol.asyncDispose === 'symbol' ? Symbol.asyncDispose : Symbol.for('Symbol.asyncDispose');

const REDLOCK_OPTIONS = [
  'quorum',
  'requestTimeout',
  'connectTimeout',
  'retryCount',
  'retryDelay',
  'retryJitter',
  'driftFactor',
  'extendFraction',
  'mode',
  'releaseOnDisconnect',
  'lockDelay',
  'tls',
];
// Options of time: a number of milliseconds, or a string with its unit.
const DURATION_OPTIONS = ['requestTimeout', 'connectTimeout', 'retryDelay', 'retryJitter', 'lockDelay'];
const ACQUIRE_OPTIONS = ['wait', 'retry', 'shared', 'limit', 'permits', 'signal', 'keep'];
const USING_OPTIONS = ['wait', 'shared', 'limit', 'permits', 'signal'];
const ELECTION_OPTIONS = ['ttl', 'observeInterval'];
const CAMPAIGN_OPTIONS = ['signal'];
const GROUP_OPTIONS = ['ttl'];
const JOIN_OPTIONS = ['signal'];

/**
 * An async iterator over a native reader (`next()` resolving to an item
 * or null at its end, `close()`), each item turned by `shape`: what
 * `watch`, `observe`, `asks` and `Group.watch` return. Leaving a `for
 * await` loop closes the reader.
 */
function iterate(reader, shape) {
  let done = false;
  const finished = { value: undefined, done: true };
  return {
    async next() {
      if (done) return finished;
      const item = await reader.next();
      if (item === null) {
        done = true;
        return finished;
      }
      return { value: shape(item), done: false };
    },
    async return() {
      done = true;
      reader.close();
      return finished;
    },
    [Symbol.asyncIterator]() {
      return this;
    },
  };
}

const kNative = Symbol('redislock.native');
const kMake = Symbol('redislock.make');

/** One held lock (an exclusive lock, a shared hold, or a permit). */
class Lock {
  #native;

  /** Made by `Redlock.acquire` and `Redlock.using` only. */
  constructor(key, nativeLock) {
    if (key !== kMake) throw new TypeError('a Lock is made by Redlock.acquire() or Redlock.using()');
    this.#native = nativeLock;
  }

  /** The resource as asked for (a permit's semaphore name); several resources' names joined with ", ". */
  get resource() { return this.#native.resource; }
  /** Each resource locked, in the order given: `[resource]`, or the array locked all or nothing. */
  get resources() { return this.#native.resources; }
  /** The key held on the servers: the resource, or a permit's own key (`<resource>:permit:<i>`). */
  get key() { return this.#native.key; }
  /** The random owner value of this acquisition. */
  get owner() { return this.#native.owner; }
  /** The fencing token (a bigint): larger than every earlier holder's; null in script mode. */
  get token() { return this.#native.token; }
  /** The lease (ms) of the latest acquisition or extension. */
  get ttl() { return this.#native.ttl; }
  /** Milliseconds the lock is still safe to use; 0 once lost or released. */
  get validity() { return this.#native.validity; }
  /** When the validity ends, as a `Date.now()` timestamp (ms). */
  get expiration() { return Date.now() + this.#native.validity; }
  /** A shared hold of a read-write lock. */
  get shared() { return this.#native.shared; }
  /** Lost: an extension reached no quorum, or the validity ran out. */
  get lost() { return this.#native.lost; }
  /** Why the lock was lost (`expired`, `refused`, `unreachable`, `revoked`); `null` while it is not. */
  get lossCause() { return this.#native.lossCause ?? null; }
  get released() { return this.#native.released; }
  /** Extended automatically while held (`using`, `acquire(..., { keep: true })`). */
  get kept() { return this.#native.kept; }
  /** Holds of this acquisition not yet released (see `reenter`). */
  get holds() { return this.#native.holds; }
  /** Each server's answer to the acquisition or latest extension: `{ server, kind, message }`. */
  get outcomes() { return this.#native.outcomes; }

  /**
   * Makes the lease `ttl` ms from now on a quorum (default: the lock's
   * ttl); a kept lock keeps extending to it. Resolves to this lock;
   * rejects with LockLostError when no quorum extended it.
   */
  async extend(ttl) {
    args.optionalDuration('ttl', ttl);
    const failure = await callNative(() => this.#native.extend(ttl));
    if (isFailure(failure)) throw fromFailure(failure);
    return this;
  }

  /**
   * Releases the lock on every server; resolves to `{ released }`, the
   * servers that released it. Rejects with LockLostError (after
   * releasing) when the lock had been lost.
   */
  async release() {
    const result = await callNative(() => this.#native.release());
    if (isFailure(result)) throw fromFailure(result);
    return result;
  }

  /**
   * Holds the lock once more, at once and without asking the servers:
   * another `Lock` of the same acquisition (the same owner and token).
   * Each is released once; the last release releases the lock on the
   * servers. Throws LockReleasedError or LockLostError when this hold is
   * no longer held.
   */
  reenter() {
    const result = this.#native.reenter();
    if (isFailure(result)) throw fromFailure(result);
    return new Lock(kMake, result);
  }

  /**
   * `['LOCK.FENCED', register, token, ...command]`: the write `command`
   * fenced by this lock's token, for the caller's own client of the Redis
   * that keeps the data (ioredis `redis.call(...lock.fenced('reg', 'SET',
   * 'k', 'v'))`, node-redis `client.sendCommand(lock.fenced(...))`). The
   * register there runs it only while no newer token has been accepted.
   * The arguments are passed on as given. Throws ConfigError for a lock
   * whose token cannot fence (script mode, a shared hold, permits),
   * LockReleasedError or LockLostError once it is no longer held.
   */
  fenced(register, ...command) {
    args.string('register', register);
    const prefix = this.#native.fencedPrefix(register);
    if (isFailure(prefix)) throw fromFailure(prefix);
    return [...prefix, ...command];
  }

  /**
   * `['LOCK.GUARD', key, owner, token, command, ...rest]`: `command`
   * guarded by this lock, for data in a Redis that holds the lock. Throws
   * as `fenced` does, but takes shared holds and permits too.
   */
  guarded(command, ...rest) {
    args.string('command', command);
    const prefix = this.#native.guardedPrefix();
    if (isFailure(prefix)) throw fromFailure(prefix);
    return [...prefix, command, ...rest];
  }

  /**
   * An async iterator of the asks to let this lock go (`Redlock.ask`, from
   * any client): `{ resource, message }` (`message` null when the asker
   * gave none), each ask once. It subscribes when first read, so an ask
   * made before that is not heard; it ends when the lock is lost or this
   * hold is released (at once when it already is). Nothing is released
   * for you: the holder decides, and `release()`s.
   */
  asks() {
    return iterate(this.#native.asks(), (ask) => ({ resource: ask.resource, message: ask.message ?? null }));
  }

  /** `await using lock = await redlock.acquire(...)`: released at the end of the block. */
  async [asyncDispose]() {
    if (!this.#native.released) await this.release();
  }

  [util.inspect.custom](depth, options, inspect) {
    const state = this.released ? 'released' : this.lost ? 'lost' : this.kept ? 'kept' : 'held';
    const shown = { resource: this.resource, token: this.token, state, validity: Math.round(this.validity), shared: this.shared };
    return `Lock ${inspect(shown, options)}`;
  }

  static [kNative](lock) {
    return lock.#native;
  }
}

/**
 * A Redlock client over independent servers running the redislock
 * module. Share one per process: every acquisition is a new owner, so
 * callers sharing it exclude each other like separate processes.
 */
class Redlock {
  #native;

  /**
   * @param urls `redis://host:port` per server (or one URL as a string)
   * @param options quorum, requestTimeout (50), connectTimeout (200),
   *   retryCount (3), retryDelay (150), retryJitter (50), driftFactor
   *   (0.01), extendFraction (1/3), mode ('module' | 'script'),
   *   releaseOnDisconnect (false), lockDelay (default: ttl × extendFraction +
   *   requestTimeout + drift + 200 ms), tls ({ ca, cert, key, rejectUnauthorized }
   *   for rediss:// servers: PEM strings or Buffers)
   */
  constructor(urls, options) {
    const list = args.urls(urls);
    const opts = args.options('options', options, REDLOCK_OPTIONS);
    for (const key of REDLOCK_OPTIONS) {
      if (key === 'mode') {
        if (opts.mode !== undefined && typeof opts.mode !== 'string') throw args.typeError('options.mode', "'module' or 'script'", opts.mode);
      } else if (key === 'releaseOnDisconnect') {
        if (opts[key] !== undefined && typeof opts[key] !== 'boolean') throw args.typeError('options.releaseOnDisconnect', 'a boolean', opts[key]);
      } else if (key === 'tls') {
        // Checked and turned into text below.
      } else if (DURATION_OPTIONS.includes(key)) {
        args.optionalDuration(`options.${key}`, opts[key]);
      } else {
        args.optionalNumber(`options.${key}`, opts[key]);
      }
    }
    const picked = {};
    for (const key of REDLOCK_OPTIONS) if (opts[key] !== undefined) picked[key] = opts[key];
    // PEM given as Buffers or arrays becomes text; `tls: null` is no TLS option.
    delete picked.tls;
    if (opts.tls !== undefined && opts.tls !== null) picked.tls = args.tls('options.tls', opts.tls);
    this.#native = callNative(() => new native.NativeRedlock(list, picked));
  }

  /** Servers that must agree. */
  get quorum() { return this.#native.quorum; }
  /** The servers, as `host:port`. */
  get servers() { return this.#native.servers; }

  /**
   * This client's metrics now, counted by the Rust client for every
   * acquisition through it and its elections: a plain object
   * (`acquisitions[kind][outcome].count`, `held`, `waiting`, `lost`,
   * `servers`, ...; docs/node.md, Metrics). Times in seconds, as in
   * Prometheus; counts are numbers.
   */
  metrics() { return this.#native.metrics(); }

  /**
   * The same counts in Prometheus's text format (0.0.4), each series with
   * its HELP and TYPE, as `redlock run --metrics` serves them: serve it
   * with `METRICS_CONTENT_TYPE`.
   */
  metricsText() { return this.#native.metricsText(); }

  /**
   * An async iterator of `resource`'s changes as a quorum of servers
   * announced them (docs/client.md, "Watching a lock"): `{ kind, token,
   * owner, value }`, each once, grants in token order with the lock's
   * token (a bigint). The servers' `redislock.notify` must name the key for
   * the ends of holds to be announced. It never ends by itself; leaving a
   * `for await` loop (break, return, throw) stops it.
   */
  watch(resource) {
    args.string('resource', resource);
    return iterate(this.#native.watch(resource), (change) => ({
      kind: change.kind,
      token: change.token,
      owner: change.owner,
      value: change.value ?? null,
    }));
  }

  /**
   * Asks every holder of `resource` to let it go, with `message` (why:
   * for the holder to log or weigh): each holder listening on its lock's
   * `asks()` hears it once. Nothing is released here; the holder decides.
   * Resolves to `{ asked, answered }`: the holders asked (the most one
   * server had; 0 when nobody holds it) and the servers that answered.
   * Rejects with RedlockError when too few servers answered (a holder
   * may then not hear it: ask again).
   */
  async ask(resource, message) {
    args.string('resource', resource);
    if (message !== undefined && message !== null) args.string('message', message);
    const result = await callNative(() => this.#native.ask(resource, message ?? undefined));
    if (isFailure(result)) throw fromFailure(result);
    return { asked: result.asked, answered: result.answered };
  }

  /**
   * Gives the semaphore `resource` (the name `acquire(..., { limit })`
   * takes) the limit `limit` on every server, while it is held
   * (docs/client.md, "Resizing across the quorum"): holders keep their
   * permits, a larger limit lets waiters in at once, a smaller one lets
   * nobody in until the holders above it left. Resolves to `{ held,
   * resized }` (`held` false: nobody holds it, nothing resized); throws
   * ConfigError for a limit that is not a whole number from 1 to 1024,
   * rejects with RedlockError when too few servers answered alike.
   */
  async resize(resource, limit) {
    args.string('resource', resource);
    args.number('limit', limit);
    const result = await callNative(() => this.#native.resize(resource, limit));
    if (isFailure(result)) throw fromFailure(result);
    return { held: result.held, resized: result.resized };
  }

  /**
   * The members of group `name` now, as a quorum of servers list them
   * (docs/client.md, "Group membership"), in join order: `{ owner, token,
   * value }` (`token` a bigint). Any client reads them, without joining.
   * Rejects with RedlockError when too few servers answered to tell.
   */
  async members(name) {
    args.string('name', name);
    const result = await callNative(() => this.#native.members(name));
    if (isFailure(result)) throw fromFailure(result);
    return result.map(toMember);
  }

  /**
   * Acquires `resource` for `ttl` ms: one name, or an array of names
   * (node-redlock's form) locked all or nothing, with one token, extended
   * and released together. Options:
   * - `wait` (ms, or Infinity): wait that long in the resource's FIFO
   *   line; without it (and without `retry`), one attempt.
   * - `retry`: retry `retryCount` times after `retryDelay ± retryJitter` ms.
   * - `shared`: a shared hold of a read-write lock.
   * - `limit`: one of `limit` permits of a semaphore named `resource`.
   * - `permits`: with `limit`, that many of its permits in one hold.
   * - `signal`: an AbortSignal that ends the wait (the promise rejects
   *   with its reason, and the wait leaves the line).
   * - `keep`: extended automatically until released (see `Lock.lost`).
   * Rejects with NotAcquiredError (QuorumUnreachableError when too few
   * servers answered).
   */
  async acquire(resource, ttl, options) {
    const names = args.resources('resource', resource);
    args.duration('ttl', ttl);
    const opts = args.options('options', options, ACQUIRE_OPTIONS);
    const wait = args.optionalDuration('options.wait', opts.wait);
    const limit = args.optionalNumber('options.limit', opts.limit);
    const permits = args.optionalNumber('options.permits', opts.permits);
    const retry = args.optionalBoolean('options.retry', opts.retry);
    const shared = args.optionalBoolean('options.shared', opts.shared);
    const keep = args.optionalBoolean('options.keep', opts.keep);
    const signal = args.signal('options.signal', opts.signal);
    const result = await untilAborted(signal, (cancel) =>
      this.#native.acquire(names, ttl, wait, retry, shared, limit, permits, keep, cancel));
    const lock = new Lock(kMake, result);
    if (signal?.aborted) {
      // Granted as the signal fired: the caller has given up on it.
      await lock.release().catch(() => {});
      throw signal.reason;
    }
    return lock;
  }

  /**
   * `using(resource, ttl, [options,] async (signal, lock) => ...)`:
   * acquires (waiting in the line: `wait` defaults to Infinity; `signal`
   * cancels), keeps the lease extended while the routine runs, aborts the
   * routine's `signal` with a LockLostError the moment the lock is lost,
   * and releases it at the end, also when the routine throws. Resolves to
   * the routine's value; rejects with the routine's error, or with the
   * LockLostError when the lock was lost while it ran.
   */
  async using(resource, ttl, ...rest) {
    if (rest.length === 0) throw args.typeError('routine', 'a function, as in using(resource, ttl, [options,] routine)', undefined);
    if (rest.length > 2) {
      const err = new TypeError(`using(resource, ttl, [options,] routine) takes at most 4 arguments, not ${2 + rest.length}`);
      err.code = 'ERR_INVALID_ARG_TYPE';
      throw err;
    }
    const routine = rest[rest.length - 1];
    if (typeof routine !== 'function') throw args.typeError('routine', 'a function', routine);
    const opts = args.options('options', rest.length === 2 ? rest[0] : undefined, USING_OPTIONS);
    const lock = await this.acquire(resource, ttl, { ...opts, wait: opts.wait ?? Infinity, keep: true });
    const controller = new AbortController();
    const watching = Lock[kNative](lock)
      .whenLost()
      .then(
        (lost) => {
          if (lost) {
            const why = 'the guard could not extend it in time; another client may hold it now, with a larger token';
            controller.abort(new LockLostError(`lock ${JSON.stringify(lock.resource)} lost: ${why}`, { resource: lock.resource }));
          }
        },
        () => {},
      );
    let value;
    let failed = false;
    let error;
    try {
      value = await routine(controller.signal, lock);
    } catch (e) {
      failed = true;
      error = e;
    }
    let releaseError;
    try {
      // Unless the routine released it itself.
      if (!lock.released) await lock.release();
    } catch (e) {
      releaseError = e;
    }
    await watching;
    if (failed) throw error;
    if (controller.signal.aborted) throw controller.signal.reason;
    if (releaseError) throw releaseError;
    return value;
  }

  /**
   * Resolves once the places in line this client gives up in the
   * background after a grant are given up. Await it before a process
   * exits right after acquiring, so the next in line need not wait for
   * the place's lease to end.
   */
  async settle() {
    await this.#native.settle();
  }

  [util.inspect.custom](depth, options, inspect) {
    return `Redlock ${inspect({ servers: this.servers, quorum: this.quorum }, options)}`;
  }

  static [kNative](redlock) {
    return redlock.#native;
  }
}

/**
 * This candidate leads an election (made by `Election.campaign`): its
 * `term` (the fencing token), the `value` it advertises, `lost`, and a
 * `signal` aborted the moment it is lost. Extended in the background
 * until it resigns (`resign`, or the end of an `await using` block).
 */
class Leadership {
  #native;
  #name;
  #signal;

  /** Made by `Election.campaign` only. */
  constructor(key, nativeLeadership, name) {
    if (key !== kMake) throw new TypeError('a Leadership is made by Election.campaign()');
    this.#native = nativeLeadership;
    this.#name = name;
  }

  /** The election's name. */
  get name() { return this.#name; }
  /** The term (a bigint): this leader's fencing token, larger than every earlier leader's. */
  get term() { return this.#native.term; }
  /** What this leader advertises now (see `proclaim`). */
  get value() { return this.#native.value; }
  /** Lost: an extension reached no quorum, or the validity ran out. Stop acting as the leader. */
  get lost() { return this.#native.lost; }
  /** Why the lock was lost (`expired`, `refused`, `unreachable`, `revoked`); `null` while it is not. */
  get lossCause() { return this.#native.lossCause ?? null; }
  /** `resign` was called. */
  get resigned() { return this.#native.resigned; }

  /**
   * An AbortSignal aborted with a LockLostError the moment the leadership
   * is lost, as `Redlock.using` gives its routine. Made on first use; from
   * then until the leadership is lost or resigned, it keeps the event loop
   * alive.
   */
  get signal() {
    if (this.#signal === undefined) {
      const controller = new AbortController();
      const [name, resource] = [this.#name, this.#native.resource];
      this.#signal = controller.signal;
      // Refers to neither this object nor its native one: a leadership
      // dropped unresigned is still collected (and resigns then).
      this.#native.whenLost().then(
        (lost) => {
          if (lost) {
            const why = 'an extension reached no quorum in time or its validity ran out; another candidate may lead now, with a larger term';
            controller.abort(new LockLostError(`leadership of election ${JSON.stringify(name)} lost: ${why}`, { resource }));
          }
        },
        () => {},
      );
    }
    return this.#signal;
  }

  /**
   * Advertises `value` instead; term and lease stay. Resolves once a
   * quorum stored it (every `leader()` then reads it); rejects with
   * RedlockError when no quorum did, LockLostError once the leadership is
   * lost, LockReleasedError after `resign`.
   */
  async proclaim(value) {
    args.string('value', value);
    const failure = await callNative(() => this.#native.proclaim(value));
    if (isFailure(failure)) throw fromFailure(failure);
  }

  /**
   * Steps down: the next candidate in line leads at once. Resolves to
   * `{ released }`; rejects with LockLostError (after resigning) when the
   * leadership had been lost, LockReleasedError when it resigned already.
   */
  async resign() {
    const result = await callNative(() => this.#native.resign());
    if (isFailure(result)) throw fromFailure(result);
    return result;
  }

  /** `await using lead = await election.campaign()`: resigns at the end of the block. */
  async [asyncDispose]() {
    if (!this.#native.resigned) await this.resign();
  }

  [util.inspect.custom](depth, options, inspect) {
    const state = this.resigned ? 'resigned' : this.lost ? 'lost' : 'leading';
    return `Leadership ${inspect({ name: this.name, term: this.term, value: this.value, state }, options)}`;
  }
}

/**
 * A leader election among the candidates on a Redlock's servers (docs/election.md),
 * modelled on etcd's: `campaign` waits in the election's fair line until
 * this candidate leads; `leader()` and `observe()` tell who leads. The
 * Redlock must have `releaseOnDisconnect: true` (a ConfigError says what
 * to change otherwise). Options: `ttl` (ms, default 10000), the leader's
 * lease; `observeInterval` (ms, default 200), how often `observe` reads.
 */
class Election {
  #native;

  constructor(redlock, name, value, options) {
    if (!(redlock instanceof Redlock)) throw args.typeError('redlock', 'a Redlock', redlock);
    args.string('name', name);
    args.string('value', value);
    const opts = args.options('options', options, ELECTION_OPTIONS);
    const ttl = args.optionalDuration('options.ttl', opts.ttl);
    const every = args.optionalDuration('options.observeInterval', opts.observeInterval);
    this.#native = callNative(() => new native.NativeElection(Redlock[kNative](redlock), name, value, ttl, every));
  }

  /** The election's name. */
  get name() { return this.#native.name; }
  /** What this candidate advertises when it leads. */
  get value() { return this.#native.value; }
  /** The leader's lease (ms), extended every third of it. */
  get ttl() { return this.#native.ttl; }
  /** How long (ms) the servers keep a leader's hold after its connection closed: a dead leader's successor waits that long. */
  get lockDelay() { return this.#native.lockDelay; }

  /**
   * Waits in the election's line until this candidate leads, and
   * resolves to its Leadership. `signal`: an AbortSignal that ends the
   * wait (the promise rejects with its reason, and the place in line is
   * given up).
   */
  async campaign(options) {
    const opts = args.options('options', options, CAMPAIGN_OPTIONS);
    const signal = args.signal('options.signal', opts.signal);
    const result = await untilAborted(signal, (cancel) => this.#native.campaign(cancel));
    const leadership = new Leadership(kMake, result, this.name);
    if (signal?.aborted) {
      // Led as the signal fired: the caller has given up on it.
      await leadership.resign().catch(() => {});
      throw signal.reason;
    }
    return leadership;
  }

  /**
   * The leader now, as a quorum of servers agree on it: `{ value, term }`,
   * or null (nobody leads, or a handover is under way). Rejects with
   * RedlockError when too few servers answered to tell.
   */
  async leader() {
    const result = await callNative(() => this.#native.leader());
    if (isFailure(result)) throw fromFailure(result);
    return result === null ? null : { value: result.value, term: result.term };
  }

  /**
   * An async iterator of each change of leader, `{ value, term }`: each new
   * term and each new value, in term order (never a lower term after a
   * higher one). It never ends by itself; leaving a `for await` loop
   * (break, return, throw) stops it.
   */
  observe() {
    return iterate(this.#native.observe(), (leader) => ({ value: leader.value, term: leader.term }));
  }

  [util.inspect.custom](depth, options, inspect) {
    return `Election ${inspect({ name: this.name, value: this.value, ttl: this.ttl }, options)}`;
  }
}

function toMember(m) {
  return { owner: m.owner, token: m.token, value: m.value };
}

/**
 * This member's place in a group (made by `Group.join`): its `token`,
 * the `value` it advertises, `lost`, and a `signal` aborted the moment it
 * is lost. Extended in the background until it leaves (`leave`, or the
 * end of an `await using` block).
 */
class Membership {
  #native;
  #signal;

  /** Made by `Group.join` only. */
  constructor(key, nativeMembership) {
    if (key !== kMake) throw new TypeError('a Membership is made by Group.join()');
    this.#native = nativeMembership;
  }

  /** The group's name. */
  get group() { return this.#native.group; }
  /** The hold's fencing token (a bigint), as `members()` lists it: larger than every member's that joined before. */
  get token() { return this.#native.token; }
  /** The owner the servers list this member under. */
  get owner() { return this.#native.owner; }
  /** What this member advertises now (see `proclaim`). */
  get value() { return this.#native.value; }
  /** Lost: an extension reached no quorum, or the validity ran out; readers may list it no more. */
  get lost() { return this.#native.lost; }
  /** `leave` was called. */
  get left() { return this.#native.left; }

  /**
   * An AbortSignal aborted with a LockLostError the moment the membership
   * is lost. Made on first use; from then until it is lost or left, it
   * keeps the event loop alive.
   */
  get signal() {
    if (this.#signal === undefined) {
      const controller = new AbortController();
      const [group, resource] = [this.#native.group, this.#native.resource];
      this.#signal = controller.signal;
      // Refers to neither this object nor its native one: a membership
      // dropped before it left is still collected (and leaves then).
      this.#native.whenLost().then(
        (lost) => {
          if (lost) {
            const why = 'an extension reached no quorum in time or its validity ran out; readers may list the member no more';
            controller.abort(new LockLostError(`membership of group ${JSON.stringify(group)} lost: ${why}`, { resource }));
          }
        },
        () => {},
      );
    }
    return this.#signal;
  }

  /**
   * Advertises `value` instead; token and lease stay. Resolves once a
   * quorum stored it (`members()` then lists it); rejects with
   * RedlockError when no quorum did, LockLostError once the membership is
   * lost, LockReleasedError after `leave`, ConfigError for ''.
   */
  async proclaim(value) {
    args.string('value', value);
    const failure = await callNative(() => this.#native.proclaim(value));
    if (isFailure(failure)) throw fromFailure(failure);
  }

  /**
   * Leaves the group now: released on every server. Resolves to `{
   * released }`; rejects with LockLostError (after leaving) when the
   * membership had been lost, LockReleasedError when it left already.
   */
  async leave() {
    const result = await callNative(() => this.#native.leave());
    if (isFailure(result)) throw fromFailure(result);
    return result;
  }

  /** `await using member = await group.join(value)`: leaves at the end of the block. */
  async [asyncDispose]() {
    if (!this.#native.left) await this.leave();
  }

  [util.inspect.custom](depth, options, inspect) {
    const state = this.left ? 'left' : this.lost ? 'lost' : 'member';
    return `Membership ${inspect({ group: this.group, token: this.token, value: this.value, state }, options)}`;
  }
}

/**
 * A group on a Redlock's servers (docs/client.md, "Group membership"):
 * each `join(value)` is a member of its own, a shared hold of the group's
 * key that carries `value`, kept until it leaves or dies; `members()`
 * lists who is in. The Redlock must have `releaseOnDisconnect: true` (a
 * ConfigError says what to change otherwise). Options: `ttl` (ms,
 * default 10000), a member's lease.
 */
class Group {
  #native;

  constructor(redlock, name, options) {
    if (!(redlock instanceof Redlock)) throw args.typeError('redlock', 'a Redlock', redlock);
    args.string('name', name);
    const opts = args.options('options', options, GROUP_OPTIONS);
    const ttl = args.optionalDuration('options.ttl', opts.ttl);
    this.#native = callNative(() => new native.NativeGroup(Redlock[kNative](redlock), name, ttl));
  }

  /** The group's name. */
  get name() { return this.#native.name; }
  /** The group's key on the servers (`redlock:group:<name>`). */
  get resource() { return this.#native.resource; }
  /** A member's lease (ms), extended every third of it. */
  get ttl() { return this.#native.ttl; }
  /** How long (ms) the servers keep listing a member after its connection closed: a dead member is listed that long. */
  get lockDelay() { return this.#native.lockDelay; }

  /**
   * Joins the group with `value` (non-empty: readers know a member by
   * it), and resolves to the Membership. `signal`: an AbortSignal that
   * ends the wait (behind an exclusive holder of the key, if any).
   * Rejects with ConfigError for an empty value.
   */
  async join(value, options) {
    args.string('value', value);
    const opts = args.options('options', options, JOIN_OPTIONS);
    const signal = args.signal('options.signal', opts.signal);
    const result = await untilAborted(signal, (cancel) => this.#native.join(value, cancel));
    const membership = new Membership(kMake, result);
    if (signal?.aborted) {
      // Joined as the signal fired: the caller has given up on it.
      await membership.leave().catch(() => {});
      throw signal.reason;
    }
    return membership;
  }

  /**
   * The members now, as a quorum of servers list them, in join order:
   * `{ owner, token, value }`. Rejects with RedlockError when too few
   * servers answered to tell.
   */
  async members() {
    const result = await callNative(() => this.#native.members());
    if (isFailure(result)) throw fromFailure(result);
    return result.map(toMember);
  }

  /**
   * An async iterator of the group key's changes, as `Redlock.watch`
   * gives a lock's: a `grant` or `handoff` is a member joining with its
   * value, a `proclaim` a new value, a `release`, `expire`, `session` or
   * `revoke` a member leaving (announced where the servers'
   * `redislock.notify` names the key, e.g. `redlock:group:*`).
   */
  watch() {
    return iterate(this.#native.watch(), (change) => ({
      kind: change.kind,
      token: change.token,
      owner: change.owner,
      value: change.value ?? null,
    }));
  }

  [util.inspect.custom](depth, options, inspect) {
    return `Group ${inspect({ name: this.name, ttl: this.ttl }, options)}`;
  }
}

/** The Content-Type of `Redlock.metricsText()` (the Rust client's). */
const METRICS_CONTENT_TYPE = native.metricsContentType();

module.exports = {
  Redlock,
  Lock,
  Election,
  Leadership,
  Group,
  Membership,
  RedlockError: errors.RedlockError,
  NotAcquiredError: errors.NotAcquiredError,
  QuorumUnreachableError: errors.QuorumUnreachableError,
  LockLostError: errors.LockLostError,
  ConfigError: errors.ConfigError,
  LockReleasedError: errors.LockReleasedError,
  METRICS_CONTENT_TYPE,
};
