//! The answer of the service to `bothy-host doctor` over admin.sock
//! ([`super::endpoint`]): the lines of the local output and the two flags, one
//! line of strict JSON `{"lines":[...],"failed":bool,"exits":bool}`; and the
//! command's side: asking the running service and printing its answer.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::time::Duration;

use bothy_proto::json::{self, Object};
use serde_json::json;

use crate::state::ADMIN_SOCKET;

/// Largest line read on the endpoint.
pub(super) const MAX_LINE: usize = 1 << 20;

/// How long the client waits for the full run (the entry scan is bounded by
/// `host_service.entry_scan_timeout`, so this is a safety net only).
const CLIENT_WAIT: Duration = Duration::from_secs(3600);

/// The answer of the service to a doctor request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorAnswer {
    /// The lines of the local output (names as the rule for names allows).
    pub lines: Vec<String>,
    /// Whether a check failed (the command's exit code is then not 0).
    pub failed: bool,
    /// Whether the service exits like a refused start after this run.
    pub exits: bool,
}

impl DoctorAnswer {
    pub(super) fn to_json(&self) -> String {
        json!({"lines": self.lines, "failed": self.failed, "exits": self.exits}).to_string()
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<DoctorAnswer> {
        let value = json::parse(bytes, MAX_LINE).ok()?;
        let object = Object::root(&value, &["lines", "failed", "exits"]).ok()?;
        let lines = object
            .array("lines")
            .ok()?
            .iter()
            .map(|line| line.as_str().map(str::to_owned).ok())
            .collect::<Option<Vec<String>>>()?;
        Some(DoctorAnswer {
            lines,
            failed: object.bool("failed").ok()?,
            exits: object.bool("exits").ok()?,
        })
    }
}

/// The client side for `bothy-host doctor`: `None` when no service answers on
/// the endpoint (the command then checks by itself).
pub fn ask_doctor(state_dir: &Path) -> Option<DoctorAnswer> {
    let path = state_dir.join(ADMIN_SOCKET);
    let mut stream = StdUnixStream::connect(&path).ok()?;
    let _ = stream.set_read_timeout(Some(CLIENT_WAIT));
    stream.write_all(b"{\"op\":\"doctor\"}\n").ok()?;
    let mut line = Vec::new();
    BufReader::new(std::io::Read::take(stream, MAX_LINE as u64))
        .read_until(b'\n', &mut line)
        .ok()?;
    DoctorAnswer::decode(line.trim_ascii())
}

/// Prints an answer as `bothy-host doctor` does and returns its exit code.
pub fn print_answer(answer: &DoctorAnswer) -> i32 {
    // Issue 16 item 10: whose run this is.
    println!(
        "The host service runs: these are the results of its own run of the checks (as the \
         service sees the host), not of a separate run by this command."
    );
    for line in &answer.lines {
        println!("{line}");
    }
    if answer.exits {
        println!(
            "The running host service refuses to run with this result: it reported it and stopped."
        );
    }
    i32::from(answer.failed)
}
