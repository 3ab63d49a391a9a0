-- Elects the one process that samples the cluster's numbers for the current interval, by
-- Redis's clock (TIME), so processes on clocks apart still take one sample per interval.
--
-- KEYS[1]  the history lock (holds the number of the interval last claimed)
-- ARGV[1]  the sampling interval, seconds
-- returns  the Redis time (seconds, a string) when the caller is to sample this interval,
--          false when another process already claimed it

local now = redis.call('TIME')
local seconds = tonumber(now[1]) + tonumber(now[2]) / 1000000
local interval = tonumber(ARGV[1])
local slot = tostring(math.floor(seconds / interval))
if redis.call('GET', KEYS[1]) == slot then
  return false
end
redis.call('SET', KEYS[1], slot, 'EX', math.max(1, math.ceil(interval * 2)))
return tostring(seconds)
