//! `bothy-noise`: the end-to-end encryption of the terminal stream,
//! `Noise_NK_25519_ChaChaPoly_SHA256` (spec 24, section 5.2), on the `snow` crate.
//!
//! The device is the [`Initiator`]: it knows the host's static key from the
//! pairing, draws its ephemeral key at construction (so it can report the
//! `cek` hash before the handshake), and sends the terminal session token in
//! message 1. The host is the [`Responder`]: [`Responder::read_message1`]
//! returns the token and the device's ephemeral key `e` for the checks of
//! spec 5.3, and message 2 carries the host's JSON. Both sides then hold a
//! [`Transport`].
//!
//! Rules built in (spec 5.2): the prologue binds protocol version, session ID
//! and host ID; every message is at most [`MAX_MESSAGE_LEN`] bytes; a
//! Diffie-Hellman result of 32 zero bytes fails the handshake; after a failed
//! handshake step or a failed read the object refuses every further call; each
//! direction refuses the nonce 2^64 - 1.
//!
//! # Layout
//!
//! - `handshake`: [`Initiator`], [`Responder`], [`Message1`] — messages 1 and 2,
//!   and the rule that a failed step poisons the object.
//! - `transport`: [`Transport`] — transport messages, one nonce counter per
//!   direction, poisoned by a failed read.
//! - `prologue`: the prologue from session ID and host ID ([`PROLOGUE_LABEL`]).
//! - `keys`: [`StaticKeypair`], the host's static key, and the key helpers.
//! - `dh`: X25519 that refuses an all-zero result (public keys of small order).
//! - `resolver`: what snow computes with — the checked X25519 and the one
//!   production cipher/hash backend.
//! - `limits`: the size limits ([`MAX_MESSAGE_LEN`], [`MAX_TRANSPORT_PLAINTEXT_LEN`], ...).
//! - `error`: [`NoiseError`].
//! - `bench_only` (hidden): lets `benches/noise.rs` reach the other backend.
//! - `vectors` (tests only): TM-T01 against the cacophony and noise-c vectors.

#![forbid(unsafe_code)]

#[doc(hidden)]
pub mod bench_only;
mod dh;
mod error;
mod handshake;
mod keys;
mod limits;
mod prologue;
mod resolver;
mod transport;
#[cfg(test)]
mod vectors;

pub use error::NoiseError;
pub use handshake::{EphemeralKey, Initiator, Message1, Responder};
pub use keys::StaticKeypair;
pub use limits::{
    HANDSHAKE_OVERHEAD, KEY_LEN, MAX_MESSAGE_LEN, MAX_MESSAGE1_PAYLOAD_LEN,
    MAX_MESSAGE2_PAYLOAD_LEN, MAX_TRANSPORT_PLAINTEXT_LEN, TAG_LEN,
};
pub use prologue::PROLOGUE_LABEL;
pub use transport::{HANDSHAKE_HASH_LEN, Transport};

/// The Noise protocol name of spec 5.2.
pub const PROTOCOL_NAME: &str = "Noise_NK_25519_ChaChaPoly_SHA256";
