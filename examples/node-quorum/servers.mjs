// The servers of the examples: $REDLOCK_SERVERS (comma-separated URLs), by
// default the five that `make redlock-up` starts on 127.0.0.1:7001-7005.
export const servers = (process.env.REDLOCK_SERVERS || [7001, 7002, 7003, 7004, 7005].map((p) => `redis://127.0.0.1:${p}`).join(','))
  .split(',')
  .map((url) => (url.includes('://') ? url : `redis://${url}`));
