//! The consequences of the last results (spec 2.2, table of checks; 7.4
//! "Gate in operation"): a refused start, the gate before a PTY, and what
//! running sessions suffer.

use bothy_proto::codes::CloseDetail;
use bothy_proto::doctor::{Check, DoctorCode};

use super::findings::Finding;
use super::{Doctor, Enforcement};

impl Doctor {
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
