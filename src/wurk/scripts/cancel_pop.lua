-- Pops a process's cancels (`wurk:cancel:<identity>`, a list of jids that `wurk.cancel`
-- pushes), one entry at a time so a hostile entry of any size is never copied whole: an
-- entry comes back cut to ARGV[2] bytes, with its length, and the caller drops what is
-- longer than a jid may be.
--
-- KEYS[1]  the cancels list
-- ARGV[1]  how many entries at most       ARGV[2]  the longest entry returned whole
--
-- Returns {replaced, text1, length1, text2, length2, ...}: replaced is the Redis type the
-- key held when it was not a list (it is deleted, with what it held), else ''.

own(KEYS[1], 'list')
local out = {replaced[2] or ''}
local longest = tonumber(ARGV[2])
for _ = 1, tonumber(ARGV[1]) do
  local entry = redis.call('LPOP', KEYS[1])
  if not entry then break end
  out[#out + 1] = string.sub(entry, 1, longest)
  out[#out + 1] = #entry
end
return out
