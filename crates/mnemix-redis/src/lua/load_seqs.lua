-- Reads the messages at given seqs in one step: whether the conversation exists, then the
-- message at each seq (skipping seqs with none).
-- KEYS: 1 conversation hash, 2 messages zset. ARGV: the seqs, ascending.
-- Returns {} when the conversation is missing, else {"ok", member_1, seq_1, ...}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
local found = {'ok'}
for i = 1, #ARGV do
  local member = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[i], ARGV[i])[1]
  if member then
    table.insert(found, member)
    table.insert(found, ARGV[i])
  end
end
return found
