//! The NK handshake of spec 5.2: message 1 (`-> e, es`, payload: the terminal
//! session token) from the device ([`Initiator`]) and message 2 (`<- e, ee`,
//! payload: the host's JSON) from the host ([`Responder`]).
//!
//! Every error of a handshake step poisons the object (D-M2-38-8): snow itself
//! rolls its state back after a failed step and would accept another try, which
//! would let a relay probe the host; this wrapper refuses instead.

use core::fmt;

use snow::{Builder, HandshakeState, params::NoiseParams};
use uuid::Uuid;

use crate::{
    HANDSHAKE_OVERHEAD, KEY_LEN, MAX_MESSAGE1_PAYLOAD_LEN, MAX_MESSAGE2_PAYLOAD_LEN, NoiseError,
    PROTOCOL_NAME, StaticKeypair,
    keys::{PrivateKey, public_key, random_private_key},
    limits::{check_payload, check_received},
    prologue::prologue,
    resolver::{Backend, PRODUCTION_BACKEND, Resolver},
    transport::Transport,
};

/// The device's side of the handshake.
///
/// ```
/// # fn main() -> Result<(), bothy_noise::NoiseError> {
/// # let host = bothy_noise::StaticKeypair::generate()?;
/// # let (session_id, host_id) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
/// # let token = b"terminal session token";
/// let mut device = bothy_noise::Initiator::new(session_id, host_id, &host.public())?;
/// let cek_input = device.ephemeral_public(); // SHA-256 of it is the `cek` claim
/// let message1 = device.write_message1(token)?;
/// # let mut responder = bothy_noise::Responder::new(session_id, host_id, &host)?;
/// # responder.read_message1(&message1)?;
/// # let (message2, _) = responder.write_message2(b"{}")?;
/// let (host_json, mut transport) = device.read_message2(&message2)?;
/// let frame = transport.write_message(b"frame start")?;
/// # Ok(())
/// # }
/// ```
pub struct Initiator {
    handshake: Handshake,
    ephemeral_public: [u8; KEY_LEN],
}

impl Initiator {
    /// Starts the device's handshake with the host `host_id` for the session
    /// `session_id`, against the host's static public key from the pairing.
    ///
    /// Draws the ephemeral key pair now, from the operating system's random
    /// number generator; message 1 carries exactly that key.
    ///
    /// # Errors
    /// [`NoiseError::Rng`] if the random number generator fails.
    pub fn new(
        session_id: Uuid,
        host_id: Uuid,
        host_static_public: &[u8; KEY_LEN],
    ) -> Result<Self, NoiseError> {
        Self::with_backend(PRODUCTION_BACKEND, session_id, host_id, host_static_public)
    }

    pub(crate) fn with_backend(
        backend: Backend,
        session_id: Uuid,
        host_id: Uuid,
        host_static_public: &[u8; KEY_LEN],
    ) -> Result<Self, NoiseError> {
        let ephemeral = random_private_key()?;
        Self::from_parts(
            backend,
            &prologue(session_id, host_id),
            host_static_public,
            ephemeral,
        )
    }

    /// Raw prologue and given ephemeral key: for the constructors above and the
    /// test vectors (TM-T01) only, so it stays private to the crate.
    pub(crate) fn from_parts(
        backend: Backend,
        prologue: &[u8],
        host_static_public: &[u8; KEY_LEN],
        ephemeral: PrivateKey,
    ) -> Result<Self, NoiseError> {
        let ephemeral_public = public_key(&ephemeral);
        let state = builder(backend, Some(ephemeral))?
            .prologue(prologue)?
            .remote_public_key(host_static_public)?
            .build_initiator()?;
        Ok(Self {
            handshake: Handshake::new(state),
            ephemeral_public,
        })
    }

    /// Starts the handshake with an ephemeral key drawn earlier: the device
    /// reports the hash of `e` in the open request (`client_ephemeral_key_hash`)
    /// before the answer tells it the session ID of the prologue.
    ///
    /// # Errors
    /// [`NoiseError::Library`] only if snow refuses the setup (a bug, not input).
    pub fn with_ephemeral(
        session_id: Uuid,
        host_id: Uuid,
        host_static_public: &[u8; KEY_LEN],
        ephemeral: EphemeralKey,
    ) -> Result<Self, NoiseError> {
        Self::from_parts(
            PRODUCTION_BACKEND,
            &prologue(session_id, host_id),
            host_static_public,
            ephemeral.private,
        )
    }

    /// The ephemeral public key `e` that message 1 will carry; the device
    /// reports SHA-256 of it when opening (`client_ephemeral_key_hash`, claim `cek`).
    #[must_use]
    pub fn ephemeral_public(&self) -> [u8; KEY_LEN] {
        self.ephemeral_public
    }

    /// Writes message 1 with `token` (the terminal session token) as payload.
    ///
    /// # Errors
    /// [`NoiseError::PayloadTooLong`] above [`MAX_MESSAGE1_PAYLOAD_LEN`],
    /// [`NoiseError::SmallOrderPublicKey`] if the host key has small order,
    /// [`NoiseError::OutOfOrder`] if message 1 was already written,
    /// [`NoiseError::Poisoned`] after an earlier failure. Each poisons the object.
    pub fn write_message1(&mut self, token: &[u8]) -> Result<Vec<u8>, NoiseError> {
        let mut state = self.handshake.begin(Step::Message1)?;
        let message = write(&mut state, token, MAX_MESSAGE1_PAYLOAD_LEN)?;
        self.handshake = Handshake::Running {
            state,
            next: Step::Message2,
        };
        Ok(message)
    }

    /// Reads message 2 and returns the host's payload and the transport.
    ///
    /// # Errors
    /// [`NoiseError::MessageTooLong`], [`NoiseError::MessageTooShort`],
    /// [`NoiseError::SmallOrderPublicKey`] (the host's `e` has small order),
    /// [`NoiseError::Decrypt`], [`NoiseError::OutOfOrder`] (message 1 not written yet)
    /// or [`NoiseError::Poisoned`]. Each poisons the object.
    pub fn read_message2(&mut self, message: &[u8]) -> Result<(Vec<u8>, Transport), NoiseError> {
        let mut state = self.handshake.begin(Step::Message2)?;
        let payload = read(&mut state, message)?;
        let transport = Transport::from_handshake(*state)?;
        self.handshake = Handshake::Finished;
        Ok((payload, transport))
    }
}

impl fmt::Debug for Initiator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Initiator")
            .field("handshake", &self.handshake)
            .field("ephemeral_public", &self.ephemeral_public)
            .finish()
    }
}

/// The device's ephemeral key pair for one handshake, drawn before the
/// session ID is known (its hash goes into the open request, 6.1 step 1); it is
/// consumed by [`Initiator::with_ephemeral`], so it serves one handshake only.
pub struct EphemeralKey {
    private: PrivateKey,
    public: [u8; KEY_LEN],
}

impl EphemeralKey {
    /// Draws a key pair from the operating system's random number generator.
    ///
    /// # Errors
    /// [`NoiseError::Rng`] if the random number generator fails.
    pub fn generate() -> Result<Self, NoiseError> {
        let private = random_private_key()?;
        let public = public_key(&private);
        Ok(Self { private, public })
    }

    /// The public key `e`; SHA-256 of it is `client_ephemeral_key_hash` (`cek`).
    #[must_use]
    pub fn public(&self) -> [u8; KEY_LEN] {
        self.public
    }
}

impl fmt::Debug for EphemeralKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EphemeralKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// What message 1 brought the host. `Debug` shows the token's length only.
#[derive(Clone, PartialEq, Eq)]
pub struct Message1 {
    /// The payload: the terminal session token (spec 5.3).
    pub payload: Vec<u8>,
    /// The device's ephemeral public key `e`; SHA-256 of it must equal the `cek` claim
    /// (check step 7 of spec 5.3).
    pub initiator_ephemeral: [u8; KEY_LEN],
}

impl fmt::Debug for Message1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message1")
            .field("payload_len", &self.payload.len())
            .field("initiator_ephemeral", &self.initiator_ephemeral)
            .finish()
    }
}

/// The host's side of the handshake.
pub struct Responder {
    handshake: Handshake,
}

impl Responder {
    /// Starts the host's handshake for the session `session_id` of the host
    /// `host_id` (its own ID) with its static key pair.
    ///
    /// # Errors
    /// [`NoiseError::Library`] only if snow refuses the setup (a bug, not input).
    pub fn new(
        session_id: Uuid,
        host_id: Uuid,
        static_keypair: &StaticKeypair,
    ) -> Result<Self, NoiseError> {
        Self::with_backend(PRODUCTION_BACKEND, session_id, host_id, static_keypair)
    }

    pub(crate) fn with_backend(
        backend: Backend,
        session_id: Uuid,
        host_id: Uuid,
        static_keypair: &StaticKeypair,
    ) -> Result<Self, NoiseError> {
        Self::from_parts(
            backend,
            &prologue(session_id, host_id),
            static_keypair,
            None,
        )
    }

    /// Raw prologue and optionally a given ephemeral key: for the constructors
    /// above and the test vectors (TM-T01) only, so it stays private to the crate.
    pub(crate) fn from_parts(
        backend: Backend,
        prologue: &[u8],
        static_keypair: &StaticKeypair,
        ephemeral: Option<PrivateKey>,
    ) -> Result<Self, NoiseError> {
        let state = builder(backend, ephemeral)?
            .prologue(prologue)?
            .local_private_key(static_keypair.private_bytes())?
            .build_responder()?;
        Ok(Self {
            handshake: Handshake::new(state),
        })
    }

    /// Reads message 1: returns the token and the device's ephemeral key `e`.
    ///
    /// # Errors
    /// [`NoiseError::MessageTooLong`], [`NoiseError::MessageTooShort`],
    /// [`NoiseError::SmallOrderPublicKey`] (`e` has small order),
    /// [`NoiseError::Decrypt`] (wrong prologue or host key, or an altered message),
    /// [`NoiseError::OutOfOrder`] or [`NoiseError::Poisoned`]. Each poisons the object.
    pub fn read_message1(&mut self, message: &[u8]) -> Result<Message1, NoiseError> {
        let mut state = self.handshake.begin(Step::Message1)?;
        let payload = read(&mut state, message)?;
        // Message 1 starts with `e` in clear; `read` checked the length.
        let initiator_ephemeral =
            message
                .first_chunk::<KEY_LEN>()
                .copied()
                .ok_or(NoiseError::MessageTooShort {
                    len: message.len(),
                    min: HANDSHAKE_OVERHEAD,
                })?;
        self.handshake = Handshake::Running {
            state,
            next: Step::Message2,
        };
        Ok(Message1 {
            payload,
            initiator_ephemeral,
        })
    }

    /// Writes message 2 with `host_json` as payload and returns it with the transport.
    ///
    /// # Errors
    /// [`NoiseError::PayloadTooLong`] above [`MAX_MESSAGE2_PAYLOAD_LEN`],
    /// [`NoiseError::OutOfOrder`] (message 1 not read yet) or [`NoiseError::Poisoned`].
    /// Each poisons the object.
    pub fn write_message2(&mut self, host_json: &[u8]) -> Result<(Vec<u8>, Transport), NoiseError> {
        let mut state = self.handshake.begin(Step::Message2)?;
        let message = write(&mut state, host_json, MAX_MESSAGE2_PAYLOAD_LEN)?;
        let transport = Transport::from_handshake(*state)?;
        self.handshake = Handshake::Finished;
        Ok((message, transport))
    }
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("handshake", &self.handshake)
            .finish()
    }
}

fn builder(
    backend: Backend,
    ephemeral: Option<PrivateKey>,
) -> Result<Builder<'static>, NoiseError> {
    let params: NoiseParams = PROTOCOL_NAME.parse()?;
    Ok(Builder::with_resolver(
        params,
        Box::new(Resolver::new(backend, ephemeral)),
    ))
}

/// The two messages of NK, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Message1,
    Message2,
}

/// What both roles share: snow's state, the next step, and the poison rule.
enum Handshake {
    Running {
        state: Box<HandshakeState>,
        next: Step,
    },
    Finished,
    Poisoned,
}

impl Handshake {
    fn new(state: HandshakeState) -> Self {
        Handshake::Running {
            state: Box::new(state),
            next: Step::Message1,
        }
    }

    /// Hands out snow's state for `step` and leaves the handshake poisoned: the
    /// caller puts the state back (or finishes) only when the step succeeded, so
    /// every error, including this one, poisons.
    fn begin(&mut self, step: Step) -> Result<Box<HandshakeState>, NoiseError> {
        match core::mem::replace(self, Handshake::Poisoned) {
            Handshake::Running { state, next } if next == step => Ok(state),
            Handshake::Poisoned => Err(NoiseError::Poisoned),
            Handshake::Running { .. } | Handshake::Finished => Err(NoiseError::OutOfOrder),
        }
    }
}

/// Writes one handshake message; the length checks run before snow sees the payload.
fn write(state: &mut HandshakeState, payload: &[u8], max: usize) -> Result<Vec<u8>, NoiseError> {
    check_payload(payload.len(), max)?;
    let mut message = vec![0_u8; HANDSHAKE_OVERHEAD + payload.len()];
    let len = state.write_message(payload, &mut message)?;
    message.truncate(len);
    Ok(message)
}

/// Reads one handshake message; the length checks run before snow sees it.
fn read(state: &mut HandshakeState, message: &[u8]) -> Result<Vec<u8>, NoiseError> {
    check_received(message.len(), HANDSHAKE_OVERHEAD)?;
    let mut payload = vec![0_u8; message.len()];
    let len = state.read_message(message, &mut payload)?;
    payload.truncate(len);
    Ok(payload)
}

impl fmt::Debug for Handshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Handshake::Running {
                next: Step::Message1,
                ..
            } => "AwaitingMessage1",
            Handshake::Running {
                next: Step::Message2,
                ..
            } => "AwaitingMessage2",
            Handshake::Finished => "Finished",
            Handshake::Poisoned => "Poisoned",
        })
    }
}
