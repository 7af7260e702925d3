// Leader election (issue 43): three candidates on five servers, an
// observer (an async iterator) that sees each change in order, a
// campaign an AbortSignal ends, a leadership lost. These servers are this
// file's own.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, test } from 'node:test';

import { ConfigError, Election, LockLostError, LockReleasedError, Redlock } from 'redislock';

import { ROOMY, lineLength, resourceName, startServers } from './support/servers.mjs';

// Far longer than a handover may take: a resignation that left the lock
// to run out would keep the next candidate waiting for all of it.
const TTL = 30_000;
const BOUND = { ...ROOMY, releaseOnDisconnect: true };

let cluster;
let redlock;

before(async () => {
  cluster = await startServers(5);
  redlock = new Redlock(cluster.urls, BOUND);
});
after(async () => {
  await cluster?.stop();
});

/** Candidates waiting in the election's line. */
const candidatesWaiting = (name) => lineLength(cluster, `redlock:election:${name}`);

/** Until `condition` (of the servers' state) holds: polled, never assumed after a sleep (the test's timeout bounds it). */
async function until(condition) {
  while (!(await condition())) await new Promise((resolve) => setTimeout(resolve, 10));
}

/** A `for await` loop over `election.observe()` that stops (break) at the value 'done'. */
function observing(election) {
  const seen = [];
  let wake = () => {};
  const loop = (async () => {
    for await (const leader of election.observe()) {
      seen.push(leader);
      wake();
      if (leader.value === 'done') break;
    }
  })();
  return {
    seen,
    loop,
    /** Until it yielded `{ value, term }`. */
    async saw(value, term) {
      while (!seen.some((l) => l.value === value && l.term === term)) await new Promise((resolve) => { wake = resolve; });
    },
  };
}

test('three candidates: one leads, resign hands over at once, terms grow, the observer sees each change in order', { timeout: 60_000 }, async () => {
  const name = resourceName('election');
  const candidates = [0, 1, 2].map((i) => new Election(redlock, name, `candidate-${i}`, { ttl: TTL }));
  assert.equal(await candidates[0].leader(), null);
  const observer = observing(new Election(new Redlock(cluster.urls, BOUND), name, 'observer', { observeInterval: 50 }));

  const first = await candidates[0].campaign();
  assert.deepEqual([first.name, first.value, first.lost, first.resigned], [name, 'candidate-0', false, false]);
  assert.equal(typeof first.term, 'bigint');
  assert.deepEqual(await candidates[1].leader(), { value: 'candidate-0', term: first.term });
  await observer.saw('candidate-0', first.term);

  // The two others wait in line while the first leads.
  const led = [];
  const waiting = [1, 2].map((i) => candidates[i].campaign().then((lead) => {
    led.push({ i, lead, at: Date.now() });
    return lead;
  }));
  await until(async () => (await candidatesWaiting(name)) >= 2);
  assert.equal(led.length, 0, 'a candidate led beside the leader');

  await first.proclaim('candidate-0 at :8080');
  assert.equal(first.value, 'candidate-0 at :8080');
  assert.deepEqual(await candidates[2].leader(), { value: 'candidate-0 at :8080', term: first.term });
  await observer.saw('candidate-0 at :8080', first.term);

  // Resigning hands over at once, not after the lease.
  const resignedAt = Date.now();
  // Released on a quorum at least (a server whose grant came late may
  // hold nothing to release).
  const resigned = await first.resign();
  assert.deepEqual(Object.keys(resigned), ['released']);
  assert.ok(resigned.released >= 3, `released on ${resigned.released} servers`);
  assert.equal(first.resigned, true);
  const second = await Promise.race(waiting);
  const { i, at } = led[0];
  assert.ok(at - resignedAt < TTL / 2, `handed over ${at - resignedAt} ms after the resignation`);
  assert.ok(second.term > first.term);
  assert.deepEqual(await candidates[0].leader(), { value: `candidate-${i}`, term: second.term });
  await observer.saw(`candidate-${i}`, second.term);
  assert.equal(led.length, 1);
  await assert.rejects(first.resign(), LockReleasedError);
  await assert.rejects(first.proclaim('again'), LockReleasedError);

  // What `await using` calls at the end of its block (syntax Node 20 lacks) resigns.
  assert.equal(second.resigned, false);
  await second[Symbol.asyncDispose]();
  assert.equal(second.resigned, true);
  const third = await waiting[i === 1 ? 1 : 0];
  const j = led[1].i;
  assert.notEqual(j, i);
  assert.ok(third.term > second.term);
  assert.deepEqual(await candidates[0].leader(), { value: `candidate-${j}`, term: third.term });
  await observer.saw(`candidate-${j}`, third.term);

  await third.proclaim('done');
  await observer.saw('done', third.term);
  await observer.loop; // it stopped at the break
  await third.resign();
  assert.equal(await candidates[0].leader(), null);

  // Each change exactly once, in order: each was observed before the next was made.
  assert.deepEqual(observer.seen, [
    { value: 'candidate-0', term: first.term },
    { value: 'candidate-0 at :8080', term: first.term },
    { value: `candidate-${i}`, term: second.term },
    { value: `candidate-${j}`, term: third.term },
    { value: 'done', term: third.term },
  ]);
});

test('an AbortSignal ends a campaign: the promise rejects with its reason and the place in line is given up', { timeout: TTL / 2 }, async () => {
  const name = resourceName('abort');
  const leader = await new Election(redlock, name, 'a', { ttl: TTL }).campaign();
  const controller = new AbortController();
  const campaign = new Election(redlock, name, 'b', { ttl: TTL }).campaign({ signal: controller.signal });
  await until(async () => (await candidatesWaiting(name)) === 1);
  const reason = new Error('gave up');
  controller.abort(reason);
  await assert.rejects(campaign, (e) => e === reason);
  await until(async () => (await candidatesWaiting(name)) === 0);
  await leader.resign();
  // Nobody leads after it. The aborted campaign's waits on the servers may
  // still be granted at the resignation: each is released by the client at
  // once, never kept for its ttl (the test's timeout is shorter).
  const observer = new Election(redlock, name, 'c');
  await until(async () => (await observer.leader()) === null);
  await assert.rejects(new Election(redlock, name, 'd').campaign({ signal: AbortSignal.abort() }), { name: 'AbortError' });
});

test('a lost leadership aborts its signal with LockLostError, and resign rejects with it', { timeout: 30_000 }, async () => {
  const name = resourceName('lost');
  const lead = await new Election(redlock, name, 'a', { ttl: 6_000 }).campaign();
  const { signal } = lead;
  assert.equal(signal.aborted, false);
  // Ended on a majority, as an operator's DEL would: the next extension
  // reaches two servers only.
  for (const server of cluster.servers.slice(0, 3)) assert.equal(await server.call('DEL', `redlock:election:${name}`), 1n);
  if (!signal.aborted) await once(signal, 'abort');
  assert.ok(signal.reason instanceof LockLostError, `signal.reason: ${signal.reason}`);
  assert.equal(lead.lost, true);
  await assert.rejects(lead.resign(), LockLostError);
  assert.equal(lead.resigned, true);
});

test('observe() never ends by itself; return() ends it, a next() pending then included', { timeout: 30_000 }, async () => {
  const name = resourceName('observe-return');
  const changes = new Election(redlock, name, 'observer', { observeInterval: 20 }).observe();
  assert.equal(changes[Symbol.asyncIterator](), changes);
  // Nobody leads: this waits for a change that never comes, and would keep
  // the process alive (the file's end would report it) unless ended.
  const pending = changes.next();
  const lead = await new Election(redlock, name, 'a', { ttl: TTL }).campaign();
  assert.deepEqual(await pending, { value: { value: 'a', term: lead.term }, done: false });
  const waiting = changes.next();
  assert.deepEqual(await changes.return(), { value: undefined, done: true });
  assert.deepEqual(await waiting, { value: undefined, done: true });
  assert.deepEqual(await changes.next(), { value: undefined, done: true });
  await lead.resign();
});

test('an election needs holds bound to the connection; bad arguments throw', () => {
  assert.throws(() => new Election(new Redlock(cluster.urls, ROOMY), 'x', 'a'), (e) => e instanceof ConfigError && /options\.releaseOnDisconnect/.test(e.message));
  assert.throws(() => new Election(redlock, 'x', 'a', { ttl: -1 }), ConfigError);
  assert.throws(() => new Election(redlock, 'x', 'a', { observeInterval: -1 }), ConfigError);
  assert.throws(() => new Election(redlock, 'x', 'a', { tries: 1 }), TypeError);
  assert.throws(() => new Election({}, 'x', 'a'), TypeError);
  assert.throws(() => new Election(redlock, 'x', 42), TypeError);
  const election = new Election(redlock, 'x', 'a', { ttl: 9_000 });
  assert.deepEqual([election.name, election.value, election.ttl], ['x', 'a', 9_000]);
  assert.ok(election.lockDelay > 3_000 && election.lockDelay < 9_000, `${election.lockDelay}`);
});

test('an observer sees every term however short, in order, once', { timeout: 60_000 }, async () => {
  const name = resourceName('short');
  const channel = `__redislock@0__:redlock:election:${name}`;
  const rounds = 5;
  const candidates = 3;
  const observer = new Election(new Redlock(cluster.urls, BOUND), name, 'observer', { observeInterval: 10_000 });
  const seen = [];
  const loop = (async () => {
    for await (const leader of observer.observe()) {
      seen.push(leader);
      if (seen.length === rounds * candidates) break;
    }
  })();
  // Subscribed on every server: from then on it hears every announcement.
  await until(async () => {
    const counts = await Promise.all(cluster.servers.map((s) => s.call('PUBSUB', 'NUMSUB', channel)));
    return counts.every((c) => Number(c[1]) === 1);
  });
  const led = [];
  await Promise.all(
    Array.from({ length: candidates }, async (_, i) => {
      const election = new Election(redlock, name, `c${i}`, { ttl: TTL });
      for (let r = 0; r < rounds; r += 1) {
        const lead = await election.campaign();
        led.push({ value: `c${i}`, term: lead.term });
        await lead.resign();
      }
    }),
  );
  await loop;
  led.sort((a, b) => (a.term < b.term ? -1 : a.term > b.term ? 1 : 0));
  assert.equal(new Set(led.map((l) => l.term)).size, rounds * candidates);
  assert.deepEqual(
    seen.map((l) => [l.value, l.term]),
    led.map((l) => [l.value, l.term]),
  );
});
