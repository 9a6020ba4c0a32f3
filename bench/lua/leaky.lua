-- Leaky bucket as a queue (shaping) in Lua: what RL.ADMIT ... ALGO leaky
-- replaces, and the baseline the benchmark measures it against.
--
--   EVALSHA <sha> 1 <key> <limit> <window_ms> [cost] [burst]
--
-- Reply, as RL.ADMIT's: {admitted (1/0), limit (= burst, the queue size),
-- remaining, retry_after_ms, reset_after_ms}. Same semantics as RL.ADMIT key
-- ALGO leaky LIMIT limit WINDOW window_ms BURST burst COST cost (burst
-- defaults to limit; 0 means no queue):
--   * requests leave one per emission interval T = ceil(window_ms * 1e6 /
--     limit) ns; the state is the time the queue drains, and the backlog
--     (drained_at - now, clamped to [0, (burst + 1) * T]) is the work ahead;
--   * admitted while backlog + cost * T <= (burst + 1) * T: the head request
--     is being served, `burst` more may wait. An ADMITTED reply's
--     retry_after_ms is the delay before the request may proceed (the
--     backlog ahead of it, rounded up); the new drain time is stored with the
--     key expiring (absolute, PXAT) when the queue is empty;
--   * refused: retry_after_ms = time until it fits, -1 when it never can;
--     a peek (cost 0) writes nothing, and a refusal writes nothing either,
--     except a stored time beyond a full bucket, which it writes back clamped,
--     and the repair of a key it did not write (see `repair`);
--   * remaining = free waiting slots (at most burst); reset_after_ms = time
--     until the queue is empty; ms values rounded up; limit 0: {1, 0, 0, 0, 0}.
--
-- State: the module's own format, `leaky:<drained_at in ns>` in one string
-- key. Lua numbers are doubles (exact integers up to 2^53 ~ 9.0e15), and an
-- absolute time in ns (~1.8e18) is not exact, so the time is read and written
-- as ms and a 6-digit ns remainder, and all arithmetic is on the backlog
-- (relative ns). Exact while (burst + 1) * T and window_ms * 1e6 stay below
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
local capacity = (burst + 1) * interval

-- Waiting slots free: the head request is served, not waiting.
local function free(b)
  local n = fdiv(capacity - b, interval)
  if n > burst then n = burst end
  return n
end

local backlog = 0
local beyond = false
local raw = redis.call('GET', key)
if raw then
  local drained = string.match(raw, '^leaky:(%d+)$')
  if not drained then
    if not string.match(raw, '^leaky:%-%d+$') then
      return redis.error_reply('ERR limiter key does not hold leaky state')
    end
    drained = '0' -- negative: long past
  end
  if #drained > 6 then
    backlog = (tonumber(string.sub(drained, 1, -7)) - now) * 1000000 + tonumber(string.sub(drained, -6))
  end
  if backlog < 0 then backlog = 0 elseif backlog > capacity then backlog = capacity; beyond = true end
end

-- Stores the state backlog ns ahead of now, expiring when it is back to 0.
local function store(d)
  local ms = fdiv(d, 1000000)
  redis.call('SET', key, string.format('leaky:%d%06d', now + ms, d - ms * 1000000),
    'PXAT', now + ceil_ms(d))
end

-- A stored time beyond a full bucket (clock went back, policy shrank) is
-- written back clamped by a real call, so it drains instead of blocking.
local function refuse(reply)
  if beyond and cost > 0 then store(backlog) elseif cost > 0 then repair(reply[5]) end
  return reply
end

local increment = cost * interval
if increment > capacity then
  return refuse({0, burst, free(backlog), -1, ceil_ms(backlog)})
end

local after = backlog + increment
if after > capacity then
  return refuse({0, burst, free(backlog), ceil_ms(after - capacity), ceil_ms(backlog)})
end

if cost > 0 then
  store(after)
end
-- The request starts once the backlog ahead of it has left.
return {1, burst, free(after), ceil_ms(backlog), ceil_ms(after)}
