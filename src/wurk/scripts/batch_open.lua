-- Open a batch for a jobs block: create it, or check it may take more jobs (batch_lib.lua).
--
-- ARGV[1..3]  prefix, timestamp format, dead timeout (see batch_lib.lua)
-- ARGV[4]     bid
-- ARGV[5]     'create' or 'reopen'
-- create only:
-- ARGV[6..12] description, callback_queue, callback_class, parent_bid, tags (JSON array),
--             linger ('' for the default), callbacks (JSON array of [event, target, options])
-- ARGV[13..]  the tags, one per argument
--
-- A created batch holds one pending placeholder until its first block closes
-- (batch_close.lua), so jobs that finish while the block still pushes cannot fire it early.
-- Returns 1; an error reply names what is wrong.
init(ARGV[1], ARGV[2], ARGV[3])
local bid = ARGV[4]
local h = bkey(bid)
if ARGV[5] == 'reopen' then
  if redis.call('EXISTS', h) == 0 then
    return redis.error_reply('NOBATCH batch ' .. bid .. ' does not exist (expired or deleted)')
  end
  if present(redis.call('HGET', h, 'success_at')) then
    return redis.error_reply('BATCHDONE batch ' .. bid .. ' already succeeded; it takes no '
                             .. 'more jobs')
  end
  return 1
end
if redis.call('EXISTS', h) == 1 then
  return redis.error_reply('BATCHEXISTS batch ' .. bid .. ' exists already')
end
local B = lib()
redis.call('HSET', h, 'created_at', B.stamp(), 'description', ARGV[6], 'callback_queue', ARGV[7],
           'callback_class', ARGV[8], 'parent_bid', ARGV[9], 'tags', ARGV[10],
           'linger', ARGV[11], 'callbacks', ARGV[12], 'total', 0, 'pending', 1, 'failures', 0)
redis.call('ZADD', C.prefix .. 'batches', C.sec, bid)
for i = 13, #ARGV do
  redis.call('SADD', bkey(bid, '-tags'), ARGV[i])
  local index = C.prefix .. 'tags:' .. ARGV[i]
  redis.call('SADD', index, bid)
  if redis.call('TTL', index) < PENDING_TTL then redis.call('EXPIRE', index, PENDING_TTL) end
end
B.touch(bid)
return 1
