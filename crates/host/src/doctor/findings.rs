//! The findings of the last results: every code the service side, HD5 and
//! the helpers' answers give, each with the account it concerns by the rule
//! for names (spec 2.2, "Codes of doctor").

use bothy_proto::control::LlmCredentials;
use bothy_proto::doctor::DoctorCode;

use super::service_side::ForeignHome;
use super::wire::{self, ScanResult};
use super::{Doctor, accounts};

/// One finding: a code, and the account it concerns by the rule for names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Finding {
    pub(super) code: DoctorCode,
    /// The account the local output names.
    pub(super) account: Option<String>,
    /// Whether the report names it too (rule for names); else the report has
    /// the code without a name.
    pub(super) reported: bool,
}

impl Finding {
    pub(super) fn plain(code: DoctorCode) -> Finding {
        Finding {
            code,
            account: None,
            reported: false,
        }
    }

    pub(super) fn named(code: DoctorCode, account: &str) -> Finding {
        Finding {
            code,
            account: Some(account.to_owned()),
            reported: accounts::valid_session_user_name(account),
        }
    }

    pub(super) fn local(code: DoctorCode, account: &str) -> Finding {
        Finding {
            code,
            account: Some(account.to_owned()),
            reported: false,
        }
    }
}

impl Doctor {
    /// Every finding of the last results (module docs).
    pub(super) fn findings(&self) -> Option<Vec<Finding>> {
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
}
