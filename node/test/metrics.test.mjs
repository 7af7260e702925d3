// The client's metrics from Node: the Rust client's counts, translated
// into a plain object (`metrics()`) and rendered by the crate
// (`metricsText()`), agree with what the test did and with each other.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { METRICS_CONTENT_TYPE, NotAcquiredError, Redlock } from 'redislock';

import { ROOMY, resourceName, startServers } from './support/servers.mjs';

const KINDS = ['exclusive', 'shared', 'permits', 'set'];
const OUTCOMES = ['granted', 'refused', 'timed_out', 'error', 'cancelled'];
const SERVER_ERRORS = [
  'timeout',
  'connection_refused',
  'dns_failure',
  'connect_timeout',
  'unreachable',
  'auth_failed',
  'tls_failed',
  'module_missing',
  'error',
];

let cluster;

before(async () => {
  cluster = await startServers(5);
});
after(async () => {
  await cluster?.stop();
});

/**
 * One exclusive lock granted, one refused without waiting (held by the
 * first), then the first released; the metrics while it was held.
 */
async function grantRefuseRelease(redlock) {
  const resource = resourceName('metrics');
  const lock = await redlock.acquire(resource, 10_000);
  await assert.rejects(redlock.acquire(resource, 10_000), NotAcquiredError);
  const whileHeld = redlock.metrics();
  await lock.release();
  return whileHeld;
}

/** A series by its name and labels, whatever their order; `le` as a number. */
function series(name, labels) {
  const sorted = Object.entries(labels)
    .map(([k, v]) => [k, k === 'le' && v !== '+Inf' ? String(Number(v)) : v])
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `${name}${JSON.stringify(sorted)}`;
}

/** Prometheus text as a Map of series to value. */
function samples(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(match, line);
    const labels = Object.fromEntries([...(match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
    out.set(series(match[1], labels), Number(match[3]));
  }
  return out;
}

/** The samples `metricsText()` must hold for the object `m` (docs/operations.md's metric list). */
function expectedSamples(m) {
  const out = new Map();
  const histogram = (name, labels, h) => {
    for (const { le, count } of h.buckets) out.set(series(`${name}_bucket`, { ...labels, le: String(le) }), count);
    out.set(series(`${name}_bucket`, { ...labels, le: '+Inf' }), h.count);
    out.set(series(`${name}_sum`, labels), h.sumSeconds);
    out.set(series(`${name}_count`, labels), h.count);
  };
  for (const [kind, outcomes] of Object.entries(m.acquisitions)) {
    for (const [outcome, h] of Object.entries(outcomes)) histogram('redlock_acquire_wait_seconds', { kind, outcome }, h);
  }
  for (const [kind, h] of Object.entries(m.holds)) histogram('redlock_hold_seconds', { kind }, h);
  out.set(series('redlock_held', {}), m.held);
  out.set(series('redlock_waiting', {}), m.waiting);
  out.set(series('redlock_extensions_total', { result: 'ok' }), m.extensionsOk);
  out.set(series('redlock_extensions_total', { result: 'failed' }), m.extensionsFailed);
  for (const [cause, n] of Object.entries(m.lost)) out.set(series('redlock_lost_total', { cause }), n);
  for (const s of m.servers) {
    const server = { server: String(s.index), address: s.address };
    histogram('redlock_server_request_seconds', server, s.roundTrip);
    for (const [kind, n] of Object.entries(s.errors)) out.set(series('redlock_server_errors_total', { ...server, kind }), n);
    out.set(series('redlock_server_identity_refusals_total', server), s.identityRefusals);
    out.set(series('redlock_server_quarantines_total', server), s.quarantines);
  }
  out.set(series('redlock_election_leading', {}), m.leading);
  out.set(series('redlock_election_term', {}), m.term);
  out.set(series('redlock_election_leader_changes_total', {}), m.leaderChanges);
  return out;
}

const sorted = (keys) => [...keys].sort();

test('metrics() counts a grant, a refusal and a release', async () => {
  const redlock = new Redlock(cluster.urls, ROOMY);
  const whileHeld = await grantRefuseRelease(redlock);
  assert.deepEqual([whileHeld.held, whileHeld.waiting], [1, 0]);
  const m = redlock.metrics();

  assert.deepEqual(sorted(Object.keys(m.acquisitions)), sorted(KINDS));
  for (const kind of KINDS) {
    assert.deepEqual(sorted(Object.keys(m.acquisitions[kind])), sorted(OUTCOMES));
    for (const outcome of OUTCOMES) {
      const wanted = kind === 'exclusive' && (outcome === 'granted' || outcome === 'refused') ? 1 : 0;
      assert.equal(m.acquisitions[kind][outcome].count, wanted, `${kind} ${outcome}`);
    }
  }
  const granted = m.acquisitions.exclusive.granted;
  // Cumulative buckets by rising bound (seconds), within the count; the
  // wait took some time, under a minute.
  const bounds = granted.buckets.map((b) => b.le);
  assert.deepEqual(bounds, [...bounds].sort((a, b) => a - b));
  assert.ok(bounds[0] < 0.01 && bounds.at(-1) >= 1, `bounds in seconds: ${bounds}`);
  const counts = granted.buckets.map((b) => b.count);
  assert.deepEqual(counts, [...counts].sort((a, b) => a - b));
  assert.equal(counts.at(-1), 1);
  assert.ok(granted.sumSeconds > 0 && granted.sumSeconds < 60, `sumSeconds ${granted.sumSeconds}`);
  assert.deepEqual(KINDS.map((k) => m.holds[k].count), [1, 0, 0, 0]);
  assert.ok(m.holds.exclusive.sumSeconds > 0);
  assert.deepEqual([m.held, m.waiting], [0, 0]);
  assert.deepEqual([m.extensionsOk, m.extensionsFailed], [0, 0]);
  assert.deepEqual(m.lost, { expired: 0, refused: 0, unreachable: 0, revoked: 0 });
  assert.deepEqual([m.leading, m.term, m.leaderChanges], [0, 0, 0]);

  assert.deepEqual(m.servers.map((s) => s.index), [0, 1, 2, 3, 4]);
  assert.deepEqual(m.servers.map((s) => s.address), redlock.servers);
  for (const s of m.servers) {
    // Each server answered the grant, the refusal and the release.
    assert.ok(s.roundTrip.count >= 3, JSON.stringify(s));
    assert.deepEqual(s.errors, Object.fromEntries(SERVER_ERRORS.map((k) => [k, 0])));
    assert.deepEqual([s.identityRefusals, s.quarantines], [0, 0]);
  }
});

test('metricsText() shows the same counts', async () => {
  const redlock = new Redlock(cluster.urls, ROOMY);
  await grantRefuseRelease(redlock);
  // Nothing runs meanwhile: both read the same counts.
  const m = redlock.metrics();
  const text = redlock.metricsText();
  const lines = text.split('\n');
  for (const line of [
    'redlock_acquire_wait_seconds_count{kind="exclusive",outcome="granted"} 1',
    'redlock_acquire_wait_seconds_count{kind="exclusive",outcome="refused"} 1',
    'redlock_acquire_wait_seconds_count{kind="shared",outcome="granted"} 0',
    'redlock_hold_seconds_count{kind="exclusive"} 1',
    'redlock_held 0',
  ]) {
    assert.ok(lines.includes(line), line);
  }
  // Every sample of the text is a value of the object, under its own name
  // and labels (a field translated into the wrong place differs here).
  assert.deepEqual(samples(text), expectedSamples(m));
  assert.ok(text.includes('# TYPE redlock_acquire_wait_seconds histogram\n'));
  assert.equal(METRICS_CONTENT_TYPE, 'text/plain; version=0.0.4; charset=utf-8');
});

test('each client counts its own acquisitions', async () => {
  const first = new Redlock(cluster.urls, ROOMY);
  const second = new Redlock(cluster.urls, ROOMY);
  await grantRefuseRelease(first);
  assert.equal(second.metrics().acquisitions.exclusive.granted.count, 0);
  assert.ok(second.metricsText().split('\n').includes('redlock_acquire_wait_seconds_count{kind="exclusive",outcome="granted"} 0'));
});
