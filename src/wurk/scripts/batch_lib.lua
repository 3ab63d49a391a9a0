-- Shared functions of the batch scripts (the prelude of every batch_*.lua).
--
-- A batch's state (the b-<bid> family) only ever changes inside one of these scripts, so a
-- count moves at most once per jid: the result of an SREM/SADD decides, never a counter
-- alone. Every script starts with `init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])`:
--   ARGV[1]  the key prefix ('' or 'ns:')
--   ARGV[2]  timestamp format of the *_at fields and callback payloads: 'ms' or 'float'
--   ARGV[3]  seconds a batch with a dead job is kept (the dead set's timeout)
--   ARGV[4]  '1' to hand jobs back instead of pushing them (a testing mode's sink writes
--            them); '' in production. Scripts that may fire return `reply(result)`:
--            {result, how many jobs are handed back, the payload of each...,
--             then four per event this call fired: bid, event, created_at, the event's time}
--            (the caller announces the events: StatsD's batch metrics).
-- Times come from Redis's clock (TIME): every process agrees on them.
--
-- Everything read back is untrusted (a hand, another version, an attacker): a script checks
-- the batch's keys with `broken` before it writes anything, and a key of another Redis type
-- stops it there — a script error half-way (Redis does not roll back) counted a job and did
-- nothing after it, so the job failed, ran again, and its batch never fired. A count that
-- HINCRBY cannot go on from is rebuilt from the sets (`add`, `count`). Each is named in
-- C.problems, which `reply` returns for the caller to warn about:
--            {result, how many jobs are handed back, the payload of each...,
--             how many problems, each problem..., then the events as above}
--
-- Only `init`, `bkey`, `present` and `refresh` are made on every call: the rest — firing
-- callbacks, nesting, expiry — is built by `lib()` when a script needs it. Making two dozen
-- closures costs a job's count more than its commands do, and most counts fire nothing.

local PENDING_TTL = 30 * 24 * 3600   -- a batch that has not succeeded lives 30 days
local DEFAULT_LINGER = 24 * 3600     -- after success, unless the batch says otherwise
local MIN_LINGER = 30
local MAX_LINGER = 10 * 365 * 24 * 3600  -- ten years: EXPIRE takes it, and Lua writes it whole
local MAX_DEPTH = 64                 -- nesting deeper than this is treated as corrupt data
local CALLBACK_CLASS = 'wurk.batch.Callback'
local SUFFIXES = {'', '-jids', '-failed', '-died', '-kids', '-pkids', '-notify', '-cbsucc',
                  '-tags'}
-- The keys the scripts read and write as they count (-tags and -cbsucc are only read by
-- batch_open and batch_callback_done; EXPIRE takes a key of any type).
local STATE = {'', '-jids', '-failed', '-died', '-kids', '-pkids', '-notify'}
local MAX_PROBLEMS = 20

local C = {}

local function init(prefix, fmt, dead_ttl, hand_back)
  C.prefix = prefix
  C.fmt = fmt
  C.dead_ttl = tonumber(dead_ttl) or PENDING_TTL
  C.hand_back = hand_back == '1'
  C.handed = {}
  C.fired = {}
  C.problems = {}
  C.broken = {}
end

local function reply(result)
  local out = {result, #C.handed}
  for _, payload in ipairs(C.handed) do out[#out + 1] = payload end
  out[#out + 1] = #C.problems
  for _, text in ipairs(C.problems) do out[#out + 1] = text end
  for _, event in ipairs(C.fired) do
    for _, part in ipairs(event) do out[#out + 1] = part end
  end
  return out
end

local function bkey(bid, suffix)
  return C.prefix .. 'b-' .. bid .. (suffix or '')
end

local function present(value)
  return value ~= false and value ~= nil and value ~= ''
end

local function problem(text)
  if #C.problems < MAX_PROBLEMS then C.problems[#C.problems + 1] = text end
end

-- A stored value in a problem: quoted, at most 100 bytes of it.
local function shown(value)
  if type(value) ~= 'string' then return tostring(value) end
  if #value > 100 then value = string.sub(value, 1, 100) .. '...' end
  return string.format('%q', value)
end

-- True when any of the batch's keys (STATE, and the suffixes given) holds another Redis
-- type than wurk writes there: each is named in C.problems, with `what` (what the caller
-- then does not do), and the caller writes nothing of that batch. Checked once per call.
local function broken(bid, what, ...)
  if C.broken[bid] ~= nil then return C.broken[bid] end
  local bad = false
  for _, list in ipairs({STATE, {...}}) do
    for _, suffix in ipairs(list) do
      local key = bkey(bid, suffix)
      local want = suffix == '' and 'hash' or 'set'
      local kind = redis.call('TYPE', key)['ok']
      if kind ~= want and kind ~= 'none' then
        problem(key .. ' holds a ' .. kind .. ', not a ' .. want .. ' (written by something '
                .. 'else); ' .. what)
        bad = true
      end
    end
  end
  C.broken[bid] = bad
  return bad
end

-- `key`, an index of wurk's own (batch-died), as a set: one of another type is deleted
-- with a problem naming it, to start again — it held nothing wurk wrote.
local function own_set(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'set' and kind ~= 'none' then
    redis.call('DEL', key)
    problem(key .. ' held a ' .. kind .. ', not a set (written by something else); deleted, '
            .. 'it starts again')
  end
end

-- A count as HINCRBY takes it: a whole number, no sign but '-', no leading zero, 64 bits.
local function is_count(raw)
  if raw == '0' then return true end
  if type(raw) ~= 'string' then return false end
  local digits = string.match(raw, '^%-?([1-9]%d*)$')
  return digits ~= nil and (#digits < 19 or (#digits == 19 and
                                             digits <= '9223372036854775807'))
end

-- The batch's count `field` as it stands in the hash, given it holds `raw`, which is no
-- count: pending (jobs neither succeeded nor removed: -jids and -died) and failures
-- (-failed) are rebuilt from the sets; total, which no set holds, is left as it is (nil).
local function rebuild(bid, field, raw)
  local h, n = bkey(bid), nil
  if field == 'pending' then
    n = redis.call('SCARD', bkey(bid, '-jids')) + redis.call('SCARD', bkey(bid, '-died'))
  elseif field == 'failures' then
    n = redis.call('SCARD', bkey(bid, '-failed'))
  end
  if n then
    redis.call('HSET', h, field, n)
    problem(h .. ' field ' .. field .. ' held no count: ' .. shown(raw) .. ' (written by '
            .. 'something else); rebuilt from the batch\'s sets as ' .. n)
  else
    problem(h .. ' field ' .. field .. ' holds no count: ' .. shown(raw) .. ' (written by '
            .. 'something else); left as it is')
  end
  return n
end

-- The batch's count `field` (nil when absent); one that is no count is rebuilt first.
local function count(bid, field)
  local raw = redis.call('HGET', bkey(bid), field)
  if not raw then return nil end
  if is_count(raw) then return tonumber(raw) end
  return rebuild(bid, field, raw)
end

-- HINCRBY the batch's count `field`, after the set operation it follows: a count rebuilt
-- from the sets holds that change already.
local function add(bid, field, by)
  local raw = redis.call('HGET', bkey(bid), field)
  if raw and not is_count(raw) then return rebuild(bid, field, raw) end
  local n = redis.pcall('HINCRBY', bkey(bid), field, by)
  if type(n) == 'table' then return rebuild(bid, field, raw) end  -- past 64 bits
  return n
end

local L

local function lib()
  if L then return L end
  local t = redis.call('TIME')
  C.sec = tonumber(t[1])
  C.usec = tonumber(t[2])

  -- Now, in the writer format of created_at: integer ms, or float seconds with a fraction.
  local function stamp()
    if C.fmt == 'float' then
      return string.format('%d.%06d', C.sec, C.usec)
    end
    return string.format('%.0f', C.sec * 1000 + math.floor(C.usec / 1000))
  end

  -- ``seconds`` from now, in the same format (a deadline: ``expires_at``).
  local function stamp_in(seconds)
    if C.fmt == 'float' then
      return string.format('%.6f', C.sec + C.usec / 1000000 + seconds)
    end
    return string.format('%.0f', C.sec * 1000 + math.floor(C.usec / 1000) + seconds * 1000)
  end

  -- The raw text of each element of a JSON array, exactly as stored: callbacks carry user
  -- options, which must reach the callback job byte for byte (cjson would turn [] into {} and
  -- round large integers).
  local function elements(text)
    local out, depth, start, in_string, escaped = {}, 0, nil, false, false
    local function finish(stop)
      if start then
        out[#out + 1] = (string.gsub(string.sub(text, start, stop), '%s+$', ''))
        start = nil
      end
    end
    for i = 1, #text do
      local c = string.sub(text, i, i)
      if in_string then
        if escaped then escaped = false
        elseif c == '\\' then escaped = true
        elseif c == '"' then in_string = false end
      else
        if depth == 1 and not start and not string.find(c, '[%s,%]]') then start = i end
        if c == '"' then in_string = true
        elseif c == '[' or c == '{' then depth = depth + 1
        elseif c == ']' or c == '}' then
          if depth == 1 then finish(i - 1) end
          depth = depth - 1
        elseif c == ',' and depth == 1 then finish(i - 1) end
      end
    end
    return out
  end

  -- {event text, target text, options text} of each registered callback, in order.
  local function callbacks(bid)
    local raw = redis.call('HGET', bkey(bid), 'callbacks')
    local found = {}
    if not present(raw) then return found end
    for _, item in ipairs(elements(raw)) do
      local parts = elements(item)
      local ok, event = pcall(cjson.decode, parts[1] or '')
      if ok and type(event) == 'string' and parts[2] then
        found[#found + 1] = {event, parts[1], parts[2], parts[3] or '{}'}
      end
    end
    return found
  end

  local function count_callbacks(bid, event)
    local n = 0
    for _, cb in ipairs(callbacks(bid)) do
      if cb[1] == event then n = n + 1 end
    end
    return n
  end

  -- Seconds the batch's keys live from now: linger after success, the dead set's timeout
  -- once a job died (if longer), 30 days otherwise.
  local function ttl_for(bid)
    local v = redis.call('HMGET', bkey(bid), 'success_at', 'linger', 'death_at')
    if present(v[1]) then
      local linger = tonumber(v[2]) or DEFAULT_LINGER
      -- 'nan', 'inf' or '1e300' (another writer, a hand) made EXPIRE refuse after the
      -- success was marked: its callbacks were never pushed.
      if linger ~= linger or linger > MAX_LINGER then
        problem(bkey(bid) .. ' field linger holds no number of seconds wurk keeps a batch: '
                .. shown(v[2]) .. ' (written by something else); it is kept '
                .. DEFAULT_LINGER .. ' s after its success')
        linger = DEFAULT_LINGER
      end
      if linger < MIN_LINGER then linger = MIN_LINGER end
      return math.floor(linger)
    end
    if present(v[3]) and C.dead_ttl > PENDING_TTL then return math.floor(C.dead_ttl) end
    return PENDING_TTL
  end

  local function touch(bid)
    local ttl = ttl_for(bid)
    for _, suffix in ipairs(SUFFIXES) do
      redis.call('EXPIRE', bkey(bid, suffix), ttl)
    end
  end

  -- The callbacks' `"wurk_ctx":` field text: the context variables set where the batch was
  -- created, stored as given (never re-encoded), or '' when there are none. A value that is
  -- no JSON object (written by something else) is named and left out: the callbacks run,
  -- without it.
  local function context_of(bid)
    local raw = redis.call('HGET', bkey(bid), 'context')
    if not present(raw) then return '' end
    local ok, value = pcall(cjson.decode, raw)
    if ok and type(value) == 'table' and string.match(raw, '^%s*{') then
      return ',"wurk_ctx":' .. raw
    end
    problem(bkey(bid) .. ' field context holds no JSON object of context variables (written '
            .. 'by something else): its callbacks run without it')
    return ''
  end

  -- Enqueue the callbacks of `event` and mark it fired, once: -1 if it had fired already,
  -- else the number of callback jobs pushed. The mark and the pushes happen together.
  local function fire(bid, event)
    local v = redis.call('HMGET', bkey(bid), 'callback_queue', 'callback_class')
    local queue = present(v[1]) and v[1] or 'default'
    local class = present(v[2]) and v[2] or CALLBACK_CLASS
    if not C.hand_back and redis.call('SISMEMBER', bkey(bid, '-notify'), event) == 0 then
      -- The pushes must not fail after the mark: a key of another type leaves it unfired.
      for _, pair in ipairs({{C.prefix .. 'queues', 'set'},
                             {C.prefix .. 'queue:' .. queue, 'list'}}) do
        local kind = redis.call('TYPE', pair[1])['ok']
        if kind ~= pair[2] and kind ~= 'none' then
          problem(pair[1] .. ' holds a ' .. kind .. ', not a ' .. pair[2] .. ' (written by '
                  .. 'something else); the ' .. event .. ' callbacks of batch ' .. bid ..
                  ' are not pushed, and it is not marked fired')
          return -1
        end
      end
    end
    if redis.call('SADD', bkey(bid, '-notify'), event) == 0 then return -1 end
    local at = stamp()
    redis.call('HSET', bkey(bid), event .. '_at', at)
    C.fired[#C.fired + 1] = {bid, event, redis.call('HGET', bkey(bid), 'created_at') or '', at}
    touch(bid)  -- success shortens the lifetime to the linger, a death lengthens it
    local pushed = 0
    local ctx = context_of(bid)
    for i, cb in ipairs(callbacks(bid)) do
      if cb[1] == event then
        local jid = string.sub(redis.sha1hex(bid .. '|' .. event .. '|' .. i .. '|' .. C.sec ..
                                             '.' .. C.usec), 1, 24)
        local payload = '{"class":' .. cjson.encode(class) .. ',"queue":' ..
          cjson.encode(queue) .. ',"args":[' .. cb[2] .. ',' .. cjson.encode(bid) .. ',' ..
          cb[3] .. ',' .. cb[4] .. '],"retry":true,"jid":"' .. jid .. '","created_at":' ..
          at .. ',"enqueued_at":' .. at .. ctx .. '}'
        -- Stored text that does not make a JSON payload is skipped, never pushed broken.
        if pcall(cjson.decode, payload) then
          if C.hand_back then
            C.handed[#C.handed + 1] = payload
          else
            redis.call('SADD', C.prefix .. 'queues', queue)
            redis.call('LPUSH', C.prefix .. 'queue:' .. queue, payload)
          end
          pushed = pushed + 1
        end
      end
    end
    return pushed
  end

  local function parent_of(bid)
    local parent = redis.call('HGET', bkey(bid), 'parent_bid')
    if present(parent) and parent ~= bid and redis.call('EXISTS', bkey(parent)) == 1 then
      return parent
    end
    return nil
  end

  local function kids_complete(bid)
    for _, kid in ipairs(redis.call('SMEMBERS', bkey(bid, '-kids'))) do
      local kind = redis.call('TYPE', bkey(kid))['ok']
      if kind == 'hash' then
        if not present(redis.call('HGET', bkey(kid), 'complete_at')) then return false end
      elseif kind ~= 'none' then  -- as if it had expired: it cannot complete
        problem(bkey(kid) .. ' holds a ' .. kind .. ', not a hash (written by something '
                .. 'else); batch ' .. bid .. ' does not wait for that child')
      end
    end
    return true
  end

  local try_fire

  -- The batch's success is final (its success callbacks, if any, have run): its parent no
  -- longer waits for it.
  local function release_parent(bid, depth)
    local parent = parent_of(bid)
    if parent and not broken(parent, 'it is not told that its child ' .. bid .. ' succeeded')
        and redis.call('SREM', bkey(parent, '-pkids'), bid) == 1 then
      try_fire(parent, depth + 1)
    end
  end

  -- Fire whatever the batch's counts now call for: `complete` when every job ran at least
  -- once (pending jobs all failed) and every child batch completed; `success` when no job is
  -- pending and every child batch succeeded — never for a batch marked `nosuccess` (the
  -- workflow of the same id failed or was cancelled: workflow_lib.lua). Then the parent may
  -- be due.
  try_fire = function(bid, depth)
    depth = depth or 0
    if depth > MAX_DEPTH then return end
    if broken(bid, 'it fires nothing') then return end  -- a parent (the caller checked its own)
    -- A count Lua would believe and HINCRBY would not ('0x0', ' 1', '1e400') is rebuilt.
    local pending = count(bid, 'pending')
    if pending == nil then return end
    local failures = count(bid, 'failures') or 0
    local notify = bkey(bid, '-notify')
    if pending <= failures and redis.call('SISMEMBER', notify, 'complete') == 0 and
        kids_complete(bid) then
      fire(bid, 'complete')
      local parent = parent_of(bid)
      if parent then try_fire(parent, depth + 1) end
    end
    if pending <= 0 and redis.call('SISMEMBER', notify, 'complete') == 1 and
        redis.call('SCARD', bkey(bid, '-pkids')) == 0 and
        not present(redis.call('HGET', bkey(bid), 'nosuccess')) then
      if fire(bid, 'success') == 0 then
        release_parent(bid, depth)  -- no success callback to wait for
      end
    end
  end

  -- A job of the batch died: `death` fires once for it and once for each ancestor.
  local function fire_death(bid)
    local current, depth = bid, 0
    while current and depth <= MAX_DEPTH do
      if broken(current, 'its death callbacks are not fired') then return end
      fire(current, 'death')
      touch(current)
      current = parent_of(current)
      depth = depth + 1
    end
  end

  L = {stamp = stamp, stamp_in = stamp_in, touch = touch, try_fire = try_fire, fire_death = fire_death,
       parent_of = parent_of, count_callbacks = count_callbacks, ttl_for = ttl_for}
  return L
end

-- The hot path's refresh (a push, a job's count): the keys get their full lifetime again
-- once the record has lost an hour of it, and a set created just now gets the record's.
-- Every key stays bounded without nine EXPIREs per job.
local function refresh(bid, ...)
  local left = redis.call('TTL', bkey(bid))
  if left == -1 or (left >= 0 and left < PENDING_TTL - 3600) then
    local B = lib()
    if left == -1 or left < B.ttl_for(bid) - 3600 then
      B.touch(bid)
      return
    end
  end
  for _, suffix in ipairs({...}) do
    local key = bkey(bid, suffix)
    if redis.call('TTL', key) == -1 then redis.call('EXPIRE', key, math.max(left, 1)) end
  end
end

-- Take `jids` out of batch `bid`'s accounting (Sidekiq Pro's Batch#remove_jobs; the
-- caller checked that the batch exists and its keys are of their types): a jid still
-- pending (-jids) or dead (-died) no longer counts towards total and pending (nor
-- failures); then whatever is now due fires. Returns how many were removed.
local function remove_jids(bid, jids)
  local removed, failed, died = 0, 0, false
  for _, jid in ipairs(jids) do
    local gone = redis.call('SREM', bkey(bid, '-jids'), jid) == 1
    if not gone and redis.call('SREM', bkey(bid, '-died'), jid) == 1 then
      gone, died = true, true
    end
    if gone then
      removed = removed + 1
      if redis.call('SREM', bkey(bid, '-failed'), jid) == 1 then failed = failed + 1 end
    end
  end
  if removed == 0 then return 0 end
  add(bid, 'total', -removed)
  add(bid, 'pending', -removed)
  if failed > 0 then add(bid, 'failures', -failed) end
  if died and redis.call('SCARD', bkey(bid, '-died')) == 0 then
    own_set(C.prefix .. 'batch-died')
    redis.call('SREM', C.prefix .. 'batch-died', bid)
  end
  refresh(bid, '-failed', '-died')
  lib().try_fire(bid)
  return removed
end
