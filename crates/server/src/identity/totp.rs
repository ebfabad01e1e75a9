//! TOTP (RFC 6238; DESIGN 3.1): the second factor of CLI logins and step-ups.
//!
//! - Codes: HMAC-SHA-1, 6 digits, the time step `auth.totp_step`, accepted
//!   `auth.totp_skew_steps` steps before and after the current one — what every
//!   authenticator app speaks (the `otpauth://` URI of enrollment names exactly
//!   that). The arithmetic is the `totp-rs` crate's; comparisons of codes are
//!   constant-time.
//! - Replay: a credential stores the last time step it accepted
//!   (`last_used_step`); a code is accepted only for a later step, and the
//!   acceptance is one conditional `UPDATE`, so two requests with the same code
//!   cannot both pass, on either engine.
//! - At rest: the 160-bit secret is sealed with ChaCha20-Poly1305 (ring) under
//!   a key derived from the pepper ([`PepperPurpose::TotpSealKey`]), with the
//!   credential's ID as associated data; a database dump alone does not reveal it.
//! - Credentials are `pending` from enrollment until confirmed with a current
//!   code, then `active`; a person has at most one active credential.

use std::fmt;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sqlx::{AnyConnection, Row};
use subtle::ConstantTimeEq;
use totp_rs::{Algorithm, TOTP};
use uuid::Uuid;
use zeroize::Zeroizing;

use super::persons::Username;
use super::{AuthFailure, IdentityError};
use crate::clock::UnixMillis;
use crate::config::AuthConfig;
use crate::db::{self, DbError, UnitOfWork};
use crate::pepper::{Pepper, PepperPurpose};

/// Bytes of a TOTP secret (160 bits, RFC 4226 section 4).
pub const SECRET_BYTES: usize = 20;
/// Digits of a code.
pub const DIGITS: usize = 6;
/// The issuer in the `otpauth://` URI.
pub const ISSUER: &str = "bothy";

/// A TOTP secret; wiped on drop, `Debug` redacted.
pub struct TotpSecret(Zeroizing<[u8; SECRET_BYTES]>);

impl fmt::Debug for TotpSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TotpSecret(***)")
    }
}

/// A presented code: exactly [`DIGITS`] ASCII digits.
#[derive(Clone)]
pub struct TotpCode(Zeroizing<String>);

impl fmt::Debug for TotpCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TotpCode(***)")
    }
}

impl TotpCode {
    /// The code, if `text` has the form of one.
    pub fn parse(text: &str) -> Option<TotpCode> {
        (text.len() == DIGITS && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| TotpCode(Zeroizing::new(text.to_owned())))
    }
}

fn seal_key(pepper: &Pepper) -> Result<LessSafeKey, IdentityError> {
    let key = Zeroizing::new(pepper.mac(PepperPurpose::TotpSealKey, b""));
    UnboundKey::new(&CHACHA20_POLY1305, key.as_slice())
        .map(LessSafeKey::new)
        .map_err(|_| IdentityError::Crypto("TOTP seal key"))
}

impl TotpSecret {
    /// A new random secret.
    pub fn generate() -> Result<TotpSecret, IdentityError> {
        let mut bytes = Zeroizing::new([0u8; SECRET_BYTES]);
        getrandom::fill(bytes.as_mut_slice())
            .map_err(|_| IdentityError::Crypto("the random source failed"))?;
        Ok(TotpSecret(bytes))
    }

    /// The sealed form for `totp_credentials.secret_sealed`: base64url of
    /// nonce ‖ ciphertext ‖ tag, bound to `credential_id`.
    pub fn seal(&self, pepper: &Pepper, credential_id: Uuid) -> Result<String, IdentityError> {
        let key = seal_key(pepper)?;
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce)
            .map_err(|_| IdentityError::Crypto("the random source failed"))?;
        let mut in_out = Zeroizing::new(self.0.to_vec());
        let aad = db::id_text(&credential_id);
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            &mut *in_out,
        )
        .map_err(|_| IdentityError::Crypto("TOTP sealing"))?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&in_out);
        Ok(bothy_proto::b64::encode(&sealed))
    }

    /// Opens a sealed secret of `credential_id`.
    pub fn unseal(
        pepper: &Pepper,
        credential_id: Uuid,
        sealed: &str,
    ) -> Result<TotpSecret, IdentityError> {
        let unusable = IdentityError::Stored("totp_credentials.secret_sealed");
        let bytes = bothy_proto::b64::decode(sealed).map_err(|_| unusable)?;
        if bytes.len() != NONCE_LEN + SECRET_BYTES + CHACHA20_POLY1305.tag_len() {
            return Err(IdentityError::Stored("totp_credentials.secret_sealed"));
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce)
            .map_err(|_| IdentityError::Stored("totp_credentials.secret_sealed"))?;
        let mut in_out = Zeroizing::new(ciphertext.to_vec());
        let aad = db::id_text(&credential_id);
        let plain = seal_key(pepper)?
            .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut in_out)
            .map_err(|_| IdentityError::Stored("totp_credentials.secret_sealed"))?;
        let secret: [u8; SECRET_BYTES] = (&*plain)
            .try_into()
            .map_err(|_| IdentityError::Stored("totp_credentials.secret_sealed"))?;
        Ok(TotpSecret(Zeroizing::new(secret)))
    }

    fn totp(&self, step_secs: u64, username: &str) -> Result<TOTP, IdentityError> {
        TOTP::new(
            Algorithm::SHA1,
            DIGITS,
            0,
            step_secs,
            self.0.to_vec(),
            Some(ISSUER.to_owned()),
            username.to_owned(),
        )
        .map_err(|_| IdentityError::Crypto("TOTP parameters"))
    }

    /// The `otpauth://totp/bothy:<username>?secret=...&issuer=bothy[&period=N]`
    /// URI an authenticator app imports. It carries the secret: shown once.
    pub fn otpauth_uri(
        &self,
        username: &Username,
        step_secs: u64,
    ) -> Result<Zeroizing<String>, IdentityError> {
        Ok(Zeroizing::new(
            self.totp(step_secs, username.as_str())?.get_url(),
        ))
    }

    /// The code of time step `step` (for tests and the client side).
    pub fn code_at_step(&self, step_secs: u64, step: u64) -> Result<String, IdentityError> {
        Ok(self
            .totp(step_secs, "")?
            .generate(step.saturating_mul(step_secs)))
    }

    /// Which time step `code` belongs to at `now`, among the accepted ones
    /// (current ± skew), compared in constant time. The caller decides about
    /// replays with [`TotpMatch`].
    pub fn match_code(
        &self,
        code: &TotpCode,
        now: UnixMillis,
        auth: &AuthConfig,
    ) -> Result<Option<u64>, IdentityError> {
        let step_secs = auth.totp_step.as_secs().max(1);
        let current = current_step(now, step_secs);
        let skew = u64::from(auth.totp_skew_steps);
        let totp = self.totp(step_secs, "")?;
        let mut found = None;
        // Every candidate is computed and compared, matched or not.
        for step in current.saturating_sub(skew)..=current.saturating_add(skew) {
            let expected = Zeroizing::new(totp.generate(step.saturating_mul(step_secs)));
            if bool::from(expected.as_bytes().ct_eq(code.0.as_bytes())) && found.is_none() {
                found = Some(step);
            }
        }
        Ok(found)
    }
}

/// The RFC 6238 time step of `now` (a time before 1970 counts as 1970).
pub fn current_step(now: UnixMillis, step_secs: u64) -> u64 {
    u64::try_from(now.div_euclid(1000)).unwrap_or(0) / step_secs.max(1)
}

/// An active credential of a person.
#[derive(Debug)]
pub(crate) struct ActiveCredential {
    id: Uuid,
    sealed: String,
    last_used_step: Option<i64>,
}

/// The active credential of `person_id`.
pub(crate) async fn active_credential(
    conn: &mut AnyConnection,
    person_id: Uuid,
) -> Result<Option<ActiveCredential>, IdentityError> {
    let row = sqlx::query(
        "SELECT id, secret_sealed, last_used_step FROM totp_credentials \
         WHERE person_id = $1 AND status = 'active'",
    )
    .bind(db::id_text(&person_id))
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    row.map(|row| {
        Ok(ActiveCredential {
            id: db::get_uuid(&row, "id")?,
            sealed: row
                .try_get("secret_sealed")
                .map_err(|_| IdentityError::Stored("totp_credentials.secret_sealed"))?,
            last_used_step: row
                .try_get("last_used_step")
                .map_err(|_| IdentityError::Stored("totp_credentials.last_used_step"))?,
        })
    })
    .transpose()
}

/// Accepts time step `step` for credential `id` if it is later than the last
/// accepted one — one conditional `UPDATE`, so concurrent uses of one code
/// cannot both win. Whether it was accepted.
pub(crate) async fn accept_step(
    uow: &mut UnitOfWork,
    id: Uuid,
    step: u64,
) -> Result<bool, IdentityError> {
    let step = i64::try_from(step).map_err(|_| IdentityError::Crypto("TOTP step out of range"))?;
    let done = sqlx::query(
        "UPDATE totp_credentials SET last_used_step = $1 \
         WHERE id = $2 AND (last_used_step IS NULL OR last_used_step < $1)",
    )
    .bind(step)
    .bind(db::id_text(&id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(done.rows_affected() == 1)
}

/// Checks `code` against the active credential of `person_id` and accepts its
/// time step in `uow`. The error names the failure for the audit.
pub(crate) async fn verify_person_code(
    uow: &mut UnitOfWork,
    pepper: &Pepper,
    auth: &AuthConfig,
    person_id: Uuid,
    code: Option<&TotpCode>,
) -> Result<Result<(), AuthFailure>, IdentityError> {
    let Some(credential) = active_credential(uow.conn(), person_id).await? else {
        return Ok(Err(AuthFailure::NotEnrolled));
    };
    let Some(code) = code else {
        return Ok(Err(AuthFailure::WrongTotp));
    };
    let secret = TotpSecret::unseal(pepper, credential.id, &credential.sealed)?;
    let Some(step) = secret.match_code(code, uow.now_ms(), auth)? else {
        return Ok(Err(AuthFailure::WrongTotp));
    };
    let last = credential
        .last_used_step
        .and_then(|last| u64::try_from(last).ok());
    if last.is_some_and(|last| step <= last) || !accept_step(uow, credential.id, step).await? {
        return Ok(Err(AuthFailure::TotpReplayed));
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_6238_vectors_sha1() {
        // RFC 6238 appendix B, SHA-1, secret "12345678901234567890", 8 digits.
        let totp = TOTP::new(
            Algorithm::SHA1,
            8,
            0,
            30,
            b"12345678901234567890".to_vec(),
            None,
            String::new(),
        )
        .unwrap();
        for (time, code) in [
            (59, "94287082"),
            (1_111_111_109, "07081804"),
            (1_111_111_111, "14050471"),
            (1_234_567_890, "89005924"),
            (2_000_000_000, "69279037"),
            (20_000_000_000, "65353130"),
        ] {
            assert_eq!(totp.generate(time), code, "{time}");
        }
    }

    fn auth(skew: u32) -> AuthConfig {
        AuthConfig {
            totp_skew_steps: skew,
            ..AuthConfig::default()
        }
    }

    #[test]
    fn matching_honours_the_skew() {
        let secret = TotpSecret::generate().unwrap();
        let now: UnixMillis = 1_796_083_200_000 + 45_000; // step boundary + 1.5 steps
        let current = current_step(now, 30);
        let code = |step| TotpCode::parse(&secret.code_at_step(30, step).unwrap()).unwrap();
        assert_eq!(
            secret.match_code(&code(current), now, &auth(1)).unwrap(),
            Some(current)
        );
        assert_eq!(
            secret
                .match_code(&code(current - 1), now, &auth(1))
                .unwrap(),
            Some(current - 1)
        );
        assert_eq!(
            secret
                .match_code(&code(current + 1), now, &auth(1))
                .unwrap(),
            Some(current + 1)
        );
        assert_eq!(
            secret
                .match_code(&code(current - 2), now, &auth(1))
                .unwrap(),
            None
        );
        assert_eq!(
            secret
                .match_code(&code(current - 1), now, &auth(0))
                .unwrap(),
            None
        );
    }

    #[test]
    fn code_form() {
        assert!(TotpCode::parse("123456").is_some());
        for bad in ["12345", "1234567", "12345a", " 12345", "١٢٣٤٥٦"] {
            assert!(TotpCode::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn sealing_binds_pepper_and_credential() {
        let pepper = Pepper::from_bytes([5; 32]);
        let secret = TotpSecret::generate().unwrap();
        let id = Uuid::from_u128(1);
        let sealed = secret.seal(&pepper, id).unwrap();
        let opened = TotpSecret::unseal(&pepper, id, &sealed).unwrap();
        assert_eq!(*opened.0, *secret.0);
        assert!(TotpSecret::unseal(&pepper, Uuid::from_u128(2), &sealed).is_err());
        assert!(TotpSecret::unseal(&Pepper::from_bytes([6; 32]), id, &sealed).is_err());
        assert!(TotpSecret::unseal(&pepper, id, "AAAA").is_err());
        assert_eq!(format!("{secret:?}"), "TotpSecret(***)");
    }

    #[test]
    fn otpauth_uri_names_issuer_account_and_period() {
        let secret = TotpSecret::generate().unwrap();
        let alice = Username::parse("alice").unwrap();
        let uri = secret.otpauth_uri(&alice, 30).unwrap();
        assert!(
            uri.starts_with("otpauth://totp/bothy:alice?secret="),
            "{}",
            *uri
        );
        assert!(uri.ends_with("&issuer=bothy"), "{}", *uri);
        let parsed = TOTP::from_url(uri.as_str()).unwrap();
        assert_eq!(parsed.generate(59), secret.code_at_step(30, 1).unwrap());
        let uri = secret.otpauth_uri(&alice, 60).unwrap();
        assert!(uri.ends_with("&period=60"), "{}", *uri);
    }
}
