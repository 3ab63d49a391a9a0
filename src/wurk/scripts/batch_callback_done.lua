-- A callback job of a batch completed (batch_lib.lua). Once every `success` callback has,
-- the batch's parent stops waiting for it: parent callbacks run after their children's.
--
-- ARGV[1..3]  prefix, timestamp format, dead timeout
-- ARGV[4]     bid    ARGV[5]  event    ARGV[6]  the callback job's jid
-- Returns 1 when this completion released the parent, else 0.
init(ARGV[1], ARGV[2], ARGV[3])
local bid, event, jid = ARGV[4], ARGV[5], ARGV[6]
if redis.call('EXISTS', bkey(bid)) == 0 then return 0 end
local done = bkey(bid, '-cbsucc')
local B = lib()
if redis.call('SADD', done, event .. ':' .. jid) == 0 or event ~= 'success' then
  B.touch(bid)
  return 0
end
local finished = 0
for _, member in ipairs(redis.call('SMEMBERS', done)) do
  if string.sub(member, 1, 8) == 'success:' then finished = finished + 1 end
end
B.touch(bid)
if finished < B.count_callbacks(bid, 'success') then return 0 end
local parent = B.parent_of(bid)
if not parent or redis.call('SREM', bkey(parent, '-pkids'), bid) == 0 then return 0 end
B.try_fire(parent, 1)
return 1
