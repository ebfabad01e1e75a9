//! Several server nodes (issue 18): `cargo bench -p bothy-host --bench
//! cluster --features test-seams`, as root (a release build; it makes OS users,
//! starts `bothy-host supervise` and Debian's nginx). One figure per line,
//! `name: value unit`, on standard output; progress goes to standard error.
//!
//! `open_to_first_byte_ms` as in `host.rs` (from the open request, the step-up
//! before it not counted, through the device stream, the Noise handshake and
//! `start` to the first data frame of the shell; the median of five openings)
//! in the same run for:
//! - `one_node`: one server on PostgreSQL, the host and the device connected
//!   to it directly;
//! - `cluster`: three nodes on one PostgreSQL database behind nginx
//!   (`bothy_testkit::scenario::cluster`): the opening served by node A,
//!   the host's control connection on node B (so `session.open` travels as
//!   `NOTIFY ephemeral` from A's commit to B), both streams through nginx to
//!   node C. The host's probation of 3.4 has passed before the first timed
//!   opening (it is a once-per-connection wait, not part of an opening).
//!
//! and their ratio (the goal of issue 18: at most 1.3); then
//! `bulk_cat_mib_s`, the relay's throughput with the real host service: a
//! `cat` of a 64 MiB file of printable lines in the shell of one session,
//! from its first output byte to a sentinel after it (the median of three
//! runs), on one node directly beside the cluster, where both streams pass
//! nginx (TLS terminated and made again) to node C, and their ratio.
//!
//! Every wait is bounded; a failure prints what failed and exits non-zero.

use bothy_testkit::scenario as e2e_common;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;
use bothy_server::db::Engine;
use e2e_common::{Options, Scenario, bench, bulk};

/// Openings timed per setup; the median is printed.
const OPENINGS: usize = 5;
/// The size of the bulk file: 64 MiB.
const BULK_BYTES: u64 = 64 * 1024 * 1024;
/// Bulk runs per setup; the median is printed.
const BULK_RUNS: usize = 3;
/// The bound of one bulk run.
const BULK_LIMIT: Duration = Duration::from_secs(300);
/// The bound of a closing session.
const LIMIT: Duration = Duration::from_secs(30);
/// The probe timeout of both setups; the cluster waits out twice it (the
/// probation) before the first timed opening.
const PROBE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    bench::main_as_root("cluster", "OS users, bothy-host supervise, nginx", run)
}

async fn run() -> anyhow::Result<()> {
    let terminal = format!("  host_duplicate_probe_timeout: {}s\n", PROBE.as_secs());
    eprintln!("cluster bench: one node");
    let one = start(Options {
        extra_terminal_yaml: terminal.clone(),
        ..Options::default()
    })
    .await?;
    let one_ms = median_opening(&one).await?;
    let one_bulk = median_bulk(&one).await?;
    drop(one);
    eprintln!("cluster bench: three nodes behind nginx");
    let cluster = start(Options {
        cluster: true,
        extra_terminal_yaml: terminal,
        ..Options::default()
    })
    .await?;
    tokio::time::sleep(PROBE * 2 + Duration::from_millis(500)).await;
    let cluster_ms = median_opening(&cluster).await?;
    let cluster_bulk = median_bulk(&cluster).await?;
    drop(cluster);
    println!("open_to_first_byte_ms one_node: {one_ms:.1} ms");
    println!("open_to_first_byte_ms cluster: {cluster_ms:.1} ms");
    println!(
        "open_to_first_byte cluster/one_node: {:.2} x",
        cluster_ms / one_ms
    );
    println!("bulk_cat_mib_s one_node: {one_bulk:.1} MiB/s");
    println!("bulk_cat_mib_s cluster: {cluster_bulk:.1} MiB/s");
    println!(
        "bulk_cat cluster/one_node: {:.2} x",
        cluster_bulk / one_bulk
    );
    Ok(())
}

/// The median MiB/s of [`BULK_RUNS`] bulk runs in one session's shell.
async fn median_bulk(scenario: &Scenario) -> anyhow::Result<f64> {
    let file = scenario.dir.path.join("bulk.txt");
    bulk::write_file(&file, BULK_BYTES)?;
    let mut device = tokio::time::timeout(LIMIT, scenario.open_shell())
        .await
        .map_err(|_| anyhow!("opening the bulk session took over {LIMIT:?}"))?;
    bulk::quiet_shell(&mut device).await?;
    let mut runs = Vec::with_capacity(BULK_RUNS);
    for run in 1..=BULK_RUNS {
        eprintln!("cluster bench: bulk run {run}");
        let seconds = bulk::cat(&mut device, &file, BULK_BYTES, BULK_LIMIT).await?;
        runs.push(BULK_BYTES as f64 / (1024.0 * 1024.0) / seconds);
        bulk::drain_quiet(&mut device, Duration::from_millis(300)).await?;
    }
    runs.sort_by(f64::total_cmp);
    Ok(runs[runs.len() / 2])
}

async fn start(options: Options) -> anyhow::Result<Scenario> {
    bench::start_within(Engine::Postgres, options).await
}

async fn median_opening(scenario: &Scenario) -> anyhow::Result<f64> {
    let mut took = Vec::with_capacity(OPENINGS);
    for _ in 0..OPENINGS {
        took.push(
            bench::timed_opening(scenario, LIMIT)
                .await?
                .took
                .as_secs_f64()
                * 1000.0,
        );
    }
    took.sort_by(f64::total_cmp);
    Ok(took[took.len() / 2])
}
