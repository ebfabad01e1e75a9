//! X25519 with the small-order check of spec 5.2 ("Diffie-Hellman",
//! D-M2-38-9), as snow's [`Dh`] implementation.
//!
//! snow's own X25519 returns whatever the curve arithmetic gives, including
//! 32 zero bytes for a public key of small order. This one refuses that
//! result, so every DH of the pattern (`es`, `ee`) on both sides is covered.
//! snow turns the refusal into `Error::Dh`, which the crate maps to
//! [`crate::NoiseError::SmallOrderPublicKey`].

use curve25519_dalek::montgomery::MontgomeryPoint;
use snow::{
    Error,
    error::StateProblem,
    types::{Dh, Random},
};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::{
    KEY_LEN,
    keys::{PrivateKey, public_key},
};

/// X25519 that fails on an all-zero shared secret.
///
/// It can carry a pre-drawn ephemeral key (`preset`): the device must know
/// its ephemeral public key before message 1 (the `cek` claim), so the
/// initiator draws it at construction, and the first [`Dh::generate`] call,
/// which snow makes for the `e` token, takes that key instead of drawing one.
pub(crate) struct CheckedX25519 {
    private: Option<PrivateKey>,
    public: [u8; KEY_LEN],
    preset: Option<PrivateKey>,
}

impl CheckedX25519 {
    pub(crate) fn new(preset: Option<PrivateKey>) -> Self {
        Self {
            private: None,
            public: [0; KEY_LEN],
            preset,
        }
    }

    fn install(&mut self, private: PrivateKey) {
        self.public = public_key(&private);
        self.private = Some(private);
    }
}

impl Dh for CheckedX25519 {
    fn name(&self) -> &'static str {
        "25519"
    }

    fn pub_len(&self) -> usize {
        KEY_LEN
    }

    fn priv_len(&self) -> usize {
        KEY_LEN
    }

    /// snow calls this only for the static key; a static key discards the preset.
    fn set(&mut self, privkey: &[u8]) {
        self.preset = None;
        match <[u8; KEY_LEN]>::try_from(privkey) {
            Ok(bytes) => self.install(Zeroizing::new(bytes)),
            // Our constructors always pass 32 bytes; a wrong length leaves no key,
            // and `dh` then refuses with `MissingKeyMaterial`.
            Err(_) => {
                self.private = None;
                self.public = [0; KEY_LEN];
            }
        }
    }

    fn generate(&mut self, rng: &mut dyn Random) -> Result<(), Error> {
        let private = match self.preset.take() {
            Some(preset) => preset,
            None => {
                let mut fresh = Zeroizing::new([0_u8; KEY_LEN]);
                rng.try_fill_bytes(&mut fresh[..])?;
                fresh
            }
        };
        self.install(private);
        Ok(())
    }

    fn pubkey(&self) -> &[u8] {
        &self.public
    }

    fn privkey(&self) -> &[u8] {
        self.private.as_deref().map_or(&[], |key| &key[..])
    }

    fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), Error> {
        let private = self
            .private
            .as_ref()
            .ok_or(StateProblem::MissingKeyMaterial)?;
        // snow passes its key buffer, which is longer than 32 bytes; the key is its start.
        let peer = pubkey
            .first_chunk::<KEY_LEN>()
            .copied()
            .ok_or(StateProblem::MissingKeyMaterial)?;
        let out = out.first_chunk_mut::<KEY_LEN>().ok_or(Error::Input)?;
        let shared = Zeroizing::new(MontgomeryPoint(peer).mul_clamped(**private).to_bytes());
        if bool::from(shared.ct_eq(&[0_u8; KEY_LEN])) {
            return Err(Error::Dh);
        }
        out.copy_from_slice(&shared[..]);
        Ok(())
    }
}

/// The operating system's random number generator, for the responder's ephemeral key.
pub(crate) struct OsRandom;

impl Random for OsRandom {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Error> {
        getrandom::fill(dest).map_err(|_| Error::Rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER_8: [u8; KEY_LEN] = [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ];

    fn keyed() -> CheckedX25519 {
        let mut dh = CheckedX25519::new(None);
        dh.generate(&mut OsRandom).unwrap();
        dh
    }

    #[test]
    fn refuses_all_zero_result() {
        let dh = keyed();
        let mut out = [0xaa_u8; 56];
        assert_eq!(dh.dh(&ORDER_8, &mut out), Err(Error::Dh));
        assert_eq!(out, [0xaa; 56], "nothing is written on refusal");
    }

    #[test]
    fn agrees_with_peer_on_ordinary_keys() {
        let (a, b) = (keyed(), keyed());
        let (mut ab, mut ba) = ([0_u8; 56], [0_u8; 56]);
        a.dh(b.pubkey(), &mut ab).unwrap();
        b.dh(a.pubkey(), &mut ba).unwrap();
        assert_eq!(ab, ba);
        assert_ne!(ab[..KEY_LEN], [0; KEY_LEN]);
    }

    /// The reason this module exists: snow's stock X25519 accepts the zero result.
    /// If this test ever fails, snow started refusing on its own; ours stays anyway.
    #[test]
    fn snow_stock_x25519_accepts_small_order_key() {
        let mut stock = snow::Builder::new("Noise_NK_25519_ChaChaPoly_SHA256".parse().unwrap())
            .remote_public_key(&ORDER_8)
            .unwrap()
            .build_initiator()
            .unwrap();
        let mut message = [0_u8; 64];
        assert!(stock.write_message(b"", &mut message).is_ok());
    }

    #[test]
    fn preset_is_used_once_then_fresh_keys() {
        let preset = Zeroizing::new([7_u8; KEY_LEN]);
        let expected = public_key(&preset);
        let mut dh = CheckedX25519::new(Some(preset));
        dh.generate(&mut OsRandom).unwrap();
        assert_eq!(dh.pubkey(), expected);
        dh.generate(&mut OsRandom).unwrap();
        assert_ne!(dh.pubkey(), expected);
    }

    #[test]
    fn static_key_discards_preset() {
        let mut dh = CheckedX25519::new(Some(Zeroizing::new([7_u8; KEY_LEN])));
        dh.set(&[9_u8; KEY_LEN]);
        assert_eq!(dh.pubkey(), public_key(&Zeroizing::new([9_u8; KEY_LEN])));
        assert!(dh.preset.is_none());
    }

    #[test]
    fn without_key_dh_is_refused() {
        let dh = CheckedX25519::new(None);
        let mut out = [0_u8; 56];
        assert_eq!(
            dh.dh(&ORDER_8, &mut out),
            Err(Error::State(StateProblem::MissingKeyMaterial))
        );
    }
}
