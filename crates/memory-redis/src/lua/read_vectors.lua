-- Reads a scope's records of one collection incarnation for a search, unless the caller holds
-- them already. KEYS: 1 the records hash, 2 its version token. ARGV: 1 the token of the
-- caller's copy, or "". Returns {token} when it is the current one, else {token or "", id_1,
-- record_1, ...} (no token: the records were never written or were erased since).
local token = redis.call('GET', KEYS[2]) or ''
if token ~= '' and token == ARGV[1] then
  return {token}
end
local reply = redis.call('HGETALL', KEYS[1])
table.insert(reply, 1, token)
return reply
