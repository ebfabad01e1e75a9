//! Edits of the configuration file by `bothy-host session-user add` and
//! `remove` (2.2 item 3): `host_service.session_users` and
//! `host_service.claude_workdirs`, keeping every other line of the file — its
//! other keys, comments and layout — as it was (D-193).
//!
//! The edit works on lines: a block sequence gains or loses one `- name`
//! line, a one-line flow sequence is rewritten on its line (a comment after it
//! stays), an entry of a block mapping `claude_workdirs` loses its lines. A
//! value in any other form is rewritten as one flow value on the key's line.
//! [`edit`] then decodes the result and compares it with what the change
//! must give; if the file decodes to anything else, nothing is written.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bothy_config::yaml;
use nix::fcntl::{Flock, FlockArg};
use serde_json::Value;

use crate::config::{Config, UserWorkdirs};

/// Why the file could not be edited. Carries no value of the file.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// Reading, locking or writing failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The file is not a valid configuration (before the edit).
    #[error("the configuration is invalid: {0}")]
    Invalid(#[from] bothy_config::ConfigError),
    /// `host_service` is written in a form this editor does not change.
    #[error("host_service is not a block mapping; edit {0} by hand")]
    Unsupported(&'static str),
    /// The edited text would not decode to the intended configuration.
    #[error("the edit of {0} would change more than that key; edit it by hand")]
    NotExact(&'static str),
}

/// The configuration file, locked against a concurrent edit.
#[derive(Debug)]
pub struct ConfigFile {
    /// The file as resolved (a link is edited at its target).
    path: PathBuf,
    text: String,
    config: Config,
    _lock: Flock<File>,
}

impl ConfigFile {
    /// Locks the folder of the file at `path` (an exclusive `flock`, held until
    /// drop) and reads and decodes the file.
    pub fn open(path: &Path) -> Result<ConfigFile, EditError> {
        let path = fs::canonicalize(path)?;
        let folder = path.parent().unwrap_or(Path::new("/")).to_owned();
        let folder = File::open(&folder)?;
        let lock =
            Flock::lock(folder, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))?;
        let config = Config::load(&path)?;
        let text = fs::read_to_string(&path)?;
        Ok(ConfigFile {
            path,
            text,
            config,
            _lock: lock,
        })
    }

    /// The decoded configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The file (resolved).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets `host_service.session_users` to `users` and drops the working
    /// directories of every name it takes out from `host_service.claude_workdirs`;
    /// writes the file (same owner and mode, atomically). Returns whether the
    /// file changed.
    pub fn set_session_users(&mut self, users: &[String]) -> Result<bool, EditError> {
        let mut expected = self.config.clone();
        expected.host_service.session_users = users.to_vec();
        let mut text = edit_session_users(&self.text, users)?;
        // Only the names this change takes out lose their working directories.
        let dropped: Vec<String> = self
            .config
            .host_service
            .session_users
            .iter()
            .filter(|u| !users.contains(u))
            .filter(|u| {
                self.config
                    .host_service
                    .claude_workdirs
                    .iter()
                    .any(|w| &w.user == *u)
            })
            .cloned()
            .collect();
        expected
            .host_service
            .claude_workdirs
            .retain(|w| !dropped.contains(&w.user));
        for user in &dropped {
            text = edit_drop_workdirs(&text, user, &expected.host_service.claude_workdirs)?;
        }
        let decoded =
            Config::from_yaml_str(&text).map_err(|_| EditError::NotExact("the session users"))?;
        if decoded != expected {
            return Err(EditError::NotExact("host_service.session_users"));
        }
        if text == self.text {
            return Ok(false);
        }
        replace_file(&self.path, text.as_bytes())?;
        self.text = text;
        self.config = expected;
        Ok(true)
    }
}

/// Replaces the file at `path` with `bytes` atomically, keeping its owner and
/// mode.
fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let metadata = fs::metadata(path)?;
    let folder = path.parent().unwrap_or(Path::new("/"));
    let mut random = [0u8; 6];
    getrandom::fill(&mut random).map_err(|_| io::Error::other("no random source"))?;
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let temporary = folder.join(format!(".config.{suffix}.tmp"));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temporary)?;
        file.write_all(bytes)?;
        std::os::unix::fs::fchown(&file, Some(metadata.uid()), Some(metadata.gid()))?;
        file.set_permissions(fs::Permissions::from_mode(metadata.mode() & 0o7777))?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(e);
    }
    if let Ok(dir) = File::open(folder) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// A name as a YAML scalar: plain when it reads back as that string, else in
/// double quotes (session user names carry no quote or backslash).
pub fn scalar(name: &str) -> String {
    match yaml::parse_scalar(name) {
        Ok(Value::String(s)) if s == name => name.to_owned(),
        _ => format!("\"{name}\""),
    }
}

fn flow_sequence(users: &[String]) -> String {
    let items: Vec<String> = users.iter().map(|u| scalar(u)).collect();
    format!("[{}]", items.join(", "))
}

fn flow_workdirs(workdirs: &[UserWorkdirs]) -> String {
    let entries: Vec<String> = workdirs
        .iter()
        .map(|w| {
            let list: Vec<String> = w
                .workdirs
                .iter()
                .map(|d| {
                    format!(
                        "{{\"path\": {}, \"display_name\": {}}}",
                        Value::String(d.path.to_string_lossy().into_owned()),
                        Value::String(d.display_name.clone())
                    )
                })
                .collect();
            format!("{}: [{}]", Value::String(w.user.clone()), list.join(", "))
        })
        .collect();
    format!("{{{}}}", entries.join(", "))
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The value text after `key:` on a line, without a comment; `None` when the
/// line is not that key.
fn key_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.trim_start_matches(' ').strip_prefix(key)?;
    let rest = rest.strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with([' ', '\t', '\n', '\r'])) {
        return None;
    }
    let rest = rest.trim();
    if rest.starts_with('#') {
        Some("")
    } else {
        Some(rest)
    }
}

/// The lines of the text, each with its line end.
fn lines(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
    if let Some(last) = out.last_mut()
        && !last.ends_with('\n')
    {
        last.push('\n');
    }
    out
}

/// Where `host_service` and its block are: (key line, first line after the
/// block, indentation of its keys if it has any).
fn host_service_block(
    lines: &[String],
    what: &'static str,
) -> Result<Option<(usize, usize, Option<usize>)>, EditError> {
    let Some(start) = lines
        .iter()
        .position(|l| indent(l) == 0 && key_value(l, "host_service").is_some())
    else {
        return Ok(None);
    };
    if key_value(&lines[start], "host_service") != Some("") {
        return Err(EditError::Unsupported(what));
    }
    let mut end = start + 1;
    while end < lines.len() && (blank_or_comment(&lines[end]) || indent(&lines[end]) > 0) {
        end += 1;
    }
    let child = lines[start + 1..end]
        .iter()
        .find(|l| !blank_or_comment(l))
        .map(|l| indent(l));
    Ok(Some((start, end, child)))
}

/// The lines of the value of the key at `key_line` (indentation `ind`) up to
/// `limit`: more indented lines, and `- ` lines at the same indentation (a
/// sequence may sit at the key's indentation); trailing blank and comment
/// lines excluded.
fn value_end(lines: &[String], key_line: usize, ind: usize, limit: usize) -> usize {
    let mut end = key_line + 1;
    let mut last = key_line + 1;
    while end < limit {
        let l = &lines[end];
        if blank_or_comment(l) {
            end += 1;
            continue;
        }
        let i = indent(l);
        let t = l.trim_start_matches(' ');
        if i > ind || (i == ind && (t.starts_with("- ") || t.trim_end() == "-")) {
            end += 1;
            last = end;
        } else {
            break;
        }
    }
    last
}

/// The text with `host_service.session_users` set to `users`.
pub fn edit_session_users(text: &str, users: &[String]) -> Result<String, EditError> {
    const WHAT: &str = "host_service.session_users";
    let mut lines = lines(text);
    let Some((start, end, child)) = host_service_block(&lines, WHAT)? else {
        // No host_service at all: append it.
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "host_service:\n  session_users: {}\n",
            flow_sequence(users)
        ));
        return Ok(out);
    };
    let ind = child.unwrap_or(2);
    let pad = " ".repeat(ind);
    let Some(key_line) = (start + 1..end)
        .find(|&i| indent(&lines[i]) == ind && key_value(&lines[i], "session_users").is_some())
    else {
        lines.insert(
            start + 1,
            format!("{pad}session_users: {}\n", flow_sequence(users)),
        );
        return Ok(lines.concat());
    };
    let inline = key_value(&lines[key_line], "session_users").unwrap_or("");
    let span_end = value_end(&lines, key_line, ind, end);
    let whole = |lines: &mut Vec<String>| {
        lines.splice(
            key_line..span_end,
            [format!("{pad}session_users: {}\n", flow_sequence(users))],
        );
    };
    if !inline.is_empty() {
        // A one-line flow sequence keeps what follows its closing bracket.
        let line = lines[key_line].clone();
        if inline.starts_with('[')
            && span_end == key_line + 1
            && let Some(close) = line.rfind(']')
            && matches!(
                yaml::parse_document(&line[line.find('[').unwrap_or(0)..=close]),
                Ok(Value::Array(_))
            )
        {
            let tail = line[close + 1..].to_owned();
            lines[key_line] = format!("{pad}session_users: {}{tail}", flow_sequence(users));
        } else {
            whole(&mut lines);
        }
        return Ok(lines.concat());
    }
    if users.is_empty() {
        whole(&mut lines);
        return Ok(lines.concat());
    }
    // A block sequence: one `- name` line per item.
    let mut items: Vec<(usize, String)> = Vec::new();
    let mut item_indent = None;
    for i in key_line + 1..span_end {
        let l = &lines[i];
        if blank_or_comment(l) {
            continue;
        }
        let t = l.trim_start_matches(' ');
        let Some(rest) = t.strip_prefix("- ") else {
            whole(&mut lines);
            return Ok(lines.concat());
        };
        if item_indent.is_some_and(|ii| ii != indent(l)) {
            whole(&mut lines);
            return Ok(lines.concat());
        }
        item_indent = Some(indent(l));
        match yaml::parse_document(rest) {
            Ok(Value::String(s)) => items.push((i, s)),
            _ => {
                whole(&mut lines);
                return Ok(lines.concat());
            }
        }
    }
    let kept: Vec<&String> = items
        .iter()
        .map(|(_, s)| s)
        .filter(|s| users.contains(s))
        .collect();
    let added: Vec<&String> = users.iter().filter(|u| !kept.contains(u)).collect();
    let order: Vec<&String> = kept.iter().copied().chain(added.iter().copied()).collect();
    if order
        .iter()
        .map(|s| s.as_str())
        .ne(users.iter().map(String::as_str))
        || items.is_empty()
    {
        whole(&mut lines);
        return Ok(lines.concat());
    }
    let item_pad = " ".repeat(item_indent.unwrap_or(ind + 2));
    let last_item = items.last().map_or(key_line, |(i, _)| *i);
    let new_lines: Vec<String> = added
        .iter()
        .map(|u| format!("{item_pad}- {}\n", scalar(u)))
        .collect();
    lines.splice(last_item + 1..last_item + 1, new_lines);
    let mut removed: Vec<usize> = items
        .iter()
        .filter(|(_, s)| !users.contains(s))
        .map(|(i, _)| *i)
        .collect();
    removed.sort_unstable();
    for i in removed.into_iter().rev() {
        lines.remove(i);
    }
    Ok(lines.concat())
}

/// The text without the entry of `user` in `host_service.claude_workdirs`;
/// `rest` is what the mapping must hold afterwards (for a rewrite of the
/// whole value when the entry cannot be cut out line by line).
pub fn edit_drop_workdirs(
    text: &str,
    user: &str,
    rest: &[UserWorkdirs],
) -> Result<String, EditError> {
    const WHAT: &str = "host_service.claude_workdirs";
    let mut lines = lines(text);
    let Some((start, end, child)) = host_service_block(&lines, WHAT)? else {
        return Ok(text.to_owned());
    };
    let ind = child.unwrap_or(2);
    let pad = " ".repeat(ind);
    let Some(key_line) = (start + 1..end)
        .find(|&i| indent(&lines[i]) == ind && key_value(&lines[i], "claude_workdirs").is_some())
    else {
        return Ok(text.to_owned());
    };
    let span_end = value_end(&lines, key_line, ind, end);
    let whole = |lines: &mut Vec<String>| {
        lines.splice(
            key_line..span_end,
            [format!("{pad}claude_workdirs: {}\n", flow_workdirs(rest))],
        );
        lines.concat()
    };
    let inline = key_value(&lines[key_line], "claude_workdirs").unwrap_or("");
    if !inline.is_empty() || rest.is_empty() {
        return Ok(whole(&mut lines));
    }
    // A block mapping: the entry is its key line and every more indented line.
    let Some(entry_indent) = (key_line + 1..span_end)
        .map(|i| &lines[i])
        .find(|l| !blank_or_comment(l))
        .map(|l| indent(l))
    else {
        return Ok(whole(&mut lines));
    };
    let entry = (key_line + 1..span_end).find(|&i| {
        let l = &lines[i];
        !blank_or_comment(l) && indent(l) == entry_indent && mapping_key(l) == Some(user.to_owned())
    });
    let Some(entry) = entry else {
        return Ok(whole(&mut lines));
    };
    let entry_end = value_end(&lines, entry, entry_indent, span_end);
    lines.drain(entry..entry_end);
    Ok(lines.concat())
}

/// The key of a block mapping line `key: ...` (plain or quoted).
fn mapping_key(line: &str) -> Option<String> {
    let t = line.trim();
    let (key, _) = if t.starts_with('"') || t.starts_with('\'') {
        let quote = t.chars().next()?;
        let close = t[1..].find(quote)? + 1;
        t.split_at(close + 1)
    } else {
        let colon = t.find(':')?;
        t.split_at(colon)
    };
    match yaml::parse_scalar(key.trim()) {
        Ok(Value::String(s)) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn decoded(text: &str) -> Config {
        Config::from_yaml_str(text).expect("decodes")
    }

    /// The decoded `claude_workdirs` entries of `user` in `text`.
    fn workdirs_of(text: &str, user: &str) -> Vec<UserWorkdirs> {
        decoded(text)
            .host_service
            .claude_workdirs
            .into_iter()
            .filter(|w| w.user == user)
            .collect()
    }

    #[test]
    fn a_block_sequence_gains_and_loses_lines_and_keeps_comments() {
        let text = "# head comment\nhost_service:\n  # the people\n  session_users:\n    - alice  # Alice\n    - bob\n  state_dir: /srv/s # where\n";
        let added = edit_session_users(text, &users(&["alice", "bob", "carol"])).unwrap();
        assert_eq!(
            added,
            "# head comment\nhost_service:\n  # the people\n  session_users:\n    - alice  # Alice\n    - bob\n    - carol\n  state_dir: /srv/s # where\n"
        );
        let removed = edit_session_users(&added, &users(&["bob", "carol"])).unwrap();
        assert_eq!(
            removed,
            "# head comment\nhost_service:\n  # the people\n  session_users:\n    - bob\n    - carol\n  state_dir: /srv/s # where\n"
        );
        let empty = edit_session_users(&removed, &[]).unwrap();
        assert_eq!(
            empty,
            "# head comment\nhost_service:\n  # the people\n  session_users: []\n  state_dir: /srv/s # where\n"
        );
        assert!(decoded(&empty).host_service.session_users.is_empty());
    }

    #[test]
    fn a_flow_sequence_is_rewritten_on_its_line() {
        let text =
            "host_service:\n  session_users: [alice, \"bob\"] # two\n  runtime_dir: /run/x\n";
        let out = edit_session_users(text, &users(&["alice", "bob", "null", "yes"])).unwrap();
        assert_eq!(
            out,
            "host_service:\n  session_users: [alice, bob, \"null\", yes] # two\n  runtime_dir: /run/x\n"
        );
        assert_eq!(
            decoded(&out).host_service.session_users,
            users(&["alice", "bob", "null", "yes"])
        );
    }

    #[test]
    fn a_missing_key_or_section_is_added() {
        assert_eq!(
            edit_session_users("# only a comment\n", &users(&["a"])).unwrap(),
            "# only a comment\nhost_service:\n  session_users: [a]\n"
        );
        assert_eq!(
            edit_session_users("host_service:\n    state_dir: /s\n", &users(&["a"])).unwrap(),
            "host_service:\n    session_users: [a]\n    state_dir: /s\n"
        );
        assert!(matches!(
            edit_session_users("host_service: {session_users: [a]}\n", &users(&["b"])),
            Err(EditError::Unsupported(_))
        ));
    }

    #[test]
    fn a_sequence_at_the_keys_indentation_is_edited_too() {
        let text = "host_service:\n  session_users:\n  - alice\n  - bob\n  state_dir: /s\n";
        let out = edit_session_users(text, &users(&["bob"])).unwrap();
        assert_eq!(
            out,
            "host_service:\n  session_users:\n  - bob\n  state_dir: /s\n"
        );
    }

    #[test]
    fn an_entry_of_claude_workdirs_is_cut_out() {
        let text = "host_service:\n  session_users: [alice, bob]\n  claude_workdirs:\n    # alice's\n    alice:\n      - path: /a\n        display_name: a\n    \"bob\":\n      - {path: /b, display_name: b}\n  state_dir: /s\n";
        let rest = workdirs_of(text, "bob");
        let out = edit_drop_workdirs(text, "alice", &rest).unwrap();
        assert_eq!(
            out,
            "host_service:\n  session_users: [alice, bob]\n  claude_workdirs:\n    # alice's\n    \"bob\":\n      - {path: /b, display_name: b}\n  state_dir: /s\n"
        );
        let out = edit_drop_workdirs(&out, "bob", &[]).unwrap();
        assert_eq!(
            out,
            "host_service:\n  session_users: [alice, bob]\n  claude_workdirs: {}\n  state_dir: /s\n"
        );
        assert!(decoded(&out).host_service.claude_workdirs.is_empty());
    }

    #[test]
    fn a_flow_mapping_of_claude_workdirs_is_rewritten_whole() {
        let text = "host_service:\n  claude_workdirs: {alice: [{path: /a, display_name: a}], bob: [{path: \"/b c\", display_name: \"B: c\"}]}\n";
        let rest = workdirs_of(text, "bob");
        let out = edit_drop_workdirs(text, "alice", &rest).unwrap();
        assert_eq!(decoded(&out).host_service.claude_workdirs, rest);
    }
}
