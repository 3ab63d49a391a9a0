-- Records a limiter where every process and the dashboard find it: its metadata hash and
-- its name in the index of known limiters.
--
-- KEYS[1]  lmtr:<name>    KEYS[2]  lmtr-list
-- ARGV[1]  name    ARGV[2]  type    ARGV[3]  options (JSON)    ARGV[4]  fingerprint
-- ARGV[5]  ttl, s    ARGV[6]  the metadata keys' prefix, lmtr: (KEYS[1] without the name)
-- ARGV[7]  'force' to write over what is stored, else ''
--
-- Returns {1, 0, …} when these options are stored; {0, 0, …, type, options} when the
-- metadata of another definition was found and kept (the third element: what was started
-- again, limiter_common).
--
-- The index has no expiry of its own: each registration also drops the names among a few
-- sampled ones whose metadata is gone (unused for `ttl`), so dynamic names do not pile up
-- in it for good. A name dropped while still in use comes back at its next registration.
own(KEYS[1], 'hash')
own(KEYS[2], 'set')
-- The options a limiter was first made with win: metadata of another fingerprint is kept
-- (and kept alive: the limiter is in use) and returned, for the caller to follow or, when
-- it is no limiter's, to write over with ARGV[7] 'force'. Two definitions that each wrote
-- their own took turns, and each ran the scripts with its own size and lock.
local kept = nil
if ARGV[7] ~= 'force' then
  local stored = redis.call('HMGET', KEYS[1], 'type', 'options', 'fingerprint')
  if stored[1] and stored[2] and stored[3] ~= ARGV[4] then kept = stored end
end
if not kept then
  redis.call('HSET', KEYS[1], 'type', ARGV[2], 'options', ARGV[3], 'fingerprint', ARGV[4])
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
redis.call('SADD', KEYS[2], ARGV[1])
for _, member in ipairs(redis.call('SRANDMEMBER', KEYS[2], 20)) do
  if redis.call('EXISTS', ARGV[6] .. member) == 0 then
    redis.call('SREM', KEYS[2], member)
  end
end
if kept then return {0, 0, restarted, kept[1], kept[2]} end
return reply(1, 0)
