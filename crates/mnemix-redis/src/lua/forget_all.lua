-- Erases everything a subject owns and counts it by kind. KEYS: 1 the scope's `convs` zset.
-- ARGV: 1 base, 2 now (ms). Returns {conversations, messages, cursors, working memory, facts,
-- vectors, checkpoints}. Expired facts are removed uncounted, as `forget` reports them.
local base = ARGV[1]
purge_expired(base, ARGV[2])
local counts = {0, 0, 0, 0, 0, 0, 0}
for _, id in ipairs(redis.call('ZRANGE', base .. 'convs', 0, -1)) do
  counts[1] = counts[1] + 1
  counts[2] = counts[2] + redis.call('ZCARD', base .. 'cm:' .. id)
  counts[3] = counts[3] + redis.call('HLEN', base .. 'cc:' .. id)
  counts[4] = counts[4] + redis.call('DEL', base .. 'cw:' .. id)
  redis.call('DEL', base .. 'c:' .. id, base .. 'cm:' .. id, base .. 'ci:' .. id,
    base .. 'cc:' .. id)
end
redis.call('DEL', base .. 'convs')
counts[4] = counts[4] + redis.call('DEL', base .. 'w')
for _, id in ipairs(redis.call('ZRANGE', base .. 'fs', 0, -1)) do
  counts[5] = counts[5] + remove_fact(base, id)
end
redis.call('DEL', base .. 'fv')
for _, incarnation in ipairs(redis.call('SMEMBERS', base .. 'vc')) do
  counts[6] = counts[6] + redis.call('HLEN', base .. 'v:' .. incarnation)
  redis.call('DEL', base .. 'v:' .. incarnation, base .. 'vt:' .. incarnation)
end
redis.call('DEL', base .. 'vc')
for _, id in ipairs(redis.call('SMEMBERS', base .. 'ka')) do
  counts[7] = counts[7] + redis.call('DEL', base .. 'k:' .. id)
end
redis.call('DEL', base .. 'ka', base .. 'ks')
return counts
