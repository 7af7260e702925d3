#!/usr/bin/env node
// The redislock Node package beside node-redlock 5.0.0-beta.2 (ioredis),
// on the same five redislock module servers this script starts (the
// tests' harness: 127.0.0.1, free ports, no persistence).
//
//   cd node/bench && npm install && node run.mjs     (after npm run build in node/)
//
// Scenarios, each run ROUNDS times, the two clients interleaved (their
// order alternating per round); medians are printed, with ours/theirs:
// - uncontended 1: one caller, acquire + release cycles on its own key
// - uncontended 32: 32 concurrent callers in this process, a key each
// - two resources: one caller, acquire + release cycles of a set of two
//   keys of its own, ["bench:a:<i>", "bench:b:<i>"], all or nothing (ours:
//   acquire([...]), LOCK.MACQUIRE; node-redlock: acquire([...]), its
//   multi-key script)
// - contended 16: 16 callers on one key, each waiting for the lock,
//   holding it 1 ms (a 1 ms timer: `hold ms` shows what it lasted, the
//   same for both) and releasing; waits from the call to
//   the grant (p50, p99) and grants/s. Ours waits in the resource's line
//   (`wait`); node-redlock polls with its defaults (retryDelay 200 ±
//   retryJitter 100 ms), retrying without limit (retryCount -1); the
//   `node-redlock 10ms` rows poll every 10 ± 5 ms instead.
//
// - uncontended 1 at 0.25 ms one way: the first scenario through delaying
//   proxies in front of the five servers (client/benches/delay_proxy.rs,
//   the proxies of `make bench-rtt`, in a process of their own), when
//   BENCH_PROXY names that program (benches/node.sh builds it): a round
//   trip of about 0.6 ms, as to servers on another machine nearby.
// Issue 44's targets for this package are printed at the end, as measured.
//
// Environment: BENCH_SECONDS (per run, default 3), BENCH_ROUNDS (default 3),
// BENCH_PROXY (the delaying proxy program; without it no 0.25 ms scenario).
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

import { Redis } from 'ioredis';
import NodeRedlock from 'redlock';

import { Redlock } from '../index.mjs';
import { startServers } from '../test/support/servers.mjs';

const SECONDS = Number(process.env.BENCH_SECONDS || 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const TTL = 10_000;
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let keys = 0;
const key = (what) => `bench:${what}:${++keys}`;

/** The clients under test: acquire(resource or [resources], {contended}) → release function. */
function ours(urls) {
  const redlock = new Redlock(urls);
  return {
    name: 'redislock',
    async acquire(resource, contended) {
      const lock = await redlock.acquire(resource, TTL, contended ? { wait: 60_000 } : undefined);
      return () => lock.release();
    },
    async close() {
      await redlock.settle();
    },
  };
}

function theirs(urls, { retryDelay = 200, retryJitter = 100, name = 'node-redlock' } = {}) {
  const clients = urls.map((url) => new Redis(url, { maxRetriesPerRequest: 1, enableOfflineQueue: true }));
  const contended = new NodeRedlock(clients, { retryCount: -1, retryDelay, retryJitter });
  const once = new NodeRedlock(clients, { retryCount: 0 });
  return {
    name,
    async acquire(resource, isContended) {
      const lock = await (isContended ? contended : once).acquire(Array.isArray(resource) ? resource : [resource], TTL);
      return () => lock.release();
    },
    async close() {
      await Promise.all(clients.map((c) => c.quit()));
    },
  };
}

/** A caller's keys: one, or with `two` a set of two, `bench:a:<i>` and `bench:b:<i>`. */
function keysOf(callers, two) {
  if (!two) return key(`u${callers}`);
  const i = ++keys;
  return [`bench:a:${i}`, `bench:b:${i}`];
}

async function uncontended(client, callers, two = false) {
  const end = Date.now() + SECONDS * 1000;
  let cycles = 0;
  let errors = 0;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      const resource = keysOf(callers, two);
      while (Date.now() < end) {
        try {
          const release = await client.acquire(resource, false);
          await release();
          cycles += 1;
        } catch {
          errors += 1;
        }
      }
    }),
  );
  return { 'cycles/s': cycles / SECONDS, errors };
}

async function contended(client, callers) {
  const resource = key('c');
  const end = Date.now() + SECONDS * 1000;
  const waits = [];
  let errors = 0;
  let held = 0;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (Date.now() < end) {
        const asked = performance.now();
        let release;
        try {
          release = await client.acquire(resource, true);
        } catch {
          errors += 1;
          continue;
        }
        const granted = performance.now();
        waits.push(granted - asked);
        await pause(1);
        held += performance.now() - granted;
        await release();
      }
    }),
  );
  waits.sort((a, b) => a - b);
  const at = (q) => (waits.length ? waits[Math.min(waits.length - 1, Math.floor(q * waits.length))] : NaN);
  return { 'grants/s': waits.length / SECONDS, 'p50 wait ms': at(0.5), 'p99 wait ms': at(0.99), 'hold ms': held / waits.length, errors };
}

/** Delaying proxies (one way `ms`) in front of `ports`: { urls, stop }; null without BENCH_PROXY. */
async function delayed(ports, ms) {
  const program = process.env.BENCH_PROXY;
  if (!program) return null;
  const child = spawn(program, [String(ms), ...ports.map(String)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const ready = await new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`the delaying proxy exited (${code}) before it was ready`)));
    createInterface({ input: child.stdout }).once('line', resolve);
  });
  if (!ready.startsWith('ready ')) throw new Error(`the delaying proxy said ${JSON.stringify(ready)}`);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    urls: ready.slice('ready '.length).split(' '),
    async stop() {
      // Closing its standard input stops it; it prints its lateness.
      child.stdin.end();
      await exited;
    },
  };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const cluster = await startServers(5);
let proxies = null;
try {
  const ports = cluster.urls.map((u) => Number(new URL(u).port));
  proxies = await delayed(ports, 0.25);
  if (!proxies) console.error('BENCH_PROXY is not set: no scenario at 0.25 ms one way (benches/node.sh sets it)');
  const makers = [ours, theirs, (urls) => theirs(urls, { retryDelay: 10, retryJitter: 5, name: 'node-redlock 10ms' })];
  const scenarios = [
    { name: 'uncontended, 1 caller', run: (c) => uncontended(c, 1), fast: true },
    { name: 'uncontended, 32 callers', run: (c) => uncontended(c, 32), fast: true },
    { name: 'two resources, 1 caller', run: (c) => uncontended(c, 1, true), fast: true },
    { name: 'contended, 16 callers, 1 ms hold', run: (c) => contended(c, 16), contended: true },
  ];
  if (proxies) scenarios.push({ name: 'uncontended, 1 caller, 0.25 ms one way', run: (c) => uncontended(c, 1), fast: true, urls: proxies.urls });
  const results = new Map(); // "scenario|client" -> [result, ...]
  for (let round = 0; round < ROUNDS; round++) {
    for (const scenario of scenarios) {
      // Polling every 10 ms only matters where clients poll.
      let order = scenario.contended ? makers : makers.slice(0, 2);
      if (round % 2) order = [...order].reverse();
      for (const make of order) {
        const client = make(scenario.urls ?? cluster.urls);
        // Connections made (and servers identified) before the clock runs.
        const warm = await client.acquire(key('warm'), false);
        await warm();
        const result = await scenario.run(client);
        await client.close();
        const id = `${scenario.name}|${client.name}`;
        if (!results.has(id)) results.set(id, []);
        results.get(id).push(result);
        console.error(`round ${round + 1}: ${id}: ${JSON.stringify(result, (k, v) => (typeof v === 'number' ? Math.round(v * 10) / 10 : v))}`);
      }
    }
  }
  console.log(`\nmedians of ${ROUNDS} runs of ${SECONDS} s each (node ${process.version}, five redis-server with the module on 127.0.0.1)\n`);
  const fmt = (v) => (Number.isFinite(v) ? (v >= 100 ? Math.round(v).toString() : v.toFixed(2)) : '-');
  for (const scenario of scenarios) {
    console.log(`${scenario.name}`);
    const clientNames = [...results.keys()].filter((id) => id.startsWith(`${scenario.name}|`)).map((id) => id.split('|')[1]);
    const metrics = Object.keys(results.get(`${scenario.name}|redislock`)[0]);
    const med = (client, metric) => median(results.get(`${scenario.name}|${client}`).map((r) => r[metric]));
    for (const metric of metrics) {
      const row = clientNames.map((c) => `${c} ${fmt(med(c, metric))}`).join('   ');
      const others = clientNames.filter((c) => c !== 'redislock');
      const ratios = metric === 'errors' || metric === 'hold ms' ? '' : others.map((c) => `ours/${c} ${fmt(med('redislock', metric) / med(c, metric))}`).join('   ');
      console.log(`  ${metric.padEnd(12)} ${row}   ${ratios}`);
    }
  }
  const ratio = (scenario) => {
    const of = (client) => results.get(`${scenario}|${client}`);
    if (!of('redislock') || !of('node-redlock')) return NaN;
    return median(of('redislock').map((r) => r['cycles/s'])) / median(of('node-redlock').map((r) => r['cycles/s']));
  };
  console.log('\ntargets of issue 44, as measured (ours/node-redlock, medians of the rounds):');
  for (const [what, scenario, target] of [
    ['1 caller on loopback', 'uncontended, 1 caller', 0.9],
    ['1 caller at 0.25 ms one way', 'uncontended, 1 caller, 0.25 ms one way', 1.0],
    ['32 callers', 'uncontended, 32 callers', 2.0],
  ]) {
    const r = ratio(scenario);
    const verdict = Number.isFinite(r) ? (r >= target ? 'met' : 'not met') : 'not measured';
    console.log(`  ${what}: >= ${target}x: ${fmt(r)} (${verdict})`);
  }
} finally {
  if (proxies) await proxies.stop();
  await cluster.stop();
}
process.exit(0);
