//! The web console's benchmark (issue 19): `cargo bench -p bothy-host --bench
//! console --features test-seams` (or `npm run bench` in web/console), as
//! root, after `npm ci` in web/console. A release build; one figure per line,
//! `name: value unit`, on standard output; progress goes to standard error.
//!
//! The path is the product's: the real server in this process (the scenario
//! harness of the host service's tests), the real `bothy-host` binary under
//! `bothy-host supervise` with a real session user, and a real headless
//! Chromium (Debian's `/usr/bin/chromium`) driven by
//! `web/console/bench/console.bench.mjs` (playwright-core over CDP), which
//! runs the console as served, Noise in the tab included. What each figure
//! measures is said in that script: the 16 MiB burst painted in the tab
//! beside the same bytes written into xterm.js from memory in the same page,
//! the keystroke echo in the tab (p50, p99), and the opening to the first
//! glyph painted (p50, from the click and from the end of the step-up).

use bothy_testkit::scenario as e2e_common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, bail};
use bothy_server::db::Engine;
use e2e_common::{Options, bench};

fn main() -> ExitCode {
    bench::main_as_root(
        "console",
        "it creates OS users and runs bothy-host supervise",
        run,
    )
}

async fn run() -> anyhow::Result<()> {
    eprintln!("console bench: starting the server and the host service");
    // The server on 443, the port of its public_url (https://localhost): the
    // browser reaches it as a person's browser would, with no forwarder of
    // the script's own in between (whose copies took CPU from the tab).
    let options = Options {
        server_on_public_port: true,
        ..Options::default()
    };
    let scenario = bench::start_within(Engine::Sqlite, options).await?;
    let console = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/console");
    let mut node = Command::new("node")
        .arg("bench/console.bench.mjs")
        .current_dir(&console)
        .env("E2E_PORT", scenario.server.port.to_string())
        .env("E2E_CA", &scenario.server.ca_file)
        .env("E2E_OWNER", &scenario.owner.enrolled.username)
        .env("E2E_OWNER_PASSWORD", &scenario.owner.enrolled.password)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("node runs (npm ci in web/console first)")?;
    let mut stdin = node.stdin.take().context("stdin")?;
    let stdout = BufReader::new(node.stdout.take().context("stdout")?);
    let mut ok = false;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        for line in stdout.lines() {
            let line = line.context("a line from the script")?;
            if let Some(figure) = line.strip_prefix("FIGURE ") {
                println!("{figure}");
            } else {
                eprintln!("console bench: {line}");
            }
            if line == "TOTP_NOW?" {
                let code = scenario.owner.enrolled.fresh_code(&scenario.server);
                writeln!(stdin, "TOTP {code}").context("answer")?;
            } else if line == "OK" {
                ok = true;
            }
        }
        Ok(())
    })?;
    let status = node.wait().context("node ends")?;
    if !ok || !status.success() {
        bail!(
            "the browser run failed ({status}); service log:\n{}",
            scenario.log()
        );
    }
    Ok(())
}
