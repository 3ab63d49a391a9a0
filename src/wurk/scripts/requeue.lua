-- Gives jobs back from a private list to their queues' tails (next to run), each only if it
-- was still in the private list: a job the reaper or the shutdown's return of the in-flight
-- lists already moved is not pushed a second time.
--
-- KEYS  pairs: private list, public queue list
-- ARGV  the jobs, one per pair, as stored
-- returns  {how many went back, {queue key that held another type, its private list, …}}
--
-- A queue key holding another Redis type than a list (written by hand) is looked at before
-- the job leaves its private list: a failing RPUSH after the LREM left the job in neither
-- place (a script's earlier writes stay). Such a job stays in flight, for the reaper to
-- return once the key is mended; the caller warns about each pair named.

local lists = {}  -- queue key -> whether it takes an RPUSH (looked at once a call)
local function takes(key)
  if lists[key] == nil then
    local found = redis.call('TYPE', key)['ok']
    lists[key] = found == 'list' or found == 'none'
  end
  return lists[key]
end

local moved, refused = 0, {}
for i = 1, #ARGV do
  local private, queue = KEYS[2 * i - 1], KEYS[2 * i]
  if not takes(queue) then
    if redis.call('LPOS', private, ARGV[i]) then
      refused[#refused + 1] = queue
      refused[#refused + 1] = private
    end
  elseif redis.call('LREM', private, 1, ARGV[i]) == 1 then
    redis.call('RPUSH', queue, ARGV[i])
    moved = moved + 1
  end
end
return {moved, refused}
