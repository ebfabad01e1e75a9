//! One plain sentence per finding of `bothy-host doctor` (issue 16 item 10,
//! docs/decisions.md D-381): what the code means and what the operator does
//! about it. The codes stay on their own line (scripts and the server read
//! them); the sentence follows as `  hint: ...`. Sentences name keys,
//! commands and checks, never a path, a name or a value of this host.

use bothy_proto::doctor::DoctorCode;

/// What `code` means and what to do, in one sentence.
pub fn sentence(code: DoctorCode) -> &'static str {
    match code {
        DoctorCode::SessionUsersEmpty => {
            "host_service.session_users lists nobody: add a session user with bothy-host \
             session-user add NAME"
        }
        DoctorCode::SessionUserDuplicate => {
            "a session user is listed twice (names are compared without case): remove one from \
             host_service.session_users"
        }
        DoctorCode::SessionUserIsServiceUser => {
            "the service user is also listed as a session user: sessions must run as users of \
             their own, so remove it from host_service.session_users"
        }
        DoctorCode::PrivilegedUser => {
            "a user of the host service is root: the service user and every session user must \
             be ordinary accounts"
        }
        DoctorCode::UserMissing => {
            "a configured user does not exist: create it (bothy-host install does) or remove it \
             from the configuration"
        }
        DoctorCode::SessionUserNameInvalid => {
            "a session user's name is not a valid account name: use letters, digits, dot, \
             underscore and hyphen"
        }
        DoctorCode::ForbiddenGroup => {
            "a user of the host service is in a group that grants administrator rights (sudo, \
             wheel, docker and the like): take it out of that group (gpasswd -d USER GROUP)"
        }
        DoctorCode::DockerSocketWritable => {
            "the Docker socket is writable for a user of the host service, which equals root: \
             remove that access"
        }
        DoctorCode::PasswordlessSudo => {
            "a user of the host service may run sudo without a password, which equals root: \
             remove its NOPASSWD rule from the sudoers files"
        }
        DoctorCode::StateDirOwner => {
            "the state directory does not belong to the service user: chown it to the service \
             user (bothy-host install sets it up)"
        }
        DoctorCode::StateDirMode => "the state directory is open to others: chmod 700 it",
        DoctorCode::KeyFileUnprotected => {
            "a key file of the state directory is readable by others: chmod 600 it, and pair \
             again if others may have read it"
        }
        DoctorCode::ServerHostDetected => {
            "this machine also runs the bothy server: only owners may open terminals here, and \
             the owner confirms that at the confirmation (spec 2.3)"
        }
        DoctorCode::SubscriptionLoginDetected => {
            "a session user holds a personal subscription login of an LLM tool that the host's \
             declaration does not allow: log it out, or declare the host's LLM login (bothy host \
             llm)"
        }
        DoctorCode::AuthStatusUnknown => {
            "the LLM tool's login state could not be read in time: check that host_service.claude_bin \
             runs for the session user, then run the doctor again"
        }
        DoctorCode::DeclarationUnknown => {
            "the host has not yet learnt its LLM declaration from the server: it does once it is \
             confirmed and connected"
        }
        DoctorCode::AuthStatusUnchecked => {
            "host_service.claude_bin is not set, so only the usual login files were checked: set \
             it to check the login state with the tool itself"
        }
        DoctorCode::WorkdirDropped => {
            "a working directory of host_service.claude_workdirs cannot be used and is not \
             offered: check that it exists and belongs to its session user"
        }
        DoctorCode::ClaudeProfileUnavailable => {
            "the claude profile is not offered on this host: set host_service.claude_bin and \
             working directories, and confirm the LLM declaration"
        }
        DoctorCode::ProfileDropped => {
            "a profile of host_service.profiles cannot be offered and was dropped: check its \
             program and kind"
        }
        DoctorCode::StateAccessForSessionUser => {
            "a session user has an entry (an ACL or a group) on the state directory or a key \
             file: remove it, the keys are the service user's alone"
        }
        DoctorCode::HelperReadsState => {
            "a PTY helper could read the state directory or a key file: close it to everyone \
             but the service user (chmod 700, no ACL entries)"
        }
        DoctorCode::ForeignHomeListable => {
            "a session's helper could list another user's home: close that home to others \
             (chmod go-rwx, no ACL entries)"
        }
        DoctorCode::HelperUntrusted => {
            "the helper's binary, a unit or an endpoint folder is not root's or is writable by a \
             session user: install the binary in a folder of root's that nobody else can write \
             (like the one for local programs) and run bothy-host install from there"
        }
        DoctorCode::ClaudeBinUntrusted => {
            "host_service.claude_bin, a folder above it or its interpreter is writable by \
             someone other than root: install it root-owned"
        }
        DoctorCode::PeerMismatch => {
            "the process at a helper's endpoint is not the helper of its session user: restart \
             the host service (bothy-host restart) and look for a foreign process"
        }
        DoctorCode::HelperUnreachable => {
            "the PTY helper of a session user does not answer: check that its unit runs \
             (systemctl status, or the log of bothy-host supervise)"
        }
        DoctorCode::PeerCheckUnavailable => {
            "this platform cannot prove which process is at the other end of a helper's channel: \
             the host service does not run here"
        }
        DoctorCode::PtraceScopeLow => {
            "kernel.yama.ptrace_scope is below 1, so processes of one user may read another's \
             memory: set it with sysctl -w kernel.yama.ptrace_scope=1 and keep it in a file of \
             sysctl.d"
        }
        DoctorCode::HelperUnprotected => {
            "the helper could not protect its memory from other processes: check the kernel's \
             ptrace settings and restart the host service"
        }
        DoctorCode::HomeUnresolvable => {
            "a session user's home cannot be resolved: give the account an existing home"
        }
        DoctorCode::SharedLocation => {
            "a location with code, settings or logins is shared between session users (ruling \
             T13): give each session user its own, closed to the others"
        }
        DoctorCode::ForeignEntry => {
            "an entry in a session user's location belongs to another session user: remove it \
             or change its owner"
        }
        DoctorCode::EntryScanTimeout => {
            "the check of a session user's files did not finish within \
             host_service.entry_scan_timeout: raise it, or tidy the home"
        }
        DoctorCode::EntryScanRunning => {
            "the check of a session user's files still runs: run the doctor again in a moment"
        }
        DoctorCode::DriveRootWritable => {
            "the root of a drive with a location is writable for others: close it"
        }
        DoctorCode::ProgramLocationUntrusted => {
            "a location of programs for all users is not root's or is writable by others: close \
             it"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code has its sentence, and no sentence names a path (the
    /// output on the host never carries one).
    #[test]
    fn every_code_is_explained_without_a_path() {
        for code in DoctorCode::ALL {
            let text = sentence(*code);
            assert!(text.len() > 30, "{code}: {text}");
            assert!(!text.contains('/'), "{code}: {text}");
            assert!(!text.ends_with('.'), "{code}: {text}");
        }
        assert!(
            sentence(DoctorCode::PtraceScopeLow).contains("sysctl -w kernel.yama.ptrace_scope=1")
        );
    }
}
