//! The report (3.5 "Report", "Connected"; 2.2 SR10 and SR12; 10.1).
//!
//! - Checked with [`Report::validate`] in [`ReportContext::Control`]; an
//!   invalid report gets `error {op: report, code: validation_failed, errors}`,
//!   stores nothing and keeps the connection.
//! - Equal to the stored columns: nothing is written.
//! - Otherwise one unit of work writes only the changed `reported_*` columns
//!   (the lists exactly as reported, in their order), raises the host version
//!   once with one `host.updated`, and:
//!   - a changed set of session user names raises the permission version and
//!     ends, with `access_revoked`, every open session whose session user is no
//!     longer reported (SR12);
//!   - `is_server_host` turned on ends every open session of a person who is
//!     not an active owner with `access_revoked` (SR10), without a new rights
//!     version;
//!   - one allow entry `host.connect` only when the server-host flag, the
//!     doctor results or the session users changed: `host_id`,
//!     `failed_checks` (codes), `os_users` (the accounts the doctor entries
//!     name), `added_session_users`, `removed_session_users`,
//!     `is_server_host`.
//! - The first applied report after ready (also one that wrote nothing) makes
//!   the host connected: [`LocalControlLinks::mark_report_applied`], the gauge
//!   and the ephemeral `host.presence_changed {connected: true}`.
//!
//! [`LocalControlLinks::mark_report_applied`]: crate::terminal::links::LocalControlLinks::mark_report_applied

use std::collections::BTreeSet;

use bothy_proto::codes::{CloseCode, CloseReason};
use bothy_proto::control::{ErrorCode, HostOp, OpError, ServerMessage};
use bothy_proto::doctor::DoctorEntry;
use bothy_proto::report::{Report, ReportContext, ReportedProfile, ReportedSessionUser};
use serde_json::Value;
use sqlx::Row;

use super::{ControlConnection, End, LoggedIn, login::end_error, presence};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, OsUserName, TargetKind};
use crate::db::{self, DbError, UnitOfWork};
use crate::hosts::{self, Host, HostError};
use crate::revocation::{EndScope, end};

/// The report as the columns store it.
struct Reported {
    session_users: Value,
    profiles: Value,
    doctor: Value,
    is_server_host: bool,
    require_local_confirm: bool,
    platform: String,
    os_version: String,
}

impl Reported {
    fn of(report: &Report) -> Reported {
        Reported {
            session_users: Value::Array(
                report
                    .session_users
                    .iter()
                    .map(ReportedSessionUser::to_value)
                    .collect(),
            ),
            profiles: Value::Array(
                report
                    .profiles
                    .iter()
                    .map(ReportedProfile::to_value)
                    .collect(),
            ),
            doctor: Value::Array(report.doctor.iter().map(DoctorEntry::to_value).collect()),
            is_server_host: report.is_server_host,
            require_local_confirm: report.require_local_confirm,
            platform: report.platform.clone(),
            os_version: report.os_version.clone(),
        }
    }
}

/// Which columns differ from the stored host.
#[derive(Debug, Default, Clone, Copy)]
struct Changes {
    session_users: bool,
    profiles: bool,
    doctor: bool,
    is_server_host: bool,
    require_local_confirm: bool,
    platform: bool,
    os_version: bool,
}

impl Changes {
    fn between(host: &Host, new: &Reported) -> Changes {
        Changes {
            session_users: host.reported_session_users.as_ref() != Some(&new.session_users),
            profiles: host.reported_profiles.as_ref() != Some(&new.profiles),
            doctor: host.reported_doctor.as_ref() != Some(&new.doctor),
            is_server_host: host.reported_is_server_host != Some(new.is_server_host),
            require_local_confirm: host.reported_require_local_confirm
                != Some(new.require_local_confirm),
            platform: host.reported_platform.as_deref() != Some(new.platform.as_str()),
            os_version: host.reported_os_version.as_deref() != Some(new.os_version.as_str()),
        }
    }

    fn any(&self) -> bool {
        self.session_users
            || self.profiles
            || self.doctor
            || self.is_server_host
            || self.require_local_confirm
            || self.platform
            || self.os_version
    }
}

/// Applies a report of the logged-in connection.
pub(super) async fn apply(
    connection: &ControlConnection,
    session: &mut LoggedIn,
    host: &Host,
    report: &Report,
) -> Result<(), End> {
    let state = &connection.state;
    let limits = hosts::pairing::report_limits(state.config());
    let findings = report.validate(&limits, ReportContext::Control);
    if !findings.is_empty() {
        return connection.send(&ServerMessage::Error(OpError {
            op: HostOp::Report,
            code: ErrorCode::ValidationFailed,
            session_id: None,
            errors: Some(findings),
        }));
    }
    let new = Reported::of(report);
    let first = !session.report_applied;
    let now = state.clock().now_ms();
    if !Changes::between(host, &new).any() {
        if first {
            state.db().publish_ephemeral(presence(host.id, true));
            mark_applied(connection, session);
            // Spec 9: announced after its first report, changed or not (an
            // unchanged report was not announced before, so another node
            // learnt of the connection only at its first heartbeat).
            connection.announce(session).await;
        }
        return Ok(());
    }
    let written = async {
        let mut uow = state.db().begin(now).await?;
        write(&mut uow, host.id, &new, report).await?;
        if first {
            uow.ephemeral(presence(host.id, true));
        }
        uow.commit().await?;
        Ok::<_, HostError>(())
    }
    .await;
    if let Err(error) = written {
        tracing::warn!(%error, "the control connection could not apply a report");
        return Err(End::code(CloseCode::UnknownError));
    }
    if first {
        mark_applied(connection, session);
        connection.announce(session).await;
    }
    Ok(())
}

fn mark_applied(connection: &ControlConnection, session: &mut LoggedIn) {
    connection.state.local_control_links().mark_report_applied(
        session.host_id,
        connection.conn_id,
        connection.state.clock().now_ms(),
    );
    connection.state.metrics().control_hosts_connected().inc();
    session.report_applied = true;
}

/// The writes of a changed report in `uow`.
async fn write(
    uow: &mut UnitOfWork,
    host_id: uuid::Uuid,
    new: &Reported,
    report: &Report,
) -> Result<(), HostError> {
    let host = hosts::load_for_update(uow, host_id).await?;
    let changes = Changes::between(&host, new);
    if !changes.any() {
        return Ok(());
    }
    store_changed_columns(uow, &host, &changes, new).await?;
    let version = hosts::bump_version(uow, host.id).await?;
    hosts::host_updated(uow, host.id, version, host.state, false);

    let old_names: BTreeSet<String> = host
        .reported_session_user_names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let new_names: BTreeSet<String> = report
        .session_users
        .iter()
        .map(|user| user.name.clone())
        .collect();
    let names_changed = old_names != new_names;
    if names_changed {
        end_sessions_of_removed_users(uow, &host, &new_names).await?;
    }
    if new.is_server_host && host.reported_is_server_host != Some(true) {
        end_sessions_of_non_owners(uow, &host).await?;
    }
    if changes.is_server_host || changes.doctor || names_changed {
        audit_connect(uow, &host, new, report, &old_names, &new_names);
    }
    Ok(())
}

/// Writes only the changed `reported_*` columns (the names are fixed texts,
/// never input).
async fn store_changed_columns(
    uow: &mut UnitOfWork,
    host: &Host,
    changes: &Changes,
    new: &Reported,
) -> Result<(), HostError> {
    let mut sets: Vec<&'static str> = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    let mut flags: Vec<bool> = Vec::new();
    for (changed, column, value) in [
        (
            changes.session_users,
            "reported_session_users",
            new.session_users.to_string(),
        ),
        (
            changes.profiles,
            "reported_profiles",
            new.profiles.to_string(),
        ),
        (changes.doctor, "reported_doctor", new.doctor.to_string()),
        (changes.platform, "reported_platform", new.platform.clone()),
        (
            changes.os_version,
            "reported_os_version",
            new.os_version.clone(),
        ),
    ] {
        if changed {
            sets.push(column);
            texts.push(value);
        }
    }
    let mut flag_columns: Vec<&'static str> = Vec::new();
    for (changed, column, value) in [
        (
            changes.is_server_host,
            "reported_is_server_host",
            new.is_server_host,
        ),
        (
            changes.require_local_confirm,
            "reported_require_local_confirm",
            new.require_local_confirm,
        ),
    ] {
        if changed {
            flag_columns.push(column);
            flags.push(value);
        }
    }
    let mut assignments = Vec::new();
    let mut n = 0;
    for column in sets.iter().chain(flag_columns.iter()) {
        n += 1;
        assignments.push(format!("{column} = ${n}"));
    }
    let sql = format!(
        "UPDATE hosts SET {} WHERE id = ${}",
        assignments.join(", "),
        n + 1
    );
    let mut query = sqlx::query(&sql);
    for text in texts {
        query = query.bind(text);
    }
    for flag in flags {
        query = query.bind(flag);
    }
    query
        .bind(db::id_text(&host.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    Ok(())
}

/// The reported session users changed: the permissions' version moves, and
/// every session not closed whose session user is no longer reported ends
/// `access_revoked`.
async fn end_sessions_of_removed_users(
    uow: &mut UnitOfWork,
    host: &Host,
    new_names: &BTreeSet<String>,
) -> Result<(), HostError> {
    crate::permissions::bump_version(uow).await?;
    let rows = sqlx::query(
        "SELECT ts.id, hsu.os_user FROM terminal_sessions ts \
         JOIN host_session_users hsu ON hsu.id = ts.host_session_user_id \
         WHERE ts.host_id = $1 AND ts.state <> 'closed' ORDER BY ts.id",
    )
    .bind(db::id_text(&host.id))
    .fetch_all(uow.conn())
    .await
    .map_err(DbError::from)?;
    for row in &rows {
        let os_user: String = row.try_get("os_user").map_err(DbError::from)?;
        if !new_names.contains(&os_user) {
            let id = db::get_uuid(row, "id")?;
            end(uow, EndScope::Session(id), CloseReason::AccessRevoked, None)
                .await
                .map_err(end_error)?;
        }
    }
    Ok(())
}

/// The host now reports being the server's host: every session not closed
/// of a person who is not an active owner ends `access_revoked`.
async fn end_sessions_of_non_owners(uow: &mut UnitOfWork, host: &Host) -> Result<(), HostError> {
    let rows = sqlx::query(
        "SELECT ts.id FROM terminal_sessions ts \
         JOIN persons p ON p.principal_id = ts.person_id \
         WHERE ts.host_id = $1 AND ts.state <> 'closed' \
         AND NOT (p.role = 'owner' AND p.status = 'active') ORDER BY ts.id",
    )
    .bind(db::id_text(&host.id))
    .fetch_all(uow.conn())
    .await
    .map_err(DbError::from)?;
    for row in &rows {
        let id = db::get_uuid(row, "id")?;
        end(uow, EndScope::Session(id), CloseReason::AccessRevoked, None)
            .await
            .map_err(end_error)?;
    }
    Ok(())
}

/// The audit entry `host.connect` of a report that changed the server-host
/// flag, the doctor's findings or the session users: codes and OS user names
/// only (the rule for names, 10.4).
fn audit_connect(
    uow: &mut UnitOfWork,
    host: &Host,
    new: &Reported,
    report: &Report,
    old_names: &BTreeSet<String>,
    new_names: &BTreeSet<String>,
) {
    let failed: Vec<_> = report
        .doctor
        .iter()
        .filter(|entry| !entry.ok)
        .map(|entry| entry.check)
        .collect();
    let named: Vec<OsUserName> = report
        .doctor
        .iter()
        .filter_map(|entry| entry.session_user.as_deref())
        .filter_map(|name| OsUserName::new(name).ok())
        .collect();
    let added: Vec<OsUserName> = new_names
        .difference(old_names)
        .filter_map(|name| OsUserName::new(name).ok())
        .collect();
    let removed: Vec<OsUserName> = old_names
        .difference(new_names)
        .filter_map(|name| OsUserName::new(name).ok())
        .collect();
    uow.audit(
        AuditEntry::allow(AuditAction::HostConnect, Actor::Host(host.id))
            .target(TargetKind::Host, host.id)
            .details(
                AuditDetails::new()
                    .id("host_id", host.id)
                    .codes("failed_checks", failed)
                    .os_users("os_users", named.iter())
                    .os_users("added_session_users", added.iter())
                    .os_users("removed_session_users", removed.iter())
                    .flag("is_server_host", new.is_server_host),
            ),
    );
}
