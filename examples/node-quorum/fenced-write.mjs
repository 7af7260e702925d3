// A fenced write: the resource itself refuses a write whose token is not
// larger than the last one it accepted. A holder that paused past its
// lease (a GC pause, a stopped VM) can then no longer overwrite the work
// of the holder that came after it.
//
//   node fenced-write.mjs
import { Redlock } from 'redislock';

import { servers } from './servers.mjs';

/** The protected resource: a store that checks fencing tokens. */
class FencedStore {
  #highest = -1n;
  value = null;

  write(token, value) {
    if (token <= this.#highest) {
      throw new Error(`refused: token ${token} is not above ${this.#highest}, a later holder wrote already`);
    }
    this.#highest = token;
    this.value = value;
  }
}

const redlock = new Redlock(servers);
const store = new FencedStore();
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A takes the lock for 500 ms (not kept: nothing extends it) ...
const a = await redlock.acquire('invoice:7', 500, { wait: 90_000 });
console.log(`A holds invoice:7 with token ${a.token}`);
// ... and stalls past its lease.
await pause(800);
console.log(`A wakes up: lost = ${a.lost}, validity ${a.validity} ms`);

// Meanwhile B took the lock, with a larger token, and wrote.
const b = await redlock.acquire('invoice:7', 5_000, { wait: 5_000 });
console.log(`B holds invoice:7 with token ${b.token}`);
store.write(b.token, 'written by B');

// A's late write is refused by the resource itself.
try {
  store.write(a.token, 'written by A');
  console.error('A overwrote B: the store did not check the token');
  process.exitCode = 1;
} catch (e) {
  console.log(`A's late write: ${e.message}`);
}
console.log(`store: ${store.value}`);
await b.release();
await a.release().catch((e) => console.log(`A's release: ${e.name} (${e.code})`));
await redlock.settle();
