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
//! - Here: the interface of the service and the run (steps 1–4 above); in
//!   private modules beside it the bookkeeping of the results: `hd5` (step
//!   2), `lists` (HD7's lists, step 3, and the profiles after them),
//!   `requests` (the requests of step 4 and their answers), `findings` (the
//!   codes of the last results by the rule for names), `gate` (refused
//!   start, the gate before a PTY, what running sessions suffer) and
//!   `report` (the entries of the report and the local output).

pub mod accounts;
pub mod acl;
mod bounded;
pub mod claude_start;
pub mod command;
pub mod explain;
mod findings;
pub mod fuzzing;
mod gate;
pub mod hd11;
mod hd5;
pub mod hd6;
pub mod helper_side;
mod lists;
pub mod program;
mod report;
mod requests;
pub mod service_side;
pub mod terms;
pub mod wire;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use bothy_proto::codes::CloseDetail;
use bothy_proto::control::LlmCredentials;
use bothy_proto::doctor::DoctorCode;
use bothy_proto::report::ReportedProfile;

use crate::config::HostServiceConfig;

pub use command::{ProbePort, command};
pub use hd5::{is_own_address, url_host_port};
pub use service_side::Places;

use hd5::hd5;
use report::reportable;
use requests::{ask_all, request};
use service_side::{AskedUser, ForeignHome, ServiceFindings, ServiceInputs};
use terms::FileId;
use wire::{CheckRequest, FullAnswer, LightAnswer, RequestKind, ScanResult};

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
/// finish, nothing counts as checked), HD5, the sudo probe of HD3 still
/// running beside the helpers' answers (D-458), and the answers of a light
/// run's helpers, asked beside the service side (D-707).
#[derive(Debug)]
struct ServiceSide {
    findings: Option<ServiceFindings>,
    server_host: bool,
    sudo: Option<tokio::task::JoinHandle<bool>>,
    early: Vec<Asked>,
}

/// One request sent to the helper of a session user, and its answer.
#[derive(Debug)]
struct Asked {
    name: String,
    request: CheckRequest,
    answer: Result<Vec<u8>, HelperFault>,
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
        // A light request needs only HD1's accounts, so a light run asks the
        // helpers as soon as the service side has them, beside its other
        // checks (D-707); an answer counts only if it answers the request the
        // finished service side makes. A full run builds HD7's lists first.
        let (asked_tx, asked_rx) = tokio::sync::oneshot::channel();
        let light = kind == RunKind::Light;
        let service = tokio::task::spawn_blocking(move || {
            service_side::service_checks_but_sudo_then(&inputs, |asked| {
                if light {
                    let _ = asked_tx.send(asked.to_vec());
                }
            })
        });
        let early = async {
            match asked_rx.await {
                Ok(asked) => ask_all(helpers, self.requests(ctx, &asked, &[], kind, scope)).await,
                // A full run, or a service side that ended early.
                Err(_) => Vec::new(),
            }
        };
        let (findings, server_host, early) =
            tokio::join!(service, hd5(ctx.control_peer, ctx.server_url), early);
        let side = ServiceSide {
            findings: findings.ok(),
            server_host,
            sudo: Some(sudo),
            early,
        };
        self.complete(ctx, helpers, kind, scope, side).await;
        self.snapshot() != before
    }

    /// The requests of `kind` to the helpers of `asked` (HD1's session users)
    /// in `scope`; a full run asks every helper.
    fn requests(
        &self,
        ctx: &ServiceContext<'_>,
        asked: &[AskedUser],
        homes: &[ForeignHome],
        kind: RunKind,
        scope: Scope<'_>,
    ) -> Vec<(String, CheckRequest)> {
        let request_kind = match kind {
            RunKind::Full => RequestKind::Full,
            RunKind::Light => RequestKind::Light,
        };
        asked
            .iter()
            .filter(|u| {
                kind == RunKind::Full || scope == Scope::All || scope == Scope::User(&u.name)
            })
            .map(|u| {
                let workdirs = self.users.get(&u.name).map_or_else(Vec::new, |r| {
                    r.workdirs.iter().map(|w| w.path.clone()).collect()
                });
                (
                    u.name.clone(),
                    request(ctx, &self.places, asked, homes, u, request_kind, workdirs),
                )
            })
            .collect()
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
            mut early,
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
        let requests = self.requests(ctx, &findings.asked, &findings.homes, kind, scope);
        // An answer to exactly the request this run makes counts; the rest
        // (a session user whose entry or list changed meanwhile) is asked now.
        let mut answered = Vec::new();
        let mut unasked = Vec::new();
        for (name, request) in requests {
            match early
                .iter()
                .position(|a| a.name == name && a.request == request)
            {
                Some(i) => answered.push(early.swap_remove(i)),
                None => unasked.push((name, request)),
            }
        }
        for asked in answered.into_iter().chain(ask_all(helpers, unasked).await) {
            self.apply(&asked.name, &asked.request, &findings.homes, asked.answer);
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

    fn record(&mut self, name: &str) -> &mut UserRecord {
        self.users.entry(name.to_owned()).or_default()
    }
}

impl Default for Doctor {
    fn default() -> Self {
        Doctor::new()
    }
}

#[cfg(test)]
mod tests;
