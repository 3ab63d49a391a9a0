-- Take jobs out of a batch's accounting (batch_lib.lua): Sidekiq Pro's Batch#remove_jobs,
-- for jobs deleted or given up on that would otherwise hold the batch open for ever.
-- A removed job no longer counts towards total and pending (nor failures, if it had
-- failed). Only a job that has not succeeded can be removed: one still pending (-jids) or
-- dead (-died). The job itself stays wherever it is; should it run later, its count changes
-- nothing, as for any jid the batch does not hold. Then whatever is now due fires:
-- removing the last pending jobs completes the batch.
--
-- ARGV[1..4]  prefix, timestamp format, dead timeout, hand back
-- ARGV[5]     bid
-- ARGV[6..]   the jids
-- Returns reply(jobs removed), reply(0) when the batch does not exist or one of its keys
-- holds another Redis type (nothing removed; the problem says so) (batch_lib.lua).
init(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local bid = ARGV[5]
local h = bkey(bid)
if redis.call('EXISTS', h) == 0 then return reply(0) end
if broken(bid, 'no job is removed from it') then return reply(0) end
local jids = {}
for i = 6, #ARGV do jids[#jids + 1] = ARGV[i] end
return reply(remove_jids(bid, jids))
