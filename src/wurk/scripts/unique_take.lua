-- A unique job's lock taken for a run that pushes nothing (``perform_inline``).
--
-- KEYS[1]  unique:<digest>    ARGV[1]  the job's jid    ARGV[2]  unique_for, ms
--
-- Returns false when taken (or already this jid's), the jid holding it when the run is a
-- duplicate, or {key, type, ...} when a lock of another Redis type, or one without an
-- expiry, was replaced by this one (to be warned about), as the push script does.
local holder = lock_holder(KEYS[1], ARGV[1])
if holder and holder ~= ARGV[1] then return holder end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if #replaced > 0 then return replaced end
return false
