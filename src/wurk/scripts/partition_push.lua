-- Push jobs onto a partitioned queue (wurk.partitions): each job at the head of its
-- partition's list, the partition into the ring if it was not there (it appears with its
-- work: no registration), the queue into `queues` — in one script, so a fetch never sees a
-- partition in the ring whose job is still on its way, nor a job whose partition is not. A
-- job whose partition's key holds another Redis type (written by something else, left alone)
-- goes to the default partition. A ring of another type (written by hand) is left as it is,
-- for the next fetch to delete and rebuild from the partitions' lists, which hold the job: a
-- ZADD failing after the LPUSH made a pushed job look refused, and a retry pushed it twice.
--
-- KEYS[1]  the ring (ZSET)         KEYS[2]  the `queues` set
-- ARGV[1]  partition list key prefix   ARGV[2]  the queue's name
-- ARGV[3…] the jobs
-- returns  how many were pushed

redis.call('SADD', KEYS[2], ARGV[2])
local ring = part_holds(KEYS[1], 'zset')
for i = 3, #ARGV do
  local wanted = part_of(ARGV[i])
  local name = part_put(ARGV[1], wanted, ARGV[i], 'LPUSH')
  if not name then
    return redis.error_reply('WRONGTYPE ' .. ARGV[1] .. wanted .. ' and ' .. ARGV[1] ..
      PART_DEFAULT .. ' hold other Redis types than lists (written by something else): ' ..
      'the job cannot be pushed; jobs pushed before it: ' .. (i - 3))
  end
  if ring then redis.call('ZADD', KEYS[1], 'NX', 0, name) end
end
return #ARGV - 2
