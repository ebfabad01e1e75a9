//! Unit tests of the doctor's bookkeeping: entries and the rule for names, the
//! gate, enforcement, HD7's lists, the check of the entries over runs. The
//! service side is given as findings and the helpers answer from a table; the
//! real sides run in `tests/doctor_*.rs` with real users, files and processes.

use std::sync::Mutex;

use super::accounts::UserEntry;
use super::service_side::{AskedUser, ForeignHome, ServiceFindings};
use super::terms::{Account, FileId};
use super::wire::{
    CheckAnswer, CheckRequest, FullAnswer, Hd6Observation, Hd11Observation, LightAnswer,
    RequestKind, ScanReport, ScanResult,
};
use super::*;
use crate::config::{Profile, UserWorkdirs, Workdir};
use bothy_proto::codes::CloseDetail;
use bothy_proto::doctor::{Check, DoctorEntry};
use bothy_proto::report::ProfileKind;

#[test]
fn urls() {
    assert_eq!(
        url_host_port("https://example.org"),
        Some(("example.org".into(), 443))
    );
    assert_eq!(
        url_host_port("https://u@h:8443/x?y"),
        Some(("h".into(), 8443))
    );
    assert_eq!(url_host_port("http://[::1]:80/"), Some(("::1".into(), 80)));
    assert_eq!(url_host_port("ftp://h"), None);
    assert_eq!(url_host_port("https://:80"), None);
    assert!(is_own_address("127.0.0.1".parse().expect("ip")));
    assert!(is_own_address("::1".parse().expect("ip")));
    assert!(is_own_address("::ffff:127.0.0.1".parse().expect("ip")));
    assert!(!is_own_address("192.0.2.77".parse().expect("ip")));
}

/// What the helper of one user answers.
#[derive(Debug, Clone, Default)]
struct Script {
    fault: Option<HelperFault>,
    /// Identity per configured working directory (by path).
    ids: Vec<(PathBuf, Option<FileId>)>,
    hd6: Hd6Observation,
    hd11: Hd11Observation,
    scan: ScanReport,
    full_awaited: Option<u64>,
    passwordless_sudo: bool,
    reads_state: bool,
    listable_homes: Vec<usize>,
    wrong_user: bool,
}

#[derive(Debug, Default)]
struct TablePort {
    scripts: Mutex<BTreeMap<String, Script>>,
    asked: Mutex<Vec<(String, RequestKind)>>,
}

impl TablePort {
    fn set(&self, user: &str, script: Script) {
        self.scripts
            .lock()
            .expect("lock")
            .insert(user.into(), script);
    }

    fn edit(&self, user: &str, f: impl FnOnce(&mut Script)) {
        f(self
            .scripts
            .lock()
            .expect("lock")
            .entry(user.into())
            .or_default());
    }

    fn answer(&self, user: &str, request: &[u8]) -> Result<Vec<u8>, HelperFault> {
        let request = CheckRequest::decode(request).expect("the doctor sends valid requests");
        self.asked
            .lock()
            .expect("lock")
            .push((user.into(), request.kind));
        let script = self
            .scripts
            .lock()
            .expect("lock")
            .get(user)
            .cloned()
            .unwrap_or_default();
        if let Some(fault) = script.fault {
            return Err(fault);
        }
        if script.wrong_user {
            return Ok(CheckAnswer::Refused(wire::Refusal::WrongUser).encode());
        }
        let ids: Vec<Option<FileId>> = request
            .workdirs
            .iter()
            .map(|w| {
                script
                    .ids
                    .iter()
                    .find(|(p, _)| p == w)
                    .and_then(|(_, id)| *id)
            })
            .collect();
        let light = LightAnswer {
            workdirs: ids.clone(),
            hd6: script.hd6,
            hd11: script.hd11,
            entry_scan: script.scan,
        };
        Ok(match request.kind {
            RequestKind::Identities => CheckAnswer::Identities(ids),
            RequestKind::Light => CheckAnswer::Light(light),
            RequestKind::Full => {
                let mut light = light;
                light.entry_scan.awaited = script.full_awaited.unwrap_or(1);
                CheckAnswer::Full(FullAnswer {
                    light,
                    passwordless_sudo: script.passwordless_sudo,
                    reads_state: script.reads_state,
                    listable_homes: script.listable_homes.clone(),
                    dumpable: false,
                })
            }
            RequestKind::Sudo => CheckAnswer::Sudo {
                passwordless_sudo: false,
            },
        }
        .encode())
    }
}

impl HelperPort for TablePort {
    fn checks(
        &self,
        user: &str,
        request: Vec<u8>,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, HelperFault>> + Send {
        let answer = self.answer(user, &request);
        async move { answer }
    }
}

fn clean(finished: u64) -> Script {
    Script {
        scan: ScanReport {
            awaited: finished,
            finished,
            result: Some(ScanResult::Clean),
        },
        full_awaited: Some(finished),
        ..Script::default()
    }
}

fn asked(name: &str, uid: u32) -> AskedUser {
    AskedUser {
        name: name.into(),
        entry: UserEntry {
            name: name.into(),
            uid,
            gid: uid,
            home: PathBuf::from(format!("/home/{name}")),
            shell: PathBuf::from("/bin/bash"),
        },
        account: Account {
            uid,
            gids: vec![uid],
        },
    }
}

fn findings(codes: &[DoctorCode]) -> ServiceFindings {
    ServiceFindings {
        codes: codes.to_vec(),
        asked: vec![asked("alice", 2001), asked("bob", 2002)],
        claude_usable: true,
        program_present: vec![true, true],
        homes: vec![
            ForeignHome {
                name: "root".into(),
                home: "/root".into(),
                former: false,
            },
            ForeignHome {
                name: "carol".into(),
                home: "/home/carol".into(),
                former: true,
            },
            ForeignHome {
                name: "dave".into(),
                home: "/home/dave".into(),
                former: false,
            },
        ],
    }
}

fn config() -> HostServiceConfig {
    let wd = |p: &str, d: &str| Workdir {
        path: PathBuf::from(p),
        display_name: d.into(),
    };
    HostServiceConfig {
        session_users: vec!["alice".into(), "bob".into()],
        profiles: vec![
            Profile::default_shell(),
            Profile {
                name: "claude".into(),
                display_name: "Claude".into(),
                kind: ProfileKind::Claude,
                command: None,
            },
        ],
        claude_bin: Some("/usr/local/bin/claude".into()),
        claude_workdirs: vec![
            UserWorkdirs {
                user: "alice".into(),
                workdirs: vec![wd("/srv/a1", "a1"), wd("/srv/shared", "shared")],
            },
            UserWorkdirs {
                user: "bob".into(),
                workdirs: vec![
                    wd("/srv/shared-link", "shared"),
                    wd("/srv/b-missing", "gone"),
                    wd("/srv/b1", "b1"),
                ],
            },
            UserWorkdirs {
                user: "mallory".into(),
                workdirs: vec![wd("/srv/m", "m")],
            },
        ],
        ..HostServiceConfig::default()
    }
}

fn id(ino: u64) -> Option<FileId> {
    Some(FileId { dev: 7, ino })
}

/// A port where both helpers answer clean runs with the identities of
/// `config()`: `/srv/shared` (alice) and `/srv/shared-link` (bob) are the same
/// folder, `/srv/b-missing` does not resolve.
fn port() -> TablePort {
    let port = TablePort::default();
    let mut a = clean(1);
    a.ids = vec![("/srv/a1".into(), id(1)), ("/srv/shared".into(), id(9))];
    port.set("alice", a);
    let mut b = clean(1);
    b.ids = vec![
        ("/srv/shared-link".into(), id(9)),
        ("/srv/b-missing".into(), None),
        ("/srv/b1".into(), id(2)),
    ];
    port.set("bob", b);
    port
}

fn ctx(config: &HostServiceConfig, declaration: Option<LlmCredentials>) -> ServiceContext<'_> {
    ServiceContext {
        config,
        config_path: None,
        declaration,
        server_url: None,
        control_peer: None,
        former_session_users: vec!["carol".into()],
    }
}

async fn run(
    doctor: &mut Doctor,
    ctx: &ServiceContext<'_>,
    port: &TablePort,
    kind: RunKind,
    scope: Scope<'_>,
    codes: &[DoctorCode],
) {
    doctor
        .complete(ctx, port, kind, scope, side(Some(findings(codes))))
        .await;
}

fn entry(check: Check, doctor: &Doctor) -> Vec<DoctorEntry> {
    doctor
        .entries()
        .into_iter()
        .filter(|e| e.check == check)
        .collect()
}

#[test]
fn before_any_run_every_check_counts_as_failed() {
    let doctor = Doctor::new();
    let entries = doctor.entries();
    assert_eq!(entries.len(), 11);
    for e in &entries {
        let warning_only = matches!(e.check, Check::Hd5ServerHost | Check::Hd7Profiles);
        assert_eq!(e.ok, warning_only, "{e:?}");
        assert!(e.code.is_some(), "{e:?}");
    }
    assert!(doctor.refuses_start());
    assert!(doctor.refuses_running_service());
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::PtyFailed));
    assert_eq!(
        doctor.enforcement().end_all,
        Some(CloseDetail::HelperUntrusted)
    );
    assert!(doctor.server_host_detected());
    assert!(doctor.reported_profiles().is_empty());
    assert!(doctor.reported_session_users().is_empty());
    assert_eq!(doctor.workdir("alice", 0), None);
}

#[tokio::test]
async fn a_clean_full_run_passes_and_hd7_builds_the_lists() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    let entries = doctor.entries();
    assert_eq!(entries.len(), 11, "{entries:?}");
    for e in &entries {
        assert!(e.ok, "{e:?}");
        assert_eq!(e.session_user, None);
    }
    // HD7: mallory is no session user, the shared folder leaves both lists,
    // bob's missing folder leaves his: a warning, the check passes.
    assert_eq!(
        entry(Check::Hd7Profiles, &doctor),
        [DoctorEntry::for_code(DoctorCode::WorkdirDropped)]
    );
    let users = doctor.reported_session_users();
    let names: Vec<(&str, Vec<&str>)> = users
        .iter()
        .map(|u| {
            (
                u.name.as_str(),
                u.workdirs.iter().map(|w| w.display_name.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(names, [("alice", vec!["a1"]), ("bob", vec!["b1"])]);
    // The index counts in the list after HD7 (TM-T29 (c)).
    assert_eq!(doctor.workdir("bob", 0), Some(PathBuf::from("/srv/b1")));
    assert_eq!(doctor.workdir("bob", 1), None);
    assert_eq!(doctor.workdir("alice", 0), Some(PathBuf::from("/srv/a1")));
    let profiles: Vec<String> = doctor
        .reported_profiles()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(profiles, ["shell", "claude"]);
    assert!(!doctor.refuses_start());
    assert_eq!(doctor.gate("alice"), Ok(()));
    assert_eq!(doctor.gate("bob"), Ok(()));
    assert_eq!(doctor.gate("mallory"), Err(CloseDetail::PtyFailed));
    assert_eq!(doctor.enforcement(), Enforcement::default());
    assert!(!doctor.server_host_detected());
    // The full run asked identities of everyone first, then the full checks.
    let asked = port.asked.lock().expect("lock").clone();
    assert_eq!(asked.len(), 4);
    assert!(
        asked[..2]
            .iter()
            .all(|(_, k)| *k == RequestKind::Identities)
    );
    assert!(asked[2..].iter().all(|(_, k)| *k == RequestKind::Full));
    let lines = doctor.local_output();
    // Eleven checks and the sentence of the one warning (issue 16 item 10).
    assert_eq!(lines.len(), 12);
    assert_eq!(lines[0], "HD1 hd1_user: passed");
    assert_eq!(
        lines[6],
        "HD7 hd7_profiles: passed, warning workdir_dropped"
    );
    assert!(
        lines[7].starts_with("  hint: a working directory of host_service.claude_workdirs"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn hd6_depends_on_the_declaration_and_names_every_account() {
    let config = config();
    let port = port();
    port.edit("alice", |s| s.hd6.subscription = true);
    port.edit("bob", |s| s.hd6.status_unknown = true);
    for declaration in [LlmCredentials::Organization, LlmCredentials::None] {
        let ctx = ctx(&config, Some(declaration));
        let mut doctor = Doctor::new();
        run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
        assert_eq!(
            entry(Check::Hd6LlmLogin, &doctor),
            [
                DoctorEntry::naming(DoctorCode::SubscriptionLoginDetected, "alice"),
                DoctorEntry::naming(DoctorCode::AuthStatusUnknown, "bob"),
            ]
        );
        assert!(doctor.refuses_start());
        assert!(
            !doctor.refuses_running_service(),
            "HD6 has its own consequence"
        );
        assert_eq!(
            doctor.gate("bob"),
            Err(CloseDetail::SubscriptionLoginDetected)
        );
        assert_eq!(
            doctor.enforcement().end_all,
            Some(CloseDetail::SubscriptionLoginDetected)
        );
        let lines = doctor.local_output();
        assert!(
            lines.contains(&"HD6 hd6_llm_login: failed subscription_login_detected".to_owned())
        );
        assert!(lines.contains(&"  session user alice: subscription_login_detected".to_owned()));
        assert!(lines.contains(&"  session user bob: auth_status_unknown".to_owned()));
    }
    // personal: the holder's own business.
    let ctx_personal = ctx(&config, Some(LlmCredentials::Personal));
    let mut doctor = Doctor::new();
    run(
        &mut doctor,
        &ctx_personal,
        &port,
        RunKind::Full,
        Scope::All,
        &[],
    )
    .await;
    assert_eq!(
        entry(Check::Hd6LlmLogin, &doctor),
        [DoctorEntry::passed(Check::Hd6LlmLogin)]
    );
    assert!(!doctor.refuses_start());
    // unknown: a warning, and the local output names the accounts.
    let ctx_unknown = ctx(&config, None);
    let mut doctor = Doctor::new();
    run(
        &mut doctor,
        &ctx_unknown,
        &port,
        RunKind::Full,
        Scope::All,
        &[],
    )
    .await;
    assert_eq!(
        entry(Check::Hd6LlmLogin, &doctor),
        [DoctorEntry::for_code(DoctorCode::DeclarationUnknown)]
    );
    assert!(!doctor.refuses_start());
    let lines = doctor.local_output();
    assert!(lines.contains(&"  session user alice: declaration_unknown".to_owned()));
    // The profile claude is never offered with an unknown declaration.
    assert!(
        doctor
            .reported_profiles()
            .iter()
            .all(|p| p.kind != ProfileKind::Claude)
    );
}

#[tokio::test]
async fn an_unusable_claude_bin_warns_and_drops_the_profile() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    port.edit("alice", |s| s.hd6.unchecked = true);
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    assert_eq!(
        entry(Check::Hd6LlmLogin, &doctor),
        [DoctorEntry::for_code(DoctorCode::AuthStatusUnchecked)]
    );
    // The service side found claude_bin unusable: no profile claude (HD7 warning).
    let mut unusable = findings(&[]);
    unusable.claude_usable = false;
    doctor
        .complete(
            &ctx,
            &port,
            RunKind::Light,
            Scope::All,
            side(Some(unusable)),
        )
        .await;
    assert!(
        doctor
            .reported_profiles()
            .iter()
            .all(|p| p.kind != ProfileKind::Claude)
    );
    assert_eq!(
        entry(Check::Hd7Profiles, &doctor),
        [DoctorEntry::for_code(DoctorCode::WorkdirDropped)],
        "the first warning of HD7 in the order of the list"
    );
    assert!(
        doctor
            .local_output()
            .contains(&"HD6 hd6_llm_login: passed, warning auth_status_unchecked".to_owned())
    );
}

#[tokio::test]
async fn hd9_names_former_users_in_the_report_and_everyone_locally() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    port.edit("alice", |s| s.listable_homes = vec![1, 2]);
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    assert_eq!(
        entry(Check::Hd9ForeignHomes, &doctor),
        [
            DoctorEntry::for_code(DoctorCode::ForeignHomeListable),
            DoctorEntry::naming(DoctorCode::ForeignHomeListable, "carol"),
        ]
    );
    let lines = doctor.local_output();
    assert!(lines.contains(&"  user carol: home can be listed".to_owned()));
    assert!(lines.contains(&"  user dave: home can be listed".to_owned()));
    assert!(!lines.iter().any(|l| l.contains("root")));
    assert!(doctor.refuses_start());
    assert!(doctor.refuses_running_service());
    assert_eq!(doctor.gate("bob"), Err(CloseDetail::PtyFailed));
    assert_eq!(
        doctor.enforcement(),
        Enforcement::default(),
        "ends no running session"
    );
}

#[tokio::test]
async fn hd10_faults_name_the_user_and_end_every_session() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    port.edit("bob", |s| s.fault = Some(HelperFault::Unreachable));
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::User("bob"),
        &[],
    )
    .await;
    assert_eq!(
        entry(Check::Hd10HelperIntegrity, &doctor),
        [DoctorEntry::naming(DoctorCode::HelperUnreachable, "bob")]
    );
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::HelperUntrusted));
    assert_eq!(
        doctor.enforcement().end_all,
        Some(CloseDetail::HelperUntrusted)
    );
    port.edit("bob", |s| {
        s.fault = None;
        s.wrong_user = true;
    });
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::User("bob"),
        &[],
    )
    .await;
    assert_eq!(
        entry(Check::Hd10HelperIntegrity, &doctor),
        [DoctorEntry::naming(DoctorCode::PeerMismatch, "bob")]
    );
    port.edit("bob", |s| s.wrong_user = false);
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::User("bob"),
        &[],
    )
    .await;
    assert_eq!(doctor.gate("alice"), Ok(()));
    // Service-side HD10 findings name nobody.
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::All,
        &[DoctorCode::PtraceScopeLow],
    )
    .await;
    assert_eq!(
        entry(Check::Hd10HelperIntegrity, &doctor),
        [DoctorEntry::for_code(DoctorCode::PtraceScopeLow)]
    );
    assert_eq!(doctor.gate("bob"), Err(CloseDetail::HelperUntrusted));
}

#[tokio::test]
async fn hd11_blocks_only_its_user_and_places_for_all_block_everyone() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    port.edit("alice", |s| s.hd11.shared_location = true);
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::User("alice"),
        &[],
    )
    .await;
    assert_eq!(
        entry(Check::Hd11SharedLocations, &doctor),
        [DoctorEntry::naming(DoctorCode::SharedLocation, "alice")]
    );
    assert!(
        !doctor.refuses_start(),
        "a location of a session user blocks only it"
    );
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::SharedLocation));
    assert_eq!(doctor.gate("bob"), Ok(()));
    assert_eq!(
        doctor.enforcement(),
        Enforcement {
            end_all: None,
            end_users: vec![("alice".into(), CloseDetail::SharedLocation)],
        }
    );
    port.edit("alice", |s| s.hd11.shared_location = false);
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::User("alice"),
        &[DoctorCode::ProgramLocationUntrusted],
    )
    .await;
    assert_eq!(
        entry(Check::Hd11SharedLocations, &doctor),
        [DoctorEntry::for_code(DoctorCode::ProgramLocationUntrusted)]
    );
    assert!(doctor.refuses_start());
    assert!(!doctor.refuses_running_service());
    assert_eq!(doctor.gate("bob"), Err(CloseDetail::SharedLocation));
    assert_eq!(
        doctor.enforcement().end_all,
        Some(CloseDetail::SharedLocation)
    );
}

#[tokio::test]
async fn the_check_of_the_entries_holds_only_its_user_and_only_a_full_run_clears() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    // alice's run goes on after the full answer (a long-running helper).
    port.edit("alice", |s| {
        s.scan = ScanReport::default();
        s.full_awaited = Some(1);
    });
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    assert_eq!(
        entry(Check::Hd11SharedLocations, &doctor),
        [DoctorEntry::naming(DoctorCode::EntryScanRunning, "alice")]
    );
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::SharedLocation));
    assert_eq!(doctor.gate("bob"), Ok(()), "bob waits only for his own run");
    // The run ends with a finding; the gate's light run learns it.
    port.edit("alice", |s| {
        s.scan = ScanReport {
            awaited: 1,
            finished: 1,
            result: Some(ScanResult::ForeignEntry),
        }
    });
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::User("alice"),
        &[],
    )
    .await;
    assert_eq!(
        entry(Check::Hd11SharedLocations, &doctor),
        [DoctorEntry::naming(DoctorCode::ForeignEntry, "alice")]
    );
    // The entry is removed; light runs never clear the finding.
    port.edit("alice", |s| s.scan.result = Some(ScanResult::ForeignEntry));
    run(&mut doctor, &ctx, &port, RunKind::Light, Scope::All, &[]).await;
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::SharedLocation));
    // A full run on command: until its own run ends the previous result stands.
    port.edit("alice", |s| s.full_awaited = Some(2));
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::SharedLocation));
    port.edit("alice", |s| {
        s.scan = ScanReport {
            awaited: 2,
            finished: 2,
            result: Some(ScanResult::Clean),
        }
    });
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::User("alice"),
        &[],
    )
    .await;
    assert_eq!(doctor.gate("alice"), Ok(()));
    // A timeout names the user.
    port.edit("alice", |s| {
        s.full_awaited = Some(3);
        s.scan = ScanReport {
            awaited: 3,
            finished: 3,
            result: Some(ScanResult::Timeout),
        };
    });
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    assert_eq!(
        entry(Check::Hd11SharedLocations, &doctor),
        [DoctorEntry::naming(DoctorCode::EntryScanTimeout, "alice")]
    );
}

#[tokio::test]
async fn a_working_directory_that_turns_into_another_users_folder_is_shared() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    // alice's /srv/a1 is replaced by a link to bob's /srv/b1 after HD7.
    port.edit("alice", |s| s.ids[0].1 = id(2));
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Light,
        Scope::User("alice"),
        &[],
    )
    .await;
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::SharedLocation));
    assert_eq!(doctor.gate("bob"), Ok(()));
}

#[tokio::test]
async fn helper_side_failures_of_hd3_and_hd8_name_nobody_and_refuse_the_start() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    port.edit("bob", |s| {
        s.passwordless_sudo = true;
        s.reads_state = true;
    });
    let mut doctor = Doctor::new();
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Full,
        Scope::All,
        &[DoctorCode::StateAccessForSessionUser],
    )
    .await;
    assert_eq!(
        entry(Check::Hd3Sudo, &doctor),
        [DoctorEntry::for_code(DoctorCode::PasswordlessSudo)]
    );
    assert_eq!(
        entry(Check::Hd8Separation, &doctor),
        [DoctorEntry::for_code(DoctorCode::StateAccessForSessionUser)],
        "the first code in the order of the list"
    );
    assert!(doctor.refuses_start());
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::PtyFailed));
    let report = bothy_proto::report::Report {
        platform: "linux".into(),
        os_version: "test".into(),
        profiles: doctor.reported_profiles(),
        session_users: doctor.reported_session_users(),
        doctor: doctor.entries(),
        is_server_host: doctor.server_host_detected(),
        require_local_confirm: false,
    };
    assert_eq!(
        report.validate(
            &bothy_proto::report::ReportLimits::default(),
            bothy_proto::report::ReportContext::Control
        ),
        []
    );
}

#[tokio::test]
async fn names_that_cannot_be_reported_are_left_out() {
    let mut config = config();
    config.session_users = vec!["alice".into(), "ALICE".into(), "9bad".into(), "bob".into()];
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    let mut doctor = Doctor::new();
    run(
        &mut doctor,
        &ctx,
        &port,
        RunKind::Full,
        Scope::All,
        &[DoctorCode::SessionUserDuplicate],
    )
    .await;
    let names: Vec<String> = doctor
        .reported_session_users()
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(names, ["alice", "bob"]);
    assert_eq!(
        entry(Check::Hd1User, &doctor),
        [DoctorEntry::for_code(DoctorCode::SessionUserDuplicate)]
    );
}

#[tokio::test]
async fn a_service_side_that_did_not_finish_counts_as_failed() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let port = port();
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, &port, RunKind::Full, Scope::All, &[]).await;
    assert!(!doctor.refuses_start());
    doctor
        .complete(&ctx, &port, RunKind::Light, Scope::All, side(None))
        .await;
    assert!(doctor.refuses_start());
    assert_eq!(doctor.gate("alice"), Err(CloseDetail::PtyFailed));
}

/// A finished service side with `findings`, no server host, no sudo probe
/// still running.
fn side(findings: Option<ServiceFindings>) -> ServiceSide {
    ServiceSide {
        findings,
        server_host: false,
        sudo: None,
        early: Vec::new(),
    }
}

/// How often `user`'s helper got a light request.
fn light_asks(port: &TablePort, user: &str) -> usize {
    port.asked
        .lock()
        .expect("lock")
        .iter()
        .filter(|(name, kind)| name == user && *kind == RequestKind::Light)
        .count()
}

/// After a clean full run, a light run of bob whose helper was asked early
/// (D-707) with the requests `early_accounts` give, while bob's helper found a
/// subscription login; the helper finds none when asked after that. The
/// service side then finishes with the accounts of `findings`.
async fn light_run_with_an_early_answer(port: &TablePort, early_accounts: &[AskedUser]) -> Doctor {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let mut doctor = Doctor::new();
    run(&mut doctor, &ctx, port, RunKind::Full, Scope::All, &[]).await;
    assert_eq!(doctor.gate("bob"), Ok(()));
    port.edit("bob", |s| s.hd6.subscription = true);
    let requests = doctor.requests(
        &ctx,
        early_accounts,
        &[],
        RunKind::Light,
        Scope::User("bob"),
    );
    let early = super::requests::ask_all(port, requests).await;
    port.edit("bob", |s| s.hd6.subscription = false);
    let side = ServiceSide {
        early,
        ..side(Some(findings(&[])))
    };
    doctor
        .complete(&ctx, port, RunKind::Light, Scope::User("bob"), side)
        .await;
    doctor
}

#[tokio::test]
async fn a_light_runs_early_answer_counts_for_the_request_the_service_side_makes() {
    let port = port();
    let doctor = light_run_with_an_early_answer(&port, &findings(&[]).asked).await;
    assert_eq!(light_asks(&port, "bob"), 1, "not asked again");
    assert_eq!(light_asks(&port, "alice"), 0, "out of scope");
    assert_eq!(
        doctor.gate("bob"),
        Err(CloseDetail::SubscriptionLoginDetected)
    );
}

#[tokio::test]
async fn a_light_runs_early_answer_to_another_request_is_asked_again() {
    // bob's entry changed between the early request and the service side's end.
    let mut earlier = findings(&[]).asked;
    earlier[1].entry.home = PathBuf::from("/home/bob-before");
    let port = port();
    let doctor = light_run_with_an_early_answer(&port, &earlier).await;
    assert_eq!(light_asks(&port, "bob"), 2, "asked again");
    assert_eq!(
        doctor.gate("bob"),
        Ok(()),
        "the answer to this run's request counts"
    );
}

#[tokio::test]
async fn a_light_request_carries_no_homes_and_a_full_one_does() {
    let config = config();
    let ctx = ctx(&config, Some(LlmCredentials::Organization));
    let f = findings(&[]);
    let doctor = Doctor::new();
    let light = doctor.requests(&ctx, &f.asked, &f.homes, RunKind::Light, Scope::All);
    let full = doctor.requests(&ctx, &f.asked, &f.homes, RunKind::Full, Scope::All);
    assert_eq!(light.len(), 2);
    assert!(light.iter().all(|(_, r)| r.homes.is_empty()));
    assert!(full.iter().all(|(_, r)| r.homes.len() == 3));
}
