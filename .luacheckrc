-- luacheck's settings (`make lint`): the FUNCTION library and the
-- benchmark's hand-written scripts.
std = 'lua51'
-- The server's API table; the library defines no globals of its own.
read_globals = {'server'}
-- A lease function's parameter `named` (the lease id it names) shadows
-- the reply helper `named`, which those functions do not call.
ignore = {'431/named'}
-- EVAL scripts: the redis API table, the keys and the arguments.
files['bench/lua'] = {read_globals = {'redis', 'KEYS', 'ARGV'}}
