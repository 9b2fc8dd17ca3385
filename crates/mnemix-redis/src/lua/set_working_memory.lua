-- Writes a working-memory document with its revision check. KEYS: 1 document hash,
-- 2 conversation hash (conversation documents; the document key again for user documents).
-- ARGV: 1 content, 2 format, 3 now, 4 expected revision or "".
-- Returns {"ok", revision}, {"not_found"} or {"conflict", current revision}.
if redis.call('EXISTS', KEYS[2]) == 0 and KEYS[2] ~= KEYS[1] then
  return {'not_found'}
end
local current = tonumber(redis.call('HGET', KEYS[1], 'revision') or '0')
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= current then
  return {'conflict', tostring(current)}
end
redis.call('HSET', KEYS[1], 'content', ARGV[1], 'format', ARGV[2], 'revision', current + 1,
  'updated_at', ARGV[3])
return {'ok', tostring(current + 1)}
