//! `bothy-host`: the host service of bothy terminal (spec chapter 24, section 2.2;
//! DESIGN §4). Three kinds of process run from this one binary:
//!
//! - the **service** (`bothy-host run`, as the service user): holds the keys in
//!   the state directory, the outgoing control connection to the server, one data
//!   connection per `session.open`, the Noise responder and the checks of the
//!   terminal session token; it never runs a shell;
//! - one **PTY helper** per session user (`bothy-host pty-helper`, as that
//!   user): PTYs, process trees in cgroups, the checks in the account of its
//!   user; it knows no keys;
//! - the **service manager** where no systemd runs (`bothy-host supervise`, as
//!   root), which creates the helpers' channel endpoints and starts everything.
//!
//! # Layout
//! - [`config`]: `/etc/bothy-host/config.yaml`, `host_service.*` (section 17).
//! - [`state`]: the state directory (4.2, D-M2-42-4): keys, `pairing.json`,
//!   `bindings.json`, `declaration.json`; every file atomic with mode 0600.
//! - the https/wss client (rustls with the system roots, proxy from the
//!   environment, no way to skip verification; 3.5 "Host service") is the
//!   crate `bothy_net`, shared with the `bothy` client.
//! - [`pair`]: `bothy-host pair` (3.2 step 2).
//! - [`control`]: the control connection (3.5): login, report, heartbeats, the
//!   reaction per close code.
//! - [`data`]: one data connection per `session.open` (6.1, 6.2) and the check
//!   order of message 1 (5.3, M2-45 steps 0–13).
//! - [`sessions`]: the live sessions of the service: PTY link, idle and detach
//!   timers, the scrollback ring buffer and its replay (6.2, 6.3).
//! - [`channel`]: the local channel between service and helper (2.2,
//!   D-M2-42-11): length-prefixed messages, the socketpair handed over with
//!   SCM_RIGHTS, the peer check.
//! - [`manager`]: what the service manager reports (main PIDs of the helpers).
//! - [`helper`]: the PTY helper process: PTY, cgroup, process tree, profiles (6.5, 11.1).
//! - [`doctor`]: HD1–HD11 (2.2), the gate before every PTY and the report's entries.
//! - [`supervise`]: the service manager for hosts without systemd (DESIGN §4).
//! - [`admin`]: `bothy-host restart` and the other commands of the operator.
//! - [`confirm`]: the local confirmation (6.4): `confirm.sock`, the peer rule,
//!   the protocol and `bothy-host confirm-agent`.
//! - [`host`]: the state the service's tasks share ([`host::Host`]), the gate
//!   and the start of a PTY.
//! - [`service`]: `bothy-host run`, the wiring of the above.
//! - [`clock`]: the clock the service reads the time through (injected).
//!
//! `unsafe` lives only in `helper::pty` (clone3 into the session's cgroup,
//! the privilege drop of `supervise`'s children) and `channel::peer`
//! (SCM_RIGHTS, the listening socket of the service manager), each block with a
//! `SAFETY:` comment.

pub mod admin;
pub mod channel;
pub mod cli;
pub mod clock;
pub mod config;
pub mod confirm;
pub mod control;
pub mod data;
pub mod doctor;
#[doc(hidden)]
pub mod fuzzing;
pub mod helper;
pub mod host;
pub mod manager;
pub mod pair;
pub mod seams;
pub mod service;
pub mod sessions;
pub mod state;
pub mod supervise;

/// The version of the host service, reported as `host_version` (SemVer).
pub const HOST_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The environment variable with the log filter (`tracing` directives); the
/// command line reads it and `supervise` passes it on to what it starts.
pub const LOG_FILTER_ENV: &str = "BOTHY_HOST_LOG";

/// The exit code of a refused start (D-M2-42-14: EX_CONFIG), after which no
/// service definition restarts the service.
pub const EXIT_REFUSED_START: i32 = 78;
