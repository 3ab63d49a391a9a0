-- A push that records its jid, so that sending the same job again pushes nothing: the path
-- of reliable push (a first try, and every replay from its buffer) and of the outbox relay.
--
-- KEYS[1]  the `wurk:push-sent` set (jid -> when it was pushed, Redis's clock)
-- KEYS[2]  the `queues` set
-- KEYS[3]  the job's queue list, or the `schedule` set for a scheduled job
-- KEYS[4]  a unique job's lock (unique:<digest>); absent for other jobs
-- ARGV[1]  the job's jid    ARGV[2]  the payload, as it is to be stored
-- ARGV[3]  the queue's name (immediate jobs)    ARGV[4]  the score ('' for immediate jobs)
-- ARGV[5]  unique_for in ms (unique jobs; a scheduled job's wait is added: lock_ttl)
-- ARGV[6]  seconds a record of a jid is kept at most (records whose pusher never said the
--          push landed: it died, or its push's reply was lost)
--
-- Returns 0 when pushed; 1 when this jid was sent already (a replay of a push whose reply
-- was lost, or of a relayed row whose deletion was not committed): nothing is written; or
-- the jid holding the lock when a unique job is a duplicate. The record and the job are
-- written together or not at all: a script runs whole. A duplicate refused is recorded
-- too, so a replay of it is not pushed once the holder's lock is gone: a duplicate is
-- refused at its first send or never pushed.
--
-- `wurk:push-sent` or a unique lock holding another Redis type (anyone may write them; the
-- set has no TTL) failed every push with WRONGTYPE: each is deleted first, and the reply is
-- then {the reply above, key, the type it held, ...}, to be warned about; so is a lock
-- without an expiry (`lock_holder`). The queue, `queues` or the schedule of another type
-- refuses the push with an error before anything is written (the caller buries the job).
-- (``own`` and ``replaced``: owned.lua, the prelude.)
local function reply(value)
  if #replaced == 0 then return value end
  return {value, unpack(replaced)}
end
local refused = other_type(ARGV[4] ~= '' and {{KEYS[3], 'zset'}}
                           or {{KEYS[2], 'set'}, {KEYS[3], 'list'}}, 'nothing was pushed')
if refused then return refused end
own(KEYS[1], 'zset')
local now = redis.call('TIME')
local seconds = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', seconds - tonumber(ARGV[6]))
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return reply(1)
end
if #KEYS == 4 then
  local holder = lock_holder(KEYS[4], ARGV[1])
  if holder and holder ~= ARGV[1] then
    redis.call('ZADD', KEYS[1], seconds, ARGV[1])
    return reply(holder)
  end
  if not holder then
    redis.call('SET', KEYS[4], ARGV[1], 'PX', lock_ttl(ARGV[5], ARGV[4]))
  end
end
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
else
  redis.call('SADD', KEYS[2], ARGV[3])
  redis.call('LPUSH', KEYS[3], ARGV[2])
end
redis.call('ZADD', KEYS[1], seconds, ARGV[1])
return reply(0)
