//! The output filter of the terminal view (11.2, TM-T14): escape sequences
//! that leave the device or make the local terminal send data back never
//! reach it.
//!
//! - OSC 52 (clipboard) is dropped.
//! - OSC 8 hyperlinks are replaced by their text followed by the target in
//!   brackets: `ESC]8;;URI ST text ESC]8;; ST` becomes `text [URI]`, so no
//!   link opens without the person seeing where it goes.
//! - The title and icon-label reports of XTWINOPS (`CSI 20 t`, `CSI 21 t`)
//!   are dropped: their answer is text the remote chose, typed back into the
//!   remote's input.
//! - C1 controls (raw 8-bit or UTF-8 encoded, U+0080..U+009F) are dropped: the
//!   parser reads only 7-bit sequences, and a terminal that honours 8-bit CSI
//!   or OSC would otherwise see a sequence the filter never judged.
//!
//! Everything else passes byte for byte. The `vte` crate parses (parameters
//! of CSI, OSC and DCS); this module frames the raw bytes of each sequence
//! beside it, so a sequence is emitted, dropped or rewritten whole, and only
//! once it is complete: a sequence split over several data frames is held
//! until its end. A string sequence (OSC, DCS, SOS/PM/APC) longer than
//! [`MAX_STRING`] is dropped whole without being buffered.

/// The longest string sequence (OSC, DCS, SOS/PM/APC) that is kept; a longer
/// one is dropped (an OSC 52 of any size never passes this way).
pub const MAX_STRING: usize = 1 << 20;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;

/// Where the framing of the raw bytes stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Ground,
    /// After ESC; `intermediate` once a byte 0x20..=0x2F came.
    Esc {
        intermediate: bool,
    },
    Csi,
    Osc,
    Dcs,
    /// SOS, PM or APC: a string that ends at ESC, CAN or SUB.
    Str,
}

/// What the parser reported for the byte just fed.
#[derive(Debug, Default)]
struct Events {
    printed: Option<char>,
    executed: Option<u8>,
    csi: Option<bool>,
    esc: bool,
    osc: Option<OscVerdict>,
    hooked: Option<bool>,
    unhooked: bool,
}

/// The judgement of one OSC.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OscVerdict {
    Pass,
    Drop,
    /// OSC 8 with a target: the start of a link.
    LinkOpen(String),
    /// OSC 8 without a target: the end of a link.
    LinkClose,
}

impl vte::Perform for Events {
    fn print(&mut self, c: char) {
        self.printed = Some(c);
    }

    fn execute(&mut self, byte: u8) {
        self.executed = Some(byte);
    }

    fn hook(&mut self, _params: &vte::Params, _intermediates: &[u8], _ignore: bool, _action: char) {
        // DCS passes: DECRQSS and XTGETTCAP answer with the terminal's own
        // state, not with text the remote chose.
        self.hooked = Some(true);
    }

    fn unhook(&mut self) {
        self.unhooked = true;
    }

    fn osc_dispatch(&mut self, params: &[&[u8]], _bell_terminated: bool) {
        let verdict = match params.first().copied() {
            Some(b"52") => OscVerdict::Drop,
            Some(b"8") => {
                // ESC ] 8 ; params ; URI — the URI may itself hold ';'.
                let target = params.get(2..).unwrap_or_default().join(&b';');
                let text: String = String::from_utf8_lossy(&target)
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect();
                if text.is_empty() {
                    OscVerdict::LinkClose
                } else {
                    OscVerdict::LinkOpen(text)
                }
            }
            _ => OscVerdict::Pass,
        };
        self.osc = Some(verdict);
    }

    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        intermediates: &[u8],
        ignore: bool,
        action: char,
    ) {
        let first = params.iter().next().and_then(|p| p.first().copied());
        let title_report =
            action == 't' && intermediates.is_empty() && matches!(first, Some(20 | 21));
        self.csi = Some(!ignore && !title_report);
    }

    fn esc_dispatch(&mut self, _intermediates: &[u8], _ignore: bool, _byte: u8) {
        self.esc = true;
    }
}

/// The length of the longest prefix of `input` that passes the filter as it
/// is and leaves the parser in its ground state: printable ASCII, the C0
/// controls a shell's output is made of (BEL, BS, HT, LF, CR) and complete
/// UTF-8 characters other than the C1 controls U+0080..U+009F. An unfinished
/// character at the end is left to the byte-by-byte path.
fn plain_run(input: &[u8]) -> usize {
    let mut at = 0;
    while let Some(&byte) = input.get(at) {
        let len = match byte {
            0x20..=0x7e | BEL | 0x08 | b'\t' | b'\n' | b'\r' => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return at,
        };
        if len > 1 {
            let Some(bytes) = input.get(at..at + len) else {
                return at;
            };
            match std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.chars().next())
            {
                Some(c) if !('\u{80}'..='\u{9f}').contains(&c) => {}
                _ => return at,
            }
        }
        at += len;
    }
    at
}

/// The filter of one session's output; keeps state across data frames.
pub struct OutputFilter {
    parser: vte::Parser,
    framing: Framing,
    /// The raw bytes of the sequence being framed.
    pending: Vec<u8>,
    /// A string sequence that passed and ended with the ESC that starts the
    /// sequence being framed: it goes out when that one ends, with an ST of
    /// its own when that one is dropped (else the local terminal would read
    /// what follows as part of the string).
    held: Vec<u8>,
    /// The bytes of an unfinished UTF-8 character in the ground state.
    utf8: Vec<u8>,
    /// The string sequence grew past [`MAX_STRING`]: dropped whole.
    overflow: bool,
    /// The verdict of the DCS being framed (from its hook).
    dcs_pass: bool,
    /// The target of the open OSC 8 link.
    link: Option<String>,
    /// The last sequence was dropped and ended with ESC: its ST (`ESC \`) goes too.
    swallow_st: bool,
}

impl std::fmt::Debug for OutputFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputFilter")
            .field("framing", &self.framing)
            .finish_non_exhaustive()
    }
}

impl Default for OutputFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl OutputFilter {
    /// A filter in the ground state.
    pub fn new() -> OutputFilter {
        OutputFilter {
            parser: vte::Parser::new(),
            framing: Framing::Ground,
            pending: Vec::new(),
            held: Vec::new(),
            utf8: Vec::new(),
            overflow: false,
            dcs_pass: false,
            link: None,
            swallow_st: false,
        }
    }

    /// Filters `input`, appending what may reach the local terminal to `out`.
    ///
    /// Between sequences, a run of bytes that the parser would only print or
    /// execute unchanged (see [`plain_run`]) is copied in one piece; the
    /// parser is then in its ground state before and after the run, so
    /// skipping it changes nothing (the differential test below compares
    /// with the byte-by-byte path). Everything else goes byte by byte.
    pub fn filter(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while let Some((&first, rest)) = input.split_first() {
            if self.at_rest() {
                let run = plain_run(input);
                if run > 0 {
                    out.extend_from_slice(&input[..run]);
                    // What the parser prints or executes ends a swallowed ST.
                    self.swallow_st = false;
                    input = &input[run..];
                    continue;
                }
            }
            self.byte(first, out);
            input = rest;
        }
    }

    /// Between sequences, with nothing held: the parser is in its ground
    /// state with no unfinished character.
    fn at_rest(&self) -> bool {
        self.framing == Framing::Ground
            && self.utf8.is_empty()
            && self.pending.is_empty()
            && self.held.is_empty()
    }

    /// What the end of the session leaves: a held string gets its ST, and
    /// the target of a link whose end never came is shown.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.release_held(false, out);
        if let Some(target) = self.link.take() {
            out.extend_from_slice(format!(" [{target}]").as_bytes());
        }
    }

    fn feed(&mut self, byte: u8) -> Events {
        let mut events = Events::default();
        self.parser.advance(&mut events, &[byte]);
        events
    }

    fn byte(&mut self, byte: u8, out: &mut Vec<u8>) {
        match self.framing {
            Framing::Ground => self.ground(byte, out),
            Framing::Esc { intermediate } => self.esc(byte, intermediate),
            Framing::Csi => self.csi(byte),
            Framing::Osc => self.osc(byte, out),
            Framing::Dcs | Framing::Str => self.string(byte, out),
        }
        if self.framing == Framing::Ground {
            let kept = !self.pending.is_empty();
            self.release_held(kept, out);
            out.append(&mut self.pending);
        }
    }

    /// Lets the held string go out; `terminated` says whether what follows
    /// it (and ends it) goes out too, else it gets an ST here.
    fn release_held(&mut self, terminated: bool, out: &mut Vec<u8>) {
        if self.held.is_empty() {
            return;
        }
        out.append(&mut self.held);
        if !terminated {
            out.extend_from_slice(b"\x1b\\");
        }
    }

    /// Starts a sequence with ESC.
    fn start_escape(&mut self) {
        self.pending.clear();
        self.pending.push(ESC);
        self.framing = Framing::Esc {
            intermediate: false,
        };
        self.overflow = false;
    }

    /// Ends the framed sequence: its bytes go to the output (`keep`) or not.
    fn end(&mut self, keep: bool) {
        if !keep {
            self.pending.clear();
        }
        self.framing = Framing::Ground;
    }

    fn ground(&mut self, byte: u8, out: &mut Vec<u8>) {
        let events = self.feed(byte);
        if byte == ESC {
            // An unfinished UTF-8 character ends here as the parser's
            // replacement character; its raw bytes pass.
            out.append(&mut self.utf8);
            self.swallow_st = false;
            self.start_escape();
            return;
        }
        self.utf8.push(byte);
        let c1 = events
            .printed
            .is_some_and(|c| ('\u{80}'..='\u{9f}').contains(&c))
            || events.executed.is_some_and(|b| b >= 0x80);
        if events.printed.is_some() || events.executed.is_some() {
            self.swallow_st = false;
            if c1 {
                self.utf8.clear();
            } else {
                out.append(&mut self.utf8);
            }
        } else if self.utf8.len() >= 4 {
            // Not a character the parser finished: the bytes pass as they are.
            out.append(&mut self.utf8);
        }
    }

    fn esc(&mut self, byte: u8, intermediate: bool) {
        let events = self.feed(byte);
        match byte {
            ESC => {
                // ESC ESC: the first one is abandoned; it does nothing.
                self.start_escape();
            }
            CAN | SUB => self.end(false),
            0x00..=0x1f => self.pending.push(byte),
            0x20..=0x2f => {
                self.pending.push(byte);
                self.framing = Framing::Esc { intermediate: true };
            }
            b'[' if !intermediate => {
                self.pending.push(byte);
                self.framing = Framing::Csi;
            }
            b']' if !intermediate => {
                self.pending.push(byte);
                self.framing = Framing::Osc;
            }
            b'P' if !intermediate => {
                self.pending.push(byte);
                self.dcs_pass = false;
                self.framing = Framing::Dcs;
            }
            b'X' | b'^' | b'_' if !intermediate => {
                self.pending.push(byte);
                self.framing = Framing::Str;
            }
            0x30..=0x7e => {
                self.pending.push(byte);
                let lone_st = self.pending == [ESC, b'\\'];
                let swallow = self.swallow_st && lone_st && events.esc;
                self.swallow_st = false;
                self.end(!swallow);
            }
            _ => {
                // DEL and 8-bit bytes inside an escape are ignored by the
                // parser; they do not reach the terminal either.
            }
        }
    }

    fn csi(&mut self, byte: u8) {
        let events = self.feed(byte);
        match byte {
            ESC => self.start_escape(),
            CAN | SUB => self.end(false),
            0x40..=0x7e => {
                self.pending.push(byte);
                // No dispatch: the parser ignored the sequence (too many
                // parameters, a misplaced private marker); so does the filter.
                self.end(events.csi == Some(true));
            }
            0x80.. => {}
            _ => self.pending.push(byte),
        }
    }

    /// Keeps a byte of an unfinished OSC or DCS string; past [`MAX_STRING`]
    /// the string overflows and is dropped whole.
    fn hold_string_byte(&mut self, byte: u8) {
        self.pending.push(byte);
        if self.pending.len() > MAX_STRING {
            self.overflow = true;
            self.pending.clear();
        }
    }

    fn osc(&mut self, byte: u8, out: &mut Vec<u8>) {
        let terminator = matches!(byte, BEL | ESC | CAN | SUB);
        if self.overflow && !terminator {
            return;
        }
        let events = self.feed(byte);
        if !terminator {
            self.hold_string_byte(byte);
            return;
        }
        let verdict = if self.overflow {
            OscVerdict::Drop
        } else {
            events.osc.unwrap_or(OscVerdict::Drop)
        };
        if byte != ESC {
            self.pending.push(byte);
        }
        let keep = verdict == OscVerdict::Pass;
        self.release_held(keep, out);
        match verdict {
            OscVerdict::Pass | OscVerdict::Drop => {}
            OscVerdict::LinkOpen(target) => {
                if let Some(previous) = self.link.replace(target) {
                    out.extend_from_slice(format!(" [{previous}]").as_bytes());
                }
            }
            OscVerdict::LinkClose => {
                if let Some(target) = self.link.take() {
                    out.extend_from_slice(format!(" [{target}]").as_bytes());
                }
            }
        }
        self.end(keep);
        if byte == ESC {
            // The ESC starts the ST (or a new sequence): a kept OSC waits
            // for it; the ST of a dropped OSC is dropped with it.
            self.held = std::mem::take(&mut self.pending);
            self.start_escape();
            self.swallow_st = !keep;
        }
    }

    fn string(&mut self, byte: u8, out: &mut Vec<u8>) {
        let terminator = matches!(byte, ESC | CAN | SUB | 0x9c);
        if self.overflow && !terminator {
            return;
        }
        let events = self.feed(byte);
        if let Some(pass) = events.hooked {
            self.dcs_pass = pass;
        }
        let ended = match byte {
            ESC | CAN | SUB => true,
            // vte ends a DCS at an 8-bit ST as well.
            0x9c => events.unhooked,
            _ => false,
        };
        if !ended {
            self.hold_string_byte(byte);
            return;
        }
        let keep = !self.overflow
            && match self.framing {
                Framing::Dcs => self.dcs_pass,
                _ => true,
            }
            && byte != CAN
            && byte != SUB;
        if byte == 0x9c {
            // An 8-bit ST is a C1 control: it never reaches the terminal.
            self.release_held(false, out);
            self.end(false);
            return;
        }
        self.release_held(keep, out);
        self.end(keep);
        if byte == ESC {
            // The ESC starts its ST (or a new sequence): a kept string waits
            // for it; the ST of a dropped string is dropped with it.
            self.held = std::mem::take(&mut self.pending);
            self.start_escape();
            self.swallow_st = !keep;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> Vec<u8> {
        let mut filter = OutputFilter::new();
        let mut out = Vec::new();
        filter.filter(input, &mut out);
        filter.finish(&mut out);
        out
    }

    /// The same input split at every position gives the same output.
    fn run_split(input: &[u8]) -> Vec<u8> {
        let whole = run(input);
        for cut in 0..=input.len() {
            let mut filter = OutputFilter::new();
            let mut out = Vec::new();
            filter.filter(&input[..cut], &mut out);
            filter.filter(&input[cut..], &mut out);
            filter.finish(&mut out);
            assert_eq!(
                out,
                whole,
                "split at {cut} of {:?}",
                String::from_utf8_lossy(input)
            );
        }
        whole
    }

    #[test]
    fn plain_text_and_ordinary_sequences_pass_byte_for_byte() {
        let cases: &[&[u8]] = &[
            b"hello world\r\n",
            "gr\u{fc}\u{df}e \u{1f600} \u{4e2d}".as_bytes(),
            b"\x1b[1;31mred\x1b[0m",
            b"\x1b[38:2:255:0:0mtrue\x1b[m",
            b"\x1b[?2004h\x1b[?1049l",
            b"\x1b[6n\x1b[c\x1b[>c",
            b"\x1b]0;my title\x07",
            b"\x1b]2;title\x1b\\",
            b"\x1b(B\x1b)0\x1b7\x1b8\x1bM",
            b"\x1b[22;0t\x1b[8;24;80t",
            b"\x1bP$qm\x1b\\",
            b"\x1b_Gf=100;AAAA\x1b\\",
            b"a\x1b[2\x07Jb",
            b"\x07\x08\t\n\r",
            b"\xff\xfe invalid \xe2\x28\xa1",
        ];
        for case in cases {
            assert_eq!(
                run_split(case),
                case.to_vec(),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn osc_52_is_dropped_with_both_terminators() {
        assert_eq!(run_split(b"a\x1b]52;c;aGVsbG8=\x07b"), b"ab");
        assert_eq!(run_split(b"a\x1b]52;c;aGVsbG8=\x1b\\b"), b"ab");
        assert_eq!(run_split(b"\x1b]52;p;?\x07"), b"");
    }

    #[test]
    fn osc_8_shows_the_target_after_the_text() {
        assert_eq!(
            run_split(b"see \x1b]8;;https://example.org/x\x1b\\the docs\x1b]8;;\x1b\\ now"),
            b"see the docs [https://example.org/x] now"
        );
        assert_eq!(
            run_split(b"\x1b]8;id=1;http://a/b;c\x07A\x1b]8;;\x07"),
            b"A [http://a/b;c]"
        );
    }

    #[test]
    fn title_reports_are_dropped() {
        assert_eq!(run_split(b"x\x1b[21ty"), b"xy");
        assert_eq!(run_split(b"x\x1b[20ty"), b"xy");
        assert_eq!(run_split(b"x\x1b[21;0ty"), b"xy");
        // C0 inside the CSI does not let half of it through.
        assert_eq!(run_split(b"x\x1b[2\x071ty"), b"xy");
    }

    #[test]
    fn c1_controls_are_dropped() {
        // 8-bit CSI and OSC, raw and UTF-8 encoded.
        assert_eq!(run_split(b"a\x9b21tb"), b"a21tb");
        assert_eq!(
            run_split("a\u{9d}52;c;eA==\u{7}b".as_bytes()),
            b"a52;c;eA==\x07b"
        );
    }

    #[test]
    fn an_overlong_osc_is_dropped_without_buffering() {
        let mut input = b"\x1b]52;c;".to_vec();
        input.extend(std::iter::repeat_n(b'A', MAX_STRING + 10));
        input.extend_from_slice(b"\x07ok");
        let mut filter = OutputFilter::new();
        let mut out = Vec::new();
        filter.filter(&input, &mut out);
        assert_eq!(out, b"ok");
        assert!(filter.pending.capacity() <= 2 * MAX_STRING + 64);
    }

    /// A xorshift generator from `seed`: the same pseudo-random inputs on
    /// every run.
    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut state = seed;
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// Fewer than `most` of `pieces`, chosen by `next`, one after the other.
    fn mix(next: &mut impl FnMut() -> u64, pieces: &[&[u8]], most: u64) -> Vec<u8> {
        let mut input = Vec::new();
        for _ in 0..(next() % most) {
            let piece = pieces[usize::try_from(next() % pieces.len() as u64).unwrap_or(0)];
            input.extend_from_slice(piece);
        }
        input
    }

    /// The byte-by-byte path alone (no runs copied whole).
    fn run_bytewise(input: &[u8]) -> Vec<u8> {
        let mut filter = OutputFilter::new();
        let mut out = Vec::new();
        for &byte in input {
            filter.byte(byte, &mut out);
        }
        filter.finish(&mut out);
        out
    }

    /// Differential: copying plain runs whole gives exactly the output of the
    /// byte-by-byte path, for pseudo-random mixes of text (ASCII, UTF-8 of
    /// every length, C1 encoded and raw, invalid and cut characters, DEL) and
    /// sequences, split into two frames at a pseudo-random place.
    #[test]
    fn plain_runs_change_nothing() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let pieces: &[&[u8]] = &[
            b"plain text ",
            b"\r\n",
            b"\t",
            b"\x08",
            b"\x07",
            b"\x7f",
            b"\x00",
            b"\x18",
            "\u{e9}\u{2500}\u{1f600}".as_bytes(),
            "\u{85}".as_bytes(),
            b"\x9b",
            b"\xc2",
            b"\xe2\x94",
            b"\xff",
            b"\x1b[1;34m",
            b"\x1b[0m",
            b"\x1b[21t",
            b"\x1b]52;c;QQ==\x07",
            b"\x1b]8;;http://x\x1b\\",
            b"\x1b]8;;\x07",
            b"\x1b]0;title\x1b\\",
            b"\x1bP1$r\x1b\\",
            b"\x1b_apc\x1b\\",
            b"\x1b\\",
            b"\x1b",
        ];
        for _ in 0..5000 {
            let input = mix(&mut next, pieces, 16);
            let cut = usize::try_from(next() % (input.len() as u64 + 1)).unwrap_or(0);
            let mut filter = OutputFilter::new();
            let mut out = Vec::new();
            filter.filter(&input[..cut], &mut out);
            filter.filter(&input[cut..], &mut out);
            filter.finish(&mut out);
            assert_eq!(
                out,
                run_bytewise(&input),
                "{:?} cut at {cut}",
                String::from_utf8_lossy(&input)
            );
        }
    }

    /// Property: for input without ESC, C1 and invalid tails the filter is the
    /// identity; for any input the output never holds OSC 52 or a title report
    /// (pseudo-random inputs from a fixed seed).
    #[test]
    fn property_identity_without_escapes_and_nothing_dangerous_ever() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let pieces: &[&[u8]] = &[
            b"\x1b]52;c;QQ==\x07",
            b"\x1b]52;c;QQ==",
            b"\x1b[21t",
            b"\x1b[20t",
            b"\x1b]8;;http://x\x1b\\",
            b"\x1b]8;;\x07",
            b"\x1b[",
            b"\x1b]",
            b"\x1b",
            b"\x1b\\",
            b"\x07",
            b"text",
            "\u{e9}".as_bytes(),
            b"\x1b[0m",
            b"2",
            b"1t",
            b";",
            b"\x18",
        ];
        for _ in 0..3000 {
            let input = mix(&mut next, pieces, 12);
            let out = run(&input);
            // What the filter lets through contains nothing it would change.
            assert_eq!(run(&out), out, "{:?}", String::from_utf8_lossy(&input));
            let text = String::from_utf8_lossy(&out);
            assert!(!text.contains("\x1b]52"), "{text:?}");
            assert!(
                !text.contains("\x1b[21t") && !text.contains("\x1b[20t"),
                "{text:?}"
            );
            assert!(!text.contains("\x1b]8;"), "{text:?}");
        }
        for _ in 0..500 {
            let len = usize::try_from(next() % 64).unwrap_or(0);
            let input: Vec<u8> = (0..len)
                .map(|_| u8::try_from(next() % 0x5f).unwrap_or(0) + 0x20)
                .collect();
            assert_eq!(run_split(&input), input);
        }
    }
}
