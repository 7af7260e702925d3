// Real redis-server processes with the redislock module, for the tests.
//
// Each server listens on 127.0.0.1 only, on a port the OS had free, with
// no persistence and a data directory of its own in a temporary
// directory. Free ports are found by binding port 0 and letting go, so
// another process can take one first: a server counts as started only when
// it answers and `INFO server` names the PID we spawned. Servers are
// stopped by that PID: by `stop()` (the tests' `after` hook, which runs
// when a test fails too), and, should the process end otherwise, on its
// exit and on SIGINT/SIGTERM. With `{ tls }` (see `makeCerts`) the servers
// speak TLS only and ask for a client certificate; the tests' own
// commands then speak TLS too.
//
// $REDISLOCK_MODULE: the module (default <checkout>/target/release/libredislock.so);
// $REDISLOCK_SERVER: the server binary (default redis-server from PATH).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';

const checkout = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const MODULE = process.env.REDISLOCK_MODULE || path.join(checkout, 'target', 'release', 'libredislock.so');
const SERVER = process.env.REDISLOCK_SERVER || 'redis-server';
const READY_MS = 10_000;
// Every direct command gives up after this: a wedged server fails the
// test instead of hanging it.
const DIRECT_TIMEOUT_MS = 5_000;

/** Every server this process started and has not stopped, by PID. */
const running = new Map();
/** Their temporary directories not removed yet. */
const directories = new Set();

function killAll() {
  for (const [pid] of running) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  running.clear();
  for (const dir of directories) fs.rmSync(dir, { recursive: true, force: true });
  directories.clear();
}
process.on('exit', killAll);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    killAll();
    process.kill(process.pid, signal);
  });
}

export class RespError extends Error {}

/** Parses one RESP reply from `buf` at `at`: [value, next] or null if incomplete. */
function parse(buf, at) {
  const end = buf.indexOf('\r\n', at);
  if (end < 0) return null;
  const kind = String.fromCharCode(buf[at]);
  const line = buf.toString('utf8', at + 1, end);
  const next = end + 2;
  switch (kind) {
    case '+': return [line, next];
    case '-': return [new RespError(line), next];
    case ':': return [BigInt(line), next];
    case '$': {
      const n = Number(line);
      if (n < 0) return [null, next];
      if (buf.length < next + n + 2) return null;
      return [buf.toString('utf8', next, next + n), next + n + 2];
    }
    case '*': {
      const n = Number(line);
      if (n < 0) return [null, next];
      const items = [];
      let pos = next;
      for (let i = 0; i < n; i++) {
        const got = parse(buf, pos);
        if (!got) return null;
        items.push(got[0]);
        pos = got[1];
      }
      return [items, pos];
    }
    default: throw new Error(`unexpected reply ${JSON.stringify(buf.toString('utf8', at, end))}`);
  }
}

/**
 * One command to 127.0.0.1:port over a new connection; an error reply
 * rejects with RespError. `secure`: `{ cert, key }` (PEM) for a TLS
 * server, whose certificate is not checked (it may be one made to fail).
 */
export function callWith(secure, port, ...command) {
  return new Promise((resolve, reject) => {
    const socket = secure
      ? tls.connect({ host: '127.0.0.1', port, cert: secure.cert, key: secure.key, rejectUnauthorized: false })
      : net.connect({ host: '127.0.0.1', port });
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`127.0.0.1:${port}: no reply to ${command[0]} within ${DIRECT_TIMEOUT_MS} ms`));
    }, DIRECT_TIMEOUT_MS);
    socket.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      const got = parse(buf, 0);
      if (!got) return;
      clearTimeout(timer);
      socket.end();
      if (got[0] instanceof RespError) reject(got[0]);
      else resolve(got[0]);
    });
    const parts = [`*${command.length}\r\n`];
    for (const arg of command) {
      const s = String(arg);
      parts.push(`$${Buffer.byteLength(s)}\r\n${s}\r\n`);
    }
    socket.write(parts.join(''));
  });
}

/** `callWith` a plain server. */
export function call(port, ...command) {
  return callWith(null, port, ...command);
}

/**
 * Certificates for the TLS tests, made by scripts/test-certs.sh (openssl)
 * in a temporary directory removed at exit: `path(name)` and `pem(name)`
 * of ca.crt, server.crt/.key, client.crt/.key, other-ca.crt, ...
 */
export function makeCerts() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redislock-node-certs-'));
  directories.add(dir);
  execFileSync('bash', [path.join(checkout, 'scripts', 'test-certs.sh'), dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  return {
    dir,
    path: (name) => path.join(dir, name),
    pem: (name) => fs.readFileSync(path.join(dir, name)),
  };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.unref();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One redis-server with the module (TLS only with `certs`, see `makeCerts`). */
export class Server {
  constructor(dir, certs = null) {
    this.dir = dir;
    this.certs = certs;
    this.secure = certs ? { cert: certs.pem('client.crt'), key: certs.pem('client.key') } : null;
    this.proc = null;
    this.port = null;
  }

  async start() {
    for (let i = 0; i < 20; i++) {
      if (await this.#try(await freePort())) return this;
    }
    throw new Error(`could not start ${SERVER} (see the log in ${this.dir})`);
  }

  async #try(port) {
    const log = fs.openSync(path.join(this.dir, 'server.log'), 'a');
    let proc;
    try {
      const c = this.certs;
      const listen = c
        ? ['--port', '0', '--tls-port', String(port), '--tls-cert-file', c.path('server.crt'), '--tls-key-file', c.path('server.key'),
          '--tls-ca-cert-file', c.path('ca.crt'), '--tls-auth-clients', 'yes']
        : ['--port', String(port)];
      proc = spawn(
        SERVER,
        [...listen, '--bind', '127.0.0.1', '--dir', this.dir, '--unixsocket', this.socket, '--unixsocketperm', '700',
          '--save', '', '--appendonly', 'no', '--loadmodule', MODULE],
        { stdio: ['ignore', log, log] },
      );
    } finally {
      fs.closeSync(log);
    }
    let exited = false;
    proc.on('exit', () => {
      exited = true;
      running.delete(proc.pid);
    });
    const failed = await new Promise((resolve) => {
      proc.once('spawn', () => resolve(null));
      proc.once('error', (e) => resolve(e));
    });
    if (failed) throw new Error(`could not run ${SERVER}: ${failed.message}: install redis-server, or set REDISLOCK_SERVER`);
    running.set(proc.pid, proc);
    proc.unref();
    const deadline = Date.now() + READY_MS;
    while (Date.now() < deadline && !exited) {
      let info;
      try {
        info = await callWith(this.secure, port, 'INFO', 'server');
      } catch {
        await sleep(20);
        continue;
      }
      if (info.includes(`process_id:${proc.pid}\r\n`)) {
        this.proc = proc;
        this.port = port;
        return true;
      }
      break; // someone else's server on that port
    }
    this.#killProc(proc);
    return false;
  }

  #killProc(proc) {
    if (running.has(proc.pid)) {
      try {
        process.kill(proc.pid, 'SIGKILL');
      } catch {
        // gone already
      }
      running.delete(proc.pid);
    }
  }

  get url() { return `${this.certs ? 'rediss' : 'redis'}://127.0.0.1:${this.port}`; }
  /** Its Unix socket's path (it listens on both). */
  get socket() { return path.join(this.dir, 'redis.sock'); }
  get socketUrl() { return `unix://${this.socket}`; }
  get name() { return `127.0.0.1:${this.port}`; }
  get alive() { return this.proc !== null && running.has(this.proc.pid); }

  call(...command) {
    return callWith(this.secure, this.port, ...command);
  }

  /** LOCK.INFO as an object (null: not held here). */
  async lockInfo(key) {
    const reply = await this.call('LOCK.INFO', key);
    if (reply === null) return null;
    const fields = {};
    for (let i = 0; i < reply.length; i += 2) fields[reply[i]] = reply[i + 1];
    return fields;
  }

  /** SIGKILL by its PID; resolves once it exited. */
  async kill() {
    const proc = this.proc;
    if (!proc || !running.has(proc.pid)) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    // Referenced again while its exit is awaited: an unreferenced child
    // would let the event loop end before the exit event comes.
    proc.ref();
    this.#killProc(proc);
    await exited;
  }
}

/**
 * Once a file's tests are done its process must end by itself: a Promise
 * that never settles (a wait never ended, a lock never released) keeps it
 * alive. That is a failure, reported, rather than a suite that hangs.
 */
function exitIfStuck() {
  setTimeout(() => {
    process.stderr.write('redislock tests: still running 10 s after the tests ended (an operation that never settles?)\n');
    process.exit(1);
  }, 10_000).unref();
}

/** `n` servers, their URLs and a `stop()`; TLS only with `{ certs }` (`makeCerts()`). */
export async function startServers(n = 5, { certs = null } = {}) {
  if (!fs.existsSync(MODULE)) {
    throw new Error(`redislock module not found at ${MODULE}: run \`make build\`, or set REDISLOCK_MODULE`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redislock-node-'));
  directories.add(dir);
  const servers = [];
  const stop = async () => {
    await Promise.all(servers.map((s) => s.kill()));
    fs.rmSync(dir, { recursive: true, force: true });
    directories.delete(dir);
    exitIfStuck();
  };
  try {
    for (let i = 0; i < n; i++) {
      const sub = fs.mkdtempSync(path.join(dir, 'server-'));
      servers.push(await new Server(sub, certs).start());
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    servers,
    urls: servers.map((s) => s.url),
    stop,
    /** The servers on which `key` is held now. */
    async holders(key) {
      const held = await Promise.all(servers.map(async (s) => (s.alive && (await s.lockInfo(key)) !== null ? s : null)));
      return held.filter(Boolean);
    },
    /**
     * The servers still holding `key` once it is released everywhere, or
     * after `ms`. After a wait in line, a server whose grant came after the
     * round was decided (uncounted) may grant after the release reached
     * it; the client releases such a late grant as soon as it comes.
     */
    async holdersAfterRelease(key, ms = 2_000) {
      const end = Date.now() + ms;
      for (;;) {
        const held = await this.holders(key);
        if (held.length === 0 || Date.now() >= end) return held;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
  };
}

/**
 * Client timeouts with room for a loaded machine (the defaults are 50 and
 * 200 ms): these tests check what the client does, not how fast; a
 * scheduling stall of a shared 2-core machine must not fail them.
 */
export const ROOMY = { requestTimeout: 1_000, connectTimeout: 2_000 };

/**
 * Waiters in `resource`'s line on `cluster`'s servers, the longest found:
 * the head holds the line's place (`redlock:line:<resource>`), the others
 * wait in its queue (LOCK.INFO's `waiters`).
 */
export async function lineLength(cluster, resource) {
  let longest = 0;
  for (const server of cluster.servers) {
    const info = await server.lockInfo(`redlock:line:${resource}`);
    if (info) longest = Math.max(longest, 1 + Number(info.waiters));
  }
  return longest;
}

/**
 * Until `n` waiters are in `resource`'s line on `cluster`: the event the
 * tests act on, polled, never assumed after a sleep.
 */
export async function untilQueued(cluster, resource, n) {
  while ((await lineLength(cluster, resource)) < n) await new Promise((resolve) => setTimeout(resolve, 10));
}

let counter = 0;
/** A resource name no other test uses. */
export function resourceName(what) {
  counter += 1;
  return `node-test:${what}:${process.pid}:${counter}:${Math.random().toString(16).slice(2, 8)}`;
}
