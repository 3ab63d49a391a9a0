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
--   subs     hash: nested workflow -> its policy, then its leaves (space separated)
--   left     hash: nested workflow -> its job steps not finished; '<name>#bad' -> those of
--            them that died or were stopped
-- A nested workflow's steps are named by their path, 'outer/inner' ('/' is no name's own);
-- its own state is in 'state' too (waiting, running, succeeded, failed, stopped, cancelled)
-- and its value, once it succeeded, in 'values': an object of its leaves' values.
-- Payloads are never decoded: a dependant's arguments are the template's text with the
-- values' text put in the cut places, byte for byte.
--
-- Everything read back is untrusted (a hand, another version): a key of another Redis type
-- (or one of its batch's that a step's registration uses: `batch_broken`) stops the script
-- before it writes anything (W.problems, for the caller to name); a count
-- that HINCRBY could not go on from, or a template that is none, is left as it is and
-- named in W.problems, and what depended on it waits (so does a step whose queue holds
-- another Redis type; a batch count that is none is batch_lib's `add`'s to rebuild, named in
-- C.problems: a reply carries both) — never a script error half-way,
-- which left the step counted with nothing after it done.

local W = {problems = {}}
local PARTS = {'', 'steps', 'then', 'state', 'waiting', 'jids', 'values', 'kids', 'subs',
               'left'}
local stop, settle  -- each calls the other (through a nested workflow's end)

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

local function problem(text)
  if #W.problems < 20 then W.problems[#W.problems + 1] = text end
end

-- (``shown``, a stored value quoted for a problem: batch_lib.lua, which comes first.)

-- HINCRBY, when the field holds a count it can go on from (absent is 0); else nil, the
-- field left as it is and named in W.problems.
local function incr(key, field, by)
  local raw = redis.call('HGET', key, field)
  if raw and raw ~= '0' and (#raw > 19 or not string.find(raw, '^%-?[1-9]%d*$')
                            or #string.match(raw, '%d+') > 18) then
    problem(key .. ' field ' .. shown(field) .. ' holds no count: ' .. shown(raw))
    return nil
  end
  return redis.call('HINCRBY', key, field, by)
end

-- The workflow's keys that hold another Redis type than the hashes wurk writes: named in
-- W.problems; the caller writes nothing.
local function broken(wid)
  for _, part in ipairs(PARTS) do
    local kind = redis.call('TYPE', wkey(wid, part))['ok']
    if kind ~= 'hash' and kind ~= 'none' then
      problem(wkey(wid, part) .. ' holds a ' .. kind .. ', not a hash')
    end
  end
  return #W.problems > 0
end

-- The workflow's batch (bid = wid), which `enqueue` registers each pushed step with: its
-- hash and the sets the registration writes or reads (a pending that is no count is rebuilt
-- from -jids and -died) when one holds another Redis type, named in W.problems; the caller
-- writes nothing. The batch's other keys are its own scripts' to check.
local function batch_broken(wid)
  local bad = false
  for _, pair in ipairs({{'', 'hash'}, {'-jids', 'set'}, {'-died', 'set'}}) do
    local kind = redis.call('TYPE', bkey(wid, pair[1]))['ok']
    if kind ~= pair[2] and kind ~= 'none' then
      problem(bkey(wid, pair[1]) .. ' holds a ' .. kind .. ', not a ' .. pair[2])
      bad = true
    end
  end
  return bad
end

-- The workflow will not succeed (a step died, or it was cancelled): nor may its batch,
-- whatever its jobs do from now on — a dead step retried from the dead set that succeeds
-- counts in the batch, never in the workflow; a cancel takes the queued steps out of the
-- batch, which then has nothing pending. The batch's `try_fire` reads the mark.
local function no_success(wid)
  if redis.call('TYPE', bkey(wid))['ok'] == 'hash' then
    redis.call('HSET', bkey(wid), 'nosuccess', '1')
  end
end

-- A queue a step cannot be pushed to (the queues set or its list holds another Redis
-- type): named in W.problems, with what is not done for it.
local function unusable(queue, what)
  for _, pair in ipairs({{C.prefix .. 'queues', 'set'}, {C.prefix .. 'queue:' .. queue, 'list'}}) do
    local kind = redis.call('TYPE', pair[1])['ok']
    if kind ~= pair[2] and kind ~= 'none' then
      problem(pair[1] .. ' holds a ' .. kind .. ', not a ' .. pair[2] .. '; ' .. what)
      return true
    end
  end
  return false
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

-- The nested workflow a step is in ('' at the top): 'a/b/c[3]' is in 'a/b'.
local function within(name)
  return string.match(name, '^(.*)/[^/]*$') or ''
end

-- The policy that applies when a step (or nested workflow) died: that of the workflow
-- it is in.
local function policy_of(wid, name)
  local sub = within(name)
  if sub == '' then return W.policy end
  return string.match(redis.call('HGET', wkey(wid, 'subs'), sub) or '', '^(%S+)') or W.policy
end

-- Push a job of the workflow and register it with the workflow's batch (its keys and the
-- queue checked by the caller): a count that is none is rebuilt from the batch's sets, or
-- left as it is (batch_lib.lua's `add`, which names it in C.problems).
local function enqueue(wid, queue, jid, payload)
  redis.call('SADD', C.prefix .. 'queues', queue)
  redis.call('LPUSH', C.prefix .. 'queue:' .. queue, payload)
  if redis.call('SADD', bkey(wid, '-jids'), jid) == 1 then
    add(wid, 'total', 1)
    add(wid, 'pending', 1)
  end
end

-- Every problem found, the workflow's and its batch's, after `head` (a script's reply).
local function with_problems(head)
  for _, list in ipairs({W.problems, C.problems}) do
    for _, text in ipairs(list) do head[#head + 1] = text end
  end
  return head
end

-- A step whose dependencies are met: its payload made from its template, then pushed.
local function push(wid, step)
  local template = redis.call('HGET', wkey(wid, 'steps'), step)
  local parts = template and cut(template) or {}
  if #parts < 3 or #parts % 2 == 0 or parts[1] == '' or parts[2] == ''
      or string.sub(parts[#parts], -1) ~= '}' then
    problem(wkey(wid, 'steps') .. ' field ' .. shown(step) .. ' holds no step template: '
            .. shown(template) .. '; the step is not pushed')
    return
  end
  if unusable(parts[1], 'step ' .. shown(step) .. ' is not pushed') then return end
  local out, refs = {}, {}
  for i = 3, #parts do
    if i % 2 == 1 then
      out[#out + 1] = parts[i]
    else
      out[#out + 1] = fill(wid, parts[i])
      refs[#refs + 1] = parts[i]
    end
  end
  local payload = table.concat(out)
  payload = string.sub(payload, 1, -2) .. ',"enqueued_at":' .. lib().stamp() .. '}'
  -- The values' text goes in byte for byte: one that is no JSON made a payload no worker
  -- could read (it went raw to the dead set, and the step was never counted).
  local ok, decoded = pcall(cjson.decode, payload)
  if not ok then
    problem(wkey(wid, 'values') .. ' holds what makes no JSON of step ' .. shown(step)
            .. '\'s arguments (the values of ' .. shown(table.concat(refs, ' ')) .. ', or '
            .. 'its template); the step is not pushed')
    return
  end
  -- A step's `expires_in` counts from this push, as any job's from its push: the template
  -- was made when the workflow started, which may be hours before the step comes due.
  local expires_in = type(decoded) == 'table' and decoded.expires_in
  if type(expires_in) == 'number' and decoded.expires_at == nil then
    payload = string.sub(payload, 1, -2) .. ',"expires_at":' .. lib().stamp_in(expires_in) .. '}'
  end
  enqueue(wid, parts[1], parts[2], payload)
  redis.call('HSET', wkey(wid, 'state'), step, 'queued')
  local sub = within(step)
  while sub ~= '' and redis.call('HGET', wkey(wid, 'state'), sub) == 'waiting' do
    redis.call('HSET', wkey(wid, 'state'), sub, 'running')
    sub = within(sub)
  end
end

-- A node finished (a step, or 'X[*]': all of X's children): its dependants each have one
-- dependency fewer, and those with none left are pushed.
local function satisfy(wid, node)
  if W.cancelled then return end
  for _, dependant in ipairs(words(redis.call('HGET', wkey(wid, 'then'), node))) do
    local left = incr(wkey(wid, 'waiting'), dependant, -1)
    if left and left <= 0 and redis.call('HGET', wkey(wid, 'state'), dependant) == 'waiting' then
      push(wid, dependant)
    end
  end
end

-- Every step after a node that died (policy 'stop') will not run.
stop = function(wid, node)
  for _, dependant in ipairs(words(redis.call('HGET', wkey(wid, 'then'), node))) do
    if redis.call('HGET', wkey(wid, 'state'), dependant) == 'waiting' then
      redis.call('HSET', wkey(wid, 'state'), dependant, 'stopped')
      incr(wkey(wid), 'pending', -1)
      settle(wid, dependant, true)
      stop(wid, dependant)
      stop(wid, dependant .. '[*]')
    end
  end
end

-- Children added to a step count in every nested workflow it is in.
local function grow(wid, step, count)
  local sub = within(step)
  while sub ~= '' do
    incr(wkey(wid, 'left'), sub, count)
    sub = within(sub)
  end
end

-- A nested workflow whose every step finished: it succeeded (its value: an object of its
-- leaves' values, by their names in it) or failed — or was stopped, when none of its steps
-- was pushed — and the policy of the workflow it is in applies, as to a step that died.
local function end_sub(wid, sub)
  local states = wkey(wid, 'state')
  local before = redis.call('HGET', states, sub)
  if before ~= 'waiting' and before ~= 'running' then return end
  local bad = tonumber(redis.call('HGET', wkey(wid, 'left'), sub .. '#bad') or '0') or 0
  if bad == 0 then
    redis.call('HSET', states, sub, 'succeeded')
    local info, parts = words(redis.call('HGET', wkey(wid, 'subs'), sub)), {}
    for i = 2, #info do
      local value = redis.call('HGET', wkey(wid, 'values'), info[i]) or 'null'
      parts[#parts + 1] = cjson.encode(string.sub(info[i], #sub + 2)) .. ':' .. value
    end
    redis.call('HSET', wkey(wid, 'values'), sub, '{' .. table.concat(parts, ',') .. '}')
    keep(wkey(wid, 'values'))
    satisfy(wid, sub)
    return
  end
  redis.call('HSET', states, sub, before == 'waiting' and 'stopped' or 'failed')
  if policy_of(wid, sub) == 'continue' then satisfy(wid, sub) else stop(wid, sub) end
end

-- A job step reached its end (succeeded, dead or stopped): one fewer left in every nested
-- workflow it is in, innermost first; one that has none left ends.
settle = function(wid, step, bad)
  local sub = within(step)
  while sub ~= '' do
    if bad then incr(wkey(wid, 'left'), sub .. '#bad', 1) end
    if incr(wkey(wid, 'left'), sub, -1) == 0 then end_sub(wid, sub) end
    sub = within(sub)
  end
end

-- The workflow ends when no step is waiting or queued: failed if one died.
local function finish_if_done(wid)
  -- A pending that is no count was named when it was counted; tonumber alone took 'nan',
  -- '0x0' or '-inf' for done, and the workflow succeeded with its steps still to run.
  local raw = redis.call('HGET', wkey(wid), 'pending')
  if not is_count(raw) or tonumber(raw) > 0 then return end
  local dead = tonumber(redis.call('HGET', wkey(wid), 'dead') or '0') or 0
  redis.call('HSET', wkey(wid), 'state', dead > 0 and 'failed' or 'succeeded',
             'finished_at', lib().stamp())
end

local function wf_init(wid)
  local meta = redis.call('HMGET', wkey(wid), 'state', 'policy', 'ttl')
  -- A ttl that is no whole number of seconds ≥ 1 (EXPIRE would fail on it, or delete the
  -- key at once) is the default.
  local ttl = tonumber(meta[3])
  -- the default is wurk.workflow.DEFAULT_TTL's three days
  if ttl == nil or ttl < 1 or ttl > 2^31 or ttl ~= math.floor(ttl) then ttl = 259200 end
  W.state, W.policy, W.ttl = meta[1], meta[2], string.format('%d', ttl)
  W.cancelled = W.state == 'cancelled'
  return W.state
end
