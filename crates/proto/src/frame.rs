//! The frames inside the Noise transport messages of a terminal session (spec 24,
//! section 5.4, encoding of D-M2-38-10).
//!
//! After the handshake every transport message carries exactly one frame: a type
//! byte and its content. All numbers are big-endian.
//!
//! | Type | Name           | Direction      | Content                                          |
//! |------|----------------|----------------|--------------------------------------------------|
//! | 0x01 | `start`        | device to host | exactly 4 bytes: columns, rows (u16, 1..=65535)  |
//! | 0x02 | `data`         | both           | 1..=65518 bytes of the PTY or of the input       |
//! | 0x03 | `resize`       | device to host | like `start`                                     |
//! | 0x04 | `close`        | device to host | none                                             |
//! | 0x05 | `exit`         | host to device | exactly 4 bytes: i32, two's complement           |
//! | 0x06 | `replay_begin` | host to device | none                                             |
//! | 0x07 | `replay_end`   | host to device | none                                             |
//!
//! A frame is at most [`MAX_FRAME_LEN`] (65519) bytes, the largest plaintext of a
//! transport message. Every refusal while reading a frame ends the session with
//! 4104 ([`FrameError::close_code`]); on the host it is reported as `open_failed`
//! with `handshake_failed` ([`FrameError::close_detail`]).
//!
//! Decoding borrows: [`Frame::Data`] points into the decrypted buffer. Encoding
//! appends to a caller's buffer and refuses exactly what decoding refuses, so a
//! frame that encodes always decodes to itself on the other side.

use crate::codes::{CloseCode, CloseDetail};

/// The largest frame, type byte included: the largest plaintext of a Noise
/// transport message (65535 bytes minus the 16-byte tag).
pub const MAX_FRAME_LEN: usize = 65519;

/// The largest content of a `data` frame: [`MAX_FRAME_LEN`] minus the type byte.
pub const MAX_DATA_LEN: usize = MAX_FRAME_LEN - 1;

/// Length of the content of `start`, `resize` and `exit`.
const FOUR_BYTES: usize = 4;

/// Every refusal of a frame, one variant per rule of D-M2-38-10.
///
/// When several rules are broken at once, the first in this order is reported:
/// `Empty`, `TooLong`, `UnknownType`, `WrongDirection`, `WrongLength`, `ZeroSize`.
/// The order follows what a reader can know at each step: the length of the whole
/// message before looking inside it, the type byte before the direction it allows,
/// the length of the content before its values. It does not change the outcome
/// (every refusal is 4104), only which variant tests and logs see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// No type byte.
    #[error("empty frame")]
    Empty,
    /// More than 65519 bytes, type byte included.
    #[error("frame longer than 65519 bytes")]
    TooLong,
    /// A type byte other than 0x01 to 0x07.
    #[error("unknown frame type")]
    UnknownType,
    /// A known type in the direction it may not travel.
    #[error("frame type not allowed in this direction")]
    WrongDirection,
    /// Content of the wrong length for the type (also empty `data`).
    #[error("wrong content length for the frame type")]
    WrongLength,
    /// `start` or `resize` with 0 columns or 0 rows.
    #[error("terminal size with 0 columns or 0 rows")]
    ZeroSize,
}

impl FrameError {
    /// The close code of every frame refusal: 4104 `terminal_handshake_failed` (5.4).
    pub const fn close_code(self) -> CloseCode {
        CloseCode::TerminalHandshakeFailed
    }

    /// The `close_detail` the host service reports with `open_failed` for a frame
    /// refusal (5.4 "Fault of the stream on the host"): `handshake_failed`.
    pub const fn close_detail(self) -> CloseDetail {
        CloseDetail::HandshakeFailed
    }
}

/// The direction a frame travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the device (the client) to the host service.
    DeviceToHost,
    /// From the host service to the device.
    HostToDevice,
}

/// The type byte of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// 0x01 `start`.
    Start = 0x01,
    /// 0x02 `data`.
    Data = 0x02,
    /// 0x03 `resize`.
    Resize = 0x03,
    /// 0x04 `close`.
    Close = 0x04,
    /// 0x05 `exit`.
    Exit = 0x05,
    /// 0x06 `replay_begin`.
    ReplayBegin = 0x06,
    /// 0x07 `replay_end`.
    ReplayEnd = 0x07,
}

impl FrameType {
    /// Every frame type, in numeric order.
    pub const ALL: &'static [FrameType] = &[
        Self::Start,
        Self::Data,
        Self::Resize,
        Self::Close,
        Self::Exit,
        Self::ReplayBegin,
        Self::ReplayEnd,
    ];

    /// The type byte.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The type of a type byte.
    pub const fn from_u8(byte: u8) -> Result<Self, FrameError> {
        match byte {
            0x01 => Ok(Self::Start),
            0x02 => Ok(Self::Data),
            0x03 => Ok(Self::Resize),
            0x04 => Ok(Self::Close),
            0x05 => Ok(Self::Exit),
            0x06 => Ok(Self::ReplayBegin),
            0x07 => Ok(Self::ReplayEnd),
            _ => Err(FrameError::UnknownType),
        }
    }

    /// The spec's name of the type.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Data => "data",
            Self::Resize => "resize",
            Self::Close => "close",
            Self::Exit => "exit",
            Self::ReplayBegin => "replay_begin",
            Self::ReplayEnd => "replay_end",
        }
    }

    /// Whether a frame of this type may travel in `direction`.
    pub const fn allowed(self, direction: Direction) -> bool {
        match self {
            Self::Data => true,
            Self::Start | Self::Resize | Self::Close => {
                matches!(direction, Direction::DeviceToHost)
            }
            Self::Exit | Self::ReplayBegin | Self::ReplayEnd => {
                matches!(direction, Direction::HostToDevice)
            }
        }
    }
}

/// Columns and rows of a terminal, each 1 to 65535 (as in `TerminalSessionOpen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminalSize {
    columns: u16,
    rows: u16,
}

impl TerminalSize {
    /// A size; 0 columns or 0 rows is refused with [`FrameError::ZeroSize`].
    pub const fn new(columns: u16, rows: u16) -> Result<Self, FrameError> {
        if columns == 0 || rows == 0 {
            return Err(FrameError::ZeroSize);
        }
        Ok(Self { columns, rows })
    }

    /// Columns, at least 1.
    pub const fn columns(self) -> u16 {
        self.columns
    }

    /// Rows, at least 1.
    pub const fn rows(self) -> u16 {
        self.rows
    }

    fn decode(content: &[u8]) -> Result<Self, FrameError> {
        let &[c0, c1, r0, r1] = content else {
            return Err(FrameError::WrongLength);
        };
        Self::new(u16::from_be_bytes([c0, c1]), u16::from_be_bytes([r0, r1]))
    }

    fn to_bytes(self) -> [u8; FOUR_BYTES] {
        let [c0, c1] = self.columns.to_be_bytes();
        let [r0, r1] = self.rows.to_be_bytes();
        [c0, c1, r0, r1]
    }
}

/// A decoded frame. `Data` borrows from the buffer it was decoded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// 0x01: the size of a new PTY, or the PTY of an attach; the first transport
    /// message of the device, once.
    Start(TerminalSize),
    /// 0x02: bytes of the PTY (host to device) or of the input (device to host).
    Data(&'a [u8]),
    /// 0x03: resize the PTY.
    Resize(TerminalSize),
    /// 0x04: end the session (`client_closed`).
    Close,
    /// 0x05: the exit code of the process.
    Exit(i32),
    /// 0x06: the scrollback buffer of a reattach follows.
    ReplayBegin,
    /// 0x07: the scrollback buffer of a reattach is complete.
    ReplayEnd,
}

impl<'a> Frame<'a> {
    /// Decodes one frame that travelled in `direction`.
    ///
    /// Refusals are checked in the order of [`FrameError`]: empty, too long,
    /// unknown type, wrong direction, wrong length, zero size.
    pub fn decode(bytes: &'a [u8], direction: Direction) -> Result<Self, FrameError> {
        let (&type_byte, content) = bytes.split_first().ok_or(FrameError::Empty)?;
        if bytes.len() > MAX_FRAME_LEN {
            return Err(FrameError::TooLong);
        }
        let frame_type = FrameType::from_u8(type_byte)?;
        if !frame_type.allowed(direction) {
            return Err(FrameError::WrongDirection);
        }
        match frame_type {
            FrameType::Start => TerminalSize::decode(content).map(Self::Start),
            FrameType::Resize => TerminalSize::decode(content).map(Self::Resize),
            // An empty data frame would count as input without input (6.3).
            FrameType::Data if content.is_empty() => Err(FrameError::WrongLength),
            FrameType::Data => Ok(Self::Data(content)),
            FrameType::Exit => {
                let code: [u8; FOUR_BYTES] =
                    content.try_into().map_err(|_| FrameError::WrongLength)?;
                Ok(Self::Exit(i32::from_be_bytes(code)))
            }
            FrameType::Close | FrameType::ReplayBegin | FrameType::ReplayEnd => {
                if !content.is_empty() {
                    return Err(FrameError::WrongLength);
                }
                Ok(match frame_type {
                    FrameType::Close => Self::Close,
                    FrameType::ReplayBegin => Self::ReplayBegin,
                    _ => Self::ReplayEnd,
                })
            }
        }
    }

    /// The type of this frame.
    pub const fn frame_type(&self) -> FrameType {
        match self {
            Self::Start(_) => FrameType::Start,
            Self::Data(_) => FrameType::Data,
            Self::Resize(_) => FrameType::Resize,
            Self::Close => FrameType::Close,
            Self::Exit(_) => FrameType::Exit,
            Self::ReplayBegin => FrameType::ReplayBegin,
            Self::ReplayEnd => FrameType::ReplayEnd,
        }
    }

    /// The encoded length, type byte included (before the checks of encoding).
    pub const fn encoded_len(&self) -> usize {
        1 + match self {
            Self::Start(_) | Self::Resize(_) | Self::Exit(_) => FOUR_BYTES,
            Self::Data(bytes) => bytes.len(),
            Self::Close | Self::ReplayBegin | Self::ReplayEnd => 0,
        }
    }

    /// Appends the encoding of this frame, to travel in `direction`, to `out`.
    ///
    /// Refuses what [`Frame::decode`] would refuse, in the same order and with the
    /// same variant: a type in the wrong direction ([`FrameError::WrongDirection`]),
    /// `data` longer than [`MAX_DATA_LEN`] ([`FrameError::TooLong`]) or empty
    /// ([`FrameError::WrongLength`]). On a refusal `out` is unchanged. Nothing is
    /// allocated when `out` has room for [`Frame::encoded_len`] more bytes.
    pub fn encode_into(&self, direction: Direction, out: &mut Vec<u8>) -> Result<(), FrameError> {
        if self.encoded_len() > MAX_FRAME_LEN {
            return Err(FrameError::TooLong);
        }
        let frame_type = self.frame_type();
        if !frame_type.allowed(direction) {
            return Err(FrameError::WrongDirection);
        }
        if matches!(self, Self::Data(bytes) if bytes.is_empty()) {
            return Err(FrameError::WrongLength);
        }
        out.reserve(self.encoded_len());
        out.push(frame_type.as_u8());
        match self {
            Self::Start(size) | Self::Resize(size) => out.extend_from_slice(&size.to_bytes()),
            Self::Data(bytes) => out.extend_from_slice(bytes),
            Self::Exit(code) => out.extend_from_slice(&code.to_be_bytes()),
            Self::Close | Self::ReplayBegin | Self::ReplayEnd => {}
        }
        Ok(())
    }

    /// The encoding of this frame in a new buffer; see [`Frame::encode_into`].
    pub fn to_vec(&self, direction: Direction) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::with_capacity(self.encoded_len().min(MAX_FRAME_LEN));
        self.encode_into(direction, &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use Direction::{DeviceToHost as D2H, HostToDevice as H2D};

    fn size(columns: u16, rows: u16) -> TerminalSize {
        TerminalSize::new(columns, rows).unwrap()
    }

    fn frame_of(frame_type: u8, content_len: usize) -> Vec<u8> {
        let mut bytes = vec![0xA5; content_len + 1];
        bytes[0] = frame_type;
        bytes
    }

    #[test]
    fn every_type_round_trips_in_its_direction() {
        let data_max = vec![0x5A; MAX_DATA_LEN];
        let cases: Vec<(Frame<'_>, Direction, Vec<u8>)> = vec![
            (
                Frame::Start(size(80, 24)),
                D2H,
                vec![0x01, 0x00, 0x50, 0x00, 0x18],
            ),
            (Frame::Start(size(1, 1)), D2H, vec![0x01, 0, 1, 0, 1]),
            (
                Frame::Start(size(u16::MAX, u16::MAX)),
                D2H,
                vec![0x01, 0xff, 0xff, 0xff, 0xff],
            ),
            (
                Frame::Start(size(0x0102, 0x0304)),
                D2H,
                vec![0x01, 1, 2, 3, 4],
            ),
            (Frame::Data(b"ls\r"), D2H, vec![0x02, b'l', b's', b'\r']),
            (Frame::Data(b"x"), H2D, vec![0x02, b'x']),
            (Frame::Data(&[0]), D2H, vec![0x02, 0]),
            (Frame::Resize(size(200, 50)), D2H, vec![0x03, 0, 200, 0, 50]),
            (Frame::Close, D2H, vec![0x04]),
            (Frame::Exit(0), H2D, vec![0x05, 0, 0, 0, 0]),
            (Frame::Exit(130), H2D, vec![0x05, 0, 0, 0, 130]),
            (Frame::Exit(-1), H2D, vec![0x05, 0xff, 0xff, 0xff, 0xff]),
            (Frame::Exit(i32::MIN), H2D, vec![0x05, 0x80, 0, 0, 0]),
            (
                Frame::Exit(i32::MAX),
                H2D,
                vec![0x05, 0x7f, 0xff, 0xff, 0xff],
            ),
            (Frame::ReplayBegin, H2D, vec![0x06]),
            (Frame::ReplayEnd, H2D, vec![0x07]),
        ];
        for (frame, direction, bytes) in &cases {
            assert_eq!(&frame.to_vec(*direction).unwrap(), bytes, "{frame:?}");
            assert_eq!(frame.encoded_len(), bytes.len());
            assert_eq!(Frame::decode(bytes, *direction), Ok(*frame), "{bytes:?}");
        }
        for direction in [D2H, H2D] {
            let frame = Frame::Data(&data_max);
            let bytes = frame.to_vec(direction).unwrap();
            assert_eq!(bytes.len(), MAX_FRAME_LEN);
            assert_eq!(Frame::decode(&bytes, direction), Ok(frame));
        }
    }

    #[test]
    fn every_refusal() {
        let too_long = frame_of(0x02, MAX_DATA_LEN + 1);
        let cases: Vec<(&str, Vec<u8>, Direction, FrameError)> = vec![
            ("empty d2h", vec![], D2H, FrameError::Empty),
            ("empty h2d", vec![], H2D, FrameError::Empty),
            (
                "data of 65519 bytes (frame 65520)",
                too_long.clone(),
                D2H,
                FrameError::TooLong,
            ),
            (
                "data of 65519 bytes h2d",
                too_long,
                H2D,
                FrameError::TooLong,
            ),
            (
                "frame of 65520 bytes, start",
                frame_of(0x01, 65519),
                D2H,
                FrameError::TooLong,
            ),
            (
                "frame of 65520 bytes, unknown type",
                frame_of(0x00, 65519),
                D2H,
                FrameError::TooLong,
            ),
            (
                "frame of 65520 bytes, close",
                frame_of(0x04, 65519),
                D2H,
                FrameError::TooLong,
            ),
            (
                "frame far too long",
                frame_of(0x02, 1 << 20),
                H2D,
                FrameError::TooLong,
            ),
            ("type 0x00 alone", vec![0x00], D2H, FrameError::UnknownType),
            (
                "type 0x00 with content",
                vec![0x00, 0, 80, 0, 24],
                H2D,
                FrameError::UnknownType,
            ),
            (
                "start with 3 bytes",
                vec![0x01, 0, 80, 0],
                D2H,
                FrameError::WrongLength,
            ),
            (
                "start with 5 bytes",
                vec![0x01, 0, 80, 0, 24, 0],
                D2H,
                FrameError::WrongLength,
            ),
            (
                "start with no content",
                vec![0x01],
                D2H,
                FrameError::WrongLength,
            ),
            (
                "resize with 3 bytes",
                vec![0x03, 0, 80, 0],
                D2H,
                FrameError::WrongLength,
            ),
            (
                "resize with 5 bytes",
                vec![0x03, 0, 80, 0, 24, 0],
                D2H,
                FrameError::WrongLength,
            ),
            ("data empty d2h", vec![0x02], D2H, FrameError::WrongLength),
            ("data empty h2d", vec![0x02], H2D, FrameError::WrongLength),
            (
                "close with 1 byte",
                vec![0x04, 0],
                D2H,
                FrameError::WrongLength,
            ),
            (
                "exit with 3 bytes",
                vec![0x05, 0, 0, 0],
                H2D,
                FrameError::WrongLength,
            ),
            (
                "exit with 5 bytes",
                vec![0x05, 0, 0, 0, 0, 0],
                H2D,
                FrameError::WrongLength,
            ),
            (
                "exit with no content",
                vec![0x05],
                H2D,
                FrameError::WrongLength,
            ),
            (
                "replay_begin with 1 byte",
                vec![0x06, 0],
                H2D,
                FrameError::WrongLength,
            ),
            (
                "replay_end with 1 byte",
                vec![0x07, 0],
                H2D,
                FrameError::WrongLength,
            ),
            (
                "start 0x0",
                vec![0x01, 0, 0, 0, 0],
                D2H,
                FrameError::ZeroSize,
            ),
            (
                "start 0x5",
                vec![0x01, 0, 0, 0, 5],
                D2H,
                FrameError::ZeroSize,
            ),
            (
                "start 5x0",
                vec![0x01, 0, 5, 0, 0],
                D2H,
                FrameError::ZeroSize,
            ),
            (
                "resize 0x0",
                vec![0x03, 0, 0, 0, 0],
                D2H,
                FrameError::ZeroSize,
            ),
            (
                "resize 0x5",
                vec![0x03, 0, 0, 0, 5],
                D2H,
                FrameError::ZeroSize,
            ),
            (
                "resize 5x0",
                vec![0x03, 0, 5, 0, 0],
                D2H,
                FrameError::ZeroSize,
            ),
            (
                "start h2d",
                vec![0x01, 0, 80, 0, 24],
                H2D,
                FrameError::WrongDirection,
            ),
            (
                "resize h2d",
                vec![0x03, 0, 80, 0, 24],
                H2D,
                FrameError::WrongDirection,
            ),
            ("close h2d", vec![0x04], H2D, FrameError::WrongDirection),
            (
                "exit d2h",
                vec![0x05, 0, 0, 0, 0],
                D2H,
                FrameError::WrongDirection,
            ),
            (
                "replay_begin d2h",
                vec![0x06],
                D2H,
                FrameError::WrongDirection,
            ),
            (
                "replay_end d2h",
                vec![0x07],
                D2H,
                FrameError::WrongDirection,
            ),
            // Precedence: direction before length, length before size.
            (
                "start h2d with 3 bytes",
                vec![0x01, 0, 0, 0],
                H2D,
                FrameError::WrongDirection,
            ),
            (
                "exit d2h with 1 byte",
                vec![0x05, 0],
                D2H,
                FrameError::WrongDirection,
            ),
            (
                "start 0x0 with 5 bytes",
                vec![0x01, 0, 0, 0, 0, 0],
                D2H,
                FrameError::WrongLength,
            ),
            (
                "start 0x0 h2d",
                vec![0x01, 0, 0, 0, 0],
                H2D,
                FrameError::WrongDirection,
            ),
        ];
        for (name, bytes, direction, want) in &cases {
            assert_eq!(Frame::decode(bytes, *direction), Err(*want), "{name}");
        }
    }

    #[test]
    fn types_0x00_and_0x08_to_0xff_are_unknown_in_both_directions() {
        for type_byte in std::iter::once(0x00).chain(0x08..=0xff) {
            for direction in [D2H, H2D] {
                for content_len in [0, 1, 4] {
                    let bytes = frame_of(type_byte, content_len);
                    assert_eq!(
                        Frame::decode(&bytes, direction),
                        Err(FrameError::UnknownType),
                        "type {type_byte:#04x}"
                    );
                }
            }
            assert_eq!(FrameType::from_u8(type_byte), Err(FrameError::UnknownType));
        }
    }

    #[test]
    fn frame_types_match_the_table() {
        let names: Vec<(u8, &str)> = FrameType::ALL
            .iter()
            .map(|t| (t.as_u8(), t.name()))
            .collect();
        assert_eq!(
            names,
            [
                (1, "start"),
                (2, "data"),
                (3, "resize"),
                (4, "close"),
                (5, "exit"),
                (6, "replay_begin"),
                (7, "replay_end")
            ]
        );
        for &frame_type in FrameType::ALL {
            assert_eq!(FrameType::from_u8(frame_type.as_u8()), Ok(frame_type));
        }
    }

    #[test]
    fn encoding_refuses_what_decoding_refuses() {
        let long = vec![0u8; MAX_DATA_LEN + 1];
        let cases: Vec<(&str, Frame<'_>, Direction, FrameError)> = vec![
            (
                "data empty d2h",
                Frame::Data(&[]),
                D2H,
                FrameError::WrongLength,
            ),
            (
                "data empty h2d",
                Frame::Data(&[]),
                H2D,
                FrameError::WrongLength,
            ),
            (
                "data 65519 d2h",
                Frame::Data(&long),
                D2H,
                FrameError::TooLong,
            ),
            (
                "data 65519 h2d",
                Frame::Data(&long),
                H2D,
                FrameError::TooLong,
            ),
            (
                "start h2d",
                Frame::Start(size(80, 24)),
                H2D,
                FrameError::WrongDirection,
            ),
            (
                "resize h2d",
                Frame::Resize(size(80, 24)),
                H2D,
                FrameError::WrongDirection,
            ),
            ("close h2d", Frame::Close, H2D, FrameError::WrongDirection),
            ("exit d2h", Frame::Exit(0), D2H, FrameError::WrongDirection),
            (
                "replay_begin d2h",
                Frame::ReplayBegin,
                D2H,
                FrameError::WrongDirection,
            ),
            (
                "replay_end d2h",
                Frame::ReplayEnd,
                D2H,
                FrameError::WrongDirection,
            ),
        ];
        for (name, frame, direction, want) in &cases {
            let mut out = vec![0xEE];
            assert_eq!(
                frame.encode_into(*direction, &mut out),
                Err(*want),
                "{name}"
            );
            assert_eq!(out, [0xEE], "{name}: buffer changed on refusal");
            assert_eq!(frame.to_vec(*direction), Err(*want), "{name}");
        }
    }

    /// Every short input in both directions: decoding and encoding agree byte for byte.
    #[test]
    fn decode_then_encode_is_the_identity_on_short_inputs() {
        for type_byte in 0..=0x09u8 {
            for direction in [D2H, H2D] {
                for content_len in 0..=6 {
                    for fill in [0x00, 0x01, 0xff] {
                        let mut bytes = vec![fill; content_len + 1];
                        bytes[0] = type_byte;
                        if let Ok(frame) = Frame::decode(&bytes, direction) {
                            assert_eq!(frame.to_vec(direction), Ok(bytes.clone()));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn encode_into_appends_without_allocating_when_there_is_room() {
        let mut out = Vec::with_capacity(64);
        out.push(0xAB);
        let capacity = out.capacity();
        let pointer = out.as_ptr();
        Frame::Data(b"hello").encode_into(D2H, &mut out).unwrap();
        Frame::Resize(size(100, 40))
            .encode_into(D2H, &mut out)
            .unwrap();
        assert_eq!(out.capacity(), capacity);
        assert_eq!(out.as_ptr(), pointer);
        assert_eq!(
            out,
            [
                0xAB, 0x02, b'h', b'e', b'l', b'l', b'o', 0x03, 0, 100, 0, 40
            ]
        );
    }

    #[test]
    fn terminal_size_refuses_zero() {
        assert_eq!(TerminalSize::new(0, 0), Err(FrameError::ZeroSize));
        assert_eq!(TerminalSize::new(0, 5), Err(FrameError::ZeroSize));
        assert_eq!(TerminalSize::new(5, 0), Err(FrameError::ZeroSize));
        let s = size(132, 43);
        assert_eq!((s.columns(), s.rows()), (132, 43));
    }

    #[test]
    fn every_refusal_closes_with_4104_and_handshake_failed() {
        for error in [
            FrameError::Empty,
            FrameError::TooLong,
            FrameError::UnknownType,
            FrameError::WrongDirection,
            FrameError::WrongLength,
            FrameError::ZeroSize,
        ] {
            assert_eq!(error.close_code(), CloseCode::TerminalHandshakeFailed);
            assert_eq!(error.close_code().as_u16(), 4104);
            assert_eq!(error.close_detail(), CloseDetail::HandshakeFailed);
        }
    }
}
