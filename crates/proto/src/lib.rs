//! `bothy-proto`: the wire types that `bothy-server`, `bothy-host` and the `bothy`
//! client share (spec chapter 24). Everything here is pure data and pure checks:
//! no I/O, no clocks (time comes in as an argument), no logging.
//!
//! # Layout
//! - [`b64`]: strict base64url without padding (5.3, 3.2).
//! - [`clock`]: the clock as a value handed in ([`clock::Clock`]) and a manual
//!   clock for tests; nothing here reads the system's time.
//! - [`ids`]: UUIDv7 generation and strict UUID text parsing (RFC 9562).
//! - [`json`]: strict JSON decoding: size limit, UTF-8, no duplicate, unknown or
//!   null member, typed member access with JSON pointers (3.5, 5.3).
//! - [`frame`]: the frames inside Noise transport messages (5.4, D-M2-38-10).
//! - [`codes`]: close codes (13), `close_reason` and `close_detail` (10.3) and the
//!   pairs of them that may be stored (M2-46).
//! - [`fingerprint`]: the host key fingerprint (4.3) and the confirmation prefix (3.2).
//! - [`pairing`]: the pairing code `bothy_hpc_<random>_<checksum>` (3.2).
//! - [`jwk`]: Ed25519 JWK, JWKS and the RFC 7638 thumbprint.
//! - [`jws`]: the compact JWS EdDSA profile and its two token types,
//!   `host-auth+jwt` (3.5) and `terminal-session+jwt` (5.3).
//! - [`doctor`]: the checks HD1–HD11 and their codes as they travel in a report (2.2).
//! - [`report`]: the report of a host service and its validation (3.2, 3.5), shared
//!   by the server (host.pair, report) and the host service.
//! - [`control`]: messages of the control connection `/api/v1/hosts/connect` (3.5).
//! - [`data`]: messages of the host data connection `/api/v1/hosts/sessions/{id}/stream`.
//! - [`stream`]: messages of the device stream `/api/v1/terminal/sessions/{id}/stream`.
//! - [`x25519`]: the host's `noise_public_key` of host.pair: strict base64url of
//!   32 bytes, not a point of small order (3.2).
//! - `fuzzing` (hidden): the properties the fuzz targets check, shared with the
//!   regression test that replays every kept fuzz input.
#![forbid(unsafe_code)]

pub mod b64;
pub mod clock;
pub mod codes;
pub mod control;
pub mod data;
pub mod doctor;
mod envelope;
pub mod fingerprint;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod ids;
pub mod json;
pub mod jwk;
pub mod jws;
pub mod pairing;
pub mod report;
pub mod stream;
pub mod x25519;
