-- Drops a collection's spec and hands back where its vectors live, for the caller to delete
-- them scope by scope (other slots). KEYS: 1 collections hash. ARGV: 1 name, 2 the
-- namespace's key prefix. Returns {} when missing, else {incarnation, scope prefix...}.
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
  return {}
end
redis.call('HDEL', KEYS[1], ARGV[1])
local incarnation = string.sub(value, 1, string.find(value, '\0', 1, true) - 1)
local holders = ARGV[2] .. 'vs:' .. incarnation
local reply = redis.call('SMEMBERS', holders)
redis.call('DEL', holders)
table.insert(reply, 1, incarnation)
return reply
