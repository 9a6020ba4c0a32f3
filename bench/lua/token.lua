-- Token bucket in Lua: what RL.ADMIT ... ALGO token replaces, and the
-- baseline the benchmark measures it against.
--
--   EVALSHA <sha> 1 <key> <limit> <window_ms> [cost] [burst]
--
-- Reply, as RL.ADMIT's: {admitted (1/0), limit (= burst), remaining,
-- retry_after_ms, reset_after_ms}. Same semantics as RL.ADMIT key ALGO token
-- LIMIT limit WINDOW window_ms BURST burst COST cost (burst defaults to limit):
--   * at most `burst` tokens, refilled continuously at `limit` per window; a
--     request spends `cost` tokens. The level is kept as credit in ns (tokens
--     times the emission interval T = ceil(window_ms * 1e6 / limit) ns), so
--     the refill is exact: credit + (now - last_ms) * 1e6, capped at
--     burst * T. A missing key is a full bucket;
--   * admitted while cost * T <= credit; the new credit and now are stored,
--     the key expiring (absolute, PXAT) when the bucket is full again;
--   * refused: retry_after_ms = time until enough credit, -1 when cost * T
--     exceeds a full bucket; a peek (cost 0) writes nothing, nor does a
--     refusal, but for a last refill in the future, which it restamps, and
--     the repair of a key it did not write (see `repair`);
--   * remaining = whole tokens; reset_after_ms = time until full; ms values
--     rounded up; limit 0: {1, 0, 0, 0, 0}. (The decisions equal gcra.lua's.)
--
-- State: the module's own format, `token:<credit_ns>:<last_refill_ms>` in one
-- string key. Lua numbers are doubles (exact integers up to 2^53 ~ 9.0e15):
-- times are kept in ms (exact) and the credit in ns is bounded by the bucket,
-- so everything is exact while burst * T and window_ms * 1e6 stay below
-- 2^53 ns (~104 days); beyond that the doubles round.
-- The time is the server's (redis.call('TIME'), ms part), which is the clock
-- the module reads and frozen for the whole script (and MULTI/EXEC).

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or '1')
local burst = tonumber(ARGV[4] or ARGV[1])

if limit == 0 then
  return {1, 0, 0, 0, 0}
end

-- floor(a / b) for integers, corrected for the rounding of the division.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceil_ms(ns)
  if ns <= 0 then return 0 end
  return fdiv(ns + 999999, 1000000)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + fdiv(tonumber(t[2]), 1000)

-- The one repair a refusal that wrote nothing else makes, as the module
-- does: a key without a TTL, or expiring before the reset the refusal
-- reports, is given that expiry; one without a TTL whose state is spent
-- (reset 0) is deleted, as its expiry would have.
local function repair(reset_ms)
  local at = redis.call('PEXPIRETIME', key)
  if at == -1 and reset_ms == 0 then
    redis.call('DEL', key)
  elseif at ~= -2 and reset_ms > 0 and (at == -1 or at < now + reset_ms) then
    redis.call('PEXPIREAT', key, now + reset_ms)
  end
end

local interval = fdiv(window * 1000000 + limit - 1, limit)
local capacity = burst * interval

local credit = capacity
local future = false
local raw = redis.call('GET', key)
if raw then
  local c, last = string.match(raw, '^token:(%d+):(%-?%d+)$')
  if not c then
    return redis.error_reply('ERR limiter key does not hold token state')
  end
  local elapsed = now - tonumber(last)
  if elapsed < 0 then elapsed = 0; future = true end -- a clock that went back refills nothing
  credit = tonumber(c) + elapsed * 1000000
  if credit > capacity then credit = capacity end
end

local function store(level)
  redis.call('SET', key, string.format('token:%d:%d', level, now),
    'PXAT', now + ceil_ms(capacity - level))
end

-- A last refill in the future is restamped to now by a real call, so the
-- bucket refills from here instead of staying empty until then.
local function refuse(reply)
  if future and cost > 0 then store(credit) elseif cost > 0 then repair(reply[5]) end
  return reply
end

local need = cost * interval
if need > capacity then
  return refuse({0, burst, fdiv(credit, interval), -1, ceil_ms(capacity - credit)})
end
if need > credit then
  return refuse({0, burst, fdiv(credit, interval), ceil_ms(need - credit), ceil_ms(capacity - credit)})
end

local left = credit - need
if cost > 0 then
  store(left)
end
return {1, burst, fdiv(left, interval), 0, ceil_ms(capacity - left)}
