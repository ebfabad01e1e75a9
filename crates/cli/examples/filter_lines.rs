//! A test peer for the console's filter tests (issue 19): every line of hex
//! on stdin is one session's output; the line written back is the hex of
//! what `bothy::filter::OutputFilter` lets through (with `finish`). The
//! TypeScript test feeds the same pseudo-random inputs to both filters, so
//! they cannot drift beyond the shared cases. Not shipped.

use std::io::{BufRead, Write};

use bothy::filter::OutputFilter;

fn main() -> std::process::ExitCode {
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let Ok(line) = line else {
            return std::process::ExitCode::from(2);
        };
        let line = line.trim();
        let input: Option<Vec<u8>> = (0..line.len())
            .step_by(2)
            .map(|i| {
                line.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect();
        let Some(input) = input else {
            eprintln!("filter_lines: not hex");
            return std::process::ExitCode::from(2);
        };
        let mut filter = OutputFilter::new();
        let mut out = Vec::new();
        filter.filter(&input, &mut out);
        filter.finish(&mut out);
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        if writeln!(stdout, "{hex}").is_err() || stdout.flush().is_err() {
            return std::process::ExitCode::from(2);
        }
    }
    std::process::ExitCode::SUCCESS
}
