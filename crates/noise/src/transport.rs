//! Transport messages after the handshake, both ways (spec 5.2).
//!
//! Runs on snow's `StatelessTransportState` with our own counter per
//! direction, so this module alone decides which nonce is used: a direction
//! refuses the nonce 2^64 - 1 (D-M2-38-8), and a failed read poisons both
//! directions.

use core::fmt;

use snow::{HandshakeState, StatelessTransportState};

use crate::{
    MAX_TRANSPORT_PLAINTEXT_LEN, NoiseError, TAG_LEN,
    limits::{check_payload, check_received},
};

/// Length of the handshake hash (SHA-256).
pub const HANDSHAKE_HASH_LEN: usize = 32;

/// One side's transport after a successful handshake: writes messages to the
/// peer and reads the peer's messages, in order.
///
/// A failed [`Transport::read_message`] (too long, too short, or not authentic)
/// poisons it: every later call in both directions returns
/// [`NoiseError::Poisoned`]. A refused [`Transport::write_message`] (plaintext
/// too long, nonces used up) changes nothing and does not poison.
/// An empty plaintext is allowed both ways: it gives a 16-byte message (the tag alone).
pub struct Transport {
    state: StatelessTransportState,
    handshake_hash: [u8; HANDSHAKE_HASH_LEN],
    /// Nonce of the next message we write.
    send_nonce: u64,
    /// Nonce of the next message we expect to read.
    receive_nonce: u64,
    poisoned: bool,
}

impl Transport {
    pub(crate) fn from_handshake(handshake: HandshakeState) -> Result<Self, NoiseError> {
        // SHA-256: the hash is always 32 bytes.
        let handshake_hash = handshake
            .get_handshake_hash()
            .first_chunk::<HANDSHAKE_HASH_LEN>()
            .copied()
            .ok_or(NoiseError::Library(snow::Error::Input))?;
        Ok(Self {
            state: handshake.into_stateless_transport_mode()?,
            handshake_hash,
            send_nonce: 0,
            receive_nonce: 0,
            poisoned: false,
        })
    }

    /// The handshake hash `h` of the finished handshake; both sides have the same.
    #[must_use]
    pub fn handshake_hash(&self) -> [u8; HANDSHAKE_HASH_LEN] {
        self.handshake_hash
    }

    /// Encrypts `plaintext` into the next message to the peer.
    ///
    /// # Errors
    /// [`NoiseError::PayloadTooLong`] above [`MAX_TRANSPORT_PLAINTEXT_LEN`],
    /// [`NoiseError::NonceExhausted`] when this direction reached nonce 2^64 - 1,
    /// [`NoiseError::Poisoned`] after a failed read.
    pub fn write_message(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, NoiseError> {
        if self.poisoned {
            return Err(NoiseError::Poisoned);
        }
        check_payload(plaintext.len(), MAX_TRANSPORT_PLAINTEXT_LEN)?;
        let nonce = next_nonce(self.send_nonce)?;
        let mut message = vec![0_u8; plaintext.len() + TAG_LEN];
        let len = self.state.write_message(nonce, plaintext, &mut message)?;
        message.truncate(len);
        self.send_nonce = nonce + 1;
        Ok(message)
    }

    /// Decrypts the next message from the peer.
    ///
    /// # Errors
    /// [`NoiseError::MessageTooLong`], [`NoiseError::MessageTooShort`] or
    /// [`NoiseError::Decrypt`], each of which poisons the transport;
    /// [`NoiseError::NonceExhausted`] when this direction reached nonce 2^64 - 1;
    /// [`NoiseError::Poisoned`] after an earlier failed read.
    pub fn read_message(&mut self, message: &[u8]) -> Result<Vec<u8>, NoiseError> {
        if self.poisoned {
            return Err(NoiseError::Poisoned);
        }
        let nonce = next_nonce(self.receive_nonce)?;
        let result = self.decrypt(nonce, message);
        match result {
            Ok(_) => self.receive_nonce = nonce + 1,
            Err(_) => self.poisoned = true,
        }
        result
    }

    fn decrypt(&self, nonce: u64, message: &[u8]) -> Result<Vec<u8>, NoiseError> {
        check_received(message.len(), TAG_LEN)?;
        // As long as the message: ring's backend then decrypts in place without a copy.
        let mut plaintext = vec![0_u8; message.len()];
        let len = self.state.read_message(nonce, message, &mut plaintext)?;
        plaintext.truncate(len);
        Ok(plaintext)
    }

    /// Test seam: moves both counters, to reach the end of the nonce space.
    #[cfg(test)]
    pub(crate) fn set_nonces(&mut self, send: u64, receive: u64) {
        self.send_nonce = send;
        self.receive_nonce = receive;
    }
}

/// `n` if it may still be used: 2^64 - 1 never is (section 5.1 of the Noise specification).
fn next_nonce(n: u64) -> Result<u64, NoiseError> {
    if n == u64::MAX {
        Err(NoiseError::NonceExhausted)
    } else {
        Ok(n)
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("send_nonce", &self.send_nonce)
            .field("receive_nonce", &self.receive_nonce)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::{Initiator, Responder, StaticKeypair};

    fn pair() -> (Transport, Transport) {
        let host = StaticKeypair::generate().unwrap();
        let (session, host_id) = (Uuid::from_u128(7), Uuid::from_u128(8));
        let mut device = Initiator::new(session, host_id, &host.public()).unwrap();
        let mut responder = Responder::new(session, host_id, &host).unwrap();
        responder
            .read_message1(&device.write_message1(b"token").unwrap())
            .unwrap();
        let (message2, host_side) = responder.write_message2(b"{}").unwrap();
        let (_, device_side) = device.read_message2(&message2).unwrap();
        (device_side, host_side)
    }

    #[test]
    fn nonce_max_minus_one_works_once_then_refused_both_ways() {
        let (mut device, mut host) = pair();
        let last = u64::MAX - 1;
        device.set_nonces(last, last);
        host.set_nonces(last, last);

        let to_host = device.write_message(b"last one").unwrap();
        assert_eq!(host.read_message(&to_host).unwrap(), b"last one");
        let to_device = host.write_message(b"last back").unwrap();
        assert_eq!(device.read_message(&to_device).unwrap(), b"last back");

        assert!(matches!(
            device.write_message(b"x"),
            Err(NoiseError::NonceExhausted)
        ));
        assert!(matches!(
            host.write_message(b"x"),
            Err(NoiseError::NonceExhausted)
        ));
        // Reading refuses before touching the message: nonce 2^64 - 1 is never tried.
        assert!(matches!(
            host.read_message(&to_host),
            Err(NoiseError::NonceExhausted)
        ));
        assert!(matches!(
            device.read_message(&to_device),
            Err(NoiseError::NonceExhausted)
        ));
    }

    #[test]
    fn nonce_exhaustion_of_one_direction_leaves_the_other() {
        let (mut device, mut host) = pair();
        device.set_nonces(u64::MAX, 0);
        assert!(matches!(
            device.write_message(b"x"),
            Err(NoiseError::NonceExhausted)
        ));
        let message = host.write_message(b"still fine").unwrap();
        assert_eq!(device.read_message(&message).unwrap(), b"still fine");
    }

    #[test]
    fn counters_advance_per_message_and_skip_nothing() {
        let (mut device, mut host) = pair();
        for i in 0..5_u64 {
            let message = device.write_message(&i.to_be_bytes()).unwrap();
            assert_eq!(host.read_message(&message).unwrap(), i.to_be_bytes());
        }
        assert_eq!((device.send_nonce, host.receive_nonce), (5, 5));
        assert_eq!((device.receive_nonce, host.send_nonce), (0, 0));
    }
}
