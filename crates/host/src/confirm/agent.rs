//! `bothy-host confirm-agent` (6.4 "Agent"): the person at the machine runs
//! it in their desktop session (an autostart entry starts it at their login).
//! It connects to `confirm.sock`, shows a dialog with "deny" as the default
//! for every `confirm` and answers; `cancel` closes the dialog.
//!
//! - The dialog is `/usr/bin/zenity --question --timeout`, else
//!   `/usr/bin/kdialog --warningyesno` (fixed paths, never `PATH`; only the
//!   feature `test-seams` moves the folder through [`DIALOG_DIR_ENV`]).
//!   Without either the agent answers no and logs `no_dialog_tool`.
//! - Exit status 0 of the dialog is consent; anything else (no, closed,
//!   failed) denies. A dialog that timed out (zenity's exit status 5) or is
//!   still open at the request's `timeout_ms` is closed and answers nothing:
//!   the host service's own deadline ends the request as `timeout`, which is
//!   what happened, and a "no" racing it could make its log say `denied`
//!   (D-715).
//! - The text names open or attach, the profile and the session user,
//!   nothing else (no markup: zenity gets `--no-markup`).
//! - A dialog runs in its own process group, which `cancel`, the deadline or
//!   the loss of the connection kill.
//! - When the service is not there or goes away, the agent connects again
//!   after 1 s, doubling to 30 s (back to 1 s after a connection that lasted
//!   10 s); SIGTERM or SIGINT end it with 0 (D-205).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::protocol::{FromAgent, Kind, ProtocolError, Side, ToAgent, converse};

/// Where the dialog programs are.
pub const DIALOG_DIR: &str = "/usr/bin";

/// With the feature `test-seams` only: the folder that replaces
/// [`DIALOG_DIR`] (a test puts its own `zenity` there).
pub const DIALOG_DIR_ENV: &str = "BOTHY_HOST_TEST_DIALOG_DIR";

const RECONNECT_FIRST: Duration = Duration::from_secs(1);
const RECONNECT_CAP: Duration = Duration::from_secs(30);
const RECONNECT_RESET: Duration = Duration::from_secs(10);

/// The title of every dialog.
const TITLE: &str = "bothy terminal";

/// The folder of the dialog programs.
pub fn dialog_dir_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    crate::seams::path_from(env, DIALOG_DIR_ENV).unwrap_or_else(|| PathBuf::from(DIALOG_DIR))
}

/// The text of the dialog: open or attach, the profile, the session user.
pub fn dialog_text(kind: Kind, profile: &str, session_user: &str) -> String {
    let what = match kind {
        Kind::Open => "A device asks to open a new terminal session on this machine.",
        Kind::Attach => {
            "A device asks to attach to a running terminal session on this machine \
             (it receives the session's output)."
        }
    };
    format!("{what}\n\nProfile: {profile}\nSession user: {session_user}\n\nAllow it?")
}

/// The dialog program and its arguments: zenity, else kdialog, else `None`.
pub fn dialog_command(
    dir: &Path,
    kind: Kind,
    profile: &str,
    session_user: &str,
    timeout_ms: u64,
) -> Option<(PathBuf, Vec<String>)> {
    let text = dialog_text(kind, profile, session_user);
    let zenity = dir.join("zenity");
    if zenity.is_file() {
        let seconds = timeout_ms.div_ceil(1000).max(1);
        return Some((
            zenity,
            vec![
                "--question".into(),
                "--no-markup".into(),
                "--default-cancel".into(),
                format!("--title={TITLE}"),
                "--ok-label=Allow".into(),
                "--cancel-label=Deny".into(),
                format!("--timeout={seconds}"),
                format!("--text={text}"),
            ],
        ));
    }
    let kdialog = dir.join("kdialog");
    if kdialog.is_file() {
        return Some((
            kdialog,
            vec![
                "--title".into(),
                TITLE.into(),
                "--yes-label".into(),
                "Allow".into(),
                "--no-label".into(),
                "Deny".into(),
                "--warningyesno".into(),
                text,
            ],
        ));
    }
    None
}

/// Runs the agent until SIGTERM or SIGINT; the exit code.
pub fn command() -> i32 {
    let Some(runtime) =
        crate::service::start_runtime(tokio::runtime::Builder::new_current_thread())
    else {
        return 1;
    };
    let socket = super::socket_path();
    let dialogs = dialog_dir_from(|name| std::env::var_os(name));
    runtime.block_on(run(socket, dialogs))
}

async fn run(socket: PathBuf, dialogs: PathBuf) -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot watch signals");
        return 1;
    };
    let mut backoff = RECONNECT_FIRST;
    let mut reported_absent = false;
    loop {
        match UnixStream::connect(&socket).await {
            Ok(stream) => {
                reported_absent = false;
                tracing::info!(
                    code = "confirm_agent_connected",
                    "connected to the host service"
                );
                let since = Instant::now();
                tokio::select! {
                    () = serve(stream, &dialogs) => {}
                    _ = term.recv() => return 0,
                    _ = int.recv() => return 0,
                }
                tracing::info!(
                    code = "confirm_agent_disconnected",
                    "the host service closed the connection; connecting again"
                );
                if since.elapsed() >= RECONNECT_RESET {
                    backoff = RECONNECT_FIRST;
                }
            }
            Err(error) => {
                if !reported_absent {
                    tracing::info!(
                        code = "confirm_service_absent",
                        %error,
                        "no host service on the confirmation endpoint; trying again"
                    );
                    reported_absent = true;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = term.recv() => return 0,
            _ = int.recv() => return 0,
        }
        backoff = (backoff * 2).min(RECONNECT_CAP);
    }
}

/// One connection: requests in, answers out. Returns when the service
/// closes it or sends a line that is no request; every open dialog ends.
async fn serve(stream: UnixStream, dialogs: &Path) {
    let (answers_tx, answers_rx) = mpsc::unbounded_channel::<FromAgent>();
    let mut side = AgentSide {
        dialogs,
        answers_tx,
        answers_rx,
        open: HashMap::new(),
    };
    converse(stream, &mut side).await;
}

/// The agent's end of its connection to the service.
struct AgentSide<'a> {
    dialogs: &'a Path,
    answers_tx: mpsc::UnboundedSender<FromAgent>,
    answers_rx: mpsc::UnboundedReceiver<FromAgent>,
    /// The open dialogs. Dropping a sender cancels its dialog.
    open: HashMap<u64, oneshot::Sender<()>>,
}

impl Side for AgentSide<'_> {
    async fn next_to_send(&mut self) -> Option<String> {
        // Never `None`: this end holds a sender.
        let answer = self.answers_rx.recv().await?;
        let FromAgent::Answer { id, .. } = answer;
        self.open.remove(&id);
        Some(answer.encode())
    }

    fn received(&mut self, line: &[u8]) -> Result<(), ProtocolError> {
        match ToAgent::decode(line)? {
            ToAgent::Confirm {
                id,
                kind,
                profile,
                session_user,
                timeout_ms,
            } => {
                let (cancel_tx, cancel_rx) = oneshot::channel();
                self.open.insert(id, cancel_tx);
                let command =
                    dialog_command(self.dialogs, kind, &profile, &session_user, timeout_ms);
                tokio::spawn(ask(
                    id,
                    kind,
                    command,
                    Duration::from_millis(timeout_ms),
                    cancel_rx,
                    self.answers_tx.clone(),
                ));
            }
            ToAgent::Cancel { id } => {
                self.open.remove(&id);
            }
        }
        Ok(())
    }

    fn invalid(&self) {
        tracing::warn!(
            code = "confirm_service_invalid",
            "the host service sent a line that is no request; the connection is closed"
        );
    }
}

/// zenity's exit status when its `--timeout` ran out.
const ZENITY_TIMED_OUT: i32 = 5;

/// How a dialog ended.
enum Ended {
    /// The person answered, or the dialog failed (`false`).
    Answer(bool),
    /// The service cancelled the request.
    Cancelled,
    /// Nobody answered before the deadline.
    TimedOut,
}

/// Shows one dialog and sends its answer (nothing when cancelled or timed
/// out).
async fn ask(
    id: u64,
    kind: Kind,
    command: Option<(PathBuf, Vec<String>)>,
    timeout: Duration,
    mut cancel: oneshot::Receiver<()>,
    answers: mpsc::UnboundedSender<FromAgent>,
) {
    let Some((program, args)) = command else {
        tracing::warn!(
            code = "no_dialog_tool",
            kind = kind.as_str(),
            "neither zenity nor kdialog is installed: the request is denied"
        );
        let _ = answers.send(FromAgent::Answer { id, allow: false });
        return;
    };
    let mut child = match tokio::process::Command::new(&program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            tracing::warn!(code = "dialog_failed", %error, "the dialog did not start: denied");
            let _ = answers.send(FromAgent::Answer { id, allow: false });
            return;
        }
    };
    let group = child.id();
    let outcome = tokio::select! {
        status = child.wait() => match status {
            Ok(status) if status.code() == Some(ZENITY_TIMED_OUT) => Ended::TimedOut,
            status => Ended::Answer(status.is_ok_and(|s| s.success())),
        },
        _ = &mut cancel => Ended::Cancelled,
        () = tokio::time::sleep(timeout) => Ended::TimedOut,
    };
    // The dialog's whole group ends with the request (a wrapper's children too).
    if let Some(group) = group.and_then(|g| i32::try_from(g).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(group),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.wait().await;
    match outcome {
        Ended::Answer(allow) => {
            tracing::info!(
                code = if allow {
                    "confirm_allowed"
                } else {
                    "confirm_denied"
                },
                kind = kind.as_str(),
                "answered"
            );
            let _ = answers.send(FromAgent::Answer { id, allow });
        }
        Ended::Cancelled => tracing::info!(
            code = "confirm_cancelled",
            kind = kind.as_str(),
            "the request was cancelled; the dialog was closed"
        ),
        Ended::TimedOut => tracing::info!(
            code = "confirm_timed_out",
            kind = kind.as_str(),
            "nobody answered before the deadline; the dialog was closed"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zenity_first_then_kdialog_then_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(dialog_command(dir.path(), Kind::Open, "shell", "bob", 1500).is_none());
        std::fs::write(dir.path().join("kdialog"), "").expect("kdialog");
        let (program, args) =
            dialog_command(dir.path(), Kind::Attach, "shell", "bob", 1500).expect("kdialog");
        assert_eq!(program, dir.path().join("kdialog"));
        assert!(args.contains(&"--warningyesno".to_owned()));
        std::fs::write(dir.path().join("zenity"), "").expect("zenity");
        let (program, args) =
            dialog_command(dir.path(), Kind::Open, "claude", "bob", 1500).expect("zenity");
        assert_eq!(program, dir.path().join("zenity"));
        assert!(args.contains(&"--question".to_owned()));
        assert!(args.contains(&"--default-cancel".to_owned()));
        assert!(args.contains(&"--no-markup".to_owned()));
        assert!(args.contains(&"--timeout=2".to_owned()));
        let text = args
            .iter()
            .find_map(|a| a.strip_prefix("--text="))
            .expect("text");
        assert!(text.contains("open a new terminal session"));
        assert!(text.contains("Profile: claude"));
        assert!(text.contains("Session user: bob"));
    }

    /// Runs `ask` with `sh -c <script>` as the dialog and returns its
    /// answer, if it sent one.
    async fn ask_with(script: &str, timeout: Duration) -> Option<bool> {
        let (_cancel_tx, cancel_rx) = oneshot::channel();
        let (answers_tx, mut answers_rx) = mpsc::unbounded_channel();
        let command = Some((
            PathBuf::from("/bin/sh"),
            vec!["-c".to_owned(), script.to_owned()],
        ));
        ask(7, Kind::Open, command, timeout, cancel_rx, answers_tx).await;
        answers_rx.try_recv().ok().map(|answer| {
            let FromAgent::Answer { id, allow } = answer;
            assert_eq!(id, 7);
            allow
        })
    }

    #[tokio::test]
    async fn a_dialog_answers_yes_or_no_by_its_exit_status() {
        let long = Duration::from_secs(600);
        assert_eq!(ask_with("exit 0", long).await, Some(true));
        assert_eq!(ask_with("exit 1", long).await, Some(false));
        assert_eq!(ask_with("kill -9 $$", long).await, Some(false));
    }

    #[tokio::test]
    async fn a_timed_out_zenity_answers_nothing() {
        assert_eq!(ask_with("exit 5", Duration::from_secs(600)).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dialog_open_at_the_deadline_is_closed_and_answers_nothing() {
        // The paused clock reaches the deadline as soon as nothing else can
        // run; the dialog would sleep for an hour.
        assert_eq!(
            ask_with("exec sleep 3600", Duration::from_secs(3)).await,
            None
        );
    }

    #[test]
    fn without_test_seams_or_variable_the_dialogs_are_in_usr_bin() {
        assert_eq!(dialog_dir_from(|_| None), PathBuf::from("/usr/bin"));
        #[cfg(not(feature = "test-seams"))]
        assert_eq!(
            dialog_dir_from(|_| Some("/tmp/x".into())),
            PathBuf::from("/usr/bin")
        );
    }
}
