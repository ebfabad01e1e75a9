//! The host service's benchmark (issue 6, DESIGN §6): `cargo bench -p
//! bothy-host --bench host --features test-seams`, as root (a release build;
//! it makes OS users and starts `bothy-host supervise`). One figure per line,
//! `name: value unit`, on standard output; progress goes to standard error.
//!
//! The path is the product's: the real server in this process (the scenario
//! harness of the host service's tests, `crates/host/tests/e2e_common`), the
//! real `bothy-host` binary under `bothy-host supervise` with a PTY helper per
//! session user, and a test device that speaks the real protocol (TLS
//! WebSocket to the relay, Noise NK, frames of 5.4).
//!
//! - Bulk: `cat` of a 256 MiB file of printable lines (76 characters of the
//!   base64 alphabet and a line feed) in the shell, PTY → helper → service →
//!   relay → device, from the first output byte after the command to the
//!   sentinel; side by side in the same run with `ssh -T` of OpenSSH
//!   (`chacha20-poly1305@openssh.com`, its own `sshd` on a free port, the same
//!   session user, the same file), from the first byte on standard output to
//!   its end. Both are MiB/s of the file's size: the PTY turns every `\n` into
//!   `\r\n`, so the device receives 1/76 more bytes than the file has; `ssh -T`
//!   has no PTY and carries exactly the file (D-180, D-181). Two more columns
//!   say how much of the gap the PTY explains: `ssh -tt` (a PTY on the
//!   server's side, as bothy has) and `cat` on a PTY of this process read
//!   directly (the ceiling of any path through a PTY). Three runs each,
//!   alternating, the median is the figure.
//! - Keystroke echo: single-byte data frames to `stty raw -echo; cat` in the
//!   shell, timed until the byte is back at the device; beside the same `cat`
//!   in a PTY of this process (openpty, raw, no echo), written and read
//!   directly. 1,000 samples after 50 warm-up; p50 and p99 (D-182).
//!   The same echo through `ssh -tt` (`stty raw -echo; exec cat` on sshd's
//!   PTY, the byte written to ssh's standard input, a pipe) in the same run,
//!   and the ratios bothy/ssh_tty (issue 20).
//! - `open_to_first_byte_ms`: from the open request (the step-up before it not
//!   counted) through the device stream, Noise handshake and `start` to the
//!   first data frame of the shell; the median of fifteen openings (D-183).
//!   Beside it `ssh_tty_connect_to_first_byte_ms`: from starting `ssh -tt`
//!   (connect, key exchange, authentication, sshd's PTY, the login shell) to
//!   the first byte of the shell, the median of three, and the ratio (issue
//!   20).
//!
//! Every wait is bounded; a failure prints what failed and exits non-zero.

use bothy_testkit::scenario as e2e_common;

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use bothy_proto::frame::Frame;
use bothy_server::db::Engine;
use e2e_common::bulk::{self, LINE, drain_quiet, recv_within};
use e2e_common::{DeviceSession, Options, Received, Scenario, bench};

/// The size of the bulk file: 256 MiB.
const FILE_BYTES: u64 = 256 * 1024 * 1024;
/// Runs of each bulk figure; the median is printed.
const BULK_RUNS: usize = 3;
/// The bound of one bulk run (a run that takes longer has failed).
const BULK_LIMIT: Duration = Duration::from_secs(300);
/// Echo samples, and the warm-up before them.
const ECHO_SAMPLES: usize = 1_000;
const ECHO_WARM_UP: usize = 50;
/// The bound of one echo round trip.
const ECHO_LIMIT: Duration = Duration::from_secs(10);
/// Openings timed for `open_to_first_byte_ms` (D-183).
const OPENINGS: usize = 15;
/// The bound of the shell's answer to a command, and of quiet waits.
const SHELL_LIMIT: Duration = Duration::from_secs(30);
/// The bound of installing openssh-server.
const APT_LIMIT: Duration = Duration::from_secs(600);
/// The cipher of the comparison (DESIGN §6).
const SSH_CIPHER: &str = "chacha20-poly1305@openssh.com";

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    bench::main_as_root(
        "host",
        "it creates OS users and runs bothy-host supervise",
        run,
    )
}

async fn run() -> anyhow::Result<()> {
    eprintln!("host bench: starting the server and the host service");
    let scenario = bench::start_within(Engine::Sqlite, Options::default()).await?;

    eprintln!("host bench: open to first byte");
    let mut openings = Vec::with_capacity(OPENINGS);
    let mut phases: Vec<[Duration; 4]> = Vec::with_capacity(OPENINGS);
    for _ in 0..OPENINGS {
        let opening = bench::timed_opening(&scenario, SHELL_LIMIT).await?;
        openings.push(opening.took);
        phases.push(opening.phases);
    }

    eprintln!("host bench: writing the {FILE_BYTES}-byte file");
    let file = scenario.dir.path.join("bulk.txt");
    bulk::write_file(&file, FILE_BYTES)?;

    eprintln!("host bench: setting up sshd");
    let sshd = match Sshd::start(&scenario) {
        Ok(sshd) => Some(Arc::new(sshd)),
        Err(error) => {
            eprintln!("host bench: ssh comparison unavailable: {error:#}");
            println!("ssh_cat_mib_s: unavailable ({})", one_line(&error));
            None
        }
    };

    let mut device = tokio::time::timeout(SHELL_LIMIT, scenario.open_shell())
        .await
        .map_err(|_| anyhow!("opening the bulk session took over {SHELL_LIMIT:?}"))?;
    // No tty echo for the bulk commands: the first output after a command is
    // then its output.
    bulk::quiet_shell(&mut device).await?;

    // The runs alternate, so a neighbour's load on the machine falls on all
    // of them alike.
    let mut bothy = Series::new("bothy_cat");
    let mut ssh = Series::new("ssh_cat");
    let mut ssh_tty = Series::new("ssh_tty_cat");
    let mut direct = Series::new("direct_pty_cat");
    for run in 1..=BULK_RUNS {
        eprintln!("host bench: bulk run {run} through bothy");
        let seconds = bulk::cat(&mut device, &file, FILE_BYTES, BULK_LIMIT).await?;
        bothy.runs.push(mib_s(seconds));
        drain_quiet(&mut device, Duration::from_millis(300)).await?;
        // The other paths run on a thread while the device's stream is
        // read: a side that answers no ping is lost (6.2), and on a busy
        // machine these runs take longer than the relay's ping timeout.
        if let Some(sshd) = &sshd {
            eprintln!("host bench: bulk run {run} through ssh -T and ssh -tt");
            for (series, tty) in [(&mut ssh, false), (&mut ssh_tty, true)] {
                if series.failure.is_none() {
                    let (sshd, file) = (Arc::clone(sshd), file.clone());
                    series.record(beside(&mut device, move || sshd.cat(&file, tty)).await?);
                }
            }
        }
        eprintln!("host bench: bulk run {run} on a direct PTY");
        if direct.failure.is_none() {
            let file = file.clone();
            direct.record(beside(&mut device, move || direct_pty_cat(&file)).await?);
        }
    }
    let bothy_cat = bothy.print().unwrap_or(f64::NAN);
    if sshd.is_some() {
        if let Some(ssh_cat) = ssh.print() {
            println!("bothy_vs_ssh_ratio: {:.2} bothy/ssh", bothy_cat / ssh_cat);
        }
        if let Some(ssh_tty_cat) = ssh_tty.print() {
            println!(
                "bothy_vs_ssh_tty_ratio: {:.2} bothy/ssh_tty",
                bothy_cat / ssh_tty_cat
            );
        }
    }
    if let Some(direct_cat) = direct.print() {
        println!(
            "bothy_vs_direct_pty_ratio: {:.2} bothy/direct_pty",
            bothy_cat / direct_cat
        );
    }

    eprintln!("host bench: keystroke echo through bothy");
    // On a task of the runtime, not on the thread that blocks on it: the
    // device's socket is then read on the worker that polled it, as the
    // client's own runtime does, without a wake-up of that thread per echo.
    let (mut device, bothy_echo) = tokio::spawn(async move {
        let echo = bothy_echo(&mut device).await;
        (device, echo)
    })
    .await?;
    let bothy_echo = bothy_echo?;
    eprintln!("host bench: keystroke echo on a direct PTY");
    let direct_echo = direct_pty_echo()?;
    let ssh_echo = sshd.as_ref().map(|sshd| {
        eprintln!("host bench: keystroke echo through ssh -tt");
        sshd.echo()
    });
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("bothy_echo_rtt_p50_us: {:.0} µs", us(bothy_echo.0));
    println!("bothy_echo_rtt_p99_us: {:.0} µs", us(bothy_echo.1));
    println!("direct_pty_echo_rtt_p50_us: {:.0} µs", us(direct_echo.0));
    println!("direct_pty_echo_rtt_p99_us: {:.0} µs", us(direct_echo.1));
    match &ssh_echo {
        Some(Ok((p50, p99))) => {
            println!("ssh_tty_echo_rtt_p50_us: {:.0} µs", us(*p50));
            println!("ssh_tty_echo_rtt_p99_us: {:.0} µs", us(*p99));
            println!(
                "echo_rtt_p50_vs_ssh_tty_ratio: {:.2} bothy/ssh_tty",
                us(bothy_echo.0) / us(*p50)
            );
            println!(
                "echo_rtt_p99_vs_ssh_tty_ratio: {:.2} bothy/ssh_tty",
                us(bothy_echo.1) / us(*p99)
            );
        }
        Some(Err(error)) => println!("ssh_tty_echo_rtt_p50_us: unavailable ({})", one_line(error)),
        None => {}
    }
    println!(
        "echo_rtt_added_p50_us: {:.0} µs",
        us(bothy_echo.0) - us(direct_echo.0)
    );
    println!(
        "echo_rtt_p50_ratio: {:.1} bothy/direct",
        us(bothy_echo.0) / us(direct_echo.0)
    );
    println!(
        "echo_rtt_p99_ratio: {:.1} bothy/direct",
        us(bothy_echo.1) / us(direct_echo.1)
    );
    let ms: Vec<f64> = openings.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let open_ms = median(&ms);
    println!("open_to_first_byte_ms: {open_ms:.1} ms");
    for (i, name) in [
        "open_request",
        "device_stream_login",
        "noise_handshake",
        "start_to_first_byte",
    ]
    .into_iter()
    .enumerate()
    {
        let ms: Vec<f64> = phases.iter().map(|p| p[i].as_secs_f64() * 1e3).collect();
        println!("open_phase_{name}_ms: {:.1} ms", median(&ms));
    }
    if let Some(sshd) = &sshd {
        eprintln!("host bench: ssh -tt connect to the first byte of the shell");
        let mut connects = Vec::with_capacity(OPENINGS);
        let mut failure = None;
        for _ in 0..OPENINGS {
            match sshd.connect_to_first_byte() {
                Ok(took) => connects.push(took.as_secs_f64() * 1e3),
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        match failure {
            None => {
                let ssh_ms = median(&connects);
                println!("ssh_tty_connect_to_first_byte_ms: {ssh_ms:.1} ms");
                println!(
                    "open_vs_ssh_tty_connect_ratio: {:.2} bothy/ssh_tty",
                    open_ms / ssh_ms
                );
            }
            Some(error) => println!(
                "ssh_tty_connect_to_first_byte_ms: unavailable ({})",
                one_line(&error)
            ),
        }
    }
    drop(sshd);

    // The shell is in raw mode running `cat`: end the session from the device.
    device.send(Frame::Close).await;
    drop(device);
    Ok(())
}

/// The bulk runs of one path, in MiB/s; the first failure ends the series.
struct Series {
    name: &'static str,
    runs: Vec<f64>,
    failure: Option<anyhow::Error>,
}

impl Series {
    fn new(name: &'static str) -> Series {
        Series {
            name,
            runs: Vec::with_capacity(BULK_RUNS),
            failure: None,
        }
    }

    /// Records the seconds of one bulk run, or its failure (which ends the
    /// series).
    fn record(&mut self, run: anyhow::Result<f64>) {
        match run {
            Ok(seconds) => self.runs.push(mib_s(seconds)),
            Err(error) => self.failure = Some(error),
        }
    }

    /// Prints each run and the median (or why it is unavailable); the median.
    fn print(&self) -> Option<f64> {
        if let Some(error) = &self.failure {
            println!("{}_mib_s: unavailable ({})", self.name, one_line(error));
            return None;
        }
        for (i, value) in self.runs.iter().enumerate() {
            println!("{}_run{}_mib_s: {value:.1} MiB/s", self.name, i + 1);
        }
        let value = median(&self.runs);
        println!("{}_mib_s: {value:.1} MiB/s", self.name);
        Some(value)
    }
}

/// MiB/s of the file's size over `seconds`.
fn mib_s(seconds: f64) -> f64 {
    FILE_BYTES as f64 / (1024.0 * 1024.0) / seconds
}

/// The median of a few values.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The nearest-rank quantile `q` of sorted samples.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// An error on one line, for a figure's "unavailable (...)".
fn one_line(error: &anyhow::Error) -> String {
    format!("{error:#}").replace('\n', " ")
}

/// Runs the blocking `run` on a thread of its own while the device's stream
/// is read (its pings answered; output that arrives meanwhile is dropped).
async fn beside<T: Send + 'static>(
    device: &mut DeviceSession,
    run: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    let mut task = tokio::task::spawn_blocking(run);
    loop {
        tokio::select! {
            result = &mut task => return result.map_err(|e| anyhow!("the run's thread: {e}")),
            received = device.recv() => match received {
                Received::Data(_) => device.output.clear(),
                other => bail!("while another path ran: {other:?}"),
            },
        }
    }
}

/// Keystroke echo through bothy: `stty raw -echo; cat` in the shell, then one
/// byte per data frame, timed until it is back; (p50, p99).
async fn bothy_echo(device: &mut DeviceSession) -> anyhow::Result<(Duration, Duration)> {
    device.type_text("stty raw -echo; cat\n").await;
    drain_quiet(device, Duration::from_millis(500)).await?;
    // `cat` runs once a probe byte comes back.
    let deadline = Instant::now() + SHELL_LIMIT;
    loop {
        device.send(Frame::Data(b"Z")).await;
        match tokio::time::timeout(Duration::from_millis(200), device.recv()).await {
            Ok(Received::Data(bytes)) if bytes.contains(&b'Z') => break,
            Ok(Received::Data(_)) | Err(_) => {}
            Ok(other) => bail!("echo probe: {other:?}"),
        }
        if Instant::now() > deadline {
            bail!("`stty raw -echo; cat` never echoed a probe byte");
        }
    }
    drain_quiet(device, Duration::from_millis(300)).await?;
    let mut samples = Vec::with_capacity(ECHO_SAMPLES);
    for i in 0..ECHO_WARM_UP + ECHO_SAMPLES {
        let byte = b'a' + (i % 26) as u8;
        let sent = Instant::now();
        device.send(Frame::Data(&[byte])).await;
        loop {
            match recv_within(device, ECHO_LIMIT)
                .await
                .with_context(|| format!("echo sample {i} through bothy"))?
            {
                Received::Data(bytes) if bytes.last() == Some(&byte) => break,
                Received::Data(_) => {}
                other => bail!("echo sample {i} through bothy: {other:?}"),
            }
        }
        if i >= ECHO_WARM_UP {
            samples.push(sent.elapsed());
        }
        device.output.clear();
    }
    samples.sort();
    Ok((quantile(&samples, 0.50), quantile(&samples, 0.99)))
}

/// Keystroke echo on a PTY of this process: `cat` on the slave in raw mode
/// without echo (what `stty raw -echo` sets), one byte written to the master
/// and read back; (p50, p99).
fn direct_pty_echo() -> anyhow::Result<(Duration, Duration)> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};

    let pty = nix::pty::openpty(None, None).context("openpty")?;
    let mut termios = tcgetattr(&pty.slave).context("tcgetattr")?;
    cfmakeraw(&mut termios);
    tcsetattr(&pty.slave, SetArg::TCSANOW, &termios).context("tcsetattr")?;
    let child = Command::new("cat")
        .stdin(Stdio::from(pty.slave.try_clone().context("dup")?))
        .stdout(Stdio::from(pty.slave.try_clone().context("dup")?))
        .stderr(Stdio::null())
        .spawn()
        .context("cat on the PTY")?;
    let mut cat = KillOnDrop(child);
    drop(pty.slave);
    let mut master = File::from(pty.master);
    let limit = PollTimeout::try_from(ECHO_LIMIT).map_err(|e| anyhow!("poll timeout: {e}"))?;
    let mut samples = Vec::with_capacity(ECHO_SAMPLES);
    let mut buffer = [0u8; 64];
    for i in 0..ECHO_WARM_UP + ECHO_SAMPLES {
        let byte = b'a' + (i % 26) as u8;
        let sent = Instant::now();
        master.write_all(&[byte]).context("write to the PTY")?;
        loop {
            let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, limit).context("poll")? == 0 {
                bail!("echo sample {i} on the direct PTY: nothing within {ECHO_LIMIT:?}");
            }
            let n = master.read(&mut buffer).context("read from the PTY")?;
            if n == 0 {
                bail!("echo sample {i} on the direct PTY: end of file");
            }
            if buffer[n - 1] == byte {
                break;
            }
        }
        if i >= ECHO_WARM_UP {
            samples.push(sent.elapsed());
        }
    }
    drop(master);
    let _ = cat.0.kill();
    let _ = cat.0.wait();
    samples.sort();
    Ok((quantile(&samples, 0.50), quantile(&samples, 0.99)))
}

/// The line feeds of the bulk file.
fn lines() -> u64 {
    FILE_BYTES.div_ceil(LINE as u64 + 1)
}

/// Reads with `read` on a thread of its own until the end (0 bytes, or EIO of
/// a PTY whose other side closed); the instants of the first byte and of the
/// end, and the bytes read. Bounded by [`BULK_LIMIT`].
fn read_to_end_within(
    mut read: impl FnMut(&mut [u8]) -> std::io::Result<usize> + Send + 'static,
) -> anyhow::Result<(Instant, Instant, u64)> {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 1 << 20];
        let mut first = None;
        let mut received: u64 = 0;
        let outcome = loop {
            match read(&mut buffer) {
                Ok(0) => break Ok((first, Instant::now(), received)),
                Err(error) if error.raw_os_error() == Some(nix::libc::EIO) => {
                    break Ok((first, Instant::now(), received));
                }
                Ok(n) => {
                    first.get_or_insert_with(Instant::now);
                    received += n as u64;
                }
                Err(error) => break Err(error),
            }
        };
        let _ = done.send(outcome);
    });
    let (first, end, received) = result
        .recv_timeout(BULK_LIMIT)
        .map_err(|_| anyhow!("not finished within {BULK_LIMIT:?}"))?
        .context("reading the output")?;
    let first = first.context("no output")?;
    Ok((first, end, received))
}

/// One bulk run on a PTY of this process: `cat FILE` with the PTY as its
/// output and the PTY's default settings (as the shell's, `opost onlcr`), the
/// master read directly; the seconds from the first byte to the end.
fn direct_pty_cat(file: &Path) -> anyhow::Result<f64> {
    let pty = nix::pty::openpty(None, None).context("openpty")?;
    let child = Command::new("cat")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::from(pty.slave))
        .stderr(Stdio::null())
        .spawn()
        .context("cat on the PTY")?;
    let mut cat = KillOnDrop(child);
    let mut master = File::from(pty.master);
    let (first, end, received) =
        read_to_end_within(move |buffer| master.read(buffer)).context("cat on a direct PTY")?;
    let status = cat.0.wait().context("wait for cat")?;
    if !status.success() || received != FILE_BYTES + lines() {
        bail!("cat on a direct PTY: {status}, {received} bytes");
    }
    Ok((end - first).as_secs_f64())
}

/// Encrypts and sends one frame of the device.
/// A child process killed when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `command` with its output in `log`, killed after `limit`.
fn run_bounded(mut command: Command, log: &Path, limit: Duration) -> anyhow::Result<()> {
    let out = File::create(log).context("log file")?;
    let child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone().context("log file")?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("{command:?} does not start"))?;
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.0.try_wait().context("wait")? {
            if status.success() {
                return Ok(());
            }
            let text = fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            bail!(
                "{:?} failed ({status}): {}",
                command.get_program(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{:?} did not finish within {limit:?}",
                command.get_program()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `sshd` of this run: its own configuration, host key and port, the session
/// user's login with a key of this run only (D-181).
struct Sshd {
    /// Killed with this value.
    _process: KillOnDrop,
    port: u16,
    key: PathBuf,
    user: String,
    dir: PathBuf,
}

impl Sshd {
    fn start(scenario: &Scenario) -> anyhow::Result<Sshd> {
        let dir = scenario.dir.path.join("ssh");
        fs::create_dir(&dir).context("ssh folder")?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).context("chmod")?;
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() {
            eprintln!("host bench: installing openssh-server");
            let install = || {
                let mut apt = Command::new("apt-get");
                apt.args(["install", "-y", "--no-install-recommends", "openssh-server"])
                    .env("DEBIAN_FRONTEND", "noninteractive");
                run_bounded(apt, &dir.join("apt-install.log"), APT_LIMIT)
            };
            if install().is_err() {
                let mut update = Command::new("apt-get");
                update.arg("update");
                run_bounded(update, &dir.join("apt-update.log"), APT_LIMIT)
                    .context("apt-get update")?;
                install().context("apt-get install openssh-server")?;
            }
        }
        // The privilege separation folder sshd insists on.
        fs::create_dir_all("/run/sshd").context("/run/sshd")?;
        let keygen = |path: &Path| {
            let _ = fs::remove_file(path);
            let mut command = Command::new("ssh-keygen");
            command
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(path);
            run_bounded(command, &dir.join("keygen.log"), SHELL_LIMIT)
        };
        let host_key = dir.join("host_ed25519");
        let key = dir.join("client_ed25519");
        keygen(&host_key).context("host key")?;
        keygen(&key).context("client key")?;
        let authorized = dir.join("authorized_keys");
        fs::copy(dir.join("client_ed25519.pub"), &authorized).context("authorized_keys")?;
        fs::set_permissions(&authorized, fs::Permissions::from_mode(0o644)).context("chmod")?;
        let user = scenario.users[0].name.clone();
        // useradd leaves the password locked (`!`), which sshd without PAM
        // refuses even for a key; `*` is "no password" and not locked.
        let mut usermod = Command::new("usermod");
        usermod.args(["-p", "*", &user]);
        run_bounded(usermod, &dir.join("usermod.log"), SHELL_LIMIT).context("usermod")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("a free port")?
            .port();
        let config = dir.join("sshd_config");
        fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile none\n\
                 AuthorizedKeysFile {}\nAllowUsers {user}\nPubkeyAuthentication yes\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 Ciphers {SSH_CIPHER}\nPrintMotd no\nPrintLastLog no\nLogLevel ERROR\n",
                host_key.display(),
                authorized.display(),
            ),
        )
        .context("sshd_config")?;
        let mut check = Command::new(sshd);
        check.arg("-t").arg("-f").arg(&config);
        run_bounded(check, &dir.join("sshd-check.log"), SHELL_LIMIT).context("sshd -t")?;
        let log = File::create(dir.join("sshd.log")).context("sshd log")?;
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("sshd log")?)
            .stderr(log)
            .spawn()
            .context("sshd does not start")?;
        let mut child = KillOnDrop(child);
        let deadline = Instant::now() + SHELL_LIMIT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = child.0.try_wait().context("wait")? {
                bail!(
                    "sshd exited ({status}): {}",
                    fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                bail!("sshd did not listen within {SHELL_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Sshd {
            _process: child,
            port,
            key,
            user,
            dir,
        })
    }

    /// `ssh` to the session user on this run's `sshd` (`-tt` with `tty`, else
    /// `-T`), its errors in `ssh.log`; the command line ends with the
    /// destination.
    fn ssh(&self, tty: bool) -> anyhow::Result<Command> {
        let errors = File::create(self.dir.join("ssh.log")).context("ssh log")?;
        let mut command = Command::new("ssh");
        command
            .args(["-F", "/dev/null", if tty { "-tt" } else { "-T" }])
            .args(["-p", &self.port.to_string()])
            .args(["-c", SSH_CIPHER, "-i"])
            .arg(&self.key)
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "AddressFamily=inet",
                "-o",
                "ConnectTimeout=10",
                "-o",
                "LogLevel=ERROR",
            ])
            .arg(format!("{}@localhost", self.user))
            .stderr(errors);
        Ok(command)
    }

    /// The text of `ssh.log`, for a failure.
    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("ssh.log"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// Keystroke echo through `ssh -tt`: `stty raw -echo; exec cat` on the
    /// PTY sshd gives the session, one byte written to ssh's standard input
    /// (a pipe: no local terminal in between) and read back from its
    /// standard output, as [`bothy_echo`] does through bothy; (p50, p99).
    fn echo(&self) -> anyhow::Result<(Duration, Duration)> {
        let child = self
            .ssh(true)?
            .arg("stty raw -echo; exec cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("ssh does not start")?;
        let mut child = KillOnDrop(child);
        let mut input = child.0.stdin.take().context("ssh stdin")?;
        let mut output = child.0.stdout.take().context("ssh stdout")?;
        let mut buffer = [0u8; 256];
        // Reads what is there within `limit`; 0 bytes: nothing came.
        let read_within = |output: &mut std::process::ChildStdout,
                           buffer: &mut [u8],
                           limit: Duration|
         -> anyhow::Result<usize> {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            let timeout = PollTimeout::try_from(limit).map_err(|e| anyhow!("poll: {e}"))?;
            let mut fds = [PollFd::new(output.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, timeout).context("poll")? == 0 {
                return Ok(0);
            }
            let n = output.read(buffer).context("read from ssh")?;
            if n == 0 {
                bail!("ssh ended: {}", self.log());
            }
            Ok(n)
        };
        // `cat` runs once a probe byte comes back.
        let deadline = Instant::now() + SHELL_LIMIT;
        'probe: loop {
            input.write_all(b"Z").context("write to ssh")?;
            let until = Instant::now() + Duration::from_millis(200);
            while Instant::now() < until {
                let n = read_within(&mut output, &mut buffer, Duration::from_millis(50))?;
                if n > 0 && buffer[..n].contains(&b'Z') {
                    break 'probe;
                }
            }
            if Instant::now() > deadline {
                bail!("`stty raw -echo; cat` through ssh never echoed a probe byte");
            }
        }
        // Quiet for 300 ms: every probe's echo is read.
        while read_within(&mut output, &mut buffer, Duration::from_millis(300))? > 0 {}
        let mut samples = Vec::with_capacity(ECHO_SAMPLES);
        for i in 0..ECHO_WARM_UP + ECHO_SAMPLES {
            let byte = b'a' + (i % 26) as u8;
            let sent = Instant::now();
            input.write_all(&[byte]).context("write to ssh")?;
            loop {
                let n = read_within(&mut output, &mut buffer, ECHO_LIMIT)?;
                if n == 0 {
                    bail!("echo sample {i} through ssh: nothing within {ECHO_LIMIT:?}");
                }
                if buffer[n - 1] == byte {
                    break;
                }
            }
            if i >= ECHO_WARM_UP {
                samples.push(sent.elapsed());
            }
        }
        drop(input);
        samples.sort();
        Ok((quantile(&samples, 0.50), quantile(&samples, 0.99)))
    }

    /// From starting `ssh -tt` to the session user's login shell (its TCP
    /// connect, key exchange, authentication, sshd's PTY and the shell's
    /// start) to the first byte of the shell on ssh's standard output:
    /// the peer of `open_to_first_byte_ms`.
    fn connect_to_first_byte(&self) -> anyhow::Result<Duration> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut command = self.ssh(true)?;
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let started = Instant::now();
        let child = command.spawn().context("ssh does not start")?;
        let mut child = KillOnDrop(child);
        let mut output = child.0.stdout.take().context("ssh stdout")?;
        let timeout = PollTimeout::try_from(SHELL_LIMIT).map_err(|e| anyhow!("poll: {e}"))?;
        let mut fds = [PollFd::new(output.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, timeout).context("poll")? == 0 {
            bail!("no byte of the shell within {SHELL_LIMIT:?}");
        }
        let took = started.elapsed();
        let mut byte = [0u8; 1];
        if output.read(&mut byte).context("read from ssh")? == 0 {
            bail!("ssh ended without output: {}", self.log());
        }
        // Closing its input ends the shell; the drop kills what is left.
        drop(child.0.stdin.take());
        Ok(took)
    }

    /// One bulk run: `ssh -T ... cat FILE` (with `tty`: `ssh -tt`, a PTY on
    /// the server's side as bothy has), the seconds from the first byte on its
    /// standard output to its end.
    fn cat(&self, file: &Path, tty: bool) -> anyhow::Result<f64> {
        let child = self
            .ssh(tty)?
            .arg("cat")
            .arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("ssh does not start")?;
        let mut child = KillOnDrop(child);
        let mut stdout = child.0.stdout.take().context("ssh stdout")?;
        let (first, end, received) =
            read_to_end_within(move |buffer| stdout.read(buffer)).context("ssh cat")?;
        let status = child.0.wait().context("wait for ssh")?;
        // Through a PTY every line feed arrives as CR LF.
        let expected = if tty {
            FILE_BYTES + lines()
        } else {
            FILE_BYTES
        };
        if !status.success() || received != expected {
            bail!("ssh cat: {status}, {received} bytes: {}", self.log());
        }
        Ok((end - first).as_secs_f64())
    }
}
