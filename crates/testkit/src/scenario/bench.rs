//! What the benches of the scene share (`bench/benches/host.rs`,
//! `console.rs`, `cluster.rs`): their `main` (root, a tokio runtime, the
//! failure printed once), the scenario started within a bound, and one
//! opening timed from the open request to the shell's first data frame with
//! its phases as the device sees them.

use std::future::Future;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use bothy_noise::{EphemeralKey, Initiator, Transport};
use bothy_proto::b64;
use bothy_proto::frame::{Direction, Frame, TerminalSize};
use bothy_proto::jws::ephemeral_key_hash;
use bothy_server::db::Engine;
use futures_util::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use super::{Options, Scenario};
use crate::hosts::step_up;
use crate::identity::post;
use crate::terminal::{device, host_data};
use crate::ws::Ws;

/// How long a scenario may take to start.
const START_LIMIT: Duration = Duration::from_secs(180);

/// The `main` of the bench `name`: refuses without root (saying what it
/// `needs` root for), runs `run` on a multi-threaded runtime and prints its
/// error once.
pub fn main_as_root<F>(name: &str, needs: &str, run: impl FnOnce() -> F) -> ExitCode
where
    F: Future<Output = anyhow::Result<()>>,
{
    if !nix::unistd::geteuid().is_root() {
        eprintln!("{name} bench: needs root ({needs})");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{name} bench: tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{name} bench failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// [`Scenario::start`] bounded by 180 s.
pub async fn start_within(engine: Engine, options: Options) -> anyhow::Result<Scenario> {
    tokio::time::timeout(START_LIMIT, Scenario::start(engine, options))
        .await
        .map_err(|_| anyhow!("the scenario did not start within 180 s"))
}

/// One timed opening ([`timed_opening`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    /// From the open request to the first data frame.
    pub took: Duration,
    /// Its phases: the open request's answer, the device stream's login, the
    /// Noise handshake through the relay, `start` to the first byte.
    pub phases: [Duration; 4],
}

/// One opening timed from the open request (after the step-up) to the first
/// data frame of the shell, and its phases as the device sees them: the open
/// request's answer, the device stream's login (through the cluster's edge
/// where there is one), the Noise handshake through the relay (the host's
/// data connection comes up meanwhile), and `start` to the first byte (the
/// gate, the helper, the PTY, the shell's start); the session is closed
/// afterwards, bounded by `close_limit`.
///
/// [`Scenario::open_as`] takes the step-up inside, so this walks the same
/// public steps itself with a clock between step-up and request.
pub async fn timed_opening(scenario: &Scenario, close_limit: Duration) -> anyhow::Result<Opening> {
    let server = &scenario.server;
    let person = &scenario.owner;
    let step_up_id = step_up(server, person).await;
    let ephemeral = EphemeralKey::generate().map_err(|e| anyhow!("ephemeral key: {e}"))?;
    let cek = ephemeral_key_hash(&ephemeral.public());
    let started = Instant::now();
    let reply = post(
        server,
        &format!("/api/v1/hosts/{}/terminal/sessions", scenario.host_id),
        Some(person.token()),
        json!({
            "profile": "shell",
            "columns": 100,
            "rows": 30,
            "client_ephemeral_key_hash": b64::encode(&cek),
            "step_up_id": step_up_id,
        }),
    )
    .await;
    if reply.status != 201 {
        bail!("open: {} {}", reply.status, reply.body);
    }
    let answered = Instant::now();
    let field = |name: &str| {
        reply.body[name]
            .as_str()
            .ok_or_else(|| anyhow!("open reply without {name}"))
    };
    let session_id = Uuid::parse_str(field("session_id")?).context("session_id")?;
    let token = field("token")?.to_owned();
    let noise_key: [u8; 32] =
        b64::decode_array(field("noise_public_key")?).map_err(|e| anyhow!("noise key: {e:?}"))?;
    let mut initiator =
        Initiator::with_ephemeral(session_id, scenario.host_uuid(), &noise_key, ephemeral)
            .map_err(|e| anyhow!("initiator: {e}"))?;
    let mut ws = match &scenario.cluster {
        Some(cluster) => cluster.edge.device_login(session_id, person.token()).await,
        None => device::login(server, session_id, person.token()).await,
    };
    let logged_in = Instant::now();
    let message1 = initiator
        .write_message1(token.as_bytes())
        .map_err(|e| anyhow!("message 1: {e}"))?;
    ws.send(Message::binary(message1))
        .await
        .context("message 1")?;
    let message2 = host_data::next_binary(&mut ws).await;
    let (_, mut transport) = initiator
        .read_message2(&message2)
        .map_err(|e| anyhow!("message 2: {e}"))?;
    let handshaken = Instant::now();
    let size = TerminalSize::new(100, 30).context("size")?;
    send_frame(&mut ws, &mut transport, Frame::Start(size)).await?;
    // The first message after `start` carries the shell's first output.
    let first = host_data::next_binary(&mut ws).await;
    let plain = transport
        .read_message(&first)
        .map_err(|e| anyhow!("decrypt: {e}"))?;
    let took = started.elapsed();
    match Frame::decode(&plain, Direction::HostToDevice) {
        Ok(Frame::Data(_)) => {}
        other => bail!("the first frame after start: {other:?}"),
    }
    send_frame(&mut ws, &mut transport, Frame::Close).await?;
    drop(ws);
    tokio::time::timeout(close_limit, scenario.closed(session_id))
        .await
        .map_err(|_| anyhow!("the timed session did not close within {close_limit:?}"))?;
    let first_byte = started + took;
    Ok(Opening {
        took,
        phases: [
            answered - started,
            logged_in - answered,
            handshaken - logged_in,
            first_byte - handshaken,
        ],
    })
}

/// Encrypts `frame` (device to host) and sends it on the device stream.
pub async fn send_frame(
    ws: &mut Ws,
    transport: &mut Transport,
    frame: Frame<'_>,
) -> anyhow::Result<()> {
    let plain = frame
        .to_vec(Direction::DeviceToHost)
        .map_err(|e| anyhow!("frame: {e}"))?;
    let message = transport
        .write_message(&plain)
        .map_err(|e| anyhow!("encrypt: {e}"))?;
    ws.send(Message::binary(message)).await.context("send")
}
