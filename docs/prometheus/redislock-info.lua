-- The redislock module's numbers (INFO redislock) for redis_exporter's
-- --script option, which exports each name/value pair this returns as
-- redis_script_values{key="<name>"}: a flat array name, value, name, ...
-- Every field is one number under its own name (docs/operations.md,
-- "Metrics (INFO redislock)"); the values go back as strings, since a Lua
-- number would reach the exporter as an integer. INFO runs inside a
-- script on Redis 7 and Valkey 8; it reads only, so it writes nothing.
local out = {}
local info = redis.call('INFO', 'redislock')
for name, value in string.gmatch(info, '(redislock_[%w_]+):(%-?[%d%.]+)') do
  out[#out + 1] = name
  out[#out + 1] = value
end
return out
