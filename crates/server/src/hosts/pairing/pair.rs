//! host.pair (3.2 step 2): the request of a host service with its code, keys
//! and first report, checked and applied.

use super::*;

/// The members of the host.pair body (DESIGN 3.4).
pub const PAIR_MEMBERS: &[&str] = &[
    "code",
    "noise_public_key",
    "auth_public_jwk",
    "host_version",
    "platform",
    "os_version",
    "profiles",
    "session_users",
    "require_local_confirm",
    "is_server_host",
];

/// A host.pair body that passed every check that needs no database.
#[derive(Debug, Clone)]
pub struct PairRequest {
    /// The code (form and checksum checked).
    pub code: PairingCode,
    /// The X25519 key (32 bytes, not of small order).
    pub noise_public_key: [u8; 32],
    /// The Ed25519 login key.
    pub auth_public_jwk: Ed25519PublicJwk,
    /// SemVer without `v`.
    pub host_version: String,
    /// Display text.
    pub platform: String,
    /// Display text.
    pub os_version: String,
    /// As reported, in order.
    pub profiles: Vec<ReportedProfile>,
    /// As reported, in order.
    pub session_users: Vec<ReportedSessionUser>,
    /// `host_service.require_local_confirm`.
    pub require_local_confirm: bool,
    /// HD5 or the server's own address (2.3).
    pub is_server_host: bool,
}

/// The `errors[].code` of a JWK refusal at its pointer (3.2 "Keys").
fn jwk_finding(error: &JwkError) -> Invalid {
    let code = match error.kind() {
        JwkErrorKind::UnknownMember => "unknown_member",
        JwkErrorKind::InvalidKey => "invalid_key",
        JwkErrorKind::MissingMember => "required",
        JwkErrorKind::WrongType => "wrong_type",
        JwkErrorKind::Invalid => "invalid",
    };
    Invalid::at(error.pointer().unwrap_or("/auth_public_jwk"), code)
}

impl PairRequest {
    /// Decodes and checks a host.pair body without touching the database: the
    /// exact members (`400`), then the code's form and checksum (`401
    /// unauthenticated`, the body of every code refusal), then every finding
    /// of the keys and the report at once (`400 validation_failed` with
    /// pointers into the body).
    pub fn decode(body: &Value, limits: &ReportLimits) -> Result<PairRequest, HostError> {
        let api = HostError::Json;
        let object = Object::root(body, PAIR_MEMBERS).map_err(api)?;
        let code = PairingCode::parse(object.str("code").map_err(api)?)
            .map_err(|_| HostError::PairingCodeRefused)?;

        let mut findings = Vec::new();
        let noise = object.member("noise_public_key").map_err(api)?;
        let noise_text = noise.as_str().map_err(api)?;
        let noise_public_key = match bothy_proto::x25519::decode_public_key(noise_text) {
            Ok(key) => Some(key),
            Err(_) => {
                findings.push(Invalid::at(noise.pointer(), "invalid_key"));
                None
            }
        };
        let auth_public_jwk =
            match Ed25519PublicJwk::from_member(object.member("auth_public_jwk").map_err(api)?) {
                Ok(jwk) => Some(jwk),
                Err(error) => {
                    findings.push(jwk_finding(&error));
                    None
                }
            };
        let host_version = object.str("host_version").map_err(api)?;
        if !report::is_valid_host_version(host_version) {
            findings.push(Invalid::at("/host_version", "invalid_format"));
        }
        let platform = object.str("platform").map_err(api)?;
        let os_version = object.str("os_version").map_err(api)?;
        let profiles =
            report::decode_profiles(object.member("profiles").map_err(api)?).map_err(api)?;
        let session_users =
            report::decode_session_users(object.member("session_users").map_err(api)?)
                .map_err(api)?;
        let require_local_confirm = object.bool("require_local_confirm").map_err(api)?;
        let is_server_host = object.bool("is_server_host").map_err(api)?;
        let parts = ReportParts {
            platform,
            os_version,
            profiles: &profiles,
            session_users: &session_users,
            doctor: None,
        };
        findings.extend(
            report::validate(&parts, limits, ReportContext::Pair)
                .into_iter()
                .map(|finding| Invalid::at(finding.pointer, finding.code.as_str())),
        );
        match (noise_public_key, auth_public_jwk) {
            (Some(noise_public_key), Some(auth_public_jwk)) if findings.is_empty() => {
                Ok(PairRequest {
                    code,
                    noise_public_key,
                    auth_public_jwk,
                    host_version: host_version.to_owned(),
                    platform: platform.to_owned(),
                    os_version: os_version.to_owned(),
                    profiles,
                    session_users,
                    require_local_confirm,
                    is_server_host,
                })
            }
            _ => Err(HostError::Invalid(findings)),
        }
    }
}

/// The report limits of the configuration (3.2 "Report").
pub fn report_limits(config: &Config) -> ReportLimits {
    ReportLimits {
        label_max_chars: config.terminal.report_label_max_chars,
        max_entries: config.terminal.report_max_entries,
        os_user_max_chars: config.host.os_user_max_chars,
    }
}

/// What host.pair answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paired {
    /// The host.
    pub host_id: Uuid,
    /// This server instance ([`instance_id`]).
    pub instance_id: String,
    /// The fingerprint of the keys (display form, 4.3).
    pub key_fingerprint: KeyFingerprint,
}

/// The ID of this server instance (host.pair's `instance_id`): the one row of
/// `instance`, made on the first call. `INSERT ... ON CONFLICT DO NOTHING`
/// then `SELECT`, so two first calls on any node agree on the row that won.
pub async fn instance_id(uow: &mut UnitOfWork) -> Result<String, HostError> {
    let now = uow.now_ms();
    let candidate = db::new_id(now)?;
    sqlx::query(
        "INSERT INTO instance (id, instance_id, created_at) VALUES (1, $1, $2) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(db::id_text(&candidate))
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    let row = sqlx::query("SELECT instance_id FROM instance WHERE id = 1")
        .fetch_one(uow.conn())
        .await
        .map_err(DbError::from)?;
    row.try_get::<String, _>("instance_id")
        .map_err(|_| HostError::Stored("instance.instance_id"))
}

/// host.pair (`POST /api/v1/hosts/pair`, public) with a request that passed
/// [`PairRequest::decode`]. A code that does not find a host in pairing
/// within its validity is [`HostError::PairingCodeRefused`] (the caller
/// audits it through [`RefusalAudit`]). The keys of this host's last pairing
/// (its kept `key_fingerprint`) are `409 conflict host_key_reused`; a login key
/// another host holds is `409 conflict host_key_in_use` — both audited as
/// host.pair deny, and the code stays valid. On success the host is
/// confirming with the keys, `key_generation + 1`, the report as sent.
pub async fn pair(
    db: &Db,
    pepper: &Pepper,
    now: UnixMillis,
    request: &PairRequest,
) -> Result<Paired, HostError> {
    let hash = code_hash(pepper, &request.code);
    let mut uow = db.begin(now).await?;
    let lock = match uow.engine() {
        Engine::Postgres => " FOR UPDATE",
        Engine::Sqlite => "",
    };
    let row = sqlx::query(&format!(
        "SELECT {} FROM hosts WHERE pairing_code_hash = $1{lock}",
        crate::hosts::COLUMNS
    ))
    .bind(&hash)
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    let Some(host) = row.as_ref().map(crate::hosts::from_row).transpose()? else {
        return Err(HostError::PairingCodeRefused);
    };
    let valid = host.state == HostState::Pairing
        && host.pairing_expires_at.is_some_and(|expires| now < expires);
    if !valid {
        return Err(HostError::PairingCodeRefused);
    }

    let jwk = &request.auth_public_jwk;
    let fingerprint = key_fingerprint(&request.noise_public_key, &jwk.raw());
    let jkt = jwk.thumbprint();
    let conflict = if host.key_fingerprint.as_deref() == Some(fingerprint.as_str()) {
        Some(HostConflict::HostKeyReused)
    } else {
        let other: Option<String> =
            sqlx::query_scalar("SELECT id FROM hosts WHERE auth_jkt = $1 AND id <> $2")
                .bind(&jkt)
                .bind(db::id_text(&host.id))
                .fetch_optional(uow.conn())
                .await
                .map_err(DbError::from)?;
        other.map(|_| HostConflict::HostKeyInUse)
    };
    if let Some(conflict) = conflict {
        return Err(pair_conflict(uow, &host, conflict).await);
    }
    check_transition(host.state, HostState::Confirming)?;

    let generation = host.key_generation.saturating_add(1);
    let session_users = Value::Array(
        request
            .session_users
            .iter()
            .map(ReportedSessionUser::to_value)
            .collect(),
    )
    .to_string();
    let profiles = Value::Array(
        request
            .profiles
            .iter()
            .map(ReportedProfile::to_value)
            .collect(),
    )
    .to_string();
    let updated = sqlx::query(
        "UPDATE hosts SET state = 'confirming', noise_public_key = $1, auth_public_jwk = $2, \
         auth_jkt = $3, key_fingerprint = $4, key_generation = $5, pairing_code_hash = NULL, \
         pairing_expires_at = NULL, fingerprint_failures = 0, reported_session_users = $6, \
         reported_profiles = $7, reported_is_server_host = $8, \
         reported_require_local_confirm = $9, reported_host_version = $10, \
         reported_platform = $11, reported_os_version = $12 \
         WHERE id = $13",
    )
    .bind(bothy_proto::b64::encode(&request.noise_public_key))
    .bind(jwk.to_json())
    .bind(&jkt)
    .bind(fingerprint.as_str())
    .bind(generation)
    .bind(session_users)
    .bind(profiles)
    .bind(request.is_server_host)
    .bind(request.require_local_confirm)
    .bind(request.host_version.as_str())
    .bind(request.platform.as_str())
    .bind(request.os_version.as_str())
    .bind(db::id_text(&host.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from);
    match updated {
        Ok(_) => {}
        // The unique index on auth_jkt: another host paired with this key
        // between our check and our write.
        Err(DbError::Conflict(_)) => {
            drop(uow);
            let uow = db.begin(now).await?;
            return Err(pair_conflict(uow, &host, HostConflict::HostKeyInUse).await);
        }
        Err(other) => return Err(other.into()),
    }
    let version = crate::hosts::bump_version(&mut uow, host.id).await?;
    host_updated(&mut uow, host.id, version, HostState::Confirming, true);
    let mut details = AuditDetails::new()
        .id("host_id", host.id)
        .fingerprint("fingerprint", &fingerprint)
        .count("key_generation", generation);
    if let Some(old) = stored_fingerprint(&host) {
        details = details.fingerprint("old_fingerprint", &old);
    }
    if let Some(platform) = Platform::parse(&request.platform) {
        details = details.code("platform", platform);
    }
    uow.audit(
        AuditEntry::allow(AuditAction::HostPair, Actor::Host(host.id))
            .target(TargetKind::Host, host.id)
            .details(details),
    );
    let instance_id = instance_id(&mut uow).await?;
    uow.commit().await?;
    Ok(Paired {
        host_id: host.id,
        instance_id,
        key_fingerprint: fingerprint,
    })
}

/// Commits a host.pair deny for a key conflict in `uow` (which changed
/// nothing) and returns the `409`.
async fn pair_conflict(mut uow: UnitOfWork, host: &Host, conflict: HostConflict) -> HostError {
    uow.audit(
        AuditEntry::deny(AuditAction::HostPair, Actor::Host(host.id))
            .target(TargetKind::Host, host.id)
            .details(
                AuditDetails::new()
                    .id("host_id", host.id)
                    .code("reason_code", conflict),
            ),
    );
    match uow.commit().await {
        Ok(_) => HostError::Conflict(conflict),
        Err(error) => HostError::Db(error),
    }
}
