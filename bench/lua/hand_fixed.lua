-- Hand-written shape: a fixed window as INCRBY, with PEXPIRE when the
-- counter is new (the shape of Upstash's fixedWindow script). A baseline
-- for FCALL rl_admit fixed, not its equal: a refusal still counts, the
-- window's end is relative (PEXPIRE), no reset time, no peek.
--
--   EVALSHA <sha> 1 <key> <limit> <window_ms> <cost>
--
-- Reply: {admitted (1/0), count}.

local key, cost = KEYS[1], ARGV[3]
local count = redis.call('INCRBY', key, cost)
if count == tonumber(cost) then
  redis.call('PEXPIRE', key, ARGV[2])
end
if count > tonumber(ARGV[1]) then
  return {0, count}
end
return {1, count}
