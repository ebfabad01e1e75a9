//! `bothy-host doctor`: the checks HD1–HD11 (spec 2.2, table of checks, "Codes
//! of doctor", rule for names, 7.4), the gate before every PTY ("Gate in
//! operation") and the entries the report carries.
//!
//! INTERFACE CONTRACT (the service codes against these signatures): the service
//! owns one [`Doctor`], runs it at start ([`RunKind::Full`]), before every PTY
//! start for the session user of the token ([`RunKind::Light`] with
//! [`Scope::User`]) and every `host_service.credential_check_interval`
//! ([`RunKind::Light`], [`Scope::All`]), and reads the results through the
//! accessors. The helpers' parts run in the helpers, reached through
//! [`HelperPort`].
//!
//! # How a run goes
//! 1. The service side ([`service_side`], on a blocking thread): HD1, HD2, HD3
//!    of the service user, HD4, HD8's ownership/mode/ACL part, HD10, HD11 at the
//!    places for all, which programs resolve (HD7), the accounts for HD9.
//! 2. HD5 ([`Doctor::server_host_detected`]).
//! 3. Full run only: every helper resolves its configured working directories
//!    and answers their identities; HD7 builds the lists from them (a key that
//!    is no session user, a folder that does not resolve for its user, a folder
//!    under two users: dropped). The lists stay until the next full run.
//! 4. The helpers in scope answer a light or full request ([`wire`],
//!    [`helper_side`]) with the list after HD7. A full request starts the check
//!    of the entries; its result arrives with a later answer and counts only
//!    if that run began with or after the full run that awaits it, so at the
//!    start each user waits for its own run (`entry_scan_running`) and on
//!    command the previous result stands until the new one ends.
//!
//! Before any run every check counts as failed. Helpers outside the scope keep
//! their last answer; a helper that cannot be asked is an HD10 finding naming
//! its user ([`HelperFault`]), and its unanswered checks count as failed.
//!
//! # Layout
//! - [`terms`]: the four terms of 2.2 item 6 (resolution, writable, trusted
//!   owner, chain files); [`acl`]: POSIX ACLs.
//! - [`accounts`]: the user and group database.
//! - [`program`]: `claude_bin`, its search list and interpreter (7.4).
//! - [`service_side`], [`helper_side`]: the two sides; [`hd6`], [`hd11`]: the
//!   helper's HD6 and HD11; [`wire`]: their messages.
//! - [`claude_start`]: the start of the profile claude in the helper.
//! - [`command`]: `bothy-host doctor`, `doctor-probe`, `login-probe`.
//! - [`explain`]: one plain sentence per code for the doctor's output.
//! - [`fuzzing`]: the property of the `doctor_wire` fuzz target.

pub mod accounts;
pub mod acl;
mod bounded;
pub mod claude_start;
pub mod command;
pub mod explain;
pub mod fuzzing;
pub mod hd11;
pub mod hd6;
pub mod helper_side;
pub mod program;
pub mod service_side;
pub mod terms;
pub mod wire;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bothy_proto::codes::CloseDetail;
use bothy_proto::control::LlmCredentials;
use bothy_proto::doctor::{Check, DoctorCode, DoctorEntry};
use bothy_proto::report::{ProfileKind, ReportedProfile, ReportedSessionUser, ReportedWorkdir};

use crate::config::HostServiceConfig;

pub use command::{ProbePort, command};
pub use service_side::Places;

use service_side::{AskedUser, ForeignHome, ServiceFindings, ServiceInputs};
use terms::FileId;
use wire::{CheckAnswer, CheckRequest, FullAnswer, LightAnswer, Refusal, RequestKind, ScanResult};

/// Full run (start of the service, `bothy-host doctor`) or light run (before a
/// PTY, periodic): HD6 and HD11 without the check of the entries, plus the
/// service's own checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// Every check, with HD11's check of the entries.
    Full,
    /// HD6 and HD11 without entries in the helpers, plus the service's checks.
    Light,
}

/// Which helpers a run asks; the others keep their last answer. A full run
/// asks every helper whatever the scope (HD7 compares all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every session user's helper.
    All,
    /// Only this session user's helper (the gate before its PTY).
    User(&'a str),
}

/// Why the helper of a session user could not be asked: these are HD10 findings
/// naming that session user (D-M2-42-11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HelperFault {
    /// The peer of the channel is not the helper the service manager reports.
    #[error("peer_mismatch")]
    PeerMismatch,
    /// No helper answered on the endpoint.
    #[error("helper_unreachable")]
    Unreachable,
    /// The platform cannot prove the peer.
    #[error("peer_check_unavailable")]
    PeerCheckUnavailable,
}

impl HelperFault {
    fn code(self) -> DoctorCode {
        match self {
            HelperFault::PeerMismatch => DoctorCode::PeerMismatch,
            HelperFault::Unreachable => DoctorCode::HelperUnreachable,
            HelperFault::PeerCheckUnavailable => DoctorCode::PeerCheckUnavailable,
        }
    }
}

/// The service's way to the helpers' main channels.
pub trait HelperPort: Send + Sync {
    /// Sends `request` (this module's encoding) to the helper of `user` and
    /// returns its answer.
    fn checks(
        &self,
        user: &str,
        request: Vec<u8>,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, HelperFault>> + Send;
}

/// What the service knows that the checks need.
#[derive(Debug, Clone)]
pub struct ServiceContext<'a> {
    /// The configuration read at start.
    pub config: &'a HostServiceConfig,
    /// The configuration file (HD10 checks it and its folders), when known.
    pub config_path: Option<&'a Path>,
    /// The declaration from the last stored `ready`; `None` = unknown (D-M2-42-15).
    pub declaration: Option<LlmCredentials>,
    /// The server URL of `pairing.json` (HD5), if paired.
    pub server_url: Option<&'a str>,
    /// The peer address of the control connection, when connected (HD5: a
    /// local peer is the server host too, 2.3).
    pub control_peer: Option<IpAddr>,
    /// Former session users: bound in `bindings.json`, no longer configured (HD9).
    pub former_session_users: Vec<String>,
}

/// What a running session must suffer after a run (7.4 "Gate in operation").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enforcement {
    /// Every running session ends with host_policy_violation and this detail.
    pub end_all: Option<CloseDetail>,
    /// The sessions of these session users end with host_policy_violation and
    /// the detail.
    pub end_users: Vec<(String, CloseDetail)>,
}

/// How long HD5 waits for the name of the server to resolve.
const HD5_LOOKUP_BOUND: Duration = Duration::from_secs(5);

/// A working directory in a list after HD7.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListedWorkdir {
    /// As configured (the helper resolves it again at every check and start).
    path: PathBuf,
    /// What the apps show.
    display_name: String,
    /// Its identity when HD7 built the list.
    id: FileId,
}

/// What the doctor knows of one session user's helper.
#[derive(Debug, Clone, Default)]
struct UserRecord {
    /// The last ask failed.
    fault: Option<HelperFault>,
    /// The last light part (HD6, HD11, identities).
    light: Option<LightAnswer>,
    /// The last full part (HD3, HD8, HD9, HD10).
    full: Option<FullAnswer>,
    /// HD9's accounts as sent with the last full request.
    homes: Vec<ForeignHome>,
    /// The run of the check of the entries the last full run waits for.
    scan_awaited: u64,
    /// The last result that counts.
    scan: Option<ScanResult>,
    /// The list after HD7.
    workdirs: Vec<ListedWorkdir>,
    /// A working directory now resolves into a folder of another user's list.
    drift: bool,
}

/// One finding: a code, and the account it concerns by the rule for names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Finding {
    code: DoctorCode,
    /// The account the local output names.
    account: Option<String>,
    /// Whether the report names it too (rule for names); else the report has
    /// the code without a name.
    reported: bool,
}

impl Finding {
    fn plain(code: DoctorCode) -> Finding {
        Finding {
            code,
            account: None,
            reported: false,
        }
    }

    fn named(code: DoctorCode, account: &str) -> Finding {
        Finding {
            code,
            account: Some(account.to_owned()),
            reported: accounts::valid_session_user_name(account),
        }
    }

    fn local(code: DoctorCode, account: &str) -> Finding {
        Finding {
            code,
            account: Some(account.to_owned()),
            reported: false,
        }
    }
}

/// The doctor of the service, holding the last results.
#[derive(Debug)]
pub struct Doctor {
    places: Places,
    /// `None` until the first run.
    service: Option<ServiceFindings>,
    server_host: bool,
    declaration: Option<LlmCredentials>,
    /// Per session user whose helper is asked.
    users: BTreeMap<String, UserRecord>,
    /// The order of the configuration, and the names that may be reported.
    reportable_users: Vec<String>,
    /// A working directory was dropped by the last full run.
    workdir_dropped: bool,
    profiles: Vec<ReportedProfile>,
    claude_unavailable: bool,
    profile_dropped: bool,
}

/// What the service side of a run found: its findings (`None`: it did not
/// finish, nothing counts as checked), HD5, and the sudo probe of HD3 still
/// running beside the helpers' answers (D-458).
#[derive(Debug)]
struct ServiceSide {
    findings: Option<ServiceFindings>,
    server_host: bool,
    sudo: Option<tokio::task::JoinHandle<bool>>,
}

impl Doctor {
    /// A doctor before any run (every check counts as not run: failed).
    pub fn new() -> Doctor {
        Doctor::with_places(Places::default())
    }

    /// A doctor that looks at `places` instead of the host's own.
    pub fn with_places(places: Places) -> Doctor {
        Doctor {
            places,
            service: None,
            server_host: false,
            declaration: None,
            users: BTreeMap::new(),
            reportable_users: Vec::new(),
            workdir_dropped: false,
            profiles: Vec::new(),
            claude_unavailable: false,
            profile_dropped: false,
        }
    }

    /// Runs the checks of `kind` for `scope`. Returns whether the result changed
    /// (every change sends report).
    pub async fn run<P: HelperPort>(
        &mut self,
        ctx: &ServiceContext<'_>,
        helpers: &P,
        kind: RunKind,
        scope: Scope<'_>,
    ) -> bool {
        let before = self.snapshot();
        let inputs = ServiceInputs {
            config: ctx.config.clone(),
            config_path: ctx.config_path.map(Path::to_owned),
            former: ctx.former_session_users.clone(),
            places: self.places.clone(),
        };
        // sudo (HD3 of the service user), the rest of the service side and
        // the lookup of HD5 run side by side, and sudo beside the helpers'
        // answers too: the gate before a PTY waits for the slowest of them,
        // not for their sum (issue 20).
        let sudo = tokio::task::spawn_blocking({
            let inputs = inputs.clone();
            move || service_side::service_sudo_passwordless(&inputs)
        });
        let service =
            tokio::task::spawn_blocking(move || service_side::service_checks_but_sudo(&inputs));
        let (findings, server_host) = tokio::join!(service, hd5(ctx));
        let side = ServiceSide {
            findings: findings.ok(),
            server_host,
            sudo: Some(sudo),
        };
        self.complete(ctx, helpers, kind, scope, side).await;
        self.snapshot() != before
    }

    /// The run after the service side: the helpers and the bookkeeping.
    async fn complete<P: HelperPort>(
        &mut self,
        ctx: &ServiceContext<'_>,
        helpers: &P,
        kind: RunKind,
        scope: Scope<'_>,
        side: ServiceSide,
    ) {
        let ServiceSide {
            findings,
            server_host,
            sudo,
        } = side;
        self.server_host = server_host;
        self.declaration = ctx.declaration;
        let Some(mut findings) = findings else {
            // The service side did not finish: nothing counts as checked.
            self.service = None;
            return;
        };
        self.users
            .retain(|name, _| findings.asked.iter().any(|u| &u.name == name));
        for user in &findings.asked {
            self.users.entry(user.name.clone()).or_default();
        }
        self.reportable_users = reportable(&ctx.config.session_users);
        if kind == RunKind::Full {
            self.build_lists(ctx, &findings, helpers).await;
        }
        let asked: Vec<&AskedUser> = findings
            .asked
            .iter()
            .filter(|u| {
                kind == RunKind::Full || scope == Scope::All || scope == Scope::User(&u.name)
            })
            .collect();
        let request_kind = match kind {
            RunKind::Full => RequestKind::Full,
            RunKind::Light => RequestKind::Light,
        };
        let requests: Vec<(String, CheckRequest)> = asked
            .iter()
            .map(|u| {
                let workdirs = self.users.get(&u.name).map_or_else(Vec::new, |r| {
                    r.workdirs.iter().map(|w| w.path.clone()).collect()
                });
                (
                    u.name.clone(),
                    request(ctx, &self.places, &findings, u, request_kind, workdirs),
                )
            })
            .collect();
        let answers = futures_util::future::join_all(
            requests
                .iter()
                .map(|(name, req)| helpers.checks(name, req.encode())),
        )
        .await;
        for ((name, req), answer) in requests.iter().zip(answers) {
            self.apply(name, req, &findings.homes, answer);
        }
        self.drift();
        self.finish_profiles(ctx, &findings);
        if let Some(sudo) = sudo {
            match sudo.await {
                Ok(true) => findings.codes.push(DoctorCode::PasswordlessSudo),
                Ok(false) => {}
                Err(_) => {
                    // HD3 did not finish: nothing counts as checked.
                    self.service = None;
                    return;
                }
            }
        }
        self.service = Some(findings);
    }

    /// HD7's lists from the identities every helper reports for its configured
    /// working directories.
    async fn build_lists<P: HelperPort>(
        &mut self,
        ctx: &ServiceContext<'_>,
        findings: &ServiceFindings,
        helpers: &P,
    ) {
        let config = ctx.config;
        let mut dropped = config
            .claude_workdirs
            .iter()
            .any(|w| !w.workdirs.is_empty() && !findings.asked.iter().any(|u| u.name == w.user));
        let requests: Vec<(String, CheckRequest)> = findings
            .asked
            .iter()
            .map(|u| {
                let configured = config.workdirs_of(&u.name);
                let workdirs = configured.iter().map(|w| w.path.clone()).collect();
                (
                    u.name.clone(),
                    request(
                        ctx,
                        &self.places,
                        findings,
                        u,
                        RequestKind::Identities,
                        workdirs,
                    ),
                )
            })
            .collect();
        let answers = futures_util::future::join_all(
            requests
                .iter()
                .map(|(name, req)| helpers.checks(name, req.encode())),
        )
        .await;
        let mut ids: HashMap<String, Vec<Option<FileId>>> = HashMap::new();
        for ((name, req), answer) in requests.iter().zip(answers) {
            let got = match answer.map(|bytes| CheckAnswer::decode(&bytes)) {
                Ok(Ok(CheckAnswer::Identities(list))) if list.len() == req.workdirs.len() => list,
                Ok(Ok(CheckAnswer::Refused(Refusal::WrongUser))) => {
                    self.record(name).fault = Some(HelperFault::PeerMismatch);
                    vec![None; req.workdirs.len()]
                }
                Err(fault) => {
                    self.record(name).fault = Some(fault);
                    vec![None; req.workdirs.len()]
                }
                Ok(_) => {
                    self.record(name).fault = Some(HelperFault::Unreachable);
                    vec![None; req.workdirs.len()]
                }
            };
            ids.insert(name.clone(), got);
        }
        let mut owners: HashMap<FileId, HashSet<&str>> = HashMap::new();
        for (name, list) in &ids {
            for id in list.iter().flatten() {
                owners.entry(*id).or_default().insert(name.as_str());
            }
        }
        let mut lists: Vec<(String, Vec<ListedWorkdir>)> = Vec::new();
        for user in &findings.asked {
            let configured = config.workdirs_of(&user.name);
            let list = ids.get(&user.name).cloned().unwrap_or_default();
            let mut kept = Vec::new();
            for (workdir, id) in configured.iter().zip(list) {
                match id {
                    Some(id) if owners.get(&id).is_some_and(|o| o.len() == 1) => {
                        kept.push(ListedWorkdir {
                            path: workdir.path.clone(),
                            display_name: workdir.display_name.clone(),
                            id,
                        });
                    }
                    _ => dropped = true,
                }
            }
            lists.push((user.name.clone(), kept));
        }
        for (name, list) in lists {
            self.record(&name).workdirs = list;
        }
        self.workdir_dropped = dropped;
    }

    fn record(&mut self, name: &str) -> &mut UserRecord {
        self.users.entry(name.to_owned()).or_default()
    }

    /// Takes one answer of a light or full request.
    fn apply(
        &mut self,
        name: &str,
        req: &CheckRequest,
        homes: &[ForeignHome],
        answer: Result<Vec<u8>, HelperFault>,
    ) {
        let sent_homes: Vec<ForeignHome> = homes
            .iter()
            .filter(|h| wire::sendable(&h.home))
            .cloned()
            .collect();
        let record = self.record(name);
        let bytes = match answer {
            Ok(bytes) => bytes,
            Err(fault) => {
                record.fault = Some(fault);
                return;
            }
        };
        let fits = |light: &LightAnswer| light.workdirs.len() == req.workdirs.len();
        match (req.kind, CheckAnswer::decode(&bytes)) {
            (RequestKind::Light, Ok(CheckAnswer::Light(light))) if fits(&light) => {
                record.fault = None;
                take_scan(record, &light);
                record.light = Some(light);
            }
            (RequestKind::Full, Ok(CheckAnswer::Full(full)))
                if fits(&full.light)
                    && full.listable_homes.iter().all(|i| *i < req.homes.len()) =>
            {
                record.fault = None;
                record.scan_awaited = full.light.entry_scan.awaited;
                take_scan(record, &full.light);
                record.light = Some(full.light.clone());
                record.homes = sent_homes;
                record.full = Some(full);
            }
            (_, Ok(CheckAnswer::Refused(Refusal::WrongUser))) => {
                record.fault = Some(HelperFault::PeerMismatch);
            }
            _ => record.fault = Some(HelperFault::Unreachable),
        }
    }

    /// HD11 for a working directory that resolves now into a folder of another
    /// user's list (HD7 built the lists earlier).
    fn drift(&mut self) {
        let listed: Vec<(String, FileId)> = self
            .users
            .iter()
            .flat_map(|(name, r)| r.workdirs.iter().map(move |w| (name.clone(), w.id)))
            .collect();
        for (name, record) in &mut self.users {
            let Some(light) = &record.light else { continue };
            record.drift = record
                .workdirs
                .iter()
                .zip(&light.workdirs)
                .any(|(listed_dir, now)| match now {
                    Some(now) if *now != listed_dir.id => {
                        listed.iter().any(|(other, id)| other != name && id == now)
                    }
                    _ => false,
                });
        }
    }

    /// The profiles after HD7 (11.1).
    fn finish_profiles(&mut self, ctx: &ServiceContext<'_>, findings: &ServiceFindings) {
        let any_workdir = self.users.values().any(|r| !r.workdirs.is_empty());
        let mut profiles = Vec::new();
        let mut claude_unavailable = false;
        let mut profile_dropped = false;
        for (i, profile) in ctx.config.profiles.iter().enumerate() {
            let keep = match profile.kind {
                ProfileKind::Shell => true,
                ProfileKind::Command => {
                    let present = findings.program_present.get(i).copied().unwrap_or(false);
                    profile_dropped |= !present;
                    present
                }
                ProfileKind::Claude => match ctx.declaration {
                    Some(LlmCredentials::Organization) => {
                        let usable = findings.claude_usable && any_workdir;
                        claude_unavailable |= !usable;
                        usable
                    }
                    Some(LlmCredentials::Personal) => {
                        claude_unavailable |= !any_workdir;
                        any_workdir
                    }
                    Some(LlmCredentials::None) | None => false,
                },
            };
            if keep {
                profiles.push(ReportedProfile {
                    name: profile.name.clone(),
                    display_name: profile.display_name.clone(),
                    kind: profile.kind,
                });
            }
        }
        self.profiles = profiles;
        self.claude_unavailable = claude_unavailable;
        self.profile_dropped = profile_dropped;
    }

    /// What a change of is reported.
    fn snapshot(
        &self,
    ) -> (
        Vec<DoctorEntry>,
        Vec<ReportedProfile>,
        Vec<ReportedSessionUser>,
        bool,
    ) {
        (
            self.entries(),
            self.reported_profiles(),
            self.reported_session_users(),
            self.server_host_detected(),
        )
    }

    /// Every finding of the last results (module docs).
    fn findings(&self) -> Option<Vec<Finding>> {
        let service = self.service.as_ref()?;
        let mut out: Vec<Finding> = service.codes.iter().copied().map(Finding::plain).collect();
        if self.server_host {
            out.push(Finding::plain(DoctorCode::ServerHostDetected));
        }
        let declaration = self.declaration;
        let unchecked = !service.claude_usable
            || self
                .users
                .values()
                .any(|r| r.light.as_ref().is_some_and(|l| l.hd6.unchecked));
        if unchecked && declaration != Some(LlmCredentials::Personal) {
            out.push(Finding::plain(DoctorCode::AuthStatusUnchecked));
        }
        if self.workdir_dropped {
            out.push(Finding::plain(DoctorCode::WorkdirDropped));
        }
        if self.claude_unavailable {
            out.push(Finding::plain(DoctorCode::ClaudeProfileUnavailable));
        }
        if self.profile_dropped {
            out.push(Finding::plain(DoctorCode::ProfileDropped));
        }
        let mut listable: Vec<ForeignHome> = Vec::new();
        for (name, record) in &self.users {
            if let Some(fault) = record.fault {
                out.push(Finding::named(fault.code(), name));
            }
            // HD6
            let hd6 = record.light.as_ref().map(|l| l.hd6);
            let (subscription, unknown) = match hd6 {
                Some(h) => (h.subscription, h.status_unknown),
                None => (false, true),
            };
            match declaration {
                Some(LlmCredentials::Personal) => {}
                Some(LlmCredentials::None | LlmCredentials::Organization) => {
                    if subscription {
                        out.push(Finding::named(DoctorCode::SubscriptionLoginDetected, name));
                    } else if unknown {
                        out.push(Finding::named(DoctorCode::AuthStatusUnknown, name));
                    }
                }
                None => {
                    if subscription || unknown {
                        out.push(Finding::local(DoctorCode::DeclarationUnknown, name));
                    }
                }
            }
            // HD3, HD8, HD9, HD10 of the helper
            match &record.full {
                Some(full) => {
                    if full.passwordless_sudo {
                        out.push(Finding::plain(DoctorCode::PasswordlessSudo));
                    }
                    if full.reads_state {
                        out.push(Finding::plain(DoctorCode::HelperReadsState));
                    }
                    if full.dumpable {
                        out.push(Finding::plain(DoctorCode::HelperUnprotected));
                    }
                    for i in &full.listable_homes {
                        if let Some(home) = record.homes.get(*i)
                            && !listable.iter().any(|h| h.name == home.name)
                        {
                            listable.push(home.clone());
                        }
                    }
                }
                None => {
                    out.push(Finding::plain(DoctorCode::PasswordlessSudo));
                    out.push(Finding::plain(DoctorCode::HelperReadsState));
                    out.push(Finding::plain(DoctorCode::ForeignHomeListable));
                }
            }
            // HD11 of the user
            if let Some(light) = &record.light {
                if light.hd11.home_unresolvable {
                    out.push(Finding::named(DoctorCode::HomeUnresolvable, name));
                }
                if light.hd11.shared_location || record.drift {
                    out.push(Finding::named(DoctorCode::SharedLocation, name));
                }
            }
            match record.scan {
                Some(ScanResult::Clean) => {}
                Some(ScanResult::ForeignEntry) => {
                    out.push(Finding::named(DoctorCode::ForeignEntry, name));
                }
                Some(ScanResult::Timeout) => {
                    out.push(Finding::named(DoctorCode::EntryScanTimeout, name));
                }
                None => out.push(Finding::named(DoctorCode::EntryScanRunning, name)),
            }
        }
        // Homes not sent (not UTF-8) cannot be tested: they count as listable.
        for home in service.homes.iter().filter(|h| !wire::sendable(&h.home)) {
            if !listable.iter().any(|h| h.name == home.name) {
                listable.push(home.clone());
            }
        }
        for home in listable {
            if home.former {
                out.push(Finding::named(DoctorCode::ForeignHomeListable, &home.name));
            } else {
                out.push(Finding::local(DoctorCode::ForeignHomeListable, &home.name));
            }
        }
        Some(out)
    }

    /// The entries of the report: one per check, or per named account.
    pub fn entries(&self) -> Vec<DoctorEntry> {
        let Some(findings) = self.findings() else {
            return Check::ALL
                .into_iter()
                .map(|check| DoctorEntry::for_code(check.codes()[0]))
                .collect();
        };
        let mut out = Vec::new();
        for check in Check::ALL {
            let of_check: Vec<&Finding> = findings
                .iter()
                .filter(|f| f.code.check() == check)
                .collect();
            let failures: Vec<&Finding> = of_check
                .iter()
                .copied()
                .filter(|f| !f.code.is_warning())
                .collect();
            if failures.is_empty() {
                let warnings: Vec<DoctorCode> = of_check.iter().map(|f| f.code).collect();
                out.push(match check.first_code(&warnings) {
                    Some(code) => DoctorEntry::for_code(code),
                    None => DoctorEntry::passed(check),
                });
                continue;
            }
            let unnamed: Vec<DoctorCode> = failures
                .iter()
                .filter(|f| !f.reported)
                .map(|f| f.code)
                .collect();
            if let Some(code) = check.first_code(&unnamed) {
                out.push(DoctorEntry::for_code(code));
            }
            let mut names: Vec<&str> = Vec::new();
            for f in failures.iter().filter(|f| f.reported) {
                if let Some(name) = f.account.as_deref()
                    && !names.iter().any(|n| n.eq_ignore_ascii_case(name))
                {
                    names.push(name);
                }
            }
            for name in names {
                let codes: Vec<DoctorCode> = failures
                    .iter()
                    .filter(|f| {
                        f.reported
                            && f.account
                                .as_deref()
                                .is_some_and(|a| a.eq_ignore_ascii_case(name))
                    })
                    .map(|f| f.code)
                    .collect();
                if let Some(code) = check.first_code(&codes) {
                    out.push(DoctorEntry::naming(code, name));
                }
            }
        }
        out
    }

    /// Whether the last run refuses the start of the service.
    pub fn refuses_start(&self) -> bool {
        let Some(findings) = self.findings() else {
            return true;
        };
        findings.iter().any(refuses_start)
    }

    /// Whether the last run found a violation with the consequence "Start
    /// refused" other than HD6, HD10 and HD11, which have their own
    /// consequence during operation: after `bothy-host doctor` through the
    /// running service, the service then exits as with a refused start (2.2,
    /// "Output on the host").
    pub fn refuses_running_service(&self) -> bool {
        let Some(findings) = self.findings() else {
            return true;
        };
        findings.iter().any(|f| {
            refuses_start(f)
                && !matches!(
                    f.code.check(),
                    Check::Hd6LlmLogin | Check::Hd10HelperIntegrity | Check::Hd11SharedLocations
                )
        })
    }

    /// The gate before a PTY of `user` (after a light run for it): `Err` is the
    /// `close_detail` of the `open_failed`.
    pub fn gate(&self, user: &str) -> Result<(), CloseDetail> {
        let Some(findings) = self.findings() else {
            return Err(CloseDetail::PtyFailed);
        };
        let failed = |f: &&Finding| !f.code.is_warning();
        let failures: Vec<&Finding> = findings.iter().filter(failed).collect();
        if failures
            .iter()
            .any(|f| f.code.check() == Check::Hd10HelperIntegrity)
        {
            return Err(CloseDetail::HelperUntrusted);
        }
        if failures
            .iter()
            .any(|f| f.code.check() == Check::Hd6LlmLogin)
        {
            return Err(CloseDetail::SubscriptionLoginDetected);
        }
        if failures.iter().any(|f| place_for_all(f.code)) {
            return Err(CloseDetail::SharedLocation);
        }
        if failures.iter().any(|f| {
            f.code.check() == Check::Hd11SharedLocations && f.account.as_deref() == Some(user)
        }) {
            return Err(CloseDetail::SharedLocation);
        }
        if failures.iter().any(|f| refuses_start(f)) || !self.users.contains_key(user) {
            return Err(CloseDetail::PtyFailed);
        }
        Ok(())
    }

    /// What the running sessions suffer after the last run.
    pub fn enforcement(&self) -> Enforcement {
        let Some(findings) = self.findings() else {
            return Enforcement {
                end_all: Some(CloseDetail::HelperUntrusted),
                end_users: Vec::new(),
            };
        };
        let failures: Vec<&Finding> = findings.iter().filter(|f| !f.code.is_warning()).collect();
        let end_all = if failures
            .iter()
            .any(|f| f.code.check() == Check::Hd10HelperIntegrity)
        {
            Some(CloseDetail::HelperUntrusted)
        } else if failures
            .iter()
            .any(|f| f.code.check() == Check::Hd6LlmLogin)
        {
            Some(CloseDetail::SubscriptionLoginDetected)
        } else if failures.iter().any(|f| place_for_all(f.code)) {
            Some(CloseDetail::SharedLocation)
        } else {
            None
        };
        let mut end_users: Vec<(String, CloseDetail)> = Vec::new();
        for f in &failures {
            if f.code.check() == Check::Hd11SharedLocations
                && let Some(name) = &f.account
                && !end_users.iter().any(|(n, _)| n == name)
            {
                end_users.push((name.clone(), CloseDetail::SharedLocation));
            }
        }
        Enforcement { end_all, end_users }
    }

    /// Whether HD5 detected that this host runs the server (2.3). Before any run
    /// it counts as detected (sessions only for owners).
    pub fn server_host_detected(&self) -> bool {
        self.service.is_none() || self.server_host
    }

    /// The profiles the host offers after HD7.
    pub fn reported_profiles(&self) -> Vec<ReportedProfile> {
        self.profiles.clone()
    }

    /// The session users with the display names of their working directories
    /// after HD7, in the order of the configuration. A name that cannot be a
    /// session user name, or that repeats an earlier one without regard to
    /// case, is not reported (HD1 refuses the start).
    pub fn reported_session_users(&self) -> Vec<ReportedSessionUser> {
        self.reportable_users
            .iter()
            .map(|name| ReportedSessionUser {
                name: name.clone(),
                workdirs: self.users.get(name).map_or_else(Vec::new, |r| {
                    r.workdirs
                        .iter()
                        .map(|w| ReportedWorkdir {
                            display_name: w.display_name.clone(),
                        })
                        .collect()
                }),
            })
            .collect()
    }

    /// The working directory `index` of `user`'s list after HD7 (the `wdi` of a
    /// token), as configured: the `pty.start` names this path, and the helper
    /// starts only when it resolves to the identity of its last check (7.4).
    pub fn workdir(&self, user: &str, index: usize) -> Option<PathBuf> {
        self.users
            .get(user)?
            .workdirs
            .get(index)
            .map(|w| w.path.clone())
    }

    /// The lines `bothy-host doctor` prints: per check its result and code, for
    /// HD6, HD10 and HD11 the accounts by the rule for names, for HD9 every
    /// account whose home can be listed; never content, paths or values.
    pub fn local_output(&self) -> Vec<String> {
        let entries = self.entries();
        let findings = self.findings().unwrap_or_default();
        let mut lines = Vec::new();
        for check in Check::ALL {
            let of_check: Vec<&DoctorEntry> = entries.iter().filter(|e| e.check == check).collect();
            let failed = of_check.iter().any(|e| !e.ok);
            let codes: Vec<DoctorCode> = of_check.iter().filter_map(|e| e.code).collect();
            let code = if failed {
                let failures: Vec<DoctorCode> =
                    codes.iter().copied().filter(|c| !c.is_warning()).collect();
                check.first_code(&failures)
            } else {
                check.first_code(&codes)
            };
            let result = match (failed, code) {
                (true, Some(code)) => format!("failed {code}"),
                (true, None) => "failed".to_owned(),
                (false, Some(code)) => format!("passed, warning {code}"),
                (false, None) => "passed".to_owned(),
            };
            lines.push(format!("HD{} {check}: {result}", check.number()));
            // What it means and what to do (issue 16 item 10); the code stays
            // on the line above for whoever reads the codes.
            if let Some(code) = code {
                lines.push(format!("  hint: {}", explain::sentence(code)));
            }
            let mut named: Vec<(&str, DoctorCode)> = Vec::new();
            for f in findings.iter().filter(|f| f.code.check() == check) {
                let Some(name) = f.account.as_deref() else {
                    continue;
                };
                if !named.iter().any(|(n, c)| *n == name && *c == f.code) {
                    named.push((name, f.code));
                }
            }
            for (name, code) in named {
                match check {
                    Check::Hd9ForeignHomes => {
                        lines.push(format!("  user {name}: home can be listed"))
                    }
                    _ => lines.push(format!("  session user {name}: {code}")),
                }
            }
        }
        lines
    }
}

impl Default for Doctor {
    fn default() -> Self {
        Doctor::new()
    }
}

/// Whether a code is HD11 at a place for all.
fn place_for_all(code: DoctorCode) -> bool {
    matches!(
        code,
        DoctorCode::ProgramLocationUntrusted | DoctorCode::DriveRootWritable
    )
}

/// Whether a finding refuses the start (table of checks): every failure except
/// HD11 at a location of a session user, which blocks only that user.
fn refuses_start(f: &Finding) -> bool {
    !f.code.is_warning() && (f.code.check() != Check::Hd11SharedLocations || place_for_all(f.code))
}

/// Takes the result of the check of the entries if it is one the user waits for.
fn take_scan(record: &mut UserRecord, light: &LightAnswer) {
    let scan = light.entry_scan;
    if scan.finished > 0 && scan.finished >= record.scan_awaited && record.scan_awaited > 0 {
        record.scan = scan.result;
    }
}

/// The configured names that may be reported: valid, and the first of every
/// spelling without case.
fn reportable(session_users: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in session_users {
        if accounts::valid_session_user_name(name)
            && !out.iter().any(|n| n.eq_ignore_ascii_case(name))
        {
            out.push(name.clone());
        }
    }
    out
}

/// The request of `kind` for `user`.
fn request(
    ctx: &ServiceContext<'_>,
    places: &Places,
    findings: &ServiceFindings,
    user: &AskedUser,
    kind: RequestKind,
    workdirs: Vec<PathBuf>,
) -> CheckRequest {
    let config = ctx.config;
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    CheckRequest {
        kind,
        uid: user.entry.uid,
        home: user.entry.home.clone(),
        shell: user.entry.shell.clone(),
        others: findings
            .asked
            .iter()
            .filter(|o| o.name != user.name)
            .map(|o| o.account.clone())
            .collect(),
        declaration: ctx.declaration,
        claude_bin: config.claude_bin.clone().filter(|p| wire::sendable(p)),
        search_tail: places.search_tail.clone(),
        workdirs,
        state_dir: config.state_dir.clone(),
        key_files: service_side::KEY_FILES
            .iter()
            .map(|f| config.state_dir.join(f))
            .collect(),
        homes: findings
            .homes
            .iter()
            .filter(|h| wire::sendable(&h.home))
            .map(|h| h.home.clone())
            .collect(),
        sudo: places.sudo.clone(),
        auth_status_timeout_ms: millis(config.auth_status_timeout),
        entry_scan_timeout_ms: millis(config.entry_scan_timeout),
    }
}

/// HD5 (2.3): the host of `server_url` resolves to an address of an own
/// interface or to loopback, or the peer of the control connection is local.
async fn hd5(ctx: &ServiceContext<'_>) -> bool {
    if ctx.control_peer.is_some_and(is_own_address) {
        return true;
    }
    let Some((host, port)) = ctx.server_url.and_then(url_host_port) else {
        return false;
    };
    let lookup = tokio::task::spawn_blocking(move || {
        use std::net::ToSocketAddrs;
        (host.as_str(), port)
            .to_socket_addrs()
            .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<_>>())
            .unwrap_or_default()
    });
    match tokio::time::timeout(HD5_LOOKUP_BOUND, lookup).await {
        Ok(Ok(addrs)) => addrs.into_iter().any(is_own_address),
        _ => false,
    }
}

/// Whether `ip` is loopback or an address of one of this host's interfaces.
pub fn is_own_address(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        return false;
    };
    interfaces.into_iter().any(|interface| {
        interface.address.is_some_and(|address| {
            address
                .as_sockaddr_in()
                .map(|a| IpAddr::V4(a.ip()))
                .or_else(|| address.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
                == Some(ip)
        })
    })
}

/// Host and port of an `https://` (or `http://`, `wss://`, `ws://`) URL.
pub fn url_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme {
        "https" | "wss" => 443,
        "http" | "ws" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default_port,
    };
    Some((host.to_owned(), port))
}

#[cfg(test)]
mod tests;
