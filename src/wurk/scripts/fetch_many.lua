-- Reliable fetch, several jobs at once: move up to ARGV[1] of the oldest jobs from the
-- queues, tried in the given order, each into that queue's private list (wire-format §10.3).
-- Non-blocking; one round trip feeds every idle processor of a capsule.
--
-- KEYS     pairs: public queue list, private list — in the order the queues are to be tried
-- ARGV[1]  the most jobs to move
-- returns  flat {pair index (1-based), job, pair index, job, …}; empty when all are empty

local want = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS, 2 do
  while #out < want * 2 do
    local job = redis.call('LMOVE', KEYS[i], KEYS[i + 1], 'RIGHT', 'LEFT')
    if not job then break end
    out[#out + 1] = (i + 1) / 2
    out[#out + 1] = job
  end
  if #out >= want * 2 then break end
end
return out
