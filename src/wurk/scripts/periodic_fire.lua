-- Push one loop's job for one tick, at most once per tick across every process: the loop's
-- last fired tick (lf) is checked and set in the same step as the push.
--
-- KEYS[1..2] as periodic_fence.lua   KEYS[3]  loops:<lid>   KEYS[4]  queues
-- KEYS[5]  queue:<name>              KEYS[6]  loop-history:<lid>
-- ARGV[1..2] as periodic_fence.lua   ARGV[3]  the tick, epoch s   ARGV[4]  the next tick (nf)
-- ARGV[5]  catch-up, s (an older tick is refused)   ARGV[6]  the queue name
-- ARGV[7]  the payload, final JSON   ARGV[8]  its jid   ARGV[9]  history entries kept
--
-- Returns {'fired'}; or {'done', lf} when this tick (or a later one) already fired;
-- {'paused'} (nf moves on, nothing is pushed); {'early'} / {'late'} when Redis's clock says
-- the tick has not come or is past catching up; {'gone'} when the loop was pruned;
-- {'wrong-type', key} when the queue (or `queues`) is not a list (a set); or the fence's
-- refusal. The payload is pushed as given, never re-encoded (cjson would round
-- big integers and reorder keys).

local function kind(key) return redis.call('TYPE', key)['ok'] end

local fence = refused()
if fence then return {fence} end
if redis.call('EXISTS', KEYS[3]) == 0 then return {'gone'} end
-- Checked before any write: a script stopped by an error keeps the writes made before it,
-- and lf set without the push would lose the tick.
if kind(KEYS[4]) ~= 'set' and kind(KEYS[4]) ~= 'none' then return {'wrong-type', KEYS[4]} end
if kind(KEYS[5]) ~= 'list' and kind(KEYS[5]) ~= 'none' then return {'wrong-type', KEYS[5]} end
if kind(KEYS[6]) ~= 'list' then redis.call('DEL', KEYS[6]) end
local not_due = undue()
if not_due then return not_due end
redis.call('HSET', KEYS[3], 'lf', ARGV[3], 'nf', ARGV[4])
redis.call('SADD', KEYS[4], ARGV[6])
redis.call('LPUSH', KEYS[5], ARGV[7])
redis.call('LPUSH', KEYS[6], '[' .. ARGV[3] .. ',"' .. ARGV[8] .. '"]')
redis.call('LTRIM', KEYS[6], 0, tonumber(ARGV[9]) - 1)
return {'fired'}
