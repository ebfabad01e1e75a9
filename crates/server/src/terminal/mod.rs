//! Terminal sessions (spec 6, 8.3, 10.3). For now the one end function every
//! revocation calls ([`end`]); the relay, tokens and the control connection
//! come with the issue "Terminal sessions on the server".
//!
//! # Layout
//! - [`end`](mod@end): ends the open sessions of a scope in the caller's unit of
//!   work, with audit `terminal.terminate` and `terminal_session.changed`.
//! - [`keys`]: the server signing keys of purpose terminal (5.3): first key,
//!   scheduled and emergency rotation, the JWKS of hello and heartbeat_ack, the
//!   signer; private keys sealed with the pepper.
//! - [`token`]: the terminal session token (5.3): every claim, signed as
//!   `terminal-session+jwt`.

pub mod end;
pub mod keys;
pub mod token;

pub use end::{EndScope, EndedSession, end};
