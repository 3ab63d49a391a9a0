-- A callback job of a batch completed (batch_lib.lua). Once every `success` callback has,
-- the batch's parent stops waiting for it: parent callbacks run after their children's.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back
-- ARGV[5]     bid    ARGV[6]  event    ARGV[7]  the callback job's jid
-- Returns reply(1) when this completion released the parent, else reply(0) (also when one
-- of the batch's keys holds another Redis type: nothing recorded, the problem says so).
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local bid, event, jid = ARGV[5], ARGV[6], ARGV[7]
if redis.call('EXISTS', bkey(bid)) == 0 then return reply(0) end
if broken(bid, 'the run of its ' .. event .. ' callback job ' .. jid .. ' is not recorded: '
          .. 'a parent batch is not told its callbacks ran', '-cbsucc') then
  return reply(0)
end
local done = bkey(bid, '-cbsucc')
local B = lib()
if redis.call('SADD', done, event .. ':' .. jid) == 0 or event ~= 'success' then
  B.touch(bid)
  return reply(0)
end
local finished = 0
for _, member in ipairs(redis.call('SMEMBERS', done)) do
  if string.sub(member, 1, 8) == 'success:' then finished = finished + 1 end
end
B.touch(bid)
if finished < B.count_callbacks(bid, 'success') then return reply(0) end
local parent = B.parent_of(bid)
if not parent or broken(parent, 'it is not told that its child ' .. bid .. ' succeeded')
    or redis.call('SREM', bkey(parent, '-pkids'), bid) == 0 then
  return reply(0)
end
B.try_fire(parent, 1)
return reply(1)
