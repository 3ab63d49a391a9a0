-- The ACK of a job of a partitioned queue (wurk.partitions): out of the in-flight list and,
-- only if it was still there, one fewer in flight for its partition (a job the reaper gave
-- back was counted out then).
--
-- KEYS[1]  the in-flight list      KEYS[2]  the in-flight counts (HASH)
-- ARGV[1]  the job, as stored      ARGV[2]  its partition
-- returns  LREM's reply

local removed = redis.call('LREM', KEYS[1], 1, ARGV[1])
if removed > 0 then part_release(KEYS[2], ARGV[2]) end
return removed
