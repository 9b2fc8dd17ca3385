-- Sets or removes the expiry of facts, all in one step.
-- KEYS: 1 the scope's `fs` zset. ARGV: 1 base, 2 now, 3 expires_at or "" (permanent),
-- 4 the facts' new version token (`fv`, set when a fact changes), 5... ids. Returns the ids of
-- the live facts changed; unknown and expired ids are left alone.
local base, now, expires_at = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local changed = {}
for i = 5, #ARGV do
  local id = ARGV[i]
  local key = base .. 'f:' .. id
  local fields = redis.call('HMGET', key, 'created_at', 'expires_at')
  local live = fields[1] and (fields[2] == '' or fields[2] == false or tonumber(fields[2]) > now)
  if live then
    redis.call('HSET', key, 'expires_at', expires_at, 'updated_at', ARGV[2])
    if expires_at == '' then
      redis.call('ZREM', base .. 'fx', id)
    else
      redis.call('ZADD', base .. 'fx', expires_at, id)
    end
    changed[#changed + 1] = id
  end
end
if #changed > 0 then
  redis.call('SET', base .. 'fv', ARGV[4])
end
return changed
