-- Workflows (wurk.workflow): the shared part of every workflow script. It follows
-- batch_lib.lua, which goes before it: a workflow is also a batch (bid = workflow id), and
-- the steps this pushes are registered with that batch here, as batch_push.lua would.
--
-- A workflow's keys, <prefix>wurk:workflow:<wid>[:<part>] (wurk.keys.Keys.workflow):
--   ''       hash: state (running, succeeded, failed, cancelled), policy (stop, continue),
--            pending (steps not finished), total, dead, ttl, created_at, finished_at, name
--   steps    hash: step -> its template: queue \0 jid \0 text \0 ref \0 text ... \0 text
--            (the payload's JSON cut where a result goes; refs are 'X' or 'X[*]')
--   then     hash: node -> its dependants, space separated ('X[*]' is X's children, as one)
--   state    hash: step -> waiting, queued, succeeded, dead, stopped, cancelled
--   waiting  hash: node -> dependencies not yet met ('X[*]': X's children not finished)
--   jids     hash: step -> jid
--   values   hash: step -> its return value, JSON text exactly as the worker wrote it
--   kids     hash: step -> its children (added at run time), space separated, in order
-- Payloads are never decoded: a dependant's arguments are the template's text with the
-- values' text put in the cut places, byte for byte.

local W = {}

local function wkey(wid, part)
  if part and part ~= '' then return C.prefix .. 'wurk:workflow:' .. wid .. ':' .. part end
  return C.prefix .. 'wurk:workflow:' .. wid
end

local function words(text)
  local out = {}
  if not text then return out end
  for word in string.gmatch(text, '%S+') do out[#out + 1] = word end
  return out
end

local function cut(text)
  local out, start = {}, 1
  while true do
    local at = string.find(text, '\0', start, true)
    if not at then
      out[#out + 1] = string.sub(text, start)
      return out
    end
    out[#out + 1] = string.sub(text, start, at - 1)
    start = at + 1
  end
end

-- Written keys live as long as the workflow: a key created by this write gets its TTL.
local function keep(key)
  if redis.call('TTL', key) == -1 then redis.call('EXPIRE', key, W.ttl) end
end

local function values_of(wid, names)
  local out = {}
  for start = 1, #names, 1000 do
    local page = {}
    for i = start, math.min(start + 999, #names) do page[#page + 1] = names[i] end
    local found = redis.call('HMGET', wkey(wid, 'values'), unpack(page))
    for _, value in ipairs(found) do out[#out + 1] = value or 'null' end
  end
  return out
end

local function fill(wid, ref)
  local parent = string.match(ref, '^(.*)%[%*%]$')
  if not parent then return redis.call('HGET', wkey(wid, 'values'), ref) or 'null' end
  local kids = words(redis.call('HGET', wkey(wid, 'kids'), parent))
  return '[' .. table.concat(values_of(wid, kids), ',') .. ']'
end

-- Push a job of the workflow and register it with the workflow's batch.
local function enqueue(wid, queue, jid, payload)
  redis.call('SADD', C.prefix .. 'queues', queue)
  redis.call('LPUSH', C.prefix .. 'queue:' .. queue, payload)
  if redis.call('SADD', bkey(wid, '-jids'), jid) == 1 then
    redis.call('HINCRBY', bkey(wid), 'total', 1)
    redis.call('HINCRBY', bkey(wid), 'pending', 1)
  end
end

-- A step whose dependencies are met: its payload made from its template, then pushed.
local function push(wid, step)
  local parts = cut(redis.call('HGET', wkey(wid, 'steps'), step))
  local out = {}
  for i = 3, #parts do
    if i % 2 == 1 then out[#out + 1] = parts[i] else out[#out + 1] = fill(wid, parts[i]) end
  end
  local payload = table.concat(out)
  payload = string.sub(payload, 1, -2) .. ',"enqueued_at":' .. lib().stamp() .. '}'
  enqueue(wid, parts[1], parts[2], payload)
  redis.call('HSET', wkey(wid, 'state'), step, 'queued')
end

-- A node finished (a step, or 'X[*]': all of X's children): its dependants each have one
-- dependency fewer, and those with none left are pushed.
local function satisfy(wid, node)
  if W.cancelled then return end
  for _, dependant in ipairs(words(redis.call('HGET', wkey(wid, 'then'), node))) do
    local left = redis.call('HINCRBY', wkey(wid, 'waiting'), dependant, -1)
    if left <= 0 and redis.call('HGET', wkey(wid, 'state'), dependant) == 'waiting' then
      push(wid, dependant)
    end
  end
end

-- Every step after a node that died (policy 'stop') will not run.
local function stop(wid, node)
  for _, dependant in ipairs(words(redis.call('HGET', wkey(wid, 'then'), node))) do
    if redis.call('HGET', wkey(wid, 'state'), dependant) == 'waiting' then
      redis.call('HSET', wkey(wid, 'state'), dependant, 'stopped')
      redis.call('HINCRBY', wkey(wid), 'pending', -1)
      stop(wid, dependant)
      stop(wid, dependant .. '[*]')
    end
  end
end

-- The workflow ends when no step is waiting or queued: failed if one died.
local function finish_if_done(wid)
  if tonumber(redis.call('HGET', wkey(wid), 'pending')) > 0 then return end
  local dead = tonumber(redis.call('HGET', wkey(wid), 'dead') or '0')
  redis.call('HSET', wkey(wid), 'state', dead > 0 and 'failed' or 'succeeded',
             'finished_at', lib().stamp())
end

local function wf_init(wid)
  local meta = redis.call('HMGET', wkey(wid), 'state', 'policy', 'ttl')
  W.state, W.policy, W.ttl = meta[1], meta[2], tonumber(meta[3]) or 86400
  W.cancelled = W.state == 'cancelled'
  return W.state
end
