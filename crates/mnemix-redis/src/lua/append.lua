-- Appends a batch to a conversation atomically: seq allocation, idempotency by message id,
-- compare-and-append and storage-limit pruning (the rules of mnemix_core::plan_append).
-- KEYS: 1 conversation hash, 2 messages zset (score seq, member id NUL body), 3 ids hash
--       (id -> "seq:sha1 of content")
-- ARGV: 1 now, 2 expected last_seq or "", 3 max messages or "", 4.. triples of
--       (id, canonical content, body)
-- Returns {"ok", last_seq, pruned, seq_1, kind_1, ...} with kind "new" or "dup" per message
-- in batch order, or an error tuple {"not_found"} / {"conflict", id} / {"invalid", id} /
-- {"stale", last_seq}.
local function int(n) return string.format('%d', n) end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_found'}
end
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq'))
local results = {}
local fresh = {}
local in_batch = {}
for i = 4, #ARGV, 3 do
  local id, content, body = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local digest = redis.sha1hex(content)
  local stored = redis.call('HGET', KEYS[3], id)
  if stored then
    local sep = string.find(stored, ':', 1, true)
    if string.sub(stored, sep + 1) ~= digest then
      return {'conflict', id}
    end
    results[#results + 1] = string.sub(stored, 1, sep - 1)
    results[#results + 1] = 'dup'
  elseif in_batch[id] then
    if in_batch[id].digest ~= digest then
      return {'invalid', id}
    end
    results[#results + 1] = int(in_batch[id].seq)
    results[#results + 1] = 'dup'
  else
    local seq = last + #fresh + 1
    in_batch[id] = {seq = seq, digest = digest}
    fresh[#fresh + 1] = {id = id, seq = seq, body = body, digest = digest}
    results[#results + 1] = int(seq)
    results[#results + 1] = 'new'
  end
end
if #fresh == 0 then
  return {'ok', int(last), '0', unpack(results)}
end
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= last then
  return {'stale', int(last)}
end
for _, m in ipairs(fresh) do
  redis.call('ZADD', KEYS[2], m.seq, m.id .. '\0' .. m.body)
  redis.call('HSET', KEYS[3], m.id, int(m.seq) .. ':' .. m.digest)
end
last = last + #fresh
redis.call('HSET', KEYS[1], 'last_seq', int(last), 'updated_at', ARGV[1])
local pruned = 0
if ARGV[3] ~= '' then
  local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
  if excess > 0 then
    for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, excess - 1)) do
      redis.call('HDEL', KEYS[3], string.sub(member, 1, string.find(member, '\0', 1, true) - 1))
    end
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, excess - 1)
    pruned = excess
  end
end
return {'ok', int(last), int(pruned), unpack(results)}
