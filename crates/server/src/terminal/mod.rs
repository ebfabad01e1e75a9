//! Terminal sessions (spec 3.4, 3.5, 5.3, 6, 9, 10.3): the signing keys and
//! tokens, the control connection, the relay and the session routes' logic.
//! The one end function every revocation calls lives beside this module, in
//! [`crate::revocation`] (8.3), because identity, hosts and permissions call it
//! too.
//!
//! # Layout
//! - [`channel_limits`]: the rate limits of the terminal channels (6.3):
//!   `rl.public_auth` for failed credential checks, `rl.terminal` at the
//!   device stream's identify, `rl.host` at the host's logins; 4008.
//! - [`control`]: the control connection `GET /api/v1/hosts/connect` (3.4,
//!   3.5): login, report, heartbeats, session reports, the duplicate check.
//! - [`host_auth`]: the host proof of identify and the host.connect check,
//!   shared by the control and the data connection.
//! - [`keys`]: the server signing keys of purpose terminal (5.3): first key,
//!   scheduled and emergency rotation, the JWKS of hello and heartbeat_ack, the
//!   signer; private keys sealed with the pepper.
//! - [`links`]: the port [`links::ControlLinks`] (is the host connected, hand
//!   its control connection a signal) and its one-node implementation.
//! - [`relay`]: pairs the data connection and the device stream of a session
//!   and forwards binary messages unchanged.
//! - [`signals`]: the signals between nodes of section 9 (codec, staging in
//!   the unit of work, the `LISTEN ephemeral` listener and this process's
//!   handler; one node uses the same handler over a local transport).
//! - [`sessions`]: openTerminalSession, attachTerminalSession (with quick
//!   reattach), closeTerminalSession and the reads of sessions (6.1–6.3, 6.6).
//! - [`sweep`]: the job `terminal.sweep` (6.3): the checks in the order of the
//!   spec on the stored rows, and the release of a dead run's sessions at start.
//! - [`token`]: the terminal session token (5.3): every claim, signed as
//!   `terminal-session+jwt`.

pub mod channel_limits;
pub mod control;
pub mod host_auth;
pub mod keys;
pub mod links;
pub mod relay;
pub mod sessions;
pub mod signals;
pub mod sweep;
pub mod token;
