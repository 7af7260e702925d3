/// <reference lib="esnext.disposable" />
// Type declarations of the `redislock` package (index.js, index.mjs).
// Times are milliseconds; fencing tokens are bigints.

/**
 * A duration: a number of milliseconds, or a string with its unit
 * (`'500ms'`, `'10s'`, `'2m'`, `'1h 30m'`: the `redlock` command's). A bare
 * number below an argument's floor (a ttl under 100, a timeout under 10,
 * a wait or lockDelay from 1 to 9: most likely meant in seconds) throws a
 * RangeError (`ERR_OUT_OF_RANGE`) naming the unit; a string is taken as
 * written.
 */
export type Duration = number | string;

/** Options of `new Redlock(urls, options)`: the Rust client's `Settings`. */
export interface RedlockOptions {
  /** Servers that must agree. Default: a majority, N/2 + 1. */
  quorum?: number;
  /** Per-request timeout (ms), much smaller than any ttl. Default 50. */
  requestTimeout?: Duration;
  /** Timeout to (re)connect to a server (ms). Default 200. */
  connectTimeout?: Duration;
  /** Attempts after the first one with `acquire(..., { retry: true })`. Default 3. */
  retryCount?: number;
  /** Pause between attempts that poll (ms): `retryDelay ± retryJitter`. Default 150. */
  retryDelay?: Duration;
  /** Default 50: pauses of 100 to 200 ms. */
  retryJitter?: Duration;
  /** Clock drift allowed for: ttl × driftFactor + 2 ms. Default 0.01. */
  driftFactor?: number;
  /** A kept lock is extended after this fraction of its ttl. Default 1/3. */
  extendFraction?: number;
  /** `'module'` (default: LOCK.* commands, fencing tokens) or `'script'` (plain Redis, SET NX PX, no tokens). */
  mode?: 'module' | 'script';
  /**
   * Bind each lock to this process's connections (`LOCK.ACQUIRE ... SESSION`):
   * when the process dies, even killed -9, the servers release it (after
   * `lockDelay`), not when its ttl runs out; a hold whose connection closed
   * counts as lost, never taken again. Module mode only. Default false.
   */
  releaseOnDisconnect?: boolean;
  /**
   * With `releaseOnDisconnect`: how long (ms) a server keeps the lock after
   * the connection closed. Default: the extension interval (`ttl ×
   * extendFraction`) plus `requestTimeout` plus the clock drift plus 200 ms,
   * so a holder whose connection is reset or severed is told it lost the
   * lock (by its own clock, 100 ms ahead) before anyone else can be granted
   * it. A delay too short for that, 0 included, is taken as given: the next
   * holder may then be granted up to one extension interval before the old
   * one learns of it, and only the fencing token refuses its late writes.
   */
  lockDelay?: Duration;
  /**
   * TLS of the `rediss://` servers (TLS is chosen per server by its URL; given
   * while no URL is `rediss://`, it is refused). `ca`: the CA certificate(s)
   * the servers' certificates must chain to (default: the system's roots);
   * `cert` and `key`: this client's certificate and key, for servers that
   * check clients (`tls-auth-clients yes`); PEM as strings or Buffers (`Uint8Array`s).
   * `rejectUnauthorized: false` turns certificate checks off (tests only;
   * every connection error then says so).
   */
  tls?: TlsOptions;
}

/** `RedlockOptions.tls`, in the shape of Node's `tls.connect` options. */
export interface TlsOptions {
  ca?: string | Uint8Array | ReadonlyArray<string | Uint8Array>;
  cert?: string | Uint8Array | ReadonlyArray<string | Uint8Array>;
  key?: string | Uint8Array | ReadonlyArray<string | Uint8Array>;
  /** Default true: `false` checks no certificate. */
  rejectUnauthorized?: boolean;
}

/** What to acquire, and how long to try. */
export interface AcquireOptions {
  /** Wait up to this long (ms, or `Infinity`) in the resource's FIFO line. Without it (and without `retry`): one attempt. */
  wait?: Duration;
  /** Without `wait`: retry `retryCount` times, `retryDelay ± retryJitter` ms apart. */
  retry?: boolean;
  /** A shared hold of a read-write lock: readers together, never beside a writer. */
  shared?: boolean;
  /** One of `limit` permits (1 to 1024) of a semaphore named by the resource. */
  limit?: number;
  /** With `limit`: this many of its permits (1 to `limit`) in one hold. Default 1. */
  permits?: number;
  /** Ends the wait: the promise rejects with `signal.reason`, and the wait leaves the line. */
  signal?: AbortSignal;
  /** Extend the lock automatically until it is released (`lock.lost` tells a loss). */
  keep?: boolean;
}

/** Options of `Redlock.using`: it always waits in line (`wait` defaults to `Infinity`) and keeps the lock. */
export interface UsingOptions {
  wait?: Duration;
  shared?: boolean;
  limit?: number;
  permits?: number;
  /** Ends the wait for the lock (not the routine: its own `signal` says when the lock is lost). */
  signal?: AbortSignal;
}

/** One server's answer. */
export interface ServerOutcome {
  /** `host:port`. */
  server: string;
  /** `granted`, `refused`, `ok`, `timeout`, `connection_refused`, `dns_failure`, `connect_timeout`, `unreachable`, `quarantine`, `auth_failed`, `tls_failed`, `module_missing`, `duplicate_server`, `error`. */
  kind: string;
  /** The client's text, e.g. `granted (token 42)`. */
  message: string;
}

export interface Released {
  /** Servers that released the lock. */
  released: number;
}

/** An argument of a command for another client (ioredis, node-redis), passed on as given. */
export type CommandArg = string | number | Uint8Array;

/** One held lock: an exclusive lock, a shared hold, or a permit. */
export class Lock implements AsyncDisposable {
  private constructor();
  /** The resource as asked for (a permit's semaphore name); several resources' names joined with `", "`. */
  readonly resource: string;
  /** Each resource locked, in the order given: `[resource]`, or the array locked all or nothing. */
  readonly resources: string[];
  /** The key held on the servers: the resource, or a permit's own key (`<resource>:permit:<i>`). */
  readonly key: string;
  /** The random owner value of this acquisition. */
  readonly owner: string;
  /** The fencing token: larger than every earlier holder's. `null` in script mode. */
  readonly token: bigint | null;
  /** The lease (ms) of the latest acquisition or extension. */
  readonly ttl: number;
  /** Milliseconds the lock is still safe to use; 0 once lost or released. */
  readonly validity: number;
  /** When the validity ends, as a `Date.now()` timestamp. */
  readonly expiration: number;
  readonly shared: boolean;
  /** An extension reached no quorum, or the validity ran out. */
  readonly lost: boolean;
  /** Why the lock was lost (`revoked`: an operator took it away); `null` while it is not. */
  readonly lossCause: MetricsLossCause | null;
  readonly released: boolean;
  /** Extended automatically while held. */
  readonly kept: boolean;
  /** Holds of this acquisition not yet released (see `reenter`). */
  readonly holds: number;
  /** Each server's answer to the acquisition or latest extension. */
  readonly outcomes: ServerOutcome[];
  /** The lease becomes `ttl` (default: the lock's) from now on a quorum; a kept lock keeps extending to it. */
  extend(ttl?: Duration): Promise<this>;
  /** Releases this hold; the last hold releases the lock on every server. Rejects with LockLostError (after releasing) if it had been lost. */
  release(): Promise<Released>;
  /** Another `Lock` of the same acquisition, at once, without asking the servers; each is released once, the last release releases the lock. Throws LockReleasedError or LockLostError when this hold is no longer held. */
  reenter(): Lock;
  /**
   * `['LOCK.FENCED', register, token, ...command]`, for the client of the Redis that keeps the data:
   * ioredis `redis.call(...lock.fenced('orders:fence', 'SET', 'k', 'v'))`, node-redis `client.sendCommand(...)`.
   * Throws ConfigError for a lock whose token cannot fence (script mode, shared, permits), LockReleasedError or LockLostError once not held.
   */
  fenced(register: string, ...command: CommandArg[]): [string, ...CommandArg[]];
  /** `['LOCK.GUARD', key, owner, token, command, ...args]`, for data in a Redis that holds the lock; throws as `fenced` does (shared holds and permits allowed). */
  guarded(command: string, ...args: CommandArg[]): [string, ...CommandArg[]];
  /**
   * The asks to let this lock go (`Redlock.ask`), each once; subscribes when first read. Ends when the lock is
   * lost or this hold is released (at once when it already is). Nothing is released for you: the holder decides.
   */
  asks(): AsyncIterableIterator<AskRequest>;
  /** `await using lock = await redlock.acquire(...)`: released at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** An ask to let a held lock go (`Lock.asks`). */
export interface AskRequest {
  /** The resource asked for (one of a set's, for a set held whole). */
  resource: string;
  /** Why, as the asker said it; null when it gave no message. */
  message: string | null;
}

/** What `Redlock.ask` reached. */
export interface Asked {
  /** The holders asked: the most one server had (0: nobody holds it, as far as the servers that answered know). */
  asked: number;
  /** The servers that answered. */
  answered: number;
}

/** What `Redlock.resize` came to. */
export interface Resized {
  /** A quorum resized it; false when nobody holds the semaphore (nothing resized: its next holder's limit is the one it asks). */
  held: boolean;
  /** The servers that resized it. */
  resized: number;
}

/** One change of a lock a quorum of servers announced (`Redlock.watch`). */
export interface Change {
  kind: 'grant' | 'handoff' | 'release' | 'expire' | 'cut' | 'session' | 'revoke' | 'resize' | 'proclaim';
  /** The hold's fencing token (a grant's: the lock's); 0n for a resize. */
  token: bigint;
  /** The hold's owner as the servers store it; '' for a resize. */
  owner: string;
  /** A grant's or proclamation's value, a cut's deadline (Unix ms), a resize's limit; null when none. */
  value: string | null;
}

/** What an acquisition asked for (the `kind` label). */
export type MetricsKind = 'exclusive' | 'shared' | 'permits' | 'set';
/** How an acquisition ended (the `outcome` label). */
export type MetricsOutcome = 'granted' | 'refused' | 'timed_out' | 'error' | 'cancelled';
/** Why a kept hold was lost (the `cause` label). */
export type MetricsLossCause = 'expired' | 'refused' | 'unreachable' | 'revoked';
/** A failed request to one server (the `kind` label of `redlock_server_errors_total`). */
export type MetricsServerError =
  | 'timeout'
  | 'connection_refused'
  | 'dns_failure'
  | 'connect_timeout'
  | 'unreachable'
  | 'auth_failed'
  | 'tls_failed'
  | 'module_missing'
  | 'error';

/** A histogram of `Redlock.metrics()`; times in seconds, as in Prometheus. */
export interface MetricsHistogram {
  /** Cumulative: observations of at most `le` seconds, smallest bound first, without `+Inf` (whose count is `count`). */
  buckets: { le: number; count: number }[];
  count: number;
  sumSeconds: number;
}

/** One server's counts in `Redlock.metrics()`. */
export interface MetricsServer {
  /** Its place in the server list, from 0. */
  index: number;
  /** The entry as errors name it (`host:port`, ...), never with credentials. */
  address: string;
  /** Each lock request's round trip. */
  roundTrip: MetricsHistogram;
  errors: Record<MetricsServerError, number>;
  identityRefusals: number;
  quarantines: number;
}

/** What `Redlock.metrics()` returns: the Rust client's counts (docs/node.md, Metrics). */
export interface Metrics {
  /** Wait times by kind, then outcome; each `count` is the number of acquisitions that ended so. */
  acquisitions: Record<MetricsKind, Record<MetricsOutcome, MetricsHistogram>>;
  /** Hold times by kind. */
  holds: Record<MetricsKind, MetricsHistogram>;
  /** Locks granted and not yet released or lost. */
  held: number;
  /** Acquisitions under way. */
  waiting: number;
  extensionsOk: number;
  extensionsFailed: number;
  /** Kept holds lost, by cause. */
  lost: Record<MetricsLossCause, number>;
  servers: MetricsServer[];
  /** Elections this client leads now. */
  leading: number;
  /** The highest term this client won or saw a leader with. */
  term: number;
  /** New leaders its observers saw. */
  leaderChanges: number;
}

/** The Content-Type of `Redlock.metricsText()`: `text/plain; version=0.0.4; charset=utf-8`. */
export const METRICS_CONTENT_TYPE: string;

/** A Redlock client over independent servers running the redislock module. */
export class Redlock {
  /** @param urls `redis://host:port` per server (`redis+cluster://h:p,h:p` for a cluster), or one URL (a string naming several servers is a ConfigError: pass an array). */
  constructor(urls: string | readonly string[], options?: RedlockOptions);
  /** Servers that must agree. */
  readonly quorum: number;
  /** The servers, as `host:port`. */
  readonly servers: string[];
  /** This client's metrics now: acquisitions by kind and outcome, holds, held, waiting, losses, servers, elections. */
  metrics(): Metrics;
  /** The same counts in Prometheus's text format (0.0.4); serve it with `METRICS_CONTENT_TYPE`. */
  metricsText(): string;
  /**
   * `resource`'s changes as a quorum of servers announced them, each once, grants in token order
   * (the servers' `redislock.notify` must name the key); never ends by itself (leave the `for await` loop to stop it).
   */
  watch(resource: string): AsyncIterableIterator<Change>;
  /**
   * Asks every holder of `resource` to let it go, with `message`: each holder reading its lock's `asks()` hears it
   * once. Nothing is released here. Rejects with RedlockError when too few servers answered.
   */
  ask(resource: string, message?: string | null): Promise<Asked>;
  /**
   * Gives the semaphore `resource` the limit `limit` (a whole number from 1 to 1024) on every server, while it is
   * held: holders keep their permits. Throws ConfigError for a bad limit; rejects with RedlockError when too few
   * servers answered alike.
   */
  resize(resource: string, limit: number): Promise<Resized>;
  /** The members of group `name` now, in join order; any client reads them, without joining. Rejects with RedlockError when too few servers answered. */
  members(name: string): Promise<Member[]>;
  /**
   * Acquires `resource` for `ttl` ms: one name, or an array of names locked all or nothing
   * (one token, extended and released together). Rejects with NotAcquiredError
   * (QuorumUnreachableError when too few servers answered).
   */
  acquire(resource: string | readonly string[], ttl: Duration, options?: AcquireOptions): Promise<Lock>;
  /**
   * Acquires (waiting in line), keeps the lease extended while `routine` runs, aborts the
   * routine's `signal` with a LockLostError the moment the lock is lost, and releases it at the
   * end, also when the routine throws. Resolves to the routine's value.
   */
  using<T>(resource: string | readonly string[], ttl: Duration, routine: (signal: AbortSignal, lock: Lock) => Promise<T> | T): Promise<T>;
  using<T>(resource: string | readonly string[], ttl: Duration, options: UsingOptions, routine: (signal: AbortSignal, lock: Lock) => Promise<T> | T): Promise<T>;
  /** Resolves once the places in line given up in the background are given up (await before exiting right after an acquisition). */
  settle(): Promise<void>;
}

/** Options of `new Election(redlock, name, value, options)`. */
export interface ElectionOptions {
  /** The leader's lease (ms), extended every third of it. Default 10000. */
  ttl?: Duration;
  /** How often `observe()` subscribes again to a server it lost (and reads the leader while fewer than a quorum can be heard), ms. Default 200. */
  observeInterval?: Duration;
}

/** Options of `Election.campaign`. */
export interface CampaignOptions {
  /** Ends the wait: the promise rejects with `signal.reason`, and the place in line is given up. */
  signal?: AbortSignal;
}

/** A leader as a quorum of servers agree on it. */
export interface Leader {
  /** What the leader advertises (`''` when nothing). */
  value: string;
  /** The leader's term: its fencing token, larger than every earlier leader's. */
  term: bigint;
}

/**
 * A leader election among the candidates on a Redlock's servers; the Redlock
 * must have `releaseOnDisconnect: true` (otherwise a ConfigError says what to change).
 */
export class Election {
  constructor(redlock: Redlock, name: string, value: string, options?: ElectionOptions);
  readonly name: string;
  /** What this candidate advertises when it leads. */
  readonly value: string;
  /** The leader's lease (ms). */
  readonly ttl: number;
  /** How long (ms) the servers keep a dead leader's hold: its successor waits that long. */
  readonly lockDelay: number;
  /** Waits in the election's fair line until this candidate leads. */
  campaign(options?: CampaignOptions): Promise<Leadership>;
  /** The leader now, or null (nobody leads, or a handover is under way). */
  leader(): Promise<Leader | null>;
  /** Each change of leader, in term order; never ends by itself (leave the `for await` loop to stop it). */
  observe(): AsyncIterableIterator<Leader>;
}

/** This candidate leads, until it resigns or the leadership is lost. */
export class Leadership implements AsyncDisposable {
  private constructor();
  /** The election's name. */
  readonly name: string;
  /** The term: this leader's fencing token. Pass it with every write the leader makes. */
  readonly term: bigint;
  /** What this leader advertises now. */
  readonly value: string;
  /** An extension reached no quorum, or the validity ran out: stop acting as the leader. */
  readonly lost: boolean;
  readonly resigned: boolean;
  /** Aborted with a LockLostError the moment the leadership is lost (made on first use; keeps the event loop alive until then or the resignation). */
  readonly signal: AbortSignal;
  /** Advertises `value` instead, once a quorum stored it; term and lease stay. */
  proclaim(value: string): Promise<void>;
  /** Steps down: the next candidate in line leads at once. Rejects with LockLostError (after resigning) if it had been lost. */
  resign(): Promise<Released>;
  /** `await using lead = await election.campaign()`: resigns at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Options of `new Group(redlock, name, options)`. */
export interface GroupOptions {
  /** A member's lease (ms), extended every third of it. Default 10000. */
  ttl?: Duration;
}

/** Options of `Group.join`. */
export interface JoinOptions {
  /** Ends the wait: the promise rejects with `signal.reason`, and nothing stays held. */
  signal?: AbortSignal;
}

/** A member of a group as a quorum of servers list it. */
export interface Member {
  /** The hold's owner as the servers store it. */
  owner: string;
  /** The hold's fencing token: larger than every member's that joined before it. */
  token: bigint;
  /** What the member advertises. */
  value: string;
}

/**
 * A group on a Redlock's servers: each `join` is a member of its own; `members()` lists them. The Redlock
 * must have `releaseOnDisconnect: true` (otherwise a ConfigError says what to change).
 */
export class Group {
  constructor(redlock: Redlock, name: string, options?: GroupOptions);
  readonly name: string;
  /** The group's key on the servers (`redlock:group:<name>`). */
  readonly resource: string;
  /** A member's lease (ms). */
  readonly ttl: number;
  /** How long (ms) the servers keep listing a dead member. */
  readonly lockDelay: number;
  /** Joins with `value` (not empty: readers know a member by it). */
  join(value: string, options?: JoinOptions): Promise<Membership>;
  /** The members now, in join order. Rejects with RedlockError when too few servers answered. */
  members(): Promise<Member[]>;
  /** The group key's changes (members joining, proclaiming, leaving); never ends by itself. */
  watch(): AsyncIterableIterator<Change>;
}

/** This member's place in its group, until it leaves or the membership is lost. */
export class Membership implements AsyncDisposable {
  private constructor();
  /** The group's name. */
  readonly group: string;
  /** The hold's fencing token, as `members()` lists it. */
  readonly token: bigint;
  /** The owner the servers list this member under. */
  readonly owner: string;
  /** What this member advertises now. */
  readonly value: string;
  /** An extension reached no quorum, or the validity ran out: readers may list it no more. */
  readonly lost: boolean;
  readonly left: boolean;
  /** Aborted with a LockLostError the moment the membership is lost (made on first use; keeps the event loop alive until then or it leaves). */
  readonly signal: AbortSignal;
  /** Advertises `value` instead, once a quorum stored it; token and lease stay. */
  proclaim(value: string): Promise<void>;
  /** Leaves the group now. Rejects with LockLostError (after leaving) if it had been lost, LockReleasedError the second time. */
  leave(): Promise<Released>;
  /** `await using member = await group.join(value)`: leaves at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Every error of the lock client itself. */
export class RedlockError extends Error {
  static readonly code: string;
  readonly code: string;
  readonly resource?: string;
}

/** No quorum granted the lock. */
export class NotAcquiredError extends RedlockError {
  static readonly code: string;
  readonly code: 'ERR_REDLOCK_NOT_ACQUIRED' | 'ERR_REDLOCK_QUORUM_UNREACHABLE';
  /** `held`, `quarantine`, `no_quorum`, `no_validity`. */
  readonly reason: string | null;
  readonly attempts: number;
  readonly outcomes: ServerOutcome[];
  /** With `reason` `quarantine`: until enough servers leave their restart quarantine. */
  readonly quarantineMsLeft: number | null;
}

/** Too few servers answered at all to decide. */
export class QuorumUnreachableError extends NotAcquiredError {
  static readonly code: string;
  readonly code: 'ERR_REDLOCK_QUORUM_UNREACHABLE';
}

/** The lock is lost: another client may hold it now, with a larger token. */
export class LockLostError extends RedlockError {
  static readonly code: string;
  readonly code: 'ERR_REDLOCK_LOCK_LOST';
  readonly outcomes: ServerOutcome[];
}

/** A bad argument value, or a request the servers refuse as configured (e.g. a ttl over their max-ttl). */
export class ConfigError extends RedlockError {
  static readonly code: string;
  readonly code: 'ERR_REDLOCK_CONFIG';
  /** What the servers refused (`max_ttl`, `wrong_type`, ...), when they did. */
  readonly reason?: string;
  readonly outcomes?: ServerOutcome[];
}

/** The lock was released already. */
export class LockReleasedError extends RedlockError {
  static readonly code: string;
  readonly code: 'ERR_REDLOCK_RELEASED';
}
