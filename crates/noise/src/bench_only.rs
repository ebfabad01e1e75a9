//! **Bench-only. Not part of the API: no stability, no semver, and production
//! code must never call it.**
//!
//! `benches/noise.rs` compares snow's two cipher/hash backends to choose the
//! production one; this module is how it reaches the backend production does
//! not use. Everything else (prologue, checked X25519, size and nonce rules)
//! is the same as in [`crate::Initiator::new`] and [`crate::Responder::new`].

use uuid::Uuid;

pub use crate::resolver::Backend;
use crate::{
    Initiator, KEY_LEN, NoiseError, Responder, StaticKeypair, resolver::PRODUCTION_BACKEND,
};

/// The backend that [`crate::Initiator::new`] and [`crate::Responder::new`] use.
#[must_use]
pub fn production_backend() -> Backend {
    PRODUCTION_BACKEND
}

/// [`Initiator::new`] on `backend`.
///
/// # Errors
/// As [`Initiator::new`].
pub fn initiator(
    backend: Backend,
    session_id: Uuid,
    host_id: Uuid,
    host_static_public: &[u8; KEY_LEN],
) -> Result<Initiator, NoiseError> {
    Initiator::with_backend(backend, session_id, host_id, host_static_public)
}

/// [`Responder::new`] on `backend`.
///
/// # Errors
/// As [`Responder::new`].
pub fn responder(
    backend: Backend,
    session_id: Uuid,
    host_id: Uuid,
    static_keypair: &StaticKeypair,
) -> Result<Responder, NoiseError> {
    Responder::with_backend(backend, session_id, host_id, static_keypair)
}
