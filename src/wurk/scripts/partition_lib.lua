-- Prepended by wurk.scripts.Script to the scripts that touch partitioned queues
-- (wurk.partitions): how a job's partition is read, and how the in-flight counts are kept
-- and recounted. Everything read here may have been written by hand: a payload without a
-- usable `partition` goes to the default partition, never lost; a count that is not a whole
-- number ≥ 0 is recounted from the in-flight lists.

local PART_DEFAULT = 'default'
local PART_MAX = 200

-- Whether `name` may name a partition: a non-empty string of at most PART_MAX bytes without
-- ':' or '|' (they separate the parts of the keys) or control characters.
local function part_valid(name)
  return type(name) == 'string' and #name > 0 and #name <= PART_MAX
    and not string.find(name, '[:|%c]')
end

-- The partition of a payload: its `partition` field, or the default partition.
local function part_of(job)
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == 'table' then
    local name = decoded['partition']
    -- A whole number is its digits, but only below 2^53: past that cjson holds it roughly
    -- (and '%d' writes 1e300 as -2^63), so such a number is no partition (the default), as
    -- partitions.partition_of reads it.
    if type(name) == 'number' then
      if name == math.floor(name) and math.abs(name) < 9007199254740992 then
        name = string.format('%d', name)
      else
        name = nil
      end
    end
    if part_valid(name) then return name end
  end
  return PART_DEFAULT
end

-- Put `job` on the list of partition `name` (`how`: 'LPUSH' at the head, 'RPUSH' at the
-- tail) and return the partition it went to: its own, or the default partition when its
-- list's key holds another Redis type (written by something else, and left alone), or nil
-- when the default partition's does too. Never an error after the job left where it was:
-- a script that failed there (WRONGTYPE) had popped or removed the job and put it nowhere.
local function part_put(prefix, name, job, how)
  local reply = redis.pcall(how, prefix .. name, job)
  if type(reply) ~= 'table' or not reply.err then return name end
  if name ~= PART_DEFAULT then
    reply = redis.pcall(how, prefix .. PART_DEFAULT, job)
    if type(reply) ~= 'table' or not reply.err then return PART_DEFAULT end
  end
  return nil
end

-- An in-flight count as stored (HGET's reply), or nil when it is none HINCRBY could go on
-- from: only the digits it writes, below 2^63. Lua's tonumber takes more ('5.0', '0x3',
-- ' 1', '1e400'): such a count was believed, so a partition stayed "at its limit" for
-- good, or HINCRBY failed the script after the job had been moved. An error reply (the hash
-- is of another type) is none either.
local function part_count(raw)
  if type(raw) ~= 'string' or #raw > 18 or not string.find(raw, '^%d+$') then return nil end
  return tonumber(raw)
end

-- A key of the queue's that holds another Redis type than wurk writes there (`kind`): written
-- by something else, and every command on it would fail — deleted, to start again, and its
-- name added to `restarted` for the caller to warn about. Absent is fine.
local function part_restart(key, kind, restarted)
  local found = redis.call('TYPE', key)['ok']
  if found ~= kind and found ~= 'none' then
    redis.call('DEL', key)
    restarted[#restarted + 1] = key
  end
end

-- Whether `key` holds `kind` or nothing: a script that writes to the ring after moving a job
-- checks it first and, when it holds another type, leaves it for the next fetch to delete
-- and rebuild (`part_restart`; its partitions' lists are found from the client) — a ZADD
-- failing after the job moved left it half-done (Redis does not roll back).
local function part_holds(key, kind)
  local found = redis.call('TYPE', key)['ok']
  return found == kind or found == 'none'
end

-- A job of partition `name` left flight (ACK, return to its queue): one fewer in flight. A
-- count that is not a number is left for the next fetch to recount.
local function part_release(running, name)
  local left = part_count(redis.pcall('HGET', running, name))
  if left == nil then return end
  if left <= 1 then
    redis.call('HDEL', running, name)
  else
    redis.call('HINCRBY', running, name, -1)
  end
end

-- The queue a script recounts (`part_queue`, before any recount): the prefix of its lists
-- (Keys.queue_prefix) and its name; and the holders dropped as no in-flight list of it.
local PQ = {dropped = {0}}

local function part_queue(qprefix, queue)
  PQ.prefix, PQ.queue = qprefix, queue
end

-- Whether `list` is named as an in-flight list of the queue (wurk.fetch.reaper.parse_private):
-- wurk's layout, <prefix><queue>|host|pid|nonce|index or <prefix><queue>|host|pid|index, or
-- Sidekiq Pro's, <prefix>sq|host:pid[:nonce]|<queue>. A holder named otherwise (another
-- queue's plain or in-flight list, a partition's list) was written by something else: its
-- jobs are not this queue's in flight, and counted they held partitions at their limit.
local function part_holder(list)
  local own = PQ.prefix .. PQ.queue .. '|'
  if string.sub(list, 1, #own) == own then
    local rest = string.sub(list, #own + 1)
    local pid, nonce = string.match(rest, '^[^|]*|(%d+)|([^|]*)|[^|]*$')
    if pid and #pid <= 20 and #nonce == 12 and not string.find(nonce, '[^0-9a-f]') then
      return true
    end
    pid = string.match(rest, '^[^|]*|(%d+)|[^|]*$')
    return pid ~= nil and #pid <= 20
  end
  local pro, tail = PQ.prefix .. 'sq|', '|' .. PQ.queue
  if #list > #pro + #tail and string.sub(list, 1, #pro) == pro
      and string.sub(list, -#tail) == tail then
    local identity = string.sub(list, #pro + 1, -#tail - 1)  -- host:pid[:nonce]
    local pid = not string.find(identity, '|', 1, true)
      and (string.match(identity, '^[^:]*:(%d+)$') or string.match(identity, '^[^:]*:(%d+):'))
    return pid and #pid <= 20 or false
  end
  return false
end

-- Recount the in-flight jobs of every partition from the in-flight lists that took jobs of
-- the queue (`holders`): exact, as it runs in one script. Lists gone are forgotten; a member
-- that names no in-flight list of the queue is dropped, counted in PQ.dropped (the first
-- element), the first 20 named after it for the caller to warn about.
-- Returns the number of partitions with jobs in flight.
local function part_recount(running, holders)
  local counts = {}
  for _, list in ipairs(redis.call('SMEMBERS', holders)) do
    if not part_holder(list) then
      redis.call('SREM', holders, list)
      PQ.dropped[1] = PQ.dropped[1] + 1
      if #PQ.dropped <= 20 then PQ.dropped[#PQ.dropped + 1] = list end
    elseif redis.call('TYPE', list)['ok'] ~= 'list' then
      redis.call('SREM', holders, list)
    else
      for _, job in ipairs(redis.call('LRANGE', list, 0, -1)) do
        local name = part_of(job)
        counts[name] = (counts[name] or 0) + 1
      end
    end
  end
  redis.call('DEL', running)
  local n = 0
  for name, count in pairs(counts) do
    redis.call('HSET', running, name, count)
    n = n + 1
  end
  return n
end

-- The in-flight count of partition `name`, recounting all when it is not a whole number ≥ 0.
local function part_running(running, holders, name)
  local raw = redis.pcall('HGET', running, name)
  if not raw then return 0 end
  local count = part_count(raw)
  if count == nil then
    part_recount(running, holders)
    count = part_count(redis.call('HGET', running, name)) or 0
  end
  return count
end
