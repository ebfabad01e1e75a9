//! Rules of the auth routes that client and server both apply.

/// The password rule: at least this many characters (Unicode scalar values,
/// not bytes); the server refuses shorter ones with `too_short`, the CLI
/// says the rule before it asks and checks it before it sends.
pub const PASSWORD_MIN_CHARS: usize = 12;

/// The password rule: at most this many characters (`too_long`).
pub const PASSWORD_MAX_CHARS: usize = 256;
