-- Move a loop's next tick (nf) on without pushing: its ticks were passed over (paused, too
-- old to catch up, stopped by a middleware) or its stored mark was unreadable.
--
-- KEYS[1..2] as periodic_fence.lua   KEYS[3]  loops:<lid>
-- ARGV[1..2] as periodic_fence.lua   ARGV[3]  the next tick, epoch s
-- Returns {'advanced'}, {'gone'} or the fence's refusal.

local fence = refused()
if fence then return {fence} end
if redis.call('EXISTS', KEYS[3]) == 0 then return {'gone'} end
redis.call('HSET', KEYS[3], 'nf', ARGV[3])
return {'advanced'}
