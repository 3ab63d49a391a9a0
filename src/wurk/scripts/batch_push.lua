-- Push jobs of a batch and register them with it, together or not at all (batch_lib.lua).
--
-- KEYS[1]  b-<bid>    KEYS[2]  b-<bid>-jids    KEYS[3]  queues    KEYS[4]  schedule
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back
-- ARGV[5]     bid
-- ARGV[6..]   six per job: jid, queue, score ('' for an immediate job), payload,
--             unique lock key ('' for none), its unique_for in ms (a scheduled job's wait
--             is added on Redis's clock: lock_ttl, owned.lua)
--
-- A unique job whose lock another jid holds is neither pushed nor registered. A jid the
-- batch already has (the same job pushed again) is pushed but counted once.
-- Returns {jobs newly registered, how many jobs were refused as duplicates, the index
-- (1-based) of each..., what was found that wurk never writes (batch_lib.lua's problems)...}.
-- A batch one of whose keys holds another Redis type takes nothing: an error names them.
-- Handing back (ARGV[4]), the jobs are registered and not pushed: the caller writes them.
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local bid = ARGV[5]
if broken(bid, 'no job is pushed') then
  return redis.error_reply('BATCHBROKEN batch ' .. bid .. ' takes no jobs: '
                           .. table.concat(C.problems, '; '))
end
local state = redis.call('HMGET', KEYS[1], 'total', 'success_at')
if not state[1] then
  return redis.error_reply('NOBATCH batch ' .. bid .. ' does not exist (expired or deleted)')
end
if present(state[2]) then
  return redis.error_reply('BATCHDONE batch ' .. bid .. ' already succeeded; it takes no '
                           .. 'more jobs')
end
-- Every key a job is written to, checked before anything is: a queue or lock of another
-- type raised half-way, the jobs before it pushed and their batch never counting them.
local seen, checks = {}, {}
local function check(key, kind)
  if not seen[key] then
    seen[key] = true
    checks[#checks + 1] = {key, kind}
  end
end
for i = 6, #ARGV, 6 do
  if C.hand_back then break end  -- a testing mode's sink writes the jobs, not this script
  if ARGV[i + 2] ~= '' then
    check(KEYS[4], 'zset')
  else
    check(KEYS[3], 'set')
    check(C.prefix .. 'queue:' .. ARGV[i + 1], 'list')
  end
end
local wrong = other_type(checks, 'no job of batch ' .. bid .. ' was pushed')
if wrong then return wrong end
local added, refused = 0, {}
local job = 0
for i = 6, #ARGV, 6 do
  job = job + 1
  local jid, queue, score, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local lock, ttl = ARGV[i + 4], ARGV[i + 5]
  local holder = false
  if lock ~= '' then
    -- A lock of another type, or one without an expiry (no push writes one), would refuse
    -- the job for good: replaced (``lock_holder``, owned.lua), and named.
    local before = #replaced
    holder = lock_holder(lock, jid)
    for n = before + 1, #replaced, 2 do
      problem(replaced[n] .. ' held a ' .. replaced[n + 1] .. ', not a unique lock; replaced '
              .. 'by the lock of job ' .. jid)
    end
  end
  if holder and holder ~= jid then
    refused[#refused + 1] = job
  else
    if lock ~= '' and not holder then
      redis.call('SET', lock, jid, 'PX', lock_ttl(ttl, score))
    end
    if redis.call('SADD', KEYS[2], jid) == 1 then added = added + 1 end
    if C.hand_back then
      -- a testing mode's sink keeps or runs the job: it is only registered here
    elseif score ~= '' then
      redis.call('ZADD', KEYS[4], score, payload)
    else
      redis.call('SADD', KEYS[3], queue)
      redis.call('LPUSH', C.prefix .. 'queue:' .. queue, payload)
    end
  end
end
if added > 0 then
  add(bid, 'total', added)
  add(bid, 'pending', added)
end
refresh(bid, '-jids')
local out = {added, #refused}
for _, index in ipairs(refused) do out[#out + 1] = index end
for _, text in ipairs(C.problems) do out[#out + 1] = text end
return out
