//! `bothy-server`: the authorization point and relay of bothy terminal
//! (spec chapter 24; DESIGN §3). It holds hosts, pairing, people, step-up,
//! grants, terminal sessions, tokens, audit and events, and relays the
//! end-to-end encrypted streams without reading them.
//!
//! # Layout
//! - [`app`]: a server assembled from its configuration ([`app::App`]), served on a
//!   given listener until a shutdown future completes.
//! - [`cli`]: the sub-commands of the `bothy-server` binary (`serve`, `migrate`,
//!   `admin ...`, `config check`, `openapi`); `main.rs` only calls [`cli::main`].
//! - [`config`]: the YAML configuration, decoded strictly, with every default of
//!   section 17 and the server keys, `BOTHY_` environment overrides, redacted output.
//! - [`clock`]: the injected clock ([`clock::Clock`]); tests move time instead of sleeping.
//! - [`db`]: SQLite (embedded default) or PostgreSQL through one pool, numbered
//!   migrations per engine, and the [`db::UnitOfWork`] that commits data, audit
//!   entries and events together and runs after-commit actions (it writes
//!   the audit and event rows itself, `db/records.rs`, and imports neither
//!   `audit` nor `events`).
//! - [`codes`]: closed lists of codes (`code_enum!`, [`codes::AuditCode`]),
//!   below `audit`, `events` and `db`.
//! - [`audit`]: typed audit entries (10.1) — no free text that could carry content.
//! - [`event_types`]: what an event is (kinds, audience, a durable event before
//!   it is written, an ephemeral one, the position), below `db` and `events`.
//! - [`events`]: the durable event log with monotonically increasing positions,
//!   ephemeral events, and the log tail that hands committed events to subscribers.
//! - [`http`]: the axum router, `application/problem+json` errors with the one
//!   mapping of the domain's errors to problems (`http/problem`), the
//!   principal extractor (`http/extract.rs`), health and readiness, the REST
//!   routes, and [`http::serve`] on a given listener with a shutdown future.
//! - [`identity`]: principals (person, agent, app), groups, enrollment, argon2id
//!   passwords, TOTP, login sessions and devices, step-up, API tokens, and the
//!   authentication of a credential to a [`identity::principal::Principal`]
//!   (DESIGN 3.1).
//! - [`metrics`]: the Prometheus registry of the process (`/metrics`): counters
//!   and gauges whose labels are codes only, never IDs or names (10.4).
//! - [`pepper`]: the server pepper, the key of every stored token and code HMAC.
//! - [`ratelimit`]: token buckets per key on the injected clock (`rl.*`).
//! - [`rlimit`]: the soft limit of open files raised to the hard one at start.
//! - [`shutdown`]: the shutdown broadcast that WebSocket tasks select on (4013)
//!   and that the server drains before it stops.
//! - [`state`]: [`state::AppState`], the services every entry point reaches
//!   (configuration, database, clock, limits, log tail, metrics, control
//!   connections, the relay's registry); no transport of its own.
//! - [`hosts`]: hosts, their state machine, pairing, confirmation, re-pairing,
//!   session-user assignments and the LLM declaration (spec 3, 2.2, 7.2).
//! - [`permissions`]: grants on hosts, the one `authorize` (SR10, SR11 = I6,
//!   SR12), the I6 check of every rights change, the permission version.
//! - [`revocation`]: the one end function (8.3) that identity, hosts,
//!   permissions and terminal call in the unit of work of their change.
//! - [`terminal`]: terminal sessions (open, attach, close, reads), signing keys
//!   and tokens, the host's control connection, the relay with the logins of
//!   its two WebSocket sides, the channel limits and the sweep.
//!
//! # Layers
//! The domain modules (`identity`, `hosts`, `permissions`, `terminal`,
//! `revocation`) return their own errors and know nothing of HTTP: no
//! `crate::http`, no `ApiError` (checked by `tests/layers.rs`). `http` maps
//! their errors to problems; `db` stores data, audit, events and idempotency
//! keys; `state` holds the services both sides reach.
//! - [`tls`]: rustls from cert/key files, or a CA and server certificate the server
//!   creates in its data directory on first start.
#![forbid(unsafe_code)]

pub mod app;
pub mod audit;
pub mod cli;
pub mod clock;
pub mod codes;
pub mod config;
pub mod db;
pub mod event_types;
pub mod events;
pub mod hosts;
pub mod http;
pub mod identity;
pub mod metrics;
pub mod pepper;
pub mod permissions;
pub mod proxies;
pub mod ratelimit;
pub mod revocation;
pub mod rlimit;
pub mod shutdown;
pub mod state;
pub mod terminal;
pub mod tls;
