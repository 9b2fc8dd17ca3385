-- Reads the records of a search's hits with the records' version token, in one atomic step.
-- KEYS: 1 the records hash, 2 its version token. ARGV: the ids.
-- Returns {token or "", record_1 or nil, ...}.
local reply = redis.call('HMGET', KEYS[1], unpack(ARGV))
table.insert(reply, 1, redis.call('GET', KEYS[2]) or '')
return reply
