//! Fixtures shared by the integration tests.

#![allow(dead_code, reason = "each test file uses a different part")]

use bothy_noise::{Initiator, NoiseError, Responder, StaticKeypair, Transport};
use uuid::Uuid;

pub const SESSION_ID: Uuid = Uuid::from_u128(0x0190_0d5e_7a1c_7b2e_8f00_0000_0000_0001);
pub const HOST_ID: Uuid = Uuid::from_u128(0x0190_0d5e_7a1c_7b2e_8f00_0000_0000_0002);
pub const TOKEN: &[u8] = b"eyJhbGciOiJFZERTQSJ9.e30.c2ln";
pub const HOST_JSON: &[u8] = br#"{"v":1,"host_version":"0.1.0","profile":"shell"}"#;

/// A device and a host at the start of the handshake for `SESSION_ID` on `HOST_ID`.
pub fn start() -> Result<(Initiator, Responder), NoiseError> {
    let host = StaticKeypair::generate()?;
    let device = Initiator::new(SESSION_ID, HOST_ID, &host.public())?;
    let responder = Responder::new(SESSION_ID, HOST_ID, &host)?;
    Ok((device, responder))
}

/// A finished handshake: (device transport, host transport).
pub fn connected() -> Result<(Transport, Transport), NoiseError> {
    let (mut device, mut host) = start()?;
    host.read_message1(&device.write_message1(TOKEN)?)?;
    let (message2, host_side) = host.write_message2(HOST_JSON)?;
    let (_, device_side) = device.read_message2(&message2)?;
    Ok((device_side, host_side))
}
