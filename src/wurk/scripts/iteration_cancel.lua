-- Cancel an iterable job: mark its state hash, once, with Redis's own clock.
-- KEYS[1] = it-<jid>; ARGV[1] = TTL seconds of the state (set only when it has none).
-- Returns the cancellation time that stands (the first request's), as epoch seconds.
local now = redis.call('TIME')[1]
redis.call('HSETNX', KEYS[1], 'cancelled', now)
redis.call('EXPIRE', KEYS[1], ARGV[1], 'NX')
return redis.call('HGET', KEYS[1], 'cancelled')
