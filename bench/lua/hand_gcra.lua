-- Hand-written shape: GCRA as TIME, GET and SET EX, in seconds as doubles
-- (the shape of go-redis/redis_rate's allow script). A baseline for FCALL
-- rl_admit ALGO gcra and rl_throttle, not their equal: times are float
-- seconds (rounded, and relative to a fixed epoch), the expiry is a
-- relative whole second, the waits are replied as text.
--
--   EVALSHA <sha> 1 <key> <burst> <rate> <period_s> <cost>
--
-- Reply: {admitted cost, remaining, retry_after_s, reset_after_s}.

local key = KEYS[1]
local burst, rate, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local EPOCH = 1483228800 -- 2017-01-01, to keep the seconds small
local interval = period / rate
local t = redis.call('TIME')
local now = (t[1] - EPOCH) + t[2] / 1000000
local tat = tonumber(redis.call('GET', key) or now)
if tat < now then tat = now end
local new_tat = tat + interval * cost
local room = now - (new_tat - interval * burst)
if room < 0 then
  return {0, 0, tostring(-room), tostring(tat - now)}
end
local reset = new_tat - now
if reset > 0 then
  redis.call('SET', key, new_tat, 'EX', math.ceil(reset))
end
return {cost, math.floor(room / interval), '-1', tostring(reset)}
