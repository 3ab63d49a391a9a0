-- A bucket limiter: at most `limit` uses per wall-clock interval (by Redis's clock).
--
-- KEYS[1]  lmtr-s:{name}, stats
-- ARGV[1]  the counter key's prefix, lmtr-b:{name}: (the interval's start, epoch s, ends
--          it: only Redis's clock knows it; same hash slot as KEYS[1])
-- ARGV[2]  limit    ARGV[3]  interval, s    ARGV[4]  uses this call charges
-- ARGV[5]  the caller's wait left, ms        ARGV[6]  waited so far, ms
-- ARGV[7]  ttl of the stats, s
--
-- Returns {1, Redis's time in µs} when let in, {0, ms to the next interval} to wait,
-- {-1, ms} refused.
local limit, interval, used = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local remaining, waited, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_ms()
local start = math.floor(now / 1000 / interval) * interval
local key = ARGV[1] .. string.format('%d', start)

own(key, 'string')
local raw = redis.call('GET', key) or '0'
local current = 0
-- Only a count INCRBY could go on from (digits, below 2^63, no leading zero): Lua would
-- also read '1.5', '0x10', 'nan', '1e400' as numbers, and the limiter was over its limit,
-- or failed on INCRBY ('1.5', '007': Redis reads no leading zero), for the rest of the
-- interval. Written by hand: the interval starts afresh.
if #raw <= 18 and (raw == '0' or string.find(raw, '^[1-9]%d*$')) then
  current = tonumber(raw)
else
  redis.call('DEL', key)
  restarted[#restarted + 1] = key .. ' (not a count)'
end
if current + used <= limit then
  redis.call('INCRBY', key, used)
  redis.call('EXPIRE', key, 2 * interval)
  granted(KEYS[1], ttl, waited)
  return reply(1, math.floor(now * 1000))
end
return over(KEYS[1], ttl, (start + interval) * 1000 - now, remaining)
