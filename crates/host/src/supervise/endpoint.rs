//! The places supervise prepares before a start: the helpers' endpoints
//! (bound by supervise, owned by the service user) and the folders of root
//! they live in.

use super::*;

/// Binds and listens on `path`: owned by the service user, mode 0600, created
/// with umask 0177 so it is never more open than that.
pub(super) fn bind_endpoint(path: &Path, service_user: &User) -> io::Result<OwnedFd> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a folder at the endpoint",
            ));
        }
        Ok(_) => fs::remove_file(path)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let socket = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let address = UnixAddr::new(path)?;
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = bind(std::os::fd::AsRawFd::as_raw_fd(&socket), &address);
    nix::sys::stat::umask(old);
    bound?;
    std::os::unix::fs::lchown(
        path,
        Some(service_user.uid.as_raw()),
        Some(service_user.gid.as_raw()),
    )?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    listen(&socket, Backlog::new(64)?)?;
    Ok(socket)
}

/// Makes `folder` as systemd makes a `RuntimeDirectory=`: anew (whatever was
/// there, also a link, is removed first), owned by `uid`:`gid`, mode 0755.
pub(super) fn runtime_directory(folder: &Path, uid: u32, gid: u32) -> io::Result<()> {
    match fs::symlink_metadata(folder) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(folder)?,
        Ok(_) => fs::remove_file(folder)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    fs::create_dir(folder)?;
    std::os::unix::fs::lchown(folder, Some(uid), Some(gid))?;
    fs::set_permissions(folder, fs::Permissions::from_mode(0o755))
}

/// Creates `folder` if needed and makes it a folder of root with mode 0755;
/// a symbolic link is refused.
pub(super) fn root_folder(folder: &Path) -> io::Result<()> {
    match fs::create_dir(folder) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(folder)?,
        Err(e) => return Err(e),
    }
    let metadata = fs::symlink_metadata(folder)?;
    if !metadata.is_dir() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a folder"));
    }
    if metadata.uid() != 0 || metadata.gid() != 0 {
        std::os::unix::fs::lchown(folder, Some(0), Some(0))?;
    }
    fs::set_permissions(folder, fs::Permissions::from_mode(0o755))
}
