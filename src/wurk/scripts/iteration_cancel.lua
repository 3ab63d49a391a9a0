-- Cancel an iterable job: mark its state hash, once, with Redis's own clock.
-- KEYS[1] = it-<jid>; ARGV[1] = TTL seconds of the state (set only when it has none).
-- Returns {'hash', the cancellation time that stands (the first request's), as epoch
-- seconds}, or {<type>} and nothing written when the key is of another Redis type.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
  return {kind}
end
local now = redis.call('TIME')[1]
redis.call('HSETNX', KEYS[1], 'cancelled', now)
redis.call('EXPIRE', KEYS[1], ARGV[1], 'NX')
return {'hash', redis.call('HGET', KEYS[1], 'cancelled')}
