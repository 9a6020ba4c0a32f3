// valkey-ratelimit for Node.js: rate limiting on Valkey, through the
// caller's own client, on the valkey-ratelimit module (RL.*) or its FUNCTION
// library (FCALL rl_*, shipped in this package as ratelimit.lua). The rooms:
// lib/core.js (the pure core: options, call words, replies, headers),
// lib/limiter.js (Limiter: the calls, backend detection, failure policy,
// leases), lib/store.js (ValkeyStore, the express-rate-limit 8 Store), and
// their helpers (lib/link.js, lib/library.js, lib/context.js, lib/errors.js).
"use strict";

const { ALGORITHMS, ConfigError, headers } = require("./lib/core");
const { Limiter } = require("./lib/limiter");
const { ValkeyStore } = require("./lib/store");
const { bundledLibrary } = require("./lib/library");
const errors = require("./lib/errors");

module.exports = {
  Limiter,
  ValkeyStore,
  headers,
  bundledLibrary,
  ALGORITHMS,
  ConfigError,
  BackendMissingError: errors.BackendMissingError,
  TimeoutError: errors.TimeoutError,
  UnavailableError: errors.UnavailableError,
  LeaseRefusedError: errors.LeaseRefusedError,
  LeaseLostError: errors.LeaseLostError,
};
