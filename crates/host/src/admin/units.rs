//! The systemd units `bothy-host install` and `bothy-host session-user` write
//! (2.2 "PTY helper" items 1–2, 6.4 "Endpoint", 6.5 "Linux", D-M2-42-14,
//! DESIGN §4; `docs/decisions.md` D-190, D-191).
//!
//! | File | What |
//! |---|---|
//! | `bothy-host.service` | the service: `User=` the service user, `Restart=on-failure`, `RestartPreventExitStatus=78`, `RuntimeDirectory=bothy-host-confirm` |
//! | `bothy-host-helper@<user>.socket` | the channel endpoint `<runtime_dir>/helper/<user>.sock` of one session user's helper: socket activation, the service user's, mode 0600, folders root's with mode 0755 |
//! | `bothy-host-helper@<user>.service` | that helper: `User=<user>`, `Delegate=yes`, `Restart=always`, `RestartSec=1s`, `StartLimitIntervalSec=0`, `RestartPreventExitStatus=78` (its own session user can end it with any signal: it comes back, D-330) |
//! | `multi-user.target.wants/bothy-host.service`, `sockets.target.wants/bothy-host-helper@<user>.socket` | the links `systemctl enable` makes |
//!
//! The endpoint has the form `bothy-host supervise` gives it (D-132): one
//! listening Unix stream socket, passed as descriptor 3 with `LISTEN_FDS=1`,
//! owned by the service user with mode 0600 in a folder of root.
//!
//! No unit sets `NoNewPrivileges=` or any option that sets the flag or mounts
//! file systems `nosuid` ([`FORBIDDEN_DIRECTIVES`]): under `no_new_privs` every
//! `sudo -n true` fails and would hide a sudo rule from HD3, and the helper's
//! shells are the person's own login.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::manager;

/// Where systemd reads the units of the administrator.
pub const DEFAULT_UNIT_DIR: &str = "/etc/systemd/system";

/// The exit code after which neither unit is restarted (D-M2-42-14).
const PREVENT_RESTART: i32 = crate::EXIT_REFUSED_START;

/// Options that set `no_new_privs` (systemd.exec(5) "NoNewPrivileges=": "certain
/// settings override this ... DynamicUser=, LockPersonality=,
/// MemoryDenyWriteExecute=, PrivateDevices=, ProtectClock=, ProtectHostname=,
/// ProtectKernelLogs=, ProtectKernelModules=, ProtectKernelTunables=,
/// RestrictAddressFamilies=, RestrictNamespaces=, RestrictRealtime=,
/// RestrictSUIDSGID=, SystemCallArchitectures=, SystemCallFilter=, or
/// SystemCallLog="), options that give the unit its own mount namespace ("In
/// case the service will be run in a new mount namespace anyway and SELinux is
/// disabled, all file systems are mounted with MS_NOSUID flag") and options that
/// take from root what `sudo` needs (`SecureBits=`, `CapabilityBoundingSet=`).
/// None of them may appear in a unit of ours (D-190).
pub const FORBIDDEN_DIRECTIVES: &[&str] = &[
    "NoNewPrivileges",
    "DynamicUser",
    "LockPersonality",
    "MemoryDenyWriteExecute",
    "PrivateDevices",
    "ProtectClock",
    "ProtectHostname",
    "ProtectKernelLogs",
    "ProtectKernelModules",
    "ProtectKernelTunables",
    "RestrictAddressFamilies",
    "RestrictNamespaces",
    "RestrictRealtime",
    "RestrictSUIDSGID",
    "SystemCallArchitectures",
    "SystemCallFilter",
    "SystemCallLog",
    // A mount namespace mounts everything nosuid.
    "PrivateTmp",
    "PrivateMounts",
    "ProtectSystem",
    "ProtectHome",
    "ProtectProc",
    "ProcSubset",
    "ProtectControlGroups",
    "ReadOnlyPaths",
    "ReadWritePaths",
    "InaccessiblePaths",
    "ExecPaths",
    "NoExecPaths",
    "TemporaryFileSystem",
    "BindPaths",
    "BindReadOnlyPaths",
    "RootDirectory",
    "RootImage",
    "MountAPIVFS",
    // Root without what sudo needs.
    "SecureBits",
    "CapabilityBoundingSet",
];

/// The service unit's file name.
pub const SERVICE_UNIT: &str = manager::SERVICE_UNIT;

/// `bothy-host-helper@<user>.socket`.
pub fn helper_socket(user: &str) -> String {
    format!("bothy-host-helper@{user}.socket")
}

/// `bothy-host-helper@<user>.service` (what [`manager::helper_unit`] asks
/// systemd about).
pub fn helper_service(user: &str) -> String {
    manager::helper_unit(user)
}

/// What the units need to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitInputs {
    /// The `bothy-host` binary the units run (absolute).
    pub binary: PathBuf,
    /// The configuration file the service reads (absolute).
    pub config: PathBuf,
    /// The service user.
    pub service_user: String,
    /// The name of the service user's primary group.
    pub service_group: String,
}

/// Whether `path` can stand in a unit file as it is: absolute, and only
/// characters that need neither quoting nor escaping in `ExecStart=` and
/// `ListenStream=` (no `%` specifier, no space, no quote, no backslash).
pub fn unit_safe_path(path: &Path) -> bool {
    let Some(text) = path.to_str() else {
        return false;
    };
    text.starts_with('/')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '@'))
}

const HEADER: &str = "# Written by `bothy-host install` / `bothy-host session-user`, which rewrite it.\n\
# Local changes belong in a drop-in; never NoNewPrivileges= or an option that\n\
# implies it (spec 24, D-M2-42-14): HD3 must see sudo as the users see it.\n";

/// The text of `bothy-host.service`.
pub fn service_unit(inputs: &UnitInputs) -> String {
    format!(
        "{HEADER}[Unit]\n\
Description=bothy-host, the host service of bothy terminal\n\
Wants=network-online.target\n\
After=network-online.target\n\
\n\
[Service]\n\
Type=simple\n\
User={user}\n\
ExecStart={binary} --config {config} run\n\
Restart=on-failure\n\
RestartPreventExitStatus={PREVENT_RESTART}\n\
RuntimeDirectory=bothy-host-confirm\n\
RuntimeDirectoryMode=0755\n\
\n\
[Install]\n\
WantedBy=multi-user.target\n",
        user = inputs.service_user,
        binary = inputs.binary.display(),
        config = inputs.config.display(),
    )
}

/// The text of `bothy-host-helper@<user>.socket`: the endpoint `endpoint`.
pub fn helper_socket_unit(inputs: &UnitInputs, user: &str, endpoint: &Path) -> String {
    format!(
        "{HEADER}[Unit]\n\
Description=bothy-host: channel endpoint of the PTY helper of session user {user}\n\
\n\
[Socket]\n\
ListenStream={endpoint}\n\
Accept=no\n\
SocketUser={service_user}\n\
SocketGroup={service_group}\n\
SocketMode=0600\n\
DirectoryMode=0755\n\
RemoveOnStop=yes\n\
Service={service}\n\
\n\
[Install]\n\
WantedBy=sockets.target\n",
        endpoint = endpoint.display(),
        service_user = inputs.service_user,
        service_group = inputs.service_group,
        service = helper_service(user),
    )
}

/// The text of `bothy-host-helper@<user>.service`.
pub fn helper_service_unit(inputs: &UnitInputs, user: &str) -> String {
    format!(
        "{HEADER}[Unit]\n\
Description=bothy-host: PTY helper of session user {user}\n\
Requires={socket}\n\
After={socket}\n\
StartLimitIntervalSec=0\n\
\n\
[Service]\n\
Type=simple\n\
User={user}\n\
ExecStart={binary} pty-helper\n\
Delegate=yes\n\
Restart=always\n\
RestartSec=1s\n\
RestartPreventExitStatus={PREVENT_RESTART}\n",
        socket = helper_socket(user),
        binary = inputs.binary.display(),
    )
}

/// What a step did to a file or an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It did not exist and does now.
    Created,
    /// It existed with other content or attributes and was made right.
    Updated,
    /// It was already right.
    Unchanged,
    /// It existed and is gone.
    Removed,
}

impl Change {
    /// `Updated` when something existing was `changed`, else `Unchanged`.
    pub fn updated_if(changed: bool) -> Change {
        if changed {
            Change::Updated
        } else {
            Change::Unchanged
        }
    }

    /// Whether the step changed anything.
    pub fn changed(self) -> bool {
        self != Change::Unchanged
    }
}

/// The folder of unit files (`/etc/systemd/system`, or another for tests and
/// images: `--unit-dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitDir {
    path: PathBuf,
}

impl UnitDir {
    /// The folder at `path`.
    pub fn new(path: &Path) -> UnitDir {
        UnitDir {
            path: path.to_owned(),
        }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this is the folder systemd reads ([`DEFAULT_UNIT_DIR`]).
    pub fn is_systemds(&self) -> bool {
        self.path == Path::new(DEFAULT_UNIT_DIR)
    }

    /// Creates the folder (root, 0755) when missing.
    pub fn ensure(&self) -> io::Result<()> {
        root_folder(&self.path)
    }

    /// Writes `name` with `text` (root, mode 0644, atomically) unless it holds
    /// exactly that already.
    pub fn write(&self, name: &str, text: &str) -> io::Result<Change> {
        write_root_file(&self.path.join(name), text.as_bytes(), 0o644)
    }

    /// Removes `name`; `Unchanged` when it is not there.
    pub fn remove(&self, name: &str) -> io::Result<Change> {
        remove_entry(&self.path.join(name))
    }

    /// The link `<target>.wants/<unit>` → `<folder>/<unit>` that `systemctl
    /// enable` makes for `WantedBy=<target>`.
    pub fn enable(&self, target: &str, unit: &str) -> io::Result<Change> {
        let wants = self.path.join(format!("{target}.wants"));
        root_folder(&wants)?;
        let link = wants.join(unit);
        let destination = self.path.join(unit);
        match fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => {
                if fs::read_link(&link)? == destination {
                    return Ok(Change::Unchanged);
                }
                fs::remove_file(&link)?;
                std::os::unix::fs::symlink(&destination, &link)?;
                Ok(Change::Updated)
            }
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is not a link", link.display()),
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::os::unix::fs::symlink(&destination, &link)?;
                Ok(Change::Created)
            }
            Err(e) => Err(e),
        }
    }

    /// Removes the link of [`UnitDir::enable`].
    pub fn disable(&self, target: &str, unit: &str) -> io::Result<Change> {
        let link = self.path.join(format!("{target}.wants")).join(unit);
        match fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => {
                fs::remove_file(&link)?;
                Ok(Change::Removed)
            }
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is not a link", link.display()),
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Change::Unchanged),
            Err(e) => Err(e),
        }
    }

    /// The session users that have a helper unit (socket or service) here.
    pub fn helper_users(&self) -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(&self.path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut users = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = name.strip_prefix("bothy-host-helper@") else {
                continue;
            };
            let user = rest
                .strip_suffix(".socket")
                .or_else(|| rest.strip_suffix(".service"));
            if let Some(user) = user
                && !user.is_empty()
                && !users.iter().any(|u| u == user)
            {
                users.push(user.to_owned());
            }
        }
        users.sort();
        Ok(users)
    }
}

/// The drop-ins of `unit_dir` that set a forbidden directive
/// ([`FORBIDDEN_DIRECTIVES`]) for one of our units: `(file, directive)`. A
/// drop-in of `<unit>.d/`, of the helper template `bothy-host-helper@.service.d/`
/// and `.socket.d/`, and the top-level `service.d/` (every service) count.
pub fn forbidden_drop_ins(unit_dir: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    let mut folders: Vec<PathBuf> = Vec::new();
    let entries = match fs::read_dir(unit_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = name.starts_with("bothy-host") && name.ends_with(".d");
        if (ours || name == "service.d" || name == "socket.d") && entry.path().is_dir() {
            folders.push(entry.path());
        }
    }
    folders.sort();
    let mut found = Vec::new();
    for folder in folders {
        let mut files: Vec<PathBuf> = fs::read_dir(&folder)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "conf"))
            .collect();
        files.sort();
        for file in files {
            let text = fs::read_to_string(&file)?;
            for (key, _) in directives(&text) {
                if FORBIDDEN_DIRECTIVES.contains(&key) {
                    found.push((file.clone(), key.to_owned()));
                }
            }
        }
    }
    Ok(found)
}

/// Creates `folder` (and missing parents) as root's with mode 0755; an
/// existing folder is left as it is; a link or a file is refused.
pub fn root_folder(folder: &Path) -> io::Result<()> {
    match fs::symlink_metadata(folder) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is not a folder", folder.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = folder.parent()
                && parent != folder
            {
                root_folder(parent)?;
            }
            fs::DirBuilder::new().mode(0o755).create(folder)?;
            std::os::unix::fs::lchown(folder, Some(0), Some(0))?;
            fs::set_permissions(folder, fs::Permissions::from_mode(0o755))
        }
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to `path` as root's file with `mode`, atomically (a new file
/// beside it, fsync, rename); nothing is written when the file is a regular
/// file of root with that mode and content already. A link is replaced by the
/// file (never followed).
pub fn write_root_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<Change> {
    let before = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is a folder", path.display()),
            ));
        }
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(m) = &before
        && m.is_file()
        && m.uid() == 0
        && m.gid() == 0
        && m.mode() & 0o7777 == mode
        && fs::read(path)? == bytes
    {
        return Ok(Change::Unchanged);
    }
    let folder = path.parent().unwrap_or(Path::new("/"));
    let mut random = [0u8; 6];
    getrandom::fill(&mut random).map_err(|_| io::Error::other("no random source"))?;
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let temporary = folder.join(format!(".{file_name}.{suffix}.tmp"));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temporary)?;
        file.write_all(bytes)?;
        std::os::unix::fs::fchown(&file, Some(0), Some(0))?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(e);
    }
    if let Ok(dir) = fs::File::open(folder) {
        let _ = dir.sync_all();
    }
    Ok(if before.is_some() {
        Change::Updated
    } else {
        Change::Created
    })
}

/// Removes the file or link at `path`; `Unchanged` when there is none.
pub fn remove_entry(path: &Path) -> io::Result<Change> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is a folder", path.display()),
        )),
        Ok(_) => {
            fs::remove_file(path)?;
            Ok(Change::Removed)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Change::Unchanged),
        Err(e) => Err(e),
    }
}

/// The directives (`Key=`) of a unit text, in order, comments and section
/// headers left out.
pub fn directives(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .filter(|l| !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> UnitInputs {
        UnitInputs {
            binary: PathBuf::from("/usr/local/bin/bothy-host"),
            config: PathBuf::from("/etc/bothy-host/config.yaml"),
            service_user: "bothy-host".into(),
            service_group: "bothy-host".into(),
        }
    }

    #[test]
    fn the_units_carry_what_the_chapter_requires_and_nothing_forbidden() {
        let i = inputs();
        let service = service_unit(&i);
        let socket =
            helper_socket_unit(&i, "alice", Path::new("/run/bothy-host/helper/alice.sock"));
        let helper = helper_service_unit(&i, "alice");
        let d = directives(&service);
        for wanted in [
            ("User", "bothy-host"),
            ("Restart", "on-failure"),
            ("RestartPreventExitStatus", "78"),
            ("RuntimeDirectory", "bothy-host-confirm"),
            (
                "ExecStart",
                "/usr/local/bin/bothy-host --config /etc/bothy-host/config.yaml run",
            ),
        ] {
            assert!(d.contains(&wanted), "{wanted:?} in {service}");
        }
        let d = directives(&socket);
        for wanted in [
            ("ListenStream", "/run/bothy-host/helper/alice.sock"),
            ("SocketUser", "bothy-host"),
            ("SocketMode", "0600"),
            ("DirectoryMode", "0755"),
            ("Service", "bothy-host-helper@alice.service"),
        ] {
            assert!(d.contains(&wanted), "{wanted:?} in {socket}");
        }
        let d = directives(&helper);
        for wanted in [
            ("User", "alice"),
            ("Delegate", "yes"),
            ("ExecStart", "/usr/local/bin/bothy-host pty-helper"),
            // Whatever ends it (also SIGTERM by its own session user, which
            // on-failure counts as clean), it comes back, without a start
            // limit that a few kills would exhaust (D-330); 78 stays down.
            ("Restart", "always"),
            ("RestartSec", "1s"),
            ("StartLimitIntervalSec", "0"),
            ("RestartPreventExitStatus", "78"),
        ] {
            assert!(d.contains(&wanted), "{wanted:?} in {helper}");
        }
        for text in [&service, &socket, &helper] {
            for (key, _) in directives(text) {
                assert!(!FORBIDDEN_DIRECTIVES.contains(&key), "{key} in {text}");
            }
        }
    }

    #[test]
    fn only_plain_absolute_paths_are_unit_safe() {
        assert!(unit_safe_path(Path::new("/usr/local/bin/bothy-host")));
        assert!(unit_safe_path(Path::new("/opt/bothy_host-1.2+x/bin@a")));
        for bad in [
            "relative", "/a b", "/a%i", "/a\"b", "/a\\b", "/a$b", "/a;b", "/a\nb",
        ] {
            assert!(!unit_safe_path(Path::new(bad)), "{bad}");
        }
    }
}
