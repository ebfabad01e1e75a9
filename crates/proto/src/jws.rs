//! The compact JWS EdDSA profile (ADR 0067 in spec chapter 24) and its two
//! token types:
//! - `host-auth+jwt` ([`TYP_HOST_AUTH`]): the proof of identify on the control
//!   and data connections, signed with the host's login key; claims exactly
//!   `challenge`, `host_id`, `iat` (3.5 "Control connection", identify step 4);
//! - `terminal-session+jwt` ([`TYP_TERMINAL_SESSION`]): the terminal session
//!   token, signed with a server key of purpose terminal, carried in Noise
//!   message 1 (5.3 "Terminal session token").
//!
//! # The profile (5.3, host check order step 1)
//! - at most [`JWS_MAX_BYTES`] bytes; exactly two dots, no part empty; every
//!   part strict base64url without padding ([`crate::b64`]);
//! - the header is a strict JSON object ([`crate::json`]) with exactly `alg`
//!   (exactly `EdDSA`), `kid` (a non-empty string) and `typ` (a string). None of
//!   `crit`, `jku`, `x5u`, `x5c`, `zip`, `jwk` ([`JwsError::ForbiddenHeaderMember`]),
//!   and no other member either ([`JwsError::UnknownHeaderMember`]): the
//!   chapter names no further member, and one we do not understand could change
//!   the meaning of the token;
//! - the signature is exactly 64 bytes and verifies with `verify_strict`
//!   (canonical `S`, no small-order `R` or key) under the key with that `kid`;
//! - the claims are a strict JSON object with exactly the claims of the token
//!   type, each of its JSON type, no `null`, no trailing data.
//!
//! The steps are separate so that each caller keeps its order: parse
//! ([`CompactJws::parse`], where `kid` and `typ` can be read), verify
//! ([`CompactJws::verify`] or [`CompactJws::verify_with_jwks`]; claims can be
//! read only from the [`VerifiedJws`] this returns), decode the claims, then
//! compare `typ` ([`VerifiedJws::expect_typ`], host step 2).
//! [`decode_terminal_session`] and [`decode_host_auth`] run the usual order in
//! one call.
//!
//! No clock is read here: `exp` against now plus the leeway is the host's step
//! 5; [`TerminalSessionClaims::is_expired`] is the pure comparison.
//!
//! Errors and `Debug` never carry the token, the signature, a claim value or
//! a private key; they name parts, members (as JSON pointers) and lengths.

use std::fmt;

use ed25519_dalek::{Signature, Signer, VerifyingKey};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::b64::{self, B64Error};
use crate::ids::{self, RandomError};
use crate::json::{self, JsonError, Object};
use crate::jwk::{Ed25519PublicJwk, Jwks};

/// The only `alg` of the profile.
pub const ALG_EDDSA: &str = "EdDSA";
/// `typ` of the host-auth proof (3.5 identify step 4).
pub const TYP_HOST_AUTH: &str = "host-auth+jwt";
/// `typ` of the terminal session token (5.3).
pub const TYP_TERMINAL_SESSION: &str = "terminal-session+jwt";
/// Longest token accepted, in bytes (a terminal session token is about 800).
pub const JWS_MAX_BYTES: usize = 8 * 1024;
/// Header members the profile forbids by name (5.3 step 1), in the order they
/// are checked.
pub const FORBIDDEN_HEADER_MEMBERS: [&str; 6] = ["crit", "jku", "x5u", "x5c", "zip", "jwk"];

/// The header members of the profile.
const HEADER_MEMBERS: [&str; 3] = ["alg", "kid", "typ"];
/// The claims of `host-auth+jwt`.
const HOST_AUTH_CLAIMS: [&str; 3] = ["challenge", "host_id", "iat"];
/// The claims of `terminal-session+jwt` (5.3 table; `wdi` optional).
const TERMINAL_SESSION_CLAIMS: [&str; 14] = [
    "iss", "aud", "sub", "sid", "jti", "iat", "exp", "dev", "prf", "cek", "own", "osu", "wdi",
    "att",
];

/// One of the three parts of a compact JWS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwsPart {
    /// The protected header.
    Header,
    /// The payload (the claims).
    Payload,
    /// The signature.
    Signature,
}

impl fmt::Display for JwsPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JwsPart::Header => "header",
            JwsPart::Payload => "payload",
            JwsPart::Signature => "signature",
        })
    }
}

/// Why a token was refused. The host maps every variant to `token_invalid`
/// (5.3 steps 1 and 2); the server maps [`JwsError::UnknownKid`] of a host-auth
/// proof to 4110 and every other variant to 4113 (3.5 identify step 4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwsError {
    /// Longer than [`JWS_MAX_BYTES`].
    #[error("token of {len} bytes is over the limit of {max} bytes")]
    TooLong {
        /// Length of the token.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not exactly two dots.
    #[error("token does not have exactly three parts")]
    WrongPartCount,
    /// A part is empty.
    #[error("token {part} is empty")]
    EmptyPart {
        /// Which part.
        part: JwsPart,
    },
    /// A part is not strict base64url without padding.
    #[error("token {part} is not strict base64url without padding")]
    Base64 {
        /// Which part.
        part: JwsPart,
    },
    /// The signature does not decode to exactly 64 bytes.
    #[error("signature of {len} bytes, expected 64")]
    SignatureLength {
        /// Bytes it decoded to.
        len: usize,
    },
    /// The header is not a strict JSON object, or `alg`, `kid` or `typ` is not
    /// a string (pointers are relative to the header).
    #[error("token header: {0}")]
    HeaderJson(JsonError),
    /// The header has a member the profile forbids.
    #[error("token header has the forbidden member {name:?}")]
    ForbiddenHeaderMember {
        /// The member (one of [`FORBIDDEN_HEADER_MEMBERS`]).
        name: &'static str,
    },
    /// The header has a member other than `alg`, `kid` and `typ`.
    #[error("token header has the unknown member {pointer:?}")]
    UnknownHeaderMember {
        /// Its pointer in the header.
        pointer: String,
    },
    /// The header has no `alg`.
    #[error("token header has no alg")]
    AlgMissing,
    /// `alg` is a string other than exactly `EdDSA` (`none`, `HS256`, `eddsa`, ...).
    #[error("token alg is not EdDSA")]
    AlgNotEdDsa,
    /// The header has no `kid`.
    #[error("token header has no kid")]
    KidMissing,
    /// `kid` is the empty string.
    #[error("token kid is empty")]
    KidEmpty,
    /// The header has no `typ`.
    #[error("token header has no typ")]
    TypMissing,
    /// The `kid` names no key we would accept: not in the JWKS, or not the
    /// thumbprint of the host's login key.
    #[error("token kid names no known key")]
    UnknownKid,
    /// The signature does not verify with the key.
    #[error("token signature does not verify")]
    BadSignature,
    /// `typ` is not the expected token type (host step 2).
    #[error("token typ is not the expected type")]
    TypMismatch,
    /// The claims are not a strict JSON object of the token type: syntax or
    /// trailing data, a duplicate, `null`, unknown or missing claim, or a claim
    /// of the wrong JSON type.
    #[error("token claims: {0}")]
    ClaimsJson(JsonError),
    /// A UUID claim (`aud`, `sub`, `sid`, `jti`, `dev`, `host_id`) that is not
    /// a hyphenated UUID.
    #[error("claim at {pointer:?} is not a UUID")]
    InvalidUuidClaim {
        /// Where.
        pointer: String,
    },
    /// `cek` or `challenge` is not strict base64url of exactly 32 bytes.
    #[error("claim at {pointer:?} is not base64url of 32 bytes")]
    InvalidBytesClaim {
        /// Where.
        pointer: String,
    },
    /// `iat` or `exp` is an integer outside the signed 64-bit range.
    #[error("claim at {pointer:?} is out of range")]
    IntegerOutOfRange {
        /// Where.
        pointer: String,
    },
    /// `att` is a string other than `open` or `attach`.
    #[error("claim att is neither open nor attach")]
    InvalidAtt,
    /// `wdi` is negative or larger than 2^32 - 1.
    #[error("claim wdi is not a working-directory index")]
    InvalidWdi,
}

/// The validated header: `alg` is `EdDSA`, `kid` and `typ` as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwsHeader {
    kid: String,
    typ: String,
}

impl JwsHeader {
    /// The key ID.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The token type as sent; compare with [`JwsHeader::expect_typ`].
    pub fn typ(&self) -> &str {
        &self.typ
    }

    /// `Ok` when `typ` is exactly `expected` (case-sensitive, as the chapter
    /// says "exactly").
    pub fn expect_typ(&self, expected: &str) -> Result<(), JwsError> {
        if self.typ == expected {
            Ok(())
        } else {
            Err(JwsError::TypMismatch)
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, JwsError> {
        let value = json::parse(bytes, JWS_MAX_BYTES).map_err(JwsError::HeaderJson)?;
        if let Some(members) = value.as_object() {
            if let Some(name) = FORBIDDEN_HEADER_MEMBERS
                .iter()
                .find(|name| members.contains_key(**name))
            {
                return Err(JwsError::ForbiddenHeaderMember { name });
            }
        }
        let header = Object::root(&value, &HEADER_MEMBERS).map_err(|e| match e {
            JsonError::UnknownMember { pointer } => JwsError::UnknownHeaderMember { pointer },
            other => JwsError::HeaderJson(other),
        })?;
        let alg = header
            .opt_str("alg")
            .map_err(JwsError::HeaderJson)?
            .ok_or(JwsError::AlgMissing)?;
        if alg != ALG_EDDSA {
            return Err(JwsError::AlgNotEdDsa);
        }
        let kid = header
            .opt_str("kid")
            .map_err(JwsError::HeaderJson)?
            .ok_or(JwsError::KidMissing)?;
        if kid.is_empty() {
            return Err(JwsError::KidEmpty);
        }
        let typ = header
            .opt_str("typ")
            .map_err(JwsError::HeaderJson)?
            .ok_or(JwsError::TypMissing)?;
        Ok(JwsHeader {
            kid: kid.to_owned(),
            typ: typ.to_owned(),
        })
    }
}

/// A token that passed the structure and header checks of the profile; its
/// signature is not verified yet, so its claims cannot be read.
#[derive(Clone, PartialEq, Eq)]
pub struct CompactJws {
    header: JwsHeader,
    /// `header.payload` as sent: the signed bytes.
    signing_input: String,
    payload: Vec<u8>,
    signature: [u8; 64],
}

impl fmt::Debug for CompactJws {
    /// Only the header; never the payload or the signature.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactJws")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl CompactJws {
    /// Checks the structure and the header (module docs), in this order:
    /// length, parts, base64url of each part, signature length, header.
    pub fn parse(token: &str) -> Result<Self, JwsError> {
        if token.len() > JWS_MAX_BYTES {
            return Err(JwsError::TooLong {
                len: token.len(),
                max: JWS_MAX_BYTES,
            });
        }
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwsError::WrongPartCount);
        };
        for (part, text) in [
            (JwsPart::Header, header),
            (JwsPart::Payload, payload),
            (JwsPart::Signature, signature),
        ] {
            if text.is_empty() {
                return Err(JwsError::EmptyPart { part });
            }
        }
        let header_bytes = b64::decode(header).map_err(|_| JwsError::Base64 {
            part: JwsPart::Header,
        })?;
        let payload_bytes = b64::decode(payload).map_err(|_| JwsError::Base64 {
            part: JwsPart::Payload,
        })?;
        let signature = b64::decode_array::<64>(signature).map_err(|e| match e {
            B64Error::Malformed => JwsError::Base64 {
                part: JwsPart::Signature,
            },
            B64Error::WrongLength { actual, .. } => JwsError::SignatureLength { len: actual },
        })?;
        let parsed_header = JwsHeader::decode(&header_bytes)?;
        // The signed bytes are `header.payload` as sent.
        let signing_input = format!("{header}.{payload}");
        Ok(CompactJws {
            header: parsed_header,
            signing_input,
            payload: payload_bytes,
            signature,
        })
    }

    /// The header.
    pub fn header(&self) -> &JwsHeader {
        &self.header
    }

    /// The key ID (readable before verification, to pick the key).
    pub fn kid(&self) -> &str {
        self.header.kid()
    }

    /// The token type as sent.
    pub fn typ(&self) -> &str {
        self.header.typ()
    }

    /// See [`JwsHeader::expect_typ`].
    pub fn expect_typ(&self, expected: &str) -> Result<(), JwsError> {
        self.header.expect_typ(expected)
    }

    /// Verifies the signature with `key` (`verify_strict`).
    pub fn verify(self, key: &VerifyingKey) -> Result<VerifiedJws, JwsError> {
        let signature = Signature::from_bytes(&self.signature);
        key.verify_strict(self.signing_input.as_bytes(), &signature)
            .map_err(|_| JwsError::BadSignature)?;
        Ok(VerifiedJws {
            header: self.header,
            payload: self.payload,
        })
    }

    /// Verifies the signature with the key of the JWKS named by `kid`.
    pub fn verify_with_jwks(self, jwks: &Jwks) -> Result<VerifiedJws, JwsError> {
        let key = *jwks
            .get(self.kid())
            .ok_or(JwsError::UnknownKid)?
            .verifying_key();
        self.verify(&key)
    }
}

/// A token whose signature verified; its claims can now be decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifiedJws {
    header: JwsHeader,
    payload: Vec<u8>,
}

impl fmt::Debug for VerifiedJws {
    /// Only the header; never the claims.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedJws")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl VerifiedJws {
    /// The header.
    pub fn header(&self) -> &JwsHeader {
        &self.header
    }

    /// The key ID.
    pub fn kid(&self) -> &str {
        self.header.kid()
    }

    /// The token type as sent.
    pub fn typ(&self) -> &str {
        self.header.typ()
    }

    /// See [`JwsHeader::expect_typ`].
    pub fn expect_typ(&self, expected: &str) -> Result<(), JwsError> {
        self.header.expect_typ(expected)
    }

    /// Decodes the claims as `host-auth+jwt` claims (whatever `typ` says).
    pub fn host_auth_claims(&self) -> Result<HostAuthClaims, JwsError> {
        HostAuthClaims::decode(&self.payload)
    }

    /// Decodes the claims as `terminal-session+jwt` claims (whatever `typ` says).
    pub fn terminal_session_claims(&self) -> Result<TerminalSessionClaims, JwsError> {
        TerminalSessionClaims::decode(&self.payload)
    }
}

/// Host check order steps 1 and 2 (5.3) in one call: parse, the key named by
/// `kid` from `jwks`, signature, claims, then `typ = terminal-session+jwt`.
/// Every error is `token_invalid`.
pub fn decode_terminal_session(
    token: &str,
    jwks: &Jwks,
) -> Result<TerminalSessionClaims, JwsError> {
    let verified = CompactJws::parse(token)?.verify_with_jwks(jwks)?;
    let claims = verified.terminal_session_claims()?;
    verified.expect_typ(TYP_TERMINAL_SESSION)?;
    Ok(claims)
}

/// The JWS checks of identify step 4 (3.5) in one call: parse, `kid` equal to
/// the thumbprint of `login_key` (`hosts.auth_jkt`; otherwise
/// [`JwsError::UnknownKid`], which is 4110), signature with `login_key`,
/// claims, then `typ = host-auth+jwt`. The caller compares the claims
/// (challenge, host_id, iat window); every error except `UnknownKid` is 4113.
pub fn decode_host_auth(
    token: &str,
    login_key: &Ed25519PublicJwk,
) -> Result<HostAuthClaims, JwsError> {
    let jws = CompactJws::parse(token)?;
    if jws.kid() != login_key.thumbprint() {
        return Err(JwsError::UnknownKid);
    }
    let verified = jws.verify(login_key.verifying_key())?;
    let claims = verified.host_auth_claims()?;
    verified.expect_typ(TYP_HOST_AUTH)?;
    Ok(claims)
}

mod sealed {
    pub trait Sealed {}
}

/// Claims this module can sign; the member order is fixed per type.
pub trait Claims: sealed::Sealed {
    /// The claims as compact JSON in their fixed member order.
    fn to_json(&self) -> String;
}

/// Signs `claims` as a compact JWS with exactly the header
/// `{"alg":"EdDSA","kid":<kid>,"typ":<typ>}`. `kid` must be non-empty (the
/// thumbprint of the key, [`Ed25519SigningKey::kid`]), or no verifier accepts
/// the token.
pub fn sign<C: Claims>(typ: &str, kid: &str, claims: &C, key: &Ed25519SigningKey) -> String {
    let header = JsonText::new()
        .str("alg", ALG_EDDSA)
        .str("kid", kid)
        .str("typ", typ)
        .finish();
    let mut token = b64::encode(header.as_bytes());
    token.push('.');
    token.push_str(&b64::encode(claims.to_json().as_bytes()));
    let signature = key.inner.sign(token.as_bytes());
    token.push('.');
    token.push_str(&b64::encode(&signature.to_bytes()));
    token
}

/// Compact JSON objects with members in the order written. serde_json encodes
/// each value (escaping included); the order stays fixed whatever serde_json
/// features other crates enable, and nothing here can fail.
struct JsonText {
    out: String,
}

impl JsonText {
    fn new() -> Self {
        JsonText {
            out: String::from("{"),
        }
    }

    fn member(mut self, name: &str, value: Value) -> Self {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        self.out.push_str(&Value::from(name).to_string());
        self.out.push(':');
        self.out.push_str(&value.to_string());
        self
    }

    fn str(self, name: &str, value: &str) -> Self {
        self.member(name, Value::from(value))
    }

    fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// An Ed25519 private key for signing tokens: the host's login key or a server
/// key of purpose terminal. The key is wiped when dropped (ed25519-dalek's
/// `zeroize` feature) and never shown by `Debug`.
pub struct Ed25519SigningKey {
    inner: ed25519_dalek::SigningKey,
}

impl fmt::Debug for Ed25519SigningKey {
    /// Only the public `kid`; the private key is redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ed25519SigningKey")
            .field("kid", &self.kid())
            .field("private", &"<redacted>")
            .finish()
    }
}

impl Ed25519SigningKey {
    /// A new key from the OS random source.
    pub fn generate() -> Result<Self, RandomError> {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut seed[..]).map_err(|_| RandomError)?;
        Ok(Self::from_seed(&seed))
    }

    /// The key of a 32-byte seed (RFC 8032 private key, the JWK `d`), e.g. as
    /// read from the state directory (4.2). The caller wipes its copy.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Ed25519SigningKey {
            inner: ed25519_dalek::SigningKey::from_bytes(seed),
        }
    }

    /// The seed, for storing the key (4.2); borrowed so that no unwiped copy
    /// is made here.
    pub fn seed(&self) -> &[u8; 32] {
        self.inner.as_bytes()
    }

    /// The public key.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.inner.verifying_key()
    }

    /// The public key as JWK (`auth_public_jwk` of host.pair, or a JWKS entry).
    pub fn public_jwk(&self) -> Ed25519PublicJwk {
        Ed25519PublicJwk::from_derived(self.inner.verifying_key())
    }

    /// The `kid` this key signs with: the RFC 7638 thumbprint of its public JWK.
    pub fn kid(&self) -> String {
        self.public_jwk().thumbprint()
    }
}

/// The claims of `host-auth+jwt`: exactly these three (3.5 identify step 4).
#[derive(Clone, PartialEq, Eq)]
pub struct HostAuthClaims {
    /// The challenge of hello (32 bytes; base64url in JSON).
    pub challenge: [u8; 32],
    /// The host ID, equal to identify.host_id.
    pub host_id: Uuid,
    /// Issuance, Unix seconds.
    pub iat: i64,
}

impl fmt::Debug for HostAuthClaims {
    /// No claim values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostAuthClaims").finish_non_exhaustive()
    }
}

impl sealed::Sealed for HostAuthClaims {}

impl Claims for HostAuthClaims {
    /// `{"challenge":...,"host_id":...,"iat":...}`.
    fn to_json(&self) -> String {
        JsonText::new()
            .str("challenge", &b64::encode(&self.challenge))
            .str("host_id", &self.host_id.to_string())
            .member("iat", Value::from(self.iat))
            .finish()
    }
}

impl HostAuthClaims {
    /// Signs these claims as `host-auth+jwt` with the host's login key, `kid`
    /// its thumbprint.
    pub fn sign(&self, key: &Ed25519SigningKey) -> String {
        sign(TYP_HOST_AUTH, &key.kid(), self, key)
    }

    /// Whether the challenge equals the one of hello (constant time).
    pub fn challenge_matches(&self, expected: &[u8; 32]) -> bool {
        self.challenge.ct_eq(expected).into()
    }

    fn decode(payload: &[u8]) -> Result<Self, JwsError> {
        let value = json::parse(payload, JWS_MAX_BYTES).map_err(claims_json)?;
        let claims = Object::root(&value, &HOST_AUTH_CLAIMS).map_err(claims_json)?;
        Ok(HostAuthClaims {
            challenge: bytes32_claim(&claims, "challenge")?,
            host_id: uuid_claim(&claims, "host_id")?,
            iat: i64_claim(&claims, "iat")?,
        })
    }
}

/// The `att` claim: whether the token opens a session or attaches to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Att {
    /// `open`: a session ID without a live PTY (host step 8).
    Open,
    /// `attach`: a session ID with a live PTY of the same sub, osu and prf.
    Attach,
}

impl Att {
    /// The claim text.
    pub fn as_str(self) -> &'static str {
        match self {
            Att::Open => "open",
            Att::Attach => "attach",
        }
    }
}

/// The claims of `terminal-session+jwt` (5.3 table). All are required except
/// `wdi`; whether `wdi` may be present (claude profile with `att = open`) is
/// the host's step 12, because it depends on the profile's kind.
#[derive(Clone, PartialEq, Eq)]
pub struct TerminalSessionClaims {
    /// `instance.instance_id` (not compared by the host: the key binds the issuer).
    pub iss: String,
    /// The host ID.
    pub aud: Uuid,
    /// The principal ID of the person.
    pub sub: Uuid,
    /// The session ID; equal to the session ID in the prologue.
    pub sid: Uuid,
    /// UUIDv7 of the token.
    pub jti: Uuid,
    /// Issuance, Unix seconds.
    pub iat: i64,
    /// Expiry, Unix seconds (iat + terminal.session_token_ttl).
    pub exp: i64,
    /// The device ID.
    pub dev: Uuid,
    /// The profile name.
    pub prf: String,
    /// SHA-256 of the device's ephemeral Noise public key ([`ephemeral_key_hash`]).
    pub cek: [u8; 32],
    /// Whether the person was an active owner at issuance.
    pub own: bool,
    /// The person's session user on this host.
    pub osu: String,
    /// Index of the working directory in the list of osu (claude, open only).
    pub wdi: Option<u32>,
    /// open or attach.
    pub att: Att,
}

impl fmt::Debug for TerminalSessionClaims {
    /// No claim values (osu and sub name a person, 10.4).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminalSessionClaims")
            .finish_non_exhaustive()
    }
}

impl sealed::Sealed for TerminalSessionClaims {}

impl Claims for TerminalSessionClaims {
    /// The claims in the order of the 5.3 table; `wdi` only when present.
    fn to_json(&self) -> String {
        let text = JsonText::new()
            .str("iss", &self.iss)
            .str("aud", &self.aud.to_string())
            .str("sub", &self.sub.to_string())
            .str("sid", &self.sid.to_string())
            .str("jti", &self.jti.to_string())
            .member("iat", Value::from(self.iat))
            .member("exp", Value::from(self.exp))
            .str("dev", &self.dev.to_string())
            .str("prf", &self.prf)
            .str("cek", &b64::encode(&self.cek))
            .member("own", Value::from(self.own))
            .str("osu", &self.osu);
        let text = match self.wdi {
            Some(wdi) => text.member("wdi", Value::from(wdi)),
            None => text,
        };
        text.str("att", self.att.as_str()).finish()
    }
}

impl TerminalSessionClaims {
    /// Signs these claims as `terminal-session+jwt`, `kid` the key's thumbprint.
    pub fn sign(&self, key: &Ed25519SigningKey) -> String {
        sign(TYP_TERMINAL_SESSION, &key.kid(), self, key)
    }

    /// Whether `now` is past `exp` plus the leeway (host step 5). `now` equal
    /// to `exp + leeway` is not expired; one second later is.
    pub fn is_expired(&self, now_unix_s: i64, leeway_s: u64) -> bool {
        i128::from(now_unix_s) > i128::from(self.exp) + i128::from(leeway_s)
    }

    /// [`TerminalSessionClaims::is_expired`] in milliseconds, for the
    /// `clock_leeway_ms` of hello (2.2 point 5) without rounding.
    pub fn is_expired_ms(&self, now_unix_ms: i64, leeway_ms: u64) -> bool {
        i128::from(now_unix_ms) > i128::from(self.exp) * 1000 + i128::from(leeway_ms)
    }

    /// Whether `cek` is the hash of the ephemeral key `e` of message 1 (host
    /// step 7), compared in constant time.
    pub fn cek_matches(&self, ephemeral_public_key: &[u8; 32]) -> bool {
        self.cek
            .ct_eq(&ephemeral_key_hash(ephemeral_public_key))
            .into()
    }

    fn decode(payload: &[u8]) -> Result<Self, JwsError> {
        let value = json::parse(payload, JWS_MAX_BYTES).map_err(claims_json)?;
        let claims = Object::root(&value, &TERMINAL_SESSION_CLAIMS).map_err(claims_json)?;
        // Checked in the order of the 5.3 table: the first wrong claim is reported.
        Ok(TerminalSessionClaims {
            iss: claims.str("iss").map_err(claims_json)?.to_owned(),
            aud: uuid_claim(&claims, "aud")?,
            sub: uuid_claim(&claims, "sub")?,
            sid: uuid_claim(&claims, "sid")?,
            jti: uuid_claim(&claims, "jti")?,
            iat: i64_claim(&claims, "iat")?,
            exp: i64_claim(&claims, "exp")?,
            dev: uuid_claim(&claims, "dev")?,
            prf: claims.str("prf").map_err(claims_json)?.to_owned(),
            cek: bytes32_claim(&claims, "cek")?,
            own: claims.bool("own").map_err(claims_json)?,
            osu: claims.str("osu").map_err(claims_json)?.to_owned(),
            wdi: wdi_claim(&claims)?,
            att: att_claim(&claims)?,
        })
    }
}

/// SHA-256 of the device's ephemeral Noise public key: the `cek` claim and
/// `client_ephemeral_key_hash` of open and attach.
pub fn ephemeral_key_hash(ephemeral_public_key: &[u8; 32]) -> [u8; 32] {
    Sha256::digest(ephemeral_public_key).into()
}

fn claims_json(error: JsonError) -> JwsError {
    JwsError::ClaimsJson(error)
}

fn uuid_claim(claims: &Object<'_>, name: &str) -> Result<Uuid, JwsError> {
    let member = claims.member(name).map_err(claims_json)?;
    ids::parse_uuid(member.as_str().map_err(claims_json)?).map_err(|_| JwsError::InvalidUuidClaim {
        pointer: member.pointer().to_owned(),
    })
}

fn bytes32_claim(claims: &Object<'_>, name: &str) -> Result<[u8; 32], JwsError> {
    let member = claims.member(name).map_err(claims_json)?;
    b64::decode_array::<32>(member.as_str().map_err(claims_json)?).map_err(|_| {
        JwsError::InvalidBytesClaim {
            pointer: member.pointer().to_owned(),
        }
    })
}

fn wdi_claim(claims: &Object<'_>) -> Result<Option<u32>, JwsError> {
    let Some(member) = claims.opt_member("wdi") else {
        return Ok(None);
    };
    member.as_uint::<u32>().map(Some).map_err(|e| match e {
        JsonError::InvalidValue { .. } => JwsError::InvalidWdi,
        other => claims_json(other),
    })
}

fn att_claim(claims: &Object<'_>) -> Result<Att, JwsError> {
    match claims.str("att").map_err(claims_json)? {
        "open" => Ok(Att::Open),
        "attach" => Ok(Att::Attach),
        _ => Err(JwsError::InvalidAtt),
    }
}

fn i64_claim(claims: &Object<'_>, name: &str) -> Result<i64, JwsError> {
    claims.i64(name).map_err(|e| match e {
        JsonError::InvalidValue { pointer } => JwsError::IntegerOutOfRange { pointer },
        other => claims_json(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonType;
    use crate::jwk::JwksKey;
    use serde_json::Map;

    /// RFC 8037 appendix A.1 private key and the A.4 signature over
    /// `{"alg":"EdDSA"}` and "Example of Ed25519 signing".
    const RFC8037_D: &str = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A";
    const RFC8037_A4_TOKEN: &str = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg";

    fn server_key() -> Ed25519SigningKey {
        Ed25519SigningKey::from_seed(&[1; 32])
    }

    fn other_key() -> Ed25519SigningKey {
        Ed25519SigningKey::from_seed(&[2; 32])
    }

    fn jwks_of(key: &Ed25519SigningKey) -> Jwks {
        Jwks::new(vec![JwksKey::from_jwk(key.public_jwk())]).unwrap()
    }

    fn uuid(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn session_claims() -> TerminalSessionClaims {
        TerminalSessionClaims {
            iss: "instance-1".into(),
            aud: uuid(1),
            sub: uuid(2),
            sid: uuid(3),
            jti: ids::uuid_v7(1_764_000_000_000).unwrap(),
            iat: 1_764_000_000,
            exp: 1_764_000_060,
            dev: uuid(4),
            prf: "claude".into(),
            cek: ephemeral_key_hash(&[9; 32]),
            own: true,
            osu: "alice".into(),
            wdi: Some(2),
            att: Att::Open,
        }
    }

    fn host_auth_claims() -> HostAuthClaims {
        HostAuthClaims {
            challenge: [7; 32],
            host_id: uuid(5),
            iat: 1_764_000_000,
        }
    }

    fn header_text(typ: &str, kid: &str) -> String {
        format!(r#"{{"alg":"EdDSA","kid":"{kid}","typ":"{typ}"}}"#)
    }

    /// A token of any header and payload text, correctly signed with `key`.
    fn raw_token(header: &str, payload: &str, key: &Ed25519SigningKey) -> String {
        let input = format!(
            "{}.{}",
            b64::encode(header.as_bytes()),
            b64::encode(payload.as_bytes())
        );
        let signature = key.inner.sign(input.as_bytes());
        format!("{input}.{}", b64::encode(&signature.to_bytes()))
    }

    fn parse_header(header: &str) -> Result<CompactJws, JwsError> {
        CompactJws::parse(&raw_token(header, "{}", &server_key()))
    }

    fn parts(token: &str) -> Vec<String> {
        token.split('.').map(str::to_owned).collect()
    }

    /// The session claims as a JSON object, to be changed by a test.
    fn session_members() -> Map<String, Value> {
        match serde_json::from_str(&session_claims().to_json()).unwrap() {
            Value::Object(members) => members,
            _ => unreachable!(),
        }
    }

    /// Decodes `payload` as terminal session claims through the whole path.
    fn session_from_payload(payload: &str) -> Result<TerminalSessionClaims, JwsError> {
        let key = server_key();
        let token = raw_token(
            &header_text(TYP_TERMINAL_SESSION, &key.kid()),
            payload,
            &key,
        );
        decode_terminal_session(&token, &jwks_of(&key))
    }

    fn session_from(members: &Map<String, Value>) -> Result<TerminalSessionClaims, JwsError> {
        session_from_payload(&serde_json::to_string(members).unwrap())
    }

    fn host_auth_from_payload(payload: &str) -> Result<HostAuthClaims, JwsError> {
        let key = server_key();
        let token = raw_token(&header_text(TYP_HOST_AUTH, &key.kid()), payload, &key);
        decode_host_auth(&token, &key.public_jwk())
    }

    #[test]
    fn terminal_session_round_trip() {
        let key = server_key();
        let claims = session_claims();
        let token = claims.sign(&key);
        assert_eq!(
            decode_terminal_session(&token, &jwks_of(&key)).unwrap(),
            claims
        );

        let p = parts(&token);
        assert_eq!(
            b64::decode(&p[0]).unwrap(),
            header_text(TYP_TERMINAL_SESSION, &key.kid()).into_bytes()
        );
        let expected_payload = format!(
            concat!(
                r#"{{"iss":"instance-1","aud":"{}","sub":"{}","sid":"{}","jti":"{}","#,
                r#""iat":1764000000,"exp":1764000060,"dev":"{}","prf":"claude","cek":"{}","#,
                r#""own":true,"osu":"alice","wdi":2,"att":"open"}}"#
            ),
            uuid(1),
            uuid(2),
            uuid(3),
            claims.jti,
            uuid(4),
            b64::encode(&claims.cek)
        );
        assert_eq!(
            String::from_utf8(b64::decode(&p[1]).unwrap()).unwrap(),
            expected_payload
        );

        // Without wdi, attach; and through the step API.
        let attach = TerminalSessionClaims {
            wdi: None,
            att: Att::Attach,
            own: false,
            ..session_claims()
        };
        let token = sign(TYP_TERMINAL_SESSION, "k1", &attach, &key);
        let jws = CompactJws::parse(&token).unwrap();
        assert_eq!(jws.kid(), "k1");
        assert_eq!(jws.typ(), TYP_TERMINAL_SESSION);
        assert_eq!(jws.header().kid(), "k1");
        let verified = jws.verify(&key.verifying_key()).unwrap();
        assert_eq!(verified.kid(), "k1");
        assert_eq!(verified.header().typ(), TYP_TERMINAL_SESSION);
        assert_eq!(verified.expect_typ(TYP_TERMINAL_SESSION), Ok(()));
        assert_eq!(verified.terminal_session_claims().unwrap(), attach);
        assert!(
            !String::from_utf8(b64::decode(&parts(&token)[1]).unwrap())
                .unwrap()
                .contains("wdi")
        );
    }

    #[test]
    fn host_auth_round_trip() {
        let key = other_key();
        let claims = host_auth_claims();
        let token = claims.sign(&key);
        let decoded = decode_host_auth(&token, &key.public_jwk()).unwrap();
        assert_eq!(decoded, claims);
        assert!(decoded.challenge_matches(&[7; 32]));
        assert!(!decoded.challenge_matches(&[8; 32]));
        let payload = b64::decode(&parts(&token)[1]).unwrap();
        assert_eq!(
            String::from_utf8(payload).unwrap(),
            format!(
                r#"{{"challenge":"{}","host_id":"{}","iat":1764000000}}"#,
                b64::encode(&[7; 32]),
                uuid(5)
            )
        );
        let jws = CompactJws::parse(&token).unwrap();
        assert_eq!(jws.typ(), TYP_HOST_AUTH);
        assert_eq!(jws.kid(), key.public_jwk().thumbprint());
    }

    #[test]
    fn typ_mismatch() {
        let key = server_key();
        // A host-auth proof presented where a terminal session token is expected.
        let proof = host_auth_claims().sign(&key);
        let jws = CompactJws::parse(&proof).unwrap();
        assert_eq!(
            jws.expect_typ(TYP_TERMINAL_SESSION),
            Err(JwsError::TypMismatch)
        );
        let verified = jws.verify_with_jwks(&jwks_of(&key)).unwrap();
        assert_eq!(
            verified.expect_typ(TYP_TERMINAL_SESSION),
            Err(JwsError::TypMismatch)
        );
        // Session claims signed as host-auth: claims fine, typ refused (step 2).
        let token = sign(TYP_HOST_AUTH, &key.kid(), &session_claims(), &key);
        assert_eq!(
            decode_terminal_session(&token, &jwks_of(&key)),
            Err(JwsError::TypMismatch)
        );
        // And the other way round.
        let token = sign(TYP_TERMINAL_SESSION, &key.kid(), &host_auth_claims(), &key);
        assert_eq!(
            decode_host_auth(&token, &key.public_jwk()),
            Err(JwsError::TypMismatch)
        );
        // typ is compared exactly.
        let token = sign("Terminal-Session+JWT", &key.kid(), &session_claims(), &key);
        assert_eq!(
            decode_terminal_session(&token, &jwks_of(&key)),
            Err(JwsError::TypMismatch)
        );
    }

    #[test]
    fn too_long() {
        let long = "a".repeat(JWS_MAX_BYTES + 1);
        assert_eq!(
            CompactJws::parse(&long),
            Err(JwsError::TooLong {
                len: JWS_MAX_BYTES + 1,
                max: JWS_MAX_BYTES
            })
        );
        let at_limit = "a".repeat(JWS_MAX_BYTES);
        assert_eq!(CompactJws::parse(&at_limit), Err(JwsError::WrongPartCount));
    }

    #[test]
    fn wrong_part_count() {
        let token = session_claims().sign(&server_key());
        let p = parts(&token);
        for bad in [
            String::new(),
            p[0].clone(),
            format!("{}.{}", p[0], p[1]),
            format!("{token}.{}", p[2]),
            format!("{token}."),
            format!(".{token}"),
            "..".repeat(3),
        ] {
            assert_eq!(
                CompactJws::parse(&bad),
                Err(JwsError::WrongPartCount),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn empty_part() {
        let p = parts(&session_claims().sign(&server_key()));
        let cases = [
            (format!(".{}.{}", p[1], p[2]), JwsPart::Header),
            (format!("{}..{}", p[0], p[2]), JwsPart::Payload),
            (format!("{}.{}.", p[0], p[1]), JwsPart::Signature),
            ("..".to_owned(), JwsPart::Header),
        ];
        for (token, part) in cases {
            assert_eq!(CompactJws::parse(&token), Err(JwsError::EmptyPart { part }));
        }
    }

    #[test]
    fn bad_base64_per_part() {
        let p = parts(&session_claims().sign(&server_key()));
        let spoil = [
            |s: &str| format!("{s}="),
            |s: &str| format!("{s}+"),
            |s: &str| format!(" {s}"),
            |s: &str| format!("{s}\u{e9}"),
            |s: &str| format!("{s}*"),
        ];
        for (index, part) in [JwsPart::Header, JwsPart::Payload, JwsPart::Signature]
            .into_iter()
            .enumerate()
        {
            for spoil in spoil {
                let mut q = p.clone();
                q[index] = spoil(&q[index]);
                let token = q.join(".");
                assert_eq!(
                    CompactJws::parse(&token),
                    Err(JwsError::Base64 { part }),
                    "{token:?}"
                );
            }
        }
        // Non-zero trailing bits ("AB" would be 0x00 with bits left over).
        assert_eq!(
            CompactJws::parse(&format!("AB.{}.{}", p[1], p[2])),
            Err(JwsError::Base64 {
                part: JwsPart::Header
            })
        );
        // Standard alphabet instead of URL-safe in the signature.
        let mut q = p.clone();
        q[2] = q[2].replace('-', "+").replace('_', "/");
        if q[2] != p[2] {
            assert_eq!(
                CompactJws::parse(&q.join(".")),
                Err(JwsError::Base64 {
                    part: JwsPart::Signature
                })
            );
        }
    }

    #[test]
    fn signature_wrong_length() {
        let p = parts(&session_claims().sign(&server_key()));
        for len in [1, 32, 63, 65, 128] {
            let token = format!("{}.{}.{}", p[0], p[1], b64::encode(&vec![0u8; len]));
            assert_eq!(
                CompactJws::parse(&token),
                Err(JwsError::SignatureLength { len })
            );
        }
    }

    #[test]
    fn header_not_strict_json() {
        let cases: [(&str, JsonError); 6] = [
            ("not json", JsonError::Syntax),
            (
                r#"{"alg":"EdDSA","kid":"k","typ":"t"} x"#,
                JsonError::Syntax,
            ),
            (
                r#"{"alg":"EdDSA","alg":"EdDSA","kid":"k","typ":"t"}"#,
                JsonError::DuplicateMember {
                    pointer: "/alg".into(),
                },
            ),
            (
                r#"{"alg":"EdDSA","kid":"k","typ":null}"#,
                JsonError::NullMember {
                    pointer: "/typ".into(),
                },
            ),
            (
                "[]",
                JsonError::WrongType {
                    pointer: String::new(),
                    expected: JsonType::Object,
                },
            ),
            (
                r#"{"alg":["EdDSA"],"kid":"k","typ":"t"}"#,
                JsonError::WrongType {
                    pointer: "/alg".into(),
                    expected: JsonType::String,
                },
            ),
        ];
        for (header, expected) in cases {
            assert_eq!(
                parse_header(header),
                Err(JwsError::HeaderJson(expected)),
                "{header}"
            );
        }
        let token = format!(
            "{}.{}.{}",
            b64::encode(b"{\"alg\":\"\xff\"}"),
            b64::encode(b"{}"),
            b64::encode(&[0; 64])
        );
        assert_eq!(
            CompactJws::parse(&token),
            Err(JwsError::HeaderJson(JsonError::InvalidUtf8))
        );
    }

    #[test]
    fn alg_not_eddsa() {
        for alg in [
            "none", "HS256", "eddsa", "EDDSA", "Ed25519", "ES256", "RS256", "", "EdDSA ",
        ] {
            let header = format!(r#"{{"alg":"{alg}","kid":"k","typ":"t"}}"#);
            assert_eq!(parse_header(&header), Err(JwsError::AlgNotEdDsa), "{alg:?}");
        }
    }

    #[test]
    fn alg_missing() {
        assert_eq!(
            parse_header(r#"{"kid":"k","typ":"t"}"#),
            Err(JwsError::AlgMissing)
        );
    }

    #[test]
    fn kid_missing() {
        // RFC 8037's example token has no kid (and no typ).
        assert_eq!(
            CompactJws::parse(RFC8037_A4_TOKEN),
            Err(JwsError::KidMissing)
        );
        assert_eq!(
            parse_header(r#"{"alg":"EdDSA","typ":"t"}"#),
            Err(JwsError::KidMissing)
        );
    }

    #[test]
    fn kid_empty_or_not_a_string() {
        assert_eq!(
            parse_header(r#"{"alg":"EdDSA","kid":"","typ":"t"}"#),
            Err(JwsError::KidEmpty)
        );
        for kid in ["1", "true", "[]", "{}"] {
            let header = format!(r#"{{"alg":"EdDSA","kid":{kid},"typ":"t"}}"#);
            assert_eq!(
                parse_header(&header),
                Err(JwsError::HeaderJson(JsonError::WrongType {
                    pointer: "/kid".into(),
                    expected: JsonType::String
                }))
            );
        }
    }

    #[test]
    fn typ_missing_or_not_a_string() {
        assert_eq!(
            parse_header(r#"{"alg":"EdDSA","kid":"k"}"#),
            Err(JwsError::TypMissing)
        );
        assert_eq!(
            parse_header(r#"{"alg":"EdDSA","kid":"k","typ":1}"#),
            Err(JwsError::HeaderJson(JsonError::WrongType {
                pointer: "/typ".into(),
                expected: JsonType::String
            }))
        );
    }

    #[test]
    fn forbidden_header_members() {
        for name in FORBIDDEN_HEADER_MEMBERS {
            for value in [r#""x""#, "[]", "{}", "true"] {
                let header = format!(r#"{{"alg":"EdDSA","kid":"k","typ":"t","{name}":{value}}}"#);
                let err = parse_header(&header).unwrap_err();
                assert_eq!(err, JwsError::ForbiddenHeaderMember { name });
                assert!(err.to_string().contains(name));
            }
        }
        // Named even when the rest of the header is wrong too.
        assert_eq!(
            parse_header(r#"{"alg":"none","jwk":{},"zz":1}"#),
            Err(JwsError::ForbiddenHeaderMember { name: "jwk" })
        );
    }

    #[test]
    fn unknown_header_member() {
        for name in ["cty", "x5t", "b64", "iss", "ALG"] {
            let header = format!(r#"{{"alg":"EdDSA","kid":"k","typ":"t","{name}":"v"}}"#);
            assert_eq!(
                parse_header(&header),
                Err(JwsError::UnknownHeaderMember {
                    pointer: format!("/{name}")
                })
            );
        }
    }

    #[test]
    fn signature_does_not_verify() {
        let key = server_key();
        let vk = key.verifying_key();
        let token = session_claims().sign(&key);
        let p = parts(&token);
        assert!(CompactJws::parse(&token).unwrap().verify(&vk).is_ok());

        let other_claims = TerminalSessionClaims {
            own: false,
            ..session_claims()
        };
        let other_payload = b64::encode(other_claims.to_json().as_bytes());
        let other_header = b64::encode(header_text(TYP_HOST_AUTH, &key.kid()).as_bytes());
        let mut flipped = b64::decode(&p[2]).unwrap();
        flipped[10] ^= 1;
        // S + l: the same signature with a non-canonical S.
        let mut malleable = b64::decode(&p[2]).unwrap();
        add_group_order(&mut malleable[32..]);
        let cases = [
            format!("{}.{other_payload}.{}", p[0], p[2]),
            format!("{other_header}.{}.{}", p[1], p[2]),
            format!("{}.{}.{}", p[0], p[1], b64::encode(&flipped)),
            format!("{}.{}.{}", p[0], p[1], b64::encode(&malleable)),
        ];
        for tampered in cases {
            let jws = CompactJws::parse(&tampered).unwrap();
            assert_eq!(jws.verify(&vk).unwrap_err(), JwsError::BadSignature);
        }
        // Another key.
        let jws = CompactJws::parse(&token).unwrap();
        assert_eq!(
            jws.verify(&other_key().verifying_key()).unwrap_err(),
            JwsError::BadSignature
        );
        // The JWKS has the kid, but with another key behind it.
        let wrong = Jwks::new(vec![
            JwksKey::new(key.kid(), other_key().public_jwk()).unwrap(),
        ])
        .unwrap();
        assert_eq!(
            decode_terminal_session(&token, &wrong),
            Err(JwsError::BadSignature)
        );
        // host-auth: right kid, other key's signature.
        let forged = raw_token(
            &header_text(TYP_HOST_AUTH, &key.kid()),
            &host_auth_claims().to_json(),
            &other_key(),
        );
        assert_eq!(
            decode_host_auth(&forged, &key.public_jwk()),
            Err(JwsError::BadSignature)
        );
    }

    /// Adds the group order l to a little-endian 32-byte scalar.
    fn add_group_order(s: &mut [u8]) {
        let l: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let mut carry = 0u16;
        for (byte, add) in s.iter_mut().zip(l) {
            let sum = u16::from(*byte) + u16::from(add) + carry;
            *byte = (sum & 0xff) as u8;
            carry = sum >> 8;
        }
    }

    #[test]
    fn unknown_kid() {
        let key = server_key();
        let token = sign(TYP_TERMINAL_SESSION, "not-a-kid", &session_claims(), &key);
        assert_eq!(
            decode_terminal_session(&token, &jwks_of(&key)),
            Err(JwsError::UnknownKid)
        );
        assert_eq!(
            decode_terminal_session(&session_claims().sign(&key), &Jwks::default()),
            Err(JwsError::UnknownKid)
        );
        // host-auth: kid other than the thumbprint of the login key (4110).
        let proof = sign(TYP_HOST_AUTH, "other", &host_auth_claims(), &key);
        assert_eq!(
            decode_host_auth(&proof, &key.public_jwk()),
            Err(JwsError::UnknownKid)
        );
        let proof = host_auth_claims().sign(&other_key());
        assert_eq!(
            decode_host_auth(&proof, &key.public_jwk()),
            Err(JwsError::UnknownKid)
        );
    }

    #[test]
    fn claims_duplicate_null_unknown_trailing() {
        let good = session_claims().to_json();
        let inner = &good[1..good.len() - 1];
        let cases = [
            (
                format!(r#"{{{inner},"iat":1}}"#),
                JsonError::DuplicateMember {
                    pointer: "/iat".into(),
                },
            ),
            (
                format!(
                    r#"{{{},"wdi":null,"att":"open"}}"#,
                    inner.replace(r#","wdi":2,"att":"open""#, "")
                ),
                JsonError::NullMember {
                    pointer: "/wdi".into(),
                },
            ),
            (
                format!(r#"{{{inner},"nbf":1}}"#),
                JsonError::UnknownMember {
                    pointer: "/nbf".into(),
                },
            ),
            (format!("{good} x"), JsonError::Syntax),
            (format!("{good}{{}}"), JsonError::Syntax),
            (
                "[]".to_owned(),
                JsonError::WrongType {
                    pointer: String::new(),
                    expected: JsonType::Object,
                },
            ),
        ];
        for (payload, expected) in cases {
            assert_eq!(
                session_from_payload(&payload),
                Err(JwsError::ClaimsJson(expected)),
                "{payload}"
            );
        }
        // Host-auth claims are just as strict.
        let good = host_auth_claims().to_json();
        assert_eq!(
            host_auth_from_payload(&format!("{},\"exp\":1}}", &good[..good.len() - 1])),
            Err(JwsError::ClaimsJson(JsonError::UnknownMember {
                pointer: "/exp".into()
            }))
        );
        assert_eq!(
            host_auth_from_payload(&format!("{good}\n{good}")),
            Err(JwsError::ClaimsJson(JsonError::Syntax))
        );
    }

    #[test]
    fn claims_missing() {
        for name in TERMINAL_SESSION_CLAIMS.iter().filter(|n| **n != "wdi") {
            let mut members = session_members();
            members.remove(*name);
            assert_eq!(
                session_from(&members),
                Err(JwsError::ClaimsJson(JsonError::MissingMember {
                    pointer: format!("/{name}")
                })),
                "{name}"
            );
        }
        let mut members = session_members();
        members.remove("wdi");
        assert_eq!(session_from(&members).unwrap().wdi, None);
        for name in HOST_AUTH_CLAIMS {
            let mut members: Map<String, Value> =
                serde_json::from_str(&host_auth_claims().to_json()).unwrap();
            members.remove(name);
            assert_eq!(
                host_auth_from_payload(&serde_json::to_string(&members).unwrap()),
                Err(JwsError::ClaimsJson(JsonError::MissingMember {
                    pointer: format!("/{name}")
                }))
            );
        }
    }

    #[test]
    fn claims_wrong_json_type() {
        let cases: [(&str, &str, JsonType); 17] = [
            ("iss", "1", JsonType::String),
            ("aud", "1", JsonType::String),
            ("sub", "true", JsonType::String),
            ("sid", "[]", JsonType::String),
            ("jti", "{}", JsonType::String),
            ("iat", r#""1764000000""#, JsonType::Integer),
            ("iat", "1764000000.0", JsonType::Integer),
            ("exp", "1.5", JsonType::Integer),
            ("exp", "1e9", JsonType::Integer),
            ("dev", "4", JsonType::String),
            ("prf", "false", JsonType::String),
            ("cek", "[1]", JsonType::String),
            ("own", r#""true""#, JsonType::Boolean),
            ("own", "1", JsonType::Boolean),
            ("osu", "1", JsonType::String),
            ("wdi", r#""2""#, JsonType::Integer),
            ("att", "true", JsonType::String),
        ];
        for (name, value, expected) in cases {
            let mut members = session_members();
            members.insert(name.to_owned(), serde_json::from_str(value).unwrap());
            assert_eq!(
                session_from(&members),
                Err(JwsError::ClaimsJson(JsonError::WrongType {
                    pointer: format!("/{name}"),
                    expected
                })),
                "{name} = {value}"
            );
        }
        for (name, value, expected) in [
            ("challenge", "1", JsonType::String),
            ("host_id", "{}", JsonType::String),
            ("iat", "1.0", JsonType::Integer),
        ] {
            let mut members: Map<String, Value> =
                serde_json::from_str(&host_auth_claims().to_json()).unwrap();
            members.insert(name.to_owned(), serde_json::from_str(value).unwrap());
            assert_eq!(
                host_auth_from_payload(&serde_json::to_string(&members).unwrap()),
                Err(JwsError::ClaimsJson(JsonError::WrongType {
                    pointer: format!("/{name}"),
                    expected
                }))
            );
        }
    }

    #[test]
    fn claims_invalid_uuid() {
        for name in ["aud", "sub", "sid", "jti", "dev"] {
            for bad in [
                "",
                "not-a-uuid",
                "01010101010101010101010101010101",
                "{01010101-0101-0101-0101-010101010101}",
            ] {
                let mut members = session_members();
                members.insert(name.to_owned(), Value::from(bad));
                assert_eq!(
                    session_from(&members),
                    Err(JwsError::InvalidUuidClaim {
                        pointer: format!("/{name}")
                    })
                );
            }
        }
        let payload = host_auth_claims()
            .to_json()
            .replace(&uuid(5).to_string(), "x");
        assert_eq!(
            host_auth_from_payload(&payload),
            Err(JwsError::InvalidUuidClaim {
                pointer: "/host_id".into()
            })
        );
    }

    #[test]
    fn cek_and_challenge_not_32_bytes() {
        for bad in [
            b64::encode(&[1; 31]),
            b64::encode(&[1; 33]),
            String::new(),
            format!("{}=", b64::encode(&[1; 32])),
            b64::encode(&[0xfb; 32]).replace('-', "+").replace('_', "/"),
        ] {
            let mut members = session_members();
            members.insert("cek".into(), Value::from(bad.as_str()));
            assert_eq!(
                session_from(&members),
                Err(JwsError::InvalidBytesClaim {
                    pointer: "/cek".into()
                }),
                "{bad:?}"
            );
            let payload = host_auth_claims()
                .to_json()
                .replace(&b64::encode(&[7; 32]), &bad);
            assert_eq!(
                host_auth_from_payload(&payload),
                Err(JwsError::InvalidBytesClaim {
                    pointer: "/challenge".into()
                })
            );
        }
    }

    #[test]
    fn integer_out_of_range() {
        for name in ["iat", "exp"] {
            let mut members = session_members();
            members.insert(name.to_owned(), Value::from(u64::MAX));
            assert_eq!(
                session_from(&members),
                Err(JwsError::IntegerOutOfRange {
                    pointer: format!("/{name}")
                })
            );
        }
        // Negative times are integers in range (the expiry check refuses them).
        let mut members = session_members();
        members.insert("iat".into(), Value::from(-1));
        assert_eq!(session_from(&members).unwrap().iat, -1);
    }

    #[test]
    fn att_not_open_or_attach() {
        for bad in ["", "Open", "ATTACH", "close", "open "] {
            let mut members = session_members();
            members.insert("att".into(), Value::from(bad));
            assert_eq!(session_from(&members), Err(JwsError::InvalidAtt), "{bad:?}");
        }
    }

    #[test]
    fn wdi_negative_float_or_too_large() {
        for bad in [
            Value::from(-1),
            Value::from(i64::MIN),
            Value::from(u64::from(u32::MAX) + 1),
        ] {
            let mut members = session_members();
            members.insert("wdi".into(), bad);
            assert_eq!(session_from(&members), Err(JwsError::InvalidWdi));
        }
        for float in ["0.0", "1.5", "-1.0", "2e0"] {
            let mut members = session_members();
            members.insert("wdi".into(), serde_json::from_str(float).unwrap());
            assert_eq!(
                session_from(&members),
                Err(JwsError::ClaimsJson(JsonError::WrongType {
                    pointer: "/wdi".into(),
                    expected: JsonType::Integer
                })),
                "{float}"
            );
        }
        let mut members = session_members();
        members.insert("wdi".into(), Value::from(u32::MAX));
        assert_eq!(session_from(&members).unwrap().wdi, Some(u32::MAX));
    }

    #[test]
    fn expiry_boundary() {
        let claims = session_claims();
        let exp = claims.exp;
        assert!(!claims.is_expired(exp, 0));
        assert!(claims.is_expired(exp + 1, 0));
        assert!(!claims.is_expired(exp + 30, 30));
        assert!(claims.is_expired(exp + 31, 30));
        assert!(!claims.is_expired(i64::MIN, u64::MAX));
        let far = TerminalSessionClaims {
            exp: i64::MAX,
            ..session_claims()
        };
        assert!(!far.is_expired(i64::MAX, u64::MAX));

        let exp_ms = exp * 1000;
        assert!(!claims.is_expired_ms(exp_ms + 30_000, 30_000));
        assert!(claims.is_expired_ms(exp_ms + 30_001, 30_000));
        assert!(!claims.is_expired_ms(exp_ms, 0));
        assert!(claims.is_expired_ms(exp_ms + 1, 0));
    }

    #[test]
    fn cek_binds_the_ephemeral_key() {
        let claims = session_claims();
        assert!(claims.cek_matches(&[9; 32]));
        assert!(!claims.cek_matches(&[8; 32]));
        // SHA-256 of 32 bytes of 0x09, computed independently of the helper.
        let mut hasher = Sha256::new();
        hasher.update([9u8; 32]);
        let expected: [u8; 32] = hasher.finalize().into();
        assert_eq!(ephemeral_key_hash(&[9; 32]), expected);
    }

    #[test]
    fn rfc8037_signature_is_reproduced() {
        let seed = b64::decode_array::<32>(RFC8037_D).unwrap();
        let key = Ed25519SigningKey::from_seed(&seed);
        assert_eq!(key.seed(), &seed);
        let p = parts(RFC8037_A4_TOKEN);
        let input = format!("{}.{}", p[0], p[1]);
        assert_eq!(b64::decode(&p[0]).unwrap(), br#"{"alg":"EdDSA"}"#);
        let signature = key.inner.sign(input.as_bytes());
        assert_eq!(b64::encode(&signature.to_bytes()), p[2]);
        let vk = key.verifying_key();
        assert!(vk.verify_strict(input.as_bytes(), &signature).is_ok());
        assert_eq!(key.kid(), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
    }

    #[test]
    fn signing_keys() {
        let a = Ed25519SigningKey::generate().unwrap();
        let b = Ed25519SigningKey::generate().unwrap();
        assert_ne!(a.seed(), b.seed());
        assert_eq!(a.kid(), a.public_jwk().thumbprint());
        assert_eq!(a.public_jwk().verifying_key(), &a.verifying_key());
        let again = Ed25519SigningKey::from_seed(a.seed());
        assert_eq!(again.verifying_key(), a.verifying_key());
        // The public JWK of a signing key passes the JWK checks.
        assert_eq!(
            Ed25519PublicJwk::from_json(a.public_jwk().to_json().as_bytes()).unwrap(),
            a.public_jwk()
        );
        let debug = format!("{a:?}");
        assert!(debug.contains("redacted"));
        assert!(!debug.contains(&b64::encode(a.seed())));
        assert!(!debug.contains(&format!("{:?}", a.seed())));
        assert!(!debug.contains(&format!("{:x?}", a.seed())));
    }

    #[test]
    fn debug_and_errors_carry_no_token_content() {
        let key = server_key();
        let claims = session_claims();
        let token = claims.sign(&key);
        let p = parts(&token);
        let jws = CompactJws::parse(&token).unwrap();
        let verified = jws.clone().verify(&key.verifying_key()).unwrap();
        let decoded = verified.terminal_session_claims().unwrap();
        let host = host_auth_claims();
        for text in [
            format!("{jws:?}"),
            format!("{verified:?}"),
            format!("{decoded:?}"),
            format!("{host:?}"),
        ] {
            assert!(!text.contains(&p[1]), "{text}");
            assert!(!text.contains(&p[2]), "{text}");
            assert!(!text.contains("alice"), "{text}");
            assert!(!text.contains(&claims.jti.to_string()), "{text}");
            assert!(!text.contains(&b64::encode(&claims.cek)), "{text}");
        }
        let mut members = session_members();
        members.insert("osu".into(), Value::from(1));
        let err = session_from(&members).unwrap_err();
        assert!(!format!("{err} {err:?}").contains("alice"));
        let mut members = session_members();
        members.insert("aud".into(), Value::from("secret-value"));
        let err = session_from(&members).unwrap_err();
        assert!(!format!("{err} {err:?}").contains("secret-value"));
    }

    #[test]
    fn part_names() {
        assert_eq!(JwsPart::Header.to_string(), "header");
        assert_eq!(JwsPart::Payload.to_string(), "payload");
        assert_eq!(JwsPart::Signature.to_string(), "signature");
        assert_eq!(Att::Open.as_str(), "open");
        assert_eq!(Att::Attach.as_str(), "attach");
    }
}
