//! [`ConfigError`]: why a configuration was refused. Every variant names the
//! place (a dotted key such as `terminal.pairing_code_ttl`, an environment
//! variable, a line and column) and never the value found there, so the error can
//! be printed and logged even when the value was a password (DESIGN §3).

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a configuration was refused.
///
/// `key` fields are dotted keys (`server.tls.cert_file`); a member name that is
/// not a plain word is shown in quotes (`"terminal.pairing_code_ttl"` is one key
/// of the top level, not a nested one), and the empty key is the top level.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read the configuration file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        error: io::Error,
    },
    /// The file is not one valid YAML document (or not UTF-8).
    #[error("the configuration is not valid YAML: {reason}{}", Location(*location))]
    Syntax {
        /// What is wrong, in general words (never the text found).
        reason: &'static str,
        /// Line and column (1-based), where the parser knows them.
        location: Option<(u64, u64)>,
    },
    /// A mapping holds the same key twice.
    #[error("configuration key {} appears more than once{}", ShowKey(key), Location(*location))]
    DuplicateKey {
        /// The key that appears twice.
        key: String,
        /// Line and column (1-based) of the second one.
        location: Option<(u64, u64)>,
    },
    /// A key the configuration does not have (a typo, or a key of a later version).
    #[error("unknown configuration key {}", ShowKey(key))]
    UnknownKey {
        /// The unknown key.
        key: String,
    },
    /// A key is present without a value (YAML `null`, `~` or nothing).
    #[error(
        "configuration key {} has no value: give it one or remove the key",
        ShowKey(key)
    )]
    NullValue {
        /// The key.
        key: String,
    },
    /// A value of the wrong YAML type.
    #[error("configuration key {} must be {expected}", ShowKey(key))]
    WrongType {
        /// The key.
        key: String,
        /// What the key holds.
        expected: String,
    },
    /// A value of the right type but not allowed (a bad duration, out of range).
    #[error(
        "invalid value for configuration key {}: must be {expected}",
        ShowKey(key)
    )]
    InvalidValue {
        /// The key.
        key: String,
        /// What the key accepts.
        expected: String,
    },
    /// A mapping lacks a member it requires (`server.tls.key_file`).
    #[error("configuration key {} is missing", ShowKey(key))]
    MissingKey {
        /// The missing key.
        key: String,
    },
    /// A `BOTHY_` variable that names no configuration key.
    #[error(
        "unknown environment variable {var}: BOTHY_ variables set configuration keys \
         (BOTHY_SECTION__KEY), and this one names none"
    )]
    UnknownEnvVar {
        /// The variable's name.
        var: String,
    },
    /// Two `BOTHY_` variables set the same key, or one sets a key inside the other's.
    #[error("environment variables {var} and {other} set overlapping configuration keys")]
    EnvConflict {
        /// One variable.
        var: String,
        /// The other.
        other: String,
    },
    /// A `BOTHY_` variable whose name or value is not valid UTF-8.
    #[error("environment variable {var} is not valid UTF-8")]
    EnvNotUnicode {
        /// The variable's name (invalid bytes replaced).
        var: String,
    },
    /// The refusal of a value that an environment variable set.
    #[error("{error} (set by environment variable {var})")]
    FromEnv {
        /// The variable.
        var: String,
        /// The refusal.
        error: Box<ConfigError>,
    },
}

impl ConfigError {
    /// The dotted key the error names, if it names one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::DuplicateKey { key, .. }
            | ConfigError::UnknownKey { key }
            | ConfigError::NullValue { key }
            | ConfigError::WrongType { key, .. }
            | ConfigError::InvalidValue { key, .. }
            | ConfigError::MissingKey { key } => Some(key),
            ConfigError::FromEnv { error, .. } => error.key(),
            ConfigError::Read { .. }
            | ConfigError::Syntax { .. }
            | ConfigError::UnknownEnvVar { .. }
            | ConfigError::EnvConflict { .. }
            | ConfigError::EnvNotUnicode { .. } => None,
        }
    }

    pub fn invalid(key: &str, expected: impl Into<String>) -> Self {
        ConfigError::InvalidValue {
            key: key.to_owned(),
            expected: expected.into(),
        }
    }

    pub fn wrong_type(key: &str, expected: impl Into<String>) -> Self {
        ConfigError::WrongType {
            key: key.to_owned(),
            expected: expected.into(),
        }
    }
}

/// A key for messages: the top level has no name of its own.
struct ShowKey<'a>(&'a str);

impl fmt::Display for ShowKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("(the top level)")
        } else {
            f.write_str(self.0)
        }
    }
}

/// ` at line L, column C`, or nothing.
struct Location(Option<(u64, u64)>);

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((line, column)) => write!(f, " at line {line}, column {column}"),
            None => Ok(()),
        }
    }
}

/// Longest member name an error repeats (as [`bothy_proto::json::pointer_join`] does).
const KEY_NAME_MAX_CHARS: usize = 64;

/// The dotted form of an RFC 6901 pointer: `/terminal/pairing_code_ttl` becomes
/// `terminal.pairing_code_ttl`; a token that is not a plain word is quoted.
pub fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for (i, token) in pointer.split('/').skip(1).enumerate() {
        if i > 0 {
            out.push('.');
        }
        let token = token.replace("~1", "/").replace("~0", "~");
        push_key_segment(&mut out, &token);
    }
    out
}

/// Appends `name` to a dotted key (`prefix.name`), quoting an unusual name.
pub fn join_key(prefix: &str, name: &str) -> String {
    let mut out = prefix.to_owned();
    if !out.is_empty() {
        out.push('.');
    }
    push_key_segment(&mut out, name);
    out
}

fn push_key_segment(out: &mut String, name: &str) {
    let plain = !name.is_empty()
        && name.len() <= KEY_NAME_MAX_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        out.push_str(name);
        return;
    }
    out.push('"');
    for (i, c) in name.chars().enumerate() {
        if i == KEY_NAME_MAX_CHARS {
            out.push_str("...");
            break;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push('?'),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A variable name as errors repeat it: cut and without control characters.
pub fn shown_var(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == KEY_NAME_MAX_CHARS {
            out.push_str("...");
            break;
        }
        out.push(if c.is_control() { '?' } else { c });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_keys() {
        assert_eq!(
            dotted("/terminal/pairing_code_ttl"),
            "terminal.pairing_code_ttl"
        );
        assert_eq!(dotted(""), "");
        assert_eq!(dotted("/a~1b~0c"), "\"a/b~c\"");
        assert_eq!(dotted("/terminal.x"), "\"terminal.x\"");
        assert_eq!(join_key("server.tls", "cert_file"), "server.tls.cert_file");
        assert_eq!(join_key("", "a\nb"), "\"a?b\"");
        assert!(join_key("", &"x".repeat(500)).len() < 80);
        assert_eq!(shown_var("BOTHY_A\u{1}"), "BOTHY_A?");
    }

    #[test]
    fn messages_name_the_place() {
        let e = ConfigError::InvalidValue {
            key: "terminal.open_timeout".into(),
            expected: "a duration".into(),
        };
        assert_eq!(
            e.to_string(),
            "invalid value for configuration key terminal.open_timeout: must be a duration"
        );
        let e = ConfigError::FromEnv {
            var: "BOTHY_TERMINAL__OPEN_TIMEOUT".into(),
            error: Box::new(e),
        };
        assert!(
            e.to_string()
                .ends_with("(set by environment variable BOTHY_TERMINAL__OPEN_TIMEOUT)")
        );
        assert_eq!(e.key(), Some("terminal.open_timeout"));
        let e = ConfigError::Syntax {
            reason: "not valid YAML",
            location: Some((3, 7)),
        };
        assert!(e.to_string().ends_with("at line 3, column 7"), "{e}");
        let e = ConfigError::WrongType {
            key: String::new(),
            expected: "a mapping".into(),
        };
        assert_eq!(
            e.to_string(),
            "configuration key (the top level) must be a mapping"
        );
    }
}
