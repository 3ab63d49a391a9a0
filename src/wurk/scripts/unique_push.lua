-- A unique job's push: its lock and the job, together or not at all.
--
-- KEYS[1]  unique:<digest>    KEYS[2]  the `queues` set
-- KEYS[3]  the job's queue list, or the `schedule` set for a scheduled job
-- ARGV[1]  the job's jid    ARGV[2]  the lock's lifetime, ms    ARGV[3]  the payload
-- ARGV[4]  the queue's name (immediate jobs)    ARGV[5]  the score ('' for immediate jobs)
--
-- Returns nil when pushed, or the jid holding the lock when this push is a duplicate. A
-- lock held by this very jid does not refuse it: that is the job itself coming back (the
-- scheduler pushing it through the client), and its lock keeps its original lifetime.
--
-- A lock of another Redis type holds no jid (anyone may write the key): it made every push
-- of the job fail with WRONGTYPE, for good when written without a TTL. It is replaced by
-- this push's lock, and the reply is {the lock's key, the type it was}, to be warned about;
-- so is a lock without an expiry, which no push writes.
--
-- The queue, the `queues` set or the schedule of another type refuses the push before anything
-- is written: a script is not rolled back, and a lock taken for a job the push then failed
-- to write refused every later push of it as a duplicate of a job nobody had.
local targets = ARGV[5] ~= '' and {{KEYS[3], 'zset'}} or {{KEYS[2], 'set'}, {KEYS[3], 'list'}}
for _, target in ipairs(targets) do
  local found = redis.call('TYPE', target[1])['ok']
  if found ~= 'none' and found ~= target[2] then
    return redis.error_reply('WRONGTYPE ' .. target[1] .. ' holds a ' .. found ..
      ', not a ' .. target[2] .. '; nothing was pushed, no lock taken')
  end
end
local replaced = nil
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  replaced = {KEYS[1], redis.call('TYPE', KEYS[1])['ok']}
  redis.call('DEL', KEYS[1])
  holder = false
elseif holder and holder ~= ARGV[1] and redis.call('PTTL', KEYS[1]) == -1 then
  -- No push (wurk's or Sidekiq's) takes a lock without an expiry: one written so refused
  -- every push of the job for good. Replaced, as a lock of another type is.
  replaced = {KEYS[1], 'string without an expiry'}
  holder = false
end
if holder and holder ~= ARGV[1] then
  return holder
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[3])
else
  redis.call('SADD', KEYS[2], ARGV[4])
  redis.call('LPUSH', KEYS[3], ARGV[3])
end
if replaced then return replaced end
return false
