//! The relay benchmark (DESIGN §6; issue 5): `cargo bench -p bothy-bench
//! --bench relay` (release build). One figure per line, `name: value unit`:
//!
//! - throughput of 64 KiB binary messages (65 535 bytes, the largest Noise
//!   message) from the host's data connection to the device stream through
//!   the real server's relay (TLS on 127.0.0.1, SQLite), side by side with the
//!   same client pair over a direct TLS WebSocket connection, and the ratio;
//! - per-message forwarding latency p50 and p99 (one message in flight), relay
//!   and direct, and the ratios;
//! - the resident memory the server process gains per idle paired session:
//!   1,000 sessions paired on both sides by a child process (so the clients'
//!   own memory is not counted), the RSS delta of this process / 1,000.
//!
//! Targets (reported, not gated): ≥ 2 GiB/s relay-only, ≤ 16 KiB per idle
//! session. The server runs on a manual clock that stands still while a
//! figure is taken, so no relay deadline (idle, detach, open) interferes, and
//! its rate limits are raised for the 1,000 logins.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use bothy_bench::{Account, BenchServer, Clients, direct_pair, quantile, rss_kib};
use bothy_server::clock::Clock;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use uuid::Uuid;

/// The size of one message: the largest Noise message (5.2).
const MESSAGE: usize = 65_535;
/// Messages of the throughput run (about 512 MiB).
const THROUGHPUT_MESSAGES: usize = 8_192;
/// Messages sent before a figure is taken.
const WARM_UP: usize = 256;
/// Round trips of the latency run.
const LATENCY_SAMPLES: usize = 2_000;
/// Idle paired sessions of the memory run.
const IDLE_SESSIONS: usize = 1_000;

/// The environment variable that makes this binary the client process of the
/// memory run.
const CLIENTS_ENV: &str = "BOTHY_BENCH_CLIENTS";

/// The server's configuration: rate limits far above the logins of a run.
const CONFIG: &str = "rl:\n  terminal:\n    burst: 1000000\n    refill_per_minute: 1000000\n  \
                      host:\n    burst: 1000000\n    refill_per_minute: 1000000\n";

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if std::env::var_os(CLIENTS_ENV).is_some() {
        return runtime.block_on(clients_process());
    }
    // `cargo bench` passes `--bench`; there is nothing to filter.
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let server = BenchServer::start(CONFIG).await?;
    let account = Account::create(&server).await?;
    let clients = Clients::new(&server, &account)?;

    // Memory first, before the large buffers of the throughput runs.
    let per_session = idle_session_memory(&server, &account).await?;

    let ids = server.insert_sessions(&account, 1).await?;
    let id = ids[0];
    let mut host = clients.host(id, server.clock.now_ms()).await?;
    let mut device = clients.device(id).await?;
    server.wait_paired(&ids).await?;
    let relay_throughput = throughput(&mut host, &mut device).await?;
    let relay_latency = latency(&mut host, &mut device).await?;

    let (mut sender, mut receiver) = direct_pair().await?;
    let direct_throughput = throughput(&mut sender, &mut receiver).await?;
    let direct_latency = latency(&mut sender, &mut receiver).await?;

    let mib = |bytes_per_s: f64| bytes_per_s / (1024.0 * 1024.0);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("relay_throughput_64k: {:.0} MiB/s", mib(relay_throughput));
    println!("direct_throughput_64k: {:.0} MiB/s", mib(direct_throughput));
    println!(
        "relay_throughput_ratio: {:.2} relay/direct",
        relay_throughput / direct_throughput
    );
    println!("relay_latency_p50: {:.0} µs", us(relay_latency.0));
    println!("direct_latency_p50: {:.0} µs", us(direct_latency.0));
    println!(
        "relay_latency_p50_ratio: {:.2} relay/direct",
        us(relay_latency.0) / us(direct_latency.0)
    );
    println!("relay_latency_p99: {:.0} µs", us(relay_latency.1));
    println!("direct_latency_p99: {:.0} µs", us(direct_latency.1));
    println!(
        "relay_latency_p99_ratio: {:.2} relay/direct",
        us(relay_latency.1) / us(direct_latency.1)
    );
    println!("rss_per_idle_paired_session: {per_session:.1} KiB");
    println!("target_relay_throughput: 2048 MiB/s");
    println!("target_rss_per_idle_paired_session: 16 KiB");
    Ok(())
}

/// A message of `MESSAGE` bytes whose first 8 bytes carry `n`.
fn message(n: u64) -> Message {
    let mut bytes = vec![0x42u8; MESSAGE];
    bytes[..8].copy_from_slice(&n.to_be_bytes());
    Message::binary(bytes)
}

/// The next binary message of `stream` (pings and pongs skipped).
async fn next_binary<S>(stream: &mut S) -> anyhow::Result<usize>
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
{
    loop {
        match stream.next().await {
            Some(Ok(Message::Binary(bytes))) => return Ok(bytes.len()),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            other => return Err(anyhow!("expected a binary message, got {other:?}")),
        }
    }
}

/// Bytes per second from `sender` to `receiver` with `THROUGHPUT_MESSAGES`
/// messages in flight as fast as the path takes them (after a warm-up).
async fn throughput<A, B>(sender: &mut A, receiver: &mut B) -> anyhow::Result<f64>
where
    A: Sink<Message, Error = WsError> + Unpin + Send,
    B: Stream<Item = Result<Message, WsError>> + Unpin + Send,
{
    for n in 0..WARM_UP {
        sender.send(message(n as u64)).await?;
        next_binary(receiver).await?;
    }
    let started = Instant::now();
    let send = async {
        for n in 0..THROUGHPUT_MESSAGES {
            sender.feed(message(n as u64)).await?;
            if n % 16 == 15 {
                sender.flush().await?;
            }
        }
        sender.flush().await?;
        Ok::<(), anyhow::Error>(())
    };
    let receive = async {
        let mut bytes = 0usize;
        for _ in 0..THROUGHPUT_MESSAGES {
            bytes += next_binary(receiver).await?;
        }
        Ok::<usize, anyhow::Error>(bytes)
    };
    let ((), bytes) = tokio::try_join!(send, receive)?;
    let elapsed = started.elapsed();
    Ok(bytes as f64 / elapsed.as_secs_f64())
}

/// p50 and p99 of the time from sending one message to receiving it, one
/// message in flight.
async fn latency<A, B>(sender: &mut A, receiver: &mut B) -> anyhow::Result<(Duration, Duration)>
where
    A: Sink<Message, Error = WsError> + Unpin,
    B: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    for n in 0..(WARM_UP + LATENCY_SAMPLES) {
        let started = Instant::now();
        sender.send(message(n as u64)).await?;
        next_binary(receiver).await?;
        if n >= WARM_UP {
            samples.push(started.elapsed());
        }
    }
    samples.sort();
    Ok((quantile(&samples, 0.50), quantile(&samples, 0.99)))
}

/// The resident memory (KiB) this process gains per idle paired session:
/// `IDLE_SESSIONS` sessions, both sides connected by a child process.
async fn idle_session_memory(server: &BenchServer, account: &Account) -> anyhow::Result<f64> {
    let ids = server.insert_sessions(account, IDLE_SESSIONS).await?;
    // One session paired and released first, so the relay's one-time parts
    // (its ticker and log-tail tasks) are not counted per session.
    let warm = server.insert_sessions(account, 1).await?;
    {
        let clients = Clients::new(server, account)?;
        let host = clients.host(warm[0], server.clock.now_ms()).await?;
        let device = clients.device(warm[0]).await?;
        server.wait_paired(&warm).await?;
        drop((host, device));
    }
    let before = rss_kib()?;
    let spec = json!({
        "port": server.port,
        "ca_file": server.ca_file.display().to_string(),
        "token": account.token,
        "host_id": account.host_id.hyphenated().to_string(),
        "now_ms": server.clock.now_ms(),
        "sessions": ids.iter().map(|id| id.hyphenated().to_string()).collect::<Vec<_>>(),
    });
    let mut child = Command::new(std::env::current_exe()?)
        .env(CLIENTS_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("the client process")?;
    let mut stdin = child.stdin.take().context("stdin")?;
    writeln!(stdin, "{spec}")?;
    let stdout = child.stdout.take().context("stdout")?;
    let answer = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await??;
    if answer.trim() != "paired" {
        let _ = child.kill();
        return Err(anyhow!("the client process did not pair: {answer:?}"));
    }
    server.wait_paired(&ids).await?;
    let after = rss_kib()?;
    drop(stdin);
    let _ = child.wait();
    Ok(after.saturating_sub(before) as f64 / IDLE_SESSIONS as f64)
}

/// The client process of the memory run: reads the spec from stdin, pairs
/// both sides of every session, says `paired`, and holds the connections
/// until stdin closes.
async fn clients_process() -> anyhow::Result<()> {
    let spec: serde_json::Value = {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        serde_json::from_str(&line)?
    };
    let port = u16::try_from(spec["port"].as_u64().context("port")?)?;
    let ca_file = std::path::PathBuf::from(spec["ca_file"].as_str().context("ca_file")?);
    let token = spec["token"].as_str().context("token")?;
    let host_id: Uuid = spec["host_id"].as_str().context("host_id")?.parse()?;
    let now_ms = spec["now_ms"].as_i64().context("now_ms")?;
    let sessions: Vec<Uuid> = spec["sessions"]
        .as_array()
        .context("sessions")?
        .iter()
        .map(|id| id.as_str().unwrap_or_default().parse())
        .collect::<Result<_, _>>()?;
    let clients = Clients::from_parts(port, &ca_file, token, host_id)?;
    let mut held = Vec::with_capacity(sessions.len() * 2);
    for chunk in sessions.chunks(50) {
        let pairs = futures_util::future::try_join_all(chunk.iter().map(|id| {
            let clients = clients.clone();
            let id = *id;
            async move {
                let host = clients.host(id, now_ms).await?;
                let device = clients.device(id).await?;
                Ok::<_, anyhow::Error>((host, device))
            }
        }))
        .await?;
        held.extend(pairs);
    }
    println!("paired");
    std::io::stdout().flush()?;
    let _ = tokio::task::spawn_blocking(|| {
        let mut rest = String::new();
        std::io::stdin().read_line(&mut rest)
    })
    .await;
    drop(held);
    Ok(())
}
