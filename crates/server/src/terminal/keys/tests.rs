use super::sealing::{seal, unseal};
use super::*;

fn pepper(byte: u8) -> Pepper {
    Pepper::from_bytes([byte; 32])
}

#[test]
fn sealed_key_opens_only_for_its_row_kid_and_pepper() {
    let key = Ed25519SigningKey::from_seed(&[5; 32]);
    let kid = key.kid();
    let id = db::new_id(1_000).unwrap();
    let sealed = seal(&pepper(1), &id, &kid, &key).unwrap();
    assert_eq!(
        b64::decode(&sealed).unwrap().len(),
        NONCE_LEN + SEED_LEN + 16
    );
    assert!(!sealed.contains(&b64::encode(key.seed())));
    // Random nonce: sealing twice gives two texts.
    assert_ne!(sealed, seal(&pepper(1), &id, &kid, &key).unwrap());

    let opened = unseal(&pepper(1), &id, &kid, &sealed).unwrap();
    assert_eq!(opened.seed(), key.seed());

    let other_id = db::new_id(2_000).unwrap();
    let other_kid = Ed25519SigningKey::from_seed(&[6; 32]).kid();
    for (pepper, id, kid) in [
        (pepper(2), id, kid.as_str()),
        (pepper(1), other_id, kid.as_str()),
        (pepper(1), id, other_kid.as_str()),
    ] {
        assert!(matches!(
            unseal(&pepper, &id, kid, &sealed),
            Err(KeyError::Unseal { .. })
        ));
    }
    for bad in ["", "AAAA", &sealed[..sealed.len() - 2], "not base64!"] {
        assert!(matches!(
            unseal(&pepper(1), &id, &kid, bad),
            Err(KeyError::Unseal { .. })
        ));
    }
}

#[test]
fn a_sealed_key_under_another_kid_is_refused() {
    // A row whose kid was changed together with a matching AAD still names
    // the wrong key.
    let key = Ed25519SigningKey::from_seed(&[5; 32]);
    let id = db::new_id(1_000).unwrap();
    let sealed = seal(&pepper(1), &id, "forged", &key).unwrap();
    assert!(matches!(
        unseal(&pepper(1), &id, "forged", &sealed),
        Err(KeyError::Stored { column: "kid" })
    ));
}

#[test]
fn signer_debug_is_redacted() {
    let key = Ed25519SigningKey::from_seed(&[7; 32]);
    let seed = *key.seed();
    let signer = TerminalSigner::for_tests(key);
    let debug = format!("{signer:?} {signer:#?}");
    assert!(debug.contains(signer.kid()));
    assert!(debug.contains("<redacted>"));
    assert!(!debug.contains(&b64::encode(&seed)));
    assert!(!debug.contains(&format!("{seed:?}")));
}

#[test]
fn policy_from_config() {
    let mut config = Config::default();
    let policy = KeyPolicy::from_config(&config);
    assert_eq!(policy.publish_ahead, Duration::from_secs(24 * 3600));
    // 30 s tokens + 30 s leeway + 5 min cache.
    assert_eq!(policy.retire_after, Duration::from_secs(30 + 30 + 300));
    config.terminal.session_token_ttl = Duration::from_millis(1_500);
    config.auth.clock_leeway = Duration::ZERO;
    config.signing_key.cache_ttl = Duration::from_millis(1);
    // exp rounds the lifetime up to whole seconds.
    assert_eq!(
        KeyPolicy::from_config(&config).retire_after,
        Duration::from_millis(2_001)
    );
}

#[test]
fn status_and_step_codes() {
    assert_eq!(
        KeyStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
        ["next", "active", "retiring", "retired"]
    );
    assert_eq!(KeyStatus::parse("retiring"), Some(KeyStatus::Retiring));
    assert_eq!(KeyStatus::parse("Active"), None);
    assert_eq!(
        RotationStep::ALL
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
        ["first", "scheduled", "activated", "emergency", "retired"]
    );
}

#[test]
fn published_means_next_active_or_retiring_until_its_end() {
    let jwk = Ed25519SigningKey::from_seed(&[1; 32]).public_jwk();
    let record = |status, published_until| KeyRecord {
        id: Uuid::nil(),
        kid: jwk.thumbprint(),
        public_jwk: jwk,
        status,
        created_at: 0,
        activates_at: 0,
        activated_at: None,
        retiring_at: None,
        published_until,
        retired_at: None,
    };
    assert!(record(KeyStatus::Next, None).is_published(5));
    assert!(record(KeyStatus::Active, None).is_published(5));
    assert!(record(KeyStatus::Retiring, Some(6)).is_published(5));
    assert!(!record(KeyStatus::Retiring, Some(5)).is_published(5));
    assert!(!record(KeyStatus::Retired, Some(9)).is_published(5));
}
