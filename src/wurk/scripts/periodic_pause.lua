-- Pause or unpause a loop, only if it still exists (a loop the leader pruned is not
-- brought back as a hash holding nothing but `paused`).
--
-- KEYS[1]  loops:<lid>        ARGV[1]  '1' to pause, '0' to unpause
-- Returns 1 when the loop was there, else 0.

if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
redis.call('HSET', KEYS[1], 'paused', ARGV[1])
return 1
