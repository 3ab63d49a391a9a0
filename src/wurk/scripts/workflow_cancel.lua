-- Cancel a workflow (workflow_lib.lua): no step is pushed any more; every step waiting or
-- queued is cancelled, and the queued ones still in their queue are taken out of it.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back (batch_lib.lua's init)
-- ARGV[5]     wid
-- ARGV[6]     queue entries read at most, in all (chunks of 100, each queue from its oldest
--             end; the read stops once every queued step was found): a cancel never reads
--             a queue of a million jobs in one go. A queued step not found within it is one
--             of the others.
-- Returns {state before, jids removed from their queue..., '--', other jids cancelled...,
-- '--', batch_lib.lua's reply of their removal from the workflow's batch}: the others run,
-- retry or wait in a schedule (or sit past what was read) — the caller cancels them one by
-- one. The jids taken out of their queue leave the batch in this same call: they will never
-- run, and a cancel cut short after it took them out must not leave the batch waiting for
-- them for ever. A batch whose keys hold another Redis type is left as it is (named).
-- So is a queue key (or the queues set) of another type: passed over, named in the batch's
-- problems; its steps are among the others (a failing LRANGE there, after the state was set
-- and earlier queues' steps were taken out, left those steps pending in the batch for ever).
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local wid = ARGV[5]
local budget = tonumber(ARGV[6]) or 10000
if broken(wid) then  -- nothing written: a cancel half-way would leave it neither
  return redis.error_reply('WORKFLOWBROKEN workflow ' .. wid .. ' cannot be cancelled: '
                           .. table.concat(W.problems, '; ') .. ' (written by something else)')
end
local before = wf_init(wid)
if not before then return {''} end
if before ~= 'running' then return {before, '--'} end
redis.call('HSET', wkey(wid), 'state', 'cancelled', 'finished_at', lib().stamp())
no_success(wid)  -- before the steps leave the batch: it completes, never succeeds
local queued, queues, unfound = {}, {}, 0
-- Whether `key` holds `kind` (or nothing); else it is named, once, and passed over.
local function holds(key, kind)
  local found = redis.call('TYPE', key)['ok']
  if found == kind or found == 'none' then return true end
  if #C.problems < 20 then
    C.problems[#C.problems + 1] = (key .. ' holds a ' .. found .. ', not a ' .. kind
                .. ' (written by something else); the cancelled steps are not looked for there')
  end
  return false
end
local flat = redis.call('HGETALL', wkey(wid, 'state'))
for i = 1, #flat, 2 do
  local step, state = flat[i], flat[i + 1]
  if state == 'waiting' or state == 'queued' or state == 'running' then  -- running: nested
    redis.call('HSET', wkey(wid, 'state'), step, 'cancelled')
  end
  if state == 'queued' then
    local jid = redis.call('HGET', wkey(wid, 'jids'), step)
    if jid and not queued[jid] then queued[jid] = true; unfound = unfound + 1 end
    local template = redis.call('HGET', wkey(wid, 'steps'), step)
    if template then queues[cut(template)[1]] = true end
  end
end
-- Children have no template: their queue is found from the parent's jobs in the queues.
if holds(C.prefix .. 'queues', 'set') then
  for _, queue in ipairs(redis.call('SMEMBERS', C.prefix .. 'queues')) do queues[queue] = true end
end
local removed, mark = {}, '"wf":"' .. wid .. '"'
local CHUNK = 100
for queue in pairs(queues) do
  local key = C.prefix .. 'queue:' .. queue
  local at = -1  -- from the oldest end (jobs are fetched from there): back towards the newest
  local readable = unfound > 0 and budget > 0 and holds(key, 'list')
  while readable and unfound > 0 and budget > 0 do
    local want = math.min(CHUNK, budget)
    local rows = redis.call('LRANGE', key, at - want + 1, at)
    budget = budget - #rows
    local kept = 0  -- entries of this chunk left in place (a removed one shifts the rest)
    for i = #rows, 1, -1 do
      local payload, gone = rows[i], false
      if string.find(payload, mark, 1, true) then
        local ok, job = pcall(cjson.decode, payload)  -- read for its jid, never re-encoded
        local jid = ok and type(job) == 'table' and job.jid
        if jid and queued[jid] then
          redis.call('LREM', key, -1, payload)  -- this one: the first from the oldest end
          removed[#removed + 1] = jid
          queued[jid] = nil
          unfound = unfound - 1
          gone = true
        end
      end
      if not gone then kept = kept + 1 end
    end
    if #rows < want then break end  -- the whole list was read
    at = at - kept
  end
end
local counted = 0
if #removed > 0 and redis.call('EXISTS', bkey(wid)) == 1 then
  local usable = true
  for _, suffix in ipairs({'-jids', '-failed', '-died'}) do
    local kind = redis.call('TYPE', bkey(wid, suffix))['ok']
    if kind ~= 'set' and kind ~= 'none' then
      C.problems[#C.problems + 1] = (bkey(wid, suffix) .. ' holds a ' .. kind .. ', not a set (written by '
                  .. 'something else); the cancelled steps are not removed from it')
      usable = false
    end
  end
  if usable and redis.call('TYPE', bkey(wid))['ok'] == 'hash' then
    counted = remove_jids(wid, removed)
  end
end
local out = {before}
for _, jid in ipairs(removed) do out[#out + 1] = jid end
out[#out + 1] = '--'
for jid in pairs(queued) do out[#out + 1] = jid end
out[#out + 1] = '--'
for _, part in ipairs(reply(counted)) do out[#out + 1] = part end
return out
