-- Reliable fetch over a capsule's queues: move the oldest jobs of the first non-empty queue
-- into its private list, in one round trip (wire-format §10.3). Non-blocking; the caller
-- blocks with BLMOVE on one queue when this finds nothing.
--
-- A processor takes more than one job only out of a backlog, and never more than its share
-- of it: with `share` processors in the capsule, at most LLEN / share jobs (at least one),
-- and at most `most`. A short queue is spread over the processors, not taken by the first.
--
-- KEYS  pairs: public queue list, private list — in the order the queues are to be tried
-- ARGV[1]  most jobs to take (the prefetch setting; 1 = one job, no fetching ahead)
-- ARGV[2]  share: how many processors draw on these queues
-- returns  {pair index (1-based), job, job, …} oldest first, or nil

local most = tonumber(ARGV[1])
local share = tonumber(ARGV[2])
for i = 1, #KEYS, 2 do
  local n = 1
  if most > 1 then
    n = math.min(most, math.max(1, math.floor(redis.call('LLEN', KEYS[i]) / share)))
  end
  local taken = {(i + 1) / 2}
  for _ = 1, n do
    local job = redis.call('LMOVE', KEYS[i], KEYS[i + 1], 'RIGHT', 'LEFT')
    if not job then break end
    taken[#taken + 1] = job
  end
  if #taken > 1 then
    return taken
  end
end
return nil
