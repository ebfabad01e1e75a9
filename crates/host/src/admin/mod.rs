//! Commands of the instance operator (16-operations.md 4.4): `restart`, and
//! the admin endpoint `admin.sock` through which `bothy-host doctor` asks the
//! running service; `install` and `session-user` arrive with the doctor issue.

pub mod endpoint;
pub mod restart;
