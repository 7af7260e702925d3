// A worker thread of workers.test.mjs: the package in a Node environment
// of its own. workerData: { urls, resource, task }; `task`:
// - 'wait': posts 'asking', then waits for the resource (held by the
//   test, which ends this thread meanwhile)
// - 'cycles': `count` acquire + release cycles of the resource, posts how
//   many it made, and ends by itself: nothing keeps its event loop alive
import { parentPort, workerData } from 'node:worker_threads';

import { Redlock } from 'redislock';

import { ROOMY } from './servers.mjs';

const { urls, resource, task, count } = workerData;
const redlock = new Redlock(urls, ROOMY);
if (task === 'wait') {
  parentPort.postMessage('asking');
  await redlock.acquire(resource, 30_000, { wait: 60_000 });
  parentPort.postMessage('granted');
} else if (task === 'cycles') {
  let made = 0;
  for (let i = 0; i < count; i += 1) {
    const lock = await redlock.acquire(resource, 10_000);
    await lock.release();
    made += 1;
  }
  await redlock.settle();
  parentPort.postMessage(made);
}
