-- Move one entry from a sorted set (schedule, retry) to the dead set, trimmed as
-- `Morgue.bury` trims it: the API's "kill". Atomic, so a cut or a crash between two steps
-- cannot leave the job in neither place. The entry is moved as stored, bytes unread.
--
-- KEYS[1] the sorted set        ARGV[1] the member exactly as stored
-- KEYS[2] the dead set          ARGV[2] its score there (the time of death)
--                               ARGV[3] the oldest score kept (older entries are trimmed)
--                               ARGV[4] the last rank trimmed (negative: Sidekiq's count)
-- Returns 1 when moved, 0 when the member was no longer there. A dead key of another type
-- refuses the move before anything is written: a script is not rolled back.
local found = redis.call('TYPE', KEYS[2])['ok']
if found ~= 'none' and found ~= 'zset' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] ..
    ' holds a value of another type; nothing was moved')
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, ARGV[4])
return 1
