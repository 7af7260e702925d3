#!/usr/bin/env ruby
# frozen_string_literal: true

# The quorum from Ruby with redis-rb, through `redlock serve`: acquire,
# write through the fence with the token (LOCK.FENCED on the data server),
# wait in line, extend, release.
#
# Needs `redlock serve` (REDLOCK_SERVE_HOST / REDLOCK_SERVE_PORT, default
# 127.0.0.1:7379) and a Redis with the module for the data (DATA_HOST /
# DATA_PORT, default 127.0.0.1:6379); see ../README.md.
# Checks its own output; prints `example OK` or exits non-zero.

require "redis"
require "securerandom"

def expect(ok, what)
  return if ok

  warn "example FAILED: #{what}"
  exit! 1 # at once, not after worker-b's thread
end

# timeout: redis-rb's default read timeout (5 s) would cut a longer WAIT short.
def connect(prefix, default_port)
  Redis.new(host: ENV.fetch("#{prefix}_HOST", "127.0.0.1"),
            port: Integer(ENV.fetch("#{prefix}_PORT", default_port)), timeout: 60)
end

# LOCK.INFO's [field, value, ...] reply (RESP2, which redis-rb 4 speaks)
# as a Hash; nil when nobody holds.
def lock_info(redis, key)
  reply = redis.call("LOCK.INFO", key)
  reply && reply.each_slice(2).to_h
end

begin
  # Two workers, a connection each to the endpoint (a blocked WAIT
  # occupies its connection), and the data server.
  a = connect("REDLOCK_SERVE", 7379)
  b = connect("REDLOCK_SERVE", 7379)
  data = connect("DATA", 6379)
  key = "example:serve:ruby:#{SecureRandom.hex(4)}"
  fence = "#{key}:fence"
  data_key = "#{key}:data"

  token_a = a.call("LOCK.ACQUIRE", key, "worker-a", 10_000)
  expect(token_a.is_a?(Integer), "worker-a's ACQUIRE answered #{token_a.inspect}, not a token")
  puts "worker-a acquired #{key} through the quorum with token #{token_a}"

  expect(b.call("LOCK.ACQUIRE", key, "worker-b", 10_000).nil?, "worker-b got a lock that worker-a holds")
  puts "worker-b without WAIT: nil (worker-a holds it)"

  # The write runs on the data server only if the token is at least every
  # token the register has accepted.
  written = data.call("LOCK.FENCED", fence, token_a, "SET", data_key, "written by worker-a")
  expect(written == "OK", "worker-a's fenced write answered #{written.inspect}")
  puts "worker-a wrote through the fence with token #{token_a}"

  # With WAIT the call blocks, so it runs in a thread.
  waiter = Thread.new { b.call("LOCK.ACQUIRE", key, "worker-b", 10_000, "WAIT", 15_000) }
  deadline = Time.now + 5
  until (lock_info(a, key) || {})["waiters"] == 1
    expect(waiter.alive?, "worker-b's WAIT ended while worker-a held the lock")
    expect(Time.now < deadline, "worker-b never showed up in LOCK.INFO's waiters")
    sleep 0.01
  end
  puts "worker-b waits in line (LOCK.INFO waiters: 1)"

  expect(a.call("LOCK.EXTEND", key, "worker-a", 30_000) == 1, "EXTEND by the holder failed")
  pttl = lock_info(a, key)["pttl"]
  expect(pttl > 10_000, "lease left after EXTEND is #{pttl} ms, expected above 10000")
  puts "worker-a extended its lease: #{pttl} ms left"

  expect(waiter.alive?, "worker-b's WAIT returned while worker-a still held the lock")
  expect(a.call("LOCK.RELEASE", key, "worker-a") == 1, "RELEASE by the holder failed")
  token_b = waiter.join(5)&.value
  expect(token_b.is_a?(Integer) && token_b > token_a,
         "worker-b was granted #{token_b.inspect} after the release, expected a token above #{token_a}")
  puts "worker-a released; worker-b was granted the lock with token #{token_b}"

  written = data.call("LOCK.FENCED", fence, token_b, "SET", data_key, "written by worker-b")
  expect(written == "OK", "worker-b's fenced write answered #{written.inspect}")
  puts "worker-b wrote through the fence with token #{token_b}"
  # worker-a's write arrives late (a GC pause, a slow network): the data
  # server refuses it, and runs nothing. An error reply is raised as
  # Redis::CommandError.
  begin
    data.call("LOCK.FENCED", fence, token_a, "SET", data_key, "late write by worker-a")
    expect(false, "the data server took worker-a's late write")
  rescue Redis::CommandError => e
    expect(e.message.start_with?("FENCED older token"), "worker-a's late write answered #{e.message}")
    puts "worker-a's late write was refused: #{e.message}"
  end
  stored = data.get(data_key)
  expect(stored == "written by worker-b", "the data is #{stored.inspect}")

  # A former holder's EXTEND answers 0: it learns it lost the lock.
  expect(a.call("LOCK.EXTEND", key, "worker-a", 10_000).zero?, "a non-holder extended")
  expect(b.call("LOCK.RELEASE", key, "worker-b") == 1, "worker-b's RELEASE failed")
  puts "worker-a's EXTEND answered 0; worker-b released"

  data.del(fence, data_key)
  puts "example OK"
rescue Redis::CannotConnectError => e
  expect(false, "#{e.message} (are redlock serve and the data server running?)")
rescue Redis::BaseError => e
  expect(false, e.message)
end
