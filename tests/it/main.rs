//! The integration tests: one binary, one module per family, each against
//! real valkey-server processes that the harness in `common` starts. One
//! binary links the harness once; `make test` builds it in the test profile
//! while the module under test (`target/release/libvalkey_ratelimit.so`)
//! keeps the release build it ships with.

#[macro_use]
mod common;

mod admitall;
mod algorithms;
mod bad_input;
mod blocking;
mod citizen;
mod clients;
mod cluster;
mod envoy_rls;
mod fixed_window;
mod frameworks;
mod functions_managed;
mod functions_parity;
mod fuzz_live;
mod harness_selftest;
mod instruction_budget;
mod lease_bounds;
mod leases;
mod load_functions;
mod lua_inprocess;
mod lua_oracle;
mod node_package;
mod policies;
mod python_package;
mod reliability;
mod replication;
mod reserve;
mod setup_script;
mod throttle;
mod version_matrix;
