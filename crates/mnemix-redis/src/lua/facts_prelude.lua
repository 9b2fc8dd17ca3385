-- Shared by the fact scripts. `base` is the scope's key prefix (`PREFIX:{ns:subject}:`); every
-- key built from it is in the scope's slot.
-- A fact is the hash `f:ID` (fields doc, created_at, score, expires_at, key, tokens, dedupe,
-- current, updated_at, valid_to, superseded_by) and its entries in: `fs` (every fact by
-- created_at), `fc` (current ids), `fx` (expiring ids by expires_at), `fd` (dedupe digest ->
-- current id), `fkc` (key -> current id), `fh:KEY` (versions of a key by created_at) and
-- `ft:TOKEN` (current ids by token). `fv` is the version token of the scope's facts: every script
-- that changes them sets a fresh one (never set twice, made by the caller), so a recall may rank
-- facts it holds in memory while the token stands.

-- Sets the facts' version token; returns the one it replaced ('' for none).
local function new_facts_version(base, token)
  local previous = redis.call('GET', base .. 'fv')
  redis.call('SET', base .. 'fv', token)
  return previous or ''
end

local function unindex_current(base, id)
  local fields = redis.call('HMGET', base .. 'f:' .. id, 'tokens', 'dedupe', 'key', 'current')
  if fields[4] ~= '1' then
    return
  end
  for token in string.gmatch(fields[1] or '', '%S+') do
    redis.call('SREM', base .. 'ft:' .. token, id)
  end
  if redis.call('HGET', base .. 'fd', fields[2]) == id then
    redis.call('HDEL', base .. 'fd', fields[2])
  end
  if fields[3] and fields[3] ~= '' and redis.call('HGET', base .. 'fkc', fields[3]) == id then
    redis.call('HDEL', base .. 'fkc', fields[3])
  end
  redis.call('SREM', base .. 'fc', id)
end

-- Deletes a fact and every index entry; returns 1 when it existed.
local function remove_fact(base, id)
  local key = base .. 'f:' .. id
  if redis.call('EXISTS', key) == 0 then
    return 0
  end
  unindex_current(base, id)
  local fact_key = redis.call('HGET', key, 'key')
  if fact_key and fact_key ~= '' then
    redis.call('ZREM', base .. 'fh:' .. fact_key, id)
  end
  redis.call('ZREM', base .. 'fs', id)
  redis.call('ZREM', base .. 'fx', id)
  redis.call('DEL', key)
  return 1
end

-- Deletes the facts expired at `now`; returns how many.
local function purge_expired(base, now)
  local expired = redis.call('ZRANGEBYSCORE', base .. 'fx', '-inf', now)
  for _, id in ipairs(expired) do
    remove_fact(base, id)
  end
  return #expired
end
