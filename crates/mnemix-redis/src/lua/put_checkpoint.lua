-- Creates a checkpoint at version 1 unless its id is taken. KEYS: 1 checkpoint hash,
-- 2 suspended zset, 3 set of every checkpoint id. ARGV: 1 id, 2 workflow, 3 status, 4 state,
-- 5 now. Returns 1, or 0 when taken.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'workflow', ARGV[2], 'status', ARGV[3], 'state', ARGV[4],
  'version', 1, 'created_at', ARGV[5], 'updated_at', ARGV[5])
redis.call('SADD', KEYS[3], ARGV[1])
if ARGV[3] == 'suspended' then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
end
return 1
