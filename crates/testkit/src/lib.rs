//! What the test suites of the workspace share (a dev-dependency only, never
//! published): real components and the peers that speak to them.
//!
//! - The root: databases of both engines ([`TestDb`], [`both_engines!`]).
//! - [`server`]: a real `bothy-server` in the test process ([`server::TestServer`]);
//!   [`ws`]: WebSocket clients over the server's TLS.
//! - [`identity`], [`hosts`], [`console`]: persons, hosts and console logins
//!   through the real routes.
//! - [`terminal`]: test peers of the terminal channels (host control, host
//!   data, device).
//! - [`scenario`]: the host scenario harness (the real `bothy-host` paired and
//!   supervised; `scenario::bench`: the `main`, start and timed opening the
//!   benches share); [`helper`]: a real `bothy-host supervise` for the helper's
//!   tests; [`doctor`]: the doctor's tests.
//! - [`users`], [`machine`], [`causes`], [`output`]: the machine side (real OS
//!   users, scenario folders, TM-T13 causes, what a command printed).
//! - [`wait`]: [`eventually`], a wait on a condition with a deadline;
//!   [`problem`]: [`assert_problem`].
//!
//! A test file names what it uses, e.g. `use bothy_testkit as support;` and
//! `use bothy_testkit::hosts as hosts_common;`: the harness is compiled once
//! here, not again in every test binary.
// A failed step of a test harness is a failed test: it panics with what
// failed. `new` of a folder or an account does work on the machine, which a
// `Default` would hide.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::new_without_default
)]

mod db;

pub mod causes;
pub mod console;
pub mod doctor;
pub mod helper;
pub mod hosts;
pub mod identity;
pub mod machine;
pub mod output;
pub mod problem;
pub mod scenario;
pub mod server;
pub mod terminal;
pub mod users;
pub mod wait;
pub mod ws;

pub use bothy_server::db::Engine;
pub use db::*;
pub use problem::{assert_problem, assert_problem_reason};
pub use wait::{eventually, eventually_blocking};
