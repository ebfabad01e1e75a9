//! Commands of the instance operator (16-operations.md 4.4): `restart`,
//! `install`, `session-user add|remove`, and the admin endpoint `admin.sock`
//! through which `bothy-host doctor` asks the running service.
//!
//! - [`install`]: accounts, state directory, configuration skeleton, units.
//! - [`session_user`]: `session-user add` and `remove` (2.2 item 3).
//! - [`units`]: the systemd units and the files of the unit folder.
//! - [`accounts`]: making accounts, their groups (HD2), closing homes.
//! - [`config_edit`]: the edits of `host_service.session_users` and
//!   `claude_workdirs` that keep the rest of the file.
//! - [`restart`], [`endpoint`]: `bothy-host restart`, `admin.sock`;
//!   [`doctor_answer`]: the answer to a doctor request on it.

pub mod accounts;
pub mod config_edit;
pub mod doctor_answer;
pub mod endpoint;
pub mod install;
pub mod restart;
pub mod session_user;
pub mod units;
