-- Delete the jobs of one queue whose jid, or whose class, is the one asked for: Sidekiq
-- Pro's Queue#delete_job and #delete_by_class, done inside Redis one page at a time. The
-- caller sends the next page until the script says it reached the end, so no call holds
-- Redis for long however long the queue is.
--
-- KEYS[1] the queue list
-- ARGV[1] the payload field to match: 'jid' (the first match only) or 'class'
-- ARGV[2] the value it must have
-- ARGV[3] the index to start at (0: the head, where pushes arrive)
-- ARGV[4] how many entries this call looks at
-- ARGV[5] '1' when a matching entry must contain ARGV[2] as written (a cheap test before
--         decoding); '' when JSON may have escaped it
-- ARGV[6] the text every unique job's JSON contains (its lock field's name, quoted)
-- ARGV[7] the text every job keeping its result contains (its field's name, quoted; '':
--         none asked for)
-- Returns {jobs deleted, the index to start the next page at (-1: done), the stored text of
-- each deleted job that contains ARGV[6] or ARGV[7]...}: the caller releases those locks
-- and records those results ("deleted").
--
-- An entry is matched by decoding it only to read the field; one that is not a JSON object
-- (hostile or corrupt) is skipped. Matches are first overwritten with a marker no job can
-- be, then removed with one LREM from the nearer end of the list, which stops after the
-- last of them: the cost of a call is one page plus, when it deleted something, a walk to
-- that page — never a walk of the whole list per job.
--
-- A key of another type (written by hand) has nothing to delete, as the queue's size and
-- pages read it: {0, -1}, the key left alone.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'list' then return {0, -1} end
local field, wanted = ARGV[1], ARGV[2]
local start, page = tonumber(ARGV[3]), tonumber(ARGV[4])
local verbatim, mark, keeps = ARGV[5] == '1', ARGV[6], ARGV[7] or ''

local rows = redis.call('LRANGE', KEYS[1], start, start + page - 1)

local function matches(entry)
  if verbatim and not string.find(entry, wanted, 1, true) then return false end
  local ok, job = pcall(cjson.decode, entry)
  return ok and type(job) == 'table' and job[field] == wanted
end

local now = redis.call('TIME')
local tomb = '\0wurk:deleting:' .. now[1] .. '.' .. now[2] .. '\0'
local deleted, holding = 0, {}
for i, entry in ipairs(rows) do
  if matches(entry) then
    redis.call('LSET', KEYS[1], start + i - 1, tomb)
    deleted = deleted + 1
    if string.find(entry, mark, 1, true)
        or (keeps ~= '' and string.find(entry, keeps, 1, true)) then
      holding[#holding + 1] = entry
    end
    if field == 'jid' then break end
  end
end

if deleted > 0 then
  local last = start + #rows
  if last <= redis.call('LLEN', KEYS[1]) - start then
    redis.call('LREM', KEYS[1], deleted, tomb)
  else
    redis.call('LREM', KEYS[1], -deleted, tomb)
  end
end

local next_start = start + #rows - deleted
if #rows < page or (field == 'jid' and deleted > 0) then next_start = -1 end
local reply = {deleted, next_start}
for _, entry in ipairs(holding) do reply[#reply + 1] = entry end
return reply
