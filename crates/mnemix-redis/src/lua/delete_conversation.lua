-- Deletes a conversation with its messages, id index, cursors, working memory and the vector
-- records that name it. KEYS: 1 conversation hash, 2 conversations zset, 3.. the
-- conversation's other keys. ARGV: 1 id, 2 the scope's key prefix, 3 a fresh version token
-- for the vector records it changes.
-- Returns 1 when it existed, else 0.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('DEL', unpack(KEYS, 3))
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
-- A vector record starts with its conversation id and NUL.
local owner = ARGV[1] .. '\0'
for _, incarnation in ipairs(redis.call('SMEMBERS', ARGV[2] .. 'vc')) do
  local records = ARGV[2] .. 'v:' .. incarnation
  local all = redis.call('HGETALL', records)
  local removed = 0
  for i = 1, #all, 2 do
    if string.sub(all[i + 1], 1, #owner) == owner then
      removed = removed + redis.call('HDEL', records, all[i])
    end
  end
  if removed > 0 then
    redis.call('SET', ARGV[2] .. 'vt:' .. incarnation, ARGV[3])
  end
end
return 1
