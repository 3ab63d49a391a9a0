-- Fetch from a partitioned queue (wurk.partitions): round-robin across the partitions with
-- work, never past a partition's in-flight limit — an over-limit job is never taken.
--
-- 1. Jobs that reached the queue's plain list (a job the reaper or a requeue gave back, a
--    scheduled job the scheduler moved, a push by a process that does not know the queue is
--    partitioned) are routed to their partitions first, at most `route` of them; to the
--    default partition when their partition's key holds another Redis type (never lost).
-- 2. The ring holds the partitions with work, scored by turn. They are visited lowest turn
--    first; an empty partition leaves the ring (it comes back with its next push); one at
--    its limit, or served, takes the next turn. At most one job per partition per fetch, at
--    most `most` jobs in all; with a rate, a partition that had `rate` jobs fetched in this
--    second of Redis's clock is skipped like one at its limit. Each job taken moves into the fetcher's in-flight list and
--    counts one more in flight for its partition; that list is noted in `holders`.
-- 3. A processor takes no more than its share of the partitions with work (ARGV[9]
--    processors draw on the queue: at most (partitions + 1) / share jobs, at least one, as
--    fetch_ahead.lua shares a plain queue's LLEN), so a few tenants' jobs are spread over
--    the processors, not taken ahead by the first to run one after another.
--
-- KEYS[1]  the queue's plain list     KEYS[2]  the fetcher's in-flight list
-- KEYS[3]  the ring (ZSET)            KEYS[4]  the in-flight counts (HASH)
-- KEYS[5]  the holders (SET)         KEYS[6]  the jobs fetched this second (HASH)
-- ARGV[1]  partition list key prefix  ARGV[2]  in-flight limit per partition
-- ARGV[3]  most jobs to take          ARGV[4]  most plain-list jobs to route
-- ARGV[5]  most partitions to visit ARGV[6]  most jobs of one partition fetched in one
--          second of Redis's clock (0: no rate)
-- ARGV[7]  the prefix of the queue's lists (Keys.queue_prefix)   ARGV[8]  the queue
-- ARGV[9]  share: how many processors draw on the queue (absent: 1)
-- returns  {{job, partition, job, partition, …}, {key started again, …}, {holders dropped by
--          a recount, as partition_recount.lua's}, {key passed over, …}}: the queue's plain
--          list or the fetcher's in-flight list holding another type than a list (written
--          by something else; left alone, as the plain fetch leaves them): the plain list's
--          jobs are not routed, the partitions still served; an in-flight list that is no
--          list takes nothing (it made every fetch of the capsule fail). The holders or the ring of
--          another type than a set (a zset), or the rate counts of another type than a hash, written
--          by something else, are deleted before anything moves (each made every fetch
--          fail, the first after moving a job into the in-flight list)

local limit = tonumber(ARGV[2])
local most = tonumber(ARGV[3])
local rate = tonumber(ARGV[6]) or 0
local now = rate > 0 and redis.call('TIME')[1] or nil
part_queue(ARGV[7], ARGV[8])
local restarted = {}
part_restart(KEYS[5], 'set', restarted)
-- A ring of another type failed every fetch here for good; deleted, the caller rebuilds it
-- from the partitions' lists (a script cannot list them in a cluster-safe way).
part_restart(KEYS[3], 'zset', restarted)
if rate > 0 then part_restart(KEYS[6], 'hash', restarted) end
local passed = {}
if not part_holds(KEYS[2], 'list') then
  passed[1] = KEYS[2]
  return {{}, restarted, PQ.dropped, passed}
end
local route = part_holds(KEYS[1], 'list')
if not route then passed[1] = KEYS[1] end

-- Jobs of partition `name` fetched in this second (a field written by hand counts as none).
local function fetched_now(name)
  local raw = redis.call('HGET', KEYS[6], name)
  if not raw then return 0 end
  local second, count = string.match(raw, '^(%d+) (%d+)$')
  if second ~= now then return 0 end
  return tonumber(count)
end

-- The plain list's oldest jobs, oldest first, go to their partitions' tails (next to run),
-- each partition's in the order they were pushed: the newest is put there first, so the
-- oldest ends at the very tail (put there one by one as popped, they ran newest first).
local routed = route and redis.call('RPOP', KEYS[1], tonumber(ARGV[4])) or {}
for i = #routed, 1, -1 do
  local name = part_put(ARGV[1], part_of(routed[i]), routed[i], 'RPUSH')
  if name then
    redis.call('ZADD', KEYS[3], 'NX', 0, name)
  else  -- its partition's key and the default's hold other types: it waits where it was
    redis.call('LPUSH', KEYS[1], routed[i])
  end
end

if most > 1 then
  local share = math.max(1, tonumber(ARGV[9]) or 1)
  most = math.min(most, math.max(1, math.floor((redis.call('ZCARD', KEYS[3]) + 1) / share)))
end

local top = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
local turn = tonumber(top[2]) or 0
local taken = {}
local seen = {}
local visits = tonumber(ARGV[5])
-- Read a page at a time from the front: a visited partition takes the next turn (the back),
-- one found empty or bad leaves, so the front always holds the partitions not yet visited.
local page = 2 * most + 8
while visits > 0 and #taken < 2 * most do
  local names = redis.call('ZRANGE', KEYS[3], 0, math.min(page, visits) - 1)
  if #names == 0 or seen[names[1]] then break end
  for _, name in ipairs(names) do
    if #taken >= 2 * most or seen[name] then break end
    seen[name] = true
    visits = visits - 1
    if not part_valid(name) then
      redis.call('ZREM', KEYS[3], name)  -- written by hand: no push makes such a member
    else
      local list = ARGV[1] .. name
      if redis.call('TYPE', list)['ok'] ~= 'list' then
        redis.call('ZREM', KEYS[3], name)  -- no work (or not a list: not ours to touch)
      else
        turn = turn + 1
        redis.call('ZADD', KEYS[3], 'XX', turn, name)
        local this_second = rate > 0 and fetched_now(name) or 0
        if part_running(KEYS[4], KEYS[5], name) < limit and (rate == 0 or this_second < rate) then
          local job = redis.call('LMOVE', list, KEYS[2], 'RIGHT', 'LEFT')
          redis.call('HINCRBY', KEYS[4], name, 1)
          if rate > 0 then redis.call('HSET', KEYS[6], name, now .. ' ' .. (this_second + 1)) end
          taken[#taken + 1] = job
          taken[#taken + 1] = name
        end
      end
    end
  end
end
if #taken > 0 then redis.call('SADD', KEYS[5], KEYS[2]) end
return {taken, restarted, PQ.dropped, passed}
