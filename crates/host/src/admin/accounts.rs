//! The accounts of `bothy-host install` and `bothy-host session-user add`
//! (2.2: users without administrator privileges, HD1, HD2; item 4: closed
//! homes). Accounts are made with `useradd` of the shadow suite, the tool every
//! Linux distribution has (D-192).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::doctor::accounts::{self, UserEntry};

use super::units::Change;

/// Where `useradd` may be, tried in order.
const USERADD: [&str; 2] = ["/usr/sbin/useradd", "/sbin/useradd"];
/// Where `gpasswd` may be, tried in order.
const GPASSWD: [&str; 3] = ["/usr/bin/gpasswd", "/usr/sbin/gpasswd", "/bin/gpasswd"];
/// The login shell of a new session user when it exists (else `useradd`'s default).
const SESSION_SHELL: &str = "/bin/bash";
/// The shell of the service user: it never logs in.
const NOLOGIN: [&str; 2] = ["/usr/sbin/nologin", "/sbin/nologin"];

/// Names that are root-level accounts (HD1), compared without case.
const PRIVILEGED_NAMES: [&str; 3] = ["root", "Administrator", "SYSTEM"];

/// Why an account is refused or could not be made. The messages name the
/// account: they go to the operator's terminal only, never to a log.
pub type AccountError = String;

/// Whether `name` may name an account of the host service: the session user
/// pattern, and none of the root-level names.
pub fn check_name(name: &str) -> Result<(), AccountError> {
    if !accounts::valid_session_user_name(name) {
        return Err(format!(
            "{name:?} is not a valid user name (a letter or _, then letters, digits, _ . -; at most {} characters)",
            accounts::MAX_NAME_CHARS
        ));
    }
    if PRIVILEGED_NAMES
        .iter()
        .any(|p| p.eq_ignore_ascii_case(name))
    {
        return Err(format!(
            "{name} is an administrator account; the host service runs without administrator privileges (HD1)"
        ));
    }
    Ok(())
}

/// The forbidden groups (HD2) `entry` is in; a group list that cannot be
/// read is refused like the doctor refuses it.
pub fn forbidden_groups(entry: &UserEntry, extra: &[String]) -> Result<Vec<String>, AccountError> {
    entry.forbidden_groups(extra).ok_or_else(|| {
        format!(
            "the groups of {} cannot be read, so HD2 would refuse the start",
            entry.name
        )
    })
}

/// Refuses an existing account that HD1 or HD2 would refuse.
pub fn check_existing(entry: &UserEntry, extra: &[String]) -> Result<(), AccountError> {
    if entry.uid == 0 {
        return Err(format!(
            "{} has user ID 0; the host service runs without administrator privileges (HD1)",
            entry.name
        ));
    }
    let groups = forbidden_groups(entry, extra)?;
    if !groups.is_empty() {
        return Err(format!(
            "{} is in the forbidden group(s) {} (HD2); take it out (gpasswd -d {} GROUP) or choose another name",
            entry.name,
            groups.join(", "),
            entry.name
        ));
    }
    Ok(())
}

fn first_existing(candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| p.is_file())
}

fn run(program: &Path, args: &[&str]) -> Result<(), AccountError> {
    let output = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .map_err(|e| format!("{} could not run: {e}", program.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} failed ({}): {}",
            program.display(),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn lookup(name: &str) -> Result<Option<UserEntry>, AccountError> {
    UserEntry::lookup(name).map_err(|e| format!("the user database cannot be read: {e}"))
}

/// Takes a just created account out of the forbidden groups a default of
/// `useradd` (`/etc/default/useradd` `GROUPS=`) put it in.
fn leave_forbidden_groups(entry: &UserEntry, extra: &[String]) -> Result<(), AccountError> {
    let groups = forbidden_groups(entry, extra)?;
    if groups.is_empty() {
        return Ok(());
    }
    let gpasswd = first_existing(&GPASSWD).ok_or_else(|| {
        format!(
            "{} was put in {} by useradd, and no gpasswd takes it out",
            entry.name,
            groups.join(", ")
        )
    })?;
    for group in &groups {
        run(&gpasswd, &["-d", &entry.name, group])?;
    }
    let again = forbidden_groups(entry, extra)?;
    if again.is_empty() {
        Ok(())
    } else {
        Err(format!("{} is still in {}", entry.name, again.join(", ")))
    }
}

/// The service user: a system account with its own group, `home` as its home
/// (not created here), no login shell. An existing one is checked.
pub fn ensure_service_user(
    name: &str,
    home: &Path,
    extra: &[String],
) -> Result<(UserEntry, Change), AccountError> {
    ensure_account(name, extra, || {
        let shell = first_existing(&NOLOGIN).unwrap_or_else(|| PathBuf::from("/bin/false"));
        let home = home.to_str().ok_or("the state directory is not UTF-8")?;
        let shell = shell.to_str().unwrap_or("/bin/false");
        Ok([
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            home,
            "--shell",
            shell,
        ]
        .map(str::to_owned)
        .to_vec())
    })
}

/// A session user: an account with its own group and a home of mode 0700.
/// An existing one is checked (HD1, HD2) and left as it is.
pub fn ensure_session_user(
    name: &str,
    extra: &[String],
) -> Result<(UserEntry, Change), AccountError> {
    let (entry, change) = ensure_account(name, extra, || {
        let mut args = vec!["--create-home", "--user-group"];
        if Path::new(SESSION_SHELL).is_file() {
            args.extend(["--shell", SESSION_SHELL]);
        }
        Ok(args.into_iter().map(str::to_owned).collect())
    })?;
    if change == Change::Created {
        close_home(&entry.home).map_err(|e| format!("the home of {name} cannot be closed: {e}"))?;
    }
    Ok((entry, change))
}

/// The account `name`: an existing one checked (HD1, HD2) and left as it is;
/// else made by `useradd ARGS name` with the `args` of `options` (asked only
/// then), taken out of the forbidden groups `useradd` put it in, and checked.
fn ensure_account(
    name: &str,
    extra: &[String],
    options: impl FnOnce() -> Result<Vec<String>, AccountError>,
) -> Result<(UserEntry, Change), AccountError> {
    if let Some(entry) = lookup(name)? {
        check_existing(&entry, extra)?;
        return Ok((entry, Change::Unchanged));
    }
    let useradd = first_existing(&USERADD).ok_or("useradd was not found (package passwd)")?;
    let mut args = options()?;
    args.push(name.to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&useradd, &args)?;
    let entry = lookup(name)?.ok_or_else(|| format!("useradd made no account {name}"))?;
    leave_forbidden_groups(&entry, extra)?;
    check_existing(&entry, extra)?;
    Ok((entry, Change::Created))
}

/// The ACL of access of a file (the extended entries; the mode keeps the rest).
const ACL_ACCESS: &str = "system.posix_acl_access";

/// Closes the home at `home` for every other user (2.2 item 4): no permission
/// for group and others in the mode, and no ACL of access (named users and
/// groups). `Unchanged` when it was closed already; a missing home is
/// `Unchanged` too (there is nothing to open).
pub fn close_home(home: &Path) -> std::io::Result<Change> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    match std::fs::metadata(home) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Change::Unchanged),
        Err(e) => return Err(e),
    }
    let mut changed = false;
    // The kernel answers a removal of an absent ACL with success: look first.
    match rustix::fs::getxattr(home, ACL_ACCESS, &mut [0u8; 0][..]) {
        Ok(_) => {
            rustix::fs::removexattr(home, ACL_ACCESS)?;
            changed = true;
        }
        Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::NOTSUP => {}
        Err(e) => return Err(e.into()),
    }
    // Removing the ACL leaves the mask in the group bits; read the mode again.
    let mode = std::fs::metadata(home)?.mode() & 0o7777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(home, std::fs::Permissions::from_mode(mode & !0o077))?;
        changed = true;
    }
    Ok(Change::updated_if(changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_hd1_would_refuse_are_refused() {
        for bad in [
            "",
            "1abc",
            "a b",
            "root",
            "ROOT",
            "Administrator",
            "system",
            "ab:c",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        for good in ["alice", "_svc", "a.b-c_d", "bothy-host"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        assert!(check_name(&"a".repeat(33)).is_err());
    }
}
