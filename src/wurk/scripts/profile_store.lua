-- Store one job profile as Sidekiq 8 does (ZADD profiles, HSET the hash, EXPIRE it a day),
-- only when the hash is free or already this profile's own (its token and jid spell the
-- member). The token and jid come from a payload read from Redis, so "<token>-<jid>" may
-- spell any key with a dash in it: another type, or a hash of something else, is left as it
-- was — no field written, no expiry set, no member listed.
--
-- KEYS[1] the profiles sorted set   KEYS[2] the profile's hash
-- ARGV[1] the member's score   ARGV[2] the member   ARGV[3] the hash's lifetime (s)
-- ARGV[4..] the hash's field/value pairs
-- Returns 1 when stored, else the type of what holds the key ("hash" for another's).
local kind = redis.call('TYPE', KEYS[2]).ok
if kind ~= 'none' then
  if kind ~= 'hash' then return kind end
  local fields = redis.call('HMGET', KEYS[2], 'token', 'jid')
  if not (fields[1] and fields[2] and fields[1] .. '-' .. fields[2] == ARGV[2]) then
    return kind
  end
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], unpack(ARGV, 4))
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
