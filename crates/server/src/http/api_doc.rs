//! The OpenAPI 3.1 document of the API (DESIGN 3.4; docs/decisions.md D-22),
//! generated from the handlers: each handler carries `#[utoipa::path]`, and each
//! route file's `router()` registers it with `utoipa_axum::routes!`, so the path
//! that routes a request is the path in the document.
//!
//! Request bodies are decoded strictly as JSON values (`routes::body::JsonBody`
//! and `bothy_proto::json::Object`), never through serde types, so the schema
//! types of the document are doc-only: each route file declares, next to its
//! handlers, structs that name exactly the members the handler reads and writes.
//! The families that moved to `bothy-api` (terminal sessions, auth,
//! passkeys, persons, devices, tokens, hosts, grants, groups, audit) take
//! those structs from there: the handlers answer with the same types.
//! Closed lists of codes (problem codes, audit actions, ...) are read from
//! the enums themselves (`ALL`), so they cannot drift either; those of
//! `bothy-api` (roles, ...) are its enums, which the routes convert from the
//! domain's by exhaustive matches (D-600), and [`code_members`] supplies the
//! closed lists of the members `bothy-api` keeps as strings (D-610).
//!
//! Layout:
//! - [`base`]: the document before any route: info, tags, [`Problem`], the
//!   security schemes ([`BEARER`], [`CONSOLE_COOKIE`], [`CSRF_TOKEN`]).
//! - [`Problem`] and the shared error responses ([`ValidationFailed`],
//!   [`Unauthenticated`], [`NotFound`], [`PayloadTooLarge`],
//!   [`UnsupportedMediaType`], [`RateLimited`], [`Internal`], [`Unavailable`]).
//! - [`code_members`]: the closed lists of the members that `bothy-api` types
//!   as strings, supplied from the server's enums.
//! - [`to_json`]: the document as the file `docs/api/openapi.json` holds it.
//! - [`serve_document`]: `GET /api/v1/openapi.json`.

use std::sync::Arc;

use axum::Extension;
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::schema::{Object, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Components, OpenApi, Ref, RefOr};
use utoipa::{IntoResponses, Modify, PartialSchema, ToSchema};

pub use bothy_api::problem::{FieldProblem, Problem};

use super::problem::{ApiError, ProblemCode};
use crate::audit::{ActorKind, AuditAction, AuditCode, Decision, TargetKind};
use crate::hosts::LlmCredentials;
use crate::identity::console;
use crate::permissions::grants::{PreviewHint, RecipientKind};

/// The security scheme of `Authorization: Bearer <token>`.
pub const BEARER: &str = "bearer";
/// The security scheme of the web console's session cookie.
pub const CONSOLE_COOKIE: &str = "console_cookie";
/// The security scheme of the console's CSRF header (with the cookie, on every
/// request that is not GET or HEAD).
pub const CSRF_TOKEN: &str = "csrf_token";

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "bothy-server",
        description = "The HTTP API of the bothy terminal server (DESIGN 3.4): REST under \
            `/api/v1`, JSON bodies decoded strictly (no unknown or duplicate members, no \
            `null`), errors as `application/problem+json`. Times are Unix milliseconds, IDs \
            are UUIDs in hyphenated form."
    ),
    components(schemas(
        Problem,
        FieldProblem,
        ProblemCode,
        AuditAction,
        Decision,
        ActorKind,
        TargetKind
    )),
    modifiers(&SecuritySchemes),
    tags(
        (name = "auth", description = "Enrollment, login, login sessions, step-up."),
        (name = "passkeys", description = "WebAuthn passkeys and the web console's login."),
        (name = "persons", description = "Invitations and the list of persons (owners)."),
        (name = "devices", description = "The devices of CLI logins."),
        (name = "tokens", description = "API tokens of agents and apps (owners)."),
        (name = "hosts", description = "Hosts: creation, pairing, confirmation, changes \
            (host.manage) and reads (host.read)."),
        (name = "grants", description = "Grants of terminal on hosts (owners)."),
        (name = "groups", description = "Groups of persons (owners)."),
        (name = "terminal", description = "Terminal sessions: open, attach, close, list."),
        (name = "audit", description = "The audit log (owners)."),
        (name = "events", description = "The event stream (WebSocket)."),
        (name = "platform", description = "Health, readiness, metrics and this document."),
        (name = "console", description = "The web console's page and bundle (files, no \
            credential; D-400)."),
    )
)]
struct ApiDoc;

/// The document before any route is added.
pub fn base() -> OpenApi {
    let mut document = <ApiDoc as utoipa::OpenApi>::openapi();
    // The workspace declares no license; utoipa would write an empty one.
    document.info.license = None;
    document
}

/// Adds the security schemes, named by the constants the handlers' `security(...)`
/// use.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Components::new);
        let bearer = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("opaque")
            .description(Some(
                "An access token `bothy_at_...` of a CLI login (`POST /api/v1/auth/login`) or \
                 an API token `bothy_tk_...` of an agent or app. A console session's token is \
                 refused here: it travels only as the cookie.",
            ))
            .build();
        components.add_security_scheme(BEARER, SecurityScheme::Http(bearer));
        components.add_security_scheme(
            CONSOLE_COOKIE,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                console::COOKIE_NAME,
                "The web console's session (`POST /api/v1/auth/console/login/finish`; \
                 HttpOnly, Secure, SameSite=Strict).",
            ))),
        );
        components.add_security_scheme(
            CSRF_TOKEN,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                console::CSRF_HEADER,
                "The console login's `csrf_token`: required with the cookie on every request \
                 that is not GET or HEAD, else `403 forbidden` reason `csrf_token_invalid`.",
            ))),
        );
    }
}

/// What a member typed as a string in `bothy-api` is in the document.
enum CodeMember {
    /// A string schema with exactly these values (in place of the member's
    /// schema, as `schema_with` would write it).
    Values(Box<Object>),
    /// A reference to a code schema of [`code_schemas!`], keeping the member's
    /// description.
    Named(&'static str),
}

/// The members of `bothy-api`'s types that hold a closed list of codes: that
/// crate knows no server enum, so their values (or the schema named for the
/// enum) are put in here, read from the enums' `ALL` as before (D-610).
fn code_member_table() -> Vec<(&'static str, &'static str, CodeMember)> {
    use CodeMember::Named;
    let values = |object: Object| CodeMember::Values(Box::new(object));
    vec![
        (
            "CreateGrantRequest",
            "recipient_kind",
            values(codes(RecipientKind::ALL)),
        ),
        ("Grant", "recipient_kind", values(codes(RecipientKind::ALL))),
        ("GrantPreview", "hint", values(codes(PreviewHint::ALL))),
        (
            "ConfirmHostRequest",
            "llm_credentials",
            values(codes(LlmCredentials::ALL)),
        ),
        (
            "SetHostLlmCredentialsRequest",
            "llm_credentials",
            values(codes(LlmCredentials::ALL)),
        ),
        (
            "UpdateHostRequest",
            "state",
            values(string_enum(["disabled", "active", "retired"])),
        ),
        ("Problem", "code", Named("ProblemCode")),
        ("AuditEntry", "action", Named("AuditAction")),
        ("AuditEntry", "decision", Named("Decision")),
        ("AuditActor", "kind", Named("ActorKind")),
        ("AuditTarget", "kind", Named("TargetKind")),
    ]
}

/// Puts the closed lists of [`code_member_table`] into the document's schemas.
/// A schema or member the table names but the document lacks is a programming
/// error (the `openapi` test compares the whole document).
pub fn code_members(document: &mut OpenApi) {
    let Some(components) = document.components.as_mut() else {
        return;
    };
    for (schema, member, code) in code_member_table() {
        let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(schema) else {
            continue;
        };
        let Some(property) = object.properties.get_mut(member) else {
            continue;
        };
        *property = match code {
            CodeMember::Values(values) => RefOr::T(Schema::Object(*values)),
            CodeMember::Named(name) => {
                let description = match property {
                    RefOr::T(Schema::Object(old)) => old.description.clone().unwrap_or_default(),
                    _ => String::new(),
                };
                let mut reference = Ref::from_schema_name(name);
                reference.description = description;
                RefOr::Ref(reference)
            }
        };
    }
}

/// A string schema with exactly these values.
pub fn string_enum<'a>(values: impl IntoIterator<Item = &'a str>) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values))
        .build()
}

/// A string schema with the values of a code enum (`T::ALL`), for
/// `#[schema(schema_with = ...)]`.
pub fn codes<T: AuditCode>(all: &[T]) -> Object {
    string_enum(all.iter().map(AuditCode::as_str))
}

fn described(values: Object, description: &str) -> RefOr<Schema> {
    let mut values = values;
    values.description = Some(description.to_owned());
    RefOr::T(Schema::Object(values))
}

/// The closed lists of codes as schemas of their own (`#/components/schemas/Role`,
/// ...), their values read from the enum's `ALL`: a doc-only struct names the
/// real type as a member's type.
macro_rules! code_schemas {
    ($($code:ty => $description:literal,)+) => {$(
        impl PartialSchema for $code {
            fn schema() -> RefOr<Schema> {
                described(codes(<$code>::ALL), $description)
            }
        }

        impl ToSchema for $code {}
    )+};
}

code_schemas! {
    AuditAction => "An audited action.",
    Decision => "The outcome of an audited action.",
    ActorKind => "The kind of an audit entry's actor.",
    TargetKind => "The kind of an audit entry's target.",
}

impl PartialSchema for ProblemCode {
    fn schema() -> RefOr<Schema> {
        described(
            string_enum(ProblemCode::ALL.iter().map(|code| code.as_str())),
            "A problem code of the API; each has one HTTP status.",
        )
    }
}

impl ToSchema for ProblemCode {}

/// `400 validation_failed`.
#[derive(Debug, IntoResponses)]
#[response(
    status = 400,
    description = "`validation_failed`: the body or a parameter breaks a rule; `errors[]` names \
        each finding by pointer (`invalid_json`, `duplicate_member`, `null_not_allowed`, \
        `unknown_member`, `required`, `wrong_type`, `invalid`, or the route's own codes).",
    content_type = "application/problem+json"
)]
pub struct ValidationFailed(pub Problem);

/// `401 unauthenticated`.
#[derive(Debug, IntoResponses)]
#[response(
    status = 401,
    description = "`unauthenticated`: no credential, or one that is malformed, unknown, \
        expired, ended or revoked (always the same body).",
    content_type = "application/problem+json"
)]
pub struct Unauthenticated(pub Problem);

/// `404 not_found`.
#[derive(Debug, IntoResponses)]
#[response(
    status = 404,
    description = "`not_found`: no such resource (also a malformed ID), or not visible to \
        the caller.",
    content_type = "application/problem+json"
)]
pub struct NotFound(pub Problem);

/// `413 payload_too_large`.
#[derive(Debug, IntoResponses)]
#[response(
    status = 413,
    description = "`payload_too_large`: the body is over 16 KiB.",
    content_type = "application/problem+json"
)]
pub struct PayloadTooLarge(pub Problem);

/// `415 unsupported_media_type`.
#[derive(Debug, IntoResponses)]
#[response(
    status = 415,
    description = "`unsupported_media_type`: the body is not `application/json`.",
    content_type = "application/problem+json"
)]
pub struct UnsupportedMediaType(pub Problem);

/// `429 rate_limited`.
#[derive(Debug, IntoResponses)]
#[response(
    status = 429,
    description = "`rate_limited`: the client address's `rl.public_auth` bucket is empty \
        (checked before anything else; only failed checks take a token).",
    content_type = "application/problem+json",
    headers(("Retry-After" = u64, description = "Seconds until a retry can succeed."))
)]
pub struct RateLimited(pub Problem);

/// `500 internal`.
#[derive(Debug, IntoResponses)]
#[response(
    status = 500,
    description = "`internal`: an internal error; the cause is only in the server log.",
    content_type = "application/problem+json"
)]
pub struct Internal(pub Problem);

/// `503 unavailable`.
#[derive(Debug, IntoResponses)]
#[response(
    status = 503,
    description = "`unavailable`: the database is busy or not reachable.",
    content_type = "application/problem+json"
)]
pub struct Unavailable(pub Problem);

/// The document of the running router, served by [`serve_document`].
#[derive(Clone)]
pub struct Document(pub Arc<OpenApi>);

impl std::fmt::Debug for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Document")
            .field("paths", &self.0.paths.paths.len())
            .finish_non_exhaustive()
    }
}

/// The document as `docs/api/openapi.json` holds it: pretty JSON with a trailing
/// newline. Object members come out in a fixed order (paths, schemas and
/// properties are sorted maps), so the bytes depend only on the handlers.
pub fn to_json(document: &OpenApi) -> Result<String, serde_json::Error> {
    let mut text = serde_json::to_string_pretty(document)?;
    text.push('\n');
    Ok(text)
}

/// The OpenAPI document of this API.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    operation_id = "getOpenApi",
    tag = "platform",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document (the same bytes as \
            `docs/api/openapi.json`).", body = Object, content_type = "application/json"),
        Internal,
    )
)]
pub async fn serve_document(
    Extension(document): Extension<Document>,
) -> Result<Response, ApiError> {
    let text = to_json(&document.0).map_err(ApiError::internal)?;
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}
