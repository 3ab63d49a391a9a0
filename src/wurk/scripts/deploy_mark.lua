-- A deploy mark: the label's lock and the minute's mark in one step, so a connection lost
-- on the way leaves both written or neither (never a lock whose mark was not written).
-- KEYS[1] the day's marks hash, KEYS[2] the label's lock
-- ARGV[1] the minute's stamp, ARGV[2] the label, ARGV[3] the lock's seconds,
-- ARGV[4] the marks' seconds
-- Returns 1 written; 0 not (the lock is held, or another label marks this minute);
-- the marks key's type when it is not a hash (nothing written, the lock left free).
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
  return kind
end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'EX', ARGV[3]) then
  return 0
end
local written = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return written
