//! Local confirmation (6.4): with `host_service.require_local_confirm = true`
//! the host service asks the person at the machine before every PTY start
//! and before every replay of an attach, and starts only after consent.
//!
//! - [`protocol`]: the JSON lines between service and agent.
//! - [`peer`]: the peer rule (service user, session users, former session
//!   users refused; only the user of the active session on seat0).
//! - [`endpoint`]: the service's side: `confirm.sock`, the agents, the
//!   requests, first answer wins.
//! - [`agent`]: `bothy-host confirm-agent`, run by the person in their
//!   desktop session; shows the dialog (zenity, else kdialog).
//!
//! The endpoint is `/run/bothy-host-confirm/confirm.sock`; the folder comes
//! from `RuntimeDirectory=bothy-host-confirm` of the service's unit, or from
//! `bothy-host supervise`, owned by the service user with mode 0755. Only the
//! feature `test-seams` lets [`CONFIRM_DIR_ENV`] move the folder, so that
//! scenario tests running side by side do not share it (D-200).

pub mod agent;
pub mod endpoint;
pub mod peer;
pub mod protocol;

use std::path::PathBuf;

/// The folder of the endpoint (systemd's `RuntimeDirectory=bothy-host-confirm`).
pub const CONFIRM_DIR: &str = "/run/bothy-host-confirm";

/// The endpoint's name in [`CONFIRM_DIR`].
pub const CONFIRM_SOCKET: &str = "confirm.sock";

/// With the feature `test-seams` only: the folder that replaces
/// [`CONFIRM_DIR`] for the service, supervise and the agent.
pub const CONFIRM_DIR_ENV: &str = "BOTHY_HOST_TEST_CONFIRM_DIR";

/// The folder of the endpoint.
pub fn confirm_dir() -> PathBuf {
    confirm_dir_from(|name| std::env::var_os(name))
}

/// [`confirm_dir`] with the environment as a function.
pub fn confirm_dir_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    crate::seams::path_from(env, CONFIRM_DIR_ENV).unwrap_or_else(|| PathBuf::from(CONFIRM_DIR))
}

/// The endpoint.
pub fn socket_path() -> PathBuf {
    confirm_dir().join(CONFIRM_SOCKET)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "test-seams"))]
    #[test]
    fn without_test_seams_the_folder_is_fixed() {
        assert_eq!(
            confirm_dir_from(|_| Some("/tmp/elsewhere".into())),
            PathBuf::from("/run/bothy-host-confirm")
        );
        assert_eq!(
            socket_path(),
            PathBuf::from("/run/bothy-host-confirm/confirm.sock")
        );
    }

    #[cfg(feature = "test-seams")]
    #[test]
    fn with_test_seams_the_variable_moves_the_folder() {
        assert_eq!(
            confirm_dir_from(|name| (name == CONFIRM_DIR_ENV).then(|| "/var/lib/t/c".into())),
            PathBuf::from("/var/lib/t/c")
        );
        assert_eq!(confirm_dir_from(|_| None), PathBuf::from(CONFIRM_DIR));
    }
}
