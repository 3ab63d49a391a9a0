-- A points limiter: `capacity` points refilled at `refill` per ms (by Redis's clock); a call
-- spends its estimated cost up front, or is refused at once when too few points are left.
--
-- KEYS[1]  lmtr-p:{name}, HASH points (float), ts (float s)   KEYS[2]  lmtr-s:{name}, stats
-- ARGV[1]  capacity    ARGV[2]  refill, points per ms    ARGV[3]  the points to take:
--          the estimate (spend), or estimate - actual (an adjustment, may be negative)
-- ARGV[4]  "spend" or "adjust"    ARGV[5]  ttl, s
--
-- Spend returns {1, Redis's time in µs} when taken, {-1, ms until enough points} refused. Adjust gives back
-- (or takes) the difference once the actual cost is known, and returns {1, 0}. Points may
-- go below zero when a call cost more than its estimate: later calls wait for the debt.
local capacity, refill, amount = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl = tonumber(ARGV[5])
local now = now_ms()
own(KEYS[1], 'hash')

local state = redis.call('HMGET', KEYS[1], 'points', 'ts')
local points = math.min(math.max(finite(state[1], capacity), -capacity), capacity)
local since = math.min(finite(state[2], now / 1000) * 1000, now)
points = math.min(capacity, points + (now - since) * refill)

local function save(value)
  redis.call('HSET', KEYS[1], 'points', string.format('%.6f', value),
             'ts', string.format('%.6f', now / 1000))
  redis.call('EXPIRE', KEYS[1], ttl)
end

if ARGV[4] == 'adjust' then
  save(math.min(capacity, points + amount))
  return reply(1, 0)
end
if points >= amount then
  save(points - amount)
  granted(KEYS[2], ttl, 0)
  return reply(1, math.floor(now * 1000))
end
count(KEYS[2], ttl, 'refused', 1)
return reply(-1, math.max(1, math.ceil((amount - points) / refill)))
