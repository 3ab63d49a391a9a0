-- Moves every job of a private in-flight list back to its public queue, in one script so a job either goes back with its recovery counted or stays for
-- the dead set — never both, never neither.
--
-- Jobs leave from the head (newest first) onto the queue's tail, so the oldest recovered job
-- ends at the very tail and is the next one fetched.
--
-- KEYS[1]  the private list
-- KEYS[2]  the public queue list
-- KEYS[3]  the `queues` set
-- KEYS[4]  the cluster's count of recovered jobs (bumped only when counting recoveries)
-- ARGV[1]  poison counter key prefix (the jid is appended; never used bare)
-- ARGV[2]  poison threshold; 0 = do not count (a clean shutdown returning its own jobs)
-- ARGV[3]  poison counter TTL, seconds
-- ARGV[4]  the queue's name, for `queues`
-- ARGV[5]  "1" to return the moved jobs too (for an on_recover hook), else "0"
-- ARGV[6]  how many heartbeat records follow (absent: none)
-- KEYS[5…] the owner's heartbeat records its death was judged by (their absence): checked
--          again here, with the move, so an owner whose record came back since the reaper
--          judged it (an outage over, its first fetch made) keeps its list; none when the
--          owner's pid proved it dead, or for a process's own lists
-- KEYS[5 + n]  (a partitioned queue's only) its in-flight counts: each job moved is one
--          fewer in flight for its partition; the next fetch routes it from the plain list
--          back to its partition (wurk.partitions)
-- returns  {moved, {poisoned job, its count, …}, {moved job, …}, {counter started again, …},
--          {key that refused its bookkeeping, …}, owner alive (1) or not (0)}; poisoned jobs
--          stay, rotated to the tail. When the public queue's key holds another Redis type
--          than a list (written by something else) nothing is moved nor counted, and a
--          seventh item names it: looked at before the first job's count, as a failing LMOVE
--          after it ended the script with each count kept, and at the third sweep the jobs
--          read as poison pills and were killed though none had ever run

-- A heartbeat record is a hash with its `info` (the reaper's and Sidekiq's rule). One of
-- another type (written by something else) is a heartbeat while it expires: Ruby's beat
-- fails its HSET but keeps its EXPIRE; a live wurk deletes such a record at its next beat.
-- One that never expires is none: its owner's jobs must not wait on it for good.
local function beating(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then return false end
  if kind == 'hash' then return redis.call('HEXISTS', key, 'info') == 1 end
  return redis.call('TTL', key) >= 0
end

local records = tonumber(ARGV[6] or '0')
for i = 1, records do
  if beating(KEYS[4 + i]) then
    return {0, {}, {}, {}, {}, 1}
  end
end
local held = redis.call('TYPE', KEYS[2])['ok']
if held ~= 'list' and held ~= 'none' then
  return {0, {}, {}, {}, {}, 0, KEYS[2]}
end
local counts = KEYS[5 + records]
local threshold = tonumber(ARGV[2])
local moved = 0
local poisoned = {}
local recovered = {}
local keep = ARGV[5] == '1'
local n = redis.call('LLEN', KEYS[1])
for _ = 1, n do
  local job = redis.call('LINDEX', KEYS[1], 0)
  if not job then break end
  local count = 0
  if threshold > 0 then
    count = count_recovery(job, ARGV[1], ARGV[3])
  end
  if threshold > 0 and count >= threshold then
    redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
    poisoned[#poisoned + 1] = job
    poisoned[#poisoned + 1] = count
  else
    redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
    moved = moved + 1
    if counts then part_release(counts, part_of(job)) end
    if keep then recovered[#recovered + 1] = job end
  end
end
if moved > 0 then
  keep_book('SADD', KEYS[3], ARGV[4])
  if threshold > 0 then keep_book('INCRBY', KEYS[4], moved) end
end
return {moved, poisoned, recovered, restarted_counters, refused_keys, 0}
