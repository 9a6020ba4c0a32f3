-- The hand-rolled lease acquire many applications run (the "sorted set of
-- deadlines" semaphore): reclaim the expired, count, add, move the expiry.
-- The lease benchmark's baseline beside RL.ACQUIRE and the FUNCTION
-- library's rl_acquire; not their equal: no renew-by-id check, no generated
-- id, no validation of the stored scores, no META, and the expiry is this
-- lease's deadline rather than the latest one.
--
--   EVALSHA <sha> 1 <key> <limit> <ttl_ms> <lease-id>
--
-- Reply: {acquired (1/0), in_flight, retry_after_ms}.

local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local in_flight = redis.call('ZCARD', key)
if in_flight >= tonumber(ARGV[1]) then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, in_flight, tonumber(first[2]) - now}
end
local deadline = now + tonumber(ARGV[2])
redis.call('ZADD', key, deadline, ARGV[3])
redis.call('PEXPIREAT', key, deadline)
return {1, in_flight + 1, 0}
