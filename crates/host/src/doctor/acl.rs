//! POSIX access ACLs under Linux (2.2 item 6, "Writable": "under Linux also from
//! the ACL"): the extended attribute `system.posix_acl_access` read with
//! `lgetxattr` (rustix) and decoded from the kernel's own format
//! (`include/uapi/linux/posix_acl_xattr.h`): a little-endian header `u32`
//! version 2, then entries of `u16` tag, `u16` permission bits, `u32` ID.
//!
//! No libacl: the format is fixed kernel ABI and eight bytes per entry, and a
//! decoder of our own is fuzzed with the rest of the doctor's wire
//! (`docs/decisions.md` D-151).

use std::io;
use std::path::Path;

/// The name of the attribute that holds the access ACL.
pub const ACCESS_ACL_XATTR: &str = "system.posix_acl_access";

/// `POSIX_ACL_XATTR_VERSION`.
const VERSION: u32 = 2;
/// Header and entry sizes of the xattr format.
const HEADER: usize = 4;
const ENTRY: usize = 8;
/// Longest attribute read (ext4 keeps all xattrs of an inode in one block).
const MAX_XATTR: usize = 64 * 1024;

/// Why an ACL attribute was refused. Carries no bytes of the attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// Not a header plus whole entries, or no entry at all.
    #[error("ACL attribute of the wrong length")]
    Length,
    /// A version other than 2.
    #[error("ACL attribute of an unknown version")]
    Version,
    /// A tag the kernel does not define.
    #[error("ACL entry with an unknown tag")]
    Tag,
    /// Permission bits outside rwx.
    #[error("ACL entry with unknown permission bits")]
    Permission,
}

/// The tag of an ACL entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// `ACL_USER_OBJ`: the owner.
    UserObj,
    /// `ACL_USER`: a named user.
    User,
    /// `ACL_GROUP_OBJ`: the owning group.
    GroupObj,
    /// `ACL_GROUP`: a named group.
    Group,
    /// `ACL_MASK`: the upper bound of the group class.
    Mask,
    /// `ACL_OTHER`: everyone else.
    Other,
}

impl Tag {
    const fn code(self) -> u16 {
        match self {
            Tag::UserObj => 0x01,
            Tag::User => 0x02,
            Tag::GroupObj => 0x04,
            Tag::Group => 0x08,
            Tag::Mask => 0x10,
            Tag::Other => 0x20,
        }
    }

    fn from_code(code: u16) -> Result<Tag, AclError> {
        Ok(match code {
            0x01 => Tag::UserObj,
            0x02 => Tag::User,
            0x04 => Tag::GroupObj,
            0x08 => Tag::Group,
            0x10 => Tag::Mask,
            0x20 => Tag::Other,
            _ => return Err(AclError::Tag),
        })
    }
}

/// One entry: tag, permission bits (r = 4, w = 2, x = 1) and the user or group
/// ID of a named entry (`u32::MAX` for the others, as the kernel writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    /// The tag.
    pub tag: Tag,
    /// rwx bits.
    pub perm: u8,
    /// The ID of a named user or group.
    pub id: u32,
}

/// A decoded access ACL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acl {
    /// The entries in the order of the attribute.
    pub entries: Vec<AclEntry>,
}

impl Acl {
    /// Decodes the attribute value.
    pub fn decode(bytes: &[u8]) -> Result<Acl, AclError> {
        if bytes.len() < HEADER + ENTRY || (bytes.len() - HEADER) % ENTRY != 0 {
            return Err(AclError::Length);
        }
        let (header, body) = bytes.split_at(HEADER);
        if u32::from_le_bytes([header[0], header[1], header[2], header[3]]) != VERSION {
            return Err(AclError::Version);
        }
        let entries = body
            .chunks_exact(ENTRY)
            .map(|e| {
                let tag = Tag::from_code(u16::from_le_bytes([e[0], e[1]]))?;
                let perm = u16::from_le_bytes([e[2], e[3]]);
                let perm = u8::try_from(perm)
                    .ok()
                    .filter(|p| p & !0o7 == 0)
                    .ok_or(AclError::Permission)?;
                let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
                Ok(AclEntry { tag, perm, id })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Acl { entries })
    }

    /// The attribute value of this ACL (what `setfacl` would write).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + ENTRY * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.tag.code().to_le_bytes());
            out.extend_from_slice(&u16::from(e.perm).to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// The mask entry's bits, if the ACL has one.
    pub fn mask(&self) -> Option<u8> {
        self.entries
            .iter()
            .find(|e| e.tag == Tag::Mask)
            .map(|e| e.perm)
    }
}

/// The ACL of an entry as it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclState {
    /// No extended ACL: the mode says everything.
    Absent,
    /// An extended ACL.
    Present(Acl),
    /// The attribute could not be read or decoded: counts as granting
    /// everything (fail closed).
    Unknown,
}

/// Reads the access ACL of `path` without following a final link.
pub fn read(path: &Path) -> AclState {
    let mut buffer = vec![0u8; 512];
    loop {
        match rustix::fs::lgetxattr(path, ACCESS_ACL_XATTR, &mut buffer[..]) {
            Ok(len) => {
                return match Acl::decode(&buffer[..len]) {
                    Ok(acl) => AclState::Present(acl),
                    Err(_) => AclState::Unknown,
                };
            }
            Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::NOTSUP => {
                return AclState::Absent;
            }
            Err(e) if e == rustix::io::Errno::RANGE && buffer.len() < MAX_XATTR => {
                buffer.resize(buffer.len() * 4, 0);
            }
            Err(_) => return AclState::Unknown,
        }
    }
}

/// Writes `acl` as the access ACL of `path` (tests and the fuzz property build
/// ACLs with it; the kernel checks the entries).
pub fn write(path: &Path, acl: &Acl) -> io::Result<()> {
    rustix::fs::setxattr(
        path,
        ACCESS_ACL_XATTR,
        &acl.encode(),
        rustix::fs::XattrFlags::empty(),
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: Tag, perm: u8, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    #[test]
    fn decodes_the_kernel_format() {
        // user::rw- user:1001:r-- group::r-- mask::r-- other::---
        let mut bytes = vec![2, 0, 0, 0];
        for (tag, perm, id) in [
            (0x01u16, 6u16, u32::MAX),
            (0x02, 4, 1001),
            (0x04, 4, u32::MAX),
            (0x10, 4, u32::MAX),
            (0x20, 0, u32::MAX),
        ] {
            bytes.extend_from_slice(&tag.to_le_bytes());
            bytes.extend_from_slice(&perm.to_le_bytes());
            bytes.extend_from_slice(&id.to_le_bytes());
        }
        let acl = Acl::decode(&bytes).expect("valid");
        assert_eq!(acl.entries.len(), 5);
        assert_eq!(acl.entries[1], entry(Tag::User, 4, 1001));
        assert_eq!(acl.mask(), Some(4));
        assert_eq!(acl.encode(), bytes);
    }

    #[test]
    fn refusals() {
        assert_eq!(Acl::decode(&[]), Err(AclError::Length));
        assert_eq!(Acl::decode(&[2, 0, 0, 0]), Err(AclError::Length));
        assert_eq!(
            Acl::decode(&[2, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0]),
            Err(AclError::Length)
        );
        assert_eq!(
            Acl::decode(&[1, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0]),
            Err(AclError::Version)
        );
        assert_eq!(
            Acl::decode(&[2, 0, 0, 0, 3, 0, 6, 0, 0, 0, 0, 0]),
            Err(AclError::Tag)
        );
        assert_eq!(
            Acl::decode(&[2, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0]),
            Err(AclError::Permission)
        );
        assert_eq!(
            Acl::decode(&[2, 0, 0, 0, 1, 0, 6, 1, 0, 0, 0, 0]),
            Err(AclError::Permission)
        );
    }

    #[test]
    fn a_file_without_acl_is_absent_and_a_written_acl_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").expect("write");
        assert_eq!(read(&file), AclState::Absent);
        let acl = Acl {
            entries: vec![
                entry(Tag::UserObj, 6, u32::MAX),
                entry(Tag::User, 2, 4242),
                entry(Tag::GroupObj, 4, u32::MAX),
                entry(Tag::Mask, 6, u32::MAX),
                entry(Tag::Other, 0, u32::MAX),
            ],
        };
        write(&file, &acl).expect("the file system keeps ACLs");
        assert_eq!(read(&file), AclState::Present(acl));
        assert_eq!(read(&dir.path().join("missing")), AclState::Unknown);
    }
}
