//! Ed25519 public keys as JWK (RFC 7517, RFC 8037 "OKP"), sets of them (JWKS)
//! and their RFC 7638 thumbprint.
//!
//! Two keys travel as JWK (spec chapter 24):
//! - the host's **login key** in host.pair, `auth_public_jwk` (3.2 "Details of
//!   the pairing", bullet "Keys"): exactly `kty` (`OKP`), `crv` (`Ed25519`) and
//!   `x` (32 bytes, a usable Ed25519 point, otherwise `invalid_key`); any other
//!   member, above all the private `d`, is `unknown_member` under
//!   `/auth_public_jwk/<name>`. The server stores the JWK as [`Ed25519PublicJwk::to_json`]
//!   builds it (`hosts.auth_public_jwk`) and its thumbprint as `hosts.auth_jkt`,
//!   which is also the `kid` of the host-auth proof (3.5 identify step 4);
//! - the server's **keys of purpose terminal** (next, active, retiring) as a
//!   [`Jwks`] in hello (`d.jwks`, 3.5) and in heartbeat_ack whenever the set
//!   changed (5.3 "JWKS refresh"). Each key has exactly `kty`, `crv`, `x` and
//!   `kid`; the server uses the RFC 7638 thumbprint of a key as its `kid`
//!   ([`JwksKey::from_jwk`]), so one key has one name on every node.
//!
//! Decoding builds on [`crate::json`]: errors name the place as a JSON pointer,
//! never a value. [`JwkError::kind`] tells the server which problem code a
//! refusal of `auth_public_jwk` maps to.
//!
//! A key is usable when `x` is strict base64url of exactly 32 bytes, decodes to
//! a point of the curve, in its canonical encoding (so one key has one `x` and
//! one thumbprint), and not of small order (such a key "verifies" forged
//! signatures; `verify_strict` refuses it anyway, so it could never log in).

use std::fmt;

use ed25519_dalek::VerifyingKey;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::b64;
use crate::json::{self, JsonError, JsonType, Member, Object};

/// The only `kty` we accept (RFC 8037 section 2).
pub const KTY_OKP: &str = "OKP";
/// The only `crv` we accept (RFC 8037 section 2).
pub const CRV_ED25519: &str = "Ed25519";
/// Longest JWK document [`Ed25519PublicJwk::from_json`] reads (the canonical
/// form is 85 bytes).
pub const JWK_MAX_BYTES: usize = 1024;
/// Most keys a [`Jwks`] may hold: the server publishes at most next, active and
/// retiring; the bound leaves room for overlapping rotations and keeps a
/// hostile set small.
pub const JWKS_MAX_KEYS: usize = 16;
/// Longest JWKS document [`Jwks::from_json`] reads.
pub const JWKS_MAX_BYTES: usize = 16 * 1024;

/// Members of a public JWK (also their RFC 7638 order: crv, kty, x).
const JWK_MEMBERS: [&str; 3] = ["crv", "kty", "x"];
/// Members of one key of a JWKS.
const JWKS_KEY_MEMBERS: [&str; 4] = ["crv", "kid", "kty", "x"];
/// Members of a JWKS (RFC 7517 section 5).
const JWKS_MEMBERS: [&str; 1] = ["keys"];

/// Why a JWK or JWKS was refused. Every variant names the place as a JSON
/// pointer relative to the base the caller gave (e.g. `/auth_public_jwk/d`),
/// never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwkError {
    /// The document is not strict JSON: too large, not UTF-8, a syntax error
    /// or trailing data, a duplicate member, a `null`. (Unknown and missing
    /// members and wrong types have their own variants below.)
    #[error("JWK document: {0}")]
    Json(JsonError),
    /// A member the JWK does not have, above all the private `d` (3.2:
    /// `unknown_member`).
    #[error("unknown member at {pointer:?}")]
    UnknownMember {
        /// Where; its last token names the member.
        pointer: String,
    },
    /// A required member (`kty`, `crv`, `x`, `kid`, `keys`) is absent.
    #[error("missing member at {pointer:?}")]
    MissingMember {
        /// Where.
        pointer: String,
    },
    /// A member of the wrong JSON type (or the JWK itself is not an object).
    #[error("value at {pointer:?} must be {expected}")]
    WrongType {
        /// Where.
        pointer: String,
        /// The type it must have.
        expected: JsonType,
    },
    /// `kty` is a string other than `OKP`.
    #[error("kty at {pointer:?} is not OKP")]
    WrongKty {
        /// Where.
        pointer: String,
    },
    /// `crv` is a string other than `Ed25519`.
    #[error("crv at {pointer:?} is not Ed25519")]
    WrongCrv {
        /// Where.
        pointer: String,
    },
    /// `x` is not strict base64url of 32 bytes, or not a usable Ed25519 point
    /// (not on the curve, not canonical, small order) (3.2: `invalid_key`).
    #[error("x at {pointer:?} is not an Ed25519 public key")]
    InvalidKey {
        /// Where.
        pointer: String,
    },
    /// A JWKS with more than [`JWKS_MAX_KEYS`] keys.
    #[error("more than {max} keys at {pointer:?}")]
    TooManyKeys {
        /// The `keys` array.
        pointer: String,
        /// The bound.
        max: usize,
    },
    /// A `kid` that is the empty string.
    #[error("empty kid at {pointer:?}")]
    EmptyKid {
        /// Where.
        pointer: String,
    },
    /// A `kid` that an earlier key of the same JWKS already has.
    #[error("duplicate kid at {pointer:?}")]
    DuplicateKid {
        /// The `kid` of the later key.
        pointer: String,
    },
}

/// What a [`JwkError`] means for a problem response (3.2 host.pair,
/// `400 validation_failed` with `errors[] {pointer, code}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwkErrorKind {
    /// `errors[].code = unknown_member`.
    UnknownMember,
    /// `errors[].code = invalid_key`: `x` unusable, and also a `kty` or `crv`
    /// other than OKP / Ed25519 (the key is not an Ed25519 key).
    InvalidKey,
    /// A required member is absent (the server's generic code for that).
    MissingMember,
    /// A member of the wrong JSON type (the server's generic code for that).
    WrongType,
    /// The document or the set as a whole: not strict JSON, too many keys,
    /// empty or duplicate `kid`. Inside a request body the server has already
    /// parsed the document, so this comes only from JWKS checks or
    /// [`Ed25519PublicJwk::from_json`].
    Invalid,
}

impl JwkError {
    /// The pointer of the error (absent only for document-level JSON errors).
    pub fn pointer(&self) -> Option<&str> {
        match self {
            JwkError::Json(e) => e.pointer(),
            JwkError::UnknownMember { pointer }
            | JwkError::MissingMember { pointer }
            | JwkError::WrongType { pointer, .. }
            | JwkError::WrongKty { pointer }
            | JwkError::WrongCrv { pointer }
            | JwkError::InvalidKey { pointer }
            | JwkError::TooManyKeys { pointer, .. }
            | JwkError::EmptyKid { pointer }
            | JwkError::DuplicateKid { pointer } => Some(pointer),
        }
    }

    /// The kind of refusal, for the server's problem code.
    pub fn kind(&self) -> JwkErrorKind {
        match self {
            JwkError::UnknownMember { .. } => JwkErrorKind::UnknownMember,
            JwkError::WrongKty { .. } | JwkError::WrongCrv { .. } | JwkError::InvalidKey { .. } => {
                JwkErrorKind::InvalidKey
            }
            JwkError::MissingMember { .. } => JwkErrorKind::MissingMember,
            JwkError::WrongType { .. } => JwkErrorKind::WrongType,
            JwkError::Json(_)
            | JwkError::TooManyKeys { .. }
            | JwkError::EmptyKid { .. }
            | JwkError::DuplicateKid { .. } => JwkErrorKind::Invalid,
        }
    }
}

impl From<JsonError> for JwkError {
    /// Lifts the schema errors into their own variants, so that a caller
    /// matches `JwkError::UnknownMember` and never `Json(UnknownMember)`.
    fn from(error: JsonError) -> Self {
        match error {
            JsonError::UnknownMember { pointer } => JwkError::UnknownMember { pointer },
            JsonError::MissingMember { pointer } => JwkError::MissingMember { pointer },
            JsonError::WrongType { pointer, expected } => JwkError::WrongType { pointer, expected },
            other => JwkError::Json(other),
        }
    }
}

/// An Ed25519 public key in its JWK form `{"crv":"Ed25519","kty":"OKP","x":...}`,
/// checked to be usable (module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ed25519PublicJwk {
    key: VerifyingKey,
}

impl fmt::Debug for Ed25519PublicJwk {
    /// A public key is no secret; `x` is what an operator compares.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ed25519PublicJwk")
            .field("x", &b64::encode(self.key.as_bytes()))
            .finish()
    }
}

impl Ed25519PublicJwk {
    /// Decodes a JWK found at `member` (e.g. `/auth_public_jwk` of the host.pair
    /// body): exactly `kty`, `crv` and `x`.
    pub fn from_member(member: Member<'_>) -> Result<Self, JwkError> {
        let object = member.into_object(&JWK_MEMBERS)?;
        Self::from_object(&object)
    }

    /// Decodes a JWK document (pointers relative to its root).
    pub fn from_json(bytes: &[u8]) -> Result<Self, JwkError> {
        let value = json::parse(bytes, JWK_MAX_BYTES)?;
        Self::from_member(Member::new(&value, String::new()))
    }

    /// A JWK from the raw 32 bytes of the key (the decoded `x`), with the same
    /// checks; the error points at `/x`.
    pub fn from_raw(raw: &[u8; 32]) -> Result<Self, JwkError> {
        usable_key(raw)
            .map(|key| Ed25519PublicJwk { key })
            .ok_or_else(|| JwkError::InvalidKey {
                pointer: "/x".to_owned(),
            })
    }

    /// Wraps a key derived from a private key (crate-internal: such a key is
    /// canonical and never of small order, because the clamped scalar is no
    /// multiple of the group order).
    pub(crate) fn from_derived(key: VerifyingKey) -> Self {
        Ed25519PublicJwk { key }
    }

    /// Reads `kty`, `crv` and `x` from an object whose members were checked.
    fn from_object(object: &Object<'_>) -> Result<Self, JwkError> {
        if object.str("kty")? != KTY_OKP {
            return Err(JwkError::WrongKty {
                pointer: object.member_pointer("kty"),
            });
        }
        if object.str("crv")? != CRV_ED25519 {
            return Err(JwkError::WrongCrv {
                pointer: object.member_pointer("crv"),
            });
        }
        let x = object.member("x")?;
        let key = b64::decode_array::<32>(x.as_str()?)
            .ok()
            .and_then(|raw| usable_key(&raw))
            .ok_or_else(|| JwkError::InvalidKey {
                pointer: x.pointer().to_owned(),
            })?;
        Ok(Ed25519PublicJwk { key })
    }

    /// The raw 32 bytes of the key (`auth_public_key_raw` of the fingerprint, 4.3).
    pub fn raw(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// The key for signature checks.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The JWK as the server stores it: exactly `crv`, `kty`, `x`, in RFC 7638
    /// order, without whitespace. This text is also the thumbprint's input.
    pub fn to_json(&self) -> String {
        // x is base64url, so it needs no escaping.
        format!(
            r#"{{"crv":"{CRV_ED25519}","kty":"{KTY_OKP}","x":"{}"}}"#,
            b64::encode(self.key.as_bytes())
        )
    }

    /// The JWK as a JSON value (for embedding in a larger document).
    pub fn to_value(&self) -> Value {
        let mut members = Map::new();
        self.insert_members(&mut members);
        Value::Object(members)
    }

    fn insert_members(&self, members: &mut Map<String, Value>) {
        members.insert("crv".to_owned(), Value::from(CRV_ED25519));
        members.insert("kty".to_owned(), Value::from(KTY_OKP));
        members.insert(
            "x".to_owned(),
            Value::from(b64::encode(self.key.as_bytes())),
        );
    }

    /// SHA-256 of the RFC 7638 input: the required members in lexicographic
    /// order without whitespace, `{"crv":"Ed25519","kty":"OKP","x":"..."}`.
    pub fn thumbprint_sha256(&self) -> [u8; 32] {
        Sha256::digest(self.to_json().as_bytes()).into()
    }

    /// The RFC 7638 thumbprint in base64url: `hosts.auth_jkt`, and the `kid` of
    /// this key wherever it signs.
    pub fn thumbprint(&self) -> String {
        b64::encode(&self.thumbprint_sha256())
    }
}

/// The key if `raw` is a canonical, not small-order Ed25519 point.
fn usable_key(raw: &[u8; 32]) -> Option<VerifyingKey> {
    let key = VerifyingKey::from_bytes(raw).ok()?;
    // Decompression accepts y >= p and the sign bit of x = 0; the recompressed
    // form differs from such an encoding.
    if key.is_weak() || key.to_edwards().compress().as_bytes() != raw {
        return None;
    }
    Some(key)
}

/// One key of a [`Jwks`]: a public JWK with its non-empty `kid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwksKey {
    kid: String,
    jwk: Ed25519PublicJwk,
}

impl JwksKey {
    /// A key named `kid` (the server names its keys by thumbprint,
    /// [`JwksKey::from_jwk`]). The error for an empty `kid` points at `/kid`.
    pub fn new(kid: String, jwk: Ed25519PublicJwk) -> Result<Self, JwkError> {
        if kid.is_empty() {
            return Err(JwkError::EmptyKid {
                pointer: "/kid".to_owned(),
            });
        }
        Ok(JwksKey { kid, jwk })
    }

    /// A key named by its RFC 7638 thumbprint, as the server names its keys of
    /// purpose terminal.
    pub fn from_jwk(jwk: Ed25519PublicJwk) -> Self {
        JwksKey {
            kid: jwk.thumbprint(),
            jwk,
        }
    }

    /// Decodes one key found at `member`: exactly `kty`, `crv`, `x` and `kid`.
    pub fn from_member(member: Member<'_>) -> Result<Self, JwkError> {
        let object = member.into_object(&JWKS_KEY_MEMBERS)?;
        let kid = object.str("kid")?;
        if kid.is_empty() {
            return Err(JwkError::EmptyKid {
                pointer: object.member_pointer("kid"),
            });
        }
        let jwk = Ed25519PublicJwk::from_object(&object)?;
        Ok(JwksKey {
            kid: kid.to_owned(),
            jwk,
        })
    }

    /// The key ID.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The key.
    pub fn jwk(&self) -> &Ed25519PublicJwk {
        &self.jwk
    }

    /// The key as a JSON value: `crv`, `kid`, `kty`, `x`.
    pub fn to_value(&self) -> Value {
        let mut members = Map::new();
        self.jwk.insert_members(&mut members);
        members.insert("kid".to_owned(), Value::from(self.kid.as_str()));
        Value::Object(members)
    }
}

/// A JWK Set `{"keys":[...]}` (RFC 7517 section 5) of Ed25519 keys with
/// distinct `kid`s, at most [`JWKS_MAX_KEYS`] of them. An empty set is valid:
/// it verifies nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Jwks {
    keys: Vec<JwksKey>,
}

impl Jwks {
    /// A set of `keys`, in their order. Errors point into `/keys`.
    pub fn new(keys: Vec<JwksKey>) -> Result<Self, JwkError> {
        check_count(keys.len(), "/keys")?;
        for (i, key) in keys.iter().enumerate() {
            if keys[..i].iter().any(|earlier| earlier.kid == key.kid) {
                return Err(JwkError::DuplicateKid {
                    pointer: format!("/keys/{i}/kid"),
                });
            }
        }
        Ok(Jwks { keys })
    }

    /// Decodes a JWKS found at `member` (e.g. `/d/jwks` of hello).
    pub fn from_member(member: Member<'_>) -> Result<Self, JwkError> {
        let object = member.into_object(&JWKS_MEMBERS)?;
        let array = object.array("keys")?;
        check_count(array.len(), array.pointer())?;
        let mut keys: Vec<JwksKey> = Vec::with_capacity(array.len());
        for item in array.iter() {
            let kid_pointer = json::pointer_join(item.pointer(), "kid");
            let key = JwksKey::from_member(item)?;
            if keys.iter().any(|earlier| earlier.kid == key.kid) {
                return Err(JwkError::DuplicateKid {
                    pointer: kid_pointer,
                });
            }
            keys.push(key);
        }
        Ok(Jwks { keys })
    }

    /// Decodes a JWKS document (pointers relative to its root).
    pub fn from_json(bytes: &[u8]) -> Result<Self, JwkError> {
        let value = json::parse(bytes, JWKS_MAX_BYTES)?;
        Self::from_member(Member::new(&value, String::new()))
    }

    /// The key named `kid`, if the set has it.
    pub fn get(&self, kid: &str) -> Option<&Ed25519PublicJwk> {
        self.keys.iter().find(|k| k.kid == kid).map(|k| &k.jwk)
    }

    /// The keys in their order.
    pub fn keys(&self) -> &[JwksKey] {
        &self.keys
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set has no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The set as a JSON value `{"keys":[...]}`.
    pub fn to_value(&self) -> Value {
        let keys = self.keys.iter().map(JwksKey::to_value).collect();
        let mut members = Map::new();
        members.insert("keys".to_owned(), Value::Array(keys));
        Value::Object(members)
    }
}

fn check_count(len: usize, pointer: &str) -> Result<(), JwkError> {
    if len > JWKS_MAX_KEYS {
        return Err(JwkError::TooManyKeys {
            pointer: pointer.to_owned(),
            max: JWKS_MAX_KEYS,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    /// RFC 8037 appendix A.1 (private `d`) and A.2 (public `x`); A.3 gives the
    /// thumbprint of that key.
    const RFC8037_D: &str = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A";
    const RFC8037_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
    const RFC8037_THUMBPRINT: &str = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k";

    fn jwk_text(kty: &str, crv: &str, x: &str) -> String {
        format!(r#"{{"kty":"{kty}","crv":"{crv}","x":"{x}"}}"#)
    }

    fn parse(text: &str) -> Result<Ed25519PublicJwk, JwkError> {
        Ed25519PublicJwk::from_json(text.as_bytes())
    }

    /// Decodes `auth_public_jwk` inside a host.pair-like body, so pointers
    /// carry the base the server uses.
    fn parse_in_pair_body(jwk: &str) -> Result<Ed25519PublicJwk, JwkError> {
        let body = format!(r#"{{"code":"c","auth_public_jwk":{jwk}}}"#);
        let value = json::parse(body.as_bytes(), 4096).unwrap();
        let object = Object::root(&value, &["code", "auth_public_jwk"]).unwrap();
        Ed25519PublicJwk::from_member(object.member("auth_public_jwk").unwrap())
    }

    fn key(n: u8) -> Ed25519PublicJwk {
        Ed25519PublicJwk::from_raw(&SigningKey::from_bytes(&[n; 32]).verifying_key().to_bytes())
            .unwrap()
    }

    /// Little-endian encoding of p + small, with the x sign bit `sign`.
    fn non_canonical(small: u8, sign: bool) -> [u8; 32] {
        // p = 2^255 - 19, so p + small = 2^255 - (19 - small).
        let mut raw = [0xff; 32];
        raw[0] = 0xed + small;
        raw[31] = if sign { 0xff } else { 0x7f };
        raw
    }

    #[test]
    fn rfc8037_thumbprint_is_computed() {
        let jwk = parse(&jwk_text("OKP", "Ed25519", RFC8037_X)).unwrap();
        assert_eq!(
            jwk.to_json(),
            format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{RFC8037_X}"}}"#)
        );
        assert_eq!(jwk.thumbprint(), RFC8037_THUMBPRINT);
        assert_eq!(b64::encode(&jwk.thumbprint_sha256()), RFC8037_THUMBPRINT);
        // A different key gives a different thumbprint.
        assert_ne!(key(1).thumbprint(), RFC8037_THUMBPRINT);
    }

    #[test]
    fn rfc8037_private_key_gives_its_public_key() {
        let seed = b64::decode_array::<32>(RFC8037_D).unwrap();
        let derived = SigningKey::from_bytes(&seed).verifying_key().to_bytes();
        assert_eq!(b64::encode(&derived), RFC8037_X);
        let jwk = Ed25519PublicJwk::from_raw(&derived).unwrap();
        assert_eq!(jwk.raw(), derived);
        assert_eq!(jwk.verifying_key().to_bytes(), derived);
    }

    #[test]
    fn round_trips() {
        let jwk = key(3);
        assert_eq!(parse(&jwk.to_json()).unwrap(), jwk);
        let from_value = serde_json::to_vec(&jwk.to_value()).unwrap();
        assert_eq!(Ed25519PublicJwk::from_json(&from_value).unwrap(), jwk);
        // Member order in the document does not matter.
        let x = b64::encode(&jwk.raw());
        assert_eq!(
            parse(&format!(r#"{{"x":"{x}","crv":"Ed25519","kty":"OKP"}}"#)).unwrap(),
            jwk
        );
        assert!(format!("{jwk:?}").contains(&x));
    }

    #[test]
    fn unknown_member_is_named_above_all_d() {
        let x = RFC8037_X;
        let with_d = format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{x}","d":"{RFC8037_D}"}}"#);
        let err = parse_in_pair_body(&with_d).unwrap_err();
        assert_eq!(
            err,
            JwkError::UnknownMember {
                pointer: "/auth_public_jwk/d".into()
            }
        );
        assert_eq!(err.kind(), JwkErrorKind::UnknownMember);
        assert_eq!(err.pointer(), Some("/auth_public_jwk/d"));
        // The private key never reaches the error text.
        assert!(!err.to_string().contains(RFC8037_D));
        assert!(!format!("{err:?}").contains(RFC8037_D));
        for extra in ["alg", "kid", "use", "y", "key_ops"] {
            let text = format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{x}","{extra}":"v"}}"#);
            assert_eq!(
                parse_in_pair_body(&text),
                Err(JwkError::UnknownMember {
                    pointer: format!("/auth_public_jwk/{extra}")
                })
            );
        }
        // Even with a wrong kty, the unknown member is what is reported.
        let ec = r#"{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}"#;
        assert_eq!(
            parse(ec),
            Err(JwkError::UnknownMember {
                pointer: "/y".into()
            })
        );
    }

    #[test]
    fn wrong_kty() {
        for kty in ["EC", "okp", "RSA", ""] {
            let err = parse_in_pair_body(&jwk_text(kty, "Ed25519", RFC8037_X)).unwrap_err();
            assert_eq!(
                err,
                JwkError::WrongKty {
                    pointer: "/auth_public_jwk/kty".into()
                },
                "{kty:?}"
            );
            assert_eq!(err.kind(), JwkErrorKind::InvalidKey);
        }
    }

    #[test]
    fn wrong_crv() {
        for crv in ["X25519", "ed25519", "Ed448", "P-256"] {
            let err = parse_in_pair_body(&jwk_text("OKP", crv, RFC8037_X)).unwrap_err();
            assert_eq!(
                err,
                JwkError::WrongCrv {
                    pointer: "/auth_public_jwk/crv".into()
                },
                "{crv:?}"
            );
            assert_eq!(err.kind(), JwkErrorKind::InvalidKey);
        }
    }

    #[test]
    fn invalid_key() {
        let raw = b64::decode(RFC8037_X).unwrap();
        let mut bad: Vec<String> = vec![
            b64::encode(&raw[..31]),
            b64::encode(&[raw.as_slice(), &[0]].concat()),
            String::new(),
            format!("{RFC8037_X}="),
            RFC8037_X.replace('_', "/"),
            format!(" {RFC8037_X}"),
            // The identity point (y = 1): small order.
            b64::encode(&[&[1u8][..], &[0u8; 31][..]].concat()),
        ];
        // A y that is no point of the curve.
        let off_curve = (2u8..=255)
            .map(|y| [&[y][..], &[0u8; 31][..]].concat())
            .find(|raw| VerifyingKey::from_bytes(raw.as_slice().try_into().unwrap()).is_err())
            .unwrap();
        bad.push(b64::encode(&off_curve));
        // A non-canonical encoding (y >= p) of a point of large order.
        let mut found_non_canonical = false;
        for small in 0..19u8 {
            for sign in [false, true] {
                let raw = non_canonical(small, sign);
                if let Ok(key) = VerifyingKey::from_bytes(&raw) {
                    if !key.is_weak() {
                        found_non_canonical = true;
                        bad.push(b64::encode(&raw));
                    }
                }
            }
        }
        assert!(found_non_canonical);
        for x in &bad {
            let err = parse_in_pair_body(&jwk_text("OKP", "Ed25519", x)).unwrap_err();
            assert_eq!(
                err,
                JwkError::InvalidKey {
                    pointer: "/auth_public_jwk/x".into()
                },
                "{x:?}"
            );
            assert_eq!(err.kind(), JwkErrorKind::InvalidKey);
        }
        assert_eq!(
            Ed25519PublicJwk::from_raw(&[0u8; 32]),
            Err(JwkError::InvalidKey {
                pointer: "/x".into()
            })
        );
    }

    #[test]
    fn missing_member() {
        let x = RFC8037_X;
        let cases = [
            (format!(r#"{{"crv":"Ed25519","x":"{x}"}}"#), "kty"),
            (format!(r#"{{"kty":"OKP","x":"{x}"}}"#), "crv"),
            (r#"{"kty":"OKP","crv":"Ed25519"}"#.to_owned(), "x"),
        ];
        for (text, name) in cases {
            let err = parse_in_pair_body(&text).unwrap_err();
            assert_eq!(
                err,
                JwkError::MissingMember {
                    pointer: format!("/auth_public_jwk/{name}")
                }
            );
            assert_eq!(err.kind(), JwkErrorKind::MissingMember);
        }
    }

    #[test]
    fn wrong_type() {
        let x = RFC8037_X;
        let cases = [
            (
                format!(r#"{{"kty":1,"crv":"Ed25519","x":"{x}"}}"#),
                "/auth_public_jwk/kty",
            ),
            (
                format!(r#"{{"kty":"OKP","crv":["Ed25519"],"x":"{x}"}}"#),
                "/auth_public_jwk/crv",
            ),
            (
                r#"{"kty":"OKP","crv":"Ed25519","x":true}"#.to_owned(),
                "/auth_public_jwk/x",
            ),
        ];
        for (text, pointer) in cases {
            let err = parse_in_pair_body(&text).unwrap_err();
            assert_eq!(
                err,
                JwkError::WrongType {
                    pointer: pointer.into(),
                    expected: JsonType::String
                }
            );
            assert_eq!(err.kind(), JwkErrorKind::WrongType);
        }
        assert_eq!(
            parse_in_pair_body(&format!(r#""{x}""#)),
            Err(JwkError::WrongType {
                pointer: "/auth_public_jwk".into(),
                expected: JsonType::Object
            })
        );
    }

    #[test]
    fn document_not_strict_json() {
        let x = RFC8037_X;
        let dup = format!(r#"{{"kty":"OKP","kty":"OKP","crv":"Ed25519","x":"{x}"}}"#);
        let cases: [(String, JsonError); 4] = [
            (
                dup,
                JsonError::DuplicateMember {
                    pointer: "/kty".into(),
                },
            ),
            (
                format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{x}","d":null}}"#),
                JsonError::NullMember {
                    pointer: "/d".into(),
                },
            ),
            (
                format!("{}x", jwk_text("OKP", "Ed25519", x)),
                JsonError::Syntax,
            ),
            (
                " ".repeat(JWK_MAX_BYTES + 1),
                JsonError::TooLarge {
                    len: JWK_MAX_BYTES + 1,
                    max: JWK_MAX_BYTES,
                },
            ),
        ];
        for (text, expected) in cases {
            let err = parse(&text).unwrap_err();
            assert_eq!(err, JwkError::Json(expected));
            assert_eq!(err.kind(), JwkErrorKind::Invalid);
        }
        assert_eq!(parse("").unwrap_err().pointer(), None);
    }

    fn jwks_text(keys: &[String]) -> String {
        format!(r#"{{"keys":[{}]}}"#, keys.join(","))
    }

    fn jwks_key_text(kid: &str, jwk: &Ed25519PublicJwk) -> String {
        let x = b64::encode(&jwk.raw());
        format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{x}","kid":"{kid}"}}"#)
    }

    /// Decodes `jwks` inside a hello-like message, so pointers are `/d/jwks/...`.
    fn parse_jwks_in_hello(jwks: &str) -> Result<Jwks, JwkError> {
        let text = format!(r#"{{"op":"hello","d":{{"jwks":{jwks}}}}}"#);
        let value = json::parse(text.as_bytes(), 1 << 16).unwrap();
        let object = Object::root(&value, &["op", "d"]).unwrap();
        let d = object.object("d", &["jwks"]).unwrap();
        Jwks::from_member(d.member("jwks").unwrap())
    }

    #[test]
    fn jwks_round_trip_and_lookup() {
        let (a, b) = (key(1), key(2));
        let jwks = Jwks::new(vec![
            JwksKey::from_jwk(a),
            JwksKey::new("b".into(), b).unwrap(),
        ])
        .unwrap();
        assert_eq!(jwks.len(), 2);
        assert!(!jwks.is_empty());
        assert_eq!(jwks.keys()[0].kid(), a.thumbprint());
        assert_eq!(jwks.get(&a.thumbprint()), Some(&a));
        assert_eq!(jwks.get("b"), Some(&b));
        assert_eq!(jwks.get("c"), None);
        assert_eq!(jwks.keys()[1].jwk(), &b);

        let encoded = serde_json::to_string(&jwks.to_value()).unwrap();
        assert_eq!(Jwks::from_json(encoded.as_bytes()).unwrap(), jwks);
        assert_eq!(parse_jwks_in_hello(&encoded).unwrap(), jwks);

        let empty = Jwks::from_json(br#"{"keys":[]}"#).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty, Jwks::default());
    }

    #[test]
    fn jwks_key_unknown_member() {
        let a = key(1);
        let x = b64::encode(&a.raw());
        for extra in [r#""alg":"EdDSA""#, r#""use":"sig""#, r#""d":"AA""#] {
            let text = format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{x}","kid":"a",{extra}}}"#);
            let err = parse_jwks_in_hello(&jwks_text(&[text])).unwrap_err();
            assert_eq!(err.kind(), JwkErrorKind::UnknownMember);
            assert!(
                err.pointer().unwrap().starts_with("/d/jwks/keys/0/"),
                "{err:?}"
            );
        }
        assert_eq!(
            parse_jwks_in_hello(r#"{"keys":[],"x":1}"#),
            Err(JwkError::UnknownMember {
                pointer: "/d/jwks/x".into()
            })
        );
    }

    #[test]
    fn jwks_key_checks_like_a_jwk() {
        let a = key(1);
        let good = jwks_key_text("a", &a);
        let bad_x = r#"{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"b"}"#.to_owned();
        assert_eq!(
            parse_jwks_in_hello(&jwks_text(&[good.clone(), bad_x])),
            Err(JwkError::InvalidKey {
                pointer: "/d/jwks/keys/1/x".into()
            })
        );
        let no_kid = format!(
            r#"{{"kty":"OKP","crv":"Ed25519","x":"{}"}}"#,
            b64::encode(&a.raw())
        );
        assert_eq!(
            parse_jwks_in_hello(&jwks_text(&[no_kid])),
            Err(JwkError::MissingMember {
                pointer: "/d/jwks/keys/0/kid".into()
            })
        );
        let kid_number = good.replace(r#""kid":"a""#, r#""kid":7"#);
        assert_eq!(
            parse_jwks_in_hello(&jwks_text(&[kid_number])),
            Err(JwkError::WrongType {
                pointer: "/d/jwks/keys/0/kid".into(),
                expected: JsonType::String
            })
        );
        assert_eq!(
            parse_jwks_in_hello(&jwks_text(&[good.replace("OKP", "EC")])),
            Err(JwkError::WrongKty {
                pointer: "/d/jwks/keys/0/kty".into()
            })
        );
        assert_eq!(
            parse_jwks_in_hello(r#"{"keys":{}}"#),
            Err(JwkError::WrongType {
                pointer: "/d/jwks/keys".into(),
                expected: JsonType::Array
            })
        );
        assert_eq!(
            parse_jwks_in_hello("{}"),
            Err(JwkError::MissingMember {
                pointer: "/d/jwks/keys".into()
            })
        );
    }

    #[test]
    fn jwks_empty_kid() {
        let text = jwks_text(&[jwks_key_text("", &key(1))]);
        let err = parse_jwks_in_hello(&text).unwrap_err();
        assert_eq!(
            err,
            JwkError::EmptyKid {
                pointer: "/d/jwks/keys/0/kid".into()
            }
        );
        assert_eq!(err.kind(), JwkErrorKind::Invalid);
        assert_eq!(
            JwksKey::new(String::new(), key(1)),
            Err(JwkError::EmptyKid {
                pointer: "/kid".into()
            })
        );
    }

    #[test]
    fn jwks_duplicate_kid() {
        let text = jwks_text(&[
            jwks_key_text("a", &key(1)),
            jwks_key_text("b", &key(2)),
            jwks_key_text("a", &key(3)),
        ]);
        let err = parse_jwks_in_hello(&text).unwrap_err();
        assert_eq!(
            err,
            JwkError::DuplicateKid {
                pointer: "/d/jwks/keys/2/kid".into()
            }
        );
        assert_eq!(err.kind(), JwkErrorKind::Invalid);
        assert_eq!(
            Jwks::new(vec![JwksKey::from_jwk(key(1)), JwksKey::from_jwk(key(1))]),
            Err(JwkError::DuplicateKid {
                pointer: "/keys/1/kid".into()
            })
        );
    }

    #[test]
    fn jwks_too_many_keys() {
        let keys: Vec<String> = (0..=JWKS_MAX_KEYS)
            .map(|i| jwks_key_text(&format!("k{i}"), &key(1)))
            .collect();
        let err = parse_jwks_in_hello(&jwks_text(&keys)).unwrap_err();
        assert_eq!(
            err,
            JwkError::TooManyKeys {
                pointer: "/d/jwks/keys".into(),
                max: JWKS_MAX_KEYS
            }
        );
        assert_eq!(err.kind(), JwkErrorKind::Invalid);
        assert_eq!(
            parse_jwks_in_hello(&jwks_text(&keys[..JWKS_MAX_KEYS]))
                .unwrap()
                .len(),
            JWKS_MAX_KEYS
        );
        let many: Vec<JwksKey> = (0..=JWKS_MAX_KEYS)
            .map(|i| JwksKey::new(format!("k{i}"), key(1)).unwrap())
            .collect();
        assert_eq!(
            Jwks::new(many),
            Err(JwkError::TooManyKeys {
                pointer: "/keys".into(),
                max: JWKS_MAX_KEYS
            })
        );
    }
}
