//! The one mapping of the domain's errors to the problems of section 13 and
//! DESIGN 3.4 (`code`, `reason`, `errors[]`, `attempts_remaining`,
//! `retry_after`). The domain modules return their own errors and know
//! nothing of HTTP; every `From` below lives here, beside [`ApiError`].

use super::{ApiError, ProblemCode};
use crate::db::DbError;
use crate::hosts::{HostError, IfMatchRefusal};
use crate::identity::IdentityError;
use crate::terminal::sessions::SessionError;

impl From<IdentityError> for ApiError {
    fn from(error: IdentityError) -> Self {
        match error {
            IdentityError::Unauthenticated(_) => ApiError::new(ProblemCode::Unauthenticated),
            IdentityError::StepUpRequired(refusal) => {
                let error = ApiError::new(ProblemCode::StepUpRequired);
                match refusal.client_reason() {
                    Some(reason) => error.with_reason(reason),
                    None => error,
                }
            }
            IdentityError::Invalid(invalid) => ApiError::new(ProblemCode::ValidationFailed)
                .with_error(invalid.pointer, invalid.code),
            IdentityError::Forbidden(reason) => {
                ApiError::new(ProblemCode::Forbidden).with_reason(reason.as_str())
            }
            IdentityError::NotFound => ApiError::new(ProblemCode::NotFound),
            IdentityError::Conflict(reason) => {
                ApiError::new(ProblemCode::Conflict).with_reason(reason.as_str())
            }
            IdentityError::Db(DbError::Busy(source)) => {
                ApiError::new(ProblemCode::Unavailable).caused_by(source)
            }
            other => ApiError::internal(other),
        }
    }
}

impl From<HostError> for ApiError {
    fn from(error: HostError) -> Self {
        match error {
            HostError::Identity(error) => error.into(),
            HostError::Invalid(findings) => {
                let mut api = ApiError::new(ProblemCode::ValidationFailed);
                for finding in findings {
                    api = api.with_error(finding.pointer, finding.code);
                }
                api
            }
            HostError::PairingCodeRefused => ApiError::new(ProblemCode::Unauthenticated),
            HostError::Forbidden => ApiError::new(ProblemCode::Forbidden),
            HostError::TerminalDenied(reason) => {
                ApiError::new(ProblemCode::TerminalDenied).with_reason(reason.as_str())
            }
            HostError::NotFound => ApiError::new(ProblemCode::NotFound),
            HostError::InvalidStateTransition => ApiError::new(ProblemCode::InvalidStateTransition),
            HostError::Conflict(reason) => {
                ApiError::new(ProblemCode::Conflict).with_reason(reason.as_str())
            }
            HostError::FingerprintMismatch { attempts_remaining } => {
                ApiError::new(ProblemCode::FingerprintMismatch)
                    .with_attempts_remaining(attempts_remaining)
            }
            HostError::I6Violation => ApiError::new(ProblemCode::I6Violation),
            HostError::HostUnavailable => ApiError::new(ProblemCode::HostUnavailable),
            HostError::Json(error) => error.into(),
            HostError::IfMatch(refusal) => refusal.into(),
            HostError::Idempotency(error) => error.into(),
            HostError::Db(DbError::Busy(source)) => {
                ApiError::new(ProblemCode::Unavailable).caused_by(source)
            }
            other => ApiError::internal(other),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::Host(error) => error.into(),
            SessionError::Token(error) => match error.field_error() {
                Some((pointer, code)) => {
                    ApiError::new(ProblemCode::ValidationFailed).with_error(pointer, code)
                }
                None => ApiError::internal(error),
            },
            SessionError::Keys(error) => ApiError::internal(error),
            SessionError::RateLimited(retry) => {
                ApiError::new(ProblemCode::RateLimited).with_retry_after(retry.seconds)
            }
            SessionError::Contended => ApiError::new(ProblemCode::Unavailable),
        }
    }
}

impl From<IfMatchRefusal> for ApiError {
    fn from(refusal: IfMatchRefusal) -> Self {
        match refusal {
            IfMatchRefusal::Missing => ApiError::new(ProblemCode::PreconditionRequired),
            IfMatchRefusal::Stale => ApiError::new(ProblemCode::PreconditionFailed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::authorize::Denial;

    #[test]
    fn every_denial_of_authorize_is_one_problem() {
        let problems = [
            (
                Denial::SubjectKindNotAllowed,
                403,
                "forbidden",
                Some("subject_kind_not_allowed"),
            ),
            (Denial::NotFound, 404, "not_found", None),
            (
                Denial::NoPermission,
                403,
                "forbidden",
                Some("no_permission"),
            ),
            (
                Denial::I6HolderOnly,
                403,
                "terminal_denied",
                Some("i6_holder_only"),
            ),
            (
                Denial::ServerHostOwnerOnly,
                403,
                "terminal_denied",
                Some("server_host_owner_only"),
            ),
            (
                Denial::NotHostAssignee,
                403,
                "terminal_denied",
                Some("not_host_assignee"),
            ),
            (
                Denial::NoSessionUser,
                403,
                "terminal_denied",
                Some("no_session_user"),
            ),
            (Denial::HostUnavailable, 409, "host_unavailable", None),
        ];
        assert_eq!(problems.len(), Denial::ALL.len());
        for (denial, status, code, reason) in problems {
            let error = HostError::from(denial);
            let body = ApiError::from(error).body();
            assert_eq!(body["status"], status, "{denial}");
            assert_eq!(body["code"], code, "{denial}");
            assert_eq!(
                body.get("reason").and_then(|r| r.as_str()),
                reason,
                "{denial}"
            );
        }
    }
}
