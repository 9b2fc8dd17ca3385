-- Writes messages verbatim (restore): each replaces the stored message with its id or its seq.
-- KEYS: 1 messages zset, 2 ids hash. ARGV: quadruples of seq, id, canonical content, body.
for i = 1, #ARGV, 4 do
  local seq, id = ARGV[i], ARGV[i + 1]
  local old = redis.call('HGET', KEYS[2], id)
  if old then
    local old_seq = string.sub(old, 1, string.find(old, ':', 1, true) - 1)
    redis.call('ZREMRANGEBYSCORE', KEYS[1], old_seq, old_seq)
  end
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], seq, seq)) do
    redis.call('HDEL', KEYS[2], string.sub(member, 1, string.find(member, '\0', 1, true) - 1))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], seq, seq)
  redis.call('ZADD', KEYS[1], seq, id .. '\0' .. ARGV[i + 3])
  redis.call('HSET', KEYS[2], id, seq .. ':' .. redis.sha1hex(ARGV[i + 2]))
end
return #ARGV / 4
