-- A window limiter: at most `limit` uses in any sliding `interval` (by Redis's clock).
--
-- KEYS[1]  lmtr-w:{name}, ZSET one member per use, score = its time (ms)
-- KEYS[2]  lmtr-s:{name}, stats
-- ARGV[1]  limit    ARGV[2]  interval, ms    ARGV[3]  uses this call charges
-- ARGV[4]  a random token for this call's members    ARGV[5]  the caller's wait left, ms
-- ARGV[6]  waited so far, ms    ARGV[7]  ttl of the stats, s
--
-- A use at time t counts while now - t < interval. Returns {1, Redis's time in µs} when
-- let in; else how long until enough of the oldest uses leave the window: {0, ms} to wait,
-- {-1, ms} refused.
local limit, interval, used = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local remaining, waited, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_ms()
own(KEYS[1], 'zset')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - interval)
-- A use is stamped with Redis's time: one more than a window ahead is no use (written by
-- hand, +inf) and would never leave.
drop_future(KEYS[1], now + interval)

local current = redis.call('ZCARD', KEYS[1])
if current + used <= limit then
  local stamp = string.format('%.3f', now)
  for i = 1, used do
    redis.call('ZADD', KEYS[1], now, stamp .. '-' .. ARGV[4] .. '-' .. i)
  end
  redis.call('PEXPIRE', KEYS[1], math.ceil(interval))
  granted(KEYS[2], ttl, waited)
  return reply(1, math.floor(now * 1000))
end
-- The (current + used - limit)-th oldest use must leave before this call fits.
local rank = current + used - limit - 1
local row = redis.call('ZRANGE', KEYS[1], rank, rank, 'WITHSCORES')
return over(KEYS[2], ttl, finite(row[2], now) + interval - now, remaining)
