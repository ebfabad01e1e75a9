//! What the doctor reports: the entries of the report (one per check, or per
//! named account by the rule for names), the profiles and session users
//! after HD7, HD5, and the lines `bothy-host doctor` prints.

use std::path::PathBuf;

use bothy_proto::doctor::{Check, DoctorCode, DoctorEntry};
use bothy_proto::report::{ReportedProfile, ReportedSessionUser, ReportedWorkdir};

use super::findings::Finding;
use super::{Doctor, accounts, explain};

impl Doctor {
    /// What a change of is reported.
    pub(super) fn snapshot(
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

/// The configured names that may be reported: valid, and the first of every
/// spelling without case.
pub(super) fn reportable(session_users: &[String]) -> Vec<String> {
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
