// ESM entry: the CommonJS module's exports, by name.
import cjs from './index.js';

export const {
  Redlock,
  Lock,
  Election,
  Leadership,
  Group,
  Membership,
  RedlockError,
  NotAcquiredError,
  QuorumUnreachableError,
  LockLostError,
  ConfigError,
  LockReleasedError,
  METRICS_CONTENT_TYPE,
} = cjs;
export default cjs;
