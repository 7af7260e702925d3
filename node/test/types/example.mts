// A typed use of the whole API, checked by `tsc --noEmit -p test/types`
// (types.test.mjs): index.d.ts must accept what the package does, and
// refuse what it refuses (the @ts-expect-error lines).
import redislock, {
  ConfigError,
  Election,
  Group,
  Leadership,
  Lock,
  LockLostError,
  LockReleasedError,
  Membership,
  NotAcquiredError,
  QuorumUnreachableError,
  Redlock,
  RedlockError,
  type AcquireOptions,
  type CommandArg,
  METRICS_CONTENT_TYPE,
  type Metrics,
  type ElectionOptions,
  type AskRequest,
  type Asked,
  type Resized,
  type Member,
  type Leader,
  type RedlockOptions,
  type ServerOutcome,
} from 'redislock';

const options: RedlockOptions = {
  quorum: 3,
  requestTimeout: 50,
  connectTimeout: 200,
  retryCount: 3,
  retryDelay: 150,
  retryJitter: 50,
  driftFactor: 0.01,
  extendFraction: 1 / 3,
  mode: 'module',
};
const redlock = new Redlock(['redis://127.0.0.1:7001', 'redis://127.0.0.1:7002', 'redis://127.0.0.1:7003'], options);
const one = new redislock.Redlock('redis://127.0.0.1:7001');
// TLS: PEM as strings or Buffers (Uint8Arrays), one or several.
const pem = new Uint8Array([45, 45]);
const secure = new Redlock(['rediss://127.0.0.1:6380'], { tls: { ca: [pem, 'PEM'], cert: 'PEM', key: pem, rejectUnauthorized: true } });
const quorum: number = redlock.quorum + one.quorum + secure.quorum;
const servers: string[] = redlock.servers;
const metrics: Metrics = redlock.metrics();
const granted: number = metrics.acquisitions.exclusive.granted.count + metrics.acquisitions.set.timed_out.buckets[0].count;
const roundTrip: number = metrics.servers[0].roundTrip.sumSeconds + metrics.servers[0].errors.connection_refused;
const scraped: string = redlock.metricsText() + METRICS_CONTENT_TYPE;
// @ts-expect-error: no such kind
metrics.acquisitions.exclusiv;

export async function all(): Promise<void> {
  const controller = new AbortController();
  const opts: AcquireOptions = { wait: 5_000, signal: controller.signal, keep: false };
  const lock: Lock = await redlock.acquire('orders:42', 10_000, opts);
  const token: bigint | null = lock.token;
  const fields: [string, string, string, number, number, number, boolean, boolean, boolean, boolean] = [
    lock.resource, lock.key, lock.owner, lock.ttl, lock.validity, lock.expiration, lock.shared, lock.lost, lock.released, lock.kept,
  ];
  const outcomes: ServerOutcome[] = lock.outcomes;
  const fenced: [string, ...CommandArg[]] = lock.fenced('orders:fence', 'SET', 'order:42', 'paid', 5, new Uint8Array(2));
  const guarded: [string, ...CommandArg[]] = lock.guarded('HSET', 'order:42', 'state', 'paid');
  void [fenced, guarded];
  const extended: Lock = await lock.extend(30_000);
  await extended.extend();
  const inner: Lock = lock.reenter();
  const holds: number = inner.holds;
  await inner.release();
  const { released }: { released: number } = await lock.release();

  {
    await using held = await redlock.acquire('orders:42', 10_000, { wait: Infinity, shared: true });
    void held.token;
  }
  await redlock.acquire('api-pool', 10_000, { limit: 4, retry: true });
  await redlock.acquire('api-pool', 10_000, { limit: 4, permits: 3 });
  const skus: readonly string[] = ['sku:1', 'sku:2'];
  const both: string[] = (await redlock.acquire(skus, 10_000)).resources;
  void both;
  await redlock.using(['sku:1', 'sku:2'], 10_000, { permits: undefined }, (_signal, held) => held.resources.length);

  const total: number = await redlock.using('orders:42', 10_000, async (signal: AbortSignal, held: Lock) => {
    if (signal.aborted) throw signal.reason;
    return Number(held.token ?? 0n);
  });
  const text: string = await redlock.using('orders:42', 10_000, { wait: 1_000, signal: controller.signal }, (_signal, held) => held.key);
  await redlock.settle();

  try {
    await redlock.acquire('x', '1s');
  } catch (e) {
    if (e instanceof QuorumUnreachableError) {
      const code: 'ERR_REDLOCK_QUORUM_UNREACHABLE' = e.code;
      void code;
    } else if (e instanceof NotAcquiredError) {
      const why: string | null = e.reason;
      const n: number = e.attempts + e.outcomes.length + (e.quarantineMsLeft ?? 0);
      void why, n;
    } else if (e instanceof LockLostError || e instanceof ConfigError || e instanceof LockReleasedError) {
      const code: string = e.code;
      void code;
    } else if (e instanceof RedlockError) {
      void e.resource;
    }
  }
  void [quorum, servers, token, fields, outcomes, released, holds, total, text, granted, roundTrip, scraped];

  const electionOptions: ElectionOptions = { ttl: 10_000, observeInterval: 200 };
  const election = new Election(redlock, 'db-primary', '10.0.0.7:5432', electionOptions);
  const lead: Leadership = await election.campaign({ signal: controller.signal });
  const term: bigint = lead.term;
  const lostSignal: AbortSignal = lead.signal;
  await lead.proclaim('10.0.0.8:5432');
  const now: Leader | null = await election.leader();
  for await (const change of election.observe()) {
    const seen: [string, bigint] = [change.value, change.term];
    void seen;
    break;
  }
  await lead.resign();
  {
    await using leading = await election.campaign();
    void [leading.value, leading.lost, leading.resigned, leading.name];
  }
  void [term, lostSignal, now, election.name, election.value, election.ttl, election.lockDelay];
  // @ts-expect-error: a Leadership is made by Election.campaign
  new Leadership();
  // @ts-expect-error: no such campaign option
  await election.campaign({ wait: 1000 });

  // The release request: ask a holder, and hear the asks as the holder.
  const asked: Asked = await redlock.ask('orders', 'deploy at 10:00');
  await redlock.ask('orders');
  const resized: Resized = await redlock.resize('db-pool', 4);
  void [resized.held, resized.resized];
  void [asked.asked, asked.answered];
  const held = await redlock.acquire('orders', 10_000);
  for await (const ask of held.asks()) {
    const request: AskRequest = ask;
    const why: string | null = request.message;
    void [why, request.resource];
    await held.release();
  }
  // @ts-expect-error: a message is a string
  await redlock.ask('orders', 42);
  // @ts-expect-error: a limit is a number
  await redlock.resize('db-pool', '4');

  // Group membership.
  const group = new Group(redlock, 'web', { ttl: 10_000 });
  const member: Membership = await group.join('10.0.0.7:8080', { signal: AbortSignal.timeout(5000) });
  const listed: Member[] = await group.members();
  const memberToken: bigint = member.token;
  void [listed[0]?.owner, listed[0]?.value, memberToken, member.owner, member.value, member.lost, member.left, member.group, member.signal];
  await member.proclaim('10.0.0.7:8081');
  await member.leave();
  {
    await using joined = await group.join('10.0.0.8:8080');
    void joined.value;
  }
  const read: Member[] = await redlock.members('web');
  for await (const change of group.watch()) void change.kind;
  void [read, group.name, group.resource, group.ttl, group.lockDelay];
  // @ts-expect-error: a Membership is made by Group.join
  new Membership();
  // @ts-expect-error: a member's value is a string
  await group.join(8080);

  // A duration is a number of milliseconds or a string with its unit.
  await redlock.acquire('x', '10s', { wait: '5s' });
  // @ts-expect-error: a ttl is a number of milliseconds or a duration string
  await redlock.acquire('x', [10_000]);
  // @ts-expect-error: no such option
  await redlock.acquire('x', 1000, { tries: 3 });
  // @ts-expect-error: mode is 'module' or 'script'
  new Redlock(['redis://127.0.0.1:7001'], { mode: 'lua' });
  // @ts-expect-error: the CA is PEM text or bytes, not a path option
  new Redlock(['rediss://127.0.0.1:6380'], { tls: { ca: 42 } });
  // @ts-expect-error: a guarded command is named
  lock.guarded();
  // @ts-expect-error: a register is named by a string
  lock.fenced(7, 'SET', 'k', 'v');
  // @ts-expect-error: a token is read-only
  lock.token = 1n;
  // @ts-expect-error: a Lock is made by the client
  new Lock();
}
