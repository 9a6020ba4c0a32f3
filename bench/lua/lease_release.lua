-- The hand-rolled lease release paired with lease_acquire.lua: ZREM the
-- holder's id (the lease benchmark's baseline beside RL.RELEASE).
--
--   EVALSHA <sha> 1 <key> <lease-id>
--
-- Reply: 1 if the id was held, else 0.

return redis.call('ZREM', KEYS[1], ARGV[1])
