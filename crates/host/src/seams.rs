//! The test seams (DESIGN §4). Where this machine cannot satisfy a real
//! check (no Yama, no logind seat, no desktop dialog), a build with the Cargo
//! feature `test-seams` — used only by the tests, never by a release build —
//! lets one environment variable replace one input path of that check. Every
//! seam reads its variable through [`path_from`], so a build without the
//! feature ignores them all in one place.

use std::ffi::OsString;
use std::path::PathBuf;

/// Whether this build has the seams (the feature `test-seams`): the test
/// harnesses refuse to run without them instead of failing later.
pub const ENABLED: bool = cfg!(feature = "test-seams");

/// The path the variable `name` names, read through `env` — only in a build
/// with the feature `test-seams`; always `None` otherwise.
pub fn path_from(env: impl Fn(&str) -> Option<OsString>, name: &str) -> Option<PathBuf> {
    #[cfg(feature = "test-seams")]
    {
        env(name).map(PathBuf::from)
    }
    #[cfg(not(feature = "test-seams"))]
    {
        let _ = (env, name);
        None
    }
}

/// [`path_from`] with the process's environment.
pub fn path(name: &str) -> Option<PathBuf> {
    path_from(|name| std::env::var_os(name), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_test_build_reads_a_seam() {
        let env = |name: &str| (name == "SEAM").then(|| OsString::from("/x"));
        let read = path_from(env, "SEAM");
        if cfg!(feature = "test-seams") {
            assert_eq!(read, Some(PathBuf::from("/x")));
        } else {
            assert_eq!(read, None);
        }
        assert_eq!(path_from(env, "OTHER"), None);
    }
}
