-- redis-cell's CL.THROTTLE in Lua (GCRA): what RL.THROTTLE replaces, and the
-- baseline the benchmark measures it against.
--
--   EVALSHA <sha> 1 <key> <max_burst> <count_per_period> <period_s> [quantity]
--
-- Unlike the other scripts here, this one takes CL.THROTTLE's (and
-- RL.THROTTLE's) arguments and answers its reply: {limited (0 allowed,
-- 1 limited), limit (= max_burst + 1), remaining, retry_after_s,
-- reset_after_s}. Same semantics as RL.THROTTLE:
--   * emission interval T = floor(period_s * 1e9 / count_per_period) ns
--     (integer division, like redis-cell), tolerance = (max_burst + 1) * T;
--   * the state is the TAT, taken as clamp(TAT, now, now + tolerance); a
--     request adds quantity * T and is allowed while new TAT - tolerance <= now;
--     allowed: the new TAT is stored, the key expiring (absolute, PXAT) at it;
--   * retry_after_s: -1 when allowed or when quantity * T exceeds the
--     tolerance (never allowed), else the time until allowed; reset_after_s =
--     time until TAT; both in whole seconds rounded up;
--   * remaining = whole cells left under the tolerance; quantity 0 is a peek
--     and writes nothing, and so does a limited call, but for a stored time
--     beyond the tolerance and the repair of a key it did not write (see
--     `repair`).
--
-- State: the module's own format, `gcra:<TAT in ns>` in one string key (a bare
-- ns integer, as redis-cell writes it, is read too). Lua numbers are doubles
-- (exact integers up to 2^53 ~ 9.0e15), and an absolute time in ns (~1.8e18)
-- is not exact, so the TAT is read and written as ms and a 6-digit ns
-- remainder and the arithmetic is on TAT - now (relative ns). Exact while the
-- tolerance and period_s * 1e9 stay below 2^53 ns (~104 days).
-- The time is the server's (redis.call('TIME'), ms part), which is the clock
-- the module reads and frozen for the whole script (and MULTI/EXEC).

local key = KEYS[1]
local max_burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local quantity = tonumber(ARGV[4] or '1')

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

local function ceil_div(ns, unit)
  if ns <= 0 then return 0 end
  return fdiv(ns + unit - 1, unit)
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

local interval = fdiv(period * 1000000000, count)
if interval == 0 then
  return redis.error_reply('ERR the policy is too large: its times overflow the clock')
end
local limit = max_burst + 1
local tolerance = limit * interval

-- ahead = clamp(TAT, now, now + tolerance) - now
local ahead = 0
local beyond = false
local raw = redis.call('GET', key)
if raw then
  local tat = string.match(raw, '^gcra:(%-?%d+)$') or string.match(raw, '^(%-?%d+)$')
  if not tat then
    return redis.error_reply('ERR limiter key does not hold gcra state')
  end
  if #tat > 6 and string.sub(tat, 1, 1) ~= '-' then
    ahead = (tonumber(string.sub(tat, 1, -7)) - now) * 1000000 + tonumber(string.sub(tat, -6))
  end
  if ahead < 0 then ahead = 0 elseif ahead > tolerance then ahead = tolerance; beyond = true end
end

local increment = quantity * interval
local ttl, limited, retry = ahead, 1, -1
if increment <= tolerance then
  local new = ahead + increment
  if new <= tolerance then
    limited, ttl = 0, new
    if quantity > 0 then
      local ms = fdiv(new, 1000000)
      redis.call('SET', key, string.format('gcra:%d%06d', now + ms, new - ms * 1000000),
        'PXAT', now + ceil_div(new, 1000000))
    end
  else
    retry = ceil_div(new - tolerance, 1000000000)
  end
end

-- A stored time beyond the tolerance is written back clamped when limited;
-- otherwise a limited call makes only the repair.
if limited == 1 and beyond and quantity > 0 then
  local ms = fdiv(ahead, 1000000)
  redis.call('SET', key, string.format('gcra:%d%06d', now + ms, ahead - ms * 1000000),
    'PXAT', now + ceil_div(ahead, 1000000))
elseif limited == 1 and quantity > 0 then
  repair(ceil_div(ttl, 1000000))
end

return {limited, limit, fdiv(tolerance - ttl, interval), retry, ceil_div(ttl, 1000000000)}
