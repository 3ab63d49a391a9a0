-- One job of a batch finished an attempt (batch_lib.lua): count it, once per jid, and fire
-- what is due.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back
-- ARGV[5]     bid    ARGV[6]  jid
-- ARGV[7]     'success', 'failure' (a retry is booked) or 'death'
--
-- A jid counts towards success once: the SREM from -jids (or from -died, for a dead job
-- retried from the dead set) decides. A failure marks it failed while it is pending; a
-- death moves it from -jids to -died. Anything else — a second ACK, a late failure of a job
-- that already succeeded, a batch that expired — changes nothing. A batch one of whose keys
-- holds another Redis type changes nothing either: the attempt is not counted, and the
-- problem says so (batch_lib.lua's `broken`).
-- Returns reply(1) when the attempt changed the batch, else reply(0) (batch_lib.lua).
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local bid, jid, outcome = ARGV[5], ARGV[6], ARGV[7]
local h = bkey(bid)
if outcome ~= 'success' and outcome ~= 'failure' and outcome ~= 'death' then
  return redis.error_reply('unknown batch outcome ' .. outcome)
end
if redis.call('EXISTS', h) == 0 then return reply(0) end
if broken(bid, 'this ' .. outcome .. ' of job ' .. jid .. ' is not counted, and the batch '
          .. 'fires none of its callbacks') then
  return reply(0)
end
local died = C.prefix .. 'batch-died'
if outcome == 'success' then
  local counted = redis.call('SREM', bkey(bid, '-jids'), jid) == 1
  if not counted and redis.call('SREM', bkey(bid, '-died'), jid) == 1 then
    counted = true
    if redis.call('SCARD', bkey(bid, '-died')) == 0 then
      own_set(died)
      redis.call('SREM', died, bid)
    end
  end
  if not counted then return reply(0) end
  add(bid, 'pending', -1)
  if redis.call('SREM', bkey(bid, '-failed'), jid) == 1 then add(bid, 'failures', -1) end
elseif outcome == 'failure' then
  if redis.call('SISMEMBER', bkey(bid, '-jids'), jid) == 0 then return reply(0) end
  if redis.call('SADD', bkey(bid, '-failed'), jid) == 0 then return reply(0) end
  add(bid, 'failures', 1)
else
  own_set(died)
  if redis.call('SREM', bkey(bid, '-jids'), jid) == 0 then return reply(0) end
  redis.call('SADD', bkey(bid, '-died'), jid)
  if redis.call('SADD', bkey(bid, '-failed'), jid) == 1 then add(bid, 'failures', 1) end
  redis.call('SADD', died, bid)
  lib().fire_death(bid)
end
refresh(bid, '-failed', '-died')
-- Only a batch whose pending jobs have all failed (or none is left) can be due to fire; a
-- count that is none is rebuilt there.
local v = redis.call('HMGET', h, 'pending', 'failures')
if not (is_count(v[1]) and is_count(v[2] or '0')) or tonumber(v[1]) <= tonumber(v[2] or '0')
    then
  lib().try_fire(bid)
end
return reply(1)
