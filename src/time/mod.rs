//! Time zones and the civil calendar: pure, below the algorithms. Nothing
//! here imports from `algo`; calendar periods (`algo/calendar.rs`) build on
//! it.
//!
//! `civil.rs` (dates <-> days since 1970-01-01) <- `zone.rs` (the `Zone`
//! value and the daylight-saving rule's arithmetic) <- `tzdb.rs` (the
//! generated table) <- `tz.rs` (TZ's values read against that table).

pub mod civil;
pub mod tz;
pub mod tzdb;
pub mod zone;
