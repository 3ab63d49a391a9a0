-- A leaky bucket: holds up to `size` uses and drains `size` per `drain` ms, so a burst of
-- `size` passes and then one use per drain/size ms (by Redis's clock).
--
-- KEYS[1]  lmtr-l:{name}, HASH level (float), ts (float s)    KEYS[2]  lmtr-s:{name}, stats
-- ARGV[1]  size    ARGV[2]  drain period, ms    ARGV[3]  uses this call charges
-- ARGV[4]  the caller's wait left, ms    ARGV[5]  waited so far, ms    ARGV[6]  ttl, s
--
-- Returns {1, Redis's time in µs} when let in; else the next drip: {0, ms} to wait,
-- {-1, ms} refused.
local size, drain, used = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local remaining, waited, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms()
own(KEYS[1], 'hash')
local rate = size / drain  -- uses drained per ms

local state = redis.call('HMGET', KEYS[1], 'level', 'ts')
local level = math.min(math.max(finite(state[1], 0), 0), size)
local since = math.min(finite(state[2], now / 1000) * 1000, now)
level = math.max(0, level - (now - since) * rate)

if level + used <= size then
  redis.call('HSET', KEYS[1], 'level', string.format('%.6f', level + used),
             'ts', string.format('%.6f', now / 1000))
  redis.call('EXPIRE', KEYS[1], ttl)
  granted(KEYS[2], ttl, waited)
  return reply(1, math.floor(now * 1000))
end
return over(KEYS[2], ttl, (level + used - size) / rate, remaining)
