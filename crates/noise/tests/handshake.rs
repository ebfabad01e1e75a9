//! TM-T02, Rust half: a handshake between an initiator and a responder of this
//! crate succeeds only with the right prologue (session ID, host ID) and the
//! right host key; transport then works both ways.

mod common;

use bothy_noise::{Initiator, Message1, NoiseError, Responder, StaticKeypair};
use common::{HOST_ID, HOST_JSON, SESSION_ID, TOKEN, start};
use uuid::Uuid;

#[test]
fn handshake_and_transport_both_ways() {
    let (mut device, mut host) = start().unwrap();
    let e = device.ephemeral_public();

    let message1 = device.write_message1(TOKEN).unwrap();
    assert_eq!(
        message1[..32],
        e,
        "message 1 carries the announced ephemeral key in clear"
    );
    let Message1 {
        payload,
        initiator_ephemeral,
    } = host.read_message1(&message1).unwrap();
    assert_eq!(payload, TOKEN);
    assert_eq!(
        initiator_ephemeral, e,
        "the host sees the e whose hash is the cek claim"
    );

    let (message2, mut host_side) = host.write_message2(HOST_JSON).unwrap();
    let (host_json, mut device_side) = device.read_message2(&message2).unwrap();
    assert_eq!(host_json, HOST_JSON);
    assert_eq!(device_side.handshake_hash(), host_side.handshake_hash());

    for round in 0..3_u8 {
        let frame = [b'd', round];
        let to_host = device_side.write_message(&frame).unwrap();
        assert_ne!(to_host[..2], frame, "transport messages are encrypted");
        assert_eq!(host_side.read_message(&to_host).unwrap(), frame);
        let output = [b'h', round];
        let to_device = host_side.write_message(&output).unwrap();
        assert_eq!(device_side.read_message(&to_device).unwrap(), output);
    }
}

#[test]
fn each_initiator_draws_a_fresh_ephemeral_key() {
    let host = StaticKeypair::generate().unwrap();
    let a = Initiator::new(SESSION_ID, HOST_ID, &host.public()).unwrap();
    let b = Initiator::new(SESSION_ID, HOST_ID, &host.public()).unwrap();
    assert_ne!(a.ephemeral_public(), b.ephemeral_public());
}

#[test]
fn responder_from_stored_private_key() {
    let generated = StaticKeypair::generate().unwrap();
    let stored = *generated.private_bytes();
    let restored = StaticKeypair::from_private_bytes(stored);
    assert_eq!(restored.public(), generated.public());

    let mut device = Initiator::new(SESSION_ID, HOST_ID, &generated.public()).unwrap();
    let mut host = Responder::new(SESSION_ID, HOST_ID, &restored).unwrap();
    assert_eq!(
        host.read_message1(&device.write_message1(TOKEN).unwrap())
            .unwrap()
            .payload,
        TOKEN
    );
}

#[test]
fn static_keypair_debug_redacts_private_key() {
    let keypair = StaticKeypair::from_private_bytes([0x5a; 32]);
    let shown = format!("{keypair:?}");
    assert!(shown.contains("redacted"), "{shown}");
    assert!(
        !shown.contains("90, 90, 90"),
        "private bytes must not appear: {shown}"
    );
}

/// The host is `SESSION_ID` / `HOST_ID` with its own key; the device tries with
/// the given IDs and host public key. Returns what the host makes of message 1.
fn attempt(
    session_id: Uuid,
    host_id: Uuid,
    device_key: Option<&StaticKeypair>,
) -> Result<Message1, NoiseError> {
    let host_key = StaticKeypair::generate()?;
    let device_key = device_key.unwrap_or(&host_key);
    let mut device = Initiator::new(session_id, host_id, &device_key.public())?;
    let mut host = Responder::new(SESSION_ID, HOST_ID, &host_key)?;
    let message1 = device.write_message1(TOKEN)?;
    host.read_message1(&message1)
}

#[test]
fn right_prologue_and_key_succeed() {
    assert_eq!(attempt(SESSION_ID, HOST_ID, None).unwrap().payload, TOKEN);
}

#[test]
fn swapped_session_and_host_id_fail() {
    assert!(matches!(
        attempt(HOST_ID, SESSION_ID, None),
        Err(NoiseError::Decrypt)
    ));
}

#[test]
fn other_session_id_fails() {
    let other = Uuid::from_u128(SESSION_ID.as_u128() + 1);
    assert!(matches!(
        attempt(other, HOST_ID, None),
        Err(NoiseError::Decrypt)
    ));
}

#[test]
fn other_host_id_fails() {
    let other = Uuid::from_u128(HOST_ID.as_u128() ^ (1 << 64));
    assert!(matches!(
        attempt(SESSION_ID, other, None),
        Err(NoiseError::Decrypt)
    ));
}

#[test]
fn wrong_host_static_key_fails() {
    let impostor = StaticKeypair::generate().unwrap();
    assert!(matches!(
        attempt(SESSION_ID, HOST_ID, Some(&impostor)),
        Err(NoiseError::Decrypt)
    ));
}

#[test]
fn message1_debug_hides_the_token() {
    let (mut device, mut host) = start().unwrap();
    let message1 = host
        .read_message1(&device.write_message1(TOKEN).unwrap())
        .unwrap();
    assert_eq!(TOKEN[..4], [101, 121, 74, 104]);
    let shown = format!("{message1:?}");
    assert!(
        shown.contains(&format!("payload_len: {}", TOKEN.len())),
        "{shown}"
    );
    assert!(
        !shown.contains("101, 121, 74, 104"),
        "token bytes must not appear: {shown}"
    );
}

/// The device draws `e` before it knows the session ID (its hash goes into the
/// open request); the initiator built later carries exactly that `e`.
#[test]
fn an_ephemeral_key_drawn_first_is_the_e_of_message_1() {
    let host = StaticKeypair::generate().expect("host key");
    let ephemeral = bothy_noise::EphemeralKey::generate().expect("ephemeral key");
    let e = ephemeral.public();
    let session_id = Uuid::from_u128(1);
    let host_id = Uuid::from_u128(2);
    let mut device = Initiator::with_ephemeral(session_id, host_id, &host.public(), ephemeral)
        .expect("initiator");
    assert_eq!(device.ephemeral_public(), e);
    let message1 = device.write_message1(b"token").expect("message 1");
    let mut responder = Responder::new(session_id, host_id, &host).expect("responder");
    let read = responder.read_message1(&message1).expect("read");
    assert_eq!(read.initiator_ephemeral, e);
    assert_eq!(read.payload, b"token");
}
