-- Reads a window of a conversation in one step: whether it exists, then its messages with
-- lower <= seq <= upper, newest first, at most `limit` of them (-1 for all).
-- KEYS: 1 conversation hash, 2 messages zset. ARGV: 1 lower, 2 upper, 3 limit.
-- Returns {} when the conversation is missing, else {"ok", member_1, seq_1, ...}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
local window = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[2], ARGV[1], 'WITHSCORES',
  'LIMIT', 0, ARGV[3])
table.insert(window, 1, 'ok')
return window
