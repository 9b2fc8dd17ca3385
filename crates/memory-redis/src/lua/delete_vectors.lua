-- Deletes vector records by id. KEYS: 1 the records hash, 2 its version token. ARGV: 1 a fresh
-- version token, then the ids. Returns how many existed.
local removed = redis.call('HDEL', KEYS[1], unpack(ARGV, 2))
if removed > 0 then
  redis.call('SET', KEYS[2], ARGV[1])
end
return removed
