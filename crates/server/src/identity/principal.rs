//! The authenticated principal of a request (DESIGN 3.1, 3.4): `Authorization:
//! Bearer <token>` with an access token (`bothy_at_`, a person in a login
//! session on a device) or an API token (`bothy_tk_`, an agent or app).
//!
//! [`authenticate`] looks a token up on every request, so an end or
//! revocation takes effect at once; the HTTP layer's extractor
//! (`http::extract`) makes a [`Principal`] of a request: a missing,
//! malformed, unknown, expired, ended or revoked credential is `401
//! unauthenticated`, always the same body.
//!
//! The web console authenticates with the cookie `bothy_session` instead
//! ([`console`]): every request that is not GET or HEAD must then carry the
//! session's `X-CSRF-Token`, else `403 forbidden` (`csrf_token_invalid`). A
//! console session's token is refused as a bearer token.
//!
//! Checks that the terminal module and the routes call:
//! - [`Principal::require_person`]: agents and apps never open a terminal (8.2,
//!   TM-T17): `403 forbidden` with `reason: subject_kind_not_allowed` and a deny
//!   entry in the audit for the action they tried.
//! - [`PersonPrincipal::require_owner`]: `403 forbidden` with `reason:
//!   owner_required`, audited the same way.

use uuid::Uuid;

use super::login_sessions::{self, ClientComponent};
use super::opaque::{OpaqueSecret, SecretKind};
use super::persons::Username;
use super::{AuthFailure, ForbiddenReason, IdentityError, PrincipalKind, Role, api_tokens, deny};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry};
use crate::clock::UnixMillis;
use crate::db::{Db, DbError};
use crate::pepper::Pepper;

/// A person in a login session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonPrincipal {
    /// The person's principal ID.
    pub person_id: Uuid,
    /// Their username.
    pub username: Username,
    /// Owner or member.
    pub role: Role,
    /// The login session of the access token.
    pub login_session_id: Uuid,
    /// The device of the login session (CLI; none for the console).
    pub device_id: Option<Uuid>,
    /// CLI or console.
    pub client_component: ClientComponent,
    /// When the login session expires.
    pub expires_at: UnixMillis,
}

impl PersonPrincipal {
    /// The audit actor.
    pub fn actor(&self) -> Actor {
        Actor::Person(self.person_id)
    }

    /// Whether the person is an owner.
    pub fn is_owner(&self) -> bool {
        self.role == Role::Owner
    }

    /// Refuses a member with `403 forbidden` (`owner_required`) and a deny entry
    /// for `action`.
    pub async fn require_owner(
        &self,
        db: &Db,
        now: UnixMillis,
        action: AuditAction,
    ) -> Result<(), IdentityError> {
        if self.is_owner() {
            return Ok(());
        }
        let entry = AuditEntry::deny(action, self.actor())
            .details(AuditDetails::new().code("reason_code", AuthFailure::OwnerRequired));
        Err(deny(
            db.begin(now).await?,
            entry,
            IdentityError::Forbidden(ForbiddenReason::OwnerRequired),
        )
        .await)
    }
}

/// An agent or app with an API token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePrincipal {
    /// The principal ID.
    pub principal_id: Uuid,
    /// Agent or app.
    pub kind: PrincipalKind,
    /// The name the owner gave it.
    pub name: String,
    /// The token used.
    pub token_id: Uuid,
}

/// Who made the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A person.
    Person(PersonPrincipal),
    /// An agent or app.
    Service(ServicePrincipal),
}

impl Principal {
    /// The principal ID.
    pub fn id(&self) -> Uuid {
        match self {
            Principal::Person(person) => person.person_id,
            Principal::Service(service) => service.principal_id,
        }
    }

    /// The kind.
    pub fn kind(&self) -> PrincipalKind {
        match self {
            Principal::Person(_) => PrincipalKind::Person,
            Principal::Service(service) => service.kind,
        }
    }

    /// The audit actor.
    pub fn actor(&self) -> Actor {
        match self {
            Principal::Person(person) => person.actor(),
            Principal::Service(service) => match service.kind {
                PrincipalKind::App => Actor::App(service.principal_id),
                _ => Actor::Agent(service.principal_id),
            },
        }
    }

    /// The person, or `403 forbidden` (`subject_kind_not_allowed`) with a deny
    /// entry for `action` — the one check of 8.2 "agents and apps never open a
    /// terminal", also used by every person-only route.
    pub async fn require_person(
        &self,
        db: &Db,
        now: UnixMillis,
        action: AuditAction,
    ) -> Result<&PersonPrincipal, IdentityError> {
        match self {
            Principal::Person(person) => Ok(person),
            Principal::Service(_) => {
                let entry = AuditEntry::deny(action, self.actor()).details(
                    AuditDetails::new().code("reason_code", AuthFailure::SubjectKindNotAllowed),
                );
                Err(deny(
                    db.begin(now).await?,
                    entry,
                    IdentityError::Forbidden(ForbiddenReason::SubjectKindNotAllowed),
                )
                .await)
            }
        }
    }

    /// The person, and only if they are an owner: [`Principal::require_person`]
    /// then [`PersonPrincipal::require_owner`], each refusal audited for `action`
    /// — the opening of every owner route.
    pub async fn require_owner_person(
        &self,
        db: &Db,
        now: UnixMillis,
        action: AuditAction,
    ) -> Result<&PersonPrincipal, IdentityError> {
        let person = self.require_person(db, now, action).await?;
        person.require_owner(db, now, action).await?;
        Ok(person)
    }
}

/// Authenticates a bearer token value at `now`.
pub async fn authenticate(
    db: &Db,
    pepper: &Pepper,
    token: &str,
    now: UnixMillis,
) -> Result<Option<Principal>, IdentityError> {
    if let Some(token) = OpaqueSecret::parse(SecretKind::AccessToken, token) {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        return Ok(login_sessions::authenticate(&mut conn, pepper, &token, now)
            .await?
            .map(Principal::Person));
    }
    if let Some(token) = OpaqueSecret::parse(SecretKind::ApiToken, token) {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        return Ok(api_tokens::authenticate(&mut conn, pepper, &token, now)
            .await?
            .map(Principal::Service));
    }
    Ok(None)
}
