-- Gives a concurrent limiter's slot back and wakes one waiter.
--
-- KEYS[1]  lmtr-c:{name}    KEYS[2]  lmtr-cw:{name}, wake-up tokens    KEYS[3]  lmtr-s:{name}
-- ARGV[1]  the holder's token    ARGV[2]  lock_timeout, ms    ARGV[3]  size
-- ARGV[4]  ttl of the keys, s
--
-- A holder whose lock was already reclaimed, or that releases after its lock expired, held
-- the slot longer than lock_timeout: an overage. Returns {1, 0, …} when the slot was still
-- ours, {0, 0, …} when not (the third element: what was started again, limiter_common).
local lock_timeout, size, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
own(KEYS[1], 'zset')
own(KEYS[2], 'list')
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry then
  count(KEYS[3], ttl, 'overages', 1)
  return reply(0, 0)
end
redis.call('ZREM', KEYS[1], ARGV[1])
expiry = finite(expiry, now)
count(KEYS[3], ttl, 'held_ms', math.max(0, math.floor(now - (expiry - lock_timeout))))
if expiry < now then count(KEYS[3], ttl, 'overages', 1) end
-- One token per release, at most `size` (and 64) kept: releases nobody waits for cannot pile
-- up wake-ups, and they vanish with the locks they announced. A waiter a token misses wakes
-- at the end of its wait's slice anyway.
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], 0, math.min(size, 64) - 1)
redis.call('PEXPIRE', KEYS[2], math.max(1000, lock_timeout))
return reply(1, 0)
