//! `bothy-api`: the bodies of `bothy-server`'s HTTP API as Rust types (issue 17).
//!
//! Pure: serde only, no I/O. The server answers with these types and derives
//! the OpenAPI schema of `docs/api/openapi.json` from the same declarations
//! (feature `openapi`); the CLI reads the answers into them. A member the
//! server may leave out is an `Option` skipped when absent — never `null` on
//! the wire, and the schema says "not required", not "nullable".
//!
//! Requests are decoded on the server by the strict layer of `bothy_proto::json`
//! first (duplicate members, `null`, unknown members refused with their JSON
//! pointer); the request types here are what that decoding yields and what a
//! client sends.
//!
//! IDs are the hyphenated lower-case UUID text of the wire; a client parses
//! them where it needs a `Uuid`.
//!
//! # Layout
//! - [`audit`]: the audit log's page of entries (`details` stays a JSON object).
//! - [`auth`]: the password rule both sides apply; enrollment, login, "whoami"
//!   (a person or an agent or app), the login sessions, the step-up.
//! - [`devices`]: the devices of CLI logins.
//! - [`grants`]: grants of terminal on hosts — create (with its preview),
//!   revoke, list.
//! - [`groups`]: groups of persons and their members.
//! - [`hosts`]: hosts — create, pairing code, host.pair, confirm, the changes
//!   and the reads; the `Host` a reader sees.
//! - [`passkeys`]: passkeys (at enrollment, added later, the first one of a
//!   person enrolled without one) and the web console's login; the WebAuthn
//!   structures stay JSON values.
//! - [`problem`]: the body of every refusal (`application/problem+json`).
//! - [`persons`]: invite, list, disable, enable, role (with [`persons::Role`]
//!   and [`persons::PersonStatus`]).
//! - [`tokens`]: API tokens of agents and apps (with [`tokens::ServiceKind`]).
//! - [`terminal`]: terminal sessions — open, attach (with the quick-reattach
//!   challenge), close, and the reads.

pub mod audit;
pub mod auth;
pub mod devices;
pub mod grants;
pub mod groups;
pub mod hosts;
pub mod passkeys;
pub mod persons;
pub mod problem;
pub mod terminal;
pub mod tokens;
