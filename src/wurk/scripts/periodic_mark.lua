-- Redis Cluster, step 1 of a periodic run (wurk.periodic.cluster), in the default keyspace:
-- the checks of periodic_fire.lua, then the loop's last fired tick (lf) is set and the run
-- is recorded as pending — the job itself is pushed by periodic_push_once.lua in its
-- queue's keyspace (another slot), and the pending record is cleared by periodic_settle.lua
-- once that push is known. A leader lost between the steps leaves the pending record, which
-- the next look of any leader completes: the run is neither lost nor pushed twice.
--
-- KEYS[1..2] as periodic_fence.lua   KEYS[3]  loops:<lid>   KEYS[4]  wurk:loop-pending:<lid>
-- ARGV[1..2] as periodic_fence.lua   ARGV[3]  the tick, epoch s   ARGV[4]  the next tick (nf)
-- ARGV[5]  catch-up, s               ARGV[6]  the queue name      ARGV[7]  the payload JSON
-- ARGV[8]  its jid                   ARGV[9]  the pending record's life, s
--
-- Returns {'marked'}; {'pending', tick} when an earlier run of the loop is still pending
-- (it is completed first); otherwise as periodic_fire.lua: {'done', lf}, {'paused'},
-- {'early'}, {'late'}, {'gone'} or the fence's refusal.

local fence = refused()
if fence then return {fence} end
if redis.call('EXISTS', KEYS[3]) == 0 then return {'gone'} end
local pending_type = redis.call('TYPE', KEYS[4])['ok']
if pending_type ~= 'none' and pending_type ~= 'hash' then redis.call('DEL', KEYS[4]) end
local waiting = redis.call('HGET', KEYS[4], 'tick')
if waiting then return {'pending', waiting} end
local not_due = undue()
if not_due then return not_due end
redis.call('HSET', KEYS[3], 'lf', ARGV[3], 'nf', ARGV[4])
redis.call('HSET', KEYS[4], 'tick', ARGV[3], 'jid', ARGV[8], 'queue', ARGV[6],
           'payload', ARGV[7])
redis.call('EXPIRE', KEYS[4], tonumber(ARGV[9]))
return {'marked'}
