-- Moves due jobs from a sorted set (schedule or retry) straight into their queue lists, in
-- one atomic step, so a job is never in neither place (Sidekiq Pro's reliable scheduler).
--
-- KEYS[1]  the sorted set           KEYS[2]  the `queues` set
-- ARGV[1]  the enqueued_at value, already formatted as JSON (int ms or float seconds)
-- ARGV[2]  how many members at most to look at in this call
-- ARGV[3]  the queue key prefix from wurk.keys (key names are spelled there only)
--
-- Members scored at or below Redis's clock are due: every scheduler, whatever its own clock,
-- moves a job at the same moment.
--
-- Returns {moved, skipped}: skipped members are due but their queue could not be read; they
-- stay where they are for the caller's one-at-a-time path.
--
-- Payloads are never re-encoded: cjson would round big integers and reorder keys.
-- cjson.decode is used only to READ the queue; the enqueued_at field is spliced in as text
-- before the closing brace (a later duplicate key wins in Ruby's and Python's parsers).

local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0,
                       tonumber(ARGV[2]))
local stamp = ',"enqueued_at":' .. ARGV[1] .. '}'
local moved, skipped = 0, 0

local function queue_of(member)
  local ok, job = pcall(cjson.decode, member)
  if not ok or type(job) ~= 'table' then return nil end
  local queue = job['queue']
  -- '|' is reserved for in-flight lists; such a payload is refused by the slow path.
  if type(queue) ~= 'string' or queue == '' or string.find(queue, '|', 1, true) then
    return nil
  end
  return queue
end

for _, member in ipairs(due) do
  local queue = queue_of(member)
  local head = queue and string.match(member, '^(.*)}%s*$')
  if head then
    redis.call('ZREM', KEYS[1], member)
    redis.call('SADD', KEYS[2], queue)
    redis.call('LPUSH', ARGV[3] .. queue, head .. stamp)
    moved = moved + 1
  else
    skipped = skipped + 1
  end
end
return {moved, skipped}
