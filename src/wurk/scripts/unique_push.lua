-- A unique job's push: its lock and the job, together or not at all.
--
-- KEYS[1]  unique:<digest>    KEYS[2]  the `queues` set
-- KEYS[3]  the job's queue list, or the `schedule` set for a scheduled job
-- ARGV[1]  the job's jid    ARGV[2]  unique_for, ms (the wait of a scheduled job is added,
--          on Redis's clock: lock_ttl)    ARGV[3]  the payload
-- ARGV[4]  the queue's name (immediate jobs)    ARGV[5]  the score ('' for immediate jobs)
-- ARGV[6]  '1' when wurk pushes the job again (a retry or scheduled job come due, through
--          the client; an interrupted iterable job), else ''
--
-- Returns nil when pushed, or the jid holding the lock when this push is a duplicate. A
-- lock held by this very jid does not refuse it: that is the job itself coming back (the
-- scheduler pushing it through the client), and its lock keeps its original lifetime. Nor
-- does a lock another jid took (the job's own was released at its start, or expired) refuse
-- a job pushed again (ARGV[6]): it was accepted long ago, and refusing it dropped a retry
-- the atomic scheduler would have moved; it goes through, that lock left as it is.
--
-- A lock of another Redis type holds no jid (anyone may write the key): it made every push
-- of the job fail with WRONGTYPE, for good when written without a TTL. It is replaced by
-- this push's lock, and the reply is {the lock's key, the type it was}, to be warned about;
-- so is a lock without an expiry, which no push writes.
--
-- The queue, the `queues` set or the schedule of another type refuses the push before anything
-- is written: a script is not rolled back, and a lock taken for a job the push then failed
-- to write refused every later push of it as a duplicate of a job nobody had.
local refused = other_type(ARGV[5] ~= '' and {{KEYS[3], 'zset'}}
                           or {{KEYS[2], 'set'}, {KEYS[3], 'list'}},
                           'nothing was pushed, no lock taken')
if refused then return refused end
local holder = lock_holder(KEYS[1], ARGV[1])
if holder and holder ~= ARGV[1] then
  if ARGV[6] ~= '1' then return holder end
elseif not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', lock_ttl(ARGV[2], ARGV[5]))
end
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[3])
else
  redis.call('SADD', KEYS[2], ARGV[4])
  redis.call('LPUSH', KEYS[3], ARGV[3])
end
if #replaced > 0 then return replaced end
return false
