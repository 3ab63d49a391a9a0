-- Redis Cluster, step 3 of a periodic run (wurk.periodic.cluster), in the default keyspace:
-- the run's push is known (pushed now or before, or given up), so its pending record goes,
-- and a pushed run enters the loop's history — once: only the call that deletes the record
-- writes the entry. Not fenced: whoever learnt the outcome may clear it.
--
-- KEYS[1]  wurk:loop-pending:<lid>   KEYS[2]  loop-history:<lid>
-- ARGV[1]  the run's jid   ARGV[2]  its tick, epoch s   ARGV[3]  history entries kept
-- ARGV[4]  '1' when the job was pushed (a history entry), '0' when given up
--
-- Returns 1 when this call cleared the record, else 0 (another did, or it names another run).

if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
-- A record with no jid (written by hand) is cleared by the jid '' read_pending gives it.
if (redis.call('HGET', KEYS[1], 'jid') or '') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[4] == '1' then
  if redis.call('TYPE', KEYS[2])['ok'] ~= 'list' then redis.call('DEL', KEYS[2]) end
  redis.call('LPUSH', KEYS[2], '[' .. ARGV[2] .. ',"' .. ARGV[1] .. '"]')
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
end
return 1
