-- Start a workflow: write its graph and push the steps that wait for nothing
-- (workflow_lib.lua). The batch of the same id exists already, its first block open.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back (batch_lib.lua's init)
-- ARGV[5..9]  wid, name, policy, ttl, index key (the workflows zset)
-- ARGV[10..]  three per step: name, template, how many dependencies it waits for; then
--             '--', then pairs for the 'then' hash: node, its dependants (space separated);
--             then '--', then four per nested workflow: name, policy, its leaves (space
--             separated), how many job steps it holds
-- Returns the number of steps pushed; an error when the workflow id is taken, or when its
-- batch's keys, the index or the queue of a step it would push now hold another Redis type
-- (nothing written).
local PRUNE = 10  -- entries of gone workflows taken out of the index a start, at most
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local wid, name, policy, ttl, index = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9]
if redis.call('EXISTS', wkey(wid)) == 1 then
  return redis.error_reply('WORKFLOWEXISTS workflow ' .. wid .. ' exists already')
end
-- Checked before any write: the batch's keys, the index, and the queue of each step pushed
-- now (an index of another type failed the ZADD last, the workflow written and running).
local bad = batch_broken(wid)
local kind = redis.call('TYPE', index)['ok']
if kind ~= 'zset' and kind ~= 'none' then
  problem(index .. ' holds a ' .. kind .. ', not a zset')
  bad = true
end
for k = 10, #ARGV, 3 do
  if ARGV[k] == '--' then break end
  if tonumber(ARGV[k + 2]) == 0 and unusable(cut(ARGV[k + 1])[1], 'step ' .. shown(ARGV[k])
                                             .. ' cannot be pushed') then
    bad = true
  end
end
if bad then
  return redis.error_reply('WORKFLOWBROKEN workflow ' .. wid .. ' cannot start: '
                           .. table.concat(W.problems, '; ') .. ' (written by something else)')
end
local steps = 0
local i = 10
local roots = {}
while ARGV[i] ~= '--' do
  local step, template, deps = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local jid = cut(template)[2]
  redis.call('HSET', wkey(wid, 'steps'), step, template)
  redis.call('HSET', wkey(wid, 'state'), step, 'waiting')
  redis.call('HSET', wkey(wid, 'jids'), step, jid)
  redis.call('HSET', wkey(wid, 'waiting'), step, deps)
  if deps == 0 then roots[#roots + 1] = step end
  steps = steps + 1
  i = i + 3
end
local j = i + 1
while ARGV[j] ~= '--' do
  redis.call('HSET', wkey(wid, 'then'), ARGV[j], ARGV[j + 1])
  j = j + 2
end
for k = j + 1, #ARGV, 4 do  -- nested workflows: name, policy, leaves, job steps
  redis.call('HSET', wkey(wid, 'subs'), ARGV[k], ARGV[k + 1] .. ' ' .. ARGV[k + 2])
  redis.call('HSET', wkey(wid, 'left'), ARGV[k], ARGV[k + 3])
  redis.call('HSET', wkey(wid, 'state'), ARGV[k], 'waiting')
end
redis.call('HSET', wkey(wid), 'state', 'running', 'policy', policy, 'pending', steps,
           'total', steps, 'dead', 0, 'ttl', ttl, 'name', name, 'created_at', lib().stamp())
W.ttl = ttl
for _, step in ipairs(roots) do push(wid, step) end
for _, part in ipairs({'', 'steps', 'then', 'state', 'waiting', 'jids', 'subs', 'left'}) do
  local key = wkey(wid, part)
  if redis.call('EXISTS', key) == 1 then redis.call('EXPIRE', key, ttl) end
end
redis.call('ZADD', index, C.sec, wid)
-- The index has no expiry of its own, and its entries outlive their workflows' keys: the
-- entries of workflows gone (expired, deleted) leave it from its oldest end, PRUNE a start
-- at most — more than the one each start adds. Under one ttl the oldest expire first;
-- an older workflow with a longer ttl only holds back what started after it, while it lives.
for _, old in ipairs(redis.call('ZRANGE', index, 0, PRUNE - 1)) do
  if old ~= wid and redis.call('EXISTS', wkey(old)) == 0 then
    redis.call('ZREM', index, old)
  end
end
refresh(wid, '-jids')
return #roots
