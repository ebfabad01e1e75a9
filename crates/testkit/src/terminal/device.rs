//! A device stream (`/api/v1/terminal/sessions/{id}/stream`): `identify` with
//! the access token, `ready`, then binary frames, each one Noise message, with
//! a bothy-noise [`Initiator`] for the device side of the handshake.

use bothy_noise::{Initiator, Transport};
use bothy_proto::stream::{self, DeviceMessage, Identify};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use super::host_data::{Frame, next_binary, next_frame};
use crate::server::TestServer;
use crate::ws::{self, Ws};

/// Opens the device stream of `session_id` (no header) and sends `identify`
/// with `token`; returns the socket before reading the answer.
pub async fn identify(server: &TestServer, session_id: Uuid, token: Option<&str>) -> Ws {
    let mut ws = ws::connect(server, &stream::stream_path(&session_id), None)
        .await
        .unwrap_or_else(|refused| panic!("upgrade refused: {refused:?}"));
    let text = DeviceMessage::Identify(Identify {
        access_token: token.map(str::to_owned),
    })
    .to_json();
    ws::send(&mut ws, Message::text(text)).await;
    ws
}

/// Opens the device stream of `session_id` with extra upgrade headers (the
/// console's `Cookie` and `Origin`) and sends `identify` with `token`.
pub async fn identify_with_headers(
    server: &TestServer,
    session_id: Uuid,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> Ws {
    let mut ws = ws::connect_with_headers(
        server,
        &stream::stream_path(&session_id),
        None,
        ws::Options::default(),
        headers,
    )
    .await
    .unwrap_or_else(|refused| panic!("upgrade refused: {refused:?}"));
    let text = DeviceMessage::Identify(Identify {
        access_token: token.map(str::to_owned),
    })
    .to_json();
    ws::send(&mut ws, Message::text(text)).await;
    ws
}

/// Expects `ready {session_id}` as the next frame.
pub async fn expect_ready(ws: &mut Ws, session_id: Uuid) {
    match next_frame(ws).await {
        Frame::Text(text) => {
            let ready: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(ready["op"], "ready", "{text}");
            assert_eq!(ready["d"]["session_id"], session_id.to_string());
        }
        other => panic!("expected ready, got {other:?}"),
    }
}

/// [`identify`], then expects `ready {session_id}`.
pub async fn login(server: &TestServer, session_id: Uuid, token: &str) -> Ws {
    let mut ws = identify(server, session_id, Some(token)).await;
    match next_frame(&mut ws).await {
        Frame::Text(text) => {
            let ready: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(ready["op"], "ready", "{text}");
            assert_eq!(ready["d"]["session_id"], session_id.to_string());
        }
        other => panic!("expected ready, got {other:?}"),
    }
    ws
}

/// The device side of the Noise handshake on a device stream.
pub struct DevicePeer {
    /// The device stream.
    pub ws: Ws,
    initiator: Option<Initiator>,
}

impl std::fmt::Debug for DevicePeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePeer").finish_non_exhaustive()
    }
}

impl DevicePeer {
    /// A device stream past `ready`, with an initiator against `host_static`.
    pub async fn login(
        server: &TestServer,
        session_id: Uuid,
        host_id: Uuid,
        host_static: &[u8; 32],
        token: &str,
    ) -> DevicePeer {
        let ws = login(server, session_id, token).await;
        DevicePeer {
            ws,
            initiator: Some(Initiator::new(session_id, host_id, host_static).expect("initiator")),
        }
    }

    /// Sends message 1 with `payload` (the terminal session token); returns
    /// the message as sent.
    pub async fn send_message1(&mut self, payload: &[u8]) -> Vec<u8> {
        let message1 = self
            .initiator
            .as_mut()
            .expect("one handshake")
            .write_message1(payload)
            .expect("message 1");
        ws::send(&mut self.ws, Message::binary(message1.clone())).await;
        message1
    }

    /// Reads message 2: the host's payload and the transport.
    pub async fn read_message2(&mut self) -> (Vec<u8>, Transport) {
        let message2 = next_binary(&mut self.ws).await;
        self.initiator
            .take()
            .expect("one handshake")
            .read_message2(&message2)
            .expect("message 2 decrypts")
    }
}
