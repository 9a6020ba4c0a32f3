-- Hand-written shape: a token bucket in a hash, HMGET, refill in whole
-- intervals, HSET and PEXPIRE (the shape of Upstash's tokenBucket script;
-- the client passes its own clock). A baseline for FCALL rl_admit ALGO
-- token, not its equal: the client's clock, refills in steps, the expiry
-- relative.
--
--   EVALSHA <sha> 1 <key> <max_tokens> <interval_ms> <refill> <now_ms> <cost>
--
-- Reply: {tokens left (-1: refused), ms until the next refill}.

local key = KEYS[1]
local max, interval, refill = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now, cost = tonumber(ARGV[4]), tonumber(ARGV[5])
local bucket = redis.call('HMGET', key, 'refilledAt', 'tokens')
local refilled, tokens = now, max
if bucket[1] then
  refilled, tokens = tonumber(bucket[1]), tonumber(bucket[2])
end
if now >= refilled + interval then
  local steps = math.floor((now - refilled) / interval)
  tokens = math.min(max, tokens + steps * refill)
  refilled = refilled + steps * interval
end
if tokens == 0 and cost > 0 then
  return {-1, refilled + interval - now}
end
local left = tokens - cost
redis.call('HSET', key, 'refilledAt', refilled, 'tokens', left)
redis.call('PEXPIRE', key, math.ceil((max - left) / refill) * interval)
return {left, refilled + interval - now}
