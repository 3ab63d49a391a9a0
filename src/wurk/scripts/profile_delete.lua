-- Delete one job profile: its member of the profiles set, and its hash only when the hash is
-- that profile's own (its token and jid spell the member). A member is read from Redis, so
-- anyone may have written it: "queues" or "queue:default" in the set must not delete those.
--
-- KEYS[1] the profiles sorted set   KEYS[2] the hash the member names   ARGV[1] the member
-- Returns 1 when the member was in the set (and is gone), else 0.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('TYPE', KEYS[2]).ok == 'hash' then
  local fields = redis.call('HMGET', KEYS[2], 'token', 'jid')
  if fields[1] and fields[2] and fields[1] .. '-' .. fields[2] == ARGV[1] then
    redis.call('DEL', KEYS[2])
    removed = 1
  end
end
return removed
