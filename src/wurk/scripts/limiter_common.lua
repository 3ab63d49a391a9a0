-- Shared by the rate limiter scripts (loaded before each one's own text): Redis's clock and
-- the stats counters, so no client clock ever decides a limit.
--
-- Stats hash fields: held (calls let in), held_ms (time concurrent slots were held),
-- immediate (let in at the first try), waited / wait_ms (let in after waiting),
-- refused (over the limit for the whole wait), overages (a concurrent holder outlived its
-- lock), reclaimed (locks taken back from holders that vanished).

-- Milliseconds since the epoch, with the microseconds as a fraction.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

-- A number read back from Redis, or `fallback` when it is missing, not a number, NaN or
-- infinite: a hand-edited or corrupted value must not wedge a limiter forever.
local function finite(value, fallback)
  local n = tonumber(value)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return fallback end
  return n
end

-- What this call found holding what wurk never writes there (a key of another type, a stats
-- counter that is no count) and started again; returned as each reply's third element, for
-- the caller to warn about. Anyone may write these keys: one bad value must not make every
-- use of the limiter fail until the key expires.
local restarted = {}

-- `key` as a `kind` (or absent): a key of another type is deleted, to start again.
local function own(key, kind)
  local found = redis.call('TYPE', key)['ok']
  if found ~= kind and found ~= 'none' then
    redis.call('DEL', key)
    restarted[#restarted + 1] = key .. ' (a ' .. found .. ', not a ' .. kind .. ')'
  end
end

-- Drops the members of a ZSET of stamps (ms) later than `latest`, a stamp no use of this
-- limiter could have written (+inf, 1e300 by hand): such a member never grows old enough to
-- leave, and held its slot for good.
local function drop_future(key, latest)
  local dropped = redis.call('ZREMRANGEBYSCORE', key, '(' .. string.format('%.3f', latest),
                             '+inf')
  if dropped > 0 then
    restarted[#restarted + 1] = key .. ' (' .. dropped .. ' stamped in the future)'
  end
end

-- HINCRBY, starting the counter again when it holds no count (text, past 2^63).
local function incr(stats, field, by)
  if type(redis.pcall('HINCRBY', stats, field, by)) == 'table' then
    local before = #restarted
    own(stats, 'hash')
    if #restarted == before then
      redis.call('HDEL', stats, field)
      restarted[#restarted + 1] = stats .. ' field ' .. field .. ' (not a count)'
    end
    redis.call('HINCRBY', stats, field, by)
  end
end

-- A script's reply: {status, value, what was started again}.
local function reply(status, value)
  return {status, value, restarted}
end

local function count(stats, ttl, field, by)
  incr(stats, field, by)
  redis.call('EXPIRE', stats, ttl)
end

-- A call let in: counted as immediate, or as waited with the time it waited.
local function granted(stats, ttl, waited_ms)
  incr(stats, 'held', 1)
  if waited_ms > 0 then
    incr(stats, 'waited', 1)
    incr(stats, 'wait_ms', math.floor(waited_ms))
  else
    incr(stats, 'immediate', 1)
  end
  redis.call('EXPIRE', stats, ttl)
end

-- What a caller is told: let in (1), try again after wait_ms (0), or refused (-1, counted).
-- The caller's remaining wait decides between the last two, so a refusal is counted once.
local function over(stats, ttl, wait_ms, remaining_ms)
  local wait = math.max(1, math.ceil(wait_ms))
  if wait > remaining_ms then
    count(stats, ttl, 'refused', 1)
    return reply(-1, wait)
  end
  return reply(0, wait)
end
