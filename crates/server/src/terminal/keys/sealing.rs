//! The private key at rest (the module docs of [`super`], "Secrets"): a new
//! key sealed for its row, and unsealed only into a [`TerminalSigner`].

use super::*;

/// A freshly generated key, sealed for its row.
pub(super) struct NewKey {
    pub(super) id: Uuid,
    pub(super) kid: String,
    pub(super) jwk: Ed25519PublicJwk,
    pub(super) sealed: String,
}

impl NewKey {
    pub(super) fn generate(pepper: &Pepper, now: UnixMillis) -> Result<NewKey, KeyError> {
        let id = db::new_id(now)?;
        // Dropped (and wiped) at the end of this function; only the sealed
        // form leaves it.
        let key = Ed25519SigningKey::generate()?;
        let jwk = key.public_jwk();
        let kid = jwk.thumbprint();
        let sealed = seal(pepper, &id, &kid, &key)?;
        Ok(NewKey {
            id,
            kid,
            jwk,
            sealed,
        })
    }

    pub(super) async fn insert(
        &self,
        uow: &mut UnitOfWork,
        status: KeyStatus,
        activates_at: UnixMillis,
        now: UnixMillis,
    ) -> Result<(), KeyError> {
        let activated_at = (status == KeyStatus::Active).then_some(activates_at);
        sqlx::query(
            "INSERT INTO server_signing_keys \
             (id, purpose, kid, public_jwk, private_sealed, status, created_at, activates_at, \
              activated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(db::id_text(&self.id))
        .bind(PURPOSE_TERMINAL)
        .bind(&self.kid)
        .bind(self.jwk.to_json())
        .bind(&self.sealed)
        .bind(status.as_str())
        .bind(now)
        .bind(activates_at)
        .bind(activated_at)
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
        Ok(())
    }
}

fn seal_key(pepper: &Pepper) -> Result<LessSafeKey, KeyError> {
    let key = Zeroizing::new(pepper.mac(PepperPurpose::TerminalKeySealKey, b""));
    UnboundKey::new(&CHACHA20_POLY1305, key.as_slice())
        .map(LessSafeKey::new)
        .map_err(|_| KeyError::Seal)
}

/// The associated data of a sealed key: version, row ID, purpose and kid.
fn seal_aad(id: &Uuid, kid: &str) -> String {
    format!(
        "bothy.v1.server_signing_key\0{}\0{PURPOSE_TERMINAL}\0{kid}",
        db::id_text(id)
    )
}

/// `private_sealed`: base64url of nonce ‖ ciphertext ‖ tag (12 + 32 + 16 bytes).
pub(super) fn seal(
    pepper: &Pepper,
    id: &Uuid,
    kid: &str,
    key: &Ed25519SigningKey,
) -> Result<String, KeyError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|_| KeyError::Random)?;
    // Room for the tag up front: growing the vector would leave a copy of the
    // private key in freed memory.
    let mut in_out = Zeroizing::new(Vec::with_capacity(SEED_LEN + CHACHA20_POLY1305.tag_len()));
    in_out.extend_from_slice(key.seed());
    let aad = seal_aad(id, kid);
    seal_key(pepper)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            &mut *in_out,
        )
        .map_err(|_| KeyError::Seal)?;
    let mut sealed = nonce.to_vec();
    sealed.extend_from_slice(&in_out);
    Ok(b64::encode(&sealed))
}

/// Opens `private_sealed` of the row `id` with `kid`; the key's own kid must
/// be `kid`.
pub(super) fn unseal(
    pepper: &Pepper,
    id: &Uuid,
    kid: &str,
    sealed: &str,
) -> Result<Ed25519SigningKey, KeyError> {
    let refused = || KeyError::Unseal {
        kid: kid.to_owned(),
    };
    let bytes = b64::decode(sealed).map_err(|_| refused())?;
    if bytes.len() != NONCE_LEN + SEED_LEN + CHACHA20_POLY1305.tag_len() {
        return Err(refused());
    }
    let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| refused())?;
    let mut in_out = Zeroizing::new(ciphertext.to_vec());
    let aad = seal_aad(id, kid);
    let plain = seal_key(pepper)?
        .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut in_out)
        .map_err(|_| refused())?;
    let seed = Zeroizing::new(<[u8; SEED_LEN]>::try_from(&*plain).map_err(|_| refused())?);
    let key = Ed25519SigningKey::from_seed(&seed);
    if key.kid() != kid {
        return Err(KeyError::Stored { column: "kid" });
    }
    Ok(key)
}
