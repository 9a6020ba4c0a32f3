-- Sliding window counter in Lua: what RL.ADMIT ... ALGO sliding replaces,
-- and the baseline the benchmark measures it against.
--
--   EVALSHA <sha> 1 <key> <limit> <window_ms> [cost]
--
-- Reply, as RL.ADMIT's: {admitted (1/0), limit, remaining, retry_after_ms,
-- reset_after_ms}. Same semantics as RL.ADMIT key ALGO sliding LIMIT limit
-- WINDOW window_ms COST cost:
--   * windows are aligned to multiples of window_ms since the epoch; the
--     estimate is the current window's count plus the previous window's count
--     weighted by the part of it still in view (left = ms to the end of the
--     current window): estimate = previous * left / window + current;
--   * admitted while estimate + cost <= limit, compared exactly as
--     previous * left + (current + cost) * window <= limit * window; the new
--     count is stored, the key expiring (absolute, PXAT) at the end of the
--     next window, when it is out of view;
--   * refused: retry_after_ms = the exact wait until it fits (within this
--     window as the previous one slides out, else early in the next window),
--     -1 when cost > limit; a refusal or a peek (cost 0) writes nothing,
--     except that a window starting after now (the clock went back), read
--     as the current window, is written back as such by a refusal, and
--     the repair of a key it did not write (see `repair`);
--   * remaining = whole requests that fit; reset_after_ms = time until the
--     estimate is 0; limit 0: {1, 0, 0, 0, 0}.
--
-- State: the module's own format,
-- `sliding:<window_start_ms>:<current>:<previous>` in one string key. Lua
-- numbers are doubles (exact integers up to 2^53 ~ 9.0e15); everything here is
-- in ms and counts, exact while limit * window_ms stays below 2^53.
-- The time is the server's (redis.call('TIME'), ms part), which is the clock
-- the module reads and frozen for the whole script (and MULTI/EXEC).

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or '1')

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
local start = now - math.fmod(now, window)
local left = start + window - now -- also the previous window's weight

local current, previous = 0, 0
local future = false
local raw = redis.call('GET', key)
if raw then
  local s, c, p = string.match(raw, '^sliding:(%d+):(%d+):(%d+)$')
  if not s then
    return redis.error_reply('ERR limiter key does not hold sliding state')
  end
  s = tonumber(s)
  future = s > now
  if s == start or future then
    current, previous = tonumber(c), tonumber(p)
  elseif s == start - window then
    previous = tonumber(c)
  end
end

local function used(c, p)
  return p * left + c * window
end

local function room(c, p)
  local free = limit * window - used(c, p)
  if free < 0 then return 0 end
  return fdiv(free, window)
end

local function reset(c, p)
  if c == 0 and p == 0 then return 0 end
  if c == 0 then return left end
  return left + window
end

-- Stores the counts as now's window, expiring once none is in view.
local function store(c, p)
  if c == 0 and p == 0 then
    redis.call('DEL', key)
  elseif c == 0 then
    redis.call('SET', key, string.format('sliding:%d:%d:%d', start, c, p), 'PXAT', start + window)
  else
    redis.call('SET', key, string.format('sliding:%d:%d:%d', start, c, p), 'PXAT', start + 2 * window)
  end
end

if cost > limit or used(current, previous) + cost * window > limit * window then
  if future and cost > 0 then
    store(current, previous)
  elseif cost > 0 then
    repair(reset(current, previous))
  end
  local retry = -1
  if cost <= limit then
    retry = nil
    -- Within this window, as the previous window slides out of view.
    if previous > 0 and current + cost <= limit then
      local excess = used(current, previous) + cost * window - limit * window
      local wait = fdiv(excess + previous - 1, previous)
      if wait < left then retry = wait end
    end
    -- Early in the next window, where this window becomes the previous one.
    if not retry then
      local into_next = 0
      if current > 0 then
        local need = window * (current - limit + cost)
        if need < 0 then need = 0 end
        into_next = fdiv(need + current - 1, current)
        if into_next > window then into_next = window end
      end
      retry = left + into_next
    end
  end
  return {0, limit, room(current, previous), retry, reset(current, previous)}
end

local after = current + cost
if cost > 0 then store(after, previous) end
return {1, limit, room(after, previous), 0, reset(after, previous)}
