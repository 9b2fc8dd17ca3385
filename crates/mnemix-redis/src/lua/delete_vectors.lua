-- Deletes vector records by id. KEYS: 1 the records hash, 2 its version token. ARGV: 1 a fresh
-- version token, then the ids. Returns how many existed and the token the records had before
-- ('' for none, or when nothing was removed and the token stays).
local removed = redis.call('HDEL', KEYS[1], unpack(ARGV, 2))
local previous = ''
if removed > 0 then
  previous = redis.call('GET', KEYS[2]) or ''
  redis.call('SET', KEYS[2], ARGV[1])
end
return {removed, previous}
