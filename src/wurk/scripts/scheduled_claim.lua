-- Claims one due member of a sorted set (schedule or retry) for the one-at-a-time path: the
-- member moves into the set's claims, scored with the claim's time by Redis's clock, and is
-- returned. The caller pushes it through the client, then releases the claim (or puts the
-- member back when the push failed). A process that dies in between leaves the claim; once
-- it is older than the lease, the next call hands that member out again. So a crash between
-- taking a due job and pushing it can repeat the job, never lose it.
--
-- KEYS[1]  the sorted set           KEYS[2]  its claims (ZSET: member -> claimed at)
-- ARGV[1]  the lease: a claim older than this many seconds was abandoned
-- ARGV[2]  1: take over an abandoned claim only, claim nothing new
-- ARGV[3]  how many of the lowest due members to pass over (put back this pass after a
--          failed push: each stays where it is and holds up no later one)
--
-- Due and abandoned are both judged on Redis's clock, whatever the caller's clock says.
--
-- Returns nil when nothing is due, else {member, score, abandoned}: score is the member's
-- due time (the claim's time when it was taken over from an abandoned claim), abandoned is
-- 1 when it was.

local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000

local stale = redis.call('ZRANGE', KEYS[2], '-inf', now - tonumber(ARGV[1]), 'BYSCORE',
                         'LIMIT', 0, 1)
if #stale > 0 then
  redis.call('ZADD', KEYS[2], now, stale[1])
  return {stale[1], tostring(now), 1}
end

if ARGV[2] == '1' then return nil end
local found = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT',
                         tonumber(ARGV[3]), 1, 'WITHSCORES')
if #found == 0 then return nil end
redis.call('ZREM', KEYS[1], found[1])
redis.call('ZADD', KEYS[2], now, found[1])
return {found[1], found[2], 0}
