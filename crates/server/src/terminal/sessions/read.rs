//! The reads of sessions: one session, and the keyset-paged list (D-322).

use super::*;

/// A session the caller may read: their own, or any for an owner.
pub async fn read(
    state: &AppState,
    principal: &Principal,
    session_id: Uuid,
) -> Result<SessionRow, SessionError> {
    let person = person_of(principal).ok_or(IdentityError::Forbidden(
        ForbiddenReason::SubjectKindNotAllowed,
    ))?;
    let mut conn = state.db().pool().acquire().await.map_err(DbError::from)?;
    match load(&mut conn, session_id).await? {
        Some(row) if row.person_id == person.person_id || person.is_owner() => Ok(row),
        _ => Err(HostError::NotFound.into()),
    }
}

/// The caller's own sessions, newest first, a page at a time (keyset paging
/// on `(created_at, id)`, so a page never repeats or skips a row when sessions
/// are added meanwhile); with `host_id` only those on that host, and for an
/// owner every person's there.
pub async fn list(
    state: &AppState,
    principal: &Principal,
    query: ListQuery,
) -> Result<SessionPage, SessionError> {
    let person = person_of(principal).ok_or(IdentityError::Forbidden(
        ForbiddenReason::SubjectKindNotAllowed,
    ))?;
    let limit = query.limit.clamp(1, LIST_MAX);
    // Every condition is one of the fixed texts below, never input; the
    // values are bound in the order of the placeholders.
    let mut conditions: Vec<String> = Vec::new();
    let mut binds: Vec<String> = Vec::new();
    let bind = |binds: &mut Vec<String>, value: String| {
        binds.push(value);
        format!("${}", binds.len())
    };
    match query.host_id {
        Some(host_id) => {
            let host = bind(&mut binds, db::id_text(&host_id));
            conditions.push(format!("host_id = {host}"));
            if !person.is_owner() {
                let me = bind(&mut binds, db::id_text(&person.person_id));
                conditions.push(format!("person_id = {me}"));
            }
        }
        None => {
            let me = bind(&mut binds, db::id_text(&person.person_id));
            conditions.push(format!("person_id = {me}"));
        }
    }
    match query.open {
        Some(true) => conditions.push("state <> 'closed'".to_owned()),
        Some(false) => conditions.push("state = 'closed'".to_owned()),
        None => {}
    }
    if let Some(after) = query.after {
        let cursor = bind(&mut binds, db::id_text(&after));
        // A cursor that names no session gives an empty page.
        conditions.push(format!(
            "(created_at < (SELECT created_at FROM terminal_sessions WHERE id = {cursor}) \
              OR (created_at = (SELECT created_at FROM terminal_sessions WHERE id = {cursor}) \
                  AND id < {cursor}))"
        ));
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM terminal_sessions WHERE {} \
         ORDER BY created_at DESC, id DESC LIMIT {}",
        conditions.join(" AND "),
        i64::from(limit) + 1
    );
    let mut select = sqlx::query(&sql);
    for value in &binds {
        select = select.bind(value.as_str());
    }
    let mut conn = state.db().pool().acquire().await.map_err(DbError::from)?;
    let found = select.fetch_all(&mut *conn).await.map_err(DbError::from)?;
    let mut rows = found
        .iter()
        .map(SessionRow::from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = more.then(|| rows.last().map(|row| row.id)).flatten();
    Ok(SessionPage { rows, next })
}
