-- Writes a cache entry and its index entry. KEYS: 1 entry hash, 2 index zset (score expires_at,
-- +inf without). ARGV: 1 key, 2 value, 3 expires_at (store clock) or "", 4 milliseconds until
-- then: the server's own expiry cleans up behind reads, which go by the store's clock;
-- 5 now (store clock): index entries expired by then go.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
redis.call('DEL', KEYS[1])
if ARGV[3] == '' then
  redis.call('HSET', KEYS[1], 'value', ARGV[2])
  redis.call('ZADD', KEYS[2], '+inf', ARGV[1])
else
  redis.call('HSET', KEYS[1], 'value', ARGV[2], 'expires_at', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[4]), 1))
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return 1
