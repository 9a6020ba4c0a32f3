-- Fixed-window rate limiter in Lua: what RL.ADMIT (fixed window) replaces,
-- and the baseline the benchmark measures it against.
--
--   EVALSHA <sha> 1 <key> <limit> <window_ms> [cost]
--
-- Reply, as RL.ADMIT's: {admitted (1/0), limit, remaining, retry_after_ms,
-- reset_after_ms}. Same semantics as RL.ADMIT key LIMIT limit WINDOW window_ms
-- COST cost:
--   * the counter is a plain string integer; the first write of a window
--     gives the key its expiry (now + window_ms), which is the reset;
--   * count + cost <= limit admits and adds cost (cost 0 writes nothing);
--   * a refusal writes nothing, except that a counter found without a TTL,
--     or with more time left than one window, is given one window;
--   * cost > limit can never succeed: refused with retry_after_ms -1;
--   * limit 0 means no limit: {1, 0, 0, 0, 0}.
-- bench/oracle_check.py checks this against the module call by call.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or '1')

if limit == 0 then
  return {1, 0, 0, 0, 0}
end

local raw = redis.call('GET', key)
local count = 0
local pttl = -2
if raw then
  if not string.match(raw, '^-?%d+$') then
    return redis.error_reply('ERR limiter key does not hold an integer counter')
  end
  count = tonumber(raw)
  pttl = redis.call('PTTL', key)
end

-- A counter without a TTL, or with more time left than one window, is
-- adopted: it gets a fresh window.
local adopted = raw and (pttl == -1 or pttl > window)
local left = 0
if adopted then
  left = window
elseif pttl >= 0 then
  left = pttl
end

local function remaining(c)
  local r = limit - c
  if r < 0 then r = 0 end
  return r
end

if cost > limit then
  if adopted and cost > 0 then
    redis.call('PEXPIRE', key, window)
  end
  return {0, limit, remaining(count), -1, left}
end

local new = count + cost
if new <= limit then
  if not raw and cost == 0 then
    left = 0  -- a peek at no state opens no window
  elseif pttl < 0 or adopted then
    left = window
  end
  if cost > 0 then
    redis.call('INCRBY', key, cost)
    if pttl < 0 or adopted then
      redis.call('PEXPIRE', key, window)
    end
  end
  return {1, limit, remaining(new), 0, left}
end

if adopted and cost > 0 then
  redis.call('PEXPIRE', key, window)
end
return {0, limit, remaining(count), left, left}
