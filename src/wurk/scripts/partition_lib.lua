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
    if type(name) == 'number' and name == math.floor(name) then
      name = string.format('%d', name)
    end
    if part_valid(name) then return name end
  end
  return PART_DEFAULT
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

-- Recount the in-flight jobs of every partition from the in-flight lists that took jobs of
-- the queue (`holders`): exact, as it runs in one script. Lists gone are forgotten.
-- Returns the number of partitions with jobs in flight.
local function part_recount(running, holders)
  local counts = {}
  for _, list in ipairs(redis.call('SMEMBERS', holders)) do
    if redis.call('TYPE', list)['ok'] ~= 'list' then
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
