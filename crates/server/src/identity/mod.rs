//! Identity (DESIGN 3.1, standing in for chapter 08): principals, persons and
//! groups, enrollment, passwords, TOTP, login sessions with devices, step-up,
//! API tokens for agents and apps, and the [`principal::Principal`] every
//! authenticated request carries.
//!
//! # Layout
//! - [`persons`]: the `person` principal — [`persons::Username`] (the rule),
//!   [`Role`], [`PersonStatus`]; create, find, list.
//! - [`groups`]: groups of persons and their members (storage; routes come with
//!   the grants of DESIGN 3.2).
//! - [`opaque`]: the opaque secrets the server hands out once and stores only as
//!   an HMAC of the pepper: access tokens `bothy_at_`, API tokens `bothy_tk_`,
//!   enrollment codes `bothy_ec_`.
//! - [`enrollment`]: one-time enrollment codes; setting the password and the TOTP
//!   secret (pending until confirmed with a current code).
//! - [`password`]: argon2id hashes, the password rule, a bounded blocking pool.
//! - [`totp`]: RFC 6238 codes, secrets sealed at rest, each time step accepted once.
//! - [`login_sessions`]: `POST /auth/login` (password + TOTP, registers the
//!   device), lookup by token, and the one end function every revocation uses.
//! - [`devices`]: the Ed25519 keys of CLI logins; revoking one ends its sessions.
//! - [`passkey`]: WebAuthn passkeys — registration (during enrollment or after
//!   a TOTP step-up), challenges (single use, 5 minutes), passkey step-ups.
//! - [`console`]: the web console's login (password + passkey), its cookie and
//!   CSRF token.
//! - [`step_up`]: step-ups of a login session and [`step_up::consume`], which the
//!   terminal module calls in its unit of work.
//! - [`api_tokens`]: agent and app principals and their tokens.
//! - [`principal`]: the `Authorization: Bearer` extractor, the "must be a person"
//!   and "must be an owner" checks.
//! - [`admin`]: what `bothy-server admin ...` does (bootstrap, reset of the second
//!   factor, disable).
//!
//! # Errors
//! Every operation returns [`IdentityError`]; its one `From` impl below is the
//! only place that turns it into an API error. Refusals of credentials carry an
//! [`AuthFailure`] for the audit and the log, never for the client: a wrong
//! username, password or TOTP code all answer the same 401 body.
//!
//! # Secrets
//! Passwords, TOTP secrets and codes, tokens and enrollment codes never reach an
//! audit row, an event, a log line or an error body; the audit is typed
//! ([`crate::audit`]) and takes no strings from requests. Passwords and secrets
//! are held in `Zeroizing` buffers while the server works with them.

pub mod admin;
pub mod api_tokens;
pub mod console;
pub mod devices;
pub mod enrollment;
pub mod groups;
pub mod login_sessions;
pub mod opaque;
pub mod passkey;
pub mod password;
pub mod persons;
pub mod principal;
pub mod step_up;
pub mod totp;

use crate::audit::AuditEntry;
use crate::codes::code_enum;
use crate::db::{DbError, UnitOfWork};

code_enum! {
    /// The kind of a principal (`principals.kind`).
    pub enum PrincipalKind {
        /// A person (owner or member).
        Person => "person",
        /// An agent, authenticated by an API token.
        Agent => "agent",
        /// An app, authenticated by an API token.
        App => "app",
    }
}

code_enum! {
    /// The role of a person (`persons.role`).
    pub enum Role {
        /// Manages the instance; has terminal on every host (8.1).
        Owner => "owner",
        /// Everyone else.
        Member => "member",
    }
}

code_enum! {
    /// The status of a person (`persons.status`). Only `active` persons log in.
    pub enum PersonStatus {
        /// May log in.
        Active => "active",
        /// Disabled by an operator; every login session ended.
        Disabled => "disabled",
        /// Deleted; kept as a row so IDs in the audit stay resolvable.
        Deleted => "deleted",
    }
}

code_enum! {
    /// Why an authentication or an action was refused: the `reason_code` of deny
    /// entries in the audit. Never sent to the client for credential failures.
    pub enum AuthFailure {
        /// No person with that username (the audit names no account then).
        UnknownUsername => "unknown_username",
        /// The password did not match.
        WrongPassword => "wrong_password",
        /// The person has not finished enrollment (no password or TOTP yet).
        NotEnrolled => "not_enrolled",
        /// The person is disabled or deleted.
        PersonInactive => "person_inactive",
        /// The TOTP code matched no accepted time step.
        WrongTotp => "wrong_totp",
        /// The TOTP code was for a time step already used.
        TotpReplayed => "totp_replayed",
        /// The enrollment code is unknown, used or expired.
        CodeInvalid => "code_invalid",
        /// An agent or app called an action that requires a person.
        SubjectKindNotAllowed => "subject_kind_not_allowed",
        /// A member called an action for owners.
        OwnerRequired => "owner_required",
        /// A login with the key of a revoked device.
        DeviceRevoked => "device_revoked",
        /// A bearer token that is missing, malformed, unknown, expired or revoked.
        TokenInvalid => "token_invalid",
        /// A WebAuthn assertion or attestation that did not verify (wrong
        /// credential, no user verification, bad signature).
        PasskeyInvalid => "passkey_invalid",
        /// A WebAuthn challenge that is unknown, used, expired or for something else.
        ChallengeInvalid => "challenge_invalid",
        /// A cookie-authenticated change without the session's `X-CSRF-Token`.
        CsrfTokenInvalid => "csrf_token_invalid",
    }
}

code_enum! {
    /// The `reason` of a 403 `forbidden`.
    pub enum ForbiddenReason {
        /// The principal is an agent or app (TM-T17).
        SubjectKindNotAllowed => "subject_kind_not_allowed",
        /// Only owners may do this.
        OwnerRequired => "owner_required",
        /// The device key was revoked; log in with a new key.
        DeviceRevoked => "device_revoked",
        /// A console request that changes state without the right `X-CSRF-Token`.
        CsrfTokenInvalid => "csrf_token_invalid",
        /// A person without the capability on the target: not an owner, no valid
        /// grant directly or through a group (permissions, D-41).
        NoPermission => "no_permission",
    }
}

code_enum! {
    /// The `reason` of a 409 `conflict`.
    pub enum ConflictReason {
        /// The username is taken (compared case-insensitively).
        UsernameTaken => "username_taken",
        /// The group name is taken.
        GroupNameTaken => "group_name_taken",
        /// An owner exists already (`admin bootstrap`).
        OwnerExists => "owner_exists",
        /// The change would leave no active owner (a role change).
        LastOwner => "last_owner",
        /// The person has a passkey already: password and TOTP do not add
        /// another (D-408).
        PasskeyExists => "passkey_exists",
    }
}

/// A finding in the request body: a JSON pointer and a code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// RFC 6901 pointer into the request.
    pub pointer: String,
    /// The finding's code (`too_short`, `invalid_key`, ...).
    pub code: &'static str,
}

impl Invalid {
    /// A finding at `pointer`.
    pub fn at(pointer: impl Into<String>, code: &'static str) -> Invalid {
        Invalid {
            pointer: pointer.into(),
            code,
        }
    }
}

/// Why an identity operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The credential is missing, wrong, expired or revoked: 401 `unauthenticated`,
    /// the same body for every cause.
    #[error("unauthenticated ({0})")]
    Unauthenticated(AuthFailure),
    /// The step-up is missing, wrong or used: 401 `step_up_required`.
    #[error("step-up required ({0})")]
    StepUpRequired(step_up::StepUpRefusal),
    /// The request breaks a rule: 400 `validation_failed` with `errors[]`.
    #[error("validation failed at {}", .0.pointer)]
    Invalid(Invalid),
    /// 403 `forbidden` with a reason.
    #[error("forbidden ({0})")]
    Forbidden(ForbiddenReason),
    /// 404: no such resource, or not visible to the caller.
    #[error("not found")]
    NotFound,
    /// 409 `conflict` with a reason.
    #[error("conflict ({0})")]
    Conflict(ConflictReason),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// A stored value does not decode (a row written by a newer binary, or edited,
    /// or a secret sealed with another pepper).
    #[error("stored identity data is unusable: {0}")]
    Stored(&'static str),
    /// Hashing, sealing or the random source failed.
    #[error("identity cryptography failed: {0}")]
    Crypto(&'static str),
}

impl IdentityError {
    /// A 400 with one finding.
    pub fn invalid(pointer: impl Into<String>, code: &'static str) -> IdentityError {
        IdentityError::Invalid(Invalid::at(pointer, code))
    }
}

impl From<bothy_proto::ids::RandomError> for IdentityError {
    fn from(_: bothy_proto::ids::RandomError) -> Self {
        IdentityError::Crypto("the random source failed")
    }
}

/// The length of a list as an audit count.
pub(crate) fn count<T>(items: &[T]) -> i64 {
    i64::try_from(items.len()).unwrap_or(i64::MAX)
}

/// Commits `uow` with a deny entry and returns `error`: a refusal is audited
/// even though the operation it refuses wrote nothing else.
pub(crate) async fn deny(
    mut uow: UnitOfWork,
    entry: AuditEntry,
    error: IdentityError,
) -> IdentityError {
    uow.audit(entry);
    match uow.commit().await {
        Ok(_) => error,
        Err(db) => IdentityError::Db(db),
    }
}
