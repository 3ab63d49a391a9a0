-- The next page of a walk through a queue list, found and read in one step: where the walk
-- stopped is looked up (LPOS) and the entries after it read (LRANGE) with nothing running in
-- between. Done as two round trips, a consumer popping the list's tail could take the entry
-- just found before it was read from, again and again, at the very end of a walk.
--
-- Where to read on: after the oldest entry of the last page still in the list (the walk
-- yielded them all); when none is left, from the entry that followed that page (a page
-- deleted from the middle, as `each { |job| job.delete }` does); nothing when that is gone
-- too (consumers popped past the page: the walk is over). Pushes, pops and deletions keep
-- the order of the entries that stay, so the first of the page found from its oldest end is
-- the oldest one present.
--
-- KEYS[1] the list   ARGV[1] the page size   ARGV[2] '1' when ARGV[3] is the entry that
-- followed the last page, '0' when there was none   ARGV[4..] the last page, newest first
-- Returns {index of the next page's first entry, up to page size + 1 entries from there},
-- or false when the walk is over (the key no longer a list included).
local key, size = KEYS[1], tonumber(ARGV[1])

-- A key that is no longer a list (deleted, or written over by hand) ends the walk, as the
-- reads before it found it absent.
if redis.call('TYPE', key).ok ~= 'list' then return false end

local function from(start)
  return {start, redis.call('LRANGE', key, start, start + size)}
end

for i = #ARGV, 4, -1 do
  local at = redis.call('LPOS', key, ARGV[i])
  if at then return from(at + 1) end
end
if ARGV[2] == '1' then
  local at = redis.call('LPOS', key, ARGV[3])
  if at then return from(at) end
end
return false
