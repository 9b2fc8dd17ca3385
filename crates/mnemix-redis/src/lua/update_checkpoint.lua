-- A version-fenced checkpoint update. KEYS: 1 checkpoint hash, 2 suspended zset (score
-- updated_at). ARGV: 1 id, 2 expected version, 3 status, 4 state, 5 now.
-- Returns {"ok", workflow, created_at}, {"not_found"} or {"conflict", current version}.
local version = redis.call('HGET', KEYS[1], 'version')
if not version then
  return {'not_found'}
end
if tonumber(version) ~= tonumber(ARGV[2]) then
  return {'conflict', version}
end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'state', ARGV[4], 'version', tonumber(version) + 1,
  'updated_at', ARGV[5])
if ARGV[3] == 'suspended' then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return {'ok', redis.call('HGET', KEYS[1], 'workflow'), redis.call('HGET', KEYS[1], 'created_at')}
