//! `bothy`: the command-line client of the bothy terminal (DESIGN §1): log in
//! from this device, step up, open or attach a terminal session on a host
//! end to end encrypted (Noise NK as the initiator, 5.2), and keep the host
//! keys it has seen pinned (5.5). It should feel like `ssh` in a terminal.
//!
//! Layout:
//! - [`cli`]: the commands and their help (clap).
//! - [`dirs`]: where the login and the pins live (XDG), files of mode 0600.
//! - [`login`]: the stored login and this device's Ed25519 key.
//! - TLS (rustls, system roots), HTTP/1.1 and WebSockets to the server: the
//!   crate `bothy_net`, shared with bothy-host.
//! - [`api`]: the REST calls, answers as JSON or as `bothy-api` types.
//! - [`problem`]: the server's problems in the client's words, per call.
//! - [`error`]: what goes wrong, as a code and a one-line hint.
//! - [`prompt`]: questions on the terminal (password, TOTP, confirmations).
//! - [`progress`]: the spinner of the long waits.
//! - [`tty`]: raw mode and the window size of the local terminal.
//! - [`filter`]: the output filter of 11.2 (OSC 52, OSC 8, title reports).
//! - [`escape`]: the `~.` escapes of the input.
//! - [`close`]: close codes of the device stream and the reactions of 13.
//! - [`pins`]: host key pins per server and host (5.5).
//! - [`terminal`]: one terminal session: stream, handshake, frames.
//! - [`commands`]: the commands themselves (`account`, `hosts`, `sessions`,
//!   and what they share in `common`).
//! - [`attach`]: open and attach a session, keep it attached (quick reattach,
//!   reattach after a loss or a server restart).
//! - [`display`]: times, IDs and fingerprints as listings show them.
#![deny(unsafe_code)]

pub mod api;
pub mod attach;
pub mod cli;
pub mod close;
pub mod commands;
pub mod dirs;
pub mod display;
pub mod error;
pub mod escape;
pub mod filter;
pub mod login;
pub mod pins;
pub mod problem;
pub mod progress;
pub mod prompt;
pub mod terminal;
pub mod tty;
