-- Records a limiter where every process and the dashboard find it: its metadata hash and
-- its name in the index of known limiters.
--
-- KEYS[1]  lmtr:<name>    KEYS[2]  lmtr-list
-- ARGV[1]  name    ARGV[2]  type    ARGV[3]  options (JSON)    ARGV[4]  fingerprint
-- ARGV[5]  ttl, s
own(KEYS[1], 'hash')
own(KEYS[2], 'set')
redis.call('HSET', KEYS[1], 'type', ARGV[2], 'options', ARGV[3], 'fingerprint', ARGV[4])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
redis.call('SADD', KEYS[2], ARGV[1])
return reply(1, 0)
