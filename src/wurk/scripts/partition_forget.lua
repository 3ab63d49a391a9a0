-- The end of clearing a partitioned queue (wurk.api.Queue's clear): the queue leaves the
-- `queues` set only if nothing of it waits any more — a job pushed while the clear ran keeps
-- it listed (a push adds it back in the same script as the job).
--
-- KEYS[1]  the queue's plain list   KEYS[2]  the ring (ZSET)   KEYS[3]  the `queues` set
-- ARGV[1]  the queue's name
-- returns  1 when it was forgotten, else 0

if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
return redis.call('SREM', KEYS[3], ARGV[1])
