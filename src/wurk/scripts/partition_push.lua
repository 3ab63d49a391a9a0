-- Push jobs onto a partitioned queue (wurk.partitions): each job at the head of its
-- partition's list, the partition into the ring if it was not there (it appears with its
-- work: no registration), the queue into `queues` — in one script, so a fetch never sees a
-- partition in the ring whose job is still on its way, nor a job whose partition is not. A
-- job whose partition's key holds another Redis type (written by something else, left alone)
-- goes to the default partition. A ring of another type (written by hand) is left as it is,
-- for the next fetch to delete and rebuild from the partitions' lists, which hold the job: a
-- ZADD failing after the LPUSH made a pushed job look refused, and a retry pushed it twice.
-- All or nothing: every job's list is found before any is written, so a job that no list
-- can take (its partition's key and the default partition's both of another type) fails
-- the push with nothing of it written — the jobs before it were pushed, the push reported
-- as failed, and a retry pushed them twice.
--
-- KEYS[1]  the ring (ZSET)         KEYS[2]  the `queues` set
-- ARGV[1]  partition list key prefix   ARGV[2]  the queue's name
-- ARGV[3…] the jobs
-- returns  how many were pushed

local prefix = ARGV[1]
local takes = {}  -- partition -> whether its key is a list or nothing, asked once
local function takes_jobs(name)
  local found = takes[name]
  if found == nil then
    found = part_holds(prefix .. name, 'list')
    takes[name] = found
  end
  return found
end

local into = {}
for i = 3, #ARGV do
  local wanted = part_of(ARGV[i])
  if takes_jobs(wanted) then
    into[i] = wanted
  elseif takes_jobs(PART_DEFAULT) then
    into[i] = PART_DEFAULT
  else
    return redis.error_reply('WRONGTYPE ' .. prefix .. wanted .. ' and ' .. prefix ..
      PART_DEFAULT .. ' hold other Redis types than lists (written by something else): ' ..
      'job ' .. (i - 2) .. ' cannot be pushed, so none of the ' .. (#ARGV - 2) ..
      ' jobs of this push to queue ' .. ARGV[2] .. ' was pushed')
  end
end

redis.call('SADD', KEYS[2], ARGV[2])
local ring = part_holds(KEYS[1], 'zset')
for i = 3, #ARGV do
  redis.call('LPUSH', prefix .. into[i], ARGV[i])
  if ring then redis.call('ZADD', KEYS[1], 'NX', 0, into[i]) end
end
return #ARGV - 2
