-- Writes a fact verbatim (restore), replacing any fact of its id, with every index entry.
-- KEYS: 1 the scope's `fs` zset. ARGV: 1 base, 2 id, 3 key or "", 4 dedupe digest input,
-- 5 doc, 6 created_at, 7 score or "", 8 expires_at or "", 9 tokens, 10 updated_at,
-- 11 valid_to or "", 12 superseded_by or "", 13 the facts' new version token, 14 valid_from
-- or "", 15 valid_until or "".
local base, id, fact_key = ARGV[1], ARGV[2], ARGV[3]
remove_fact(base, id)
new_facts_version(base, ARGV[13])
local current = '0'
if ARGV[12] == '' then
  current = '1'
end
local digest = redis.sha1hex(ARGV[4])
redis.call('HSET', base .. 'f:' .. id, 'doc', ARGV[5], 'created_at', ARGV[6], 'score', ARGV[7],
  'expires_at', ARGV[8], 'key', fact_key, 'tokens', ARGV[9], 'dedupe', digest,
  'current', current, 'updated_at', ARGV[10], 'valid_to', ARGV[11], 'superseded_by', ARGV[12],
  'valid_from', ARGV[14], 'valid_until', ARGV[15])
redis.call('ZADD', base .. 'fs', ARGV[6], id)
if fact_key ~= '' then
  redis.call('ZADD', base .. 'fh:' .. fact_key, ARGV[6], id)
end
if ARGV[8] ~= '' then
  redis.call('ZADD', base .. 'fx', ARGV[8], id)
end
if current == '1' then
  -- The fact it replaces as current (a different id) becomes invisible to dedupe and recall
  -- indexes only through its own restore record; here the indexes point at this one.
  redis.call('SADD', base .. 'fc', id)
  redis.call('HSET', base .. 'fd', digest, id)
  if fact_key ~= '' then
    redis.call('HSET', base .. 'fkc', fact_key, id)
  end
  for token in string.gmatch(ARGV[9], '%S+') do
    redis.call('SADD', base .. 'ft:' .. token, id)
  end
end
return 1
