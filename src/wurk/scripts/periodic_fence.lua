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
-- {'paused'} (nf moves on); nil when it is due.
local function undue()
  local tick = tonumber(ARGV[3])
  local last = redis.call('HGET', KEYS[3], 'lf')
  if tonumber(last) and tonumber(last) >= tick then return {'done', last} end
  local time = redis.call('TIME')
  local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
  if tick > now then return {'early'} end
  if now - tick > tonumber(ARGV[5]) then return {'late'} end
  if redis.call('HGET', KEYS[3], 'paused') == '1' then
    redis.call('HSET', KEYS[3], 'nf', ARGV[4])
    return {'paused'}
  end
  return nil
end
