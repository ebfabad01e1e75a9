//! Benchmark of bothy-noise, one figure per line (`cargo bench -p bothy-noise`):
//!
//! - `noise handshakes_per_s backend=B N`: full NK handshakes per second, both
//!   sides in this thread, including the initiator's key generation;
//! - `noise transport_mib_per_s backend=B size=S N`: MiB of plaintext per second
//!   through one encrypt and one decrypt, for 1 KiB, 16 KiB and 64 KiB (the
//!   largest plaintext, 65519 bytes) messages.
//!
//! B is each of snow's two cipher/hash backends, both with the crate's checked
//! X25519; the production one is marked `production=1`. Each figure runs for
//! about `FIGURE_SECONDS`, after a short warm-up.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use bothy_noise::{
    MAX_TRANSPORT_PLAINTEXT_LEN, StaticKeypair, Transport,
    bench_only::{self, Backend},
};
use uuid::Uuid;

const FIGURE_SECONDS: f64 = 2.0;
const WARM_UP: Duration = Duration::from_millis(300);
const SESSION_ID: Uuid = Uuid::from_u128(1);
const HOST_ID: Uuid = Uuid::from_u128(2);
const TOKEN: &[u8] = &[b't'; 700];
const HOST_JSON: &[u8] = br#"{"v":1,"host_version":"0.1.0","profile":"shell"}"#;

type BenchResult<T> = Result<T, bothy_noise::NoiseError>;

fn handshake(backend: Backend, host: &StaticKeypair) -> BenchResult<(Transport, Transport)> {
    let mut device = bench_only::initiator(backend, SESSION_ID, HOST_ID, &host.public())?;
    let mut responder = bench_only::responder(backend, SESSION_ID, HOST_ID, host)?;
    let message1 = device.write_message1(TOKEN)?;
    black_box(responder.read_message1(&message1)?);
    let (message2, host_side) = responder.write_message2(HOST_JSON)?;
    let (_, device_side) = device.read_message2(&message2)?;
    Ok((device_side, host_side))
}

/// Runs `step` repeatedly for about `seconds`; returns iterations per second.
fn rate(seconds: f64, mut step: impl FnMut() -> BenchResult<()>) -> BenchResult<f64> {
    let warm_up = Instant::now();
    while warm_up.elapsed() < WARM_UP {
        step()?;
    }
    let start = Instant::now();
    let mut iterations = 0_u64;
    // Check the clock every few iterations only, so timing stays out of the figure.
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..8 {
            step()?;
        }
        iterations += 8;
    }
    Ok(iterations as f64 / start.elapsed().as_secs_f64())
}

fn main() -> BenchResult<()> {
    let host = StaticKeypair::generate()?;
    let production = bench_only::production_backend();
    for backend in Backend::ALL {
        let label = format!(
            "backend={}{}",
            backend.name(),
            if backend == production {
                " production=1"
            } else {
                ""
            }
        );

        let per_s = rate(FIGURE_SECONDS, || {
            handshake(backend, &host).map(|pair| drop(black_box(pair)))
        })?;
        println!("noise handshakes_per_s {label} {per_s:.0}");

        for (size_name, size) in [
            ("1KiB", 1024),
            ("16KiB", 16 * 1024),
            ("64KiB", MAX_TRANSPORT_PLAINTEXT_LEN),
        ] {
            let (mut device, mut host_side) = handshake(backend, &host)?;
            let plaintext = vec![0x5a_u8; size];
            let per_s = rate(FIGURE_SECONDS, || {
                let message = device.write_message(black_box(&plaintext))?;
                black_box(host_side.read_message(&message)?);
                Ok(())
            })?;
            let mib_per_s = per_s * size as f64 / (1024.0 * 1024.0);
            println!("noise transport_mib_per_s {label} size={size_name} {mib_per_s:.1}");
        }
    }
    Ok(())
}
