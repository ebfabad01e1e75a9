//! TM-T01: every `Noise_NK_25519_ChaChaPoly_SHA256` entry of the cacophony and
//! noise-c vector files, byte for byte, on both backends.
//!
//! The vectors need a raw prologue and fixed ephemeral keys, which the public
//! API never offers; this module uses the crate-private constructors. A missing
//! file, or a file without a matching entry, fails the test (it never skips).

use std::{fs::File, io::Read, path::PathBuf};

use data_encoding::HEXLOWER_PERMISSIVE;
use serde_json::Value;
use zeroize::Zeroizing;

use crate::{
    Initiator, KEY_LEN, PROTOCOL_NAME, Responder, StaticKeypair, Transport, resolver::Backend,
};

fn vector_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/testdata/noise/vectors")
        .join(name)
}

fn load(name: &str) -> Vec<Value> {
    let path = vector_file(name);
    let file = File::open(&path)
        .unwrap_or_else(|error| panic!("TM-T01 needs {}: {error}", path.display()));
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    document["vectors"]
        .as_array()
        .expect("a \"vectors\" array")
        .clone()
}

fn hex(entry: &Value, field: &str) -> Vec<u8> {
    let text = entry[field]
        .as_str()
        .unwrap_or_else(|| panic!("field {field} missing"));
    HEXLOWER_PERMISSIVE.decode(text.as_bytes()).unwrap()
}

fn key(entry: &Value, field: &str) -> [u8; KEY_LEN] {
    hex(entry, field)
        .try_into()
        .unwrap_or_else(|_| panic!("{field} is not 32 bytes"))
}

/// Runs one entry on `backend`; returns how many messages it checked.
fn run_entry(entry: &Value, backend: Backend) -> usize {
    assert_eq!(hex(entry, "init_prologue"), hex(entry, "resp_prologue"));
    let prologue = hex(entry, "init_prologue");
    let host = StaticKeypair::from_private_bytes(key(entry, "resp_static"));
    assert_eq!(
        host.public(),
        key(entry, "init_remote_static"),
        "vector's host key pair"
    );
    let init_ephemeral = Zeroizing::new(key(entry, "init_ephemeral"));
    let resp_ephemeral = Zeroizing::new(key(entry, "resp_ephemeral"));

    let mut initiator =
        Initiator::from_parts(backend, &prologue, &host.public(), init_ephemeral).unwrap();
    let mut responder =
        Responder::from_parts(backend, &prologue, &host, Some(resp_ephemeral)).unwrap();

    let messages = entry["messages"].as_array().expect("messages");
    assert!(
        messages.len() >= 2,
        "an NK entry has both handshake messages"
    );
    let part = |i: usize| {
        (
            hex(&messages[i], "payload"),
            hex(&messages[i], "ciphertext"),
        )
    };

    let (payload, ciphertext) = part(0);
    assert_eq!(
        initiator.write_message1(&payload).unwrap(),
        ciphertext,
        "message 1"
    );
    let message1 = responder.read_message1(&ciphertext).unwrap();
    assert_eq!(message1.payload, payload);
    assert_eq!(message1.initiator_ephemeral, initiator.ephemeral_public());

    let (payload, ciphertext) = part(1);
    let (message2, mut host_side) = responder.write_message2(&payload).unwrap();
    assert_eq!(message2, ciphertext, "message 2");
    let (received, mut device_side) = initiator.read_message2(&ciphertext).unwrap();
    assert_eq!(received, payload);

    if let Some(expected) = entry.get("handshake_hash") {
        let expected = HEXLOWER_PERMISSIVE
            .decode(expected.as_str().unwrap().as_bytes())
            .unwrap();
        assert_eq!(
            device_side.handshake_hash()[..],
            expected[..],
            "initiator handshake hash"
        );
        assert_eq!(
            host_side.handshake_hash()[..],
            expected[..],
            "responder handshake hash"
        );
    }

    for i in 2..messages.len() {
        let (payload, ciphertext) = part(i);
        // Messages alternate, starting with the initiator.
        let (sender, receiver): (&mut Transport, &mut Transport) = if i % 2 == 0 {
            (&mut device_side, &mut host_side)
        } else {
            (&mut host_side, &mut device_side)
        };
        assert_eq!(
            sender.write_message(&payload).unwrap(),
            ciphertext,
            "message {}",
            i + 1
        );
        assert_eq!(
            receiver.read_message(&ciphertext).unwrap(),
            payload,
            "message {}",
            i + 1
        );
    }
    messages.len()
}

/// Checks every matching entry of `file` (matched on `name_field`) on both backends.
fn check_file(file: &str, name_field: &str) {
    let entries: Vec<Value> = load(file)
        .into_iter()
        .filter(|entry| entry[name_field].as_str() == Some(PROTOCOL_NAME))
        .collect();
    let mut messages = 0;
    for entry in &entries {
        for backend in Backend::ALL {
            let checked = run_entry(entry, backend);
            if backend == Backend::ALL[0] {
                messages += checked;
            }
        }
    }
    println!(
        "TM-T01 {file}: {} entries, {messages} messages",
        entries.len()
    );
    assert!(!entries.is_empty(), "{file} holds no {PROTOCOL_NAME} entry");
    assert!(messages > 0, "{file}: no messages checked");
}

#[test]
fn tm_t01_cacophony() {
    check_file("cacophony.txt.gz", "protocol_name");
}

#[test]
fn tm_t01_noise_c() {
    check_file("noise-c-basic.txt.gz", "name");
}
