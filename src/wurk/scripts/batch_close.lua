-- Close the first jobs block of a batch (batch_lib.lua): drop the pending placeholder that
-- batch_open.lua set, join the parent batch (only now, so a block cut short by a crash
-- never holds its parent back), and fire whatever is due.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back
-- ARGV[5]     bid
-- Returns reply(1), or reply(0) when the batch no longer exists or one of its keys holds
-- another Redis type (nothing written; the problem says so) (batch_lib.lua).
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local bid = ARGV[5]
if redis.call('EXISTS', bkey(bid)) == 0 then return reply(0) end
if broken(bid, "the end of its first jobs block is not counted: it fires none of its "
          .. 'callbacks') then
  return reply(0)
end
add(bid, 'pending', -1)
local B = lib()
local parent = B.parent_of(bid)
if parent and not broken(parent, 'its child ' .. bid .. ' does not join it: it does not wait '
                         .. 'for that child') then
  redis.call('SADD', bkey(parent, '-kids'), bid)
  redis.call('SADD', bkey(parent, '-pkids'), bid)
  B.touch(parent)
end
B.touch(bid)
B.try_fire(bid)
return reply(1)
