//! The output filter of the `bothy` client (11.2), which every byte a host
//! sends passes before it reaches the local terminal: `cargo bench -p bothy
//! --bench filter` (a release build). One figure per line, `name: value
//! unit`, on standard output.
//!
//! Four kinds of output, 64 MiB each, filtered in 16 KiB pieces (the size of
//! the data frames a host sends at most): plain text lines; coloured lines
//! (an SGR sequence every few words, like `ls --color` or a compiler); lines
//! of UTF-8 text with box drawing, as a full-screen program draws them; and
//! coloured lines with an OSC 8 hyperlink and an OSC 52 clipboard write every
//! 64 lines (rewritten and dropped). Beside them, in the same run, the copy
//! of the same bytes into the output buffer without any filter: the ceiling.
//! The median of five runs is the figure; the bulk path through host, relay
//! and client measured by `cargo bench -p bothy-host --bench host` (about
//! 27 MiB/s) is the scale it is read against.

use std::hint::black_box;
use std::time::Instant;

use bothy::filter::OutputFilter;

const TOTAL: usize = 64 << 20;
const PIECE: usize = 16 << 10;
const RUNS: usize = 5;

/// `TOTAL` bytes of lines built by `line(i)`.
fn corpus(line: impl Fn(usize) -> String) -> Vec<u8> {
    let mut out = Vec::with_capacity(TOTAL + 4096);
    let mut i = 0;
    while out.len() < TOTAL {
        out.extend_from_slice(line(i).as_bytes());
        i += 1;
    }
    out.truncate(TOTAL);
    out
}

fn plain(i: usize) -> String {
    format!("{i:>8} the quick brown fox jumps over the lazy dog 0123456789 abcdef\r\n")
}

fn coloured(i: usize) -> String {
    format!(
        "\x1b[1;34m{i:>8}\x1b[0m \x1b[32mthe quick\x1b[0m brown \x1b[33mfox\x1b[0m jumps over the lazy dog\r\n"
    )
}

fn box_drawing(i: usize) -> String {
    format!(
        "\u{2502} {i:>8} \u{2500}\u{2500} caf\u{e9} na\u{ef}ve \u{2714} \u{1f600} r\u{e9}sum\u{e9} \u{2502}\r\n"
    )
}

fn with_links(i: usize) -> String {
    if i % 64 == 0 {
        format!(
            "\x1b]8;;https://example.com/{i}\x1b\\link {i}\x1b]8;;\x1b\\ \x1b]52;c;aGVsbG8=\x07{}",
            coloured(i)
        )
    } else {
        coloured(i)
    }
}

/// MiB/s of the median run of `work` over `data`.
fn median_mib_s(data: &[u8], mut work: impl FnMut(&[u8], &mut Vec<u8>)) -> f64 {
    let mut rates: Vec<f64> = (0..RUNS)
        .map(|_| {
            let mut out = Vec::with_capacity(PIECE * 2);
            let started = Instant::now();
            for piece in data.chunks(PIECE) {
                out.clear();
                work(piece, &mut out);
                black_box(&out);
            }
            let seconds = started.elapsed().as_secs_f64();
            f64::from(u32::try_from(data.len() >> 20).unwrap_or(u32::MAX)) / seconds
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

fn main() {
    for (name, data) in [
        ("plain", corpus(plain)),
        ("coloured", corpus(coloured)),
        ("utf8_box_drawing", corpus(box_drawing)),
        ("links_and_clipboard", corpus(with_links)),
    ] {
        let copy = median_mib_s(&data, |piece, out| out.extend_from_slice(piece));
        let mut filter = OutputFilter::new();
        let filtered = median_mib_s(&data, |piece, out| filter.filter(piece, out));
        println!("filter_{name}_mib_s: {filtered:.1} MiB/s");
        println!("copy_{name}_mib_s: {copy:.1} MiB/s");
    }
}
