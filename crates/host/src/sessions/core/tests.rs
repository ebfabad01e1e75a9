//! The core with its channels in the test's hands and tokio's clock paused:
//! timers are injected, nothing sleeps.

use std::sync::Mutex;

use bothy_proto::control::HostMessage;

use super::*;
use crate::data::checks::LivePty;
use crate::sessions::{PtyHandle, Reporter};

/// The helper's side in the test's hands: the core reads and writes the
/// test's channels through the same traits as the real session connection.
impl PtyOutput for mpsc::Receiver<FromHelper> {
    async fn recv(&mut self) -> Option<FromHelper> {
        mpsc::Receiver::recv(self).await
    }
}

impl PtyInput for mpsc::Sender<ToHelper> {
    async fn send(&mut self, message: ToHelper) -> Result<(), PtyGone> {
        mpsc::Sender::send(self, message).await.map_err(|_| PtyGone)
    }

    fn end_now(&mut self) {
        let _ = self.try_send(ToHelper::End);
    }
}

#[derive(Default)]
struct Collect(Mutex<Vec<HostMessage>>);

impl Reporter for Collect {
    fn report(&self, message: HostMessage) {
        self.0.lock().expect("lock").push(message);
    }
}

impl Collect {
    fn ends(&self) -> Vec<SessionEnded> {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .filter_map(|m| match m {
                HostMessage::SessionEnded(e) => Some(*e),
                _ => None,
            })
            .collect()
    }
}

struct Rig {
    reporter: Arc<Collect>,
    helper_out: mpsc::Sender<FromHelper>,
    helper_in: mpsc::Receiver<ToHelper>,
    cmd: mpsc::Sender<CoreCmd>,
    task: tokio::task::JoinHandle<()>,
}

const SESSION: Uuid = Uuid::from_u128(0xabc);

fn make_rig(scrollback: usize) -> Rig {
    let reporter = Arc::new(Collect::default());
    let sessions = Arc::new(Sessions::new(reporter.clone()));
    let (helper_out, from_helper) = mpsc::channel(8);
    let (to_helper, helper_in) = mpsc::channel(8);
    let (cmd, commands) = mpsc::channel(8);
    let link = sessions.claim_link(SESSION);
    assert!(sessions.register_pty(
        SESSION,
        link.id,
        PtyHandle {
            owner: LivePty {
                sub: Uuid::nil(),
                osu: "alice".into(),
                prf: "shell".into(),
            },
            cmd: cmd.clone(),
        }
    ));
    let settings = CoreSettings {
        session_id: SESSION,
        scrollback_bytes: scrollback,
        idle: Duration::from_secs(60),
        detach: Duration::from_secs(30),
    };
    let task = tokio::spawn(run(
        sessions,
        settings,
        PtyIo {
            from_helper,
            to_helper,
        },
        commands,
    ));
    Rig {
        reporter,
        helper_out,
        helper_in,
        cmd,
        task,
    }
}

async fn live(rig: &Rig) -> mpsc::Receiver<OutFrame> {
    let (tx, rx) = mpsc::channel(4);
    rig.cmd.send(CoreCmd::Live(1, tx)).await.expect("core runs");
    rx
}

#[tokio::test(start_paused = true)]
async fn output_reaches_the_device_and_the_exit_code_follows() {
    let mut rig = make_rig(1024);
    let mut device = live(&rig).await;
    rig.helper_out
        .send(FromHelper::Output(b"hello\n".to_vec()))
        .await
        .expect("sent");
    assert_eq!(
        device.recv().await,
        Some(OutFrame::Data(b"hello\n".to_vec()))
    );
    rig.cmd
        .send(CoreCmd::Input(b"exit 3\n".to_vec()))
        .await
        .expect("sent");
    assert_eq!(
        rig.helper_in.recv().await,
        Some(ToHelper::Input(b"exit 3\n".to_vec()))
    );
    rig.helper_out
        .send(FromHelper::Exited(Some(3)))
        .await
        .expect("sent");
    assert_eq!(device.recv().await, Some(OutFrame::Exit(3)));
    // The end is reported only once the writer has sent the exit frame.
    let Some(OutFrame::Flushed(written)) = device.recv().await else {
        panic!("the exit frame is followed by the flush marker");
    };
    tokio::task::yield_now().await;
    assert!(
        rig.reporter.ends().is_empty(),
        "not before the exit frame is out"
    );
    written.done();
    rig.task.await.expect("core ends");
    let ends = rig.reporter.ends();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].close_reason, CloseReason::ProcessExited);
    assert_eq!(ends[0].exit_code, Some(3));
}

#[tokio::test(start_paused = true)]
async fn a_detached_session_keeps_reading_and_replays_on_attach() {
    let rig = make_rig(1024);
    // Never attached: the core reads everything into the ring (the helper is
    // never held back: 20 messages through a channel of 8).
    for i in 0..20 {
        rig.helper_out
            .send(FromHelper::Output(format!("line {i}\n").into_bytes()))
            .await
            .expect("the core keeps reading while detached");
    }
    let (reply, answer) = oneshot::channel();
    rig.cmd.send(CoreCmd::Snapshot(reply)).await.expect("sent");
    let replay = answer.await.expect("answered");
    assert!(
        replay.starts_with(b"line 0\n"),
        "the ring holds what was read"
    );
    // Output between start and the end of the replay (including what was
    // still in transit from the helper) is kept and sent before live output,
    // in order: replay + since-start is everything, once.
    rig.helper_out
        .send(FromHelper::Output(b"since start\n".to_vec()))
        .await
        .expect("sent");
    let mut device = live(&rig).await;
    let mut seen = replay;
    while !seen.ends_with(b"since start\n") {
        match device.recv().await {
            Some(OutFrame::Data(bytes)) => seen.extend_from_slice(&bytes),
            other => panic!("unexpected {other:?}"),
        }
    }
    let mut expected: Vec<u8> = (0..20)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect();
    expected.extend_from_slice(b"since start\n");
    assert_eq!(
        String::from_utf8_lossy(&seen),
        String::from_utf8_lossy(&expected)
    );
    rig.helper_out
        .send(FromHelper::Output(b"live\n".to_vec()))
        .await
        .expect("sent");
    assert_eq!(
        device.recv().await,
        Some(OutFrame::Data(b"live\n".to_vec()))
    );
}

#[tokio::test(start_paused = true)]
async fn detach_expiry_counts_from_the_detach_and_input_keeps_counting() {
    let mut rig = make_rig(1024);
    let _device = live(&rig).await;
    tokio::time::advance(Duration::from_secs(50)).await;
    rig.cmd.send(CoreCmd::Detached(1)).await.expect("sent");
    rig.cmd
        .send(CoreCmd::Resize(TerminalSize::new(80, 24).expect("size")))
        .await
        .expect("sent");
    assert!(matches!(
        rig.helper_in.recv().await,
        Some(ToHelper::Resize(_))
    ));
    // 59 s after the last input: still running.
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(rig.reporter.ends().is_empty());
    // Detach grace is 30 s: with input at t=50 and detach at t=50 the detach
    // timer fires first at t=80.
    tokio::time::advance(Duration::from_secs(2)).await;
    rig.task.await.expect("core ends");
    let ends = rig.reporter.ends();
    assert_eq!(ends[0].close_reason, CloseReason::DetachExpired);
    assert_eq!(rig.helper_in.recv().await, Some(ToHelper::End));
}

#[tokio::test(start_paused = true)]
async fn idle_timeout_while_attached() {
    let rig = make_rig(1024);
    let _device = live(&rig).await;
    rig.cmd
        .send(CoreCmd::Timers {
            idle: Duration::from_secs(10),
            detach: Duration::from_secs(30),
        })
        .await
        .expect("sent");
    tokio::time::advance(Duration::from_secs(11)).await;
    rig.task.await.expect("core ends");
    assert_eq!(
        rig.reporter.ends()[0].close_reason,
        CloseReason::IdleTimeout
    );
}

#[tokio::test(start_paused = true)]
async fn kill_ends_without_a_report_and_end_reports_its_reason() {
    let mut rig = make_rig(1024);
    rig.cmd.send(CoreCmd::Kill).await.expect("sent");
    rig.task.await.expect("core ends");
    assert!(rig.reporter.ends().is_empty());
    assert_eq!(rig.helper_in.recv().await, Some(ToHelper::End));

    let rig = make_rig(1024);
    rig.cmd
        .send(CoreCmd::End(
            CloseReason::HostPolicyViolation,
            Some(CloseDetail::SharedLocation),
        ))
        .await
        .expect("sent");
    rig.task.await.expect("core ends");
    let ends = rig.reporter.ends();
    assert_eq!(ends[0].close_reason, CloseReason::HostPolicyViolation);
    assert_eq!(ends[0].close_detail, Some(CloseDetail::SharedLocation));
}

#[tokio::test(start_paused = true)]
async fn a_broken_helper_connection_is_process_exited_without_a_code() {
    let rig = make_rig(1024);
    drop(rig.helper_out);
    rig.task.await.expect("core ends");
    let ends = rig.reporter.ends();
    assert_eq!(ends[0].close_reason, CloseReason::ProcessExited);
    assert_eq!(ends[0].exit_code, None);
}

#[tokio::test(start_paused = true)]
async fn a_slow_device_holds_the_helper_back_and_loses_nothing() {
    let rig = make_rig(1 << 20);
    let mut device = live(&rig).await;
    // The device reads nothing yet: the core stops reading the helper once the
    // sink (4) is full, so the helper's channel (8) fills up too.
    let mut sent = 0;
    loop {
        let message = FromHelper::Output(format!("{sent}\n").into_bytes());
        match tokio::time::timeout(Duration::from_secs(1), rig.helper_out.send(message)).await {
            Ok(result) => {
                result.expect("core alive");
                sent += 1;
            }
            Err(_) => break,
        }
        assert!(sent < 100, "the helper was never held back");
    }
    for expected in 0..sent {
        assert_eq!(
            device.recv().await,
            Some(OutFrame::Data(format!("{expected}\n").into_bytes()))
        );
    }
}
