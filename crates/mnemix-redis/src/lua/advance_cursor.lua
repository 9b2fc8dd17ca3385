-- Moves a named cursor forward: max(current, seq). KEYS: 1 conversation hash, 2 cursors hash.
-- ARGV: 1 name, 2 seq. Returns the value, or -1 when the conversation is missing.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local current = redis.call('HGET', KEYS[2], ARGV[1])
if current and tonumber(current) >= tonumber(ARGV[2]) then
  return tonumber(current)
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return tonumber(ARGV[2])
