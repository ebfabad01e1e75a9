//! A test host service's control connection (`GET /api/v1/hosts/connect`,
//! spec 3.5), speaking the real protocol of bothy-proto: it reads `hello`,
//! signs the proof over the challenge with the host's login key
//! ([`HostKeys`]), sends `identify`, `report`, `heartbeat`,
//! `session.started` / `session.ended`, and decodes every server frame
//! strictly ([`ServerMessage::decode`]).

use bothy_proto::codes::{CloseDetail, CloseReason};
use bothy_proto::control::{
    Heartbeat, HeartbeatAck, Hello, HostMessage, Identify, Ready, ServerMessage, SessionEnded,
    SessionStarted,
};
use bothy_proto::doctor::{Check, DoctorEntry};
use bothy_proto::jws::HostAuthClaims;
use bothy_proto::report::{
    ProfileKind, Report, ReportedProfile, ReportedSessionUser, ReportedWorkdir,
};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use crate::hosts::HostKeys;
use crate::server::TestServer;
use crate::ws::{self, Next, Ws};

/// The path of the control connection.
pub const CONNECT_PATH: &str = "/api/v1/hosts/connect";

/// The `host_version` the peer sends unless told otherwise (the one
/// `hosts_common::pair_body` pairs with).
pub const HOST_VERSION: &str = "1.4.0";

/// The largest frame the peer decodes.
const MAX_FRAME: usize = 1 << 20;

/// A control connection of a test host service.
#[derive(Debug)]
pub struct HostControl {
    /// The socket.
    pub ws: Ws,
    /// The hello the server sent.
    pub hello: Hello,
}

/// What the server sent next, decoded.
#[derive(Debug)]
pub enum Received {
    /// A message.
    Message(ServerMessage),
    /// A close frame with code and reason.
    Close(u16, String),
    /// The connection ended without a close frame.
    Ended,
}

impl HostControl {
    /// Opens the connection and reads hello.
    pub async fn connect(server: &TestServer) -> HostControl {
        HostControl::connect_to(server.port, &server.ca_file).await
    }

    /// [`HostControl::connect`] to `localhost:port` trusting `ca_file`: a
    /// server that is no [`TestServer`] of this process (a node of its own
    /// process, [`crate::scenario::cluster::ServerProcess`]).
    pub async fn connect_to(port: u16, ca_file: &std::path::Path) -> HostControl {
        let mut ws = ws::connect_to(
            port,
            ca_file,
            CONNECT_PATH,
            None,
            ws::Options::default(),
            &[],
        )
        .await
        .unwrap_or_else(|refused| panic!("upgrade refused: {refused:?}"));
        let hello = match next_message(&mut ws).await {
            Received::Message(ServerMessage::Hello(hello)) => hello,
            other => panic!("expected hello, got {other:?}"),
        };
        HostControl { ws, hello }
    }

    /// A proof over this connection's challenge for `host_id`, signed with
    /// `keys`' login key at `iat` (Unix seconds).
    pub fn proof(&self, keys: &HostKeys, host_id: Uuid, iat: i64) -> String {
        HostAuthClaims {
            challenge: self.hello.challenge,
            host_id,
            iat,
        }
        .sign(&keys.auth)
    }

    /// The `iat` of the hello's server time.
    pub fn hello_iat(&self) -> i64 {
        i64::try_from(self.hello.server_time / 1000).expect("server time")
    }

    /// A complete identify of protocol version 1 with a fresh proof.
    pub fn identify_for(&self, keys: &HostKeys, host_id: Uuid, live: &[Uuid]) -> Identify {
        Identify {
            protocol_version: 1,
            host_id,
            proof: self.proof(keys, host_id, self.hello_iat()),
            host_version: HOST_VERSION.to_owned(),
            live_sessions: Some(live.to_vec()),
            session_id: None,
        }
    }

    /// Sends a host message.
    pub async fn send(&mut self, message: &HostMessage) {
        ws::send(&mut self.ws, Message::text(message.to_json())).await;
    }

    /// Sends a heartbeat with no active session.
    pub async fn heartbeat_send(&mut self) {
        self.send(&HostMessage::Heartbeat(bothy_proto::control::Heartbeat {
            active_sessions: 0,
        }))
        .await;
    }

    /// Sends raw text.
    pub async fn send_text(&mut self, text: &str) {
        ws::send(&mut self.ws, Message::text(text.to_owned())).await;
    }

    /// The next server frame.
    pub async fn recv(&mut self) -> Received {
        next_message(&mut self.ws).await
    }

    /// The next server message (panics on a close).
    pub async fn message(&mut self) -> ServerMessage {
        match self.recv().await {
            Received::Message(message) => message,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// Reads until the close frame; returns code and reason.
    pub async fn closed(&mut self) -> (u16, String) {
        loop {
            match self.recv().await {
                Received::Message(_) => {}
                Received::Close(code, reason) => return (code, reason),
                Received::Ended => panic!("the connection ended without a close frame"),
            }
        }
    }

    /// Sends identify and expects ready.
    pub async fn identify(&mut self, keys: &HostKeys, host_id: Uuid, live: &[Uuid]) -> Ready {
        let identify = self.identify_for(keys, host_id, live);
        self.send(&HostMessage::Identify(identify)).await;
        match self.message().await {
            ServerMessage::Ready(ready) => ready,
            other => panic!("expected ready, got {other:?}"),
        }
    }

    /// Connects and logs in (no live sessions).
    pub async fn login(server: &TestServer, keys: &HostKeys, host_id: Uuid) -> HostControl {
        let mut control = HostControl::connect(server).await;
        control.identify(keys, host_id, &[]).await;
        control
    }

    /// [`HostControl::login`], then a report naming `users`; waits until the
    /// server counts the host as connected.
    pub async fn connected(
        server: &TestServer,
        keys: &HostKeys,
        host_id: Uuid,
        users: &[&str],
    ) -> HostControl {
        let mut control = HostControl::login(server, keys, host_id).await;
        control.send(&HostMessage::Report(report(users))).await;
        control.wait_connected(server, host_id).await;
        control
    }

    /// Waits (on a heartbeat round trip, no sleep) until the report was applied.
    pub async fn wait_connected(&mut self, server: &TestServer, host_id: Uuid) {
        for _ in 0..50 {
            if server.state.control_links().is_connected(host_id) {
                return;
            }
            self.heartbeat().await;
        }
        panic!("the host never became connected");
    }

    /// Sends heartbeat and returns the heartbeat_ack (skipping other frames).
    pub async fn heartbeat(&mut self) -> HeartbeatAck {
        self.send(&HostMessage::Heartbeat(Heartbeat { active_sessions: 0 }))
            .await;
        loop {
            if let ServerMessage::HeartbeatAck(ack) = self.message().await {
                return ack;
            }
        }
    }

    /// Sends session.started.
    pub async fn session_started(&mut self, session_id: Uuid) {
        self.send(&HostMessage::SessionStarted(SessionStarted { session_id }))
            .await;
    }

    /// Sends session.ended.
    pub async fn session_ended(
        &mut self,
        session_id: Uuid,
        close_reason: CloseReason,
        close_detail: Option<CloseDetail>,
        exit_code: Option<i32>,
    ) {
        self.send(&HostMessage::SessionEnded(SessionEnded {
            session_id,
            close_reason,
            close_detail,
            exit_code,
        }))
        .await;
    }
}

/// A valid report: a shell and a claude profile (as `pair_body`), `users`
/// without working directories, every check passed, not the server host.
pub fn report(users: &[&str]) -> Report {
    Report {
        platform: "linux".to_owned(),
        os_version: "Debian 12".to_owned(),
        profiles: vec![
            ReportedProfile {
                name: "shell".to_owned(),
                display_name: "Shell".to_owned(),
                kind: ProfileKind::Shell,
            },
            ReportedProfile {
                name: "claude".to_owned(),
                display_name: "Claude Code".to_owned(),
                kind: ProfileKind::Claude,
            },
        ],
        session_users: users
            .iter()
            .map(|name| ReportedSessionUser {
                name: (*name).to_owned(),
                workdirs: Vec::<ReportedWorkdir>::new(),
            })
            .collect(),
        doctor: Check::ALL
            .iter()
            .map(|&check| DoctorEntry::passed(check))
            .collect(),
        is_server_host: false,
        require_local_confirm: false,
    }
}

async fn next_message(ws: &mut Ws) -> Received {
    match ws::next(ws).await {
        Next::Json(value) => {
            let text = value.to_string();
            Received::Message(
                ServerMessage::decode(text.as_bytes(), MAX_FRAME)
                    .unwrap_or_else(|error| panic!("server frame does not decode: {error}")),
            )
        }
        Next::Close(code, reason) => Received::Close(code, reason),
        Next::Ended => Received::Ended,
    }
}
