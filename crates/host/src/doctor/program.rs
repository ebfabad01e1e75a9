//! `host_service.claude_bin` as HD6, HD10 and the profile claude see it (7.4):
//! the resolved file, the fixed search list (the folder in which the value lies
//! as configured, resolved by 2.2 item 6 — not the folder a link `claude`
//! points to — then `/usr/bin` and `/bin`), and for a script (`#!`) the
//! interpreter that this search list finds (`#!/usr/bin/env node`: both `env`
//! and the `node` of the search list). The value counts as empty when it does
//! not resolve or the search list does not find the interpreter. The same
//! function runs as the service user (HD10) and as a session user in its helper
//! (HD6, the start of claude), each with its own permissions.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::terms::{Account, NodeKind, Resolution, resolve, trusted_for_all};

/// The folders of the fixed search list after the configured folder (7.4).
pub const FIXED_SEARCH_FOLDERS: [&str; 2] = ["/usr/bin", "/bin"];

/// Bytes of the first line the kernel reads for `#!` (`BINPRM_BUF_SIZE`).
const SHEBANG_BYTES: usize = 256;

/// Interpreters of interpreters followed (the kernel allows a few levels).
const MAX_INTERPRETER_DEPTH: usize = 4;

/// What was found for a program.
#[derive(Debug, Clone)]
pub struct ProgramCheck {
    /// The program as configured and resolved.
    pub file: Resolution,
    /// The folders of the search list, each as configured and resolved (those
    /// that do not resolve are not present and not part of the list).
    pub search_list: Vec<Resolution>,
    /// The interpreters of a script, in the order the kernel and `env` run them.
    pub interpreters: Vec<Resolution>,
    /// A `#!` line that cannot be followed (an option of `env` other than
    /// `-S`, a relative interpreter, too many levels): HD10 cannot check it.
    pub unfollowable: bool,
    /// Whether the value is usable: resolved, and every interpreter found.
    pub usable: bool,
}

impl ProgramCheck {
    /// The resolved program, when usable.
    pub fn program(&self) -> Option<&Path> {
        if self.usable {
            self.file.resolved()
        } else {
            None
        }
    }

    /// The resolved folders of the search list, in order, each once (the
    /// `PATH` prefix of HD6 and of the profile claude).
    pub fn search_path(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for folder in &self.search_list {
            if let Some(path) = folder.resolved()
                && !out.iter().any(|p| p == path)
            {
                out.push(path.to_owned());
            }
        }
        out
    }

    /// HD10 for `claude_bin`: the file, every folder on the way, every folder
    /// of the search list and every interpreter belong to the trusted owner
    /// and are writable by no session user; a `#!` line that cannot be
    /// followed does not pass.
    pub fn trusted(&self, session_users: &[Account]) -> bool {
        !self.unfollowable
            && trusted_for_all(&self.file, session_users)
            && self
                .search_list
                .iter()
                .chain(&self.interpreters)
                .all(|r| trusted_for_all(r, session_users))
    }
}

/// The search list of `configured` (the configured program): its folder as
/// written, then `fixed`.
pub fn search_folders(configured: &Path, fixed: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(parent) = configured.parent()
        && parent.is_absolute()
    {
        out.push(parent.to_owned());
    }
    out.extend(fixed.iter().cloned());
    out
}

/// Resolves `configured` with the search list `search` (module docs).
pub fn check_program(configured: &Path, search: &[PathBuf]) -> ProgramCheck {
    let file = resolve(configured);
    let search_list: Vec<Resolution> = search
        .iter()
        .map(|f| resolve(f))
        .filter(|r| r.target.as_ref().is_some_and(|t| t.kind == NodeKind::Dir))
        .collect();
    let mut check = ProgramCheck {
        usable: file
            .target
            .as_ref()
            .is_some_and(|t| t.kind == NodeKind::File),
        file,
        search_list,
        interpreters: Vec::new(),
        unfollowable: false,
    };
    if !check.usable {
        return check;
    }
    let mut current = check.file.resolved().map(Path::to_owned);
    let mut depth = 0;
    while let Some(path) = current.take() {
        match shebang(&path) {
            Shebang::None => break,
            Shebang::Unfollowable => {
                check.unfollowable = true;
                check.usable = false;
                break;
            }
            Shebang::Interpreter {
                path: interpreter,
                env_program,
            } => {
                depth += 1;
                if depth > MAX_INTERPRETER_DEPTH {
                    check.unfollowable = true;
                    check.usable = false;
                    break;
                }
                let resolution = resolve(&interpreter);
                let found = resolution
                    .target
                    .as_ref()
                    .is_some_and(|t| t.kind == NodeKind::File);
                check.interpreters.push(resolution);
                if !found {
                    check.usable = false;
                    break;
                }
                let next = match env_program {
                    None => check
                        .interpreters
                        .last()
                        .and_then(|r| r.resolved())
                        .map(Path::to_owned),
                    Some(name) => {
                        let Some(found) = find_in(&check.search_path(), &name) else {
                            check.usable = false;
                            break;
                        };
                        check.interpreters.push(found);
                        check
                            .interpreters
                            .last()
                            .and_then(|r| r.resolved())
                            .map(Path::to_owned)
                    }
                };
                current = next;
            }
        }
    }
    check
}

/// What the first line of a file says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shebang {
    /// No `#!`: the file runs itself.
    None,
    /// An interpreter; with `env` also the name it looks up.
    Interpreter {
        path: PathBuf,
        env_program: Option<Vec<u8>>,
    },
    /// A line that cannot be followed.
    Unfollowable,
}

fn shebang(path: &Path) -> Shebang {
    let Ok(file) = std::fs::File::open(path) else {
        return Shebang::Unfollowable;
    };
    let mut head = Vec::with_capacity(SHEBANG_BYTES);
    if file
        .take(SHEBANG_BYTES as u64)
        .read_to_end(&mut head)
        .is_err()
    {
        return Shebang::Unfollowable;
    }
    parse_shebang(&head)
}

/// Parses the first line as Linux does: `#!`, blanks, the interpreter up to a
/// blank, and the rest as one argument; `env` with a name (or `-S` and a
/// name) looks that name up in the search list.
fn parse_shebang(head: &[u8]) -> Shebang {
    let Some(rest) = head.strip_prefix(b"#!") else {
        return Shebang::None;
    };
    let line = match rest.iter().position(|b| *b == b'\n') {
        Some(end) => &rest[..end],
        // A line longer than the buffer: the kernel would cut it; we do not guess.
        None if head.len() >= SHEBANG_BYTES => return Shebang::Unfollowable,
        None => rest,
    };
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let line: &[u8] = trim(line, blank);
    let (interpreter, argument) = match line.iter().position(blank) {
        Some(at) => (&line[..at], Some(trim(&line[at..], blank))),
        None => (line, None),
    };
    if interpreter.is_empty() || interpreter[0] != b'/' || interpreter.contains(&0) {
        return Shebang::Unfollowable;
    }
    let interpreter = PathBuf::from(OsStr::from_bytes(interpreter));
    if interpreter.file_name() != Some(OsStr::new("env")) {
        return Shebang::Interpreter {
            path: interpreter,
            env_program: None,
        };
    }
    let Some(argument) = argument.filter(|a| !a.is_empty()) else {
        return Shebang::Unfollowable;
    };
    let name: &[u8] = if let Some(split) = argument.strip_prefix(b"-S") {
        match trim(split, blank).split(blank).find(|w| !w.is_empty()) {
            Some(word) => word,
            None => return Shebang::Unfollowable,
        }
    } else {
        argument
    };
    if name.starts_with(b"-") || name.contains(&b'=') || name.contains(&b'/') {
        return Shebang::Unfollowable;
    }
    Shebang::Interpreter {
        path: interpreter,
        env_program: Some(name.to_vec()),
    }
}

fn trim(bytes: &[u8], blank: impl Fn(&u8) -> bool) -> &[u8] {
    let start = bytes.iter().position(|b| !blank(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !blank(b))
        .map_or(start, |e| e + 1);
    &bytes[start..end.max(start)]
}

/// The first executable regular file `name` in `folders` (like `execvp`).
fn find_in(folders: &[PathBuf], name: &[u8]) -> Option<Resolution> {
    folders.iter().find_map(|folder| {
        let candidate = folder.join(OsStr::from_bytes(name));
        let resolution = resolve(&candidate);
        let target = resolution.target.as_ref()?;
        (target.kind == NodeKind::File && target.mode & 0o111 != 0).then_some(resolution)
    })
}

/// Whether `path` is a regular executable file (mode bits only).
pub fn executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_lines() {
        let interp = |p: &str, e: Option<&str>| Shebang::Interpreter {
            path: PathBuf::from(p),
            env_program: e.map(|e| e.as_bytes().to_vec()),
        };
        assert_eq!(parse_shebang(b"\x7fELF..."), Shebang::None);
        assert_eq!(parse_shebang(b"#!/bin/sh\necho"), interp("/bin/sh", None));
        assert_eq!(
            parse_shebang(b"#! /bin/bash -e\n"),
            interp("/bin/bash", None)
        );
        assert_eq!(
            parse_shebang(b"#!/usr/bin/env node\nconsole.log(1)"),
            interp("/usr/bin/env", Some("node"))
        );
        assert_eq!(
            parse_shebang(b"#!/usr/bin/env -S node --no-warnings\n"),
            interp("/usr/bin/env", Some("node"))
        );
        assert_eq!(
            parse_shebang(b"#!/usr/bin/env  node \t\n"),
            interp("/usr/bin/env", Some("node"))
        );
        for bad in [
            &b"#!\n"[..],
            b"#!node\n",
            b"#!/usr/bin/env\n",
            b"#!/usr/bin/env -i node\n",
            b"#!/usr/bin/env FOO=1 node\n",
            b"#!/usr/bin/env ./node\n",
            b"#!/usr/bin/env -S\n",
        ] {
            assert_eq!(parse_shebang(bad), Shebang::Unfollowable, "{bad:?}");
        }
        let long = [b"#!/bin/".as_slice(), &[b'a'; 300]].concat();
        assert_eq!(parse_shebang(&long[..SHEBANG_BYTES]), Shebang::Unfollowable);
    }

    #[test]
    fn search_list_is_the_configured_folder_then_the_fixed_ones() {
        let fixed: Vec<PathBuf> = FIXED_SEARCH_FOLDERS.iter().map(PathBuf::from).collect();
        assert_eq!(
            search_folders(Path::new("/opt/x/bin/claude"), &fixed),
            vec![
                PathBuf::from("/opt/x/bin"),
                PathBuf::from("/usr/bin"),
                PathBuf::from("/bin")
            ]
        );
    }

    #[test]
    fn env_finds_the_interpreter_in_the_search_list_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        let bin = base.join("bin");
        std::fs::create_dir(&bin).expect("mkdir");
        let claude = bin.join("claude");
        std::fs::write(&claude, b"#!/usr/bin/env bothy-test-interp\n").expect("write");
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let fixed = vec![base.join("fixed")];
        let check = check_program(&claude, &search_folders(&claude, &fixed));
        assert!(
            !check.usable,
            "no interpreter in the search list: counts as empty"
        );
        assert!(!check.unfollowable);
        assert_eq!(check.program(), None);
        let interp = bin.join("bothy-test-interp");
        std::fs::write(&interp, b"\x7fELF").expect("write");
        std::fs::set_permissions(&interp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let check = check_program(&claude, &search_folders(&claude, &fixed));
        assert!(check.usable);
        assert_eq!(check.program(), Some(claude.as_path()));
        assert_eq!(check.interpreters.len(), 2, "env and what it finds");
        assert_eq!(check.interpreters[1].resolved(), Some(interp.as_path()));
        assert_eq!(
            check.search_path(),
            vec![bin.clone()],
            "missing folders drop out"
        );
        let missing = check_program(&bin.join("nope"), &fixed);
        assert!(!missing.usable);
        assert!(missing.file.folders.iter().any(|f| f.path == bin));
    }
}
