-- Cancel a workflow (workflow_lib.lua): no step is pushed any more; every step waiting or
-- queued is cancelled, and the queued ones still in their queue are taken out of it.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back (batch_lib.lua's init)
-- ARGV[5]     wid
-- Returns {state before, jids removed from their queue..., '--', other jids cancelled...}:
-- the others run, retry or wait in a schedule — the caller cancels them one by one.
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local wid = ARGV[5]
if broken(wid) then  -- nothing written: a cancel half-way would leave it neither
  return redis.error_reply('WORKFLOWBROKEN workflow ' .. wid .. ' cannot be cancelled: '
                           .. table.concat(W.problems, '; ') .. ' (written by something else)')
end
local before = wf_init(wid)
if not before then return {''} end
if before ~= 'running' then return {before, '--'} end
redis.call('HSET', wkey(wid), 'state', 'cancelled', 'finished_at', lib().stamp())
local queued, queues = {}, {}
local flat = redis.call('HGETALL', wkey(wid, 'state'))
for i = 1, #flat, 2 do
  local step, state = flat[i], flat[i + 1]
  if state == 'waiting' or state == 'queued' or state == 'running' then  -- running: nested
    redis.call('HSET', wkey(wid, 'state'), step, 'cancelled')
  end
  if state == 'queued' then
    local jid = redis.call('HGET', wkey(wid, 'jids'), step)
    if jid then queued[jid] = true end
    local template = redis.call('HGET', wkey(wid, 'steps'), step)
    if template then queues[cut(template)[1]] = true end
  end
end
-- Children have no template: their queue is found from the parent's jobs in the queues.
for _, queue in ipairs(redis.call('SMEMBERS', C.prefix .. 'queues')) do queues[queue] = true end
local removed, mark = {}, '"wf":"' .. wid .. '"'
for queue in pairs(queues) do
  local key = C.prefix .. 'queue:' .. queue
  for _, payload in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if string.find(payload, mark, 1, true) then
      local ok, job = pcall(cjson.decode, payload)  -- read for its jid, never re-encoded
      local jid = ok and type(job) == 'table' and job.jid
      if jid and queued[jid] then
        redis.call('LREM', key, 1, payload)
        removed[#removed + 1] = jid
        queued[jid] = nil
      end
    end
  end
end
local reply = {before}
for _, jid in ipairs(removed) do reply[#reply + 1] = jid end
reply[#reply + 1] = '--'
for jid in pairs(queued) do reply[#reply + 1] = jid end
return reply
