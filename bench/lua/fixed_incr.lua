-- The hand-rolled limiter many applications run today: INCR, and PEXPIRE
-- when the counter is new. The benchmark's baseline beside the FUNCTION
-- library (functions/ratelimit.lua) and the module; not their equal: no
-- cost, no peek, no reset time, a refusal still counts, and a counter that
-- lost its TTL (the PEXPIRE of a crashed call) never expires.
--
--   EVALSHA <sha> 1 <key> <limit> <window_ms>
--
-- Reply: {admitted (1/0), count}.

local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if count > tonumber(ARGV[1]) then
  return {0, count}
end
return {1, count}
