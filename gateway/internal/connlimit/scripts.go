package connlimit

import "github.com/redis/go-redis/v9"

// Every script touches exactly one key, the tenant's hash (KEYS[1]), so
// it runs unchanged on a single Redis, behind Sentinel and on Cluster (the
// hash's slot is its {tenant} tag). Heartbeats are fields of that hash
// holding a deadline in the Redis server's clock (TIME, milliseconds):
//
//	<gateway id>      connections the gateway holds
//	hb:<gateway id>   the gateway's heartbeat deadline
//
// The preamble defines now, beat(gw, ttl) and alive(gw).
const preamble = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function beat(gw, ttl)
  redis.call('HSET', KEYS[1], 'hb:' .. gw, now + tonumber(ttl))
end
local function alive(gw)
  local d = redis.call('HGET', KEYS[1], 'hb:' .. gw)
  return d and tonumber(d) > now
end
`

// admitScript: KEYS[1] the tenant's hash. ARGV: gateway id, limit,
// heartbeat TTL ms, hash TTL ms, connections this gateway believes it
// holds for the tenant. Sums the counts of live gateways (dropping the
// fields of the others), refuses at the limit, else increments this
// gateway's count and beats. Returns {count after admission or -1 when
// refused, 1 if this gateway held connections but its heartbeat had
// lapsed (others may have dropped its count)}.
var admitScript = redis.NewScript(preamble + `
local h = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #h, 2 do
  local gw = h[i]
  if string.sub(gw, 1, 3) ~= 'hb:' then
    if gw == ARGV[1] or alive(gw) then
      total = total + tonumber(h[i + 1])
    else
      redis.call('HDEL', KEYS[1], gw, 'hb:' .. gw)
    end
  end
end
local lapsed = 0
if tonumber(ARGV[5]) > 0 and not alive(ARGV[1]) then
  lapsed = 1
end
if total >= tonumber(ARGV[2]) then
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    beat(ARGV[1], ARGV[3])
  end
  return {-1, lapsed}
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
beat(ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {total + 1, lapsed}
`)

// adjustScript: KEYS[1] the tenant's hash; ARGV gateway id, delta,
// heartbeat TTL ms, hash TTL ms. Adds delta to this gateway's count,
// deleting its fields at zero or below, else beating.
var adjustScript = redis.NewScript(preamble + `
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
if n <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1], 'hb:' .. ARGV[1])
else
  beat(ARGV[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return n
`)

// setScript: KEYS[1] the tenant's hash; ARGV gateway id, absolute count,
// heartbeat TTL ms, hash TTL ms. Writes this gateway's count (deleting its
// fields when it is zero) and beats.
var setScript = redis.NewScript(preamble + `
if tonumber(ARGV[2]) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1], 'hb:' .. ARGV[1])
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
beat(ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 0
`)

// touchScript: KEYS[1] the tenant's hash; ARGV gateway id, heartbeat TTL
// ms, hash TTL ms. The heartbeat refresh of a tenant this gateway holds
// connections for: beats and extends the hash. Returns {1 when the
// gateway's heartbeat had lapsed (others may have dropped its count), else
// 0; the gateway's count, 0 when it has none}.
var touchScript = redis.NewScript(preamble + `
local lapsed = 0
if not alive(ARGV[1]) then
  lapsed = 1
end
local n = redis.call('HGET', KEYS[1], ARGV[1])
if not n then
  return {1, 0}
end
beat(ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {lapsed, tonumber(n)}
`)
