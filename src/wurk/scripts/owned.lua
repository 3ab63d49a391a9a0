-- Keys wurk writes that anyone else may write too: one holding another Redis type than wurk
-- keeps there would make every command on it fail with WRONGTYPE (for good, when written
-- without a TTL). `own(key, kind)` deletes such a key before the script writes anything,
-- and notes it in `replaced` as {key, the type it held, ...}, for the caller to warn about.
-- Absent is fine.
local replaced = {}

local function own(key, kind)
  local held = redis.call('TYPE', key)['ok']
  if held ~= 'none' and held ~= kind then
    redis.call('DEL', key)
    replaced[#replaced + 1] = key
    replaced[#replaced + 1] = held
  end
end


-- A unique lock's holder, or false when `jid`'s push may take it. A lock of another type, or
-- one without an expiry (no push, wurk's or Sidekiq's, writes one: it refused every push of
-- its job for good), is deleted first and noted in `replaced`.
local function lock_holder(lock, jid)
  own(lock, 'string')
  local holder = redis.call('GET', lock)
  if holder and holder ~= jid and redis.call('PTTL', lock) == -1 then
    redis.call('DEL', lock)
    replaced[#replaced + 1] = lock
    replaced[#replaced + 1] = 'string without an expiry'
    return false
  end
  return holder
end

-- An error reply naming the first of `targets` ({key, type}, ...) holding another Redis type,
-- or nil. Checked before a push writes anything: a script is not rolled back, and a lock
-- taken for a job whose push then failed refused every later push of it as a duplicate.
local function other_type(targets, what)
  for _, target in ipairs(targets) do
    local held = redis.call('TYPE', target[1])['ok']
    if held ~= 'none' and held ~= target[2] then
      return redis.error_reply('WRONGTYPE ' .. target[1] .. ' holds a ' .. held .. ', not a '
                               .. target[2] .. '; ' .. what)
    end
  end
  return nil
end

-- A unique lock's lifetime in ms: `unique_ms` (its `unique_for`), plus, for a job scheduled
-- at `score` (float epoch seconds; '' for an immediate job), the wait until it is due on
-- Redis's clock, the one the scheduler moves it by (a pusher's clock ahead of Redis's made
-- the lock expire before its job was even due).
local function lock_ttl(unique_ms, score)
  local ttl = tonumber(unique_ms)
  if score ~= '' then
    local now = redis.call('TIME')
    local wait = tonumber(score) - (tonumber(now[1]) + tonumber(now[2]) / 1000000)
    if wait > 0 then ttl = ttl + math.ceil(wait * 1000) end
  end
  return ttl
end
