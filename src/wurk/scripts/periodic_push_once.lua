-- Redis Cluster, step 2 of a periodic run (wurk.periodic.cluster), in the job's queue's
-- keyspace: push the run's job unless this run was pushed already. The run's key (named by
-- its jid, a digest of the loop and the tick) is set with the push, in the same step, so a
-- second try — the same leader after a broken connection, or a new leader completing a run
-- its predecessor marked — pushes nothing. Not fenced: the leader's keys are in another
-- slot; the run's key alone makes it at most once, and only a marked run is ever tried.
--
-- KEYS[1]  wurk:periodic-run:<jid>   KEYS[2]  queues   KEYS[3]  queue:<name>
-- ARGV[1]  the queue name   ARGV[2]  the payload, final JSON   ARGV[3]  the tick, epoch s
-- ARGV[4]  catch-up, s      ARGV[5]  the run key's life, s (longer than catch-up)
--
-- Returns {'pushed'}; {'already'} when this run was pushed before; {'late'} when the tick is
-- older than catch-up by this node's clock (not pushed, as on one Redis); {'wrong-type', key}
-- when the queue (or `queues`) holds another type. The payload is pushed as given.

local function kind(key) return redis.call('TYPE', key)['ok'] end

if redis.call('EXISTS', KEYS[1]) == 1 then return {'already'} end
if kind(KEYS[2]) ~= 'set' and kind(KEYS[2]) ~= 'none' then return {'wrong-type', KEYS[2]} end
if kind(KEYS[3]) ~= 'list' and kind(KEYS[3]) ~= 'none' then return {'wrong-type', KEYS[3]} end
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
if now - tonumber(ARGV[3]) > tonumber(ARGV[4]) then return {'late'} end
redis.call('SET', KEYS[1], ARGV[3], 'EX', tonumber(ARGV[5]))
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[2])
return {'pushed'}
