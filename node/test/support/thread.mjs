// A worker thread of workers.test.mjs: the package in a Node environment
// of its own. workerData: { urls, options, resource, task, count }; `task`:
// - 'wait': posts 'asking', then waits for the resource (held by the
//   test, which ends this thread meanwhile)
// - 'cycles': `count` acquire + release cycles of the resource, posts how
//   many it made, and ends by itself: nothing keeps its event loop alive
import { parentPort, workerData } from 'node:worker_threads';

import { Redlock } from 'redislock';

// The options come from the test (its ROOMY): importing the servers'
// support here would install its exit and signal handlers in every thread.
const { urls, options, resource, task, count } = workerData;
const redlock = new Redlock(urls, options);
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
