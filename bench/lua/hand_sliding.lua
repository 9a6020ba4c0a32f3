-- Hand-written shape: a sliding window as two window counters, GET both
-- and INCRBY the current one, PEXPIRE when it is new (the shape of
-- Upstash's slidingWindow script: the client names both windows' keys and
-- passes its own clock). A baseline for FCALL rl_admit ALGO sliding, not
-- its equal: the client's clock, the previous window's weight rounded
-- down, the expiry relative, no reset time.
--
--   EVALSHA <sha> 2 <current key> <previous key> <limit> <now_ms> <window_ms> <cost>
--
-- Reply: the requests left, or -1 when refused.

local limit, now, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local current = tonumber(redis.call('GET', KEYS[1]) or 0)
local previous = tonumber(redis.call('GET', KEYS[2]) or 0)
local weight = 1 - (now % window) / window
previous = math.floor(previous * weight)
if cost > 0 and previous + current >= limit then
  return -1
end
local count = redis.call('INCRBY', KEYS[1], cost)
if count == cost then
  redis.call('PEXPIRE', KEYS[1], window * 2 + 1000)
end
return limit - (count + previous)
