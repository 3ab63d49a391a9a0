-- Takes the one lowest-scored due member out of a sorted set (schedule or retry) and returns
-- it with its score, or nil when nothing is due (wire-format §5.2). The caller pushes it
-- through the client; one at a time, so a crash in between loses at most this one job.
--
-- KEYS[1]  the sorted set
-- ARGV[1]  now, float epoch seconds

local found = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, 1,
                         'WITHSCORES')
if #found == 0 then return nil end
redis.call('ZREM', KEYS[1], found[1])
return found
