-- Gives jobs back from a private list to their queues' tails (next to run), each only if it
-- was still in the private list: a job the reaper or the shutdown's return of the in-flight
-- lists already moved is not pushed a second time.
--
-- KEYS  pairs: private list, public queue list
-- ARGV  the jobs, one per pair, as stored
-- returns  how many went back

local moved = 0
for i = 1, #ARGV do
  if redis.call('LREM', KEYS[2 * i - 1], 1, ARGV[i]) == 1 then
    redis.call('RPUSH', KEYS[2 * i], ARGV[i])
    moved = moved + 1
  end
end
return moved
