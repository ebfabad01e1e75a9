//! HD11 at the locations of one session user, in its PTY helper (2.2 item 6,
//! table of checks, "Check of the entries"): the home, the CLAUDE_CONFIG_DIR of
//! the profile claude with organization (the fixed folder in the home; with
//! personal the home covers it, 7.4) and the working directories after HD7.
//!
//! * Locations: each resolved as the session user ([`terms::resolve`]) and judged
//!   by [`terms::location_violation`]. A location that does not resolve is not
//!   present — except the home, which then gives `home_unresolvable`.
//! * The check of the entries: every entry of every location, with no link
//!   followed, must not belong to another session user. A folder that cannot be
//!   read counts as a finding (what was not seen was not checked); the run ends
//!   at `host_service.entry_scan_timeout` with `entry_scan_timeout`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::terms::{self, Account, FileId, Resolution};
use super::wire::{Hd11Observation, ScanResult};

/// The fixed CLAUDE_CONFIG_DIR of the profile claude with organization, below
/// the home (7.4).
pub const ORGANIZATION_CONFIG_DIR: &str = ".config/bothy-host/claude";

/// The organization CLAUDE_CONFIG_DIR of a home.
pub fn organization_config_dir(home: &Path) -> PathBuf {
    home.join(ORGANIZATION_CONFIG_DIR)
}

/// The locations of a session user other than its home, resolved; those that do
/// not resolve are left out (not present).
#[derive(Debug, Clone)]
pub struct Locations {
    /// The home.
    pub home: Resolution,
    /// The other locations that resolve.
    pub others: Vec<Resolution>,
}

impl Locations {
    /// Resolves `home` and `others` as this process's user.
    pub fn resolve(home: &Path, others: &[PathBuf]) -> Locations {
        Locations {
            home: terms::resolve(home),
            others: others
                .iter()
                .map(|p| terms::resolve(p))
                .filter(Resolution::present)
                .collect(),
        }
    }

    /// The resolved roots of every present location.
    pub fn roots(&self) -> Vec<PathBuf> {
        std::iter::once(&self.home)
            .chain(&self.others)
            .filter_map(|r| r.resolved().map(Path::to_owned))
            .collect()
    }
}

/// HD11 without the check of the entries, as `me` against `others`.
pub fn check_locations(
    locations: &Locations,
    me: &Account,
    others: &[Account],
    deadline: Instant,
) -> Hd11Observation {
    let home_unresolvable = !locations.home.present();
    let shared_location = std::iter::once(&locations.home)
        .chain(&locations.others)
        .filter(|r| r.present())
        .any(|r| terms::location_violation(r, me, others, deadline).unwrap_or(true));
    Hd11Observation {
        home_unresolvable,
        shared_location,
    }
}

/// The check of the entries below `roots` (each already a resolved folder).
pub fn scan_entries(
    roots: &[PathBuf],
    me: &Account,
    others: &[Account],
    deadline: Instant,
) -> ScanResult {
    let foreign: HashSet<u32> = others
        .iter()
        .map(|o| o.uid)
        .filter(|uid| *uid != me.uid)
        .collect();
    let mut seen: HashSet<FileId> = HashSet::new();
    let mut stack: Vec<PathBuf> = Vec::new();
    for root in roots {
        match std::fs::symlink_metadata(root) {
            Ok(m) if m.is_dir() => {
                if seen.insert(FileId {
                    dev: m.dev(),
                    ino: m.ino(),
                }) {
                    stack.push(root.clone());
                }
            }
            Ok(_) => {}
            Err(_) => return ScanResult::ForeignEntry,
        }
    }
    let mut finding = false;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            finding = true;
            continue;
        };
        for entry in entries {
            if Instant::now() >= deadline {
                return ScanResult::Timeout;
            }
            let Ok(entry) = entry else {
                finding = true;
                continue;
            };
            let Ok(metadata) = entry.metadata() else {
                finding = true;
                continue;
            };
            if foreign.contains(&metadata.uid()) {
                finding = true;
            }
            if metadata.is_dir()
                && seen.insert(FileId {
                    dev: metadata.dev(),
                    ino: metadata.ino(),
                })
            {
                stack.push(entry.path());
            }
        }
    }
    if finding {
        ScanResult::ForeignEntry
    } else {
        ScanResult::Clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn entries_of_another_user_are_found_and_a_deadline_aborts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::write(root.join("a/b/f"), b"x").expect("write");
        let me = Account {
            uid: 0,
            gids: vec![0],
        };
        let other = Account {
            uid: 4_000_123,
            gids: vec![4_000_123],
        };
        let later = Instant::now() + Duration::from_secs(60);
        let roots = [root.clone()];
        assert_eq!(
            scan_entries(&roots, &me, std::slice::from_ref(&other), later),
            ScanResult::Clean
        );
        nix::unistd::chown(
            &root.join("a/b/f"),
            Some(nix::unistd::Uid::from_raw(other.uid)),
            None,
        )
        .expect("chown");
        assert_eq!(
            scan_entries(&roots, &me, std::slice::from_ref(&other), later),
            ScanResult::ForeignEntry
        );
        assert_eq!(
            scan_entries(&roots, &me, &[other], Instant::now()),
            ScanResult::Timeout
        );
    }
}
