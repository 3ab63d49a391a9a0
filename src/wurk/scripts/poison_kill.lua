-- Takes a poison pill out of the in-flight list the reaper found it in and buries it in the
-- dead set, trimmed as `Morgue.bury` trims it, in one step (wurk.fetch.poison). Only the
-- reaper whose script finds the pill still there kills it: another reaper that counted it
-- meanwhile finds it gone, and buries nothing and tells no one.
--
-- KEYS[1] the in-flight list   ARGV[1] the pill exactly as stored there
-- KEYS[2] the dead set         ARGV[2] the entry to bury (the pill with its error)
--                              ARGV[3] its score there (the time of death)
--                              ARGV[4] the oldest score kept (older entries are trimmed)
--                              ARGV[5] the last rank trimmed (negative: Sidekiq's count)
--                              ARGV[6] "1" to bury, "0" to discard (`dead: false`)
-- Returns 1 when taken, 0 when the pill was no longer there. A dead key of another type
-- refuses the kill before anything is written: a script is not rolled back.
local bury = ARGV[6] == '1'
if bury then
  local found = redis.call('TYPE', KEYS[2])['ok']
  if found ~= 'none' and found ~= 'zset' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[2] ..
      ' holds a value of another type; the pill stays in ' .. KEYS[1])
  end
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
if bury then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, ARGV[5])
end
return 1
