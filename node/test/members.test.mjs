// Group membership (issue 61): Group.join, Membership (token, value,
// proclaim, leave), Group.members and Redlock.members, through the
// crate's quorum client. These servers are this file's own.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { ConfigError, Group, LockReleasedError, Membership, Redlock } from 'redislock';

import { ROOMY, resourceName, startServers } from './support/servers.mjs';

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

/** What a list of members says, in its order. */
const shown = (members) => members.map((m) => [m.owner, m.token, m.value]);
const as = (membership) => [membership.owner, membership.token, membership.value];

test('three members join, members() lists them with their values; one leaves and the list agrees', { timeout: 60_000 }, async () => {
  const name = resourceName('group');
  const group = new Group(redlock, name, { ttl: TTL });
  assert.equal(group.resource, `redlock:group:${name}`);
  const a = await group.join('10.0.0.1:80');
  const b = await group.join('10.0.0.2:80');
  const c = await group.join('10.0.0.3:80');
  assert.ok(a instanceof Membership);
  assert.equal(a.group, name);
  assert.equal(typeof a.token, 'bigint');
  assert.ok(a.token < b.token && b.token < c.token, 'each joins with a larger token');
  assert.equal(new Set([a.owner, b.owner, c.owner]).size, 3, 'each join is a member of its own');

  assert.deepEqual(shown(await group.members()), [as(a), as(b), as(c)], 'in join order, with their values');
  // Any client reads them, one not bound to its connections too.
  const reader = new Redlock(cluster.urls, ROOMY);
  assert.deepEqual(shown(await reader.members(name)), [as(a), as(b), as(c)]);

  assert.deepEqual(await b.leave(), { released: 5 });
  assert.equal(b.left, true);
  assert.deepEqual(shown(await group.members()), [as(a), as(c)], 'the one that left is listed no more');
  assert.deepEqual(shown(await reader.members(name)), [as(a), as(c)]);
  await assert.rejects(b.leave(), LockReleasedError, 'left once');
  await assert.rejects(b.proclaim('10.0.0.2:81'), LockReleasedError);

  await a.proclaim('10.0.0.1:81');
  assert.equal(a.value, '10.0.0.1:81');
  assert.deepEqual(shown(await group.members()), [[a.owner, a.token, '10.0.0.1:81'], as(c)], 'the new value is listed');
  assert.equal(a.lost, false);

  await a.leave();
  await c.leave();
  assert.deepEqual(await group.members(), []);
});

test('a member leaves when disposed (the end of an await using block), once', { timeout: 60_000 }, async () => {
  const name = resourceName('using');
  const group = new Group(redlock, name, { ttl: TTL });
  const member = await group.join('worker-1');
  assert.deepEqual(shown(await group.members()), [as(member)]);
  // What `await using member = ...` calls at the end of its block (Node 20
  // has no such syntax yet).
  await member[Symbol.asyncDispose]();
  assert.equal(member.left, true);
  assert.deepEqual(await group.members(), []);
  await member[Symbol.asyncDispose]();
});

test('a group needs a client bound to its connections, a name, and members a value', async () => {
  assert.throws(() => new Group(new Redlock(cluster.urls, ROOMY), 'plain'), ConfigError);
  assert.throws(() => new Group(redlock, ''), ConfigError);
  assert.throws(() => new Group(redlock, 'g', { tll: 1 }), TypeError);
  assert.throws(() => new Group({}, 'g'), TypeError);
  const group = new Group(redlock, resourceName('empty'), { ttl: TTL });
  await assert.rejects(group.join(''), ConfigError);
  await assert.rejects(group.join(42), TypeError);
  assert.deepEqual(await group.members(), [], 'a refused join holds nothing');
});
