-- Clear one page of one partition of a partitioned queue (wurk.partitions; wurk.api.Queue's
-- clear): up to `most` of its oldest jobs removed and, when that emptied it, the partition
-- out of the ring — in one script, so a job pushed meanwhile keeps its partition in the
-- ring. The in-flight counts are not touched: jobs already running are ACKed against them
-- as before. The caller sends the next page until nothing is left, so no call holds Redis
-- for long however long the partition is.
--
-- KEYS[1]  the partition's list      KEYS[2]  the ring (ZSET)
-- ARGV[1]  the partition's name      ARGV[2]  most jobs to remove in this call
-- ARGV[3]  the text every unique job's JSON contains (its lock field's name, quoted)
-- ARGV[4]  the text every job keeping its result contains (its field's name, quoted; '' or
--          absent: none asked for)
-- returns  {jobs removed, jobs left, each removed job containing ARGV[3] or ARGV[4]...}: at
--          most ARGV[2] of them; the caller releases those locks and records those results
--          ("deleted")

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'list' then
  -- No work, or not a list (written by hand: left alone, as the fetch leaves it): out of
  -- the ring.
  if redis.call('TYPE', KEYS[2])['ok'] == 'zset' then redis.call('ZREM', KEYS[2], ARGV[1]) end
  return {0, 0}
end
local most = math.max(1, tonumber(ARGV[2]) or 1)
local rows = redis.call('LRANGE', KEYS[1], -most, -1)  -- the oldest end: next to run
redis.call('LTRIM', KEYS[1], 0, -most - 1)
local left = redis.call('LLEN', KEYS[1])
if left == 0 and redis.call('TYPE', KEYS[2])['ok'] == 'zset' then
  redis.call('ZREM', KEYS[2], ARGV[1])
end
local keeps = ARGV[4] or ''
local reply = {#rows, left}
for _, job in ipairs(rows) do
  if string.find(job, ARGV[3], 1, true)
      or (keeps ~= '' and string.find(job, keeps, 1, true)) then
    reply[#reply + 1] = job
  end
end
return reply
