-- Reliable fetch over a capsule's queues: move the oldest jobs of the first non-empty queue
-- into its private list, in one round trip. Non-blocking; the caller
-- blocks with BLMOVE on one queue when this finds nothing.
--
-- A processor takes more than one job only out of a backlog, and never more than its share
-- of it: with `share` processors in the capsule, at most LLEN / share jobs (at least one),
-- and at most `most`. A short queue is spread over the processors, not taken by the first.
--
-- A job recovered before (its poison counter exists) may be the poison pill that took its
-- last worker down: it is taken alone, never in a batch, so the jobs that would have come
-- with it do not share its recovery count if it strikes again.
--
-- KEYS  pairs: public queue list, private list — in the order the queues are to be tried
-- ARGV[1]  most jobs to take (the prefetch setting; 1 = one job, no fetching ahead)
-- ARGV[2]  share: how many processors draw on these queues
-- ARGV[3]  poison counter key prefix (the jid is appended)
-- returns  {pair index (1-based), first recovered (1/0), job, job, …} oldest first, or nil.
--          Only the first job can have been recovered; the ACK of a job that was not need
--          not reset a counter. When no job was found and a queue or its private list held
--          another type than a list (anyone may write one), {0, {pair index, …}} names them:
--          such a pair is passed over, not the end of the fetch, or no queue after it would
--          ever be served.

local most = tonumber(ARGV[1])
local share = tonumber(ARGV[2])

local function recovered(job)
  local key = poison_key(job, ARGV[3])
  return key ~= nil and redis.call('EXISTS', key) == 1
end

local refused = {}
for i = 1, #KEYS, 2 do
  local job = redis.pcall('LMOVE', KEYS[i], KEYS[i + 1], 'RIGHT', 'LEFT')
  if type(job) == 'table' then
    -- Only a key of another type is passed over. Any other error (READONLY after a
    -- failover, OOM) is the server's, not the queue's: raised, so the fetch backs off and
    -- reconnects as for any refused command, instead of reading as an empty queue.
    if not string.find(job['err'] or '', '^WRONGTYPE') then
      error(job)
    end
    refused[#refused + 1] = (i + 1) / 2
  elseif job then
    local first_recovered = recovered(job)
    local taken = {(i + 1) / 2, first_recovered and 1 or 0, job}
    local n = 1
    if most > 1 and not first_recovered then
      n = math.min(most, math.max(1, math.floor((redis.call('LLEN', KEYS[i]) + 1) / share)))
    end
    for _ = 2, n do
      local next_job = redis.call('LMOVE', KEYS[i], KEYS[i + 1], 'RIGHT', 'LEFT')
      if not next_job then break end
      if recovered(next_job) then
        -- back where it was, the next to be taken: it comes alone, in a fetch of its own
        redis.call('LMOVE', KEYS[i + 1], KEYS[i], 'LEFT', 'RIGHT')
        break
      end
      taken[#taken + 1] = next_job
    end
    return taken
  end
end
if #refused > 0 then
  return {0, refused}
end
return nil
