//! The four terms of 2.2 item 6 as one implementation for HD7, HD10 and HD11
//! (and the ACL rule of HD8): path resolution, "writable", trusted owner and the
//! chain files. The drive root is a Windows term; under Linux it never applies.
//!
//! # Path resolution
//! [`resolve`] walks a path like `realpath(3)`, as the user of the calling
//! process, component by component, and records what the checks look at:
//! every folder it passed through (also one left again through `..` or a link:
//! every component "as it is written"), every link it followed as an entry of
//! the folder it lies in (its own `lstat`), and the entry it ends at. What cannot
//! be resolved (missing, a link that points nowhere, a folder closed to this
//! user, a loop) is not present: [`Resolution::target`] is `None`, and the
//! nodes passed before stay recorded, so HD10 can still judge the folders of a
//! missing program.
//!
//! # Writable and readable
//! [`permits`] says whether an account has a permission on a node, judged the
//! way 2.2 item 6 lists it: the owner (who can change the mode, so has every
//! permission), a named ACL user, the owning group or a named ACL group the
//! account is in (both limited by the ACL mask as the kernel limits them), or
//! others. Any one of these classes that grants the bit counts, even where the
//! kernel would stop at an earlier class that does not: "one permission too
//! many in the list only blocks" (2.2 item 6; `docs/decisions.md` D-152). An ACL
//! that cannot be read counts as granting everything.
//!
//! # Trusted owner
//! Under Linux root (user ID 0).

use std::ffi::OsString;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

use super::acl::{self, AclState, Tag};

/// The trusted owner under Linux and macOS: root.
pub const TRUSTED_OWNER_UID: u32 = 0;

/// The chain files (2.2 item 6): what the coding agent or git load from the
/// folders above a working directory. `.claude` and `.git` count with
/// everything in them.
pub const CHAIN_FILES: [&str; 6] = [
    "CLAUDE.md",
    "CLAUDE.local.md",
    "AGENTS.md",
    ".mcp.json",
    ".claude",
    ".git",
];

/// Links followed in one resolution before it counts as a loop (Linux's
/// `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Permission bits as in a mode's class: read.
pub const READ: u8 = 4;
/// Write.
pub const WRITE: u8 = 2;
/// Execute, or search for a folder.
pub const EXEC: u8 = 1;

/// An account as the checks see it: user ID and every group ID (primary and
/// supplementary, from the group database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The user ID.
    pub uid: u32,
    /// Every group ID of the account.
    pub gids: Vec<u32>,
}

/// The identity of a file in the file system: device and inode (2.2 item 6,
/// HD7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// What kind of entry a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A folder.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (its own entry, never its target).
    Link,
    /// Anything else (socket, device, pipe).
    Other,
}

/// One entry the checks judge: where it lies and what `lstat` and the ACL said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The path of the entry (its folder resolved, its own name as found).
    pub path: PathBuf,
    /// The kind.
    pub kind: NodeKind,
    /// Owner.
    pub uid: u32,
    /// Owning group.
    pub gid: u32,
    /// The mode bits.
    pub mode: u32,
    /// Device and inode.
    pub id: FileId,
    /// The ACL (never read for a link).
    pub acl: AclState,
}

impl Node {
    /// `lstat` of `path` plus its ACL.
    pub fn lstat(path: &Path) -> io::Result<Node> {
        let metadata = std::fs::symlink_metadata(path)?;
        Ok(Node::from_metadata(path, &metadata))
    }

    /// A node from metadata already read with `lstat`.
    pub fn from_metadata(path: &Path, metadata: &Metadata) -> Node {
        let file_type = metadata.file_type();
        let kind = if file_type.is_symlink() {
            NodeKind::Link
        } else if file_type.is_dir() {
            NodeKind::Dir
        } else if file_type.is_file() {
            NodeKind::File
        } else {
            NodeKind::Other
        };
        let acl = if kind == NodeKind::Link {
            AclState::Absent
        } else {
            acl::read(path)
        };
        Node {
            path: path.to_owned(),
            kind,
            uid: metadata.uid(),
            gid: metadata.gid(),
            mode: metadata.mode(),
            id: FileId {
                dev: metadata.dev(),
                ino: metadata.ino(),
            },
            acl,
        }
    }

    /// Whether a socket (the Docker daemon's).
    pub fn is_socket(metadata: &Metadata) -> bool {
        metadata.file_type().is_socket()
    }
}

/// What [`resolve`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The path as written.
    pub written: PathBuf,
    /// Every folder passed through, in order, each once.
    pub folders: Vec<Node>,
    /// Every link followed (its own entry), in order.
    pub links: Vec<Node>,
    /// The entry the path resolves to; `None` when it cannot be resolved.
    pub target: Option<Node>,
}

impl Resolution {
    /// Whether the path resolves.
    pub fn present(&self) -> bool {
        self.target.is_some()
    }

    /// The resolved path.
    pub fn resolved(&self) -> Option<&Path> {
        self.target.as_ref().map(|t| t.path.as_path())
    }

    /// The folders of the resolved chain above the target (`/` first).
    pub fn chain(&self) -> Vec<&Node> {
        let Some(target) = &self.target else {
            return Vec::new();
        };
        let mut chain: Vec<&Node> = target
            .path
            .ancestors()
            .skip(1)
            .filter_map(|a| self.folders.iter().find(|f| f.path == a))
            .collect();
        chain.reverse();
        chain
    }

    /// Every node of the resolution except the target: the folders passed and
    /// the links followed.
    pub fn path_nodes(&self) -> impl Iterator<Item = &Node> {
        let target = self.target.as_ref().map(|t| t.path.as_path());
        self.folders
            .iter()
            .filter(move |f| Some(f.path.as_path()) != target)
            .chain(self.links.iter())
    }

    /// Every node: [`Resolution::path_nodes`] and the target.
    pub fn all_nodes(&self) -> impl Iterator<Item = &Node> {
        self.path_nodes().chain(self.target.iter())
    }
}

/// Resolves `path` as the user of this process (module docs). A relative path
/// is not present: every configured path is absolute.
pub fn resolve(path: &Path) -> Resolution {
    let mut out = Resolution {
        written: path.to_owned(),
        folders: Vec::new(),
        links: Vec::new(),
        target: None,
    };
    if !path.is_absolute() {
        return out;
    }
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, path);
    let mut current = PathBuf::from("/");
    let Ok(root) = Node::lstat(&current) else {
        return out;
    };
    record_folder(&mut out, root.clone());
    let mut last = root;
    let mut links = 0usize;
    // `pending` is a stack: the next component is at the end.
    while let Some(component) = pending.pop() {
        if component == "." || component.is_empty() {
            continue;
        }
        if component == ".." {
            current.pop();
            match out.folders.iter().find(|f| f.path == current) {
                Some(folder) => last = folder.clone(),
                None => match Node::lstat(&current) {
                    Ok(node) => {
                        record_folder(&mut out, node.clone());
                        last = node;
                    }
                    Err(_) => return out,
                },
            }
            continue;
        }
        if last.kind != NodeKind::Dir {
            // A component after a file: ENOTDIR.
            return out;
        }
        let candidate = current.join(&component);
        let Ok(node) = Node::lstat(&candidate) else {
            return out;
        };
        match node.kind {
            NodeKind::Link => {
                links += 1;
                if links > MAX_LINKS {
                    return out;
                }
                let Ok(target) = std::fs::read_link(&candidate) else {
                    return out;
                };
                out.links.push(node);
                if target.is_absolute() {
                    current = PathBuf::from("/");
                    last = match out.folders.first() {
                        Some(root) => root.clone(),
                        None => return out,
                    };
                }
                push_components(&mut pending, &target);
            }
            NodeKind::Dir => {
                current = candidate;
                record_folder(&mut out, node.clone());
                last = node;
            }
            NodeKind::File | NodeKind::Other => {
                current = candidate;
                last = node;
            }
        }
    }
    out.target = Some(last);
    out
}

fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

fn record_folder(out: &mut Resolution, node: Node) {
    if !out.folders.iter().any(|f| f.path == node.path) {
        out.folders.push(node);
    }
}

/// Whether `who` has any of the permission bits `want` on `node` (module docs).
/// A link's own mode means nothing: for a link only ownership counts.
pub fn permits(node: &Node, who: &Account, want: u8) -> bool {
    if node.uid == who.uid {
        return true;
    }
    if node.kind == NodeKind::Link {
        return false;
    }
    let in_group = |gid: u32| who.gids.contains(&gid);
    let mode_class = |shift: u32| ((node.mode >> shift) & 0o7) as u8;
    match &node.acl {
        AclState::Unknown => true,
        AclState::Absent => {
            (in_group(node.gid) && mode_class(3) & want != 0) || mode_class(0) & want != 0
        }
        AclState::Present(acl) => {
            let mask = acl.mask().unwrap_or(0o7);
            acl.entries.iter().any(|e| {
                let applies = match e.tag {
                    Tag::UserObj | Tag::Mask => false,
                    Tag::User => e.id == who.uid,
                    Tag::GroupObj => in_group(node.gid),
                    Tag::Group => in_group(e.id),
                    Tag::Other => true,
                };
                let effective = match e.tag {
                    Tag::User | Tag::GroupObj | Tag::Group => e.perm & mask,
                    _ => e.perm,
                };
                applies && effective & want != 0
            }) || mode_class(0) & want != 0
        }
    }
}

/// Whether any of `accounts` may write `node` (2.2 item 6, "Writable").
pub fn writable_by_any(node: &Node, accounts: &[Account]) -> bool {
    accounts.iter().any(|a| permits(node, a, WRITE))
}

/// Whether `node` belongs to the trusted owner.
pub fn trusted_owner(node: &Node) -> bool {
    node.uid == TRUSTED_OWNER_UID
}

/// The rule of a location for all (2.2 item 6, HD10, HD11): every node of the
/// resolution — the folders on the way, every link followed and the target —
/// belongs to the trusted owner and is writable by none of `session_users`.
/// A path that cannot be resolved is judged on what was passed.
pub fn trusted_for_all(resolution: &Resolution, session_users: &[Account]) -> bool {
    resolution
        .all_nodes()
        .all(|n| trusted_owner(n) && !writable_by_any(n, session_users))
}

/// The check of a location stopped at its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlinePassed;

/// The rule of a location of a session user (2.2 item 6, HD11), judged by its
/// PTY helper as `me` against `others` (the other session users): every node on
/// the way (folders passed, links followed) belongs to no other and is writable
/// by no other; the chain files in every folder of the resolved chain above the
/// location belong to no other and are writable by no other (`.claude` and
/// `.git` with everything in them; a link counts as an entry and as its
/// target); the location belongs to `me` or the trusted owner and gives no
/// other any permission. `Ok(true)` is a violation. The location must resolve;
/// the caller decides what a missing one means.
pub fn location_violation(
    resolution: &Resolution,
    me: &Account,
    others: &[Account],
    deadline: Instant,
) -> Result<bool, DeadlinePassed> {
    let Some(target) = &resolution.target else {
        return Ok(false);
    };
    let other_uid = |uid: u32| uid != me.uid && others.iter().any(|o| o.uid == uid);
    let foreign =
        |n: &Node| other_uid(n.uid) || (n.kind != NodeKind::Link && writable_by_any(n, others));
    if resolution.path_nodes().any(foreign) {
        return Ok(true);
    }
    if !(target.uid == me.uid || trusted_owner(target))
        || others
            .iter()
            .any(|o| permits(target, o, READ | WRITE | EXEC))
    {
        return Ok(true);
    }
    for folder in resolution.chain() {
        for name in CHAIN_FILES {
            if chain_entry_violation(&folder.path.join(name), me, others, deadline, 0)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// How deep links inside chain files are followed into further links.
const MAX_CHAIN_LINK_DEPTH: usize = 8;

/// A chain file (or an entry inside `.claude` / `.git`): absent is fine; else it
/// and, for a link, its whole resolution, and for a folder everything in it,
/// belong to no other and are writable by no other. A link that points nowhere
/// is a violation: another can create its target later (2.2 item 6).
fn chain_entry_violation(
    path: &Path,
    me: &Account,
    others: &[Account],
    deadline: Instant,
    depth: usize,
) -> Result<bool, DeadlinePassed> {
    if Instant::now() >= deadline {
        return Err(DeadlinePassed);
    }
    let node = match Node::lstat(path) {
        Ok(node) => node,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        // Present but not judgeable (e.g. a folder closed to `me` above it
        // would not have resolved; this is an I/O error on an existing name).
        Err(_) => return Ok(true),
    };
    let other_uid = |uid: u32| uid != me.uid && others.iter().any(|o| o.uid == uid);
    let foreign =
        |n: &Node| other_uid(n.uid) || (n.kind != NodeKind::Link && writable_by_any(n, others));
    if foreign(&node) {
        return Ok(true);
    }
    match node.kind {
        NodeKind::Link => {
            if depth >= MAX_CHAIN_LINK_DEPTH {
                return Ok(true);
            }
            let resolution = resolve(path);
            let Some(target) = &resolution.target else {
                return Ok(true);
            };
            if resolution.all_nodes().any(foreign) {
                return Ok(true);
            }
            if target.kind == NodeKind::Dir {
                return tree_violation(&target.path, me, others, deadline, depth + 1);
            }
            Ok(false)
        }
        NodeKind::Dir => tree_violation(path, me, others, deadline, depth),
        NodeKind::File | NodeKind::Other => Ok(false),
    }
}

/// Everything inside the folder `dir` (already judged itself): each entry by
/// [`chain_entry_violation`]. A folder that cannot be listed counts as a
/// violation: what was not seen was not checked.
fn tree_violation(
    dir: &Path,
    me: &Account,
    others: &[Account],
    deadline: Instant,
    depth: usize,
) -> Result<bool, DeadlinePassed> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(true);
    };
    for entry in entries {
        let Ok(entry) = entry else {
            return Ok(true);
        };
        if chain_entry_violation(&entry.path(), me, others, deadline, depth)? {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    fn node(mode: u32, uid: u32, gid: u32, acl: AclState) -> Node {
        Node {
            path: PathBuf::from("/x"),
            kind: NodeKind::File,
            uid,
            gid,
            mode,
            id: FileId { dev: 1, ino: 1 },
            acl,
        }
    }

    fn who(uid: u32, gids: &[u32]) -> Account {
        Account {
            uid,
            gids: gids.to_vec(),
        }
    }

    #[test]
    fn permits_by_mode_class() {
        let alice = who(1001, &[1001, 50]);
        assert!(permits(
            &node(0o600, 1001, 1001, AclState::Absent),
            &alice,
            WRITE
        ));
        // The owner may change the mode: every permission.
        assert!(permits(
            &node(0o000, 1001, 1001, AclState::Absent),
            &alice,
            WRITE
        ));
        assert!(!permits(
            &node(0o644, 0, 0, AclState::Absent),
            &alice,
            WRITE
        ));
        assert!(permits(
            &node(0o664, 0, 50, AclState::Absent),
            &alice,
            WRITE
        ));
        assert!(!permits(
            &node(0o664, 0, 51, AclState::Absent),
            &alice,
            WRITE
        ));
        assert!(permits(&node(0o646, 0, 0, AclState::Absent), &alice, WRITE));
        // Additive: a group class without w does not hide w of others.
        assert!(permits(
            &node(0o602, 0, 50, AclState::Absent),
            &alice,
            WRITE
        ));
        assert!(permits(&node(0o604, 0, 0, AclState::Absent), &alice, READ));
        assert!(!permits(
            &node(0o700, 0, 0, AclState::Absent),
            &alice,
            READ | WRITE | EXEC
        ));
        assert!(permits(
            &node(0o000, 0, 0, AclState::Unknown),
            &alice,
            WRITE
        ));
    }

    #[test]
    fn permits_by_acl_with_mask() {
        use super::acl::{Acl, AclEntry};
        let e = |tag, perm, id| AclEntry { tag, perm, id };
        let acl = |entries: Vec<AclEntry>| AclState::Present(Acl { entries });
        let alice = who(1001, &[1001, 50]);
        let named_user = acl(vec![
            e(Tag::UserObj, 7, u32::MAX),
            e(Tag::User, 6, 1001),
            e(Tag::GroupObj, 0, u32::MAX),
            e(Tag::Mask, 6, u32::MAX),
            e(Tag::Other, 0, u32::MAX),
        ]);
        assert!(permits(&node(0o760, 0, 0, named_user), &alice, WRITE));
        let masked = acl(vec![
            e(Tag::UserObj, 7, u32::MAX),
            e(Tag::User, 6, 1001),
            e(Tag::GroupObj, 0, u32::MAX),
            e(Tag::Mask, 4, u32::MAX),
            e(Tag::Other, 0, u32::MAX),
        ]);
        let n = node(0o740, 0, 0, masked);
        assert!(!permits(&n, &alice, WRITE));
        assert!(permits(&n, &alice, READ));
        let named_group = acl(vec![
            e(Tag::UserObj, 7, u32::MAX),
            e(Tag::GroupObj, 0, u32::MAX),
            e(Tag::Group, 2, 50),
            e(Tag::Mask, 7, u32::MAX),
            e(Tag::Other, 0, u32::MAX),
        ]);
        assert!(permits(&node(0o770, 0, 0, named_group), &alice, WRITE));
        let other_user = acl(vec![
            e(Tag::UserObj, 7, u32::MAX),
            e(Tag::User, 7, 1002),
            e(Tag::GroupObj, 0, u32::MAX),
            e(Tag::Mask, 7, u32::MAX),
            e(Tag::Other, 0, u32::MAX),
        ]);
        assert!(!permits(
            &node(0o770, 0, 0, other_user),
            &alice,
            READ | WRITE | EXEC
        ));
    }

    #[test]
    fn resolution_records_links_with_their_folders_and_the_written_components() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        let real = base.join("real/work");
        std::fs::create_dir_all(&real).expect("mkdir");
        std::fs::create_dir(base.join("side")).expect("mkdir");
        symlink(base.join("real"), base.join("side/link")).expect("symlink");
        let written = base.join("side/link/../real/./work");
        let r = resolve(&written);
        let target = r.target.as_ref().expect("resolves");
        assert_eq!(target.path, real);
        assert_eq!(target.kind, NodeKind::Dir);
        assert_eq!(r.links.len(), 1);
        assert_eq!(r.links[0].path, base.join("side/link"));
        let folders: Vec<&Path> = r.folders.iter().map(|f| f.path.as_path()).collect();
        assert!(
            folders.contains(&base.join("side").as_path()),
            "{folders:?}"
        );
        let chain: Vec<&Path> = r.chain().iter().map(|f| f.path.as_path()).collect();
        assert_eq!(chain.last(), Some(&base.join("real").as_path()));
        assert!(!chain.contains(&base.join("side").as_path()));
        assert_eq!(chain.first(), Some(&Path::new("/")));
        assert_eq!(r.resolved(), Some(real.as_path()));
        assert_eq!(
            target.id,
            Node::lstat(&real).expect("stat").id,
            "identity by device and inode"
        );
    }

    #[test]
    fn what_cannot_be_resolved_is_not_present() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        symlink(base.join("nowhere"), base.join("dangling")).expect("symlink");
        symlink(base.join("loop"), base.join("loop")).expect("symlink");
        std::fs::write(base.join("file"), b"x").expect("write");
        for path in [
            base.join("missing"),
            base.join("dangling"),
            base.join("loop"),
            base.join("file/below"),
            PathBuf::from("relative/path"),
        ] {
            let r = resolve(&path);
            assert!(!r.present(), "{}", path.display());
        }
        // The folders passed before the failure stay for HD10.
        let r = resolve(&base.join("missing"));
        assert!(r.folders.iter().any(|f| f.path == base));
    }

    #[test]
    fn trusted_for_all_needs_root_and_no_writer() {
        let dir = tempfile::Builder::new()
            .prefix("bothy-terms")
            .tempdir_in("/var/cache/bothy")
            .expect("tempdir");
        chmod(dir.path(), 0o755);
        let program = dir.path().join("prog");
        std::fs::write(&program, b"#!/bin/sh\n").expect("write");
        chmod(&program, 0o755);
        let alice = who(4_000_001, &[4_000_001]);
        assert!(trusted_for_all(
            &resolve(&program),
            std::slice::from_ref(&alice)
        ));
        chmod(&program, 0o757);
        assert!(!trusted_for_all(
            &resolve(&program),
            std::slice::from_ref(&alice)
        ));
        chmod(&program, 0o755);
        chmod(dir.path(), 0o777);
        assert!(!trusted_for_all(
            &resolve(&program),
            std::slice::from_ref(&alice)
        ));
        chmod(dir.path(), 0o755);
        nix::unistd::chown(&program, Some(nix::unistd::Uid::from_raw(4_000_002)), None)
            .expect("chown");
        assert!(!trusted_for_all(&resolve(&program), &[alice]));
    }
}
