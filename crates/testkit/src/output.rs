//! What a test checks of a command it ran, and shows when the check fails:
//! the exit status, standard output and standard error.

use std::process::Output;

/// The exit status, standard output and standard error of `output`, for the
/// message of a failed assertion.
pub fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Standard output, as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Standard error, as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Standard output of a command that must have exited with 0.
#[track_caller]
pub fn succeeded(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(0), "{}", text(output));
    stdout(output)
}

/// Checks that the command exited with `code` and said `says` on standard
/// error.
#[track_caller]
pub fn refused(output: &Output, code: i32, says: &str) {
    assert_eq!(output.status.code(), Some(code), "{}", text(output));
    assert!(
        stderr(output).contains(says),
        "{says:?} not said:\n{}",
        text(output)
    );
}
