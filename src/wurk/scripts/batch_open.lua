-- Open a batch for a jobs block: create it, or check it may take more jobs (batch_lib.lua).
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back (see batch_lib.lua)
-- ARGV[5]     bid
-- ARGV[6]     'create' or 'reopen'
-- create only:
-- ARGV[7..13] description, callback_queue, callback_class, parent_bid, tags (JSON array),
--             linger ('' for the default), callbacks (JSON array of [event, target, options])
-- ARGV[14]    context: the JSON object of context variables the callback jobs carry as
--             their wurk_ctx ('' for none)
-- ARGV[15..]  the tags, one per argument
--
-- A created batch holds one pending placeholder until its first block closes
-- (batch_close.lua), so jobs that finish while the block still pushes cannot fire it early.
-- Returns 1; an error reply names what is wrong.
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local bid = ARGV[5]
local h = bkey(bid)
if ARGV[6] == 'reopen' then
  if redis.call('EXISTS', h) == 0 then
    return redis.error_reply('NOBATCH batch ' .. bid .. ' does not exist (expired or deleted)')
  end
  if broken(bid, 'it takes no jobs') then
    return redis.error_reply('BATCHBROKEN batch ' .. bid .. ' cannot be reopened: '
                             .. table.concat(C.problems, '; '))
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
-- Every key the create writes, checked before it writes anything: one of another type
-- (written by hand) failed it after the hash was written (Redis does not roll back), leaving
-- a half-made batch that no block closed, pending for 30 days.
broken(bid, 'it is not created', '-tags')
local indexes = {{C.prefix .. 'batches', 'zset'}}
for i = 15, #ARGV do indexes[#indexes + 1] = {C.prefix .. 'tags:' .. ARGV[i], 'set'} end
for _, pair in ipairs(indexes) do
  local kind = redis.call('TYPE', pair[1])['ok']
  if kind ~= pair[2] and kind ~= 'none' then
    problem(pair[1] .. ' holds a ' .. kind .. ', not a ' .. pair[2] .. ' (written by something '
            .. 'else); it is not created')
  end
end
if #C.problems > 0 then
  return redis.error_reply('BATCHBROKEN batch ' .. bid .. ' cannot be created: '
                           .. table.concat(C.problems, '; '))
end
local B = lib()
redis.call('HSET', h, 'created_at', B.stamp(), 'description', ARGV[7], 'callback_queue', ARGV[8],
           'callback_class', ARGV[9], 'parent_bid', ARGV[10], 'tags', ARGV[11],
           'linger', ARGV[12], 'callbacks', ARGV[13], 'total', 0, 'pending', 1, 'failures', 0)
if ARGV[14] ~= '' then redis.call('HSET', h, 'context', ARGV[14]) end
redis.call('ZADD', C.prefix .. 'batches', C.sec, bid)
for i = 15, #ARGV do
  redis.call('SADD', bkey(bid, '-tags'), ARGV[i])
  local index = C.prefix .. 'tags:' .. ARGV[i]
  redis.call('SADD', index, bid)
  if redis.call('TTL', index) < PENDING_TTL then redis.call('EXPIRE', index, PENDING_TTL) end
end
B.touch(bid)
return 1
