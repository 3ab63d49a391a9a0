-- Push jobs onto a partitioned queue (wurk.partitions): each job at the head of its
-- partition's list, the partition into the ring if it was not there (it appears with its
-- work: no registration), the queue into `queues` — in one script, so a fetch never sees a
-- partition in the ring whose job is still on its way, nor a job whose partition is not.
--
-- KEYS[1]  the ring (ZSET)         KEYS[2]  the `queues` set
-- ARGV[1]  partition list key prefix   ARGV[2]  the queue's name
-- ARGV[3…] the jobs
-- returns  how many were pushed

for i = 3, #ARGV do
  local name = part_of(ARGV[i])
  redis.call('LPUSH', ARGV[1] .. name, ARGV[i])
  redis.call('ZADD', KEYS[1], 'NX', 0, name)
end
redis.call('SADD', KEYS[2], ARGV[2])
return #ARGV - 2
