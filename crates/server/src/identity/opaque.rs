//! Opaque secrets (DESIGN 3.1): what the server hands out exactly once and
//! stores only as HMAC-SHA-256 with the pepper.
//!
//! Format: a recognisable prefix and 32 random bytes (256 bits) in base64url
//! without padding, 43 characters — `bothy_at_...` (access token of a login
//! session), `bothy_tk_...` (API token of an agent or app), `bothy_ec_...`
//! (enrollment code). The prefix lets a secret scanner find a leaked value and
//! lets the server tell the kinds apart without a database read; a value of the
//! wrong form is refused before any lookup.
//!
//! The stored form is base64url of `HMAC(pepper, purpose ‖ 0 ‖ value)`. A
//! presented value is checked by computing that and looking the row up by it: the
//! database compares HMAC outputs, which an attacker can neither choose nor learn
//! from timing, so no secret is ever compared byte by byte.

use std::fmt;

use zeroize::Zeroizing;

use super::IdentityError;
use crate::pepper::{Pepper, PepperPurpose};

/// Random bytes in every opaque secret.
pub const SECRET_BYTES: usize = 32;

/// Characters of the base64url part.
const SECRET_CHARS: usize = 43;

/// The kinds of opaque secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    /// The access token of a login session.
    AccessToken,
    /// The token of an agent or app.
    ApiToken,
    /// A one-time enrollment code.
    EnrollmentCode,
    /// The CSRF token of a console login session (`X-CSRF-Token`).
    CsrfToken,
}

impl SecretKind {
    /// The prefix of the kind.
    pub const fn prefix(self) -> &'static str {
        match self {
            SecretKind::AccessToken => "bothy_at_",
            SecretKind::ApiToken => "bothy_tk_",
            SecretKind::EnrollmentCode => "bothy_ec_",
            SecretKind::CsrfToken => "bothy_csrf_",
        }
    }

    const fn purpose(self) -> PepperPurpose {
        match self {
            SecretKind::AccessToken => PepperPurpose::AccessToken,
            SecretKind::ApiToken => PepperPurpose::ApiToken,
            SecretKind::EnrollmentCode => PepperPurpose::EnrollmentCode,
            SecretKind::CsrfToken => PepperPurpose::CsrfToken,
        }
    }
}

/// A secret value: shown once, wiped on drop, `Debug` redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct OpaqueSecret {
    kind: SecretKind,
    value: Zeroizing<String>,
}

impl fmt::Debug for OpaqueSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpaqueSecret({}***)", self.kind.prefix())
    }
}

impl OpaqueSecret {
    /// A new random secret of `kind`.
    pub fn generate(kind: SecretKind) -> Result<OpaqueSecret, IdentityError> {
        let mut bytes = Zeroizing::new([0u8; SECRET_BYTES]);
        getrandom::fill(bytes.as_mut_slice())
            .map_err(|_| IdentityError::Crypto("the random source failed"))?;
        let mut value = Zeroizing::new(String::with_capacity(kind.prefix().len() + SECRET_CHARS));
        value.push_str(kind.prefix());
        value.push_str(&bothy_proto::b64::encode(bytes.as_slice()));
        Ok(OpaqueSecret { kind, value })
    }

    /// A presented value, if it has exactly the form of `kind`.
    pub fn parse(kind: SecretKind, text: &str) -> Option<OpaqueSecret> {
        let rest = text.strip_prefix(kind.prefix())?;
        if rest.len() != SECRET_CHARS {
            return None;
        }
        bothy_proto::b64::decode_array::<SECRET_BYTES>(rest).ok()?;
        Some(OpaqueSecret {
            kind,
            value: Zeroizing::new(text.to_owned()),
        })
    }

    /// The kind.
    pub fn kind(&self) -> SecretKind {
        self.kind
    }

    /// The value, to hand out once. Never log it.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// The stored form: base64url of the pepper's HMAC.
    pub fn hash(&self, pepper: &Pepper) -> String {
        bothy_proto::b64::encode(&pepper.mac(self.kind.purpose(), self.value.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_values_have_the_form_and_parse_back() {
        let pepper = Pepper::from_bytes([3; 32]);
        for kind in [
            SecretKind::AccessToken,
            SecretKind::ApiToken,
            SecretKind::EnrollmentCode,
        ] {
            let secret = OpaqueSecret::generate(kind).unwrap();
            assert!(secret.expose().starts_with(kind.prefix()));
            assert_eq!(secret.expose().len(), kind.prefix().len() + 43);
            let parsed = OpaqueSecret::parse(kind, secret.expose()).unwrap();
            assert_eq!(parsed.hash(&pepper), secret.hash(&pepper));
            assert!(!format!("{secret:?}").contains(&secret.expose()[9..]));
        }
        let a = OpaqueSecret::generate(SecretKind::AccessToken).unwrap();
        let b = OpaqueSecret::generate(SecretKind::AccessToken).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn malformed_values_are_refused() {
        let good = OpaqueSecret::generate(SecretKind::ApiToken).unwrap();
        let text = good.expose();
        assert!(OpaqueSecret::parse(SecretKind::AccessToken, text).is_none());
        assert!(OpaqueSecret::parse(SecretKind::ApiToken, &text[..text.len() - 1]).is_none());
        assert!(OpaqueSecret::parse(SecretKind::ApiToken, &format!("{text}A")).is_none());
        let padded = format!("{}=", &text[..text.len() - 1]);
        assert!(OpaqueSecret::parse(SecretKind::ApiToken, &padded).is_none());
        assert!(OpaqueSecret::parse(SecretKind::ApiToken, "").is_none());
    }

    #[test]
    fn the_hash_is_the_peppered_hmac_not_the_value() {
        let secret = OpaqueSecret::generate(SecretKind::EnrollmentCode).unwrap();
        let one = secret.hash(&Pepper::from_bytes([1; 32]));
        let two = secret.hash(&Pepper::from_bytes([2; 32]));
        assert_ne!(one, two);
        assert!(!one.contains(&secret.expose()[9..]));
    }
}
