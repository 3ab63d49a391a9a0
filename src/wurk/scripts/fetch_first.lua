-- Reliable fetch over several queues: move the oldest job of the first non-empty queue into
-- its private list, in one round trip (wire-format §10.3). Non-blocking; the caller blocks
-- with BLMOVE on one queue when this finds nothing.
--
-- KEYS  pairs: public queue list, private list — in the order the queues are to be tried
-- returns {pair index (1-based), job} or nil

for i = 1, #KEYS, 2 do
  local job = redis.call('LMOVE', KEYS[i], KEYS[i + 1], 'RIGHT', 'LEFT')
  if job then
    return {(i + 1) / 2, job}
  end
end
return nil
