-- Deletes a fact. KEYS: 1 the scope's `fs` zset. ARGV: 1 base, 2 id, 3 now, 4 the facts' new
-- version token. Returns 1 when an unexpired fact existed, else 0.
local base, id = ARGV[1], ARGV[2]
local expires = redis.call('HGET', base .. 'f:' .. id, 'expires_at')
local live = expires == false or expires == '' or tonumber(expires) > tonumber(ARGV[3])
if remove_fact(base, id) == 1 then
  new_facts_version(base, ARGV[4])
  if live then
    return 1
  end
end
return 0
