-- Campaign for leadership of this Redis, or renew it, in one atomic step.
--
-- KEYS[1]  dear-leader        KEYS[2]  leader-token
-- ARGV[1]  our identity       ARGV[2]  how long the key lives, whole seconds
-- ARGV[3]  the token of the term we believe we hold, or '' when we believe we follow
--
-- Returns {1, token} while we lead, or {0, holder, milliseconds left on its key} while
-- another process does. A new term (taking the key, or finding it ours while we believed
-- we followed) INCRs leader-token, so tokens only grow. The key's life runs on Redis's
-- clock, never the caller's: a leader whose key expired and was taken cannot renew over
-- the new leader, because the holder is compared in the same step that renews.

--
-- Either key holding another Redis type (written by hand or by something else, with no TTL)
-- failed every campaign with WRONGTYPE: it names no process and counts no term, so it is
-- deleted, and the reply ends with {key, the type it held, ...}, to be warned about. A
-- token INCR cannot count on (not digits, a leading zero, 19 digits or more) is refused
-- before any write, naming the key.

-- (``own`` and ``replaced``: owned.lua, the prelude.)
for _, key in ipairs(KEYS) do own(key, 'string') end
local function reply(values)
  for _, value in ipairs(replaced) do values[#values + 1] = value end
  return values
end

local token = redis.call('GET', KEYS[2])
if token and token ~= '0' and not (string.match(token, '^[1-9]%d*$') and #token <= 18) then
  return redis.error_reply('leader-token holds ' .. string.format('%q', string.sub(token, 1, 40)) ..
    ', not a whole number Redis can count on; delete the key so the count starts again')
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' and token == ARGV[3] then
    return reply({1, token})
  end
  return reply({1, tostring(redis.call('INCR', KEYS[2]))})
end
if holder then
  return reply({0, holder, redis.call('PTTL', KEYS[1])})
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return reply({1, tostring(redis.call('INCR', KEYS[2]))})
