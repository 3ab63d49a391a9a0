-- The entries of a sorted set after (score, member) in its order, at most ARGV[3] of them,
-- found by rank in O(log n): the member itself may be gone (just moved out by the caller),
-- so it is put in for the moment its rank is read and taken out again — nothing else runs
-- meanwhile, so no one sees it. Reading the members that share its score instead would read
-- them all for every page: a bulk schedule of 100,000 jobs at one time read 100,000 a page.
--
-- KEYS[1] the sorted set   ARGV[1] the score (text)   ARGV[2] the member   ARGV[3] count
-- Returns member, score, member, score… (WITHSCORES).
local added = redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[2])
local rank = redis.call('ZRANK', KEYS[1], ARGV[2])
if added == 1 then
  redis.call('ZREM', KEYS[1], ARGV[2])  -- the entries after it now start at its rank
else
  rank = rank + 1
end
return redis.call('ZRANGE', KEYS[1], rank, rank + tonumber(ARGV[3]) - 1, 'WITHSCORES')
