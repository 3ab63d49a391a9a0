-- The leader's loops become the cluster's: each is written (idempotent: a loop's id is a
-- digest of its definition), and every loop in `periodic` it does not register is pruned
-- with its history. Fenced, so a stale leader running old code cannot prune the new loops.
--
-- KEYS[1..2] as periodic_fence.lua   KEYS[3]  periodic (SET of loop ids)
-- ARGV[1..2] as periodic_fence.lua   ARGV[3]  the loops:<lid> prefix
-- ARGV[4]  the loop-history:<lid> prefix
-- ARGV[5..]  six per loop: lid, schedule, klass, options JSON, tz, first next tick (used
--            when the loop is new or its stored nf is unreadable)
--
-- Returns {'synced', loops added, {pruned lids}} or the fence's refusal.

local function kind(key) return redis.call('TYPE', key)['ok'] end

local fence = refused()
if fence then return {fence} end
-- These keys are the loops' own: one holding another type (written by hand, or by
-- something else) is replaced rather than left to fail every tick.
if kind(KEYS[3]) ~= 'set' then redis.call('DEL', KEYS[3]) end
local keep, added = {}, 0
for i = 5, #ARGV, 6 do
  local lid = ARGV[i]
  local key = ARGV[3] .. lid
  if kind(key) ~= 'hash' then
    redis.call('DEL', key)
    added = added + 1
  end
  redis.call('HSET', key, 'schedule', ARGV[i + 1], 'klass', ARGV[i + 2],
             'options', ARGV[i + 3], 'tz', ARGV[i + 4])
  redis.call('HSETNX', key, 'paused', '0')
  if not tonumber(redis.call('HGET', key, 'nf')) then
    redis.call('HSET', key, 'nf', ARGV[i + 5])
  end
  redis.call('SADD', KEYS[3], lid)
  keep[lid] = true
end
local pruned = {}
for _, lid in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if not keep[lid] then
    redis.call('SREM', KEYS[3], lid)
    redis.call('DEL', ARGV[3] .. lid, ARGV[4] .. lid)
    pruned[#pruned + 1] = lid
  end
end
return {'synced', added, pruned}
