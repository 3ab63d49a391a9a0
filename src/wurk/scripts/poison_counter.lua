-- Prepended by wurk.scripts.Script to the scripts that read a job's poison counter
-- (super_fetch:recovered:<jid>, Sidekiq Pro's key), so one place knows how to find it.

-- The counter's key for a payload, or nil when the payload has no usable jid. Decoded only
-- to read the jid: the payload itself is moved as the bytes it is.
local function poison_key(job, prefix)
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == 'table' and type(decoded['jid']) == 'string'
      and decoded['jid'] ~= '' then
    return prefix .. decoded['jid']
  end
  return nil
end

-- The counters found holding no count, started again (the caller returns them, to be warned
-- about).
local restarted_counters = {}

-- One more recovery of `job`, kept for `ttl` seconds; 0 when it has no jid to count by. A
-- counter that holds no count (anyone may have written it: text, another type, past 2^63)
-- would fail the whole script; it starts again from this recovery instead.
local function count_recovery(job, prefix, ttl)
  local key = poison_key(job, prefix)
  if not key then return 0 end
  local count = redis.pcall('INCR', key)
  if type(count) == 'table' then
    redis.call('DEL', key)
    count = redis.call('INCR', key)
    restarted_counters[#restarted_counters + 1] = key
  end
  redis.call('EXPIRE', key, ttl)
  return count
end


-- The keys found holding another type than the bookkeeping writes there (anyone may write
-- one: `queues`, the recovered count), left as they were (the caller returns them, to be
-- warned about): a refused SADD or INCRBY after the moves would fail the script half-way.
local refused_keys = {}

local function keep_book(command, key, arg)
  local reply = redis.pcall(command, key, arg)
  if type(reply) == 'table' and reply['err'] then
    -- Another type is the key's: named and left. Any other error (OOM, READONLY) is the
    -- server's, raised as before the pcall (the moves before it stand: it is bookkeeping).
    if not string.find(reply['err'], '^WRONGTYPE') then
      error(reply)
    end
    refused_keys[#refused_keys + 1] = key
  end
end
