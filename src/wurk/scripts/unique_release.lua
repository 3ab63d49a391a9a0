-- Releases a unique job's lock, only if that job still holds it: a lock that expired and
-- was taken by a later push belongs to that push.
--
-- KEYS[1]  unique:<digest>    ARGV[1]  the jid whose lock it should be
-- Returns 1 when released. A key of another type (an error reply, a table) holds no jid:
-- not this job's lock, left alone.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
