-- The entries of a sorted set after (score, member) in its order — ascending, or descending
-- with ARGV[4] = 'desc' — at most ARGV[3] of them, found by rank in O(log n) whether the
-- member is still there at that score, gone (just moved out by the caller, deleted), or
-- moved to another score meanwhile. Reading the members that share its score instead would
-- read them all for every page: a bulk schedule of 100,000 jobs at one time read 100,000 a
-- page.
--
-- Where the member is not at that score, its rank there is read by putting it there for the
-- moment (ZADD) and back as it was (ZREM, or ZADD of its own score) — nothing else runs
-- meanwhile, so no one sees it. When no member holds that score, nothing is written: the
-- entries after it start after every entry of an earlier score. The member still there (a
-- walk that only reads) is the common case, and writes nothing either.
--
-- KEYS[1] the sorted set   ARGV[1] the score (text)   ARGV[2] the member   ARGV[3] count
-- ARGV[4] 'desc' for highest score first (else lowest first)
-- Returns member, score, member, score… (WITHSCORES); nothing when the key is no longer a
-- sorted set (deleted, or written over by hand), which ends a walk as the reads before it
-- found such a key absent.
local key, score, member = KEYS[1], ARGV[1], ARGV[2]
local count, desc = tonumber(ARGV[3]), ARGV[4] == 'desc'
if redis.call('TYPE', key).ok ~= 'zset' then return {} end

local function number(text)  -- a score as Redis writes it or Python's repr gives it
  if text == 'inf' or text == '+inf' then return math.huge end
  if text == '-inf' then return -math.huge end
  return tonumber(text)
end

local function rank(m)
  if desc then return redis.call('ZREVRANK', key, m) end
  return redis.call('ZRANK', key, m)
end

local function precedes(value)  -- does a score `value` come before the cursor's?
  if desc then return value > number(score) end
  return value < number(score)
end

local start
local was = redis.call('ZSCORE', key, member)
if was and number(was) == number(score) then
  start = rank(member) + 1
elseif redis.call('ZCOUNT', key, score, score) == 0 then
  -- No entry shares the score: the entries after it are those after every earlier score.
  if desc then
    start = redis.call('ZCOUNT', key, '(' .. score, '+inf')
  else
    start = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  end
else
  redis.call('ZADD', key, score, member)
  local at = rank(member)
  if was then
    redis.call('ZADD', key, was, member)  -- back at its own score
    start = precedes(number(was)) and at + 1 or at
  else
    redis.call('ZREM', key, member)  -- the entries after it now start at its rank
    start = at
  end
end
if desc then
  return redis.call('ZREVRANGE', key, start, start + count - 1, 'WITHSCORES')
end
return redis.call('ZRANGE', key, start, start + count - 1, 'WITHSCORES')
