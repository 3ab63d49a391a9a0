-- Keys wurk writes that anyone else may write too: one holding another Redis type than wurk
-- keeps there would make every command on it fail with WRONGTYPE (for good, when written
-- without a TTL). `own(key, kind)` deletes such a key before the script writes anything,
-- and notes it in `replaced` as {key, the type it held, ...}, for the caller to warn about.
-- Absent is fine.
local replaced = {}

local function own(key, kind)
  local held = redis.call('TYPE', key)['ok']
  if held ~= 'none' and held ~= kind then
    redis.call('DEL', key)
    replaced[#replaced + 1] = key
    replaced[#replaced + 1] = held
  end
end

