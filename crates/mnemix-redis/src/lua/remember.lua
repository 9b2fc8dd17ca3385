-- Stores a fact: dedupe, supersede by key, max_facts eviction, in one step.
-- KEYS: 1 the scope's `fs` zset (routes the call; every other key shares its slot).
-- ARGV: 1 base, 2 now, 3 id, 4 key or "", 5 dedupe digest input (key NUL text), 6 doc,
-- 7 created_at, 8 score or "", 9 expires_at or "", 10 max_facts or "", 11 tokens (space
-- separated), 12 the facts' new version token, 13 valid_from or "", 14 valid_until or "".
-- A superseded fact's valid_until closes at the new valid_from when that is later than its own
-- start and earlier than its end (mnemix_core::adapter::closed_valid_until).
-- Returns {"duplicate", id} or {"created"|"superseded", previous or "", the version token
-- replaced or "", evicted ids...}.
local base, now, id, fact_key = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
purge_expired(base, now)
local digest = redis.sha1hex(ARGV[5])
local same = redis.call('HGET', base .. 'fd', digest)
if same then
  return {'duplicate', same}
end
local previous = ''
if fact_key ~= '' then
  previous = redis.call('HGET', base .. 'fkc', fact_key) or ''
  if previous ~= '' then
    unindex_current(base, previous)
    redis.call('HSET', base .. 'f:' .. previous, 'current', '0', 'valid_to', now,
      'superseded_by', id, 'updated_at', now)
    if ARGV[13] ~= '' then
      local start = tonumber(ARGV[13])
      local old = redis.call('HMGET', base .. 'f:' .. previous, 'valid_from', 'valid_until')
      local from, untl = tonumber(old[1] or ''), tonumber(old[2] or '')
      if (from == nil or from < start) and (untl == nil or start < untl) then
        redis.call('HSET', base .. 'f:' .. previous, 'valid_until', ARGV[13])
      end
    end
  end
end
local key = base .. 'f:' .. id
redis.call('HSET', key, 'doc', ARGV[6], 'created_at', ARGV[7], 'score', ARGV[8],
  'expires_at', ARGV[9], 'key', fact_key, 'tokens', ARGV[11], 'dedupe', digest,
  'current', '1', 'updated_at', ARGV[7], 'valid_to', '', 'superseded_by', '',
  'valid_from', ARGV[13], 'valid_until', ARGV[14])
redis.call('ZADD', base .. 'fs', ARGV[7], id)
redis.call('SADD', base .. 'fc', id)
redis.call('HSET', base .. 'fd', digest, id)
for token in string.gmatch(ARGV[11], '%S+') do
  redis.call('SADD', base .. 'ft:' .. token, id)
end
if fact_key ~= '' then
  redis.call('HSET', base .. 'fkc', fact_key, id)
  -- Versions by created_at, then id: the order of `history` on every backend.
  redis.call('ZADD', base .. 'fh:' .. fact_key, ARGV[7], id)
end
if ARGV[9] ~= '' then
  redis.call('ZADD', base .. 'fx', ARGV[9], id)
end
local status = 'created'
if previous ~= '' then
  status = 'superseded'
end
local reply = {status, previous, new_facts_version(base, ARGV[12])}
if ARGV[10] ~= '' then
  local current = redis.call('SMEMBERS', base .. 'fc')
  local excess = #current - tonumber(ARGV[10])
  if excess > 0 then
    -- Eviction order (mnemix_core::eviction_order): lowest score first (none lowest), then
    -- oldest, then id; never the fact just stored.
    local candidates = {}
    for _, other in ipairs(current) do
      if other ~= id then
        local f = redis.call('HMGET', base .. 'f:' .. other, 'score', 'created_at')
        local score = -math.huge
        if f[1] and f[1] ~= '' then
          score = tonumber(f[1])
        end
        candidates[#candidates + 1] = {id = other, score = score, created = tonumber(f[2])}
      end
    end
    table.sort(candidates, function(a, b)
      if a.score ~= b.score then return a.score < b.score end
      if a.created ~= b.created then return a.created < b.created end
      return a.id < b.id
    end)
    for i = 1, math.min(excess, #candidates) do
      remove_fact(base, candidates[i].id)
      reply[#reply + 1] = candidates[i].id
    end
  end
end
return reply
