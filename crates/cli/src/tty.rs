//! The local terminal: raw mode for the length of a session (restored on
//! drop, also when the session ends with an error) and the window size.

use std::io::IsTerminal;
use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::termios::{self, SetArg, Termios};

use bothy_proto::frame::TerminalSize;

/// Raw mode of stdin while the value lives.
pub struct RawMode {
    saved: Termios,
}

impl std::fmt::Debug for RawMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawMode").finish_non_exhaustive()
    }
}

impl RawMode {
    /// Switches stdin to raw mode; `None` when stdin is not a terminal (input
    /// from a pipe passes as it is).
    pub fn enter() -> Option<RawMode> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSADRAIN, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSADRAIN, &self.saved);
    }
}

nix::ioctl_read_bad!(tiocgwinsz, libc::TIOCGWINSZ, libc::winsize);

fn window_size_of(fd: BorrowedFd<'_>) -> Option<TerminalSize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `struct winsize` through the pointer,
    // which points at a live, properly aligned `libc::winsize`; the fd is
    // borrowed and open for the length of the call.
    #[allow(unsafe_code)]
    let result = unsafe {
        use std::os::fd::AsRawFd;
        tiocgwinsz(fd.as_raw_fd(), &mut size)
    };
    result.ok()?;
    TerminalSize::new(size.ws_col, size.ws_row).ok()
}

/// The size used when the local terminal tells none.
pub const DEFAULT_SIZE: TerminalSize = match TerminalSize::new(80, 24) {
    Ok(size) => size,
    // Evaluated at compile time: 80x24 is in range.
    Err(_) => panic!("80x24 is a valid size"),
};

/// The size of the local terminal (stdout, else stdin), else 80x24.
pub fn window_size() -> TerminalSize {
    window_size_of(std::io::stdout().as_fd())
        .or_else(|| window_size_of(std::io::stdin().as_fd()))
        .unwrap_or(DEFAULT_SIZE)
}
