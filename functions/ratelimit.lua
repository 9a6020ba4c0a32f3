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
  FCALL    rl_acquire  1|2 key [metakey] [LIMIT n] [TTL ms] [ID lease-id] [SHADOW] [FORMAT map]
  FCALL    rl_release  1 key lease-id
  FCALL    rl_extend   1 key lease-id TTL ms
  FCALL_RO rl_inflight 1 key
  FCALL_RO rl_version  0

Every key is a key: the META hash of rl_admit, rl_ttl, rl_refund and
rl_acquire is KEYS[2]. rl_admitall takes one counter per POLICY block, in order, first,
then the META hashes; a POLICY block names its META hash by key name, which
must be one of the keys after the counters (several blocks may share one).

The module's source (src/) is the specification; this file follows its
path: options (src/args.rs) -> policy (src/resolve.rs, src/algo/policy.rs)
-> stored state -> algorithm (src/algo/) -> write -> reply (src/reply.rs);
src/commands/ has each command's flow.

Cost: a limiter call is written to cost close to the few lines of Lua
people write by hand (bench/lua/hand_*.lua; docs/performance.md has the
figures, and what the exactness costs on top). A validated policy is
remembered by its argument words (`remember`), with the last ms its clock
checks hold for, so a call parses nothing it parsed before, and its
decider is a closure over its numbers; a decision is plain numbers, passed
as multiple values, and the reply is one table; each state format has one
pattern, written once; the standard functions the hot path calls are bound
to locals on the first call; and the deciders never raise (a raised error
would have the server append its position to the reply), so only the
working out of a policy, which may fail on an argument, runs under pcall.

Numbers: Lua numbers are doubles, exact for integers below 2^53. Absolute
ns times (about 1.8e18) are read and written as ms plus a 6-digit ns
remainder, and the arithmetic is on spans relative to now (itself a ms and
the ns into it), so the module's state round-trips exactly. Everything else must stay below 2^53 (see
`exact_policy` and STATE_BEYOND_DOUBLES); beyond that the call is refused
with an ERR that says so, never answered with a rounded number.

Time: the server's clock (TIME), read once per call (`clock`, `lease_clock`); inside a
script and inside MULTI/EXEC it is frozen, and it is the clock the module
reads, and the one the server resolves a relative expiry (SET PX, PEXPIRE)
and PTTL against. The fixed window reads no clock: it works in ms left
(PTTL) and writes relative times. Writes reach replicas and the AOF as
absolute times (the server turns SET PX into SET PXAT and PEXPIRE into
PEXPIREAT when it propagates them; INCRBY keeps the TTL), so they hold the
primary's values and expiries.
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
-- The clock is read in µs, as the module reads it (`clock`): its ms for
-- the windows, plus the ns into that ms (`sub`) for the buckets, whose
-- absolute times are only ever formed in `ns_after`, `split_at` and `ms_at`.
local NS_PER_MS = 1000000
local NS_PER_S = 1000000000

-- The standard functions the hot paths call, bound on the first call of
-- any function (`bind`): the standard libraries are not reachable while
-- the library loads, and a global is a lookup through the server's
-- protected global table on every use.
-- `server_pcall` is server.pcall: an error comes back as a table instead
-- of raising (GET of another type's key: WRONGTYPE).
local tonum, find, match, fmt, floor, fmod, typeof, call, server_pcall -- set by `bind`

-- floor(a / b) for integers below 2^53, corrected for the rounding of the
-- division.
local function fdiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- A non-negative ns span (below 2^53) in whole ms, rounded up (0 for a
-- negative one). Its quotient by 1e6 is below 2^34, where the division
-- rounds by under 1e-6, less than any quotient's distance to the next
-- integer: floor is exact, and so is the product checked after it.
local function ceil_ms(ns)
  if ns <= 0 then return 0 end
  local ms = floor(ns / NS_PER_MS)
  if ms * NS_PER_MS < ns then return ms + 1 end
  return ms
end

-- The same for any unit (whole seconds). Not as fdiv(n + unit - 1, unit):
-- that sum may pass 2^53 and round.
local function ceil_div(n, unit)
  if n <= 0 then return 0 end
  local q = fdiv(n, unit)
  if q * unit < n then return q + 1 end
  return q
end

-- An integer with the server's strictness (src/num.rs): optional '-',
-- digits, no '+', no spaces, no leading zeros, within i64. Returns the
-- number (rounded beyond 2^53; callers check the range where it matters),
-- or nil.
local function parse_i64(s)
  if typeof(s) ~= 'string' then return nil end
  local sign, digits = match(s, '^(%-?)([0-9]+)$')
  if not digits or #digits > 19 then return nil end
  if string.byte(digits, 1) == 48 and (#digits > 1 or sign == '-') then return nil end
  if #digits == 19 and digits > (sign == '-' and I64_MIN_DIGITS or I64_MAX) then return nil end
  return tonum(s)
end

-- 10^(n - 1): the least n-digit number without a leading zero (a field
-- of n digits below it has one).
local LEAST = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
               10000000000, 100000000000, 1000000000000, 10000000000000, 100000000000000,
               1000000000000000}

-- An absolute ns time given as decimal digits, as the span (ns) from
-- now: exact while the span is below 2^53, and beyond it never on the
-- wrong side of any bound below 2^53. A negative time is long past.
local function ns_after(digits, now_ms, now_sub)
  if string.byte(digits, 1) == 45 then return -I64_LIMIT end -- '-'
  if #digits <= 6 then return tonum(digits) - now_ms * NS_PER_MS - now_sub end
  return (tonum(string.sub(digits, 1, -7)) - now_ms) * NS_PER_MS
    + (tonum(string.sub(digits, -6)) - now_sub)
end

-- The absolute ns time `span` (>= 0, below 2^53) after now, as its ms
-- and the ns into that ms; the span is split before `now_sub` is added,
-- so nothing passes 2^53.
local function split_at(now_ms, now_sub, span)
  local ms = floor(span / NS_PER_MS) -- exact: see ceil_ms
  local into = span - ms * NS_PER_MS + now_sub
  if into >= NS_PER_MS then return now_ms + ms + 1, into - NS_PER_MS end
  return now_ms + ms, into
end

-- That time in ms, rounded up: a key expiring then outlives it.
local function ms_at(now_ms, now_sub, span)
  local ms, into = split_at(now_ms, now_sub, span)
  if into > 0 then return ms + 1 end
  return ms
end

---------------------------------------------------------------- errors

-- The module's reply texts (src/error.rs).
local NON_NEGATIVE = 'an integer from 0 to 9223372036854775807'
local POSITIVE = 'an integer from 1 to 9223372036854775807'
local BURST_RANGE = 'an integer from 1 (0 for ALGO leaky) to 9223372036854775807'
local ALGO_NAMES = 'one of fixed, sliding, token, gcra, leaky'
local PERIOD_NAMES = 'one of day, week, month, year'
local OFFSET_FORM = 'a fixed offset from UTC such as +05:30 or -08:00, or an IANA zone name such as Europe/Berlin'
local ZERO_OR_ONE = '0 or 1'
local MAX_RESERVE_FORM = 'an integer from 0 to 86400000'
-- The booking horizon (ms): its most, and the module config's default.
local MAX_RESERVE_MS, DEFAULT_RESERVE_MS = 86400000, 60000
local PAST_THE_CLOCK = 'its times would pass the ns clock (the year 2262)'
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local NOT_A_COUNTER = 'ERR limiter key does not hold an integer counter'
-- The library's own: what the module computes and doubles cannot.
local BEYOND_DOUBLES = 'ERR the policy is beyond the library\'s exact range (Lua numbers are exact below 2^53, '
  .. 'see docs/managed-valkey.md); the module computes it'
local STATE_BEYOND_DOUBLES = 'ERR limiter key holds counts beyond the library\'s exact range '
  .. '(Lua numbers are exact below 2^53); the module computes it'

-- Errors of arguments and policies unwind to the function's pcall as this
-- marker table, which replies with the text as is (Lua's error() would
-- append its position). The deciders never raise: they return nil and
-- the text.
local Failure = {}
local function fail(text) error(setmetatable({text = text}, Failure), 0) end

local function bad_value(name, must) fail('ERR ' .. name .. ' must be ' .. must) end
local function wrong_arity(command) fail('ERR wrong number of arguments for \'' .. command .. '\' command') end
local function bad_state(algo)
  if algo == 'fixed' then return NOT_A_COUNTER end
  return 'ERR limiter key does not hold ' .. algo .. ' state'
end

-- An unknown option, quoted safely: printable ASCII only, and short.
local function shown(word)
  return (string.gsub(string.sub(word, 1, 32), '[^\33-\126]', '?'))
end

-- The reply of a pcall that failed: a `fail` as its text, verbatim; any
-- other error (a server error raised by server.call) raised again.
local function failed(err)
  if getmetatable(err) == Failure then return server.error_reply(err.text) end
  error(err, 0)
end

---------------------------------------------------------------- time

-- The server's time: its seconds and the µs into them.
local function server_time()
  local t = call('TIME')
  return tonum(t[1]), tonum(t[2])
end

-- The server's time for this call, read once: frozen for the whole script
-- and MULTI/EXEC, the clock of key expiry and of the module. Its ms, and
-- the ns into that ms (whole µs).
local function clock()
  local t = call('TIME')
  local us = t[2] + 0
  local into = us % 1000
  return t[1] * 1000 + (us - into) / 1000, into * 1000
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

-- Integer words read before (word -> its number), so a call repeating an
-- earlier call's LIMIT or TTL matches no pattern: bounded, emptied when full.
local INT_WORDS, INT_WORDS_MAX, int_words = {}, 1024, 0

-- An integer of at least `min`, named `name` in the error.
local function int_arg(value, name, min)
  local v = INT_WORDS[value]
  if v == nil then
    v = parse_i64(value)
    if v ~= nil then
      if int_words >= INT_WORDS_MAX then
        for w in pairs(INT_WORDS) do INT_WORDS[w] = nil end
        int_words = 0
      end
      INT_WORDS[value], int_words = v, int_words + 1
    end
  end
  if v == nil or v < min then
    bad_value(name, min == 0 and NON_NEGATIVE or POSITIVE)
  end
  return v
end

local function read_format(v)
  local f = string.lower(v)
  if f ~= 'map' and f ~= 'array' then bad_value('FORMAT', 'one of map, array') end
  return f
end

local function read_burst(v)
  local b = parse_i64(v)
  if b == nil or b < 0 then bad_value('BURST', BURST_RANGE) end
  return b
end

---------------------------------------------------------------- calendar

-- Calendar periods (src/algo/calendar.rs): where the period that holds an
-- instant starts and ends, in a zone given as a fixed offset from UTC or an
-- IANA zone name (src/time/zone.rs). Weeks start on Monday; months and
-- years have their real lengths.
local PERIODS = {day = 'day', week = 'week', month = 'month', year = 'year'}
-- What the rest of the library uses of this section; its helpers and the
-- zone table stay in the block (the main chunk holds at most 200 locals).
local period_end, period_start, parse_zone, longest_period
do
  local MS_PER_DAY = 86400000

  -- A TZ offset, +HH:MM or -HH:MM, in ms east of UTC; or nil.
  local function parse_offset(v)
    local sign, h, m = string.match(v, '^([+-])(%d%d):(%d%d)$')
    if sign == nil then return nil end
    h, m = tonumber(h), tonumber(m)
    if h > 23 or m > 59 then return nil end
    local ms = (h * 60 + m) * 60000
    if sign == '-' then return -ms end
    return ms
  end

  -- BEGIN tzdb (generated by dev/tzdb.py from tzdata 2026f: do not edit; `make tzdb`)
  -- Name -> zone (src/time/tzdb.rs), as two strings: the collector visits
  -- a string at once, where a table of every name would cost each FCALL.
  -- TZ_NAMES has a line '<name> <zone>' for each name: a fixed offset (ms
  -- east of UTC), or R<n>, TZ_RULES' line 'R<n> std dst month week weekday
  -- time month week weekday time': the offsets (ms east of UTC) and the
  -- changes to daylight time and back (POSIX Mm.w.d/time, ms of local time).
  -- Each starts with an empty line, so that every line follows a newline.
  local TZ_RULES = [[

R0 7200000 10800000 4 5 5 0 10 5 4 86400000
R1 3600000 7200000 3 5 0 7200000 10 5 0 10800000
R2 -36000000 -32400000 3 2 0 7200000 11 1 0 7200000
R3 -32400000 -28800000 3 2 0 7200000 11 1 0 7200000
R4 -25200000 -21600000 3 2 0 7200000 11 1 0 7200000
R5 -21600000 -18000000 3 2 0 7200000 11 1 0 7200000
R6 -18000000 -14400000 3 2 0 7200000 11 1 0 7200000
R7 -28800000 -25200000 3 2 0 7200000 11 1 0 7200000
R8 -14400000 -10800000 3 2 0 7200000 11 1 0 7200000
R9 -7200000 -3600000 3 5 0 -3600000 10 5 0 0
R10 -10800000 -7200000 3 2 0 7200000 11 1 0 7200000
R11 -14400000 -10800000 9 1 6 86400000 4 1 6 86400000
R12 -12600000 -9000000 3 2 0 7200000 11 1 0 7200000
R13 36000000 39600000 10 1 0 7200000 4 1 0 10800000
R14 43200000 46800000 9 5 0 7200000 4 1 0 10800000
R15 0 7200000 3 5 0 3600000 10 5 0 10800000
R16 7200000 10800000 3 5 0 0 10 5 0 0
R17 7200000 10800000 3 5 0 10800000 10 5 0 14400000
R18 7200000 10800000 3 4 4 93600000 10 5 0 7200000
R19 -3600000 0 3 5 0 0 10 5 0 3600000
R20 0 3600000 3 5 0 3600000 10 5 0 7200000
R21 34200000 37800000 10 1 0 7200000 4 1 0 10800000
R22 37800000 39600000 10 1 0 7200000 4 1 0 7200000
R23 -21600000 -18000000 9 1 6 79200000 4 1 6 79200000
R24 3600000 0 10 5 0 7200000 3 5 0 3600000
R25 45900000 49500000 9 5 0 9900000 4 1 0 13500000
R26 39600000 43200000 10 1 0 7200000 4 1 0 10800000
]]
  local TZ_NAMES = [[

Africa/Abidjan 0
Africa/Accra 0
Africa/Addis_Ababa 10800000
Africa/Algiers 3600000
Africa/Asmara 10800000
Africa/Asmera 10800000
Africa/Bamako 0
Africa/Bangui 3600000
Africa/Banjul 0
Africa/Bissau 0
Africa/Blantyre 7200000
Africa/Brazzaville 3600000
Africa/Bujumbura 7200000
Africa/Cairo R0
Africa/Casablanca 0
Africa/Ceuta R1
Africa/Conakry 0
Africa/Dakar 0
Africa/Dar_es_Salaam 10800000
Africa/Djibouti 10800000
Africa/Douala 3600000
Africa/El_Aaiun 0
Africa/Freetown 0
Africa/Gaborone 7200000
Africa/Harare 7200000
Africa/Johannesburg 7200000
Africa/Juba 7200000
Africa/Kampala 10800000
Africa/Khartoum 7200000
Africa/Kigali 7200000
Africa/Kinshasa 3600000
Africa/Lagos 3600000
Africa/Libreville 3600000
Africa/Lome 0
Africa/Luanda 3600000
Africa/Lubumbashi 7200000
Africa/Lusaka 7200000
Africa/Malabo 3600000
Africa/Maputo 7200000
Africa/Maseru 7200000
Africa/Mbabane 7200000
Africa/Mogadishu 10800000
Africa/Monrovia 0
Africa/Nairobi 10800000
Africa/Ndjamena 3600000
Africa/Niamey 3600000
Africa/Nouakchott 0
Africa/Ouagadougou 0
Africa/Porto-Novo 3600000
Africa/Sao_Tome 0
Africa/Timbuktu 0
Africa/Tripoli 7200000
Africa/Tunis 3600000
Africa/Windhoek 7200000
America/Adak R2
America/Anchorage R3
America/Anguilla -14400000
America/Antigua -14400000
America/Araguaina -10800000
America/Argentina/Buenos_Aires -10800000
America/Argentina/Catamarca -10800000
America/Argentina/ComodRivadavia -10800000
America/Argentina/Cordoba -10800000
America/Argentina/Jujuy -10800000
America/Argentina/La_Rioja -10800000
America/Argentina/Mendoza -10800000
America/Argentina/Rio_Gallegos -10800000
America/Argentina/Salta -10800000
America/Argentina/San_Juan -10800000
America/Argentina/San_Luis -10800000
America/Argentina/Tucuman -10800000
America/Argentina/Ushuaia -10800000
America/Aruba -14400000
America/Asuncion -10800000
America/Atikokan -18000000
America/Atka R2
America/Bahia -10800000
America/Bahia_Banderas -21600000
America/Barbados -14400000
America/Belem -10800000
America/Belize -21600000
America/Blanc-Sablon -14400000
America/Boa_Vista -14400000
America/Bogota -18000000
America/Boise R4
America/Buenos_Aires -10800000
America/Cambridge_Bay R4
America/Campo_Grande -14400000
America/Cancun -18000000
America/Caracas -14400000
America/Catamarca -10800000
America/Cayenne -10800000
America/Cayman -18000000
America/Chicago R5
America/Chihuahua -21600000
America/Ciudad_Juarez R4
America/Coral_Harbour -18000000
America/Cordoba -10800000
America/Costa_Rica -21600000
America/Coyhaique -10800000
America/Creston -25200000
America/Cuiaba -14400000
America/Curacao -14400000
America/Danmarkshavn 0
America/Dawson -25200000
America/Dawson_Creek -25200000
America/Denver R4
America/Detroit R6
America/Dominica -14400000
America/Edmonton -21600000
America/Eirunepe -18000000
America/El_Salvador -21600000
America/Ensenada R7
America/Fort_Nelson -25200000
America/Fort_Wayne R6
America/Fortaleza -10800000
America/Glace_Bay R8
America/Godthab R9
America/Goose_Bay R8
America/Grand_Turk R6
America/Grenada -14400000
America/Guadeloupe -14400000
America/Guatemala -21600000
America/Guayaquil -18000000
America/Guyana -14400000
America/Halifax R8
America/Hermosillo -25200000
America/Indiana/Indianapolis R6
America/Indiana/Knox R5
America/Indiana/Marengo R6
America/Indiana/Petersburg R6
America/Indiana/Tell_City R5
America/Indiana/Vevay R6
America/Indiana/Vincennes R6
America/Indiana/Winamac R6
America/Indianapolis R6
America/Inuvik -21600000
America/Iqaluit R6
America/Jamaica -18000000
America/Jujuy -10800000
America/Juneau R3
America/Kentucky/Louisville R6
America/Kentucky/Monticello R6
America/Knox_IN R5
America/Kralendijk -14400000
America/La_Paz -14400000
America/Lima -18000000
America/Los_Angeles R7
America/Louisville R6
America/Lower_Princes -14400000
America/Maceio -10800000
America/Managua -21600000
America/Manaus -14400000
America/Marigot -14400000
America/Martinique -14400000
America/Matamoros R5
America/Mazatlan -25200000
America/Mendoza -10800000
America/Menominee R5
America/Merida -21600000
America/Metlakatla R3
America/Mexico_City -21600000
America/Miquelon R10
America/Moncton R8
America/Monterrey -21600000
America/Montevideo -10800000
America/Montreal R6
America/Montserrat -14400000
America/Nassau R6
America/New_York R6
America/Nipigon R6
America/Nome R3
America/Noronha -7200000
America/North_Dakota/Beulah R5
America/North_Dakota/Center R5
America/North_Dakota/New_Salem R5
America/Nuuk R9
America/Ojinaga R5
America/Panama -18000000
America/Pangnirtung R6
America/Paramaribo -10800000
America/Phoenix -25200000
America/Port-au-Prince R6
America/Port_of_Spain -14400000
America/Porto_Acre -18000000
America/Porto_Velho -14400000
America/Puerto_Rico -14400000
America/Punta_Arenas -10800000
America/Rainy_River -18000000
America/Rankin_Inlet R5
America/Recife -10800000
America/Regina -21600000
America/Resolute R5
America/Rio_Branco -18000000
America/Rosario -10800000
America/Santa_Isabel R7
America/Santarem -10800000
America/Santiago R11
America/Santo_Domingo -14400000
America/Sao_Paulo -10800000
America/Scoresbysund R9
America/Shiprock R4
America/Sitka R3
America/St_Barthelemy -14400000
America/St_Johns R12
America/St_Kitts -14400000
America/St_Lucia -14400000
America/St_Thomas -14400000
America/St_Vincent -14400000
America/Swift_Current -21600000
America/Tegucigalpa -21600000
America/Thule R8
America/Thunder_Bay R6
America/Tijuana R7
America/Toronto R6
America/Tortola -14400000
America/Vancouver -25200000
America/Virgin -14400000
America/Whitehorse -25200000
America/Winnipeg -18000000
America/Yakutat R3
America/Yellowknife -21600000
Antarctica/Casey 28800000
Antarctica/Davis 25200000
Antarctica/DumontDUrville 36000000
Antarctica/Macquarie R13
Antarctica/Mawson 18000000
Antarctica/McMurdo R14
Antarctica/Palmer -10800000
Antarctica/Rothera -10800000
Antarctica/South_Pole R14
Antarctica/Syowa 10800000
Antarctica/Troll R15
Antarctica/Vostok 18000000
Arctic/Longyearbyen R1
Asia/Aden 10800000
Asia/Almaty 18000000
Asia/Amman 10800000
Asia/Anadyr 43200000
Asia/Aqtau 18000000
Asia/Aqtobe 18000000
Asia/Ashgabat 18000000
Asia/Ashkhabad 18000000
Asia/Atyrau 18000000
Asia/Baghdad 10800000
Asia/Bahrain 10800000
Asia/Baku 14400000
Asia/Bangkok 25200000
Asia/Barnaul 25200000
Asia/Beirut R16
Asia/Bishkek 21600000
Asia/Brunei 28800000
Asia/Calcutta 19800000
Asia/Chita 32400000
Asia/Choibalsan 28800000
Asia/Chongqing 28800000
Asia/Chungking 28800000
Asia/Colombo 19800000
Asia/Dacca 21600000
Asia/Damascus 10800000
Asia/Dhaka 21600000
Asia/Dili 32400000
Asia/Dubai 14400000
Asia/Dushanbe 18000000
Asia/Famagusta R17
Asia/Harbin 28800000
Asia/Ho_Chi_Minh 25200000
Asia/Hong_Kong 28800000
Asia/Hovd 25200000
Asia/Irkutsk 28800000
Asia/Istanbul 10800000
Asia/Jakarta 25200000
Asia/Jayapura 32400000
Asia/Jerusalem R18
Asia/Kabul 16200000
Asia/Kamchatka 43200000
Asia/Karachi 18000000
Asia/Kashgar 21600000
Asia/Kathmandu 20700000
Asia/Katmandu 20700000
Asia/Khandyga 32400000
Asia/Kolkata 19800000
Asia/Krasnoyarsk 25200000
Asia/Kuala_Lumpur 28800000
Asia/Kuching 28800000
Asia/Kuwait 10800000
Asia/Macao 28800000
Asia/Macau 28800000
Asia/Magadan 39600000
Asia/Makassar 28800000
Asia/Manila 28800000
Asia/Muscat 14400000
Asia/Nicosia R17
Asia/Novokuznetsk 25200000
Asia/Novosibirsk 25200000
Asia/Omsk 21600000
Asia/Oral 18000000
Asia/Phnom_Penh 25200000
Asia/Pontianak 25200000
Asia/Pyongyang 32400000
Asia/Qatar 10800000
Asia/Qostanay 18000000
Asia/Qyzylorda 18000000
Asia/Rangoon 23400000
Asia/Riyadh 10800000
Asia/Saigon 25200000
Asia/Sakhalin 39600000
Asia/Samarkand 18000000
Asia/Seoul 32400000
Asia/Shanghai 28800000
Asia/Singapore 28800000
Asia/Srednekolymsk 39600000
Asia/Taipei 28800000
Asia/Tashkent 18000000
Asia/Tbilisi 14400000
Asia/Tehran 12600000
Asia/Tel_Aviv R18
Asia/Thimbu 21600000
Asia/Thimphu 21600000
Asia/Tokyo 32400000
Asia/Tomsk 25200000
Asia/Ujung_Pandang 28800000
Asia/Ulaanbaatar 28800000
Asia/Ulan_Bator 28800000
Asia/Urumqi 21600000
Asia/Ust-Nera 36000000
Asia/Vientiane 25200000
Asia/Vladivostok 36000000
Asia/Yakutsk 32400000
Asia/Yangon 23400000
Asia/Yekaterinburg 18000000
Asia/Yerevan 14400000
Atlantic/Azores R19
Atlantic/Bermuda R8
Atlantic/Canary R20
Atlantic/Cape_Verde -3600000
Atlantic/Faeroe R20
Atlantic/Faroe R20
Atlantic/Jan_Mayen R1
Atlantic/Madeira R20
Atlantic/Reykjavik 0
Atlantic/South_Georgia -7200000
Atlantic/St_Helena 0
Atlantic/Stanley -10800000
Australia/ACT R13
Australia/Adelaide R21
Australia/Brisbane 36000000
Australia/Broken_Hill R21
Australia/Canberra R13
Australia/Currie R13
Australia/Darwin 34200000
Australia/Eucla 31500000
Australia/Hobart R13
Australia/LHI R22
Australia/Lindeman 36000000
Australia/Lord_Howe R22
Australia/Melbourne R13
Australia/NSW R13
Australia/North 34200000
Australia/Perth 28800000
Australia/Queensland 36000000
Australia/South R21
Australia/Sydney R13
Australia/Tasmania R13
Australia/Victoria R13
Australia/West 28800000
Australia/Yancowinna R21
Brazil/Acre -18000000
Brazil/DeNoronha -7200000
Brazil/East -10800000
Brazil/West -14400000
CET R1
CST6CDT R5
Canada/Atlantic R8
Canada/Central -18000000
Canada/Eastern R6
Canada/Mountain -21600000
Canada/Newfoundland R12
Canada/Pacific -25200000
Canada/Saskatchewan -21600000
Canada/Yukon -25200000
Chile/Continental R11
Chile/EasterIsland R23
EET R17
EST -18000000
EST5EDT R6
Egypt R0
Eire R24
Etc/GMT 0
Etc/GMT+0 0
Etc/GMT+1 -3600000
Etc/GMT+10 -36000000
Etc/GMT+11 -39600000
Etc/GMT+12 -43200000
Etc/GMT+2 -7200000
Etc/GMT+3 -10800000
Etc/GMT+4 -14400000
Etc/GMT+5 -18000000
Etc/GMT+6 -21600000
Etc/GMT+7 -25200000
Etc/GMT+8 -28800000
Etc/GMT+9 -32400000
Etc/GMT-0 0
Etc/GMT-1 3600000
Etc/GMT-10 36000000
Etc/GMT-11 39600000
Etc/GMT-12 43200000
Etc/GMT-13 46800000
Etc/GMT-14 50400000
Etc/GMT-2 7200000
Etc/GMT-3 10800000
Etc/GMT-4 14400000
Etc/GMT-5 18000000
Etc/GMT-6 21600000
Etc/GMT-7 25200000
Etc/GMT-8 28800000
Etc/GMT-9 32400000
Etc/GMT0 0
Etc/Greenwich 0
Etc/UCT 0
Etc/UTC 0
Etc/Universal 0
Etc/Zulu 0
Europe/Amsterdam R1
Europe/Andorra R1
Europe/Astrakhan 14400000
Europe/Athens R17
Europe/Belfast R20
Europe/Belgrade R1
Europe/Berlin R1
Europe/Bratislava R1
Europe/Brussels R1
Europe/Bucharest R17
Europe/Budapest R1
Europe/Busingen R1
Europe/Chisinau R17
Europe/Copenhagen R1
Europe/Dublin R24
Europe/Gibraltar R1
Europe/Guernsey R20
Europe/Helsinki R17
Europe/Isle_of_Man R20
Europe/Istanbul 10800000
Europe/Jersey R20
Europe/Kaliningrad 7200000
Europe/Kiev R17
Europe/Kirov 10800000
Europe/Kyiv R17
Europe/Lisbon R20
Europe/Ljubljana R1
Europe/London R20
Europe/Luxembourg R1
Europe/Madrid R1
Europe/Malta R1
Europe/Mariehamn R17
Europe/Minsk 10800000
Europe/Monaco R1
Europe/Moscow 10800000
Europe/Nicosia R17
Europe/Oslo R1
Europe/Paris R1
Europe/Podgorica R1
Europe/Prague R1
Europe/Riga R17
Europe/Rome R1
Europe/Samara 14400000
Europe/San_Marino R1
Europe/Sarajevo R1
Europe/Saratov 14400000
Europe/Simferopol 10800000
Europe/Skopje R1
Europe/Sofia R17
Europe/Stockholm R1
Europe/Tallinn R17
Europe/Tirane R1
Europe/Tiraspol R17
Europe/Ulyanovsk 14400000
Europe/Uzhgorod R17
Europe/Vaduz R1
Europe/Vatican R1
Europe/Vienna R1
Europe/Vilnius R17
Europe/Volgograd 10800000
Europe/Warsaw R1
Europe/Zagreb R1
Europe/Zaporozhye R17
Europe/Zurich R1
Factory 0
GB R20
GB-Eire R20
GMT 0
GMT+0 0
GMT-0 0
GMT0 0
Greenwich 0
HST -36000000
Hongkong 28800000
Iceland 0
Indian/Antananarivo 10800000
Indian/Chagos 21600000
Indian/Christmas 25200000
Indian/Cocos 23400000
Indian/Comoro 10800000
Indian/Kerguelen 18000000
Indian/Mahe 14400000
Indian/Maldives 18000000
Indian/Mauritius 14400000
Indian/Mayotte 10800000
Indian/Reunion 14400000
Iran 12600000
Israel R18
Jamaica -18000000
Japan 32400000
Kwajalein 43200000
Libya 7200000
MET R1
MST -25200000
MST7MDT R4
Mexico/BajaNorte R7
Mexico/BajaSur -25200000
Mexico/General -21600000
NZ R14
NZ-CHAT R25
Navajo R4
PRC 28800000
PST8PDT R7
Pacific/Apia 46800000
Pacific/Auckland R14
Pacific/Bougainville 39600000
Pacific/Chatham R25
Pacific/Chuuk 36000000
Pacific/Easter R23
Pacific/Efate 39600000
Pacific/Enderbury 46800000
Pacific/Fakaofo 46800000
Pacific/Fiji 43200000
Pacific/Funafuti 43200000
Pacific/Galapagos -21600000
Pacific/Gambier -32400000
Pacific/Guadalcanal 39600000
Pacific/Guam 36000000
Pacific/Honolulu -36000000
Pacific/Johnston -36000000
Pacific/Kanton 46800000
Pacific/Kiritimati 50400000
Pacific/Kosrae 39600000
Pacific/Kwajalein 43200000
Pacific/Majuro 43200000
Pacific/Marquesas -34200000
Pacific/Midway -39600000
Pacific/Nauru 43200000
Pacific/Niue -39600000
Pacific/Norfolk R26
Pacific/Noumea 39600000
Pacific/Pago_Pago -39600000
Pacific/Palau 32400000
Pacific/Pitcairn -28800000
Pacific/Pohnpei 39600000
Pacific/Ponape 39600000
Pacific/Port_Moresby 36000000
Pacific/Rarotonga -36000000
Pacific/Saipan 36000000
Pacific/Samoa -39600000
Pacific/Tahiti -36000000
Pacific/Tarawa 43200000
Pacific/Tongatapu 46800000
Pacific/Truk 36000000
Pacific/Wake 43200000
Pacific/Wallis 43200000
Pacific/Yap 36000000
Poland R1
Portugal R20
ROC 28800000
ROK 32400000
Singapore 28800000
Turkey 10800000
UCT 0
US/Alaska R3
US/Aleutian R2
US/Arizona -25200000
US/Central R5
US/East-Indiana R6
US/Eastern R6
US/Hawaii -36000000
US/Indiana-Starke R5
US/Michigan R6
US/Mountain R4
US/Pacific R7
US/Samoa -39600000
UTC 0
Universal 0
W-SU 10800000
WET R20
Zulu 0
]]
  -- END tzdb

  -- Days since 1970-01-01 of a civil date, and back (H. Hinnant's).
  local function days_from_civil(y, m, d)
    if m <= 2 then y = y - 1 end
    local era = fdiv(y, 400)
    local yoe = y - era * 400
    local mp = m + 9
    if m > 2 then mp = m - 3 end
    local doy = fdiv(153 * mp + 2, 5) + d - 1
    local doe = yoe * 365 + fdiv(yoe, 4) - fdiv(yoe, 100) + doy
    return era * 146097 + doe - 719468
  end

  local function civil_from_days(z)
    z = z + 719468
    local era = fdiv(z, 146097)
    local doe = z - era * 146097
    local yoe = fdiv(doe - fdiv(doe, 1460) + fdiv(doe, 36524) - fdiv(doe, 146096), 365)
    local doy = doe - (365 * yoe + fdiv(yoe, 4) - fdiv(yoe, 100))
    local mp = fdiv(5 * doy + 2, 153)
    local d = doy - fdiv(153 * mp + 2, 5) + 1
    local m = mp - 9
    if mp < 10 then m = mp + 3 end
    local y = yoe + era * 400
    if m <= 2 then y = y + 1 end
    return y, m, d
  end

  -- The local day a `period` holding local day `day` starts on, and the one
  -- after it (src/algo/calendar.rs `start_day`, `end_day`).
  local function start_day(period, day)
    if period == 'day' then
      return day
    elseif period == 'week' then
      return day - (day + 3) % 7
    elseif period == 'month' then
      local y, m = civil_from_days(day)
      return days_from_civil(y, m, 1)
    end
    local y = civil_from_days(day)
    return days_from_civil(y, 1, 1)
  end

  local function end_day(period, day)
    if period == 'day' then
      return day + 1
    elseif period == 'week' then
      return day - (day + 3) % 7 + 7
    elseif period == 'month' then
      local y, m = civil_from_days(day)
      if m == 12 then return days_from_civil(y + 1, 1, 1) end
      return days_from_civil(y, m + 1, 1)
    end
    local y = civil_from_days(day)
    return days_from_civil(y + 1, 1, 1)
  end

  -- A daylight-saving rule (src/time/zone.rs; TZDB's tables): the instant of
  -- its change {month, week, weekday, time} (fields k to k + 3 of `r`) in
  -- `year`, `before` the offset in force until then.
  local function change_at(r, k, year, before)
    local month, week, weekday = r[k], r[k + 1], r[k + 2]
    local first = days_from_civil(year, month, 1)
    local nxt
    if month == 12 then nxt = days_from_civil(year + 1, 1, 1) else nxt = days_from_civil(year, month + 1, 1) end
    local day = first + (weekday - (first + 4) % 7) % 7 + (week - 1) * 7
    if day >= nxt then day = day - 7 end
    return day * MS_PER_DAY + r[k + 3] - before
  end

  -- The rule's changes of the years year - 1 to year + 1, by instant (their
  -- instants and the offsets from then on), and the offset before them.
  local function zone_changes(r, year)
    local std, dst = r[1], r[2]
    local at, off = {}, {}
    for i = 0, 2 do
      at[2 * i + 1], off[2 * i + 1] = change_at(r, 3, year - 1 + i, std), dst
      at[2 * i + 2], off[2 * i + 2] = change_at(r, 7, year - 1 + i, dst), std
    end
    for i = 2, 6 do -- insertion sort, stable (as the module's)
      local j = i
      while j > 1 and at[j - 1] > at[j] do
        at[j - 1], at[j] = at[j], at[j - 1]
        off[j - 1], off[j] = off[j], off[j - 1]
        j = j - 1
      end
    end
    if off[1] == dst then return at, off, std end
    return at, off, dst
  end

  -- The offset in force at `utc`.
  local function offset_at(r, utc)
    local at, off, offset = zone_changes(r, (civil_from_days(fdiv(utc + r[1], MS_PER_DAY))))
    for i = 1, 6 do
      if at[i] > utc then break end
      offset = off[i]
    end
    return offset
  end

  -- The first instant whose local time is at or after `wall`: a gap's
  -- change, or an overlap's earlier instant.
  local function first_at_or_after(r, wall)
    local at, off, offset = zone_changes(r, (civil_from_days(fdiv(wall, MS_PER_DAY))))
    local from = -math.huge
    for i = 1, 6 do
      local first = math.max(from, wall - offset)
      if first < at[i] then return first end
      from, offset = at[i], off[i]
    end
    return math.max(from, wall - offset)
  end

  -- The start and end of the `period` holding `now` under rule `r`
  -- (src/algo/calendar.rs `rule_bounds`).
  local function rule_bounds(period, r, now)
    local day = fdiv(now + offset_at(r, now), MS_PER_DAY)
    local e = end_day(period, day)
    local start_ms = first_at_or_after(r, start_day(period, day) * MS_PER_DAY)
    local end_ms = first_at_or_after(r, e * MS_PER_DAY)
    if end_ms <= now then return end_ms, first_at_or_after(r, end_day(period, e) * MS_PER_DAY) end
    return start_ms, end_ms
  end

  -- The end (absolute ms) of the `period` that holds `now`, `offset` ms east
  -- of UTC or under the daylight-saving rule `rule`: the next boundary after
  -- now.
  function period_end(period, offset, now, rule)
    if rule ~= nil then
      local _, e = rule_bounds(period, rule, now)
      return e
    end
    return end_day(period, fdiv(now + offset, MS_PER_DAY)) * MS_PER_DAY - offset
  end

  -- The start (absolute ms) of the `period` that holds `now`, `offset` ms
  -- east of UTC or under `rule`: the last boundary at or before now.
  function period_start(period, offset, now, rule)
    if rule ~= nil then return (rule_bounds(period, rule, now)) end
    return start_day(period, fdiv(now + offset, MS_PER_DAY)) * MS_PER_DAY - offset
  end

  -- A TZ value: a fixed offset (ms east of UTC), or an IANA zone name as
  -- TZDB spells it: its offset, or its rule (a table); nil when neither.
  -- The zones named so far, name -> offset or rule (a table): TZ_NAMES is
  -- searched once for each.
  local zones_seen = {}

  -- Rule R<n> of TZ_RULES, as numbers.
  local function rule_of(id)
    local _, e = string.find(TZ_RULES, '\n' .. id .. ' ', 1, true)
    local r = {}
    for x in string.gmatch(string.match(TZ_RULES, '^[^\n]*', e + 1), '%S+') do r[#r + 1] = tonumber(x) end
    return r
  end

  function parse_zone(v)
    local zone = parse_offset(v) or zones_seen[v]
    -- a name has no blanks: the line found is its own
    if zone ~= nil or string.find(v, '%s') then return zone end
    local _, e = string.find(TZ_NAMES, '\n' .. v .. ' ', 1, true)
    if e == nil then return nil end
    local value = string.match(TZ_NAMES, '^[^\n]*', e + 1)
    if string.sub(value, 1, 1) == 'R' then zone = rule_of(value) else zone = tonumber(value) end
    zones_seen[v] = zone
    return zone
  end

  -- The longest period of each kind (ms), for the library's range.
  local LONGEST = {day = MS_PER_DAY, week = 7 * MS_PER_DAY, month = 31 * MS_PER_DAY, year = 366 * MS_PER_DAY}

  -- The longest period of `p`'s kind in its zone: a daylight-saving change
  -- lengthens one by its shift.
  function longest_period(p)
    local longest, rule = LONGEST[p.calendar], p.tz_rule
    if rule ~= nil then return longest + math.abs(rule[2] - rule[1]) end
    return longest
  end
end

-- Option name -> how its value is read (src/args.rs `Options::set`).
local OPTIONS = {
  ALGO = function(v)
    return parse_algo(v) or bad_value('ALGO', ALGO_NAMES)
  end,
  LIMIT = function(v) return int_arg(v, 'LIMIT', 0) end,
  WINDOW = function(v) return int_arg(v, 'WINDOW', 1) end,
  BURST = read_burst,
  COST = function(v) return int_arg(v, 'COST', 0) end,
  PENALTY = function(v) return int_arg(v, 'PENALTY', 1) end,
  ESCALATE = function(v) return int_arg(v, 'ESCALATE', 1) end,
  CALENDAR = function(v) return PERIODS[string.lower(v)] or bad_value('CALENDAR', PERIOD_NAMES) end,
  TZ = function(v) return parse_zone(v) or bad_value('TZ', OFFSET_FORM) end,
  RESERVE = function(v) return int_arg(v, 'RESERVE', 0) end,
  AT = function(v) return int_arg(v, 'AT', 0) end,
  -- The library's own: replies as a map (see `named`).
  FORMAT = read_format,
}

-- The options that are a keyword alone, with no value (src/args.rs
-- `Value::Flag`).
local FLAGS = {SHADOW = true, ALIGN = true, FORCE = true}

-- Option names in their usual spellings, to skip string.upper for them
-- (spelled out: the standard libraries are not reachable while the library
-- loads, only inside its functions).
local OPTION_NAMES = {
  ALGO = 'ALGO', LIMIT = 'LIMIT', WINDOW = 'WINDOW', BURST = 'BURST', COST = 'COST', FORMAT = 'FORMAT',
  algo = 'ALGO', limit = 'LIMIT', window = 'WINDOW', burst = 'BURST', cost = 'COST', format = 'FORMAT',
  TTL = 'TTL', ID = 'ID', ttl = 'TTL', id = 'ID',
  SHADOW = 'SHADOW', shadow = 'SHADOW', PENALTY = 'PENALTY', penalty = 'PENALTY',
  ALIGN = 'ALIGN', align = 'ALIGN', CALENDAR = 'CALENDAR', calendar = 'CALENDAR', TZ = 'TZ', tz = 'TZ',
  ESCALATE = 'ESCALATE', escalate = 'ESCALATE',
  FORCE = 'FORCE', force = 'FORCE', RESERVE = 'RESERVE', reserve = 'RESERVE', AT = 'AT', at = 'AT',
}

-- The options each function takes, beyond which an option is unknown.
local POLICY_OPTIONS = {ALGO = true, LIMIT = true, WINDOW = true, BURST = true, SHADOW = true,
                        PENALTY = true, ALIGN = true, CALENDAR = true, TZ = true, ESCALATE = true}
local REFUND_OPTIONS = {ALGO = true, LIMIT = true, WINDOW = true, BURST = true, SHADOW = true,
                        PENALTY = true, ALIGN = true, CALENDAR = true, TZ = true, ESCALATE = true,
                        COST = true, FORMAT = true, AT = true}
local ADMIT_OPTIONS = {ALGO = true, LIMIT = true, WINDOW = true, BURST = true, SHADOW = true,
                       PENALTY = true, ALIGN = true, CALENDAR = true, TZ = true, ESCALATE = true,
                       COST = true, FORMAT = true, FORCE = true, RESERVE = true}

local function unknown(word) fail('ERR unknown option \'' .. shown(word) .. '\'') end

-- BLOCK (RL.ADMIT, RL.ACQUIRE) is the module's: a function cannot block.
local BLOCK_NEEDS_THE_MODULE = 'ERR BLOCK needs the module: the function library cannot block'

-- Sets option `word` from args[at + 1] into `opts` (a flag takes no
-- value); the words it took, or false when `word` is not an option of
-- `allowed`. `metakey`: the META hash given as a key. `readers`: how each
-- value is read (default OPTIONS, the limiters').
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
  if FLAGS[name] then
    if opts[name] ~= nil then fail('ERR ' .. name .. ' is given more than once') end
    opts[name] = true
    return 1
  end
  local value = args[at + 1]
  if value == nil then fail('ERR ' .. name .. ' needs a value') end
  local parsed = (readers or OPTIONS)[name](value)
  if opts[name] ~= nil then fail('ERR ' .. name .. ' is given more than once') end
  opts[name] = parsed
  return 2
end

-- FORCE and RESERVE against the other options (src/args.rs
-- `check_charge`); `block`: BLOCK was given.
local function check_charge(opts, block)
  if opts.RESERVE == nil then
    if opts.FORCE and opts.COST == 0 then fail('ERR FORCE needs a COST of at least 1') end
    if opts.FORCE and block then
      fail('ERR FORCE and BLOCK exclude each other: a forced charge never waits')
    end
    return
  end
  if opts.FORCE then
    fail('ERR RESERVE and FORCE exclude each other: a forced charge is consumed now, a booking later')
  end
  if block then fail('ERR RESERVE and BLOCK exclude each other: a booking answers at once with its slot') end
  if opts.SHADOW then fail('ERR RESERVE and SHADOW exclude each other: a trial must never make a caller wait') end
end

-- `blocks`: the module's command takes BLOCK (refused here, see above,
-- once the options are read and judged as the module judges them).
local function parse_options(args, allowed, metakey, readers, blocks)
  local opts = {}
  local at, block = 1, false
  while at <= #args do
    local took = set_option(opts, args[at], args, at, allowed, metakey, readers)
    if not took then
      if blocks and string.upper(args[at]) == 'BLOCK' then
        if args[at + 1] == nil then fail('ERR BLOCK needs a value') end
        if block then fail('ERR BLOCK is given more than once') end
        int_arg(args[at + 1], 'BLOCK', 0)
        block, took = true, 2
      else
        unknown(args[at])
      end
    end
    at = at + took
  end
  if allowed.RESERVE then check_charge(opts, block) end
  if block then fail(BLOCK_NEEDS_THE_MODULE) end
  return opts
end

---------------------------------------------------------------- META hash

-- No META hash: no fields (never written to).
local NO_META = {}

-- The META hash's fields as found (nil when absent); judged only when used.
local function read_meta(metakey)
  if metakey == nil then return NO_META end
  local fields = server.pcall('HMGET', metakey, 'max', 'duration', 'algorithm', 'burst', 'shadow', 'penalty',
                              'align', 'calendar', 'tz', 'escalate', 'max_reserve_ms')
  if fields.err then fail('WRONGTYPE META key does not hold a hash') end
  return {max = fields[1] or nil, duration = fields[2] or nil,
          algorithm = fields[3] or nil, burst = fields[4] or nil, shadow = fields[5] or nil,
          penalty = fields[6] or nil, align = fields[7] or nil, calendar = fields[8] or nil,
          tz = fields[9] or nil, escalate = fields[10] or nil, max_reserve_ms = fields[11] or nil}
end

local function meta_int(meta, name, min, must)
  local raw = meta[name]
  if raw == nil then return nil end
  local v = parse_i64(raw)
  if v == nil or v < min then
    fail('ERR META hash field \'' .. name .. '\' must be ' .. must)
  end
  return v
end

-- A flag's field (src/resolve.rs `Meta::flag_of`): absent or 0 is off, 1 on.
local function meta_flag(meta, name)
  local v = meta_int(meta, name, 0, ZERO_OR_ONE)
  if v ~= nil and v > 1 then fail('ERR META hash field \'' .. name .. '\' must be ' .. ZERO_OR_ONE) end
  return v == 1
end

---------------------------------------------------------------- policy

-- Inline options win over the META hash; no limit (or 0) means unlimited:
-- nil. As src/resolve.rs `resolve`, in the same order of checks.
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
  -- CALENDAR and TZ (src/resolve.rs `calendar_of`).
  local period, what = opts.CALENDAR, 'CALENDAR'
  if period == nil and meta.calendar ~= nil then
    period, what = PERIODS[string.lower(meta.calendar)], 'META field \'calendar\''
    if period == nil then fail('ERR META hash field \'calendar\' must be ' .. PERIOD_NAMES) end
  end
  if period == nil then
    if opts.TZ ~= nil then fail('ERR TZ applies only with CALENDAR') end
  else
    if USES_BURST[algo] then
      fail('ERR ' .. what .. ' applies only to the windows (ALGO fixed or sliding), not to ALGO ' .. algo)
    end
    if opts.WINDOW ~= nil then
      fail('ERR WINDOW and CALENDAR exclude each other: a calendar period is the window')
    end
    local offset, rule = opts.TZ, nil
    if offset == nil and meta.tz ~= nil then
      offset = parse_zone(meta.tz)
      if offset == nil then fail('ERR META hash field \'tz\' must be ' .. OFFSET_FORM) end
    end
    if type(offset) == 'table' then offset, rule = 0, offset end
    offset = offset or 0
    r.calendar, r.tz_offset, r.tz_rule = period, offset, rule
    r.window_at = function(now) return period_end(period, offset, now, rule) - now end
  end
  if opts.WINDOW ~= nil then
    r.window, r.window_source = opts.WINDOW, 'WINDOW'
  elseif period == nil then
    r.window = meta_int(meta, 'duration', 1, POSITIVE)
    r.window_source = 'META field \'duration\''
  end
  if opts.BURST ~= nil then
    r.burst = opts.BURST
  elseif USES_BURST[algo] then
    r.burst, r.burst_from_meta = meta_int(meta, 'burst', 0, BURST_RANGE), true
  end
  r.shadow = opts.SHADOW or meta_flag(meta, 'shadow')
  if opts.PENALTY ~= nil then
    r.penalty, r.penalty_source = opts.PENALTY, 'PENALTY'
  else
    r.penalty, r.penalty_source = meta_int(meta, 'penalty', 1, POSITIVE), 'META field \'penalty\''
  end
  -- ESCALATE (src/resolve.rs `policies`): only with PENALTY, at least its ms.
  local cap, cap_source = opts.ESCALATE, 'ESCALATE'
  if cap == nil then
    cap, cap_source = meta_int(meta, 'escalate', 1, POSITIVE), 'META field \'escalate\''
  end
  if cap ~= nil then
    if r.penalty == nil then fail('ERR ' .. cap_source .. ' applies only with PENALTY') end
    if cap < r.penalty then fail('ERR ' .. cap_source .. ' must be at least the penalty\'s ms') end
    r.escalate, r.escalate_source = cap, cap_source
  end
  local align = nil
  if opts.ALIGN then
    align = 'ALIGN'
  elseif meta_flag(meta, 'align') then
    align = 'META field \'align\''
  end
  if align and USES_BURST[algo] then
    fail('ERR ' .. align .. ' applies only to the windows (ALGO fixed or sliding), not to ALGO ' .. algo)
  end
  if align and period then
    fail('ERR ' .. align .. ' and CALENDAR exclude each other: calendar periods are aligned')
  end
  -- The sliding window's are always aligned: only the fixed window's change.
  if align ~= nil and algo == 'fixed' then
    local w = r.window
    r.align = true
    -- (nil without a window: then the checks name that error first)
    r.window_at = w and function(now) return w - now % w end
  end
  -- The booking horizon: META field `max_reserve_ms`, or the module's
  -- default for `ratelimit.max-reserve-ms` (the library has no config).
  local horizon = meta_int(meta, 'max_reserve_ms', 0, MAX_RESERVE_FORM)
  if horizon ~= nil and horizon > MAX_RESERVE_MS then
    fail('ERR META hash field \'max_reserve_ms\' must be ' .. MAX_RESERVE_FORM)
  end
  r.horizon = (horizon or DEFAULT_RESERVE_MS) * NS_PER_MS
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

-- The last ms at which `fits_ns(now, span)` holds for a span below 2^53,
-- with a margin for the doubles' rounding (some 10^3 against 10^6 ns).
local function last_fitting_ms(span)
  return floor((I64_LIMIT - span) / NS_PER_MS) - 2
end

-- The module's checks (src/resolve.rs `Resolved::policy`, src/algo/policy.rs
-- `Policy::new`) at the ms `now`. They fail only beyond 2^53, where doubles
-- round: there the library may name another of these errors than the module
-- would, but it answers an error either way (`exact_policy` refuses what passes).
local function module_policy_checks(r, now)
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
-- stays below 2^53 (docs/managed-valkey.md states the range). The fixed
-- window reads no clock: its arithmetic is on the window and ms left.
local function exact_policy(p, now)
  local ok
  if p.algo == 'fixed' then
    ok = p.limit <= EXACT and p.window <= EXACT
  elseif p.calendar then
    -- sliding over calendar periods: the longest two of them
    local longest = longest_period(p)
    ok = p.limit * longest <= EXACT and now + 2 * longest <= EXACT
  elseif p.algo == 'sliding' then
    ok = p.limit * p.window <= EXACT and now + 2 * p.window <= EXACT
  else
    ok = p.window * NS_PER_MS + p.limit - 1 <= EXACT and p.burst <= EXACT and p.capacity <= EXACT
  end
  if not ok then fail(BEYOND_DOUBLES) end
end

-- The penalty's checks at the ms `now` (src/resolve.rs `Resolved::penalty`),
-- then the library's range: its end is exact.
local function penalty_checks(p, now)
  if p.penalty > I64_LIMIT - now then
    fail('ERR ' .. p.penalty_source .. ' is too large: the penalty end overflows')
  end
  local cap = p.escalate
  if cap and (cap > I64_LIMIT - now or cap > I64_LIMIT - now - cap) then
    fail('ERR ' .. p.escalate_source .. ' is too large: the penalty end overflows')
  end
  if now + p.penalty > EXACT or cap and now + 2 * cap > EXACT then fail(BEYOND_DOUBLES) end
end

-- `...`, once `q.window` is `w` again.
local function restore_window(q, w, ...)
  q.window = w
  return ...
end

-- The deciders (below), by algorithm; bound once they are defined.
local ADMIT, REFUND = {}, {}
-- A decider in a penalty's key (`penalised`, below the deciders).
local penalised

-- GCRA's and the leaky queue's state as it is written: 19 digits (a time
-- from 2001 to 2286), the ms and the ns into it apart.
local TAT_STATE = {
  gcra = '^gcra:([1-9]%d%d%d%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d)$',
  leaky = '^leaky:([1-9]%d%d%d%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d)$',
}

-- The validated policy of a resolved limiter (see `resolve`), completed in
-- place, for the call's clock `now_ms` (nil: not read; only the fixed
-- window goes without one). `now_hi` is the last ms at which its checks
-- against the clock hold: a call after it checks again (`check_at`).
local function policy_of(r, now_ms)
  local p = r
  p.burst = r.burst or r.limit
  if p.algo == 'fixed' then
    if p.calendar then
      -- The period's end from now: this call's window (set per call).
      now_ms = now_ms or clock()
      p.window, p.window_source = p.window_at(now_ms), 'CALENDAR'
    end
    -- Nothing of it depends on the clock while the window is below 2^53
    -- (the clock is far below 2^63 - 2^53); beyond, the module's checks
    -- at the call's clock name the error.
    if r.window == nil or r.window > EXACT then module_policy_checks(r, now_ms or (clock())) end
    exact_policy(p)
    p.clock, p.now_hi = p.window_at ~= nil, math.huge
  else
    if p.calendar then
      -- sliding: the module checks the window from now to the period's end
      now_ms = now_ms or clock()
      p.window, p.window_source = p.window_at(now_ms), 'CALENDAR'
    end
    module_policy_checks(r, now_ms)
    if USES_BURST[p.algo] then
      p.interval, p.capacity = bucket(p.algo, p.limit, p.window, p.burst)
    end
    exact_policy(p, now_ms)
    p.clock = true
    if p.calendar then
      p.now_hi = EXACT - 2 * longest_period(p)
    elseif p.algo == 'sliding' then
      p.now_hi = EXACT - 2 * p.window
    else
      p.now_hi = last_fitting_ms(p.capacity)
      p.state, p.state_format = TAT_STATE[p.algo], p.algo .. ':%d%06d' -- gcra, leaky
      p.leaky = p.algo == 'leaky'
    end
  end
  -- The policy's decider, a closure over its numbers; the refund is the
  -- same with the amount where the cost goes (the fixed window's apart).
  local decide = ADMIT[p.algo](p)
  p.admit, p.own = decide, decide
  p.refund = REFUND[p.algo] or function(q, key, amount, ms, sub)
    return decide(q, key, 0, ms, sub, amount)
  end
  if p.window_at and p.algo == 'fixed' then
    -- The fixed window's refund reads `p.window`: for this call, from now
    -- to the window's end, aligned or the calendar period's (its decider
    -- does the same itself).
    local refund, w, window_at = p.refund, p.window, p.window_at
    p.refund = function(q, key, amount, ms, sub)
      q.window = window_at(ms)
      return restore_window(q, w, refund(q, key, amount, ms, sub))
    end
  end
  if p.penalty then
    -- The penalty box reads the clock, whose checks it has too.
    local now = now_ms or clock()
    penalty_checks(p, now)
    p.clock = true
    p.now_hi = math.min(p.now_hi, EXACT - p.penalty)
    if p.escalate then p.now_hi = math.min(p.now_hi, EXACT - 2 * p.escalate) end
    p.admit, p.refund = penalised(p.admit, false), penalised(p.refund, true)
  end
  return p
end

-- Raises what the policy's checks say at a clock past its `now_hi`.
local function check_at(p, now_ms)
  module_policy_checks(p, now_ms)
  exact_policy(p, now_ms)
  if p.penalty then penalty_checks(p, now_ms) end
end

---------------------------------------------------------------- memo

-- Validated policies by their argument words: a tree with one level per
-- word under the number of words, MEMO[#args][args[1]]...[args[n]] (the
-- functions look it up themselves: it is on every call's path). A word
-- the tree does not hold leads to MISS, and MISS to itself, so the lookup
-- is one index per word with no test on the way (`bind` sets the
-- metatables: setmetatable is not reachable while the library loads).
-- Only what passed every check is kept, never an error; a clock check is
-- made again past the policy's `now_hi`. At most MEMO_MAX policies: when
-- full, it starts again empty.
local MEMO_MAX = 1024
local memo_size = 0
local MISS = {}
local NODE = {__index = function() return MISS end}
local LIMITER_MEMO, THROTTLE_MEMO = {}, {}

local function remember(memo, args, entry)
  if memo_size >= MEMO_MAX then
    for n in pairs(LIMITER_MEMO) do LIMITER_MEMO[n] = nil end
    for n in pairs(THROTTLE_MEMO) do THROTTLE_MEMO[n] = nil end
    memo_size = 0
  end
  local n = #args
  if n == 0 then
    memo[0] = entry
  else
    local node = memo[n]
    if node == MISS then node = setmetatable({}, NODE); memo[n] = node end
    for i = 1, n - 1 do
      local next = node[args[i]]
      if next == MISS then next = setmetatable({}, NODE); node[args[i]] = next end
      node = next
    end
    node[args[n]] = entry
  end
  memo_size = memo_size + 1
end

-- Binds the standard functions (above) and the memo's metatables.
local function bind()
  tonum, find, match, fmt = tonumber, string.find, string.match, string.format
  floor, fmod, typeof = math.floor, math.fmod, type
  call, server_pcall = server.call, server.pcall
  setmetatable(MISS, NODE)
  setmetatable(LIMITER_MEMO, NODE)
  setmetatable(THROTTLE_MEMO, NODE)
end

---------------------------------------------------------------- writes

-- What a decision does to its key, as (kind, value, time): nothing (nil),
-- or one server call. The fixed window's are relative to now.
local SET_AT = 1    -- SET key value PXAT time
local EXPIRE_AT = 2 -- PEXPIREAT key time
local DELETE = 3    -- DEL key
local ADD = 4       -- INCRBY key value (keeps the TTL)
local SET_IN = 5    -- SET key value PX time
local EXPIRE_IN = 6 -- PEXPIRE key time
local KEEP_TTL = 7  -- SET key value KEEPTTL

local function store(key, kind, value, at)
  if kind == SET_AT then
    call('SET', key, value, 'PXAT', at)
  elseif kind == ADD then
    call('INCRBY', key, value)
  elseif kind == SET_IN then
    call('SET', key, value, 'PX', at)
  elseif kind == EXPIRE_AT then
    call('PEXPIREAT', key, at)
  elseif kind == EXPIRE_IN then
    call('PEXPIRE', key, at)
  elseif kind == DELETE then
    call('DEL', key)
  elseif kind == KEEP_TTL then
    call('SET', key, value, 'KEEPTTL')
  end
end

-- The one write a real refusal that wrote nothing else may make
-- (src/algo/mod.rs `refusal_repair`): the state must live until the reset
-- the refusal reports, which ends at `reset_at` (absolute ms, rounded up);
-- a spent key without a TTL is deleted. Reads the key's expiry.
local function refusal_repair(key, reset_ms, reset_at)
  local at = call('PEXPIRETIME', key) -- -1 without a TTL, -2 without the key
  if reset_ms == 0 then
    if at == -1 then return DELETE end
    return nil
  end
  if at >= reset_at or at == -2 then return nil end
  return EXPIRE_AT, nil, reset_at
end

---------------------------------------------------------------- deciders

--[[
Each algorithm's decider (src/algo/), made for one policy by its `*_of`
(a closure over the policy's numbers), decides one call on one limiter
key: (the key, the cost, the clock's ms and the ns into it, and for a
refund the amount) in; the five numbers of the reply (admitted, limit,
remaining, retry, reset) and the write (kind, value, time) out, or nil and
an error text. It reads the key itself and writes nothing: the caller
stores the write (rl_admitall only when all its limiters agree). A stored
value comes back from GET as a string, or as an error table (`.err`) for
another type's key.

On the way to an admission they call no helper of their own and read no
field twice: a Lua call or a table lookup costs more than the arithmetic.
Digits a pattern captured are read by arithmetic (`+ 0`), the same strtod
as tonumber without its call.
]]

---------------------------------------------------------------- fixed

-- Fixed window counter (src/algo/fixed.rs): one integer per window, and
-- the key's expiry is the reset. Read as the count and the ms it has left
-- (PTTL); a counter without a TTL, or outliving this window, is read with
-- the window's expiry, which must be written (`adopted`).
local COUNTER = '^%-?[1-9]%d*$'

-- The counter in a stored value (nil: not one). Below 16 characters a
-- strict integer is exact.
local function counter_of(raw)
  if #raw < 16 and find(raw, COUNTER) then return raw + 0 end
  return parse_i64(raw)
end

-- The counter at `key`: its count and ms left (0 and nil: none), whether
-- adopted; or nil and the error.
local function read_counter(key, window)
  local raw = server_pcall('GET', key)
  if not raw then return 0, nil, false end
  if raw.err then return nil, WRONGTYPE end
  local count = counter_of(raw)
  if count == nil then return nil, NOT_A_COUNTER end
  local left = call('PTTL', key) -- -1: no TTL; 0: it ends at this ms, gone
  if left == 0 then return 0, nil, false end
  if left < 0 or left > window then return count, window, true end
  return count, left, false
end

-- The decider of one fixed-window policy: a closure over its numbers (an
-- upvalue is cheaper to read than a field).
local function fixed_of(p)
  local limit, window, force = p.limit, p.window, p.force
  local decide = function(_, key, cost)
    local count, left, adopted = 0, nil, false
    local raw = server_pcall('GET', key)
    if raw then
      if raw.err then return nil, WRONGTYPE end
      if #raw < 16 and find(raw, COUNTER) then count = raw + 0 else count = parse_i64(raw) end
      if count == nil then return nil, NOT_A_COUNTER end
      left = call('PTTL', key)
      if left == 0 then
        count, left = 0, nil -- it ends at this ms: gone
      else
        if left < 0 or left > window then left, adopted = window, true end
        -- limit - count below 2^53 keeps every reply exact.
        if limit - count > EXACT then return nil, STATE_BEYOND_DOUBLES end
      end
    end
    local after = count + cost
    if cost <= limit and after <= limit then
      if cost == 0 then return 1, limit, limit - after, 0, left or 0 end -- a peek at no state opens no window
      if adopted then return 1, limit, limit - after, 0, left, SET_IN, after, left end
      if left then return 1, limit, limit - after, 0, left, ADD, cost end
      return 1, limit, limit - after, 0, window, SET_IN, after, window
    end
    if force then
      -- Counted past the limit in its window (src/algo/fixed.rs `forced`).
      if after > EXACT then return nil, STATE_BEYOND_DOUBLES end
      if adopted then return 0, limit, 0, left, left, SET_IN, after, left end
      if left then return 0, limit, 0, left, left, ADD, cost end
      return 0, limit, 0, window, window, SET_IN, after, window
    end
    local room = limit - count
    if room < 0 then room = 0 end
    local retry = left
    if cost > limit then retry = -1 end -- never fits
    -- A refusal writes only the expiry a counter lacked (a peek: nothing).
    if adopted and cost > 0 then return 0, limit, room, retry, left, EXPIRE_IN, nil, left end
    return 0, limit, room, retry, left or 0
  end
  if p.window_at then
    -- ALIGN or CALENDAR: the window, for each call, from now to its end
    -- (`decide` reads the upvalue `window`, set here per call).
    local window_at = p.window_at
    return function(q, key, cost, now_ms, now_sub)
      window = window_at(now_ms)
      return decide(q, key, cost, now_ms, now_sub)
    end
  end
  return decide
end

local function fixed_refund(p, key, amount)
  local c, left, adopted = read_counter(key, p.window)
  if c == nil then return nil, left end
  local limit = p.limit
  if left == nil then return 1, limit, limit, 0, 0 end
  if c > EXACT then return nil, STATE_BEYOND_DOUBLES end
  local count = c
  if c > 0 then
    count = c - amount
    if count <= 0 then
      -- Refunded to empty: the limiter is gone, as for the other algorithms.
      return 1, limit, limit, 0, 0, DELETE
    end
  end
  if limit - count > EXACT then return nil, STATE_BEYOND_DOUBLES end
  -- The counter after it, as a peek sees it.
  local kind = nil
  if adopted then kind = SET_IN elseif count ~= c then kind = KEEP_TTL end
  if count <= limit then return 1, limit, limit - count, 0, left, kind, count, left end
  return 0, limit, 0, left, left, kind, count, left
end

---------------------------------------------------------------- sliding

-- Sliding window counter (src/algo/sliding.rs). All comparisons exact:
-- previous * left + (current + cost) * window <= limit * window.
local SLIDING_STATE = '^sliding:(%d+):(%d+):(%d+)$'
local SLIDING_VALUE = 'sliding:%d:%d:%d'

-- The window start, current and previous counts stored, read digit by
-- digit; or false and the error.
local function read_sliding(raw)
  local s, cur, prev = match(raw, '^sliding:([^:]*):([^:]*):([^:]*)$')
  s, cur, prev = parse_i64(s), parse_i64(cur), parse_i64(prev)
  if not (s and cur and prev) or s < 0 or cur < 0 or prev < 0 then return false, bad_state('sliding') end
  return s, cur, prev
end

-- Whole requests of cost 1 that fit on top of the current and previous
-- windows' counts.
local function sliding_room(limit, w, left, cur, prev)
  local free = limit * w - (prev * left + cur * w)
  if free <= 0 then return 0 end
  return fdiv(free, w)
end

-- The state for these counts, expiring once nothing of it is in view: at
-- the end of the current window (`w` long), or of the next one (`nw`)
-- while the current one counts anything.
local function sliding_stored(start, cur, prev, w, nw)
  if cur == 0 and prev == 0 then return DELETE end
  if cur == 0 then return SET_AT, fmt(SLIDING_VALUE, start, cur, prev), start + w end
  return SET_AT, fmt(SLIDING_VALUE, start, cur, prev), start + w + nw
end

-- A refusal (or a peek that does not fit): the wait, and what it writes.
local function sliding_refused(p, key, cost, now, start, left, cur, prev, future, had_state, w, nw)
  local limit = p.limit
  local retry = -1
  if cost <= limit then
    retry = nil
    if prev > 0 and cur + cost <= limit then
      local t = fdiv(prev * left + cur * w + cost * w - limit * w + prev - 1, prev)
      if t < left then retry = t end
    end
    if retry == nil then
      local into_next = 0
      if cur > 0 then
        local over = nw * (cur - limit + cost)
        if over < 0 then over = 0 end
        into_next = fdiv(over + cur - 1, cur)
      end
      if into_next > nw then into_next = nw end
      retry = left + into_next
    end
  end
  local reset = 0
  if cur > 0 then reset = left + nw elseif prev > 0 then reset = left end
  local room = sliding_room(limit, w, left, cur, prev)
  if cost > 0 and future then return 0, limit, room, retry, reset, sliding_stored(start, cur, prev, w, nw) end
  if cost > 0 and had_state then
    return 0, limit, room, retry, reset, refusal_repair(key, reset, now + reset)
  end
  return 0, limit, room, retry, reset
end

-- The decider of one sliding-window policy, a closure over its numbers.
-- It admits `cost` at `now`; or, given `amount`, refunds it and answers as
-- a peek at the counts after it.
local function sliding_of(p)
  local w, limit = p.window, p.limit
  local period, offset, rule = p.calendar, p.tz_offset, p.tz_rule
  -- the longest window the counts are multiplied by (this one or the next;
  -- a daylight-saving change lengthens a period by its shift)
  local longest = period and longest_period(p) or w
  return function(_, key, cost, now, _, amount)
    local raw = server_pcall('GET', key)
    local start, prev_start, nw
    if period then
      -- calendar periods, each with its own length (`w` set per call)
      start = period_start(period, offset, now, rule)
      local e = period_end(period, offset, now, rule)
      w, nw = e - start, period_end(period, offset, e, rule) - e
      prev_start = period_start(period, offset, start - 1, rule)
    else
      start = now - fmod(now, w)
      prev_start, nw = start - w, w
    end
    local left = start + w - now
    local cur, prev, future = 0, 0, false
    if raw then
      if raw.err then return nil, WRONGTYPE end
      -- The usual state: fields below 10^15 (exact), no leading zeros.
      local ss, cs, qs = match(raw, SLIDING_STATE)
      local s_start, s_cur, s_prev
      if ss and #ss < 16 and #cs < 16 and #qs < 16 then
        s_start, s_cur, s_prev = ss + 0, cs + 0, qs + 0
        if s_start < LEAST[#ss] or (s_cur < LEAST[#cs] and #cs > 1) or (s_prev < LEAST[#qs] and #qs > 1) then
          s_start = nil
        end
      end
      if s_start == nil then
        s_start, s_cur, s_prev = read_sliding(raw)
        if not s_start then return nil, s_cur end
      end
      future = s_start > now
      if s_start == start or future then
        cur, prev = s_cur, s_prev
      elseif s_start == prev_start then
        prev = s_cur
      end
      if (cur + prev + limit) * longest > EXACT then return nil, STATE_BEYOND_DOUBLES end
    end
    local kind, value, at -- a refund's write
    if amount then
      local after = cur - amount
      if after < 0 then after = 0 end
      if raw and cur > 0 then kind, value, at = sliding_stored(start, after, prev, w, nw) end
      cur, future, raw = after, false, false
    end
    local after = cur + cost
    if cost <= limit and prev * left + after * w <= limit * w then
      local room = limit * w - (prev * left + after * w) -- sliding_room, spelled out
      if room > 0 then
        local r = floor(room / w)
        if r * w > room then r = r - 1 elseif (r + 1) * w <= room then r = r + 1 end
        room = r
      end
      local reset = 0
      if after > 0 then reset = left + nw elseif prev > 0 then reset = left end
      if cost == 0 then return 1, limit, room, 0, reset, kind, value, at end
      return 1, limit, room, 0, reset, SET_AT, fmt(SLIDING_VALUE, start, after, prev), start + w + nw
    end
    if amount then
      local a, l, r, t, s = sliding_refused(p, key, 0, now, start, left, cur, prev, false, false, w, nw)
      return a, l, r, t, s, kind, value, at
    end
    if p.force then
      -- Counted past the limit in the current window (src/algo/sliding.rs
      -- `forced`): the reply is the refusal a request of cost 1 would get.
      if (after + prev + limit) * longest > EXACT then return nil, STATE_BEYOND_DOUBLES end
      local _, l, _, t, s = sliding_refused(p, key, 1, now, start, left, after, prev, false, false, w, nw)
      return 0, l, 0, t, s, SET_AT, fmt(SLIDING_VALUE, start, after, prev), start + w + nw
    end
    return sliding_refused(p, key, cost, now, start, left, cur, prev, future, raw, w, nw)
  end
end

---------------------------------------------------------------- buckets

-- The meter GCRA, the token bucket and the leaky queue share
-- (src/algo/gcra.rs `Meter`), on a debt in ns (at most the capacity): a
-- cost fits when debt + cost * interval does not pass the capacity.

-- Whole requests of cost 1 that fit on top of `debt`.
local function room(p, debt)
  if debt >= p.capacity then return 0 end
  return fdiv(p.capacity - debt, p.interval)
end

local function forgive(p, debt, amount)
  if amount >= fdiv(debt, p.interval) + 1 then return 0 end
  local left = debt - amount * p.interval
  if left < 0 then return 0 end
  return left
end

-- What cancelling a booking of `amount` whose slot is at `p.at` (ms)
-- gives back (ns) on a debt `debt` (src/algo/gcra.rs `cancel_credit`): what
-- later bookings have not overtaken; nothing once the slot is reached. The
-- slot is taken at the earliest ns that rounds up to `p.at`.
local function cancel_credit(p, debt, amount, now_ms, now_sub)
  if p.at <= now_ms then return 0 end
  local capacity, interval = p.capacity, p.interval
  -- the booking's end, as ns after now
  local ending = (p.at - 1 - now_ms) * NS_PER_MS + 1 - now_sub
  -- A count whose requests pass twice the bound gives back all the debt
  -- (and keeps the product below 2^53).
  if amount >= fdiv(2 * (capacity + p.horizon) + 2 * NS_PER_MS, interval) + 1 then return debt end
  local increment = amount * interval
  if p.leaky then ending = ending + increment else ending = ending + capacity end
  local overtaken = debt - ending
  if overtaken < 0 then overtaken = 0 end
  local back = increment - overtaken
  if back < 0 then return 0 end
  if back > debt then return debt end
  return back
end

-- A refusal of the buckets: debt `debt` stays, `x` is the wait (nil:
-- never). The reply's five numbers and the repair. `capped`: the room
-- replied is at most the burst (GCRA, leaky).
local function bucket_refused(p, key, cost, now_ms, now_sub, debt, x, had_state, capped)
  local retry = -1
  if x ~= nil then retry = ceil_ms(x) end
  local reset = ceil_ms(debt)
  local left = room(p, debt)
  if capped and left > p.burst then left = p.burst end
  if cost > 0 and had_state then
    return 0, p.burst, left, retry, reset, refusal_repair(key, reset, ms_at(now_ms, now_sub, debt))
  end
  return 0, p.burst, left, retry, reset
end

-- RESERVE's slot of the call's booking (`reserved` replies it): ms from
-- now's ms, and its absolute ms.
local SLOT_DELAY, SLOT_AT = 0, 0

-- The slot `wait` ns after now (src/algo/mod.rs `Slot::after`): now for no
-- wait, else its time rounded up to the ms.
local function book_slot(wait, now_ms, now_sub)
  if wait <= 0 then
    SLOT_DELAY, SLOT_AT = 0, now_ms
    return
  end
  local at = ms_at(now_ms, now_sub, wait)
  SLOT_DELAY, SLOT_AT = at - now_ms, at
end

-- A call the plain rule refuses, under FORCE or RESERVE (src/algo/gcra.rs
-- `charge`): the debt after it and the reply, or nil when the plain
-- refusal stands. The state may run ahead by the capacity plus the
-- horizon; FORCE is capped there, RESERVE books only within it and
-- within its max_ms. `wait`: the plain refusal's (nil: never fits).
local function bucket_charged(p, debt, cost, now_ms, now_sub, wait)
  local capacity, interval = p.capacity, p.interval
  local bound = capacity + p.horizon
  if p.force then
    local after = bound
    if cost <= fdiv(bound - debt, interval) then after = debt + cost * interval end
    return after, 0, p.burst, 0, ceil_ms(after + interval - capacity), ceil_ms(after)
  end
  if wait == nil or wait + capacity > bound then return nil end
  -- The slot: when the queue ahead has drained (leaky), or when the debt
  -- left fits the bucket again (gcra, token).
  if p.leaky then book_slot(debt, now_ms, now_sub) else book_slot(wait, now_ms, now_sub) end
  if SLOT_DELAY > p.reserve then return nil end
  local retry = 0
  if p.leaky then retry = ceil_ms(debt) end
  return wait + capacity, 1, p.burst, 0, retry, ceil_ms(wait + capacity)
end

-- Token bucket (src/algo/token.rs): credit in ns, refilled continuously;
-- stored with the time of the last refill, its ms and the ns into it.
local TOKEN_STATE = '^token:(%d+):(%d+):(%d+)$'
local TOKEN_VALUE = 'token:%d:%d:%d'

-- The credit, last refill ms and ns stored, read digit by digit (a
-- negative time, or no ns: a build that read the clock in ms wrote that
-- form, the start of the ms); or false and the error.
local function read_token(raw)
  local credit, last, into = match(raw, '^token:([^:]*):([^:]*):([^:]*)$')
  if credit == nil then
    credit, last = match(raw, '^token:([^:]*):([^:]*)$')
    into = '0'
  end
  credit, last, into = parse_i64(credit), parse_i64(last), parse_i64(into)
  if not (credit and last and into) or into < 0 or into >= NS_PER_MS then
    return false, bad_state('token')
  end
  return credit, last, into
end

-- The bucket holding `level` now, stored, expiring when it is full again.
local function token_stored(level, p, now_ms, now_sub)
  return SET_AT, fmt(TOKEN_VALUE, level, now_ms, now_sub), ms_at(now_ms, now_sub, p.capacity - level)
end

-- The decider of one token-bucket policy, a closure over its numbers. It
-- admits `cost` now; or, given `amount`, refunds it and answers as a peek
-- at the bucket after it. Credit below 0 is debt booked ahead (RESERVE,
-- FORCE), at most the horizon; below that it is odd, read as empty.
local function token_of(p)
  local capacity, interval, burst = p.capacity, p.interval, p.burst
  local charges, reserve = p.force or p.reserve, p.reserve
  return function(_, key, cost, now_ms, now_sub, amount)
    local raw = server_pcall('GET', key)
    local level, future, odd = capacity, false, false
    if raw then
      if raw.err then return nil, WRONGTYPE end
      -- The usual state: fields below 2^53 (exact), no leading zeros, a
      -- positive time.
      local cs, ls, ns = match(raw, TOKEN_STATE)
      local credit, last, into
      if cs and #cs < 17 and #ls < 17 and #ns < 7 then
        credit, last, into = cs + 0, ls + 0, ns + 0
        if credit > EXACT or last > EXACT or last < LEAST[#ls] or (credit < LEAST[#cs] and #cs > 1)
            or (into < LEAST[#ns] and #ns > 1) then
          credit = nil
        end
      end
      if credit == nil then
        credit, last, into = read_token(raw)
        if not credit then return nil, last end
      end
      local elapsed = (now_ms - last) * NS_PER_MS + (now_sub - into)
      if elapsed < 0 then elapsed = 0 end
      level = credit + elapsed
      if level > capacity then level = capacity elseif level < -p.horizon then level, odd = 0, true end
      -- A last refill after now: a clock that went back, a hand-written value.
      future = last > now_ms or (last == now_ms and into > now_sub)
    end
    local kind, value, at -- a refund's write
    if amount then
      if raw then
        local after = capacity - forgive(p, capacity - level, amount)
        if p.at then after = level + cancel_credit(p, capacity - level, amount, now_ms, now_sub) end
        if after == capacity then
          if level ~= capacity then kind = DELETE end
        elseif after ~= level then
          kind, value, at = token_stored(after, p, now_ms, now_sub)
        end
        level = after
      end
      future, raw = false, false
    end
    local debt = capacity - level
    local increment = cost * interval
    local x = debt + increment
    if increment <= capacity and x <= capacity then
      -- x / 1e6 once, for the reset and the expiry (exact: see ceil_ms).
      local xms = floor(x / NS_PER_MS)
      local xns = x - xms * NS_PER_MS
      local reset = xms
      if xns > 0 then reset = xms + 1 end
      local left = 0 -- room(p, x), spelled out
      if x < capacity then
        left = floor((capacity - x) / interval)
        if left * interval > capacity - x then
          left = left - 1
        elseif (left + 1) * interval <= capacity - x then
          left = left + 1
        end
      end
      if reserve and not amount then book_slot(0, now_ms, now_sub) end
      if cost == 0 then return 1, burst, left, 0, reset, kind, value, at end
      local into, ms = xns + now_sub, now_ms + xms -- split_at(now, x)
      if into >= NS_PER_MS then into, ms = into - NS_PER_MS, ms + 1 end
      if into > 0 then ms = ms + 1 end -- ms_at: the key outlives the time
      return 1, burst, left, 0, reset, SET_AT, fmt(TOKEN_VALUE, capacity - x, now_ms, now_sub), ms
    end
    if increment > capacity then x = nil else x = x - capacity end
    if amount then
      local a, l, r, t, s = bucket_refused(p, key, 0, now_ms, now_sub, debt, x)
      return a, l, r, t, s, kind, value, at
    end
    if charges then
      local after, a, l, r, t, s = bucket_charged(p, debt, cost, now_ms, now_sub, x)
      if after and cost == 0 then return a, l, r, t, s end
      if after then return a, l, r, t, s, token_stored(capacity - after, p, now_ms, now_sub) end
    end
    if cost > 0 and (future or odd) then
      local a, l, r, t, s = bucket_refused(p, key, 0, now_ms, now_sub, debt, x)
      if level == capacity then return a, l, r, t, s, DELETE end
      return a, l, r, t, s, token_stored(level, p, now_ms, now_sub)
    end
    return bucket_refused(p, key, cost, now_ms, now_sub, debt, x, raw)
  end
end

-- GCRA and the leaky queue (src/algo/gcra.rs `Schedule`): the state is one
-- absolute ns time; its span after now is the debt, clamped to the bucket.
-- Stored as it is written (TAT_STATE); any other form is read digit by
-- digit.

-- The time stored as its span after now (nil for no key), or false and
-- the error. redis-cell's bare ns integer is read too when `bare`.
local function read_tat(algo, raw, now_ms, now_sub, bare)
  if not raw then return nil end
  if raw.err then return false, WRONGTYPE end
  local ms, into = match(raw, TAT_STATE[algo])
  if ms then
    ms = ms + 0
    -- Within i64 for sure below the ms 9223372036854 (the last one's).
    if ms < 9223372036854 then return (ms - now_ms) * NS_PER_MS + (into - now_sub) end
  end
  local tat = match(raw, '^' .. algo .. ':([^:]*)$')
  if parse_i64(tat) == nil then
    if not bare or parse_i64(raw) == nil then return false, bad_state(algo) end
    tat = raw
  end
  return ns_after(tat, now_ms, now_sub)
end

-- The state `debt` ns ahead of now, expiring when the debt is paid.
local function schedule_stored(p, debt, now_ms, now_sub)
  local ms, into = split_at(now_ms, now_sub, debt)
  if into > 0 then return SET_AT, fmt(p.state_format, ms, into), ms + 1 end
  return SET_AT, fmt(p.state_format, ms, into), ms
end

-- The decider of one GCRA or leaky policy: a closure over its numbers
-- (an upvalue is cheaper to read than a field). It admits `cost` now; or,
-- given `amount`, refunds it and answers as a peek at the schedule after it.
local function schedule_of(p)
  local capacity, interval, burst, leaky = p.capacity, p.interval, p.burst, p.leaky
  local state, state_format, algo = p.state, p.state_format, p.algo
  -- Debt beyond the bound is odd (see src/algo/gcra.rs `within`).
  local bound, charges, reserve = capacity + p.horizon, p.force or p.reserve, p.reserve
  return function(_, key, cost, now_ms, now_sub, amount)
    local raw = server_pcall('GET', key)
    local ahead = nil
    if raw then
      -- read_tat, its usual state spelled out
      if raw.err then return nil, WRONGTYPE end
      local ms, into = match(raw, state)
      if ms then ms = ms + 0 end
      if ms and ms < 9223372036854 then
        ahead = (ms - now_ms) * NS_PER_MS + (into - now_sub)
      else
        local err
        ahead, err = read_tat(algo, raw, now_ms, now_sub)
        if ahead == false then return nil, err end
      end
    end
    local kind, value, at -- a refund's write
    if amount then
      local before = 0
      if ahead then
        before = ahead
        if before < 0 then before = 0 elseif before > bound then before = capacity end
      end
      ahead = forgive(p, before, amount)
      if p.at then ahead = before - cancel_credit(p, before, amount, now_ms, now_sub) end
      if raw and before > 0 and ahead ~= before then
        if ahead == 0 then kind = DELETE else kind, value, at = schedule_stored(p, ahead, now_ms, now_sub) end
      end
      raw = false
    end
    ahead = ahead or 0
    local debt, odd = ahead, false
    if debt < 0 then debt = 0 elseif debt > bound then debt, odd = capacity, true end
    local increment = cost * interval
    local x = debt + increment
    if increment <= capacity and x <= capacity then
      local retry = 0
      if leaky then retry = ceil_ms(debt) end -- the queue ahead of it
      -- bucket_admitted, spelled out
      local xms = floor(x / NS_PER_MS)
      local xns = x - xms * NS_PER_MS
      local reset = xms
      if xns > 0 then reset = xms + 1 end
      -- Never more than the burst (the leaky queue's head is not waiting).
      local left = 0
      if x < capacity then
        left = floor((capacity - x) / interval)
        if left * interval > capacity - x then
          left = left - 1
        elseif (left + 1) * interval <= capacity - x then
          left = left + 1
        end
        if left > burst then left = burst end
      end
      if reserve and not amount then book_slot(leaky and debt or 0, now_ms, now_sub) end
      if cost == 0 then return 1, burst, left, retry, reset, kind, value, at end
      local into, ms = xns + now_sub, now_ms + xms
      if into >= NS_PER_MS then into, ms = into - NS_PER_MS, ms + 1 end
      local expiry = ms -- ms_at: the key outlives the time
      if into > 0 then expiry = ms + 1 end
      return 1, burst, left, retry, reset, SET_AT, fmt(state_format, ms, into), expiry
    end
    if increment > capacity then x = nil else x = x - capacity end
    if amount then
      local a, l, r, t, s = bucket_refused(p, key, 0, now_ms, now_sub, debt, x, false, true)
      return a, l, r, t, s, kind, value, at
    end
    if charges then
      local after, a, l, r, t, s = bucket_charged(p, debt, cost, now_ms, now_sub, x)
      if after and cost == 0 then return a, l, r, t, s end
      if after then return a, l, r, t, s, schedule_stored(p, after, now_ms, now_sub) end
    end
    -- Beyond the bound: written back as a full bucket, so it drains.
    if cost > 0 and odd then
      local a, l, r, t, s = bucket_refused(p, key, 0, now_ms, now_sub, debt, x, false, true)
      return a, l, r, t, s, schedule_stored(p, debt, now_ms, now_sub)
    end
    return bucket_refused(p, key, cost, now_ms, now_sub, debt, x, raw, true)
  end
end

-- Each algorithm's decider, made for a policy (`policy_of`); the fixed
-- window's refund apart.
ADMIT.fixed, REFUND.fixed = fixed_of, fixed_refund
ADMIT.sliding, ADMIT.token = sliding_of, token_of
ADMIT.gcra, ADMIT.leaky = schedule_of, schedule_of

-- A refund of nothing is a peek: the decision, and no write, even where a
-- real call would normalise the state.
---------------------------------------------------------------- penalty

--[[
The penalty box (src/algo/penalty.rs): a refusal under PENALTY ms refuses
every call for ms from it, with retry_after_ms what is left of it (never
less than the algorithm's own wait); refusals in it do not extend it. It
lives in the limiter's own key, around the algorithm's state:

  penalty:<until_ms>:<state_expires_at_ms>:<state>

<state> as the algorithm stores it, or empty (then the expiry is 0); the
key expires at the later of the two times. An ended penalty reads as its
state alone, written plainly again by the next write. Under ESCALATE
cap_ms (the ladder) the first field also holds the penalty's length,
`<until_ms>/<length_ms>`; a penalty starting less than cap_ms after the
last one's end gets twice its length, within [ms, cap_ms] (a form without
a length counts as ms); the form is kept, and the key lives, until
`until + cap_ms` at least.
]]
local PENALTY_FORM = '^penalty:([^:]*):([^:]*):(.*)$'
local CORRUPT_PENALTY = 'ERR limiter key holds a corrupt penalty'

-- A penalty's form: its end, its state's expiry (nil: no state), its
-- state (nil: none, or expired at `now`) and its length (nil: not
-- recorded); or nil and the error.
local function unwrap(raw, now)
  local until_, expiry, state = match(raw, PENALTY_FORM)
  local len = nil
  if until_ ~= nil and find(until_, '/', 1, true) then
    local u, l = match(until_, '^([^/]*)/(.*)$')
    until_, len = u, parse_i64(l)
    if len == nil or len < 1 then return nil, CORRUPT_PENALTY end
  end
  until_, expiry = parse_i64(until_ or ''), parse_i64(expiry or '')
  if until_ == nil or expiry == nil or until_ < 0 or expiry < 0 then return nil, CORRUPT_PENALTY end
  if state == '' or expiry <= now then return until_, nil, nil, len end
  return until_, expiry, state, len
end

local function is_wrapped(raw)
  return typeof(raw) == 'string' and find(raw, '^penalty:') ~= nil
end

-- The state after a decider's write (kind, value, at) on `state` expiring
-- at `expiry` (ms; nil: no TTL), the clock at `now`.
local function after(kind, value, at, state, expiry, now)
  if kind == nil then return state, expiry end
  if kind == SET_AT then return value, at end
  if kind == ADD then return fmt('%d', counter_of(state) + value), expiry end
  if kind == SET_IN then return value, now + at end
  if kind == EXPIRE_AT then return state, at end
  if kind == EXPIRE_IN then return state, now + at end
  if kind == KEEP_TTL then return value, expiry end
  return nil, nil -- DELETE
end

-- The penalty's form for its end, its length (nil: not recorded), the
-- ladder's memory `hold` (nil: none) and a state: the write that stores it.
local function wrap(until_, len, hold, state, expiry)
  local head = fmt('penalty:%d', until_)
  if len then head = fmt('penalty:%d/%d', until_, len) end
  local at = until_
  if state == nil then
    if hold and hold > at then at = hold end
    return SET_AT, head .. ':0:', at
  end
  expiry = expiry or until_
  if expiry > at then at = expiry end
  if hold and hold > at then at = hold end
  return SET_AT, fmt('%s:%d:%s', head, expiry, state), at
end

-- A decision refused by a penalty `left` ms from its end.
local function boxed(a, limit, retry, reset, left)
  local wait = left
  if a == 0 then
    wait = retry
    if retry ~= -1 and left > retry then wait = left end
  end
  if left > reset then reset = left end
  return 0, limit, 0, wait, reset
end

-- Runs `decide` on the state inside a penalty's form at `key` (given as
-- `state` and `expiry`): the decider reads the key as if it held that
-- state alone (GET, PTTL and PEXPIRETIME of `key` answered from it).
local function decide_inside(decide, q, key, cost, now_ms, now_sub, state, expiry)
  local real_call, real_pcall = call, server_pcall
  server_pcall = function(cmd, k, ...)
    if cmd == 'GET' and k == key then return state or false end
    return real_pcall(cmd, k, ...)
  end
  call = function(cmd, k, ...)
    if k == key and (cmd == 'PTTL' or cmd == 'PEXPIRETIME') then
      if state == nil then return -2 end
      if expiry == nil then return -1 end
      if cmd == 'PTTL' then return expiry - now_ms end
      return expiry
    end
    return real_call(cmd, k, ...)
  end
  local ok, a, l, r, t, s, kind, value, at = pcall(decide, q, key, cost, now_ms, now_sub)
  call, server_pcall = real_call, real_pcall
  if not ok then error(a, 0) end
  return a, l, r, t, s, kind, value, at
end

-- `decide` (an admit, or a refund: `refund`) as a decider of a key that
-- may hold or start a penalty (src/algo/penalty.rs `decide`). The
-- policy's PENALTY is `q.penalty` (nil: none, for a policy without one
-- that found a penalty's form).
function penalised(decide, refund)
  return function(q, key, cost, now_ms, now_sub)
    if now_ms == nil then now_ms, now_sub = clock() end
    local raw = server_pcall('GET', key)
    if raw and raw.err then return nil, WRONGTYPE end
    local wrapped, until_, state, expiry, len = is_wrapped(raw), nil, nil, nil, nil
    local a, l, r, t, s, kind, value, at
    if wrapped then
      until_, expiry, state, len = unwrap(raw, now_ms)
      if until_ == nil then return nil, expiry end
      a, l, r, t, s, kind, value, at = decide_inside(decide, q, key, cost, now_ms, now_sub, state, expiry)
    else
      if raw then
        state = raw
        expiry = call('PEXPIRETIME', key)
        if expiry < 0 then expiry = nil end
      end
      a, l, r, t, s, kind, value, at = decide(q, key, cost, now_ms, now_sub)
    end
    if a == nil then return nil, l end
    local left = 0
    if until_ ~= nil and until_ > now_ms then left = until_ - now_ms end
    -- The ladder's form is kept under ESCALATE (and dropped without it).
    local cap = q.escalate
    if not cap then len = nil end
    if left > 0 then
      -- In the penalty: refused, consuming nothing; a refund gives back to
      -- the state, but does not lift the penalty.
      a, l, r, t, s = boxed(a, l, t, s, left)
      -- A forced charge is usage that happened: it lands in the state as
      -- a refund does, and starts no penalty.
      if (refund or q.force) and kind then
        local hold = cap and until_ + cap
        return a, l, r, t, s, wrap(until_, len, hold, after(kind, value, at, state, expiry, now_ms))
      end
      return a, l, r, t, s
    end
    local penalty = q.penalty
    if not refund and not q.force and a == 0 and cost > 0 and penalty then
      -- A refusal starts the penalty (on the ladder, twice the last, within
      -- [ms, cap]); the state as the refusal leaves it.
      local st, ex = after(kind, value, at, state, expiry, now_ms)
      if cap and until_ ~= nil and now_ms - until_ < cap then
        local last = (len or penalty) * 2
        if last > cap then last = cap end
        if last > penalty then penalty = last end
      end
      a, l, r, t, s = boxed(a, l, t, s, penalty)
      if cap then
        return a, l, r, t, s, wrap(now_ms + penalty, penalty, now_ms + penalty + cap, st, ex)
      end
      return a, l, r, t, s, wrap(now_ms + penalty, nil, nil, st, ex)
    end
    if wrapped and kind and cap and now_ms - until_ < cap then
      -- An ended penalty the ladder still remembers: its form is kept.
      local st, ex = after(kind, value, at, state, expiry, now_ms)
      return a, l, r, t, s, wrap(until_, len, until_ + cap, st, ex)
    end
    if wrapped and kind then
      -- An ended penalty: the state written plainly again.
      local st, ex = after(kind, value, at, state, expiry, now_ms)
      if st == nil then return a, l, r, t, s, DELETE end
      return a, l, r, t, s, SET_AT, st, ex
    end
    if wrapped then return a, l, r, t, s end
    return a, l, r, t, s, kind, value, at
  end
end

-- A decider's error on a key that holds a penalty's form, for a policy
-- without PENALTY: the penalty still holds (nil: not a penalty's form).
local function penalty_held(key)
  return is_wrapped(server_pcall('GET', key))
end

local function peek(p, key, _, now_ms, now_sub)
  local a, l, r, t, s = p.admit(p, key, 0, now_ms, now_sub)
  return a, l, r, t, s
end

---------------------------------------------------------------- replies

-- RESP3 field names of the module (src/reply.rs), as simple strings like
-- the module's: a status table converts to one (a plain Lua string would
-- become a bulk string).
local function status(name) return {ok = name} end
local DECISION_FIELDS = {status('admitted'), status('limit'), status('remaining'),
                         status('retry_after_ms'), status('reset_after_ms')}
-- A shadow mode's would-be refusal: the decision's fields and `shadow` 1.
local SHADOW_FIELDS = {status('admitted'), status('limit'), status('remaining'),
                       status('retry_after_ms'), status('reset_after_ms'), status('shadow')}
local THROTTLE_FIELDS = {status('limited'), status('limit'), status('remaining'),
                         status('retry_after'), status('reset_after')}
local RESERVED_FIELDS = {status('admitted'), status('limit'), status('remaining'),
                         status('retry_after_ms'), status('reset_after_ms'), status('delay_ms'),
                         status('at_ms')}
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

-- Five numbers as the reply: the server converts the table as soon as the
-- function returns, so one table serves every call.
local FIVE = {0, 0, 0, 0, 0}
local function five(fields, format, a, b, c, d, e)
  if format == 'map' then return named(fields, {a, b, c, d, e}, format) end
  FIVE[1], FIVE[2], FIVE[3], FIVE[4], FIVE[5] = a, b, c, d, e
  return FIVE
end

-- Runs a function body under pcall; a `fail` becomes the error reply,
-- verbatim.
local function entry(body)
  return function(keys, args)
    if not tonum then bind() end
    local ok, result = pcall(body, keys, args)
    if ok then return result end
    return failed(result)
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

-- No limit (none, or 0): admitted, nothing read or written.
local function unlimited() return 1, 0, 0, 0, 0 end

-- RL.ADMIT's and RL.REFUND's policy (src/commands/limiter.rs `update`):
-- the options, the META hash, the checks. With the clock it read, if any.
-- Remembered when it depends on the words alone (no META hash).
local function limiter_policy(keys, args, command)
  local _, metakey = limiter_keys(keys, args, command)
  local admits = command == 'RL.ADMIT'
  local opts = parse_options(args, admits and ADMIT_OPTIONS or REFUND_OPTIONS, metakey, nil, admits)
  local r = resolve(opts, metakey)
  local p, now_ms, now_sub = {admit = unlimited, refund = unlimited}, nil, nil
  if r ~= nil then
    if r.algo ~= 'fixed' then now_ms, now_sub = clock() end
    r.force, r.reserve, r.at = opts.FORCE, opts.RESERVE, opts.AT
    p = policy_of(r, now_ms)
    -- RESERVE and AT book, which the windows cannot (src/commands/limiter.rs
    -- `charge_of`); a META hash in shadow mode refuses RESERVE as SHADOW does.
    local booking = (opts.RESERVE ~= nil and 'RESERVE') or (opts.AT ~= nil and 'AT')
    if booking and not USES_BURST[r.algo] then
      fail('ERR ' .. booking .. ' needs ALGO gcra, token or leaky: a window\'s count cannot book a slot in a '
           .. 'later window')
    end
    if opts.RESERVE ~= nil and not opts.FORCE and r.shadow then
      fail('ERR RESERVE and META field \'shadow\' exclude each other: a trial must never make a caller wait')
    end
  end
  p.cost, p.format, p.reserve = opts.COST or 1, opts.FORMAT, opts.RESERVE
  -- The memo is shared by rl_admit and rl_refund, whose options differ here.
  local plain = opts.FORCE == nil and opts.RESERVE == nil and opts.AT == nil
  if metakey == nil and plain then remember(LIMITER_MEMO, args, p) end
  return p, now_ms, now_sub
end

-- RL.ADMIT with RESERVE: the five numbers, then the slot's delay_ms and
-- at_ms (-1 and -1 for a refusal; now, for no limit).
local function reserved(p, a, limit, remaining, retry, reset, now_ms)
  local delay, at = -1, -1
  if a == 1 then delay, at = SLOT_DELAY, SLOT_AT end
  if p.algo == nil then delay, at = 0, now_ms or clock() end
  local values = {a, limit, remaining, retry, reset, delay, at}
  if p.format then return named(RESERVED_FIELDS, values, p.format) end
  return values
end

-- rl_admit and rl_refund (`refunds`): the policy (remembered, or worked
-- out), the clock if the algorithm reads one, the decision, its write, the
-- reply. The memo's lookup and the clock are spelled out here: this is
-- the path every call takes.
local function limiter_function(command, refunds)
  return function(keys, args)
    if not tonum then bind() end
    local p = MISS
    if #keys == 1 then
      p = LIMITER_MEMO[#args]
      for i = 1, #args do p = p[args[i]] end
    end
    local now_ms, now_sub
    if p == MISS then
      local ok, got, ms, sub = pcall(limiter_policy, keys, args, command)
      if not ok then return failed(got) end
      p, now_ms, now_sub = got, ms, sub
    end
    if p.clock and now_ms == nil then
      local t = call('TIME') -- clock()
      local us = t[2] + 0
      local into = us % 1000
      now_ms, now_sub = t[1] * 1000 + (us - into) / 1000, into * 1000
      if now_ms > p.now_hi then
        local ok, err = pcall(check_at, p, now_ms)
        if not ok then return failed(err) end
      end
    end
    local key, decide = keys[1], p.admit
    if refunds then
      decide = p.refund
      if p.cost == 0 then decide = peek end
    end
    local a, limit, remaining, retry, reset, kind, value, at = decide(p, key, p.cost, now_ms, now_sub)
    if a == nil and penalty_held(key) then
      -- A penalty's form, found by a policy without PENALTY: it holds.
      local ok
      ok, a, limit, remaining, retry, reset, kind, value, at =
        pcall(penalised(decide, refunds and decide ~= peek), p, key, p.cost, now_ms, now_sub)
      if not ok then return failed(a) end
    end
    if a == nil then return server.error_reply(limit) end
    if kind == SET_AT then
      call('SET', key, value, 'PXAT', at)
    elseif kind then
      store(key, kind, value, at)
    end
    if p.reserve then return reserved(p, a, limit, remaining, retry, reset, now_ms) end
    if a == 0 and p.shadow then
      -- Shadow mode: the refusal, answered as an admission.
      a = 1
      if p.format then return named(SHADOW_FIELDS, {a, limit, remaining, retry, reset, 1}, p.format) end
    end
    if p.format then return five(DECISION_FIELDS, p.format, a, limit, remaining, retry, reset) end
    FIVE[1], FIVE[2], FIVE[3], FIVE[4], FIVE[5] = a, limit, remaining, retry, reset
    return FIVE
  end
end

local rl_admit = limiter_function('RL.ADMIT', false)
local rl_refund = limiter_function('RL.REFUND', true)

-- The wait a request of cost 1 would be told now; writes nothing.
local function rl_ttl(keys, args)
  local key, metakey = limiter_keys(keys, args, 'RL.TTL')
  local opts = parse_options(args, POLICY_OPTIONS, metakey)
  local r = resolve(opts, metakey)
  if r == nil then return 0 end
  if r.algo == 'fixed' and r.window == nil then
    -- The fixed window's back-off is the counter's PTTL: no window needed.
    if r.limit > EXACT then fail(BEYOND_DOUBLES) end
    if r.penalty then penalty_checks(r, (clock())) end
    local raw = server_pcall('GET', key)
    if not raw then return 0 end
    if typeof(raw) ~= 'string' then fail(WRONGTYPE) end
    if is_wrapped(raw) then
      -- Inside a penalty's form: its state's wait, or the penalty's.
      local now = clock()
      local until_, expiry, state = unwrap(raw, now)
      if until_ == nil then fail(expiry) end
      local left, own = until_ - now, 0
      if state ~= nil then
        local count = counter_of(state)
        if count == nil then fail(NOT_A_COUNTER) end
        if count >= r.limit then own = expiry - now end
      end
      if own > left then left = own end
      if left < 0 then return 0 end
      return left
    end
    local count = counter_of(raw)
    if count == nil then fail(NOT_A_COUNTER) end
    local left = call('PTTL', key) -- -1: no TTL
    if left <= 0 or count < r.limit then return 0 end
    if left > EXACT then fail(STATE_BEYOND_DOUBLES) end
    return left
  end
  local now_ms, now_sub
  if r.algo ~= 'fixed' or r.window_at then now_ms, now_sub = clock() end
  local p = policy_of(r, now_ms)
  local raw = server_pcall('GET', key)
  if is_wrapped(raw) then
    -- The algorithm's own wait inside a penalty's form, or the penalty's.
    now_ms, now_sub = clock()
    local until_, expiry, state = unwrap(raw, now_ms)
    if until_ == nil then fail(expiry) end
    local admitted, problem, _, retry = decide_inside(p.own, p, key, 1, now_ms, now_sub, state, expiry)
    if admitted == nil then fail(problem) end
    if retry < 0 then retry = 0 end
    if until_ - now_ms > retry then retry = until_ - now_ms end
    return retry
  end
  local admitted, problem, _, retry = p.own(p, key, 1, now_ms, now_sub)
  if admitted == nil then fail(problem) end
  if retry < 0 then return 0 end
  return retry
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
  local kind = call('TYPE', keys[1])['ok']
  if kind == 'none' then return 0 end
  if kind ~= 'string' then fail(WRONGTYPE) end
  call('DEL', keys[1])
  return 1
end

-- RL.THROTTLE (src/algo/throttle.rs): redis-cell's CL.THROTTLE, GCRA with
-- max_burst + 1 cells of tolerance, times in whole seconds. Its meter, with
-- the module's checks at `now_ms`, then the library's range.
local function throttle_meter(keys, args, now_ms)
  check_argc(1 + #keys + #args)
  local format = nil
  local n = #args
  if n >= 2 and string.upper(args[n - 1]) == 'FORMAT' and (n == 5 or n == 6) then
    format = read_format(args[n])
    n = n - 2
  end
  if #keys ~= 1 or n < 3 or n > 4 then wrong_arity('RL.THROTTLE') end
  local max_burst = int_arg(args[1], 'max_burst', 0)
  local count = int_arg(args[2], 'count_per_period', 1)
  local period = int_arg(args[3], 'period', 1)
  local quantity = 1
  if n == 4 then quantity = int_arg(args[4], 'quantity', 0) end
  local interval = floor(period * NS_PER_S / count)
  if period * NS_PER_S <= EXACT then interval = fdiv(period * NS_PER_S, count) end
  if interval == 0 then
    fail('ERR count_per_period is too large: more than one request per ns')
  end
  if not fits_ns(now_ms, interval) then
    fail('ERR period is too large: ' .. PAST_THE_CLOCK)
  end
  local limit = max_burst + 1
  local tolerance = interval * limit
  if not fits_ns(now_ms, tolerance) then
    fail('ERR max_burst is too large: ' .. PAST_THE_CLOCK)
  end
  if period * NS_PER_S > EXACT or tolerance > EXACT then fail(BEYOND_DOUBLES) end
  local m = {interval = interval, tolerance = tolerance, limit = limit, quantity = quantity,
             format = format, now_hi = last_fitting_ms(tolerance)}
  remember(THROTTLE_MEMO, args, m)
  return m
end

local function rl_throttle(keys, args)
  if not tonum then bind() end
  local now_ms, now_sub = clock()
  local m = MISS
  if #keys == 1 then
    m = THROTTLE_MEMO[#args]
    for i = 1, #args do m = m[args[i]] end
  end
  if m == MISS or now_ms > m.now_hi then
    local ok, got = pcall(throttle_meter, keys, args, now_ms)
    if not ok then return failed(got) end
    m = got
  end
  local key, tolerance, interval, quantity = keys[1], m.tolerance, m.interval, m.quantity
  -- Our `gcra:<tat_ns>` state, or redis-cell's plain ns integer.
  local raw = server_pcall('GET', key)
  local ahead, err = read_tat('gcra', raw, now_ms, now_sub, true)
  if ahead == false then return server.error_reply(err) end
  local ttl = ahead or 0
  if ttl < 0 then ttl = 0 elseif ttl > tolerance then ttl = tolerance end
  local increment = quantity * interval
  local allowed, wait = false, nil
  if increment <= tolerance then
    local new = ttl + increment
    if new <= tolerance then
      allowed = true
      ttl = new
      if quantity > 0 then
        -- split_at(now_ms, now_sub, new), and ms_at
        local ms = floor(new / NS_PER_MS)
        local into = new - ms * NS_PER_MS + now_sub
        ms = now_ms + ms
        if into >= NS_PER_MS then ms, into = ms + 1, into - NS_PER_MS end
        local at = ms
        if into > 0 then at = ms + 1 end
        call('SET', key, fmt('gcra:%d%06d', ms, into), 'PXAT', at)
      end
    else
      wait = new - tolerance
    end
  end
  if not allowed and quantity > 0 then
    if ahead ~= nil and ahead > tolerance then
      -- Beyond the tolerance: written back clamped, so it drains.
      local ms, into = split_at(now_ms, now_sub, ttl)
      local at = ms
      if into > 0 then at = ms + 1 end
      call('SET', key, fmt('gcra:%d%06d', ms, into), 'PXAT', at)
    elseif raw then
      local kind, value, at = refusal_repair(key, ceil_ms(ttl), ms_at(now_ms, now_sub, ttl))
      if kind then store(key, kind, value, at) end
    end
  end
  local retry = -1
  if wait ~= nil then retry = ceil_div(wait, NS_PER_S) end
  -- fdiv(tolerance - ttl, interval) and ceil_div(ttl, NS_PER_S), spelled
  -- out (a quotient by 1e9 of a span below 2^53 floors exactly: see ceil_ms).
  local remaining = floor((tolerance - ttl) / interval)
  if remaining * interval > tolerance - ttl then
    remaining = remaining - 1
  elseif (remaining + 1) * interval <= tolerance - ttl then
    remaining = remaining + 1
  end
  local reset = floor(ttl / NS_PER_S)
  if reset * NS_PER_S < ttl then reset = reset + 1 end
  local limited = allowed and 0 or 1
  if m.format then return five(THROTTLE_FIELDS, m.format, limited, m.limit, remaining, retry, reset) end
  FIVE[1], FIVE[2], FIVE[3], FIVE[4], FIVE[5] = limited, m.limit, remaining, retry, reset
  return FIVE
end

-- RL.ADMITALL: one POLICY per counter, in order; all are admitted or none
-- is consumed (src/commands/admitall.rs `admit_all`).
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
      at = at + set_option(group, word, args, at, POLICY_OPTIONS)
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
        fail('ERR META key \'' .. shown(m) .. '\' of POLICY ' .. i .. ' is not among the keys after the '
          .. n .. ' counters')
      end
      named_metas[m] = true
    end
  end
  local unused = 0
  for i = n + 1, #keys do if not named_metas[keys[i]] then unused = unused + 1 end end
  if unused > 0 then fail('ERR one POLICY per key is needed: ' .. (n + unused) .. ' keys, ' .. n .. ' policies') end
  cost = cost or 1
  local now_ms, now_sub = clock()
  -- Every policy is resolved before any state is read.
  local members = {}
  for i = 1, n do
    local r = resolve(policies[i], policies[i].META)
    local p = {admit = unlimited, refund = unlimited}
    if r ~= nil then p = policy_of(r, now_ms) end
    members[i] = {key = keys[i], policy = p}
  end
  for i = 1, n do
    local m = members[i]
    m.admit = m.policy.admit
    local a, l, r, t, s, kind, value, expiry = m.admit(m.policy, m.key, cost, now_ms, now_sub)
    if a == nil and penalty_held(m.key) then
      -- A penalty's form, found by a policy without PENALTY: it holds.
      m.admit = penalised(m.admit, false)
      a, l, r, t, s, kind, value, expiry = m.admit(m.policy, m.key, cost, now_ms, now_sub)
    end
    if a == nil then fail(l) end
    m.decision, m.write = {a, l, r, t, s}, {kind, value, expiry}
    -- Shadow mode: a would-be refusal blocks nothing.
    m.shadowed = a == 0 and m.policy.shadow
  end
  local all = true
  for i = 1, n do if members[i].decision[1] == 0 and not members[i].shadowed then all = false end end
  local refused_by, longest = 0, 0
  local decisions = {}
  for i = 1, n do
    local m = members[i]
    local wait = m.decision[4]
    if m.shadowed then
      -- As an enforced refusal: consumes nothing, makes its repair; its
      -- wait is not the caller's. Answered as an admission.
      if m.write[1] then store(m.key, m.write[1], m.write[2], m.write[3]) end
      m.decision[1] = 1
    elseif all then
      if wait > longest then longest = wait end
      if m.write[1] then store(m.key, m.write[1], m.write[2], m.write[3]) end
    elseif m.decision[1] == 0 then
      -- A refusal consumes nothing, but makes the repair RL.ADMIT would.
      if m.write[1] then store(m.key, m.write[1], m.write[2], m.write[3]) end
      if refused_by == 0 or (longest >= 0 and (wait < 0 or wait > longest)) then
        refused_by, longest = i, wait
      end
    else
      -- Nothing was consumed: this member as it stands.
      local a, l, r, t, s = m.admit(m.policy, m.key, 0, now_ms, now_sub)
      m.decision = {a, l, r, t, s}
    end
    if m.shadowed and format == 'map' then
      local d = m.decision
      decisions[i] = named(SHADOW_FIELDS, {d[1], d[2], d[3], d[4], d[5], 1}, format)
    else
      decisions[i] = named(DECISION_FIELDS, m.decision, format)
    end
  end
  return named(ADMITALL_FIELDS, {all and 1 or 0, refused_by, longest, decisions}, format)
end

---------------------------------------------------------------- leases

-- Concurrency leases (src/algo/lease.rs): a ceiling on work in flight. A
-- lease key is a sorted set, member = lease id, score = its deadline in ms
-- of server time; a lease is live while now < deadline, and the key
-- expires at its latest live deadline (it is gone with its last lease).
-- Every write first reclaims (removes) the leases whose deadline passed,
-- at most RECLAIM_MAX of them, earliest first; later writes take the rest.

-- A deadline is an integer from 0 to 2^53, exact in a double.
local LAST_DEADLINE = 9007199254740992 -- 2^53
local NOT_A_DEADLINE = 'ERR lease key holds a score that is not a deadline in ms'
-- The most expired leases one write reclaims (src/algo/lease.rs): a
-- call's work and its ZREM stay bounded however many leases expired.
local RECLAIM_MAX = 128
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
local ACQUIRE_OPTIONS = {LIMIT = true, TTL = true, ID = true, SHADOW = true, FORMAT = true}
-- A shadow refusal's fields: the lease's and `shadow` 1.
local LEASE_SHADOW_FIELDS = {status('acquired'), status('limit'), status('in_flight'),
                             status('retry_after_ms'), status('lease_id'), status('shadow')}

-- now + ttl as a deadline; refused past 2^53 (exact: now < 2^53).
local function deadline_after(now, ttl)
  if ttl > LAST_DEADLINE - now then fail('ERR TTL is too large: the lease deadline passes 2^53 ms') end
  return now + ttl
end

-- The limit, TTL and shadow mode of an acquire: inline options win over
-- the META hash's fields `max`, `ttl` and `shadow`. nil for no limit (none,
-- or 0).
local function lease_policy(opts, metakey, now)
  local meta = NO_META
  if metakey ~= nil then
    local fields = server.pcall('HMGET', metakey, 'max', 'ttl', 'shadow')
    if fields.err then fail('WRONGTYPE META key does not hold a hash') end
    meta = {max = fields[1] or nil, ttl = fields[2] or nil, shadow = fields[3] or nil}
  end
  local limit = opts.LIMIT
  if limit == nil then limit = meta_int(meta, 'max', 0, NON_NEGATIVE) or 0 end
  if limit == 0 then return nil end
  local ttl = opts.TTL
  if ttl == nil then ttl = meta_int(meta, 'ttl', 1, POSITIVE) end
  if ttl == nil then
    fail('ERR a limit is set but no TTL: give TTL or set field \'ttl\' in the META hash')
  end
  -- (The plain call, no META hash, reads no field.)
  local shadow = opts.SHADOW or (metakey ~= nil and meta_flag(meta, 'shadow'))
  local deadline = deadline_after(now, ttl)
  -- The library's own: the limit is replied, and must be exact.
  if limit > EXACT then fail(BEYOND_DOUBLES) end
  return limit, deadline, shadow
end

-- A deadline or expiry inside a string argument, in plain digits. Given as
-- a number, server.call writes it so itself (an integral double as its
-- integer digits), and the calls below pass numbers.
local function digits(n) return string.format('%d', n) end

-- A score read from a lease key as its deadline, or the contract's error.
-- tonumber reads '-0', 'inf' and exponents too; all are judged here.
local function deadline_of(score)
  local d = tonumber(score)
  if d == nil or not (d >= 0 and d <= LAST_DEADLINE) or d % 1 ~= 0 then fail(NOT_A_DEADLINE) end
  return d
end

-- What a lease write needs of the key at `now` (src/algo/lease.rs
-- `Held`), read in O(log n + RECLAIM_MAX), never the whole set: its member
-- count, how many leases expired (score <= now) and the ids of the
-- earliest RECLAIM_MAX of them, the last lease (id and deadline) and the
-- deadline before it, and the deadline of lease `named` (or nil); a
-- refusal reads the earliest live deadline itself. The scores judged are
-- the module's (`Key::read_held`): every expired one read (up to
-- RECLAIM_MAX + 1, the one more only to learn that others follow) and the
-- last two; the server calls are as few as that allows, the costliest
-- (ZRANGE) only where something is there to read: nothing for no key, a
-- ZSCORE for a lone lease that is `named`, one ZRANGE of the whole set for
-- two leases or fewer, else ZCOUNT first and the expired ones only when
-- there are some. Every score read is checked
-- before anything is written; a score nothing reads is judged when a call
-- reads it.
-- No lease to reclaim (never written to).
local NONE = {}

local function read_held(key, now, named)
  local members = server_pcall('ZCARD', key)
  if typeof(members) ~= 'number' then fail(WRONGTYPE) end
  local held = {members = members, expired = 0, reclaimable = NONE}
  if members == 0 then return held end
  if members == 1 and named ~= nil then
    -- A lone lease, perhaps the caller's own: one ZSCORE tells.
    local score = call('ZSCORE', key, named)
    if score then
      local deadline = deadline_of(score)
      held.last_id, held.last, held.named = named, deadline, deadline
      if deadline <= now then held.expired, held.reclaimable = 1, {named} end
      return held
    end
  end
  local ids = {}
  local top
  if members <= 2 then
    top = call('ZRANGE', key, 0, -1, 'WITHSCORES')
    for i = 1, members do
      if deadline_of(top[2 * i]) <= now then ids[#ids + 1] = top[2 * i - 1] end
    end
    held.expired = #ids
    if #ids > 0 then held.reclaimable = ids end
  else
    local count = call('ZCOUNT', key, '-inf', now)
    if count > 0 then
      local expired = call('ZRANGE', key, '-inf', now, 'BYSCORE', 'LIMIT', 0,
                           count > RECLAIM_MAX and RECLAIM_MAX + 1 or count, 'WITHSCORES')
      for i = 1, #expired / 2 do
        deadline_of(expired[2 * i])
        if i <= RECLAIM_MAX then ids[i] = expired[2 * i - 1] end
      end
      held.reclaimable = ids
    end
    held.expired = count
    top = call('ZRANGE', key, -2, -1, 'WITHSCORES')
  end
  local n = #top
  held.last_id, held.last = top[n - 1], deadline_of(top[n])
  if n == 4 then held.before_last = deadline_of(top[2]) end
  if named ~= nil then
    if named == held.last_id then
      held.named = held.last
    elseif n == 4 and named == top[1] then
      held.named = held.before_last
    else
      local score = call('ZSCORE', key, named)
      if score then held.named = deadline_of(score) end
    end
  end
  return held
end

local function live_count(held) return held.members - held.expired end

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
-- contract's order: ZREM the reclaimable ids and `ended` (a lease the call
-- ends, or nil), ZADD the new deadline, PEXPIREAT the key's latest
-- deadline (nil: no live lease is left and the key is gone). Effect
-- replication sends exactly these absolute commands to replicas and the
-- AOF.
local function store_leases(key, held, ended, put_id, put_deadline, expires_at)
  if expires_at == nil and held.expired > #held.reclaimable then
    -- Only dead leases would be left, more than one call reclaims: the
    -- key goes whole (one DEL, freed lazily), not piece by piece
    -- (src/algo/lease.rs `settled`).
    server.call('DEL', key)
    return
  end
  local removed = held.reclaimable
  if #removed > 0 then
    if ended ~= nil then removed[#removed + 1] = ended end
    call('ZREM', key, unpack(removed))
  elseif ended ~= nil then
    call('ZREM', key, ended)
  end
  if put_id ~= nil then call('ZADD', key, put_deadline, put_id) end
  if expires_at ~= nil then call('PEXPIREAT', key, expires_at) end
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
-- Past 2^53 µs (the year 2255) a double's + 1 is lost, so the nonce is
-- kept below it (modulo EXACT): the search still ends, and the ms prefix
-- keeps the ids of different ms apart.
local last_nonce = 0

local function fresh_id(now, now_us, taken)
  local nonce = math.max(last_nonce + 1, now_us) % EXACT
  local id = string.format('%x-%016x', now, nonce)
  while taken(id) do
    nonce = (nonce + 1) % EXACT
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
  local opts = parse_options(args, ACQUIRE_OPTIONS, metakey, LEASE_READERS, true)
  local now, now_us = lease_clock()
  local limit, deadline, shadow = lease_policy(opts, metakey, now)
  if limit == nil then
    -- Unlimited: nothing read, nothing written.
    local id = opts.ID or fresh_id(now, now_us, nothing_taken)
    return five(LEASE_FIELDS, opts.FORMAT, 1, 0, 0, 0, id)
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
    if held.expired > 0 then store_leases(key, held, nil, nil, nil, latest_deadline(held, now)) end
    if shadow then
      -- Shadow mode: the refusal (no lease taken), answered as acquired
      -- with the id the lease would have had.
      local function taken(id) return server.call('ZSCORE', key, id) ~= false end
      local id = opts.ID or fresh_id(now, now_us, taken)
      if opts.FORMAT then return named(LEASE_SHADOW_FIELDS, {1, limit, live, retry, id, 1}, opts.FORMAT) end
      return {1, limit, live, retry, id}
    end
    return five(LEASE_FIELDS, opts.FORMAT, 0, limit, live, retry, false)
  end
  local function taken(id) return server.call('ZSCORE', key, id) ~= false end
  local id = opts.ID or fresh_id(now, now_us, taken)
  store_leases(key, held, nil, id, deadline, latest_deadline(held, now, renewed, deadline))
  if renewed == nil then live = live + 1 end
  return five(LEASE_FIELDS, opts.FORMAT, 1, limit, live, 0, id)
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
  local ended = nil
  if named_live(held, now) then ended = id end
  if ended ~= nil or held.expired > 0 then
    store_leases(key, held, ended, nil, nil, latest_deadline(held, now, ended))
  end
  return ended and 1 or 0
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
    if held.expired > 0 then store_leases(key, held, nil, nil, nil, latest_deadline(held, now)) end
    return 0
  end
  store_leases(key, held, nil, id, deadline, latest_deadline(held, now, id, deadline))
  return 1
end

-- RL.INFLIGHT: the live leases now, in O(log n): the first and last
-- leases are read and judged, the expired ones only counted (ZCOUNT), as
-- the module's `read_counts` does. A read: it reclaims nothing.
local function rl_inflight(keys, args)
  if #keys ~= 1 or #args ~= 0 then wrong_arity('RL.INFLIGHT') end
  local key = keys[1]
  local now = lease_clock()
  local first = server.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first.err then fail(WRONGTYPE) end
  if #first == 0 then return 0 end
  local earliest = deadline_of(first[2])
  deadline_of(server.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  local members = server.call('ZCARD', key)
  if earliest > now then return members end
  return members - server.call('ZCOUNT', key, '-inf', now)
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

-- rl_admit, rl_refund and rl_throttle bind and pcall only where they may
-- fail (see `update_limiter`).
server.register_function{function_name = 'rl_admit', callback = rl_admit}
server.register_function{function_name = 'rl_ttl', callback = entry(rl_ttl), flags = {'no-writes'}}
server.register_function{function_name = 'rl_limit', callback = entry(rl_limit), flags = {'no-writes'}}
server.register_function{function_name = 'rl_admitall', callback = entry(rl_admitall)}
server.register_function{function_name = 'rl_refund', callback = rl_refund}
server.register_function{function_name = 'rl_reset', callback = entry(rl_reset)}
server.register_function{function_name = 'rl_throttle', callback = rl_throttle}
server.register_function{function_name = 'rl_acquire', callback = entry(rl_acquire)}
-- A release or a heartbeat frees or keeps memory: allowed when the server
-- is out of memory, as the module's RL.RELEASE and RL.EXTEND are.
server.register_function{function_name = 'rl_release', callback = entry(rl_release), flags = {'allow-oom'}}
server.register_function{function_name = 'rl_extend', callback = entry(rl_extend), flags = {'allow-oom'}}
server.register_function{function_name = 'rl_inflight', callback = entry(rl_inflight), flags = {'no-writes'}}
local VERSION_FLAGS = {'no-writes', 'allow-stale'}
server.register_function{function_name = 'rl_version', callback = entry(rl_version), flags = VERSION_FLAGS}
