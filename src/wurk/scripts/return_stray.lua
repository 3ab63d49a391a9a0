-- Gives one stray entry of a live process's own in-flight list back to its queue
-- (wurk.fetch.reaper): an entry no processor of that process holds — a move whose reply a cut
-- connection lost, or the job of a processor that died or could not book its failure.
-- Only an abandoned job's return is counted towards the poison limit:
-- a lost reply is no fault of the job's.
--
-- KEYS[1]  the private list        ARGV[1]  the entry, exactly as stored
-- KEYS[2]  the public queue list   ARGV[2]  poison counter key prefix (the jid is appended)
-- KEYS[3]  the `queues` set        ARGV[3]  poison threshold; 0 = do not count
--                                  ARGV[4]  poison counter TTL, seconds
--                                  ARGV[5]  the queue's name, for `queues`
-- KEYS[4]  (a partitioned queue's only) its in-flight counts: one fewer in flight for the
--          job's partition (wurk.partitions)
-- returns  {0, 0} gone already; {1, count} moved to the queue's tail (next to run);
--          {2, count} a poison pill, left in place for the caller to kill; a third item
--          lists the counters that held no count and started again, a fourth the keys that
--          refused their bookkeeping; {3, 0} the queue key holds another Redis type than a
--          list (written by something else): the entry is left in place, uncounted — looked
--          at before anything is written, as a failing RPUSH after the LREM left the job in
--          neither place (a script's earlier writes stay)

if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  return {0, 0}
end
local held = redis.call('TYPE', KEYS[2])['ok']
if held ~= 'list' and held ~= 'none' then
  return {3, 0}
end
local threshold = tonumber(ARGV[3])
local count = 0
if threshold > 0 then
  count = count_recovery(ARGV[1], ARGV[2], ARGV[4])
end
if threshold > 0 and count >= threshold then
  return {2, count, restarted_counters}
end
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
keep_book('SADD', KEYS[3], ARGV[5])
if KEYS[4] then part_release(KEYS[4], part_of(ARGV[1])) end
return {1, count, restarted_counters, refused_keys}
