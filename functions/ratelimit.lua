#!lua name=ratelimit
--[[
The valkey-ratelimit module as a Valkey Functions library, for servers that
cannot load modules (managed Valkey). Same replies, error texts, stored
state and expiries as the module's RL.* commands; docs/managed-valkey.md
says how to load and call it and lists every difference.

  FCALL    rl_admit    1|2 key [metakey] [ALGO a] [LIMIT n] [WINDOW ms] [BURST n] [COST n] [FORMAT map]
  FCALL_RO rl_ttl      1|2 key [metakey] [ALGO a] [LIMIT n] [WINDOW ms] [BURST n]
  FCALL_RO rl_limit    1 metakey
  FCALL    rl_refund   1|2 key [metakey] [policy options] [COST n] [FORMAT map]
  FCALL    rl_reset    1 key
  FCALL    rl_throttle 1 key max_burst count_per_period period [quantity] [FORMAT map]
  FCALL    rl_admitall numkeys counter... [metakey...] [COST n] [FORMAT map]
                       POLICY [ALGO a] [LIMIT n] [WINDOW ms] [BURST n] [META metakey] [POLICY ...]
  FCALL    rl_acquire  1|2 key [metakey] [LIMIT n] [TTL ms] [ID lease-id] [FORMAT map]
  FCALL    rl_release  1 key lease-id
  FCALL    rl_extend   1 key lease-id TTL ms
  FCALL_RO rl_inflight 1 key
  FCALL_RO rl_version  0

Every key is a key: the META hash of rl_admit, rl_ttl, rl_refund and
rl_acquire is KEYS[2]. rl_admitall takes one counter per POLICY block, in order, first,
then the META hashes; a POLICY block names its META hash by key name, which
must be one of the keys after the counters (several blocks may share one).

The module's source (src/) is the specification; this file follows its
structure: options -> policy -> stored state -> algorithm -> write -> reply.

Numbers: Lua numbers are doubles, exact for integers below 2^53. Absolute
ns times (about 1.8e18) are read and written as ms plus a 6-digit ns
remainder, and the arithmetic is on spans relative to now (itself a ms and
the ns into it), so the module's state round-trips exactly. Everything else must stay below 2^53 (see
`exact_policy` and STATE_BEYOND_DOUBLES); beyond that the call is refused
with an ERR that says so, never answered with a rounded number.

Time: the server's clock (TIME), read once per call (`limiter_clock`, `lease_clock`); inside a
script and inside MULTI/EXEC it is frozen, and it is the clock the module
reads. Writes carry absolute times (SET ... PXAT, PEXPIREAT), so effect
replication gives replicas and the AOF the primary's values and expiries.
A refusal or a peek writes nothing, except the module's repairs of odd
state (a key without a TTL, a time stored beyond a full bucket).
--]]

---------------------------------------------------------------- numbers

-- The largest integer a double holds exactly, with its successor.
local EXACT = 9007199254740991 -- 2^53 - 1
local I64_MAX = '9223372036854775807'
local I64_MIN_DIGITS = '9223372036854775808'
-- Above every i64 as a double (2^63), for the module's overflow checks.
local I64_LIMIT = 9223372036854775807

-- Times are ms (the windows, every expiry) and ns (the buckets' state).
-- The clock is read in µs, as the module reads it (`limiter_clock`): `now.ms` for
-- the windows, plus `now.sub`, the ns into that ms, for the buckets, whose
-- absolute times are only ever formed in `ns_after`, `ns_at` and `ms_at`.
local NS_PER_MS = 1000000
local NS_PER_S = 1000000000

-- floor(a / b) for integers below 2^53, corrected for the rounding of the
-- division.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- A non-negative span rounded up to whole units (0 for a negative one).
local function ceil_div(n, unit)
  if n <= 0 then return 0 end
  return fdiv(n + unit - 1, unit)
end

local function ceil_ms(ns) return ceil_div(ns, NS_PER_MS) end

-- An integer with the server's strictness (src/num.rs): optional '-',
-- digits, no '+', no spaces, no leading zeros, within i64. Returns the
-- number (rounded beyond 2^53; callers check the range where it matters),
-- or nil.
local function parse_i64(s)
  if type(s) ~= 'string' then return nil end
  local sign, digits = string.match(s, '^(%-?)([0-9]+)$')
  if not digits or #digits > 19 then return nil end
  if string.byte(digits, 1) == 48 and (#digits > 1 or sign == '-') then return nil end
  if #digits == 19 and digits > (sign == '-' and I64_MIN_DIGITS or I64_MAX) then return nil end
  return tonumber(s)
end

-- An absolute ns time given as decimal digits, as the span (ns) from
-- `now`: exact while the span is below 2^53, and beyond it never on the
-- wrong side of any bound below 2^53. A negative time is long past.
local function ns_after(digits, now)
  if string.byte(digits, 1) == 45 then return -I64_LIMIT end -- '-'
  if #digits <= 6 then return tonumber(digits) - now.ms * NS_PER_MS - now.sub end
  return (tonumber(string.sub(digits, 1, -7)) - now.ms) * NS_PER_MS
    + (tonumber(string.sub(digits, -6)) - now.sub)
end

-- The absolute ns time `span_ns` (>= 0, below 2^53) after `now`, as its ms
-- and the ns into that ms; the span is split before `now.sub` is added, so
-- nothing passes 2^53.
local function split_at(now, span_ns)
  local ms = fdiv(span_ns, NS_PER_MS)
  local into = span_ns - ms * NS_PER_MS + now.sub
  if into >= NS_PER_MS then ms, into = ms + 1, into - NS_PER_MS end
  return now.ms + ms, into
end

-- Its decimal digits.
local function ns_at(now, span_ns)
  return string.format('%d%06d', split_at(now, span_ns))
end

-- That time in ms, rounded up: a key expiring then outlives it.
local function ms_at(now, span_ns)
  local ms, into = split_at(now, span_ns)
  if into > 0 then return ms + 1 end
  return ms
end

---------------------------------------------------------------- errors

-- The module's reply texts (src/error.rs).
local NON_NEGATIVE = 'an integer from 0 to 9223372036854775807'
local POSITIVE = 'an integer from 1 to 9223372036854775807'
local BURST_RANGE = 'an integer from 1 (0 for ALGO leaky) to 9223372036854775807'
local ALGO_NAMES = 'one of fixed, sliding, token, gcra, leaky'
local PAST_THE_CLOCK = 'its times would pass the ns clock (the year 2262)'
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
-- The library's own: what the module computes and doubles cannot.
local BEYOND_DOUBLES = 'ERR the policy is beyond the library\'s exact range (Lua numbers are exact below 2^53, see docs/managed-valkey.md); the module computes it'
local STATE_BEYOND_DOUBLES = 'ERR limiter key holds counts beyond the library\'s exact range (Lua numbers are exact below 2^53); the module computes it'

-- Errors unwind to the entry point (`entry`) as this marker table, which
-- replies with the text as is (Lua's error() would append its position).
local Failure = {}
local function fail(text) error(setmetatable({text = text}, Failure), 0) end

local function bad_value(name, must) fail('ERR ' .. name .. ' must be ' .. must) end
local function wrong_arity(command) fail('ERR wrong number of arguments for \'' .. command .. '\' command') end
local function bad_state(algo)
  if algo == 'fixed' then fail('ERR limiter key does not hold an integer counter') end
  fail('ERR limiter key does not hold ' .. algo .. ' state')
end

-- An unknown option, quoted safely: printable ASCII only, and short.
local function shown(word)
  return (string.gsub(string.sub(word, 1, 32), '[^\33-\126]', '?'))
end

---------------------------------------------------------------- time

-- The server's time for this call, read once: frozen for the whole script
-- and MULTI/EXEC, the clock of key expiry and of the module. Its ms, and
-- the ns into that ms (whole µs).
local function server_time()
  local t = server.call('TIME')
  return tonumber(t[1]), tonumber(t[2])
end

local function limiter_clock()
  local s, us = server_time()
  local ms = fdiv(us, 1000)
  return {ms = s * 1000 + ms, sub = (us - ms * 1000) * 1000}
end

-- The server's time for this call in ms, read once: frozen for the whole
-- script and MULTI/EXEC, the clock of key expiry and of the module. Also
-- in µs (below 2^53 until the year 2255), for generated lease ids.
local function lease_clock()
  local s, us = server_time()
  return s * 1000 + fdiv(us, 1000), s * 1000000 + us
end

---------------------------------------------------------------- options

local ALGOS = {fixed = true, sliding = true, token = true, gcra = true, leaky = true}
local USES_BURST = {token = true, gcra = true, leaky = true}
local function min_burst(algo) if algo == 'leaky' then return 0 end return 1 end

local function parse_algo(word)
  local algo = string.lower(word)
  if ALGOS[algo] then return algo end
  return nil
end

-- An integer of at least `min`, named `name` in the error.
local function int_arg(value, name, min)
  local v = parse_i64(value)
  if v == nil or v < min then
    bad_value(name, min == 0 and NON_NEGATIVE or POSITIVE)
  end
  return v
end

-- Option name -> how its value is read (src/args.rs `Options::set`).
local OPTIONS = {
  ALGO = function(v)
    return parse_algo(v) or bad_value('ALGO', ALGO_NAMES)
  end,
  LIMIT = function(v) return int_arg(v, 'LIMIT', 0) end,
  WINDOW = function(v) return int_arg(v, 'WINDOW', 1) end,
  BURST = function(v)
    local b = parse_i64(v)
    if b == nil or b < 0 then bad_value('BURST', BURST_RANGE) end
    return b
  end,
  COST = function(v) return int_arg(v, 'COST', 0) end,
  -- The library's own: replies as a map (see `reply`).
  FORMAT = function(v)
    local f = string.lower(v)
    if f ~= 'map' and f ~= 'array' then bad_value('FORMAT', 'one of map, array') end
    return f
  end,
}

-- Option names in their usual spellings, to skip string.upper for them
-- (spelled out: the standard libraries are not reachable while the library
-- loads, only inside its functions).
local OPTION_NAMES = {
  ALGO = 'ALGO', LIMIT = 'LIMIT', WINDOW = 'WINDOW', BURST = 'BURST', COST = 'COST', FORMAT = 'FORMAT',
  algo = 'ALGO', limit = 'LIMIT', window = 'WINDOW', burst = 'BURST', cost = 'COST', format = 'FORMAT',
}

-- The options each function takes, beyond which an option is unknown.
local POLICY_OPTIONS = {ALGO = true, LIMIT = true, WINDOW = true, BURST = true}
local ADMIT_OPTIONS = {ALGO = true, LIMIT = true, WINDOW = true, BURST = true, COST = true, FORMAT = true}

local function unknown(word) fail('ERR unknown option \'' .. shown(word) .. '\'') end

-- Sets option `word` from args[at + 1] into `opts`; false when `word` is
-- not an option of `allowed`. `metakey`: the META hash given as a key.
-- `readers`: how each value is read (default OPTIONS, the limiters').
local function set_option(opts, word, args, at, allowed, metakey, readers)
  local name = OPTION_NAMES[word] or string.upper(word)
  if not allowed[name] then
    if name == 'META' and allowed.LIMIT then
      -- META is a key here. Given as one already, this is the module's
      -- "given more than once".
      if args[at + 1] == nil then fail('ERR META needs a value') end
      if metakey ~= nil then fail('ERR META is given more than once') end
      fail('ERR META is passed as a key in the library: FCALL <function> 2 <key> <metakey> ...')
    end
    return false
  end
  local value = args[at + 1]
  if value == nil then fail('ERR ' .. name .. ' needs a value') end
  local parsed = (readers or OPTIONS)[name](value)
  if opts[name] ~= nil then fail('ERR ' .. name .. ' is given more than once') end
  opts[name] = parsed
  return true
end

local function parse_options(args, allowed, metakey, readers)
  local opts = {}
  local at = 1
  while at <= #args do
    if not set_option(opts, args[at], args, at, allowed, metakey, readers) then unknown(args[at]) end
    at = at + 2
  end
  return opts
end

---------------------------------------------------------------- META hash

-- No META hash: no fields (never written to).
local NO_META = {}

-- The META hash's fields as found (nil when absent); judged only when used.
local function read_meta(metakey)
  if metakey == nil then return NO_META end
  local fields = server.pcall('HMGET', metakey, 'max', 'duration', 'algorithm', 'burst')
  if fields.err then fail('WRONGTYPE META key does not hold a hash') end
  return {max = fields[1] or nil, duration = fields[2] or nil,
          algorithm = fields[3] or nil, burst = fields[4] or nil}
end

local function meta_int(meta, field, min, must)
  local raw = meta[field]
  if raw == nil then return nil end
  local v = parse_i64(raw)
  if v == nil or v < min then
    fail('ERR META hash field \'' .. field .. '\' must be ' .. must)
  end
  return v
end

---------------------------------------------------------------- policy

-- Inline options win over the META hash; no limit (or 0) means unlimited:
-- nil. As src/commands.rs `resolve`, in the same order of checks.
local function resolve(opts, metakey)
  local meta = read_meta(metakey)
  local algo = opts.ALGO
  if algo == nil then
    if meta.algorithm ~= nil then
      algo = parse_algo(meta.algorithm)
      if algo == nil then fail('ERR META hash field \'algorithm\' must be ' .. ALGO_NAMES) end
    else
      algo = 'fixed' -- the module's default-algorithm, which has no config here
    end
  end
  if opts.BURST ~= nil and not USES_BURST[algo] then
    fail('ERR BURST does not apply to ALGO ' .. algo)
  end
  local limit = opts.LIMIT
  if limit == nil then limit = meta_int(meta, 'max', 0, NON_NEGATIVE) or 0 end
  if limit == 0 then return nil end
  local r = {algo = algo, limit = limit}
  if opts.WINDOW ~= nil then
    r.window, r.window_source = opts.WINDOW, 'WINDOW'
  else
    r.window = meta_int(meta, 'duration', 1, POSITIVE)
    r.window_source = 'META field \'duration\''
  end
  if opts.BURST ~= nil then
    r.burst = opts.BURST
  elseif USES_BURST[algo] then
    r.burst, r.burst_from_meta = meta_int(meta, 'burst', 0, BURST_RANGE), true
  end
  return r
end

-- The emission interval (ns between two requests at the sustained rate,
-- rounded up) and the bucket's capacity (ns of debt when full).
local function bucket(algo, limit, window, burst)
  local interval = fdiv(window * NS_PER_MS + limit - 1, limit)
  local slots = burst
  if algo == 'leaky' then slots = burst + 1 end
  return interval, slots * interval
end

-- Every absolute ns time from the ms `now_ms` to `span_ns` after it fits
-- an i64 (src/algo/policy.rs `fits_ns`).
local function fits_ns(now_ms, span_ns)
  return (now_ms + 1) * NS_PER_MS - 1 + span_ns <= I64_LIMIT
end

-- The module's checks (src/commands.rs `Resolved::policy`, src/algo/policy.rs
-- `Policy::new`). They fail only beyond 2^53, where doubles round: there the
-- library may name another of these errors than the module would, but it
-- answers an error either way (`exact_policy` refuses what passes).
local function module_policy_checks(r, clock_now)
  local now = clock_now.ms
  if r.window == nil then
    fail('ERR a limit is set but no window: give WINDOW or set field \'duration\' in the META hash')
  end
  if r.window > I64_LIMIT - now then
    fail('ERR ' .. r.window_source .. ' is too large: the window end overflows')
  end
  if r.burst ~= nil and r.burst < min_burst(r.algo) then
    if r.burst_from_meta then fail('ERR META hash field \'burst\' must be ' .. BURST_RANGE) end
    bad_value('BURST', BURST_RANGE)
  end
  local fits
  if r.algo == 'fixed' then
    fits = now + r.window < I64_LIMIT
  elseif r.algo == 'sliding' then
    fits = now + 2 * r.window < I64_LIMIT
  else
    local _, capacity = bucket(r.algo, r.limit, r.window, r.burst or r.limit)
    fits = fits_ns(now, capacity)
  end
  if not fits then fail('ERR the policy is too large: its times overflow the clock') end
end

-- The library's own check: every quantity the policy's arithmetic makes
-- stays below 2^53 (docs/managed-valkey.md states the range).
local function exact_policy(p, clock_now)
  local now = clock_now.ms
  local ok
  if p.algo == 'fixed' then
    ok = p.limit <= EXACT and now + p.window <= EXACT
  elseif p.algo == 'sliding' then
    ok = p.limit * p.window <= EXACT and now + 2 * p.window <= EXACT
  else
    ok = p.window * NS_PER_MS + p.limit - 1 <= EXACT and p.burst <= EXACT and p.capacity <= EXACT
  end
  if not ok then fail(BEYOND_DOUBLES) end
end

-- The validated policy of a resolved limiter (see `resolve`) at `now`: the
-- same table, completed.
local function policy_of(r, now)
  module_policy_checks(r, now)
  local p = r
  p.burst = r.burst or r.limit
  if USES_BURST[p.algo] then
    p.interval, p.capacity = bucket(p.algo, p.limit, p.window, p.burst)
  end
  exact_policy(p, now)
  return p
end

-- A validated policy for `now`, or nil for no limit.
local function make_policy(opts, metakey, now)
  local r = resolve(opts, metakey)
  if r == nil then return nil end
  return policy_of(r, now)
end

---------------------------------------------------------------- state

-- Reads a limiter key as `algo`'s state (src/algo/state.rs). Returns nil
-- for no key, or the state: fields as numbers (ns times as spans after now,
-- see `ns_after`) and `raw`, the stored string.
local function decode(algo, raw, now)
  if algo == 'fixed' then
    local count = parse_i64(raw)
    if count == nil then bad_state(algo) end
    return {count = count}
  end
  if algo == 'sliding' then
    local s, c, p = string.match(raw, '^sliding:([^:]*):([^:]*):([^:]*)$')
    s, c, p = parse_i64(s), parse_i64(c), parse_i64(p)
    if not (s and c and p) or s < 0 or c < 0 or p < 0 then bad_state(algo) end
    return {start = s, current = c, previous = p}
  end
  if algo == 'token' then
    -- The last refill's ms and the ns into it; without them (a build that
    -- read the clock in ms wrote that form), the start of the ms.
    local c, last, into = string.match(raw, '^token:([^:]*):([^:]*):([^:]*)$')
    if c == nil then
      c, last = string.match(raw, '^token:([^:]*):([^:]*)$')
      into = '0'
    end
    local credit, last_ms, last_sub = parse_i64(c), parse_i64(last), parse_i64(into)
    if not (credit and last_ms and last_sub) or credit < 0 or last_sub < 0 or last_sub >= NS_PER_MS then
      bad_state(algo)
    end
    return {credit = credit, last = last_ms, last_sub = last_sub}
  end
  -- gcra, leaky: one absolute ns time.
  local tat = string.match(raw, '^' .. algo .. ':([^:]*)$')
  if parse_i64(tat) == nil then bad_state(algo) end
  return {ahead = ns_after(tat, now)}
end

local function read_value(key)
  local raw = server.pcall('GET', key)
  if type(raw) == 'table' and raw.err then fail(WRONGTYPE) end
  if raw == false then return nil end
  return raw
end

-- The key's absolute expiry in ms: -1 without a TTL, -2 without the key.
local function expiry_of(key) return server.call('PEXPIRETIME', key) end

---------------------------------------------------------------- writes

-- What a decision does to its key: nil (nothing), or
--   {value = s, at = ms}  store the state with this absolute expiry;
--   {at = ms}             only give the key this expiry;
--   {delete = true}       remove the key.
local function apply(key, write)
  if write == nil then return end
  if write.delete then
    server.call('DEL', key)
  elseif write.value then
    server.call('SET', key, write.value, 'PXAT', write.at)
  else
    server.call('PEXPIREAT', key, write.at)
  end
end

-- The one write a real refusal that wrote nothing else may make
-- (src/algo/mod.rs `refusal_repair`): the state must live until the reset
-- the refusal reports, which ends at `reset_at` (absolute ms, rounded up);
-- a spent key without a TTL is deleted. `at` is the key's expiry
-- (`expiry_of`).
local function refusal_repair(reset_ms, reset_at, at)
  if reset_ms == 0 then
    if at == -1 then return {delete = true} end
    return nil
  end
  if at >= 0 and at >= reset_at then return nil end
  if at == -2 then return nil end
  return {at = reset_at}
end

local function decision(admitted, limit, remaining, retry, reset)
  return {admitted and 1 or 0, limit, remaining, retry, reset}
end

local UNLIMITED = {1, 0, 0, 0, 0}

---------------------------------------------------------------- fixed

-- Fixed window counter (src/algo/fixed.rs): one integer per window, and the
-- key's expiry is the reset. `found`: {count, at} (at: -1 without a TTL).
-- ms from now until `at` (none: 0).
local function time_left(at, now)
  if at == nil then return 0 end
  return math.max(at - now, 0)
end

local function fixed_admit(found, p, cost, now)
  local fresh = now + p.window
  if found and found.at >= 0 and found.at <= now then found = nil end
  local count, at, adopted = 0, nil, false
  if found then
    count, at = found.count, fresh
    if found.at >= 0 and found.at <= fresh then at = found.at end
    adopted = found.at ~= at
    -- limit - count below 2^53 keeps every reply exact.
    if p.limit - count > EXACT then fail(STATE_BEYOND_DOUBLES) end
  end
  local left = time_left(at, now)
  -- A refusal writes only the expiry a counter lacked (or outlived).
  local adoption = nil
  if adopted and cost > 0 then adoption = {at = at} end
  if cost > p.limit then
    return decision(false, p.limit, math.max(p.limit - count, 0), -1, left), adoption
  end
  local next = count + cost
  if next <= p.limit then
    local expires = at or fresh
    local reset = time_left(expires, now)
    if cost == 0 and not found then reset = 0 end -- a peek at no state opens no window
    local write = nil
    if cost > 0 then write = {value = string.format('%d', next), at = expires} end
    return decision(true, p.limit, math.max(p.limit - next, 0), 0, reset), write
  end
  return decision(false, p.limit, math.max(p.limit - count, 0), left, left), adoption
end

local function fixed_refund(found, p, amount, now)
  if found and found.at >= 0 and found.at <= now then found = nil end
  if not found then return fixed_admit(nil, p, 0, now), nil end
  local c = found.count
  if c > EXACT then fail(STATE_BEYOND_DOUBLES) end
  local count = c
  if c > 0 then count = math.max(c - amount, 0) end
  if count == 0 and c > 0 then
    return fixed_admit(nil, p, 0, now), {delete = true}
  end
  local at = now + p.window
  if found.at >= 0 and found.at <= at then at = found.at end
  local write = nil
  if not (count == c and found.at == at) then
    write = {value = string.format('%d', count), at = at}
  end
  return fixed_admit({count = count, at = at}, p, 0, now), write
end

---------------------------------------------------------------- sliding

-- Sliding window counter (src/algo/sliding.rs). All comparisons exact:
-- previous * left + (current + cost) * window <= limit * window.
local function sliding_view(state, p, now)
  local w = p.window
  local start = now - math.fmod(now, w)
  local current, previous, future = 0, 0, false
  if state then
    future = state.start > now
    if state.start == start or future then
      current, previous = state.current, state.previous
    elseif state.start == start - w then
      previous = state.current
    end
    if (current + previous + p.limit) * w > EXACT then fail(STATE_BEYOND_DOUBLES) end
  end
  return {start = start, left = start + w - now, current = current, previous = previous, future = future}
end

local function sliding_used(v, w, c, p) return p * v.left + c * w end

local function sliding_room(v, pol, c, p)
  local free = pol.limit * pol.window - sliding_used(v, pol.window, c, p)
  if free < 0 then return 0 end
  return fdiv(free, pol.window)
end

local function sliding_reset(v, w, c, p)
  if c == 0 and p == 0 then return 0 end
  if c == 0 then return v.left end
  return v.left + w
end

-- The state for these counts, expiring once nothing of it is in view.
local function sliding_stored(start, c, p, w)
  if c == 0 and p == 0 then return {delete = true} end
  local value = string.format('sliding:%d:%d:%d', start, c, p)
  if c == 0 then return {value = value, at = start + w} end
  return {value = value, at = start + 2 * w}
end

local function sliding_wait(v, pol, c, p, cost)
  local w, limit = pol.window, pol.limit
  if p > 0 and c + cost <= limit then
    local excess = sliding_used(v, w, c, p) + cost * w - limit * w
    local t = fdiv(excess + p - 1, p)
    if t < v.left then return t end
  end
  local into_next = 0
  if c > 0 then
    into_next = fdiv(math.max(w * (c - limit + cost), 0) + c - 1, c)
  end
  return v.left + math.min(into_next, w)
end

local function sliding_admit(state, pol, cost, now)
  local v = sliding_view(state, pol, now)
  local w, c, p = pol.window, v.current, v.previous
  local fits = cost <= pol.limit and sliding_used(v, w, c, p) + cost * w <= pol.limit * w
  if not fits then
    local retry = -1
    if cost <= pol.limit then retry = sliding_wait(v, pol, c, p, cost) end
    local write = nil
    if cost > 0 and v.future then write = sliding_stored(v.start, c, p, w) end
    return decision(false, pol.limit, sliding_room(v, pol, c, p), retry, sliding_reset(v, w, c, p)), write
  end
  local after = c + cost
  local write = nil
  if cost > 0 then
    write = {value = string.format('sliding:%d:%d:%d', v.start, after, p), at = v.start + 2 * w}
  end
  return decision(true, pol.limit, sliding_room(v, pol, after, p), 0, sliding_reset(v, w, after, p)), write
end

local function sliding_refund(state, pol, amount, now)
  local v = sliding_view(state, pol, now)
  local after = math.max(v.current - amount, 0)
  local write = nil
  if state and v.current > 0 then write = sliding_stored(v.start, after, v.previous, pol.window) end
  local next = {start = v.start, current = after, previous = v.previous}
  return (sliding_admit(next, pol, 0, now)), write
end

---------------------------------------------------------------- buckets

-- The meter GCRA, the token bucket and the leaky queue share
-- (src/algo/gcra.rs `Meter`): nil when the cost never fits, else the new
-- debt and whether it fits, or the wait until it would.
local function judge(p, debt, cost)
  local increment = cost * p.interval
  if increment > p.capacity then return false, nil end
  if debt + increment <= p.capacity then return true, debt + increment end
  return false, debt + increment - p.capacity
end

-- Whole requests of cost 1 that fit on top of `debt`.
local function room(p, debt) return fdiv(math.max(p.capacity - debt, 0), p.interval) end

local function forgive(p, debt, amount)
  if amount >= fdiv(debt, p.interval) + 1 then return 0 end
  return math.max(debt - amount * p.interval, 0)
end

-- Token bucket (src/algo/token.rs): credit in ns, refilled continuously.
local function token_credit(state, p, now)
  if not state then return nil end
  local elapsed = math.max((now.ms - state.last) * NS_PER_MS + (now.sub - state.last_sub), 0)
  return math.min(math.max(state.credit + elapsed, 0), p.capacity)
end

-- When a bucket holding `level` now is full again (absolute ms, rounded up).
local function token_full_at(level, p, now) return ms_at(now, p.capacity - level) end

local function token_stored(level, p, now)
  return {value = string.format('token:%d:%d:%d', level, now.ms, now.sub), at = token_full_at(level, p, now)}
end

-- A last refill after now (a clock that went back, a hand-written value).
local function token_from_the_future(state, now)
  return state.last > now.ms or (state.last == now.ms and state.last_sub > now.sub)
end

local function token_admit(state, p, cost, now)
  local level = token_credit(state, p, now) or p.capacity
  local debt = p.capacity - level
  local admitted, x = judge(p, debt, cost)
  if admitted then
    local write = nil
    if cost > 0 then write = token_stored(p.capacity - x, p, now) end
    return decision(true, p.burst, room(p, x), 0, ceil_ms(x)), write, ms_at(now, x)
  end
  local retry = -1
  if x ~= nil then retry = ceil_ms(x) end
  local write = nil
  if cost > 0 and state and token_from_the_future(state, now) then
    if level == p.capacity then write = {delete = true} else write = token_stored(level, p, now) end
  end
  return decision(false, p.burst, room(p, debt), retry, ceil_ms(debt)), write, token_full_at(level, p, now)
end

local function token_refund(state, p, amount, now)
  local level = token_credit(state, p, now)
  if level == nil then return (token_admit(nil, p, 0, now)), nil end
  local after = p.capacity - forgive(p, p.capacity - level, amount)
  local write = nil
  if level ~= p.capacity then
    if after == p.capacity then write = {delete = true} else write = token_stored(after, p, now) end
  end
  return (token_admit({credit = after, last = now.ms, last_sub = now.sub}, p, 0, now)), write
end

-- GCRA and the leaky queue (src/algo/gcra.rs `Schedule`): the state is one
-- absolute ns time; its span after now is the debt, clamped to the bucket.
-- The state `debt` ns ahead of now, expiring when the debt is paid.
local function schedule_stored(algo, debt, now)
  return {value = algo .. ':' .. ns_at(now, debt), at = ms_at(now, debt)}
end

local function schedule_admit(algo, state, p, cost, now)
  local ahead = state and state.ahead or 0
  local debt = math.min(math.max(ahead, 0), p.capacity)
  local admitted, x = judge(p, debt, cost)
  if admitted then
    local retry = 0
    if algo == 'leaky' then retry = ceil_ms(debt) end -- the queue ahead of it
    local write = nil
    if cost > 0 then write = schedule_stored(algo, x, now) end
    -- Never more than the burst (the leaky queue's head is not waiting).
    return decision(true, p.burst, math.min(room(p, x), p.burst), retry, ceil_ms(x)), write, ms_at(now, x)
  end
  local retry = -1
  if x ~= nil then retry = ceil_ms(x) end
  local write = nil
  -- Beyond a full bucket: written back clamped, so it drains.
  if cost > 0 and ahead > p.capacity then write = schedule_stored(algo, debt, now) end
  return decision(false, p.burst, math.min(room(p, debt), p.burst), retry, ceil_ms(debt)), write,
    ms_at(now, debt)
end

local function schedule_refund(algo, state, p, amount, now)
  local before = 0
  if state then before = math.min(math.max(state.ahead, 0), p.capacity) end
  local after = forgive(p, before, amount)
  local write = nil
  if state and before > 0 then
    if after == 0 then write = {delete = true} else write = schedule_stored(algo, after, now) end
  end
  local peek = nil
  if after > 0 then peek = {ahead = after} end
  return (schedule_admit(algo, peek, p, 0, now)), write
end

---------------------------------------------------------------- dispatch

-- Each returns the decision, the write and when the reset it reports ends
-- (absolute ms, rounded up). The windows read the clock's ms.
local ADMIT = {
  sliding = function(s, p, c, n)
    local d, write = sliding_admit(s, p, c, n.ms)
    return d, write, n.ms + d[5]
  end,
  token = token_admit,
  gcra = function(s, p, c, n) return schedule_admit('gcra', s, p, c, n) end,
  leaky = function(s, p, c, n) return schedule_admit('leaky', s, p, c, n) end,
}
local REFUND = {
  sliding = function(s, p, a, n) return sliding_refund(s, p, a, n.ms) end,
  token = token_refund,
  gcra = function(s, p, c, n) return schedule_refund('gcra', s, p, c, n) end,
  leaky = function(s, p, c, n) return schedule_refund('leaky', s, p, c, n) end,
}

-- A limiter as read: its key, state (nil: none) and, for a fixed counter,
-- its expiry.
local function read_limiter(key, p, now)
  local raw = read_value(key)
  if raw == nil then return nil end
  local state = decode(p.algo, raw, now)
  if p.algo == 'fixed' then state.at = expiry_of(key) end
  return state
end

-- Decides one call on one limiter (src/algo/mod.rs `admit`): the decision
-- and the write. A real refusal that writes nothing else makes the repair.
local function admit(key, state, p, cost, now)
  if p.algo == 'fixed' then return fixed_admit(state, p, cost, now.ms) end
  local d, write, reset_at = ADMIT[p.algo](state, p, cost, now)
  if d[1] == 0 and cost > 0 and write == nil and state ~= nil then
    write = refusal_repair(d[5], reset_at, expiry_of(key))
  end
  return d, write
end

local function refund(state, p, amount, now)
  if amount == 0 then
    -- A peek: no write, even where a real call would normalise the state.
    if p.algo == 'fixed' then return (fixed_admit(state, p, 0, now.ms)), nil end
    return (ADMIT[p.algo](state, p, 0, now)), nil
  end
  if p.algo == 'fixed' then return fixed_refund(state, p, amount, now.ms) end
  return REFUND[p.algo](state, p, amount, now)
end

---------------------------------------------------------------- replies

-- RESP3 field names of the module (src/store.rs), as simple strings like
-- the module's: a status table converts to one (a plain Lua string would
-- become a bulk string).
local function status(name) return {ok = name} end
local DECISION_FIELDS = {status('admitted'), status('limit'), status('remaining'),
                         status('retry_after_ms'), status('reset_after_ms')}
local THROTTLE_FIELDS = {status('limited'), status('limit'), status('remaining'),
                         status('retry_after'), status('reset_after')}
local ADMITALL_FIELDS = {status('admitted'), status('refused_by'), status('retry_after_ms'),
                         status('limiters')}

-- A function cannot see its caller's protocol: FORMAT map asks for the
-- module's RESP3 map (a flat name/value list to a RESP2 client; the order
-- of the fields is Lua's, not the module's).
local function named(fields, values, format)
  if format ~= 'map' then return values end
  local m = {}
  for i = 1, #fields do m[fields[i]] = values[i] end
  return {map = m}
end

-- Runs a function body; a `fail` becomes the error reply, verbatim.
local function entry(body)
  return function(keys, args)
    local ok, result = pcall(body, keys, args)
    if ok then return result end
    if getmetatable(result) == Failure then return server.error_reply(result.text) end
    error(result, 0)
  end
end

---------------------------------------------------------------- functions

-- The module refuses a call of more than 256 arguments (its command name
-- and META keyword included) before reading any.
local MAX_ARGS = 256
local function check_argc(argc)
  if argc > MAX_ARGS then fail('ERR too many arguments') end
end

-- The limiter (or lease: `noun`) key and its optional META hash.
local function limiter_keys(keys, args, command, noun)
  check_argc(1 + #keys + (#keys > 1 and 1 or 0) + #args)
  if #keys < 1 then wrong_arity(command) end
  if #keys > 2 then
    fail('ERR ' .. string.lower((string.gsub(command, '%.', '_'))) .. ' takes 1 or 2 keys: the '
         .. (noun or 'limiter') .. ' key and its META hash')
  end
  return keys[1], keys[2]
end

-- rl_admit and rl_refund (src/commands.rs `update_limiter`).
local function update_limiter(keys, args, command, decide)
  local key, metakey = limiter_keys(keys, args, command)
  local opts = parse_options(args, ADMIT_OPTIONS, metakey)
  local now = limiter_clock()
  local p = make_policy(opts, metakey, now)
  if p == nil then return named(DECISION_FIELDS, UNLIMITED, opts.FORMAT) end
  local state = read_limiter(key, p, now)
  local d, write = decide(key, state, p, opts.COST or 1, now)
  apply(key, write)
  return named(DECISION_FIELDS, d, opts.FORMAT)
end

local function rl_admit(keys, args)
  return update_limiter(keys, args, 'RL.ADMIT', admit)
end

local function rl_refund(keys, args)
  return update_limiter(keys, args, 'RL.REFUND', function(_, state, p, amount, now)
    return refund(state, p, amount, now)
  end)
end

-- The wait a request of cost 1 would be told now; writes nothing.
local function rl_ttl(keys, args)
  local key, metakey = limiter_keys(keys, args, 'RL.TTL')
  local opts = parse_options(args, POLICY_OPTIONS, metakey)
  local now = limiter_clock()
  local r = resolve(opts, metakey)
  if r == nil then return 0 end
  if r.algo == 'fixed' and r.window == nil then
    -- The fixed window's back-off is the counter's PTTL: no window needed.
    if r.limit > EXACT or now.ms > EXACT then fail(BEYOND_DOUBLES) end
    local raw = read_value(key)
    if raw == nil then return 0 end
    local count = decode('fixed', raw, now).count
    local at = expiry_of(key)
    if at > EXACT then fail(STATE_BEYOND_DOUBLES) end
    if at >= 0 and at > now.ms and count >= r.limit then return at - now.ms end
    return 0
  end
  local p = policy_of(r, now)
  local state = read_limiter(key, p, now)
  local d
  if p.algo == 'fixed' then
    d = fixed_admit(state, p, 1, now.ms)
  else
    d = ADMIT[p.algo](state, p, 1, now)
  end
  return math.max(d[4], 0)
end

local function rl_limit(keys, args)
  check_argc(1 + #keys + #args)
  if #keys ~= 1 or #args ~= 0 then wrong_arity('RL.LIMIT') end
  local max = meta_int(read_meta(keys[1]), 'max', 0, NON_NEGATIVE)
  -- Replied as a number: refused, never rounded, beyond 2^53.
  if max and max > EXACT then fail(BEYOND_DOUBLES) end
  return max or 0
end

local function rl_reset(keys, args)
  check_argc(1 + #keys + #args)
  if #keys ~= 1 or #args ~= 0 then wrong_arity('RL.RESET') end
  local kind = server.call('TYPE', keys[1])['ok']
  if kind == 'none' then return 0 end
  if kind ~= 'string' then fail(WRONGTYPE) end
  server.call('DEL', keys[1])
  return 1
end

-- RL.THROTTLE (src/algo/throttle.rs): redis-cell's CL.THROTTLE, GCRA with
-- max_burst + 1 cells of tolerance, times in whole seconds.
local function rl_throttle(keys, args)
  check_argc(1 + #keys + #args)
  local format = nil
  local n = #args
  if n >= 2 and string.upper(args[n - 1]) == 'FORMAT' and (n == 5 or n == 6) then
    format = OPTIONS.FORMAT(args[n])
    n = n - 2
  end
  if #keys ~= 1 or n < 3 or n > 4 then wrong_arity('RL.THROTTLE') end
  local key = keys[1]
  local max_burst = int_arg(args[1], 'max_burst', 0)
  local count = int_arg(args[2], 'count_per_period', 1)
  local period = int_arg(args[3], 'period', 1)
  local quantity = 1
  if n == 4 then quantity = int_arg(args[4], 'quantity', 0) end
  local now = limiter_clock()
  -- The meter, with the module's checks, then the library's range.
  local interval = math.floor(period * NS_PER_S / count)
  if period * NS_PER_S <= EXACT then interval = fdiv(period * NS_PER_S, count) end
  if interval == 0 then
    fail('ERR count_per_period is too large: more than one request per ns')
  end
  if not fits_ns(now.ms, interval) then
    fail('ERR period is too large: ' .. PAST_THE_CLOCK)
  end
  local limit = max_burst + 1
  local tolerance = interval * limit
  if not fits_ns(now.ms, tolerance) then
    fail('ERR max_burst is too large: ' .. PAST_THE_CLOCK)
  end
  if period * NS_PER_S > EXACT or tolerance > EXACT then fail(BEYOND_DOUBLES) end
  -- Our `gcra:<tat_ns>` state, or redis-cell's plain ns integer.
  local raw = read_value(key)
  local ahead = nil
  if raw ~= nil then
    local tat = string.match(raw, '^gcra:([^:]*)$')
    if parse_i64(tat) == nil then
      tat = raw
      if parse_i64(tat) == nil then bad_state('gcra') end
    end
    ahead = ns_after(tat, now)
  end
  local stored = ahead or 0
  local ttl = math.min(math.max(stored, 0), tolerance)
  local increment = quantity * interval
  local allowed, wait, write = false, nil, nil
  if increment <= tolerance then
    local new = ttl + increment
    if new <= tolerance then
      allowed = true
      ttl = new
      if quantity > 0 then
        write = {value = 'gcra:' .. ns_at(now, new), at = ms_at(now, new)}
      end
    else
      wait = new - tolerance
    end
  end
  if not allowed and quantity > 0 then
    if ahead ~= nil and ahead > tolerance then
      -- Beyond the tolerance: written back clamped, so it drains.
      write = {value = 'gcra:' .. ns_at(now, ttl), at = ms_at(now, ttl)}
    elseif raw ~= nil then
      write = refusal_repair(ceil_ms(ttl), ms_at(now, ttl), expiry_of(key))
    end
  end
  apply(key, write)
  local retry = -1
  if wait ~= nil then retry = ceil_div(wait, NS_PER_S) end
  local reply = {allowed and 0 or 1, limit, fdiv(tolerance - ttl, interval), retry, ceil_div(ttl, NS_PER_S)}
  return named(THROTTLE_FIELDS, reply, format)
end

-- RL.ADMITALL: one POLICY per counter, in order; all are admitted or none
-- is consumed (src/commands.rs `admit_all`).
local function rl_admitall(keys, args)
  if 2 + #keys + #args > MAX_ARGS then
    -- The module's numkeys counts the counters only: one per POLICY.
    local counters = 0
    for i = 1, #args do if string.upper(args[i]) == 'POLICY' then counters = counters + 1 end end
    check_argc(2 + math.min(counters, #keys) + #args)
  end
  if #keys < 1 then bad_value('numkeys', POSITIVE) end
  local cost, format = nil, nil
  local policies = {}
  local at = 1
  local top = {COST = true, FORMAT = true}
  while at <= #args do
    local word = args[at]
    local upper = string.upper(word)
    if upper == 'POLICY' then
      policies[#policies + 1] = {}
      at = at + 1
    elseif top[upper] then
      local holder = {COST = cost, FORMAT = format}
      set_option(holder, word, args, at, top)
      cost, format = holder.COST, holder.FORMAT
      at = at + 2
    elseif upper == 'META' then
      local group = policies[#policies]
      if group == nil then fail('ERR policy options must follow a POLICY keyword') end
      local value = args[at + 1]
      if value == nil then fail('ERR META needs a value') end
      if group.META ~= nil then fail('ERR META is given more than once') end
      group.META = value
      at = at + 2
    elseif POLICY_OPTIONS[upper] then
      local group = policies[#policies]
      if group == nil then fail('ERR policy options must follow a POLICY keyword') end
      set_option(group, word, args, at, POLICY_OPTIONS)
      at = at + 2
    else
      if #policies == 0 then
        fail('ERR expected POLICY after the ' .. #keys .. ' keys numkeys counts, got \'' .. shown(word) .. '\'')
      end
      unknown(word)
    end
  end
  -- The first keys are the counters, one per POLICY; the rest are META
  -- hashes, each named by some POLICY.
  local n = #policies
  if n == 0 or n > #keys then fail('ERR one POLICY per key is needed: ' .. #keys .. ' keys, ' .. n .. ' policies') end
  local counters, named_metas = {}, {}
  for i = 1, n do
    if counters[keys[i]] then fail('ERR every key must be distinct') end
    counters[keys[i]] = true
  end
  local metas = {}
  for i = n + 1, #keys do metas[keys[i]] = true end
  for i = 1, n do
    local m = policies[i].META
    if m ~= nil then
      if not metas[m] then
        fail('ERR META key \'' .. shown(m) .. '\' of POLICY ' .. i .. ' is not among the keys after the ' .. n .. ' counters')
      end
      named_metas[m] = true
    end
  end
  local unused = 0
  for i = n + 1, #keys do if not named_metas[keys[i]] then unused = unused + 1 end end
  if unused > 0 then fail('ERR one POLICY per key is needed: ' .. (n + unused) .. ' keys, ' .. n .. ' policies') end
  cost = cost or 1
  local now = limiter_clock()
  -- Every policy is resolved before any state is read.
  local members = {}
  for i = 1, n do
    members[i] = {key = keys[i], policy = make_policy(policies[i], policies[i].META, now)}
  end
  for i = 1, n do
    local m = members[i]
    if m.policy == nil then
      m.decision = UNLIMITED
    else
      m.state = read_limiter(m.key, m.policy, now)
      m.decision, m.write = admit(m.key, m.state, m.policy, cost, now)
    end
  end
  local all = true
  for i = 1, n do if members[i].decision[1] == 0 then all = false end end
  local refused_by, longest = 0, 0
  local decisions = {}
  for i = 1, n do
    local m = members[i]
    local wait = m.decision[4]
    if all then
      longest = math.max(longest, wait)
      apply(m.key, m.write)
    elseif m.decision[1] == 0 then
      -- A refusal consumes nothing, but makes the repair RL.ADMIT would.
      apply(m.key, m.write)
      if refused_by == 0 or (longest >= 0 and (wait < 0 or wait > longest)) then
        refused_by, longest = i, wait
      end
    elseif m.policy ~= nil then
      -- Nothing was consumed: this member as it stands.
      m.decision = admit(m.key, m.state, m.policy, 0, now)
    end
    decisions[i] = named(DECISION_FIELDS, m.decision, format)
  end
  return named(ADMITALL_FIELDS, {all and 1 or 0, refused_by, longest, decisions}, format)
end

---------------------------------------------------------------- leases

-- Concurrency leases (src/algo/lease.rs): a ceiling on work in flight. A
-- lease key is a sorted set, member = lease id, score = its deadline in ms
-- of server time; a lease is live while now < deadline, and the key
-- expires at its latest live deadline (it is gone with its last lease).
-- Every write first reclaims (removes) the leases whose deadline passed.

-- A deadline is an integer from 0 to 2^53, exact in a double.
local LAST_DEADLINE = 9007199254740992 -- 2^53
local NOT_A_DEADLINE = 'ERR lease key holds a score that is not a deadline in ms'
local LEASE_FIELDS = {status('acquired'), status('limit'), status('in_flight'),
                      status('retry_after_ms'), status('lease_id')}

local function non_empty(v, name)
  if v == '' then fail('ERR ' .. name .. ' must be a non-empty string') end
  return v
end

-- How RL.ACQUIRE's option values are read (LIMIT is at least 1 here).
local LEASE_READERS = {
  LIMIT = function(v) return int_arg(v, 'LIMIT', 1) end,
  TTL = function(v) return int_arg(v, 'TTL', 1) end,
  ID = function(v) return non_empty(v, 'ID') end,
  FORMAT = OPTIONS.FORMAT,
}
local ACQUIRE_OPTIONS = {LIMIT = true, TTL = true, ID = true, FORMAT = true}

-- now + ttl as a deadline; refused past 2^53 (exact: now < 2^53).
local function deadline_after(now, ttl)
  if ttl > LAST_DEADLINE - now then fail('ERR TTL is too large: the lease deadline passes 2^53 ms') end
  return now + ttl
end

-- The limit and TTL of an acquire: inline options win over the META hash's
-- fields `max` and `ttl`. nil for no limit (none, or 0).
local function lease_policy(opts, metakey, now)
  local meta = NO_META
  if metakey ~= nil then
    local fields = server.pcall('HMGET', metakey, 'max', 'ttl')
    if fields.err then fail('WRONGTYPE META key does not hold a hash') end
    meta = {max = fields[1] or nil, ttl = fields[2] or nil}
  end
  local limit = opts.LIMIT
  if limit == nil then limit = meta_int(meta, 'max', 0, NON_NEGATIVE) or 0 end
  if limit == 0 then return nil end
  local ttl = opts.TTL
  if ttl == nil then ttl = meta_int(meta, 'ttl', 1, POSITIVE) end
  if ttl == nil then
    fail('ERR a limit is set but no TTL: give TTL or set field \'ttl\' in the META hash')
  end
  local deadline = deadline_after(now, ttl)
  -- The library's own: the limit is replied, and must be exact.
  if limit > EXACT then fail(BEYOND_DOUBLES) end
  return limit, deadline
end

-- A deadline or expiry as a command argument, in plain digits.
local function digits(n) return string.format('%d', n) end

-- A score read from a lease key as its deadline, or the contract's error.
-- tonumber reads '-0', 'inf' and exponents too; all are judged here.
local function deadline_of(score)
  local d = tonumber(score)
  if d == nil or not (d >= 0 and d <= LAST_DEADLINE) or d % 1 ~= 0 then fail(NOT_A_DEADLINE) end
  return d
end

-- What a lease call needs of the key at `now` (src/algo/lease.rs `Held`),
-- read in O(log n + expired), never the whole set: its member count, the
-- expired leases' ids (score <= now), the last lease (id and deadline) and
-- the deadline before it, and the deadline of lease `named` (or nil); a
-- refusal reads the earliest live deadline itself. Every score read is
-- checked before anything is written; a score nothing reads is judged when
-- a call reads it.
local function read_held(key, now, named)
  local expired = server.pcall('ZRANGE', key, '-inf', digits(now), 'BYSCORE', 'WITHSCORES')
  if expired.err then fail(WRONGTYPE) end
  local ids = {}
  for i = 1, #expired / 2 do
    deadline_of(expired[2 * i])
    ids[i] = expired[2 * i - 1]
  end
  local held = {members = server.call('ZCARD', key), expired = ids}
  if held.members > #ids then
    -- Some lease is live (else the last two are among the expired, read above).
    local top = server.call('ZRANGE', key, -2, -1, 'WITHSCORES')
    local n = #top
    held.last_id, held.last = top[n - 1], deadline_of(top[n])
    if n == 4 then held.before_last = deadline_of(top[2]) end
  end
  if named ~= nil and held.members > 0 then
    local score = server.call('ZSCORE', key, named)
    if score then held.named = deadline_of(score) end
  end
  return held
end

local function live_count(held) return held.members - #held.expired end

local function named_live(held, now) return held.named ~= nil and held.named > now end

-- The latest live deadline once lease `moved` (an id, or nil) is taken out,
-- and `also` (or nil): the key's expiry after the call, nil for no lease.
local function latest_deadline(held, now, moved, also)
  local latest = held.last
  if moved ~= nil and moved == held.last_id then latest = held.before_last end
  if latest ~= nil and latest <= now then latest = nil end
  if also ~= nil and (latest == nil or also > latest) then latest = also end
  return latest
end

-- Carries out a lease call's plan (src/algo/lease.rs `Plan`) in the
-- contract's order: ZREM the removed ids, ZADD the new deadline, PEXPIREAT
-- the key's latest deadline (nil: the key is gone). Effect replication
-- sends exactly these absolute commands to replicas and the AOF.
local function store_leases(key, removed, put_id, put_deadline, expires_at)
  -- ZREM in slices: unpack of a long list would overflow Lua's stack.
  for i = 1, #removed, 1000 do
    server.call('ZREM', key, unpack(removed, i, math.min(i + 999, #removed)))
  end
  if put_id ~= nil then server.call('ZADD', key, digits(put_deadline), put_id) end
  if expires_at ~= nil then server.call('PEXPIREAT', key, digits(expires_at)) end
end

-- Generated lease ids: `<now_ms hex>-<16 hex digits>`, never handed out
-- twice for a key, not even after a release in the same ms (a stale
-- holder's release would free someone else's slot). math.random cannot give
-- that: in a Valkey 8.1/9.1 function it is not reseeded per call, but its
-- sequence starts the same after every server start (checked on both
-- versions), so a restarted or promoted server would repeat it. The 16
-- digits are a µs clock that never goes back within one load of the
-- library: max(the previous + 1, the server's µs now), skipping any id the
-- key holds (one from the module or another server). Within a load they
-- only grow, even under the frozen clock of MULTI/EXEC; a new load (a
-- restart, FUNCTION LOAD, a failover) starts from the µs clock, which has
-- passed every earlier value unless one server handed out more ids than
-- µs went by (each call takes far longer than a µs) or clocks differ.
local last_nonce = 0

local function fresh_id(now, now_us, taken)
  local nonce = math.max(last_nonce + 1, now_us)
  local id = string.format('%x-%016x', now, nonce)
  while taken(id) do
    nonce = nonce + 1
    id = string.format('%x-%016x', now, nonce)
  end
  last_nonce = nonce
  return id
end

local function nothing_taken() return false end

-- RL.ACQUIRE (src/algo/lease.rs `acquire`): renew the caller's live lease
-- ID, or take a free slot, or refuse with the wait for the earliest one.
local function rl_acquire(keys, args)
  local key, metakey = limiter_keys(keys, args, 'RL.ACQUIRE', 'lease')
  local opts = parse_options(args, ACQUIRE_OPTIONS, metakey, LEASE_READERS)
  local now, now_us = lease_clock()
  local limit, deadline = lease_policy(opts, metakey, now)
  if limit == nil then
    -- Unlimited: nothing read, nothing written.
    local id = opts.ID or fresh_id(now, now_us, nothing_taken)
    return named(LEASE_FIELDS, {1, 0, 0, 0, id}, opts.FORMAT)
  end
  local held = read_held(key, now, opts.ID)
  local live = live_count(held)
  local renewed = nil
  if named_live(held, now) then renewed = opts.ID end
  if renewed == nil and live >= limit then
    -- Refused (live >= limit >= 1: a live lease exists). Only a reclaim
    -- writes; the key keeps its latest deadline.
    local first = server.call('ZRANGE', key, '(' .. digits(now), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
    local retry = deadline_of(first[2]) - now
    if #held.expired > 0 then store_leases(key, held.expired, nil, nil, latest_deadline(held, now)) end
    return named(LEASE_FIELDS, {0, limit, live, retry, false}, opts.FORMAT)
  end
  local function taken(id) return server.call('ZSCORE', key, id) ~= false end
  local id = opts.ID or fresh_id(now, now_us, taken)
  store_leases(key, held.expired, id, deadline, latest_deadline(held, now, renewed, deadline))
  if renewed == nil then live = live + 1 end
  return named(LEASE_FIELDS, {1, limit, live, 0, id}, opts.FORMAT)
end

-- RL.RELEASE (src/algo/lease.rs `release`): 1 when the live lease `id`
-- is ended, else 0; expired leases are reclaimed either way. (RL.RELEASE,
-- RL.EXTEND and RL.INFLIGHT have a fixed arity: the server refuses a wrong
-- one, however long, before the module's argument limit.)
local function rl_release(keys, args)
  if #keys ~= 1 or #args ~= 1 then wrong_arity('RL.RELEASE') end
  local key, id = keys[1], non_empty(args[1], 'lease-id')
  local now = lease_clock()
  local held = read_held(key, now, id)
  local mine = named_live(held, now)
  local removed = held.expired
  if mine then removed[#removed + 1] = id end
  if #removed > 0 then
    store_leases(key, removed, nil, nil, latest_deadline(held, now, mine and id or nil))
  end
  return mine and 1 or 0
end

-- RL.EXTEND (src/algo/lease.rs `extend`): the heartbeat. 1 and the live
-- lease `id` now ends TTL ms from now; 0 when it is no longer live.
local function rl_extend(keys, args)
  if #keys ~= 1 or #args ~= 3 then wrong_arity('RL.EXTEND') end
  local key, id = keys[1], non_empty(args[1], 'lease-id')
  if string.upper(args[2]) ~= 'TTL' then unknown(args[2]) end
  local ttl = int_arg(args[3], 'TTL', 1)
  local now = lease_clock()
  local deadline = deadline_after(now, ttl)
  local held = read_held(key, now, id)
  if not named_live(held, now) then
    if #held.expired > 0 then store_leases(key, held.expired, nil, nil, latest_deadline(held, now)) end
    return 0
  end
  store_leases(key, held.expired, id, deadline, latest_deadline(held, now, id, deadline))
  return 1
end

-- RL.INFLIGHT: the live leases now. A read: it reclaims nothing.
local function rl_inflight(keys, args)
  if #keys ~= 1 or #args ~= 0 then wrong_arity('RL.INFLIGHT') end
  local now = lease_clock()
  return live_count(read_held(keys[1], now))
end

-- The library's version: the crate's (Cargo.toml; a test holds them equal).
-- A package that bundles this file loads it over an older copy, or over one
-- without rl_version, and never over a newer one.
local VERSION = '0.1.0'

local function rl_version(keys, args)
  if #keys ~= 0 or #args ~= 0 then wrong_arity('rl_version') end
  return VERSION
end

---------------------------------------------------------------- registration

server.register_function{function_name = 'rl_admit', callback = entry(rl_admit)}
server.register_function{function_name = 'rl_ttl', callback = entry(rl_ttl), flags = {'no-writes'}}
server.register_function{function_name = 'rl_limit', callback = entry(rl_limit), flags = {'no-writes'}}
server.register_function{function_name = 'rl_admitall', callback = entry(rl_admitall)}
server.register_function{function_name = 'rl_refund', callback = entry(rl_refund)}
server.register_function{function_name = 'rl_reset', callback = entry(rl_reset)}
server.register_function{function_name = 'rl_throttle', callback = entry(rl_throttle)}
server.register_function{function_name = 'rl_acquire', callback = entry(rl_acquire)}
-- A release or a heartbeat frees or keeps memory: allowed when the server
-- is out of memory, as the module's RL.RELEASE and RL.EXTEND are.
server.register_function{function_name = 'rl_release', callback = entry(rl_release), flags = {'allow-oom'}}
server.register_function{function_name = 'rl_extend', callback = entry(rl_extend), flags = {'allow-oom'}}
server.register_function{function_name = 'rl_inflight', callback = entry(rl_inflight), flags = {'no-writes'}}
server.register_function{function_name = 'rl_version', callback = entry(rl_version), flags = {'no-writes', 'allow-stale'}}
