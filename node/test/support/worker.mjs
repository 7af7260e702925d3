// A process that takes one resource `rounds` times through `using` and
// holds the fenced files meanwhile (exclusion.test.mjs starts four).
//   node worker.mjs DIR RESOURCE ROUNDS URL...
// Prints {"overlaps": n, "holds": n} and exits 0.
import { Redlock } from 'redislock';

import { FencedFiles } from './fenced.mjs';
import { ROOMY } from './servers.mjs';

const [dir, resource, rounds, ...urls] = process.argv.slice(2);
const fenced = new FencedFiles(dir);
const redlock = new Redlock(urls, ROOMY);
let holds = 0;
for (let i = 0; i < Number(rounds); i++) {
  await redlock.using(resource, 5_000, { wait: 30_000 }, async (_signal, lock) => {
    await fenced.hold(lock.token, 2);
    holds += 1;
  });
}
// The places in line given up in the background: before exiting.
await redlock.settle();
process.stdout.write(`${JSON.stringify({ overlaps: fenced.overlaps, holds })}\n`);
