//! Bulk output through a scenario's shell, for the benches (`bench/benches/
//! host.rs`, issue 20; `bench/benches/cluster.rs`, issue 18): a file of
//! printable lines, a shell without tty echo, and one timed `cat` of the file
//! through bothy, ended by a sentinel the file cannot contain.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use super::{DeviceSession, Received};

/// Characters of a line of the bulk file, line feed excluded.
pub const LINE: usize = 76;
/// What the shell prints after the file; typed as `EN""D-MARK`, so the echo
/// of the typed line does not contain it, and `-` is not in the base64
/// alphabet, so the file does not.
const SENTINEL: &[u8] = b"END-MARK";
/// The bound of the shell's answer to a command, and of quiet waits.
const SHELL_LIMIT: Duration = Duration::from_secs(30);

/// Writes the bulk file: lines of [`LINE`] random characters of the base64
/// alphabet and a line feed, exactly `bytes` long, readable by everyone.
pub fn write_file(path: &Path, bytes: u64) -> anyhow::Result<()> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).map_err(|e| anyhow!("random seed: {e}"))?;
    // xorshift64*: random enough for text nobody compresses.
    let mut state = u64::from_le_bytes(seed) | 1;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).context("bulk file")?);
    let mut line = [b'\n'; LINE + 1];
    let mut left = usize::try_from(bytes).context("bulk file size")?;
    while left > 0 {
        for chunk in line[..LINE].chunks_mut(10) {
            let mut bits = next();
            for byte in chunk {
                *byte = ALPHABET[(bits & 63) as usize];
                bits >>= 6;
            }
        }
        let n = left.min(LINE + 1);
        // The last line is cut short and still ends with a line feed.
        if n < LINE + 1 {
            line[n - 1] = b'\n';
        }
        out.write_all(&line[..n]).context("bulk file")?;
        left -= n;
    }
    out.flush().context("bulk file")?;
    drop(out);
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).context("chmod bulk file")?;
    Ok(())
}

/// Receives the next thing from the device stream within `limit`.
pub async fn recv_within(device: &mut DeviceSession, limit: Duration) -> anyhow::Result<Received> {
    tokio::time::timeout(limit, device.recv())
        .await
        .map_err(|_| anyhow!("nothing from the shell within {limit:?}"))
}

/// Types `command` and a line feed; waits until the output contains `marker`.
pub async fn shell_command(
    device: &mut DeviceSession,
    command: &str,
    marker: &str,
) -> anyhow::Result<()> {
    device.output.clear();
    device.type_text(&format!("{command}\n")).await;
    let deadline = Instant::now() + SHELL_LIMIT;
    while !String::from_utf8_lossy(&device.output).contains(marker) {
        let left = deadline.saturating_duration_since(Instant::now());
        match recv_within(device, left)
            .await
            .with_context(|| format!("waiting for {marker:?} after {command:?}"))?
        {
            Received::Data(_) => {}
            other => bail!("{command:?}: expected {marker:?}, got {other:?}"),
        }
    }
    Ok(())
}

/// Reads until the shell was quiet for `quiet` (bounded by 30 s).
pub async fn drain_quiet(device: &mut DeviceSession, quiet: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + SHELL_LIMIT;
    loop {
        match tokio::time::timeout(quiet, device.recv()).await {
            Err(_) => {
                device.output.clear();
                return Ok(());
            }
            Ok(Received::Data(_)) => {}
            Ok(other) => bail!("while waiting for a quiet shell: {other:?}"),
        }
        if Instant::now() > deadline {
            bail!("the shell did not go quiet within {SHELL_LIMIT:?}");
        }
    }
}

/// Turns the tty echo off (the first output after a command is then its
/// output) and waits until the shell is quiet.
pub async fn quiet_shell(device: &mut DeviceSession) -> anyhow::Result<()> {
    shell_command(device, "stty -echo; echo RE\"\"ADY-1", "READY-1").await?;
    drain_quiet(device, Duration::from_millis(300)).await
}

/// One bulk run through bothy: `cat FILE; echo EN""D-MARK` in a shell after
/// [`quiet_shell`]; the seconds from the first output byte to the sentinel,
/// which must come after at least `bytes` (the file's size), within `limit`.
pub async fn cat(
    device: &mut DeviceSession,
    file: &Path,
    bytes: u64,
    limit: Duration,
) -> anyhow::Result<f64> {
    device.output.clear();
    device
        .type_text(&format!("cat {}; echo EN\"\"D-MARK\n", file.display()))
        .await;
    let deadline = Instant::now() + limit;
    let mut first = None;
    let mut received: u64 = 0;
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let data = match recv_within(device, left).await.with_context(|| {
            format!("bulk run through bothy: no sentinel after {received} bytes")
        })? {
            Received::Data(data) => data,
            other => bail!("bulk run through bothy: {other:?} after {received} bytes"),
        };
        let now = Instant::now();
        // The harness keeps all output; the run needs only the last bytes.
        device.output.clear();
        let start = *first.get_or_insert(now);
        received += data.len() as u64;
        // `-` is never in the file: search for the sentinel only around one.
        if data.contains(&b'-') || tail.contains(&b'-') {
            tail.extend_from_slice(&data);
            if tail.windows(SENTINEL.len()).any(|w| w == SENTINEL) {
                if received < bytes {
                    bail!("bulk run through bothy: the sentinel after only {received} bytes");
                }
                return Ok((now - start).as_secs_f64());
            }
        } else {
            tail.clear();
            tail.extend_from_slice(&data);
        }
        let keep = tail.len().saturating_sub(SENTINEL.len() - 1);
        tail.drain(..keep);
    }
}
