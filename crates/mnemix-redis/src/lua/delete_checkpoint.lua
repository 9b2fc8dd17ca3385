-- Deletes a checkpoint. KEYS: 1 checkpoint hash, 2 suspended zset, 3 id set. ARGV: 1 id.
-- Returns 1 when it existed, else 0.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
return redis.call('DEL', KEYS[1])
