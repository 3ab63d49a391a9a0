-- Shared by the periodic scripts (their text follows this one in a single chunk): a write
-- is made only by the process holding dear-leader in the newest term. A leader paused past
-- its key's life, or cut off in a partition, is refused here even before the per-loop mark.
--
-- KEYS[1]  dear-leader        KEYS[2]  leader-token
-- ARGV[1]  our identity       ARGV[2]  our term's token

local function refused()
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'not-leader' end
  if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 'stale-token' end
  return nil
end
