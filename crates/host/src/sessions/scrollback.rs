//! The scrollback ring buffer of a session (6.2 "Replay on the host",
//! D-M2-45-14): the newest `host_service.scrollback_bytes` of PTY output, only in
//! the memory of the service, filled while no device is attached so the program
//! never blocks on a full PTY.
//!
//! A replay starts at the beginning of the buffer; once the buffer has wrapped,
//! it starts after its first line feed, so no half line, half UTF-8 sequence or
//! half escape sequence opens it, and a wrapped buffer without a line feed
//! replays nothing.

use std::collections::VecDeque;

/// The ring buffer.
#[derive(Debug)]
pub struct Scrollback {
    capacity: usize,
    bytes: VecDeque<u8>,
    wrapped: bool,
}

impl Scrollback {
    /// An empty buffer of `capacity` bytes (at least 1).
    pub fn new(capacity: usize) -> Scrollback {
        let capacity = capacity.max(1);
        Scrollback {
            capacity,
            bytes: VecDeque::with_capacity(capacity.min(64 * 1024)),
            wrapped: false,
        }
    }

    /// Appends output, dropping the oldest bytes beyond the capacity.
    pub fn push(&mut self, data: &[u8]) {
        let data = if data.len() > self.capacity {
            self.wrapped = true;
            self.bytes.clear();
            &data[data.len() - self.capacity..]
        } else {
            data
        };
        let overflow = (self.bytes.len() + data.len()).saturating_sub(self.capacity);
        if overflow > 0 {
            self.wrapped = true;
            self.bytes.drain(..overflow);
        }
        self.bytes.extend(data);
    }

    /// What a replay sends now: everything, or after the first line feed once
    /// the buffer has wrapped (nothing without one).
    pub fn replay(&self) -> Vec<u8> {
        if !self.wrapped {
            return self.bytes.iter().copied().collect();
        }
        match self.bytes.iter().position(|&b| b == b'\n') {
            Some(lf) => self.bytes.iter().skip(lf + 1).copied().collect(),
            None => Vec::new(),
        }
    }

    /// The number of bytes held.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// The output that arrives between `start` of an attach and the end of its
/// replay (local confirmation may take a while): kept up to
/// `host_service.scrollback_bytes`; later output of that interval stays only in
/// the ring buffer (6.2).
#[derive(Debug)]
pub struct SinceStart {
    limit: usize,
    bytes: Vec<u8>,
}

impl SinceStart {
    /// An empty collector that keeps at most `limit` bytes.
    pub fn new(limit: usize) -> SinceStart {
        SinceStart {
            limit,
            bytes: Vec::new(),
        }
    }

    /// Keeps what still fits.
    pub fn push(&mut self, data: &[u8]) {
        let room = self.limit.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }

    /// What was kept.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwrapped_buffers_replay_everything() {
        let mut s = Scrollback::new(16);
        assert!(s.replay().is_empty());
        s.push(b"abc");
        s.push(b"def\n");
        assert_eq!(s.replay(), b"abcdef\n");
        s.push(b"123456789");
        assert_eq!(s.len(), 16);
        assert_eq!(s.replay(), b"abcdef\n123456789");
    }

    #[test]
    fn wrapped_buffers_start_after_the_first_line_feed() {
        let mut s = Scrollback::new(8);
        s.push(b"line1\nline2\nab");
        // Held: the last 8 bytes, "line2\nab"; wrapped, so after the LF.
        assert_eq!(s.len(), 8);
        assert_eq!(s.replay(), b"ab");
        let mut s = Scrollback::new(8);
        s.push(b"\x1b[31mred text without newline");
        assert!(
            s.replay().is_empty(),
            "a wrapped buffer without LF replays nothing"
        );
        let mut s = Scrollback::new(8);
        s.push(b"0123456");
        s.push(b"\nxy");
        // Held: "23456\nxy": wrapped, replay after the LF.
        assert_eq!(s.replay(), b"xy");
    }

    #[test]
    fn a_single_push_larger_than_the_buffer_keeps_its_tail() {
        let mut s = Scrollback::new(4);
        s.push(b"abcdef\ngh");
        assert_eq!(s.len(), 4);
        assert_eq!(s.replay(), b"gh");
    }

    #[test]
    fn since_start_keeps_only_the_limit() {
        let mut c = SinceStart::new(5);
        c.push(b"abc");
        c.push(b"defgh");
        c.push(b"ij");
        assert_eq!(c.into_bytes(), b"abcde");
    }
}
