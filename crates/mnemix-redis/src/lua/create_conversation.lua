-- Creates a conversation unless its id is taken. KEYS: 1 conversation hash, 2 conversations
-- zset (score created_at). ARGV: 1 id, 2 created_at, 3 document. Returns 1, or 0 when taken.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'doc', ARGV[3], 'last_seq', 0, 'updated_at', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
