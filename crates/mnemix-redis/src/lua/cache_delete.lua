-- Removes a cache entry. KEYS: 1 entry hash, 2 index zset. ARGV: 1 key, 2 now (store clock).
-- Returns 1 when an unexpired entry existed, else 0.
local expires = redis.call('HGET', KEYS[1], 'expires_at')
local live = redis.call('EXISTS', KEYS[1]) == 1 and (not expires or tonumber(expires) > tonumber(ARGV[2]))
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if live then
  return 1
end
return 0
