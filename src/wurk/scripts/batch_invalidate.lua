-- Invalidate a batch and every batch below it (batch_lib.lua): their jobs see
-- valid_within_batch() turn false and should return early; they still count as done.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back
-- ARGV[5]     bid
-- Returns {the number of batches marked, what was found that wurk never writes...}: a
-- batch whose record or children set holds another Redis type is not marked, nor what is
-- below it.
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local marked, seen, todo = 0, {}, {ARGV[5]}
while #todo > 0 and marked < 100000 do
  local bid = table.remove(todo)
  if not seen[bid] and redis.call('EXISTS', bkey(bid)) == 1 and
      not broken(bid, 'it is not invalidated, nor the batches below it') then
    seen[bid] = true
    redis.call('HSET', bkey(bid), 'invalidated', '1')
    marked = marked + 1
    for _, kid in ipairs(redis.call('SMEMBERS', bkey(bid, '-kids'))) do
      todo[#todo + 1] = kid
    end
  end
end
return {marked, unpack(C.problems)}
