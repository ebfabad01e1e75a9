//! Which code computes what: our checked X25519 for every DH, and one of
//! snow's two cipher/hash backends for ChaChaPoly and SHA-256.
//!
//! Production uses [`PRODUCTION_BACKEND`] only. It was chosen by the figures of
//! `cargo bench -p bothy-noise` (see `benches/noise.rs`); the benchmark reaches
//! the other backend through [`crate::bench_only`].

use snow::{
    params::{CipherChoice, DHChoice, HashChoice},
    resolvers::{CryptoResolver, DefaultResolver, RingResolver},
    types::{Cipher, Dh, Hash, Random},
};

use crate::{
    dh::{CheckedX25519, OsRandom},
    keys::PrivateKey,
};

/// The backend of the production code, chosen by the benchmark: on the 2-core
/// development VM ring moved 800 / 1090 / 1070 MiB/s (1 / 16 / 64 KiB messages,
/// encrypt + decrypt) against 260 / 650 / 700 MiB/s for snow's default; the
/// handshake rate is the same for both (about 3200/s; X25519 dominates it).
pub(crate) const PRODUCTION_BACKEND: Backend = Backend::Ring;

/// A provider of ChaChaPoly and SHA-256. X25519 is always the crate's checked one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// snow's default resolver: RustCrypto `chacha20poly1305` and `sha2`.
    SnowDefault,
    /// snow's ring resolver (`snow::resolvers::RingResolver`).
    Ring,
}

impl Backend {
    /// Both backends, for the benchmark and the vector test.
    pub const ALL: [Backend; 2] = [Backend::SnowDefault, Backend::Ring];

    /// Short name, as the benchmark prints it (`backend=...`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Backend::SnowDefault => "snow-default",
            Backend::Ring => "ring",
        }
    }

    fn resolver(self) -> &'static dyn CryptoResolver {
        match self {
            Backend::SnowDefault => &DefaultResolver,
            Backend::Ring => &RingResolver,
        }
    }
}

/// The resolver handed to snow for one handshake.
pub(crate) struct Resolver {
    backend: Backend,
    /// The initiator's ephemeral key, drawn before message 1 (see [`CheckedX25519`]).
    preset_ephemeral: Option<PrivateKey>,
}

impl Resolver {
    pub(crate) fn new(backend: Backend, preset_ephemeral: Option<PrivateKey>) -> Self {
        Self {
            backend,
            preset_ephemeral,
        }
    }
}

impl CryptoResolver for Resolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(OsRandom))
    }

    /// snow resolves two DH objects per handshake, one for `s` and one for `e`;
    /// both get the preset, the static one drops it in `set` or never uses it.
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        (*choice == DHChoice::Curve25519)
            .then(|| Box::new(CheckedX25519::new(self.preset_ephemeral.clone())) as Box<dyn Dh>)
    }

    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        self.backend.resolver().resolve_hash(choice)
    }

    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        self.backend.resolver().resolve_cipher(choice)
    }
}
