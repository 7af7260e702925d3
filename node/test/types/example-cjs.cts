// The CommonJS entry, typed the same.
import redislock = require('redislock');

const redlock = new redislock.Redlock(['redis://127.0.0.1:7001']);
export const lock: Promise<redislock.Lock> = redlock.acquire('orders:42', 10_000);
export const errors = [redislock.NotAcquiredError, redislock.ConfigError, redislock.LockLostError] as const;
