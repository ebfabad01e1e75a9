//! The messages of the local channel (2.2, D-M2-42-11). Each travels as a
//! length-prefixed frame; the decoder is strict (fuzzed like every decoder of
//! bytes from another process).
//!
//! # Encoding (D-130)
//! A frame is a `u32` big-endian length `n` (1 ..= [`MAX_FRAME_BYTES`]), then
//! `n` bytes of body: one tag byte and the fields of that message. Numbers are
//! big-endian; a string or path is a `u32` length and that many bytes of UTF-8
//! without NUL; a list is a `u32` count and its items. Every message has exactly
//! one encoding: a body with a byte too few or too many, an unknown tag or value,
//! text that is not UTF-8, a relative path, a size of zero, or a data chunk that
//! is empty or longer than [`MAX_CHUNK_BYTES`] is refused with its own
//! [`DecodeError`]. The two directions use different tags (service → helper
//! `0x01..`, helper → service `0x81..`), so a message in the wrong direction is
//! an unknown tag.
//!
//! | Tag | Message | Fields |
//! |---|---|---|
//! | `0x01` | `Main` | — |
//! | `0x02` | `Checks` | the request (rest of the body, may be empty) |
//! | `0x03` | `Start` | session ID (16), columns (2), rows (2), program kind (1), its fields |
//! | `0x04` | `Input` | 1 ..= 64 KiB of bytes |
//! | `0x05` | `Resize` | columns (2), rows (2), each at least 1 |
//! | `0x06` | `End` | — |
//! | `0x81` | `CheckResults` | the answer (rest of the body, may be empty) |
//! | `0x82` | `Started` | — |
//! | `0x83` | `StartFailed` | `1` pty_failed, `2` shared_location |
//! | `0x84` | `Output` | 1 ..= 64 KiB of bytes |
//! | `0x85` | `Exited` | `0` unknown, or `1` and the status (`i32`) |
//!
//! Program kinds of `Start`: `1` shell; `2` command (program path, list of
//! arguments); `3` claude with organization (working directory path, API key
//! string); `4` claude with personal (working directory path).
//!
//! The frame of a `Start` with an API key is wiped after writing and after
//! reading ([`Message::carries_secret`]); the key itself lives in a
//! [`Zeroizing`] string.

use std::path::PathBuf;

use bothy_proto::frame::TerminalSize;
use uuid::Uuid;
use zeroize::{Zeroize, Zeroizing};

/// Largest body of a frame (1 MiB): the bound of check requests and answers.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// Largest chunk of PTY input or output (64 KiB).
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// Bytes of the length prefix.
pub const LENGTH_BYTES: usize = 4;

/// From the service to a helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToHelper {
    /// First message of the main connection of the helper.
    Main,
    /// A check request of the doctor (main connection); the bytes are
    /// [`crate::doctor`]'s strict encoding.
    Checks(Vec<u8>),
    /// First message of a session connection: start a PTY.
    Start(Box<PtyStart>),
    /// Input for the PTY (session connection).
    Input(Vec<u8>),
    /// A new size of the PTY (session connection).
    Resize(TerminalSize),
    /// End the PTY with its whole tree now (session connection). Closing the
    /// connection has the same effect.
    End,
}

/// From a helper to the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromHelper {
    /// The answer to [`ToHelper::Checks`] (main connection), doctor's encoding.
    CheckResults(Vec<u8>),
    /// The PTY runs (session connection).
    Started,
    /// The PTY did not start (session connection); the connection ends.
    StartFailed(StartFailure),
    /// Output of the PTY (session connection).
    Output(Vec<u8>),
    /// The process of the PTY ended and its tree was killed: the exit status, or
    /// 128 plus the signal number (5.4); `None` when the helper could not learn it.
    Exited(Option<i32>),
}

/// Why a PTY did not start; each is the `close_detail` of the `open_failed` the
/// service reports (6.1 step 7, 7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFailure {
    /// Anything in the start itself: shell not in /etc/shells, cgroup refused,
    /// openpty failed, a missing API key, a login-shell probe that failed.
    PtyFailed,
    /// A location check at start failed (CLAUDE_CONFIG_DIR, working directory).
    SharedLocation,
}

/// What to start in a new PTY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtyStart {
    /// The session (names the cgroup `s-<session id>`).
    pub session_id: Uuid,
    /// The size from the device's `start` frame.
    pub size: TerminalSize,
    /// The program by profile kind (11.1).
    pub program: StartProgram,
}

/// The program of a PTY by profile kind (11.1). A client never sends a command
/// line: these come from the host's configuration. `Debug` never shows the API
/// key.
#[derive(Clone, PartialEq, Eq)]
pub enum StartProgram {
    /// The login shell of the session user, working directory its home.
    Shell,
    /// A fixed command: absolute program and arguments, working directory the home.
    Command {
        /// The program as configured (the helper resolves it).
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
    },
    /// The profile claude with `organization` (7.4): `host_service.claude_bin` as
    /// the helper resolved it in its last check, in `workdir`, with the API key
    /// only in this child's environment.
    ClaudeOrganization {
        /// The working directory that `wdi` names in the list after HD7.
        workdir: PathBuf,
        /// The key from `claude_api_key` of the state directory.
        api_key: Zeroizing<String>,
    },
    /// The profile claude with `personal` (7.4): claude through the login shell
    /// of the holder, with its checked CLAUDE_CONFIG_DIR, in `workdir`.
    ClaudePersonal {
        /// The working directory that `wdi` names in the list after HD7.
        workdir: PathBuf,
    },
}

impl std::fmt::Debug for StartProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartProgram::Shell => f.write_str("Shell"),
            StartProgram::Command { .. } => f.write_str("Command"),
            StartProgram::ClaudeOrganization { .. } => f.write_str("ClaudeOrganization"),
            StartProgram::ClaudePersonal { .. } => f.write_str("ClaudePersonal"),
        }
    }
}

/// Why bytes are not a message. No variant carries content of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A frame of length 0 (no tag).
    #[error("empty frame")]
    Empty,
    /// A length above [`MAX_FRAME_BYTES`].
    #[error("frame longer than the maximum")]
    TooLarge,
    /// A tag this direction does not know.
    #[error("unknown tag {0:#04x}")]
    UnknownTag(u8),
    /// The body ends inside a field.
    #[error("frame shorter than its fields")]
    Truncated,
    /// Bytes after the last field.
    #[error("bytes after the last field")]
    TrailingBytes,
    /// A path, argument or key that is not UTF-8.
    #[error("text that is not UTF-8")]
    InvalidUtf8,
    /// A path that does not start with `/`.
    #[error("a path that is not absolute")]
    NotAbsolute,
    /// A NUL byte in a path, argument or key (they end up in `execve`).
    #[error("a NUL byte in a path, argument or key")]
    NulByte,
    /// A terminal size with 0 columns or 0 rows.
    #[error("a terminal size of zero")]
    ZeroSize,
    /// An `Input` or `Output` without bytes.
    #[error("an empty data chunk")]
    EmptyChunk,
    /// An `Input` or `Output` above [`MAX_CHUNK_BYTES`].
    #[error("a data chunk longer than 64 KiB")]
    ChunkTooLarge,
    /// A program kind, failure code or exit flag that does not exist.
    #[error("an unknown value of a field")]
    UnknownValue,
}

/// Why a message cannot be encoded: the same rules as [`DecodeError`], so every
/// encoded frame decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The body would exceed [`MAX_FRAME_BYTES`].
    #[error("message longer than the maximum frame")]
    TooLarge,
    /// A path that is not UTF-8.
    #[error("a path that is not UTF-8")]
    NotUtf8,
    /// A path that does not start with `/`.
    #[error("a path that is not absolute")]
    NotAbsolute,
    /// A NUL byte in a path, argument or key.
    #[error("a NUL byte in a path, argument or key")]
    NulByte,
    /// An empty `Input` or `Output`.
    #[error("an empty data chunk")]
    EmptyChunk,
    /// An `Input` or `Output` above [`MAX_CHUNK_BYTES`].
    #[error("a data chunk longer than 64 KiB")]
    ChunkTooLarge,
}

/// A message of one direction of the channel.
pub trait Message: Sized {
    /// Appends tag and fields (the body) to `out`.
    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError>;

    /// Decodes a whole body (tag and fields, without the length prefix).
    fn decode_body(body: &[u8]) -> Result<Self, DecodeError>;

    /// Whether the encoding carries a secret, so its buffers are wiped.
    fn carries_secret(&self) -> bool {
        false
    }

    /// Whether a body with this first byte carries a secret (wiped after decoding).
    fn tag_carries_secret(_tag: u8) -> bool {
        false
    }

    /// The whole frame: length prefix and body.
    fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = vec![0; LENGTH_BYTES];
        let result = self.encode_body(&mut out);
        if let Err(error) = result {
            out.zeroize();
            return Err(error);
        }
        let body = out.len() - LENGTH_BYTES;
        if body > MAX_FRAME_BYTES {
            out.zeroize();
            return Err(EncodeError::TooLarge);
        }
        let length = u32::try_from(body).map_err(|_| EncodeError::TooLarge)?;
        out[..LENGTH_BYTES].copy_from_slice(&length.to_be_bytes());
        Ok(out)
    }

    /// Decodes exactly one whole frame (length prefix and body).
    fn decode_frame(frame: &[u8]) -> Result<Self, DecodeError> {
        let length = body_length(frame)?;
        let body = &frame[LENGTH_BYTES..];
        match body.len().cmp(&length) {
            std::cmp::Ordering::Less => Err(DecodeError::Truncated),
            std::cmp::Ordering::Greater => Err(DecodeError::TrailingBytes),
            std::cmp::Ordering::Equal => Self::decode_body(body),
        }
    }
}

/// The body length a frame announces, checked against the limits. `frame` must
/// hold at least the prefix.
pub fn body_length(frame: &[u8]) -> Result<usize, DecodeError> {
    let prefix: [u8; LENGTH_BYTES] = frame
        .get(..LENGTH_BYTES)
        .and_then(|p| p.try_into().ok())
        .ok_or(DecodeError::Truncated)?;
    let length = usize::try_from(u32::from_be_bytes(prefix)).map_err(|_| DecodeError::TooLarge)?;
    if length == 0 {
        return Err(DecodeError::Empty);
    }
    if length > MAX_FRAME_BYTES {
        return Err(DecodeError::TooLarge);
    }
    Ok(length)
}

mod tag {
    pub const MAIN: u8 = 0x01;
    pub const CHECKS: u8 = 0x02;
    pub const START: u8 = 0x03;
    pub const INPUT: u8 = 0x04;
    pub const RESIZE: u8 = 0x05;
    pub const END: u8 = 0x06;
    pub const CHECK_RESULTS: u8 = 0x81;
    pub const STARTED: u8 = 0x82;
    pub const START_FAILED: u8 = 0x83;
    pub const OUTPUT: u8 = 0x84;
    pub const EXITED: u8 = 0x85;
}

mod program {
    pub const SHELL: u8 = 1;
    pub const COMMAND: u8 = 2;
    pub const CLAUDE_ORGANIZATION: u8 = 3;
    pub const CLAUDE_PERSONAL: u8 = 4;
}

impl Message for ToHelper {
    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            ToHelper::Main => out.push(tag::MAIN),
            ToHelper::Checks(request) => {
                out.push(tag::CHECKS);
                put_rest(out, request)?;
            }
            ToHelper::Start(start) => {
                out.push(tag::START);
                out.extend_from_slice(start.session_id.as_bytes());
                put_size(out, start.size);
                match &start.program {
                    StartProgram::Shell => out.push(program::SHELL),
                    StartProgram::Command { program, args } => {
                        out.push(program::COMMAND);
                        put_path(out, program)?;
                        put_count(out, args.len())?;
                        for arg in args {
                            put_text(out, arg)?;
                        }
                    }
                    StartProgram::ClaudeOrganization { workdir, api_key } => {
                        out.push(program::CLAUDE_ORGANIZATION);
                        put_path(out, workdir)?;
                        put_text(out, api_key)?;
                    }
                    StartProgram::ClaudePersonal { workdir } => {
                        out.push(program::CLAUDE_PERSONAL);
                        put_path(out, workdir)?;
                    }
                }
            }
            ToHelper::Input(bytes) => {
                out.push(tag::INPUT);
                put_chunk(out, bytes)?;
            }
            ToHelper::Resize(size) => {
                out.push(tag::RESIZE);
                put_size(out, *size);
            }
            ToHelper::End => out.push(tag::END),
        }
        Ok(())
    }

    fn decode_body(body: &[u8]) -> Result<Self, DecodeError> {
        let (&first, fields) = body.split_first().ok_or(DecodeError::Empty)?;
        let mut r = Reader::new(fields);
        let message = match first {
            tag::MAIN => ToHelper::Main,
            tag::CHECKS => ToHelper::Checks(r.rest().to_vec()),
            tag::START => {
                let session_id = Uuid::from_bytes(r.array::<16>()?);
                let size = r.size()?;
                let program = match r.byte()? {
                    program::SHELL => StartProgram::Shell,
                    program::COMMAND => {
                        let program = r.path()?;
                        let count = r.u32()?;
                        let mut args = Vec::new();
                        for _ in 0..count {
                            args.push(r.text()?.to_owned());
                        }
                        StartProgram::Command { program, args }
                    }
                    program::CLAUDE_ORGANIZATION => {
                        let workdir = r.path()?;
                        let api_key = Zeroizing::new(r.text()?.to_owned());
                        StartProgram::ClaudeOrganization { workdir, api_key }
                    }
                    program::CLAUDE_PERSONAL => StartProgram::ClaudePersonal { workdir: r.path()? },
                    _ => return Err(DecodeError::UnknownValue),
                };
                ToHelper::Start(Box::new(PtyStart {
                    session_id,
                    size,
                    program,
                }))
            }
            tag::INPUT => ToHelper::Input(r.chunk()?),
            tag::RESIZE => ToHelper::Resize(r.size()?),
            tag::END => ToHelper::End,
            other => return Err(DecodeError::UnknownTag(other)),
        };
        r.finish()?;
        Ok(message)
    }

    fn carries_secret(&self) -> bool {
        matches!(self, ToHelper::Start(start) if matches!(start.program, StartProgram::ClaudeOrganization { .. }))
    }

    fn tag_carries_secret(tag: u8) -> bool {
        tag == tag::START
    }
}

impl Message for FromHelper {
    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            FromHelper::CheckResults(answer) => {
                out.push(tag::CHECK_RESULTS);
                put_rest(out, answer)?;
            }
            FromHelper::Started => out.push(tag::STARTED),
            FromHelper::StartFailed(failure) => {
                out.push(tag::START_FAILED);
                out.push(match failure {
                    StartFailure::PtyFailed => 1,
                    StartFailure::SharedLocation => 2,
                });
            }
            FromHelper::Output(bytes) => {
                out.push(tag::OUTPUT);
                put_chunk(out, bytes)?;
            }
            FromHelper::Exited(status) => {
                out.push(tag::EXITED);
                match status {
                    None => out.push(0),
                    Some(code) => {
                        out.push(1);
                        out.extend_from_slice(&code.to_be_bytes());
                    }
                }
            }
        }
        Ok(())
    }

    fn decode_body(body: &[u8]) -> Result<Self, DecodeError> {
        let (&first, fields) = body.split_first().ok_or(DecodeError::Empty)?;
        let mut r = Reader::new(fields);
        let message = match first {
            tag::CHECK_RESULTS => FromHelper::CheckResults(r.rest().to_vec()),
            tag::STARTED => FromHelper::Started,
            tag::START_FAILED => FromHelper::StartFailed(match r.byte()? {
                1 => StartFailure::PtyFailed,
                2 => StartFailure::SharedLocation,
                _ => return Err(DecodeError::UnknownValue),
            }),
            tag::OUTPUT => FromHelper::Output(r.chunk()?),
            tag::EXITED => FromHelper::Exited(match r.byte()? {
                0 => None,
                1 => Some(i32::from_be_bytes(r.array::<4>()?)),
                _ => return Err(DecodeError::UnknownValue),
            }),
            other => return Err(DecodeError::UnknownTag(other)),
        };
        r.finish()?;
        Ok(message)
    }
}

fn put_rest(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), EncodeError> {
    if bytes.len() >= MAX_FRAME_BYTES {
        return Err(EncodeError::TooLarge);
    }
    out.extend_from_slice(bytes);
    Ok(())
}

fn put_chunk(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), EncodeError> {
    if bytes.is_empty() {
        return Err(EncodeError::EmptyChunk);
    }
    if bytes.len() > MAX_CHUNK_BYTES {
        return Err(EncodeError::ChunkTooLarge);
    }
    out.extend_from_slice(bytes);
    Ok(())
}

fn put_size(out: &mut Vec<u8>, size: TerminalSize) {
    out.extend_from_slice(&size.columns().to_be_bytes());
    out.extend_from_slice(&size.rows().to_be_bytes());
}

fn put_count(out: &mut Vec<u8>, count: usize) -> Result<(), EncodeError> {
    let count = u32::try_from(count).map_err(|_| EncodeError::TooLarge)?;
    out.extend_from_slice(&count.to_be_bytes());
    Ok(())
}

fn put_text(out: &mut Vec<u8>, text: &str) -> Result<(), EncodeError> {
    if text.contains('\0') {
        return Err(EncodeError::NulByte);
    }
    if text.len() > MAX_FRAME_BYTES {
        return Err(EncodeError::TooLarge);
    }
    put_count(out, text.len())?;
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

fn put_path(out: &mut Vec<u8>, path: &std::path::Path) -> Result<(), EncodeError> {
    let text = path.to_str().ok_or(EncodeError::NotUtf8)?;
    if !text.starts_with('/') {
        return Err(EncodeError::NotAbsolute);
    }
    put_text(out, text)
}

/// A cursor over the fields of a body; every read is bounds-checked.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(fields: &'a [u8]) -> Self {
        Reader { rest: fields }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        bytes.try_into().map_err(|_| DecodeError::Truncated)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn size(&mut self) -> Result<TerminalSize, DecodeError> {
        let columns = self.u16()?;
        let rows = self.u16()?;
        TerminalSize::new(columns, rows).map_err(|_| DecodeError::ZeroSize)
    }

    fn text(&mut self) -> Result<&'a str, DecodeError> {
        let length = usize::try_from(self.u32()?).map_err(|_| DecodeError::Truncated)?;
        let bytes = self.take(length)?;
        let text = std::str::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8)?;
        if text.contains('\0') {
            return Err(DecodeError::NulByte);
        }
        Ok(text)
    }

    fn path(&mut self) -> Result<PathBuf, DecodeError> {
        let text = self.text()?;
        if !text.starts_with('/') {
            return Err(DecodeError::NotAbsolute);
        }
        Ok(PathBuf::from(text))
    }

    fn chunk(&mut self) -> Result<Vec<u8>, DecodeError> {
        let bytes = self.rest();
        if bytes.is_empty() {
            return Err(DecodeError::EmptyChunk);
        }
        if bytes.len() > MAX_CHUNK_BYTES {
            return Err(DecodeError::ChunkTooLarge);
        }
        Ok(bytes.to_vec())
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    fn finish(self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn size(columns: u16, rows: u16) -> TerminalSize {
        TerminalSize::new(columns, rows).unwrap()
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    fn start(program: StartProgram) -> ToHelper {
        ToHelper::Start(Box::new(PtyStart {
            session_id: Uuid::from_bytes([0x11; 16]),
            size: size(80, 24),
            program,
        }))
    }

    fn to_helper_examples() -> Vec<ToHelper> {
        vec![
            ToHelper::Main,
            ToHelper::Checks(Vec::new()),
            ToHelper::Checks(vec![1, 2, 3]),
            start(StartProgram::Shell),
            start(StartProgram::Command {
                program: PathBuf::from("/usr/bin/top"),
                args: vec!["-d".into(), "1".into(), String::new(), "ä".into()],
            }),
            start(StartProgram::Command {
                program: PathBuf::from("/bin/true"),
                args: Vec::new(),
            }),
            start(StartProgram::ClaudeOrganization {
                workdir: PathBuf::from("/srv/w"),
                api_key: Zeroizing::new("sk-secret".into()),
            }),
            start(StartProgram::ClaudePersonal {
                workdir: PathBuf::from("/home/a/p"),
            }),
            ToHelper::Input(vec![b'x']),
            ToHelper::Input(vec![0; MAX_CHUNK_BYTES]),
            ToHelper::Resize(size(1, 65535)),
            ToHelper::End,
        ]
    }

    fn from_helper_examples() -> Vec<FromHelper> {
        vec![
            FromHelper::CheckResults(Vec::new()),
            FromHelper::CheckResults(vec![9; 1000]),
            FromHelper::Started,
            FromHelper::StartFailed(StartFailure::PtyFailed),
            FromHelper::StartFailed(StartFailure::SharedLocation),
            FromHelper::Output(vec![0xff; MAX_CHUNK_BYTES]),
            FromHelper::Exited(None),
            FromHelper::Exited(Some(0)),
            FromHelper::Exited(Some(-1)),
            FromHelper::Exited(Some(137)),
        ]
    }

    #[test]
    fn every_message_round_trips_and_re_encodes_to_the_same_bytes() {
        for message in to_helper_examples() {
            let bytes = message.encode().unwrap();
            let again = ToHelper::decode_frame(&bytes).unwrap();
            assert_eq!(again, message);
            assert_eq!(again.encode().unwrap(), bytes);
            assert_eq!(
                FromHelper::decode_frame(&bytes).unwrap_err(),
                DecodeError::UnknownTag(bytes[LENGTH_BYTES]),
                "{message:?} in the wrong direction"
            );
        }
        for message in from_helper_examples() {
            let bytes = message.encode().unwrap();
            let again = FromHelper::decode_frame(&bytes).unwrap();
            assert_eq!(again, message);
            assert_eq!(again.encode().unwrap(), bytes);
            assert!(matches!(
                ToHelper::decode_frame(&bytes),
                Err(DecodeError::UnknownTag(_))
            ));
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        assert_eq!(ToHelper::Main.encode().unwrap(), [0, 0, 0, 1, 0x01]);
        assert_eq!(
            ToHelper::Resize(size(0x0102, 0x0304)).encode().unwrap(),
            [0, 0, 0, 5, 0x05, 1, 2, 3, 4]
        );
        assert_eq!(
            FromHelper::Exited(Some(-2)).encode().unwrap(),
            [0, 0, 0, 6, 0x85, 1, 0xff, 0xff, 0xff, 0xfe]
        );
        let shell = start(StartProgram::Shell).encode().unwrap();
        assert_eq!(&shell[..5], &[0, 0, 0, 22, 0x03]);
        assert_eq!(&shell[5..21], &[0x11; 16]);
        assert_eq!(&shell[21..], &[0, 80, 0, 24, 1]);
    }

    /// Every refusal has its own variant; none panics.
    #[test]
    fn refusals() {
        let uuid = [0x22u8; 16];
        let start_body = |kind: &[u8]| {
            let mut body = vec![tag::START];
            body.extend_from_slice(&uuid);
            body.extend_from_slice(&[0, 80, 0, 24]);
            body.extend_from_slice(kind);
            body
        };
        let text = |s: &[u8]| {
            let mut out = (s.len() as u32).to_be_bytes().to_vec();
            out.extend_from_slice(s);
            out
        };
        let command = |program: &[u8], args: &[&[u8]]| {
            let mut kind = vec![program::COMMAND];
            kind.extend(text(program));
            kind.extend((args.len() as u32).to_be_bytes());
            for arg in args {
                kind.extend(text(arg));
            }
            start_body(&kind)
        };
        let cases: Vec<(Vec<u8>, DecodeError)> = vec![
            (frame(&[]), DecodeError::Empty),
            (vec![0, 0, 0], DecodeError::Truncated),
            (vec![0, 0x10, 0, 1, 1], DecodeError::TooLarge),
            (vec![0xff, 0xff, 0xff, 0xff], DecodeError::TooLarge),
            (vec![0, 0, 0, 2, 1], DecodeError::Truncated),
            (vec![0, 0, 0, 1, 1, 1], DecodeError::TrailingBytes),
            (frame(&[0x00]), DecodeError::UnknownTag(0x00)),
            (frame(&[0x07]), DecodeError::UnknownTag(0x07)),
            (frame(&[0x81]), DecodeError::UnknownTag(0x81)),
            (frame(&[tag::MAIN, 0]), DecodeError::TrailingBytes),
            (frame(&[tag::END, 0]), DecodeError::TrailingBytes),
            (frame(&[tag::RESIZE, 0, 1, 0]), DecodeError::Truncated),
            (
                frame(&[tag::RESIZE, 0, 1, 0, 1, 0]),
                DecodeError::TrailingBytes,
            ),
            (frame(&[tag::RESIZE, 0, 0, 0, 1]), DecodeError::ZeroSize),
            (frame(&[tag::RESIZE, 0, 1, 0, 0]), DecodeError::ZeroSize),
            (frame(&[tag::INPUT]), DecodeError::EmptyChunk),
            (
                frame(&[&[tag::INPUT][..], &[0; MAX_CHUNK_BYTES + 1]].concat()),
                DecodeError::ChunkTooLarge,
            ),
            (frame(&[tag::START]), DecodeError::Truncated),
            (frame(&start_body(&[])), DecodeError::Truncated),
            (frame(&start_body(&[0])), DecodeError::UnknownValue),
            (frame(&start_body(&[5])), DecodeError::UnknownValue),
            (frame(&start_body(&[1, 0])), DecodeError::TrailingBytes),
            (
                frame(&start_body(
                    &[&[program::COMMAND][..], &text(b"/bin/x")].concat(),
                )),
                DecodeError::Truncated,
            ),
            (frame(&command(b"bin/x", &[])[..]), DecodeError::NotAbsolute),
            (frame(&command(b"/bin/\xff", &[])), DecodeError::InvalidUtf8),
            (frame(&command(b"/bin/\0x", &[])), DecodeError::NulByte),
            (
                frame(&command(b"/bin/x", &[b"a\xc3"])),
                DecodeError::InvalidUtf8,
            ),
            (frame(&command(b"/bin/x", &[b"a\0"])), DecodeError::NulByte),
            (frame(&[tag::START_FAILED]), DecodeError::UnknownTag(0x83)),
        ];
        for (bytes, expected) in cases {
            assert_eq!(
                ToHelper::decode_frame(&bytes).unwrap_err(),
                expected,
                "{bytes:02x?}"
            );
        }
        // The count of arguments promises more than the body holds.
        let mut body = command(b"/bin/x", &[]);
        let at = body.len() - 4;
        body[at..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            ToHelper::decode_frame(&frame(&body)).unwrap_err(),
            DecodeError::Truncated
        );
        // An organization start without its key.
        let mut org = vec![program::CLAUDE_ORGANIZATION];
        org.extend(text(b"/w"));
        assert_eq!(
            ToHelper::decode_frame(&frame(&start_body(&org))).unwrap_err(),
            DecodeError::Truncated
        );
        org.extend(text(b"k\xff"));
        assert_eq!(
            ToHelper::decode_frame(&frame(&start_body(&org))).unwrap_err(),
            DecodeError::InvalidUtf8
        );

        let from: Vec<(Vec<u8>, DecodeError)> = vec![
            (frame(&[tag::START_FAILED]), DecodeError::Truncated),
            (frame(&[tag::START_FAILED, 0]), DecodeError::UnknownValue),
            (frame(&[tag::START_FAILED, 3]), DecodeError::UnknownValue),
            (
                frame(&[tag::START_FAILED, 1, 1]),
                DecodeError::TrailingBytes,
            ),
            (frame(&[tag::STARTED, 1]), DecodeError::TrailingBytes),
            (frame(&[tag::EXITED]), DecodeError::Truncated),
            (frame(&[tag::EXITED, 2]), DecodeError::UnknownValue),
            (frame(&[tag::EXITED, 0, 0]), DecodeError::TrailingBytes),
            (frame(&[tag::EXITED, 1, 0, 0, 0]), DecodeError::Truncated),
            (
                frame(&[tag::EXITED, 1, 0, 0, 0, 0, 0]),
                DecodeError::TrailingBytes,
            ),
            (frame(&[tag::OUTPUT]), DecodeError::EmptyChunk),
            (frame(&[tag::MAIN]), DecodeError::UnknownTag(tag::MAIN)),
        ];
        for (bytes, expected) in from {
            assert_eq!(
                FromHelper::decode_frame(&bytes).unwrap_err(),
                expected,
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn encoding_refuses_what_decoding_refuses() {
        let command = |program: &str, arg: &str| {
            start(StartProgram::Command {
                program: PathBuf::from(program),
                args: vec![arg.to_owned()],
            })
            .encode()
        };
        assert_eq!(command("bin/x", "a"), Err(EncodeError::NotAbsolute));
        assert_eq!(command("/bin/\0", "a"), Err(EncodeError::NulByte));
        assert_eq!(command("/bin/x", "a\0"), Err(EncodeError::NulByte));
        assert_eq!(
            ToHelper::Input(Vec::new()).encode(),
            Err(EncodeError::EmptyChunk)
        );
        assert_eq!(
            FromHelper::Output(vec![0; MAX_CHUNK_BYTES + 1]).encode(),
            Err(EncodeError::ChunkTooLarge)
        );
        assert_eq!(
            ToHelper::Checks(vec![0; MAX_FRAME_BYTES]).encode(),
            Err(EncodeError::TooLarge)
        );
        let largest = ToHelper::Checks(vec![0; MAX_FRAME_BYTES - 1])
            .encode()
            .unwrap();
        assert_eq!(largest.len(), LENGTH_BYTES + MAX_FRAME_BYTES);
        assert!(ToHelper::decode_frame(&largest).is_ok());
        use std::os::unix::ffi::OsStrExt;
        let not_utf8 = start(StartProgram::ClaudePersonal {
            workdir: PathBuf::from(std::ffi::OsStr::from_bytes(b"/w\xff")),
        });
        assert_eq!(not_utf8.encode(), Err(EncodeError::NotUtf8));
    }

    #[test]
    fn debug_shows_no_key_and_no_path() {
        let message = start(StartProgram::ClaudeOrganization {
            workdir: PathBuf::from("/srv/secret-place"),
            api_key: Zeroizing::new("sk-ant-very-secret".into()),
        });
        let shown = format!("{message:?}");
        assert!(!shown.contains("sk-ant"), "{shown}");
        assert!(!shown.contains("secret-place"), "{shown}");
        assert!(shown.contains("ClaudeOrganization"), "{shown}");
        assert!(message.carries_secret());
        assert!(!start(StartProgram::Shell).carries_secret());
    }
}
