-- Replaces a conversation's document if it is still the one read (compare-and-set).
-- KEYS: 1 conversation hash. ARGV: 1 document read, 2 new document, 3 now.
-- Returns 1, 0 when the document changed meanwhile, -1 when the conversation is gone.
local doc = redis.call('HGET', KEYS[1], 'doc')
if not doc then
  return -1
end
if doc ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'updated_at', ARGV[3])
return 1
