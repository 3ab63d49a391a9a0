-- A concurrent limiter's slot: taken when fewer than `size` live locks exist.
--
-- KEYS[1]  lmtr-c:{name}, ZSET token → lock expiry (ms)   KEYS[2]  lmtr-s:{name}, stats
-- KEYS[3]  lmtr-cw:{name}, the wake-up list a waiter blocks on (only made sure of here)
-- ARGV[1]  size             ARGV[2]  lock_timeout, ms      ARGV[3]  this holder's token
-- ARGV[4]  ttl of the keys, s                              ARGV[5]  the caller's wait left, ms
-- ARGV[6]  how long the caller has waited so far, ms
--
-- Locks past their expiry belong to holders that crashed (or overran): they are reclaimed
-- first, and counted; one expiring after the key itself is dropped with a warning.
-- Returns {1, Redis's time in µs} when taken; {0, ms until the earliest lock expires} to
-- wait for a release; {-1, 0} when refused.
local size, lock_timeout = tonumber(ARGV[1]), tonumber(ARGV[2])
local ttl, remaining, waited = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms()
own(KEYS[1], 'zset')
if KEYS[3] then own(KEYS[3], 'list') end  -- the wake-up list a waiter blocks on

-- A lock expiring after the key itself would (its ttl is at least lock_timeout) was taken by
-- no holder: written by hand.
drop_future(KEYS[1], now + ttl * 1000)
local reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if reclaimed > 0 then count(KEYS[2], ttl, 'reclaimed', reclaimed) end

if redis.call('ZCARD', KEYS[1]) < size then
  local expiry = now + lock_timeout
  redis.call('ZADD', KEYS[1], expiry, ARGV[3])
  redis.call('EXPIRE', KEYS[1], ttl)
  granted(KEYS[2], ttl, waited)
  return reply(1, math.floor(now * 1000))
end
if remaining <= 0 then
  count(KEYS[2], ttl, 'refused', 1)
  return reply(-1, 0)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return reply(0, math.max(1, math.ceil(finite(first[2], now + lock_timeout) - now)))
