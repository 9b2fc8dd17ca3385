-- Writes vector records of one collection incarnation in one scope. KEYS: 1 the records hash
-- (id -> record), 2 the scope's set of incarnations it holds, 3 the records' version token.
-- ARGV: 1 incarnation, 2 a fresh version token, then pairs of id and record (a repeated id ends
-- as its last record). Returns the token the records had before ('' for none), so a client
-- holding the records at that token can apply this write to its copy.
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('SADD', KEYS[2], ARGV[1])
local previous = redis.call('GET', KEYS[3])
redis.call('SET', KEYS[3], ARGV[2])
return previous or ''
