//! A host service's data connection (`/api/v1/hosts/sessions/{id}/stream`):
//! reads `hello`, answers `identify` with the host proof over its challenge
//! (the same proof as the control connection), then speaks binary frames,
//! each one Noise message, with a bothy-noise [`Responder`] for the host side
//! of the handshake.

use bothy_noise::{Responder, StaticKeypair, Transport};
use bothy_proto::control::Identify;
use bothy_proto::data::{self, Hello, HostMessage};
use bothy_proto::jws::HostAuthClaims;
use bothy_server::clock::Clock;
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use crate::hosts::HostKeys;
use crate::server::TestServer;
use crate::ws::{self, WAIT, Ws};

/// What the server sent next on a binary connection.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A binary message.
    Binary(Vec<u8>),
    /// A text frame.
    Text(String),
    /// A close frame: code and text.
    Close(u16, String),
    /// The connection ended without a close frame.
    Ended,
}

/// The next frame (pings and pongs skipped); after a close frame it reads on
/// so tungstenite answers it.
pub async fn next_frame(ws: &mut Ws) -> Frame {
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("the server sent something in time");
        match frame {
            Some(Ok(Message::Binary(bytes))) => return Frame::Binary(bytes.to_vec()),
            Some(Ok(Message::Text(text))) => return Frame::Text(text.to_string()),
            Some(Ok(Message::Close(Some(frame)))) => {
                let _ = tokio::time::timeout(WAIT, ws.next()).await;
                return Frame::Close(u16::from(frame.code), frame.reason.to_string());
            }
            Some(Ok(Message::Close(None))) | None | Some(Err(_)) => return Frame::Ended,
            Some(Ok(_)) => {}
        }
    }
}

/// Reads until the close frame; returns its code and text (binary messages
/// before it are dropped).
pub async fn closed(ws: &mut Ws) -> (u16, String) {
    loop {
        match next_frame(ws).await {
            Frame::Close(code, reason) => return (code, reason),
            Frame::Ended => panic!("the connection ended without a close frame"),
            _ => {}
        }
    }
}

/// The next binary message; panics on anything else.
pub async fn next_binary(ws: &mut Ws) -> Vec<u8> {
    match next_frame(ws).await {
        Frame::Binary(bytes) => bytes,
        other => panic!("expected a binary message, got {other:?}"),
    }
}

/// Opens the data connection of `session_id` and reads `hello`.
pub async fn open(server: &TestServer, session_id: Uuid) -> (Ws, Hello) {
    let mut ws = ws::connect(server, &data::stream_path(&session_id), None)
        .await
        .unwrap_or_else(|refused| panic!("upgrade refused: {refused:?}"));
    let text = match next_frame(&mut ws).await {
        Frame::Text(text) => text,
        other => panic!("expected hello, got {other:?}"),
    };
    let data::ServerMessage::Hello(hello) =
        data::ServerMessage::decode(text.as_bytes(), 1 << 20).expect("hello decodes");
    (ws, hello)
}

/// The proof over `challenge` by `keys` for `host_id`, issued at `iat_ms`.
pub fn proof(keys: &HostKeys, host_id: Uuid, challenge: [u8; 32], iat_ms: i64) -> String {
    HostAuthClaims {
        challenge,
        host_id,
        iat: iat_ms.div_euclid(1000),
    }
    .sign(&keys.auth)
}

/// The identify text of a data connection.
pub fn identify_text(host_id: Uuid, proof: String, session_id: Option<Uuid>) -> String {
    HostMessage::Identify(Identify {
        protocol_version: 1,
        host_id,
        proof,
        host_version: "1.0.0".into(),
        live_sessions: None,
        session_id,
    })
    .to_json()
}

/// Opens the data connection and sends a valid identify (the server answers
/// nothing on success: the connection simply stays open).
pub async fn login(server: &TestServer, session_id: Uuid, host_id: Uuid, keys: &HostKeys) -> Ws {
    let (mut ws, hello) = open(server, session_id).await;
    let proof = proof(keys, host_id, hello.challenge, server.clock.now_ms());
    ws::send(
        &mut ws,
        Message::text(identify_text(host_id, proof, Some(session_id))),
    )
    .await;
    ws
}

/// The host side of the Noise handshake on a data connection.
pub struct HostPeer {
    /// The data connection.
    pub ws: Ws,
    responder: Option<Responder>,
}

impl std::fmt::Debug for HostPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostPeer").finish_non_exhaustive()
    }
}

impl HostPeer {
    /// A logged-in data connection with a responder of `keys`.
    pub async fn login(
        server: &TestServer,
        session_id: Uuid,
        host_id: Uuid,
        keys: &HostKeys,
    ) -> HostPeer {
        let ws = login(server, session_id, host_id, keys).await;
        let keypair = StaticKeypair::from_private_bytes(keys.noise_private);
        HostPeer {
            ws,
            responder: Some(Responder::new(session_id, host_id, &keypair).expect("responder")),
        }
    }

    /// Reads message 1 (returns its payload, the token) and answers message 2.
    pub async fn handshake(&mut self) -> (Vec<u8>, Transport) {
        let message1 = next_binary(&mut self.ws).await;
        let mut responder = self.responder.take().expect("one handshake");
        let read = responder
            .read_message1(&message1)
            .expect("message 1 decrypts");
        let (message2, transport) = responder
            .write_message2(br#"{"v":1,"host_version":"1.0.0","profile":"shell"}"#)
            .expect("message 2");
        ws::send(&mut self.ws, Message::binary(message2)).await;
        (read.payload, transport)
    }
}
