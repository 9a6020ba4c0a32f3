-- Prefill of the lease rows of `make bench` and the instruction budget:
-- KEYS[1] becomes a lease key holding ARGV[1] expired leases (deadlines
-- 10 s ago, a thousand to a ms, generated-form ids: what that many
-- RL.ACQUIREs with a short TTL leave once it ran out) and one live lease,
-- `long`, whose deadline (now + 1 h) is the key's expiry.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[1])
local batch = {}
for i = 1, n do
  local at = now - 10000 + math.floor(i / 1000)
  batch[#batch + 1] = at
  batch[#batch + 1] = string.format('%x-%016x', at, i)
  if #batch == 2000 or i == n then
    redis.call('ZADD', KEYS[1], unpack(batch))
    batch = {}
  end
end
redis.call('ZADD', KEYS[1], now + 3600000, 'long')
return redis.call('PEXPIREAT', KEYS[1], now + 3600000)
