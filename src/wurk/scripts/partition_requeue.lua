-- Gives jobs of a partitioned queue back from an in-flight list to their partitions' tails
-- (next to run), each only if it was still in the in-flight list, one fewer in flight for
-- each (wurk.partitions; a job already given back is not pushed a second time). A job whose
-- partition's key holds another Redis type goes to the default partition; if that one's does
-- too, it stays in its in-flight list. A ring of another type (written by hand) is left as it
-- is, for the next fetch to delete and rebuild from the partitions' lists: the jobs go back
-- and are released all the same (a failing ZADD after the first move left its count held and
-- the others in flight).
--
-- KEYS[1]  the ring (ZSET)         KEYS[2]  the in-flight counts (HASH)
-- KEYS[3…] the in-flight list of each job
-- ARGV[1]  partition list key prefix
-- ARGV     then pairs: the job as stored, its partition
-- returns  how many went back

local moved = 0
local ring = part_holds(KEYS[1], 'zset')
for i = 3, #KEYS do
  local job = ARGV[2 * (i - 2)]
  local name = ARGV[2 * (i - 2) + 1]
  if not part_valid(name) then name = part_of(job) end
  if redis.call('LREM', KEYS[i], 1, job) == 1 then
    local put = part_put(ARGV[1], name, job, 'RPUSH')
    if put then
      if ring then redis.call('ZADD', KEYS[1], 'NX', 0, put) end
      part_release(KEYS[2], name)
      moved = moved + 1
    else  -- no partition's list can take it: it stays in flight, for the reaper to return
      redis.call('RPUSH', KEYS[i], job)
    end
  end
end
return moved
