-- Move one entry from a sorted set (schedule, retry, dead) to the head of its queue: the
-- API's "retry now" and "add to queue". Atomic, so the job is never in neither place nor in
-- both, and two people pressing "retry" at once push it once. The payload is not decoded
-- here (cjson would round large numbers): the client passes both forms.
--
-- KEYS[1] the sorted set        ARGV[1] the member exactly as stored
-- KEYS[2] the `queues` set      ARGV[2] the queue name
-- KEYS[3] the queue list        ARGV[3] the payload to push (enqueued_at stamped)
-- Returns 1 when moved, 0 when the member was no longer there. A `queues` or queue key of
-- another type refuses the move before anything is written: a script is not rolled back,
-- so a failing SADD or LPUSH after the ZREM would leave the job in neither place.
local function holds(key, kind)
  local found = redis.call('TYPE', key)['ok']
  return found == 'none' or found == kind
end
if not holds(KEYS[2], 'set') or not holds(KEYS[3], 'list') then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' or ' .. KEYS[3] ..
    ' holds a value of another type; nothing was moved')
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('LPUSH', KEYS[3], ARGV[3])
return 1
