-- Delete one queued job named by where a page listed it and the SHA-1 of its bytes: the
-- dashboard's "delete" on a queue page. The page posts back this short name instead of the
-- job itself (which can be larger than any request body a dashboard accepts). The job may
-- have moved since it was listed — every push at the head moves it one further — so the
-- listed index is looked at first, then the entries after it, then those before it.
--
-- KEYS[1] the queue list   ARGV[1] the index it was listed at   ARGV[2] its SHA-1, hex
-- ARGV[3] how many entries to look at on either side of the index
-- Returns the deleted entry (the caller releases its unique lock, if it has one), or 0 when
-- no entry with that digest was within reach.
local index, digest, reach = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local CHUNK = 25  -- entries read per LRANGE: a page of large jobs stays a small read

local function take(member)
  if member and redis.sha1hex(member) == digest then
    redis.call('LREM', KEYS[1], 1, member)
    return member
  end
  return false
end

local function search(first, last)
  local from = first
  while from <= last do
    local rows = redis.call('LRANGE', KEYS[1], from, math.min(from + CHUNK - 1, last))
    if #rows == 0 then return false end
    for _, member in ipairs(rows) do
      if take(member) then return member end
    end
    from = from + CHUNK
  end
  return false
end

local found = take(redis.call('LINDEX', KEYS[1], index)) or search(index + 1, index + reach)
if not found and index > 0 then found = search(math.max(0, index - reach), index - 1) end
return found or 0
