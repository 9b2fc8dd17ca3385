-- Creates a collection unless one of that name exists. KEYS: 1 the namespace's collections
-- hash (name -> "incarnation NUL spec JSON"), 2 its incarnation counter. ARGV: 1 name, 2 spec.
-- Returns the stored value (the existing one, or the one just made).
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  return existing
end
local value = string.format('%d', redis.call('INCR', KEYS[2])) .. '\0' .. ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], value)
return value
