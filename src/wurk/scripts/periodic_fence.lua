-- Shared by the periodic scripts that fire a loop's tick (periodic_fire.lua, and on a
-- cluster periodic_mark.lua; their text follows this one in a single chunk): a write is made
-- only by the process holding dear-leader in the newest term. A leader paused past its key's
-- life, or cut off in a partition, is refused here even before the per-loop mark.
--
-- KEYS[1]  dear-leader        KEYS[2]  leader-token        KEYS[3]  loops:<lid>
-- ARGV[1]  our identity       ARGV[2]  our term's token
-- ARGV[3]  the tick, epoch s  ARGV[4]  the next tick (nf)   ARGV[5]  catch-up, s

local function refused()
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'not-leader' end
  if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 'stale-token' end
  return nil
end

-- Whether the tick is not to fire now, by Redis's clock: {'done', lf} when it (or a later
-- one) already fired, {'early'} / {'late'} when it has not come or is past catching up,
-- {'paused'} (nf moves on); nil when it is due. An lf more than an hour past Redis's time
-- (inf, 1e400, year 5138: no tick fires before its time) is no tick that fired, and is
-- disregarded as the poller does (wurk.periodic.loops.CLOCK_SLACK): believed, it stopped
-- the loop for good.
local function undue()
  local tick = tonumber(ARGV[3])
  local time = redis.call('TIME')
  local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
  local last = redis.call('HGET', KEYS[3], 'lf')
  local fired = tonumber(last)
  if fired and fired >= tick and fired <= now + 3600 then return {'done', last} end
  if tick > now then return {'early'} end
  if now - tick > tonumber(ARGV[5]) then return {'late'} end
  if redis.call('HGET', KEYS[3], 'paused') == '1' then
    redis.call('HSET', KEYS[3], 'nf', ARGV[4])
    return {'paused'}
  end
  return nil
end
