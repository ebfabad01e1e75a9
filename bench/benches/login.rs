//! The login memory benchmark (issue 15, item 7): `cargo bench -p bothy-bench
//! --bench login` (release build). One figure per line, `name: value unit`:
//!
//! - `rss_before_logins`: the resident memory of the process that runs the
//!   real server, after the person's enrollment (one argon2 hash done);
//! - `rss_after_failed_logins`: right after `LOGINS` concurrent logins with a
//!   wrong password, sent by a child process (so the clients' own memory is
//!   not counted), every one answered `401`;
//! - `rss_after_pause`: `PAUSE` later, the server idle;
//! - `rss_growth_after_pause` and the bound the documentation gives:
//!   `password::CONCURRENT_HASHES` argon2 blocks of `ARGON2_MEMORY_KIB`.
//!
//! Reported, not gated. Before issue 15 the growth was ~470 MiB that stayed:
//! every blocking thread that ran a hash kept its freed 19 MiB in its own
//! malloc arena.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bothy_bench::{BenchServer, PASSWORD, https_client, rss_kib};
use bothy_server::identity::password::{ARGON2_MEMORY_KIB, CONCURRENT_HASHES};
use serde_json::json;

/// Concurrent failed logins.
const LOGINS: usize = 300;
/// How long the server idles before the last figure.
const PAUSE: Duration = Duration::from_secs(10);
/// The environment variable that makes this binary the client process.
const CLIENTS_ENV: &str = "BOTHY_BENCH_LOGIN_CLIENTS";
/// The server's configuration: `rl.public_auth` far above the logins of a run.
const CONFIG: &str = "rl:\n  public_auth:\n    burst: 1000000\n    refill_per_minute: 1000000\n";
/// The logins come from one address over HTTP/1.1, one connection each: the
/// cap of connections per address (default 128) is raised for them.
const SERVER_KEYS: &str = "  max_connections_per_address: 1000\n";

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if std::env::var_os(CLIENTS_ENV).is_some() {
        return runtime.block_on(clients_process());
    }
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let server = BenchServer::start_with_server_keys(SERVER_KEYS, CONFIG).await?;
    enroll(&server).await?;
    let before = rss_kib()?;

    let mut child = Command::new(std::env::current_exe()?)
        .env(CLIENTS_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("the client process")?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let spec = json!({"port": server.port, "ca_file": server.ca_file.display().to_string()});
    writeln!(stdin, "{spec}")?;
    drop(stdin);
    let stdout = child.stdout.take().context("stdout")?;
    let answer = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await??;
    let _ = child.wait();
    if answer.trim() != format!("{LOGINS} unauthenticated") {
        bail!("the client process: {answer:?}");
    }
    let after = rss_kib()?;
    tokio::time::sleep(PAUSE).await;
    let paused = rss_kib()?;

    let mib = |kib: u64| kib as f64 / 1024.0;
    println!("rss_before_logins: {:.1} MiB", mib(before));
    println!("rss_after_failed_logins: {:.1} MiB", mib(after));
    println!("rss_after_pause: {:.1} MiB", mib(paused));
    println!(
        "rss_growth_after_pause: {:.1} MiB",
        mib(paused.saturating_sub(before))
    );
    println!(
        "bound_hashing_memory: {:.1} MiB",
        mib(u64::from(ARGON2_MEMORY_KIB) * CONCURRENT_HASHES as u64)
    );
    Ok(())
}

/// The person the logins name: bootstrapped and enrolled (its password hashed).
async fn enroll(server: &BenchServer) -> anyhow::Result<()> {
    let state = &server.state;
    let owner = bothy_server::identity::admin::bootstrap(
        state.db(),
        state.pepper(),
        &state.config().auth,
        bothy_server::clock::Clock::now_ms(server.clock.as_ref()),
        "bench",
    )
    .await
    .map_err(|e| anyhow!("bootstrap: {e}"))?;
    let code = owner.issued.code.expose().to_owned();
    server
        .post(
            "/api/v1/auth/enroll",
            None,
            json!({"code": code, "password": PASSWORD}),
        )
        .await?;
    Ok(())
}

/// The client process: `LOGINS` logins with a wrong password at once; prints
/// `<n> unauthenticated` when every one was answered `401`.
async fn clients_process() -> anyhow::Result<()> {
    let spec: serde_json::Value = {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        serde_json::from_str(&line)?
    };
    let port = spec["port"].as_u64().context("port")?;
    let ca_file = std::path::PathBuf::from(spec["ca_file"].as_str().context("ca_file")?);
    let client = https_client(&ca_file)?;
    let url = format!("https://localhost:{port}/api/v1/auth/login");
    let device_key = bothy_proto::b64::encode(
        &bothy_proto::jws::Ed25519SigningKey::from_seed(&[1; 32])
            .public_jwk()
            .raw(),
    );
    let logins = (0..LOGINS).map(|n| {
        let client = client.clone();
        let url = url.clone();
        let device_key = device_key.clone();
        tokio::spawn(async move {
            let body = json!({
                "username": "bench",
                "password": format!("not the password {n}"),
                "totp": "000000",
                "device_public_key": device_key,
                "device_name": "bench",
            });
            let response = client.post(&url).json(&body).send().await?;
            Ok::<_, anyhow::Error>(response.status().as_u16())
        })
    });
    let statuses = futures_util::future::join_all(logins).await;
    let mut unauthenticated = 0;
    for status in statuses {
        match status?? {
            401 => unauthenticated += 1,
            other => bail!("a login answered {other}"),
        }
    }
    println!("{unauthenticated} unauthenticated");
    std::io::stdout().flush()?;
    Ok(())
}
