-- Clear a queue's list or a sorted set (wurk.api's clear) in one step: its entries move to
-- KEYS[2] (RENAME), which lives ARGV[2] seconds at most, and the queue leaves the queues set.
-- The caller then reads KEYS[2] a page at a time to release the unique jobs' locks, and
-- deletes it. Reading the unique jobs first and deleting after (two steps) deleted a unique
-- job pushed in between with its lock left held; nothing pushed after this step is touched.
--
-- KEYS[1]  the list or sorted set      KEYS[2]  where its entries go (a key of the call's own)
-- KEYS[3]  the queues set (a queue's clear only)
-- ARGV[1]  the type KEYS[1] must have ('list' or 'zset')   ARGV[2]  KEYS[2]'s life, seconds
-- ARGV[3]  the queue's name (with KEYS[3])
-- Returns how many entries there were; a WRONGTYPE error naming KEYS[1] when it holds
-- another type (written by hand: left alone).
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= ARGV[1] and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a ' ..
    ARGV[1] .. '; not cleared')
end
if KEYS[3] then redis.call('SREM', KEYS[3], ARGV[3]) end
if kind == 'none' then return 0 end
local count
if kind == 'list' then count = redis.call('LLEN', KEYS[1]) else count = redis.call('ZCARD', KEYS[1]) end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return count
