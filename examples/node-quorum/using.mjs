// `using`: takes the lock (waiting in its line), keeps it extended while
// the work runs, tells the work the moment the lock is lost, and releases
// it at the end, also when the work throws.
//
//   node using.mjs
import { LockLostError, NotAcquiredError, Redlock } from 'redislock';

import { servers } from './servers.mjs';

const redlock = new Redlock(servers); // quorum: a majority
console.log(`servers: ${redlock.servers.join(', ')} (quorum ${redlock.quorum})`);

try {
  const total = await redlock.using('orders:42', 2_000, { wait: 90_000 }, async (signal, lock) => {
    console.log(`holding ${lock.resource}: token ${lock.token}, valid for ${Math.round(lock.validity)} ms`);
    let done = 0;
    // Work longer than the 2 s lease: the lock is extended every ~0.7 s.
    for (let step = 0; step < 5; step++) {
      // Stop touching the resource the moment the lock is lost.
      signal.throwIfAborted();
      await new Promise((resolve) => setTimeout(resolve, 600));
      done += 1;
    }
    console.log(`after ${done * 600} ms: still held, valid for ${Math.round(lock.validity)} ms`);
    return done;
  });
  console.log(`work done: ${total} steps; the lock is released`);
} catch (e) {
  if (e instanceof LockLostError) console.error(`the lock was lost while working: ${e.message}`);
  else if (e instanceof NotAcquiredError) console.error(`not acquired (${e.reason}): ${e.message}`);
  else throw e;
  process.exitCode = 1;
}
await redlock.settle();
