-- Recount a partitioned queue's in-flight jobs per partition from the in-flight lists that
-- took its jobs (wurk.partitions; the reaper runs it each sweep): repairs counts a killed
-- worker, a hand edit or a lost script reply left wrong.
--
-- Also forgets the per-second counts of a rate (KEYS[3]) from seconds gone by.
--
-- KEYS[1]  the in-flight counts (HASH)   KEYS[2]  the holders (SET)
-- KEYS[3]  the jobs fetched per second (HASH)
-- ARGV[1]  the prefix of the queue's lists (Keys.queue_prefix)   ARGV[2]  the queue
-- returns  {the number of partitions with jobs in flight, {key started again, …},
--          {holders dropped as no in-flight list of the queue, the first 20 of them…}}: the
--          holders
--          of another type than a set (written by something else: the recount failed at
--          every sweep) are deleted, as are the rate counts of another type than a hash;
--          without its holders the recount would count nothing in flight, so the counts
--          are kept as they are until the next sweep (the fetches note their lists again)

part_queue(ARGV[1], ARGV[2])
local restarted = {}
part_restart(KEYS[3], 'hash', restarted)
part_restart(KEYS[2], 'set', restarted)
if redis.call('TYPE', KEYS[3])['ok'] == 'hash' then
  local now = tonumber(redis.call('TIME')[1])
  local fields = redis.call('HGETALL', KEYS[3])
  for i = 1, #fields, 2 do
    local second = tonumber(string.match(fields[i + 1], '^(%d+) %d+$'))
    if second == nil or second < now then redis.call('HDEL', KEYS[3], fields[i]) end
  end
end
if restarted[#restarted] == KEYS[2] then
  local kept = redis.pcall('HLEN', KEYS[1])
  return {type(kept) == 'number' and kept or 0, restarted, PQ.dropped}
end
local n = part_recount(KEYS[1], KEYS[2])
return {n, restarted, PQ.dropped}
