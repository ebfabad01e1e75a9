//! The escapes of the input, as in OpenSSH: after a newline (and at the very
//! start), `~` followed by
//! - `.` ends the session (frame close, `client_closed`);
//! - `&` detaches: the client leaves, the session runs on (as tmux's and
//!   screen's detach; `bothy attach` takes it back; docs/decisions.md D-379);
//! - `?` lists the escapes;
//! - `~` sends one `~`.
//!
//! Any other byte after `~` sends both. A `~` that is not at the start of a
//! line is sent at once.

/// One step of the input after the escapes were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Bytes for the remote.
    Data(Vec<u8>),
    /// `~.`: end the session.
    Close,
    /// `~&`: leave the session running, detached.
    Detach,
    /// `~?`: show the list.
    Help,
}

/// The help text of `~?` (lines end in CR LF: the terminal is in raw mode).
pub const HELP: &str = "Supported escape sequences:\r\n ~.   - end the session\r\n ~&   - detach: leave the session running (bothy attach takes it back)\r\n ~?   - this message\r\n ~~   - send the escape character by typing it twice\r\n(Note that escapes are only recognized immediately after newline.)\r\n";

/// Reads the escapes out of the typed bytes; keeps state across reads.
#[derive(Debug, Clone)]
pub struct EscapeReader {
    at_line_start: bool,
    tilde: bool,
}

impl Default for EscapeReader {
    fn default() -> Self {
        EscapeReader {
            at_line_start: true,
            tilde: false,
        }
    }
}

impl EscapeReader {
    /// Splits `typed` into data and escapes, in order. Nothing after `~.` is
    /// returned.
    pub fn feed(&mut self, typed: &[u8]) -> Vec<Input> {
        let mut out = Vec::new();
        let mut data = Vec::new();
        for &byte in typed {
            if self.tilde {
                self.tilde = false;
                match byte {
                    b'.' | b'&' => {
                        if !data.is_empty() {
                            out.push(Input::Data(std::mem::take(&mut data)));
                        }
                        out.push(if byte == b'.' {
                            Input::Close
                        } else {
                            Input::Detach
                        });
                        return out;
                    }
                    b'?' => {
                        if !data.is_empty() {
                            out.push(Input::Data(std::mem::take(&mut data)));
                        }
                        out.push(Input::Help);
                        // Still at the start of the line: `~.` works next.
                        self.at_line_start = true;
                        continue;
                    }
                    b'~' => data.push(b'~'),
                    other => {
                        data.push(b'~');
                        data.push(other);
                    }
                }
                self.at_line_start = matches!(byte, b'\r' | b'\n');
                continue;
            }
            if self.at_line_start && byte == b'~' {
                self.tilde = true;
                continue;
            }
            data.push(byte);
            self.at_line_start = matches!(byte, b'\r' | b'\n');
        }
        if !data.is_empty() {
            out.push(Input::Data(data));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(bytes: &[u8]) -> Input {
        Input::Data(bytes.to_vec())
    }

    #[test]
    fn tilde_dot_after_a_newline_closes() {
        let mut reader = EscapeReader::default();
        assert_eq!(reader.feed(b"ls\r"), vec![data(b"ls\r")]);
        assert_eq!(reader.feed(b"~."), vec![Input::Close]);
        let mut reader = EscapeReader::default();
        assert_eq!(reader.feed(b"~.rest"), vec![Input::Close]);
        let mut reader = EscapeReader::default();
        assert_eq!(
            reader.feed(b"echo\n~.x"),
            vec![data(b"echo\n"), Input::Close]
        );
    }

    #[test]
    fn tilde_elsewhere_passes() {
        let mut reader = EscapeReader::default();
        assert_eq!(reader.feed(b"a~.b"), vec![data(b"a~.b")]);
        assert_eq!(reader.feed(b"\r~~"), vec![data(b"\r~")]);
        assert_eq!(reader.feed(b"\r~x"), vec![data(b"\r~x")]);
        // Split across reads.
        let mut reader = EscapeReader::default();
        assert_eq!(reader.feed(b"\r~"), vec![data(b"\r")]);
        assert_eq!(reader.feed(b"."), vec![Input::Close]);
    }

    #[test]
    fn tilde_ampersand_after_a_newline_detaches() {
        let mut reader = EscapeReader::default();
        assert_eq!(
            reader.feed(b"top\r~&rest"),
            vec![data(b"top\r"), Input::Detach]
        );
        let mut reader = EscapeReader::default();
        assert_eq!(reader.feed(b"a~&"), vec![data(b"a~&")]);
        assert!(HELP.contains("~&"));
    }

    #[test]
    fn tilde_question_mark_lists_and_keeps_the_line_start() {
        let mut reader = EscapeReader::default();
        assert_eq!(reader.feed(b"~?~."), vec![Input::Help, Input::Close]);
    }
}
