-- Step down: delete dear-leader only if it still names us (a leader whose key expired and
-- was taken must not delete the new leader's). The token is left as it is: it only grows.
--
-- KEYS[1]  dear-leader        ARGV[1]  our identity
-- Returns 1 when we held it, else 0.

-- A key of another type names nobody: left alone (the next campaign replaces it).

if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
