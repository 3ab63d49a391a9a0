-- Records a limiter where every process and the dashboard find it: its metadata hash and
-- its name in the index of known limiters.
--
-- KEYS[1]  lmtr:<name>    KEYS[2]  lmtr-list
-- ARGV[1]  name    ARGV[2]  type    ARGV[3]  options (JSON)    ARGV[4]  fingerprint
-- ARGV[5]  ttl, s    ARGV[6]  the metadata keys' prefix, lmtr: (KEYS[1] without the name)
--
-- Returns {1, 0, restarted} or, when it wrote over another definition's metadata (another
-- fingerprint), {1, 0, restarted, its type, its options}: the caller tells when the rule
-- differs (two definitions of one name each run with their own).
--
-- The index has no expiry of its own: each registration also drops the names among a few
-- sampled ones whose metadata is gone (unused for `ttl`), so dynamic names do not pile up
-- in it for good. A name dropped while still in use comes back at its next registration.
own(KEYS[1], 'hash')
own(KEYS[2], 'set')
local before = redis.call('HMGET', KEYS[1], 'type', 'options', 'fingerprint')
redis.call('HSET', KEYS[1], 'type', ARGV[2], 'options', ARGV[3], 'fingerprint', ARGV[4])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
redis.call('SADD', KEYS[2], ARGV[1])
for _, member in ipairs(redis.call('SRANDMEMBER', KEYS[2], 20)) do
  if redis.call('EXISTS', ARGV[6] .. member) == 0 then
    redis.call('SREM', KEYS[2], member)
  end
end
if before[1] and before[2] and before[3] ~= ARGV[4] then
  return {1, 0, restarted, before[1], before[2]}
end
return reply(1, 0)
