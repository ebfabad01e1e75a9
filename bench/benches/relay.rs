//! The relay benchmark (DESIGN §6; issue 5): `cargo bench -p bothy-bench
//! --bench relay` (release build). One figure per line, `name: value unit`:
//!
//! - throughput of 64 KiB binary messages (65 535 bytes, the largest Noise
//!   message) from the host's data connection to the device stream through
//!   the real server's relay (TLS on 127.0.0.1, SQLite), side by side with the
//!   same client pair over a direct TLS WebSocket connection, and the ratio;
//! - per-message forwarding latency p50 and p99 (one message in flight), relay
//!   and direct, their samples taken in turn, and the ratios;
//! - the resident memory the server process gains per idle paired session:
//!   10,000 sessions paired on both sides by a child process (so the clients'
//!   own memory is not counted; it raises its open-files limit, as this
//!   process does), the RSS delta of this process / 10,000; the server's RSS
//!   and CPU (% of one core over 10 s) at rest with them; and, after the
//!   keystroke figures below, the memory per session once every one of those
//!   sessions carried one 64 KiB message each way and went idle again (what
//!   an idle terminal that once printed a screenful keeps; D-718), the
//!   sessions taken 50 at a time so the burst's own transient memory stays
//!   small;
//! - the keystroke latency of one active session (an 18-byte message, a
//!   one-byte `data` frame's Noise message, device to host, one in flight;
//!   p50 and p99) beside those idle sessions, and again while 1,000 of them
//!   stream output (a 1 KiB message host to device every 100 ms each, about
//!   10 MiB/s together, read by the child), and the ratio of the two p99
//!   (issue 20: ≤ 2; docs/decisions.md D-455).
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
/// Idle paired sessions of the memory run (fewer when the open-files limit
/// cannot be raised for two sockets each; the figure says how many).
const IDLE_SESSIONS: usize = 10_000;
/// The neighbours that stream output while the keystroke latency is taken.
const STREAMING: usize = 1_000;
/// One message of a streaming neighbour, and how often each sends one.
const STREAM_MESSAGE: usize = 1024;
const STREAM_PERIOD: Duration = Duration::from_millis(100);
/// A keystroke on the wire: the Noise message of a one-byte `data` frame
/// (type, byte, 16-byte tag).
const KEYSTROKE: usize = 18;
/// How long the server's CPU at rest is measured.
const REST: Duration = Duration::from_secs(10);
/// Open files this process and the client process need beyond two per
/// session.
const SPARE_FILES: u64 = 1024;

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
    let sessions = raise_file_limit(std::process::id(), IDLE_SESSIONS);
    let server = BenchServer::start(CONFIG).await?;
    let account = Account::create(&server).await?;
    let clients = Clients::new(&server, &account)?;

    // Memory first, before the large buffers of the throughput runs.
    let mut neighbours = Neighbours::start(&server, &account, sessions).await?;
    let (rest_rss_kib, rest_cpu) = at_rest().await?;

    // The active session of the keystroke figures, paired now: a side that
    // nobody reads is lost after the relay's ping timeout.
    let active = server.insert_sessions(&account, 1).await?;
    let mut typist = clients.device(active[0]).await?;
    let mut shell = clients.host(active[0], server.clock.now_ms()).await?;
    server.wait_paired(&active).await?;
    let idle_keys = latency_of(&mut typist, &mut shell, KEYSTROKE).await?;
    neighbours.stream().await?;
    let loaded_keys = latency_of(&mut typist, &mut shell, KEYSTROKE).await?;
    // Last, so the keystroke figures above are taken as in earlier runs.
    neighbours.carry_one_message_each_way().await?;
    let ids = neighbours.ids.clone();
    let per_session = neighbours.per_session_kib;
    let per_session_after_output = neighbours.per_session_after_output_kib;
    neighbours.finish()?;
    drop((typist, shell));
    server.wait_unpaired(&ids).await?;
    server.wait_settled().await?;

    let ids = server.insert_sessions(&account, 1).await?;
    let id = ids[0];
    let mut host = clients.host(id, server.clock.now_ms()).await?;
    let mut device = clients.device(id).await?;
    server.wait_paired(&ids).await?;
    let relay_throughput = throughput(&mut host, &mut device).await?;

    let (mut sender, mut receiver) = direct_pair().await?;
    let direct_throughput = throughput(&mut sender, &mut receiver).await?;
    let (relay_latency, direct_latency) =
        latency_side_by_side((&mut host, &mut device), (&mut sender, &mut receiver)).await?;

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
    println!("idle_paired_sessions: {sessions}");
    println!("rss_per_idle_paired_session: {per_session:.1} KiB");
    println!("rss_per_idle_paired_session_after_output: {per_session_after_output:.1} KiB");
    println!(
        "server_rss_at_rest: {:.0} MiB",
        rest_rss_kib as f64 / 1024.0
    );
    println!("server_cpu_at_rest: {rest_cpu:.1} % of one core");
    println!("keystroke_latency_idle_node_p50: {:.0} µs", us(idle_keys.0));
    println!("keystroke_latency_idle_node_p99: {:.0} µs", us(idle_keys.1));
    println!(
        "keystroke_latency_streaming_neighbours_p50: {:.0} µs",
        us(loaded_keys.0)
    );
    println!(
        "keystroke_latency_streaming_neighbours_p99: {:.0} µs",
        us(loaded_keys.1)
    );
    println!(
        "keystroke_latency_p99_ratio: {:.2} streaming/idle",
        us(loaded_keys.1) / us(idle_keys.1)
    );
    println!("target_relay_throughput: 2048 MiB/s");
    println!("target_rss_per_idle_paired_session: 16 KiB");
    println!("target_keystroke_latency_p99_ratio: 2.00 streaming/idle");
    Ok(())
}

/// A message of `MESSAGE` bytes whose first 8 bytes carry `n`.
fn message(n: u64) -> Message {
    message_of(MESSAGE, n)
}

/// A message of `len` (at least 8) bytes whose first 8 bytes carry `n`.
fn message_of(len: usize, n: u64) -> Message {
    let mut bytes = vec![0x42u8; len];
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

/// p50 and p99 of the time from sending one 64 KiB message to receiving
/// it, one message in flight, through the relay and directly; the samples
/// are taken in turn (one through the relay, one direct, and so on), so a
/// change of this machine's speed during the run moves both paths alike and
/// the ratio compares them under the same conditions (D-723).
async fn latency_side_by_side<A, B, C, D>(
    relay: (&mut A, &mut B),
    direct: (&mut C, &mut D),
) -> anyhow::Result<((Duration, Duration), (Duration, Duration))>
where
    A: Sink<Message, Error = WsError> + Unpin,
    B: Stream<Item = Result<Message, WsError>> + Unpin,
    C: Sink<Message, Error = WsError> + Unpin,
    D: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let (relay_sender, relay_receiver) = relay;
    let (direct_sender, direct_receiver) = direct;
    let mut relay_samples = Vec::with_capacity(LATENCY_SAMPLES);
    let mut direct_samples = Vec::with_capacity(LATENCY_SAMPLES);
    for n in 0..(WARM_UP + LATENCY_SAMPLES) {
        let through_relay = one_message(relay_sender, relay_receiver, MESSAGE, n).await?;
        let direct = one_message(direct_sender, direct_receiver, MESSAGE, n).await?;
        if n >= WARM_UP {
            relay_samples.push(through_relay);
            direct_samples.push(direct);
        }
    }
    Ok((p50_p99(relay_samples), p50_p99(direct_samples)))
}

/// The p50 and p99 of `samples`.
fn p50_p99(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (quantile(&samples, 0.50), quantile(&samples, 0.99))
}

/// The time from sending message `n` of `len` bytes to receiving it.
async fn one_message<A, B>(
    sender: &mut A,
    receiver: &mut B,
    len: usize,
    n: usize,
) -> anyhow::Result<Duration>
where
    A: Sink<Message, Error = WsError> + Unpin,
    B: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let started = Instant::now();
    sender.send(message_of(len, n as u64)).await?;
    next_binary(receiver).await?;
    Ok(started.elapsed())
}

/// p50 and p99 of the time from sending one message of `len` bytes to
/// receiving it, one message in flight.
async fn latency_of<A, B>(
    sender: &mut A,
    receiver: &mut B,
    len: usize,
) -> anyhow::Result<(Duration, Duration)>
where
    A: Sink<Message, Error = WsError> + Unpin,
    B: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    for n in 0..(WARM_UP + LATENCY_SAMPLES) {
        let sample = one_message(sender, receiver, len, n).await?;
        if n >= WARM_UP {
            samples.push(sample);
        }
    }
    Ok(p50_p99(samples))
}

/// Raises the open-files limit of process `pid` (with `prlimit`, which
/// needs root beyond the hard limit) for two sockets per session of
/// `sessions`; how many sessions the limit it has then allows.
fn raise_file_limit(pid: u32, sessions: usize) -> usize {
    let want = sessions as u64 * 2 + SPARE_FILES;
    let _ = Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--nofile={want}:{want}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let limit = open_files_limit(pid).unwrap_or(0);
    let fits = usize::try_from(limit.saturating_sub(SPARE_FILES) / 2).unwrap_or(usize::MAX);
    sessions.min(fits)
}

/// The soft open-files limit of process `pid`.
fn open_files_limit(pid: u32) -> Option<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// CPU time of this process so far (user and system), from /proc.
fn cpu_time() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The fields after the command name (which may hold spaces): utime and
    // stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("/proc/self/stat without a command"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<u64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow!("/proc/self/stat is short"))?
            .parse()?)
    };
    // USER_HZ is 100 on Linux.
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

/// The server's RSS (KiB) and CPU (% of one core) over [`REST`] with every
/// neighbour idle.
async fn at_rest() -> anyhow::Result<(u64, f64)> {
    let cpu_before = cpu_time()?;
    let started = Instant::now();
    tokio::time::sleep(REST).await;
    let cpu = cpu_time()? - cpu_before;
    let share = cpu.as_secs_f64() / started.elapsed().as_secs_f64() * 100.0;
    Ok((rss_kib()?, share))
}

/// The client process holding the neighbours: idle paired sessions, some of
/// which stream output on request.
struct Neighbours {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    ids: Vec<Uuid>,
    /// The RSS (KiB) of this process before the sessions were paired.
    rss_before_kib: u64,
    /// The resident memory (KiB) this process gained per paired session.
    per_session_kib: f64,
    /// The same once every session carried one message each way.
    per_session_after_output_kib: f64,
}

impl Neighbours {
    /// Pairs `count` sessions in a child process; records the RSS this
    /// process gained per session.
    async fn start(
        server: &BenchServer,
        account: &Account,
        count: usize,
    ) -> anyhow::Result<Neighbours> {
        let ids = server.insert_sessions(account, count).await?;
        // One session paired and released first, so the relay's one-time
        // parts (its ticker and log-tail tasks) are not counted per session.
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
        // It reads its spec first: its limit is raised before it connects.
        if raise_file_limit(child.id(), count) < count {
            let _ = child.kill();
            return Err(anyhow!(
                "the client process's open-files limit stays too low"
            ));
        }
        let mut stdin = child.stdin.take().context("stdin")?;
        writeln!(stdin, "{spec}")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        let mut neighbours = Neighbours {
            child,
            stdin,
            stdout,
            ids,
            rss_before_kib: before,
            per_session_kib: 0.0,
            per_session_after_output_kib: 0.0,
        };
        neighbours.expect("paired").await?;
        server.wait_paired(&neighbours.ids).await?;
        let after = rss_kib()?;
        neighbours.per_session_kib = after.saturating_sub(before) as f64 / count as f64;
        Ok(neighbours)
    }

    /// Lets every session carry one [`MESSAGE`] each way (host to device,
    /// device to host), then records the RSS this process holds per session
    /// once they are idle again.
    async fn carry_one_message_each_way(&mut self) -> anyhow::Result<()> {
        writeln!(self.stdin, "burst")?;
        self.stdin.flush()?;
        self.expect("carried").await?;
        // The relay gives a message's room back after its write; a moment
        // for the last flushes.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = rss_kib()?;
        self.per_session_after_output_kib =
            after.saturating_sub(self.rss_before_kib) as f64 / self.ids.len() as f64;
        Ok(())
    }

    /// Waits for the line `word` from the child.
    async fn expect(&mut self, word: &str) -> anyhow::Result<()> {
        let mut line = String::new();
        let n = tokio::task::block_in_place(|| self.stdout.read_line(&mut line))?;
        if n == 0 || line.trim() != word {
            let _ = self.child.kill();
            return Err(anyhow!("the client process did not say {word}: {line:?}"));
        }
        Ok(())
    }

    /// Lets [`STREAMING`] of them stream output, in full after a second.
    async fn stream(&self) -> anyhow::Result<()> {
        let mut stdin = &self.stdin;
        writeln!(stdin, "stream")?;
        stdin.flush()?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }

    /// Closes every connection and waits for the child to end.
    fn finish(mut self) -> anyhow::Result<()> {
        drop(self.stdin);
        let _ = self.child.wait();
        Ok(())
    }
}

/// The client process of the memory run: reads the spec from stdin, pairs
/// both sides of every session, says `paired`, reads every connection (the
/// relay's pings get their answers), sends one [`MESSAGE`] each way in every
/// session when stdin says `burst` (50 sessions at a time, each group
/// delivered before the next; says `carried`), lets [`STREAMING`] sessions
/// stream output when stdin says `stream`, and holds the connections until stdin
/// closes.
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
    let mut hosts = Vec::with_capacity(sessions.len());
    let mut devices = Vec::with_capacity(sessions.len());
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
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
        for (host, device) in pairs {
            let (host_tx, host_rx) = host.split();
            let (device_tx, device_rx) = device.split();
            tokio::spawn(drain(host_rx, std::sync::Arc::clone(&received)));
            tokio::spawn(drain(device_rx, std::sync::Arc::clone(&received)));
            hosts.push(host_tx);
            devices.push(device_tx);
        }
    }
    println!("paired");
    std::io::stdout().flush()?;
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut streams = Vec::new();
    while let Some(line) = lines.recv().await {
        if line.trim() == "burst" {
            let payload = payload_of(MESSAGE);
            for (hosts, devices) in hosts.chunks_mut(50).zip(devices.chunks_mut(50)) {
                let expected = received.load(std::sync::atomic::Ordering::SeqCst)
                    + hosts.len()
                    + devices.len();
                for sink in hosts.iter_mut().chain(devices.iter_mut()) {
                    sink.send(Message::Binary(payload.clone())).await?;
                }
                while received.load(std::sync::atomic::Ordering::SeqCst) < expected {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            println!("carried");
            std::io::stdout().flush()?;
        }
        if line.trim() == "stream" && streams.is_empty() {
            let payload = payload_of(STREAM_MESSAGE);
            let start = tokio::time::Instant::now();
            for (i, host) in hosts.drain(..STREAMING.min(hosts.len())).enumerate() {
                // Spread over the period, as independent terminals would be.
                let offset = STREAM_PERIOD * u32::try_from(i).unwrap_or(0)
                    / u32::try_from(STREAMING).unwrap_or(1);
                streams.push(tokio::spawn(stream_output(
                    host,
                    payload.clone(),
                    start + offset,
                )));
            }
        }
    }
    for stream in streams {
        stream.abort();
    }
    drop((hosts, devices));
    Ok(())
}

/// A shared message body of `len` bytes.
fn payload_of(len: usize) -> tokio_tungstenite::tungstenite::Bytes {
    tokio_tungstenite::tungstenite::Bytes::from(vec![0x42u8; len])
}

/// Reads and drops whatever arrives (answering pings) until the end,
/// counting the binary messages in `received`.
async fn drain<S>(mut stream: S, received: std::sync::Arc<std::sync::atomic::AtomicUsize>)
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
{
    while let Some(Ok(message)) = stream.next().await {
        if message.is_binary() {
            received.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Sends `payload` every [`STREAM_PERIOD`] from `start` on.
async fn stream_output<S>(
    mut sink: S,
    payload: tokio_tungstenite::tungstenite::Bytes,
    start: tokio::time::Instant,
) where
    S: Sink<Message, Error = WsError> + Unpin,
{
    let mut tick = tokio::time::interval_at(start, STREAM_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if sink.send(Message::Binary(payload.clone())).await.is_err() {
            return;
        }
    }
}
