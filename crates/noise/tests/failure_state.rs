//! D-M2-38-8: after a failed handshake step or a failed read, the object
//! refuses every further call in both directions.

mod common;

use bothy_noise::NoiseError;
use common::{HOST_JSON, TOKEN, connected, start};

fn poisoned<T: std::fmt::Debug>(result: Result<T, NoiseError>) -> bool {
    matches!(result, Err(NoiseError::Poisoned))
}

#[test]
fn tampered_transport_message_poisons_both_directions() {
    let (mut device, mut host) = connected().unwrap();
    let mut tampered = device.write_message(b"ls -l\r").unwrap();
    tampered[3] ^= 0x01;
    let genuine_next = device.write_message(b"exit\r").unwrap();

    assert!(matches!(
        host.read_message(&tampered),
        Err(NoiseError::Decrypt)
    ));
    assert!(
        poisoned(host.read_message(&genuine_next)),
        "decrypt refused after the failure"
    );
    assert!(
        poisoned(host.write_message(b"output")),
        "encrypt refused too"
    );
    assert!(
        poisoned(host.read_message(&genuine_next)),
        "and it stays refused"
    );
}

#[test]
fn replayed_transport_message_fails_and_poisons() {
    let (mut device, mut host) = connected().unwrap();
    let message = device.write_message(b"once").unwrap();
    assert_eq!(host.read_message(&message).unwrap(), b"once");
    assert!(matches!(
        host.read_message(&message),
        Err(NoiseError::Decrypt)
    ));
    assert!(poisoned(host.write_message(b"x")));
}

#[test]
fn reordered_transport_messages_fail() {
    let (mut device, mut host) = connected().unwrap();
    let first = device.write_message(b"first").unwrap();
    let second = device.write_message(b"second").unwrap();
    assert!(matches!(
        host.read_message(&second),
        Err(NoiseError::Decrypt)
    ));
    assert!(poisoned(host.read_message(&first)));
}

#[test]
fn oversize_or_short_received_message_poisons() {
    let (mut device, mut host) = connected().unwrap();
    let genuine = device.write_message(b"fine").unwrap();
    assert!(matches!(
        host.read_message(&[0; 3]),
        Err(NoiseError::MessageTooShort { .. })
    ));
    assert!(poisoned(host.read_message(&genuine)));
    assert!(poisoned(host.write_message(b"x")));
}

#[test]
fn failed_read_of_message1_poisons_the_responder() {
    let (mut device, mut host) = start().unwrap();
    let message1 = device.write_message1(TOKEN).unwrap();
    let mut tampered = message1.clone();
    *tampered.last_mut().unwrap() ^= 0x80;

    assert!(matches!(
        host.read_message1(&tampered),
        Err(NoiseError::Decrypt)
    ));
    // snow alone would accept the genuine message now; the responder must not.
    assert!(poisoned(host.read_message1(&message1)));
    assert!(poisoned(host.write_message2(HOST_JSON)));
}

#[test]
fn failed_read_of_message2_poisons_the_initiator() {
    let (mut device, mut host) = start().unwrap();
    host.read_message1(&device.write_message1(TOKEN).unwrap())
        .unwrap();
    let (message2, _) = host.write_message2(HOST_JSON).unwrap();
    let mut tampered = message2.clone();
    tampered[40] ^= 0x01;

    assert!(matches!(
        device.read_message2(&tampered),
        Err(NoiseError::Decrypt)
    ));
    assert!(poisoned(device.read_message2(&message2)));
    assert!(poisoned(device.write_message1(TOKEN)));
}

#[test]
fn altered_ephemeral_key_in_message1_fails() {
    let (mut device, mut host) = start().unwrap();
    let mut message1 = device.write_message1(TOKEN).unwrap();
    message1[0] ^= 0x01;
    assert!(matches!(
        host.read_message1(&message1),
        Err(NoiseError::Decrypt)
    ));
    assert!(poisoned(host.write_message2(HOST_JSON)));
}

#[test]
fn out_of_order_steps_are_refused_and_poison() {
    let (mut device, mut host) = start().unwrap();
    assert!(matches!(
        host.write_message2(HOST_JSON),
        Err(NoiseError::OutOfOrder)
    ));
    assert!(poisoned(
        host.read_message1(&device.write_message1(TOKEN).unwrap())
    ));

    let (mut device, _) = start().unwrap();
    assert!(matches!(
        device.read_message2(&[0; 64]),
        Err(NoiseError::OutOfOrder)
    ));
    assert!(poisoned(device.write_message1(TOKEN)));

    let (mut device, _) = start().unwrap();
    device.write_message1(TOKEN).unwrap();
    assert!(matches!(
        device.write_message1(TOKEN),
        Err(NoiseError::OutOfOrder)
    ));
}

#[test]
fn finished_handshake_refuses_further_steps() {
    let (mut device, mut host) = start().unwrap();
    let message1 = device.write_message1(TOKEN).unwrap();
    host.read_message1(&message1).unwrap();
    let (message2, _) = host.write_message2(HOST_JSON).unwrap();
    device.read_message2(&message2).unwrap();
    assert!(matches!(
        host.read_message1(&message1),
        Err(NoiseError::OutOfOrder)
    ));
    assert!(matches!(
        device.read_message2(&message2),
        Err(NoiseError::OutOfOrder)
    ));
}
