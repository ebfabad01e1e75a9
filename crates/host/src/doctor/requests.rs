//! The requests to the helpers in scope (a light or full check, or the
//! identities HD7 builds its lists from) and the bookkeeping of their
//! answers, with the check of the entries over runs.

use std::path::PathBuf;
use std::time::Duration;

use super::service_side::{self, AskedUser, ForeignHome};
use super::wire::{self, CheckAnswer, CheckRequest, LightAnswer, Refusal, RequestKind};
use super::{Asked, Doctor, HelperFault, HelperPort, Places, ServiceContext, UserRecord};

impl Doctor {
    /// Takes one answer of a light or full request.
    pub(super) fn apply(
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
}

/// Takes the result of the check of the entries if it is one the user waits for.
fn take_scan(record: &mut UserRecord, light: &LightAnswer) {
    let scan = light.entry_scan;
    if scan.finished > 0 && scan.finished >= record.scan_awaited && record.scan_awaited > 0 {
        record.scan = scan.result;
    }
}

/// The request of `kind` for `user`, one of `asked` (HD1's session users);
/// `homes` are HD9's accounts, which only a full request carries.
pub(super) fn request(
    ctx: &ServiceContext<'_>,
    places: &Places,
    asked: &[AskedUser],
    homes: &[ForeignHome],
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
        others: asked
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
        homes: match kind {
            RequestKind::Full => homes
                .iter()
                .filter(|h| wire::sendable(&h.home))
                .map(|h| h.home.clone())
                .collect(),
            _ => Vec::new(),
        },
        sudo: places.sudo.clone(),
        auth_status_timeout_ms: millis(config.auth_status_timeout),
        entry_scan_timeout_ms: millis(config.entry_scan_timeout),
    }
}

/// Sends every request to the helper of its user at once; each with its
/// answer, in the order of `requests`.
pub(super) async fn ask_all<P: HelperPort>(
    helpers: &P,
    requests: Vec<(String, CheckRequest)>,
) -> Vec<Asked> {
    futures_util::future::join_all(requests.into_iter().map(|(name, request)| async move {
        let answer = helpers.checks(&name, request.encode()).await;
        Asked {
            name,
            request,
            answer,
        }
    }))
    .await
}
