-- Hand-written shape: a fixed window as INCR and PTTL, with PEXPIRE when
-- the counter has no TTL yet (the shape of rate-limit-redis's script). A
-- baseline for FCALL rl_admit fixed, not its equal: a refusal still
-- counts, the window's end is relative (PEXPIRE), no cost, no peek.
--
--   EVALSHA <sha> 1 <key> <window_ms>
--
-- Reply: {count, ms until the window ends}.

local key = KEYS[1]
local count = redis.call('INCR', key)
local left = redis.call('PTTL', key)
if left <= 0 then
  left = tonumber(ARGV[1])
  redis.call('PEXPIRE', key, left)
end
return {count, left}
