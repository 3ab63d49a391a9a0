-- Moves due jobs from a sorted set (schedule or retry) straight into their queue lists, in
-- one atomic step, so a job is never in neither place (Sidekiq Pro's reliable scheduler).
--
-- KEYS[1]  the sorted set           KEYS[2]  the `queues` set
-- ARGV[1]  the enqueued_at value, already formatted as JSON (int ms or float seconds)
-- ARGV[2]  how many members at most to look at in this call
-- ARGV[3]  the queue key prefix from wurk.keys (key names are spelled there only)
-- ARGV[4]  how many of the lowest due members to pass over (put back this pass after a
--          failed push on the one-at-a-time path)
--
-- Members scored at or below Redis's clock are due: every scheduler, whatever its own clock,
-- moves a job at the same moment.
--
-- Returns {moved, skipped}: skipped members are due but their queue could not be read (or is
-- not UTF-8), or its list key or the `queues` set holds another Redis type (written by hand:
-- the move would fail after taking the job out of its set, and a script's earlier writes
-- stay, so the job would be in neither place); they stay where they are for the caller's
-- one-at-a-time path, which reports what it cannot push.
--
-- Payloads are never re-encoded: cjson would round big integers and reorder keys.
-- cjson.decode is used only to READ the queue and whether enqueued_at is a top-level key.
-- A payload that has one (a retried job's) gets its value replaced in place when the text
-- holds the name "enqueued_at" exactly once, followed by a number, and no \u escape: that
-- one occurrence can only be the top-level key (inside a JSON string a quote is escaped;
-- with an escape the top-level key may be spelled "enqueued\u005fat", and the one literal
-- name an argument's key). Otherwise the field is spliced in as text before the closing
-- brace (a later duplicate key wins in Ruby's and Python's parsers).

local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT',
                       tonumber(ARGV[4]), tonumber(ARGV[2]))
local stamp = ',"enqueued_at":' .. ARGV[1] .. '}'
local moved, skipped = 0, 0

-- Whether `s` is UTF-8: no stray byte, cut sequence, overlong form, surrogate or code point
-- past U+10FFFF. A queue name that is not could be named by no worker.
local function is_utf8(s)
  if not string.find(s, '[\128-\255]') then return true end
  local i, n = 1, #s
  while i <= n do
    local c = string.byte(s, i)
    local len, low, high = 1, 0x80, 0xBF
    if c >= 0xC2 and c <= 0xDF then len = 2
    elseif c >= 0xE0 and c <= 0xEF then
      len = 3
      if c == 0xE0 then low = 0xA0 elseif c == 0xED then high = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      len = 4
      if c == 0xF0 then low = 0x90 elseif c == 0xF4 then high = 0x8F end
    elseif c >= 0x80 then return false end
    for j = i + 1, i + len - 1 do
      local d = string.byte(s, j)
      if d == nil or d < low or d > high then return false end
      low, high = 0x80, 0xBF
    end
    i = i + len
  end
  return true
end

local NAME = '"enqueued_at"'

-- `member` stamped with ARGV[1]: its one top-level numeric enqueued_at replaced, else the
-- field appended to `head` (the member without its closing brace).
local function stamped(member, head, has_key)
  if has_key and not string.find(member, '\\u', 1, true) then
    local first, last = string.find(member, NAME, 1, true)
    if not string.find(member, NAME, last + 1, true) then
      local from, to = string.find(member, '^:%-?%d[%d%.eE%+%-]*', last + 1)
      if from then
        return string.sub(member, 1, from) .. ARGV[1] .. string.sub(member, to + 1)
      end
    end
  end
  return head .. stamp
end

local function queue_of(member)
  local ok, job = pcall(cjson.decode, member)
  if not ok or type(job) ~= 'table' then return nil end
  local queue = job['queue']
  -- '|' is reserved for in-flight lists; such a payload is refused by the slow path, and one
  -- whose queue is not UTF-8 goes raw to the dead set there.
  if type(queue) ~= 'string' or queue == '' or string.find(queue, '|', 1, true)
      or not is_utf8(queue) then
    return nil
  end
  return queue, job['enqueued_at'] ~= nil
end

local function holds(key, kind)
  local found = redis.call('TYPE', key)['ok']
  return found == kind or found == 'none'
end

local listed = holds(KEYS[2], 'set')
local lists = {}  -- queue -> whether its key takes an LPUSH (looked at once a call)
local function takes(queue)
  if lists[queue] == nil then lists[queue] = holds(ARGV[3] .. queue, 'list') end
  return lists[queue]
end

for _, member in ipairs(due) do
  local queue, has_key = queue_of(member)
  local head = queue and listed and takes(queue) and string.match(member, '^(.*)}%s*$')
  if head then
    redis.call('ZREM', KEYS[1], member)
    redis.call('SADD', KEYS[2], queue)
    redis.call('LPUSH', ARGV[3] .. queue, stamped(member, head, has_key))
    moved = moved + 1
  else
    skipped = skipped + 1
  end
end
return {moved, skipped}
