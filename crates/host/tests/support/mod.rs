//! Support for the integration tests of `bothy-host`: real OS users created by
//! the test (CI runs as root), removed with their processes and home on drop.
#![allow(dead_code)] // every test binary uses a different part

pub mod output;
pub mod users;
