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
-- Only `init`, `bkey`, `present` and `refresh` are made on every call: the rest — firing
-- callbacks, nesting, expiry — is built by `lib()` when a script needs it. Making two dozen
-- closures costs a job's count more than its commands do, and most counts fire nothing.

local PENDING_TTL = 30 * 24 * 3600   -- a batch that has not succeeded lives 30 days
local DEFAULT_LINGER = 24 * 3600     -- after success, unless the batch says otherwise
local MIN_LINGER = 30
local MAX_DEPTH = 64                 -- nesting deeper than this is treated as corrupt data
local CALLBACK_CLASS = 'wurk.batch.Callback'
local SUFFIXES = {'', '-jids', '-failed', '-died', '-kids', '-pkids', '-notify', '-cbsucc',
                  '-tags'}

local C = {}

local function init(prefix, fmt, dead_ttl, hand_back)
  C.prefix = prefix
  C.fmt = fmt
  C.dead_ttl = tonumber(dead_ttl) or PENDING_TTL
  C.hand_back = hand_back == '1'
  C.handed = {}
  C.fired = {}
end

local function reply(result)
  local out = {result, #C.handed}
  for _, payload in ipairs(C.handed) do out[#out + 1] = payload end
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

  -- Enqueue the callbacks of `event` and mark it fired, once: -1 if it had fired already,
  -- else the number of callback jobs pushed. The mark and the pushes happen together.
  local function fire(bid, event)
    if redis.call('SADD', bkey(bid, '-notify'), event) == 0 then return -1 end
    local at = stamp()
    redis.call('HSET', bkey(bid), event .. '_at', at)
    C.fired[#C.fired + 1] = {bid, event, redis.call('HGET', bkey(bid), 'created_at') or '', at}
    touch(bid)  -- success shortens the lifetime to the linger, a death lengthens it
    local v = redis.call('HMGET', bkey(bid), 'callback_queue', 'callback_class')
    local queue = present(v[1]) and v[1] or 'default'
    local class = present(v[2]) and v[2] or CALLBACK_CLASS
    local pushed = 0
    for i, cb in ipairs(callbacks(bid)) do
      if cb[1] == event then
        local jid = string.sub(redis.sha1hex(bid .. '|' .. event .. '|' .. i .. '|' .. C.sec ..
                                             '.' .. C.usec), 1, 24)
        local payload = '{"class":' .. cjson.encode(class) .. ',"queue":' ..
          cjson.encode(queue) .. ',"args":[' .. cb[2] .. ',' .. cjson.encode(bid) .. ',' ..
          cb[3] .. ',' .. cb[4] .. '],"retry":true,"jid":"' .. jid .. '","created_at":' ..
          at .. ',"enqueued_at":' .. at .. '}'
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
      if redis.call('EXISTS', bkey(kid)) == 1 and
          not present(redis.call('HGET', bkey(kid), 'complete_at')) then
        return false
      end
    end
    return true
  end

  local try_fire

  -- The batch's success is final (its success callbacks, if any, have run): its parent no
  -- longer waits for it.
  local function release_parent(bid, depth)
    local parent = parent_of(bid)
    if parent and redis.call('SREM', bkey(parent, '-pkids'), bid) == 1 then
      try_fire(parent, depth + 1)
    end
  end

  -- Fire whatever the batch's counts now call for: `complete` when every job ran at least
  -- once (pending jobs all failed) and every child batch completed; `success` when no job is
  -- pending and every child batch succeeded. Then the parent may be due.
  try_fire = function(bid, depth)
    depth = depth or 0
    if depth > MAX_DEPTH then return end
    local v = redis.call('HMGET', bkey(bid), 'pending', 'failures')
    if not present(v[1]) then return end
    local pending = tonumber(v[1]) or 1
    local failures = tonumber(v[2]) or 0
    local notify = bkey(bid, '-notify')
    if pending <= failures and redis.call('SISMEMBER', notify, 'complete') == 0 and
        kids_complete(bid) then
      fire(bid, 'complete')
      local parent = parent_of(bid)
      if parent then try_fire(parent, depth + 1) end
    end
    if pending <= 0 and redis.call('SISMEMBER', notify, 'complete') == 1 and
        redis.call('SCARD', bkey(bid, '-pkids')) == 0 then
      if fire(bid, 'success') == 0 then
        release_parent(bid, depth)  -- no success callback to wait for
      end
    end
  end

  -- A job of the batch died: `death` fires once for it and once for each ancestor.
  local function fire_death(bid)
    local current, depth = bid, 0
    while current and depth <= MAX_DEPTH do
      fire(current, 'death')
      touch(current)
      current = parent_of(current)
      depth = depth + 1
    end
  end

  L = {stamp = stamp, touch = touch, try_fire = try_fire, fire_death = fire_death,
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
