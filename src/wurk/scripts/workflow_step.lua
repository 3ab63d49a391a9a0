-- One step of a workflow ended: it succeeded (with its value and the children it added)
-- or it died (workflow_lib.lua). Counted once per step: a step that is no longer queued —
-- counted already, stopped, cancelled — changes nothing, whatever is replayed.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back (batch_lib.lua's init)
-- ARGV[5..8]  wid, step, outcome ('success' or 'death'), the value's JSON ('' on a death)
-- ARGV[9..]   four per child added: name, queue, jid, payload
-- Returns {1 when the step was counted, 0 when it was already (or the workflow is gone, or
-- one of its keys or its batch's holds another Redis type, or a child's queue does: nothing
-- written), what was found that wurk never writes (W.problems, then the batch's
-- C.problems)...}.
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local wid, step, outcome, value = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
if broken(wid) or batch_broken(wid) then return {0, unpack(W.problems)} end
if not wf_init(wid) then return {0} end
local states = wkey(wid, 'state')
if redis.call('HGET', states, step) ~= 'queued' then return {0} end
local parent = string.match(step, '^(.*)%[%d+%]$')
if outcome == 'success' and not W.cancelled then  -- the children's queues, before any write
  for i = 9, #ARGV, 4 do
    if unusable(ARGV[i + 1], 'its child ' .. shown(ARGV[i]) .. ' cannot be pushed') then
      return {0, unpack(W.problems)}
    end
  end
end
if outcome == 'success' then
  redis.call('HSET', states, step, 'succeeded')
  redis.call('HSET', wkey(wid, 'values'), step, value)
  keep(wkey(wid, 'values'))
  local kids = {}
  if not W.cancelled then
    for i = 9, #ARGV, 4 do
      local kid, queue, jid, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
      kids[#kids + 1] = kid
      redis.call('HSET', states, kid, 'queued')
      redis.call('HSET', wkey(wid, 'jids'), kid, jid)
      enqueue(wid, queue, jid, payload)
    end
  end
  if #kids > 0 then
    redis.call('HSET', wkey(wid, 'kids'), step, table.concat(kids, ' '))
    keep(wkey(wid, 'kids'))
    redis.call('HSET', wkey(wid, 'waiting'), step .. '[*]', #kids)
    incr(wkey(wid), 'pending', #kids)
    incr(wkey(wid), 'total', #kids)
    grow(wid, step, #kids)
  end
  satisfy(wid, step)
  if #kids == 0 then satisfy(wid, step .. '[*]') end
else
  redis.call('HSET', states, step, W.cancelled and 'cancelled' or 'dead')
  if not W.cancelled then
    incr(wkey(wid), 'dead', 1)
    no_success(wid)  -- before the batch counts the death: it may never succeed now
  end
  if policy_of(wid, step) == 'continue' then
    satisfy(wid, step)
    satisfy(wid, step .. '[*]')
  else
    stop(wid, step)
    stop(wid, step .. '[*]')
    if parent then stop(wid, parent .. '[*]') end
  end
end
if parent and incr(wkey(wid, 'waiting'), parent .. '[*]', -1) == 0 then
  satisfy(wid, parent .. '[*]')
end
if not W.cancelled then
  incr(wkey(wid), 'pending', -1)
  settle(wid, step, outcome ~= 'success')
  finish_if_done(wid)
end
refresh(wid, '-jids')
return with_problems({1})
