//! The report of a host service (spec 24, section 3.5 "Report") and the report part
//! of the host.pair body (3.2 "Details of the pairing", bullet "Report"), with the
//! one validation that the server applies to both and that the host service may
//! apply before it sends.
//!
//! # Wire form
//!
//! The `d` of the control op `report`, and the same members at the top level of
//! the host.pair body (which has no `doctor`, DESIGN 3.4):
//!
//! ```text
//! {
//!   "platform": "linux",
//!   "os_version": "Debian 12",
//!   "profiles": [{"name": "shell", "display_name": "Shell", "kind": "shell"}],
//!   "session_users": [{"name": "alice", "workdirs": [{"display_name": "api"}]}],
//!   "doctor": [{"check": "hd1_user", "ok": true}, ...],
//!   "is_server_host": false,
//!   "require_local_confirm": false
//! }
//! ```
//!
//! Only names and display names travel, never paths (2.2 item 5). The decoders
//! ([`Report::decode`], [`decode_profiles`], [`decode_session_users`],
//! [`decode_doctor`]) check only the JSON schema; the limits and the rules between
//! entries are [`validate`], which returns every finding, not only the first.
//!
//! # Rules of [`validate`]
//!
//! Pointers are relative to the object that holds `profiles`, `session_users` and
//! `doctor` (e.g. `/session_users/1/name`), so the server uses them as they are for
//! the host.pair body and for the `d` of a control `report`.
//!
//! | Rule | Code | Pointer |
//! |------|------|---------|
//! | `platform`, `os_version`, profile `name` and `display_name`, working directory `display_name` are display texts: not empty | `required` | the member |
//! | ... without control characters | `invalid_format` | the member |
//! | ... at most `label_max_chars` characters (not bytes) | `too_long` | the member |
//! | session user name matches [`SESSION_USER_NAME_PATTERN`] | `invalid_format` | `/session_users/i/name` |
//! | ... at most `os_user_max_chars` characters | `too_long` | `/session_users/i/name` |
//! | ... distinct without regard to case (the later one) | `duplicate` | `/session_users/i/name` |
//! | profile names distinct, exactly (the later one) | `duplicate` | `/profiles/i/name` |
//! | every list (profiles, session users, the workdirs of one session user, doctor) at most `max_entries`; an over-long list is not looked into further | `limit_reached` | the list |
//! | [`ReportContext::Pair`]: at least one session user | `required` | `/session_users` |
//! | `doctor` present ([`ReportContext::Control`]; host.pair has none) | `required` | `/doctor` |
//! | every check HD1–HD11 at least once: one finding per missing check, naming it in [`FieldError::check`] | `required` | `/doctor` |
//! | `check` + `session_user` unique together (names without case; the later one) | `duplicate` | `/doctor/i` |
//! | `session_user` only on entries with `ok = false` | `not_allowed` | `/doctor/i/session_user` |
//! | `session_user` is a session user name and at most `os_user_max_chars` | `invalid_format`, `too_long` | `/doctor/i/session_user` |
//! | a code belongs to the check of its entry | `invalid_format` | `/doctor/i/code` |
//! | a warning code only with `ok = true`, any other code only with `ok = false` | `not_allowed` | `/doctor/i/code` |
//! | an entry with `ok = false` has a code | `required` | `/doctor/i/code` |
//!
//! `host_version` travels in the host.pair body and in `identify`, not in the
//! report; [`is_valid_host_version`] checks it.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::doctor::{Check, DoctorEntry};
use crate::json::{self, JsonError, Member};

/// The pattern of a session user name: our choice for the pattern of chapter 03,
/// which we do not have. ASCII only, so comparing without case is ASCII case
/// folding and no two spellings of one name differ in Unicode normalisation.
pub const SESSION_USER_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_.-]*$";

/// Every refusal of this module that is not a JSON error or a finding of
/// [`validate`]. No variant carries the refused text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// A string that is not `shell`, `claude` or `command`.
    #[error("unknown profile kind")]
    UnknownProfileKind,
    /// A string that is not a code of [`FieldErrorCode`].
    #[error("unknown field error code")]
    UnknownFieldErrorCode,
}

/// The kind of a profile (11.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProfileKind {
    /// `shell`: the login shell of the session user.
    Shell,
    /// `claude`: the coding agent in a working directory of the session user.
    Claude,
    /// `command`: a fixed command from the configuration.
    Command,
}

impl ProfileKind {
    /// Every kind.
    pub const ALL: [ProfileKind; 3] = [Self::Shell, Self::Claude, Self::Command];

    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Shell => "shell",
            Self::Claude => "claude",
            Self::Command => "command",
        }
    }

    /// The kind with this exact string.
    pub fn parse(text: &str) -> Result<Self, ReportError> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == text)
            .ok_or(ReportError::UnknownProfileKind)
    }
}

impl FromStr for ProfileKind {
    type Err = ReportError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for ProfileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ProfileKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One offered profile: `{name, display_name, kind}` (`hosts.reported_profiles`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedProfile {
    /// The name a client asks for (`profile`, the token's `prf`).
    pub name: String,
    /// The text a client shows.
    pub display_name: String,
    /// The kind.
    pub kind: ProfileKind,
}

impl ReportedProfile {
    /// The members of a profile.
    pub const MEMBERS: &'static [&'static str] = &["name", "display_name", "kind"];

    /// Decodes one profile strictly; an unknown kind is [`JsonError::InvalidValue`].
    pub fn decode(member: Member<'_>) -> Result<Self, JsonError> {
        let object = member.into_object(Self::MEMBERS)?;
        let kind = object.member("kind")?;
        Ok(Self {
            name: object.str("name")?.to_owned(),
            display_name: object.str("display_name")?.to_owned(),
            kind: ProfileKind::parse(kind.as_str()?).map_err(|_| kind.invalid())?,
        })
    }

    /// The wire form.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("name".into(), self.name.as_str().into());
        map.insert("display_name".into(), self.display_name.as_str().into());
        map.insert("kind".into(), self.kind.as_str().into());
        Value::Object(map)
    }
}

/// One working directory of the profile claude, by its display name only; its
/// index in the list is the `workdir_index` of an opening (11.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedWorkdir {
    /// The display name from `host_service.claude_workdirs`.
    pub display_name: String,
}

impl ReportedWorkdir {
    /// The members of a working directory.
    pub const MEMBERS: &'static [&'static str] = &["display_name"];

    /// Decodes one working directory strictly.
    pub fn decode(member: Member<'_>) -> Result<Self, JsonError> {
        let object = member.into_object(Self::MEMBERS)?;
        Ok(Self {
            display_name: object.str("display_name")?.to_owned(),
        })
    }

    /// The wire form.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("display_name".into(), self.display_name.as_str().into());
        Value::Object(map)
    }
}

/// One session user: its name and its working directories after HD7
/// (`hosts.reported_session_users`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedSessionUser {
    /// The name from `host_service.session_users`, exactly as configured.
    pub name: String,
    /// The working directories, in the order the host service uses for `wdi`.
    pub workdirs: Vec<ReportedWorkdir>,
}

impl ReportedSessionUser {
    /// The members of a session user.
    pub const MEMBERS: &'static [&'static str] = &["name", "workdirs"];

    /// Decodes one session user strictly.
    pub fn decode(member: Member<'_>) -> Result<Self, JsonError> {
        let object = member.into_object(Self::MEMBERS)?;
        let workdirs = object
            .array("workdirs")?
            .iter()
            .map(ReportedWorkdir::decode)
            .collect::<Result<_, _>>()?;
        Ok(Self {
            name: object.str("name")?.to_owned(),
            workdirs,
        })
    }

    /// The wire form.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("name".into(), self.name.as_str().into());
        map.insert(
            "workdirs".into(),
            Value::Array(
                self.workdirs
                    .iter()
                    .map(ReportedWorkdir::to_value)
                    .collect(),
            ),
        );
        Value::Object(map)
    }
}

/// Decodes the array `profiles`.
pub fn decode_profiles(member: Member<'_>) -> Result<Vec<ReportedProfile>, JsonError> {
    member
        .into_array()?
        .iter()
        .map(ReportedProfile::decode)
        .collect()
}

/// Decodes the array `session_users`.
pub fn decode_session_users(member: Member<'_>) -> Result<Vec<ReportedSessionUser>, JsonError> {
    member
        .into_array()?
        .iter()
        .map(ReportedSessionUser::decode)
        .collect()
}

/// Decodes the array `doctor`.
pub fn decode_doctor(member: Member<'_>) -> Result<Vec<DoctorEntry>, JsonError> {
    member
        .into_array()?
        .iter()
        .map(DoctorEntry::decode)
        .collect()
}

/// The report of a host service: the `d` of the control op `report` (3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The platform of the host, a display text (e.g. `linux`).
    pub platform: String,
    /// The version of the operating system, a display text.
    pub os_version: String,
    /// The offered profiles.
    pub profiles: Vec<ReportedProfile>,
    /// The session users with their working directories.
    pub session_users: Vec<ReportedSessionUser>,
    /// The results of doctor.
    pub doctor: Vec<DoctorEntry>,
    /// HD5 or the peer of the control connection is an address of the host (2.3).
    pub is_server_host: bool,
    /// `host_service.require_local_confirm` (6.4).
    pub require_local_confirm: bool,
}

impl Report {
    /// The members of a report.
    pub const MEMBERS: &'static [&'static str] = &[
        "platform",
        "os_version",
        "profiles",
        "session_users",
        "doctor",
        "is_server_host",
        "require_local_confirm",
    ];

    /// Decodes a report strictly: exactly [`Report::MEMBERS`], each of its schema.
    pub fn decode(member: Member<'_>) -> Result<Self, JsonError> {
        let object = member.into_object(Self::MEMBERS)?;
        Ok(Self {
            platform: object.str("platform")?.to_owned(),
            os_version: object.str("os_version")?.to_owned(),
            profiles: decode_profiles(object.member("profiles")?)?,
            session_users: decode_session_users(object.member("session_users")?)?,
            doctor: decode_doctor(object.member("doctor")?)?,
            is_server_host: object.bool("is_server_host")?,
            require_local_confirm: object.bool("require_local_confirm")?,
        })
    }

    /// The wire form.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("platform".into(), self.platform.as_str().into());
        map.insert("os_version".into(), self.os_version.as_str().into());
        map.insert(
            "profiles".into(),
            Value::Array(
                self.profiles
                    .iter()
                    .map(ReportedProfile::to_value)
                    .collect(),
            ),
        );
        map.insert(
            "session_users".into(),
            Value::Array(
                self.session_users
                    .iter()
                    .map(ReportedSessionUser::to_value)
                    .collect(),
            ),
        );
        map.insert(
            "doctor".into(),
            Value::Array(self.doctor.iter().map(DoctorEntry::to_value).collect()),
        );
        map.insert("is_server_host".into(), self.is_server_host.into());
        map.insert(
            "require_local_confirm".into(),
            self.require_local_confirm.into(),
        );
        Value::Object(map)
    }

    /// The parts [`validate`] looks at, with the doctor list.
    pub fn parts(&self) -> ReportParts<'_> {
        ReportParts {
            platform: &self.platform,
            os_version: &self.os_version,
            profiles: &self.profiles,
            session_users: &self.session_users,
            doctor: Some(&self.doctor),
        }
    }

    /// [`validate`] of this report.
    pub fn validate(&self, limits: &ReportLimits, context: ReportContext) -> Vec<FieldError> {
        validate(&self.parts(), limits, context)
    }
}

macro_rules! serialize_via_value {
    ($($ty:ty),+) => {
        $(impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.to_value().serialize(serializer)
            }
        })+
    };
}

serialize_via_value!(
    ReportedProfile,
    ReportedWorkdir,
    ReportedSessionUser,
    Report,
    FieldError
);

/// The limits of a report, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportLimits {
    /// `terminal.report_label_max_chars` (default 100): longest display text, in
    /// characters.
    pub label_max_chars: usize,
    /// `terminal.report_max_entries` (default 64): longest list.
    pub max_entries: usize,
    /// `host.os_user_max_chars`, from a chapter we do not have (our default 32, the
    /// limit of Linux `useradd`): longest session user name, in characters.
    pub os_user_max_chars: usize,
}

impl Default for ReportLimits {
    fn default() -> Self {
        Self {
            label_max_chars: 100,
            max_entries: 64,
            os_user_max_chars: 32,
        }
    }
}

/// Where a report is checked; the rules differ only in the list of session users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportContext {
    /// The host.pair body (3.2): at least one session user, otherwise the host can
    /// never offer a terminal.
    Pair,
    /// The control op `report` (3.5): an empty list of session users is allowed,
    /// because a refused start must still report HD1; `doctor` is required.
    Control,
}

/// What [`validate`] looks at: the report members of a host.pair body or of a
/// control `report`.
#[derive(Debug, Clone, Copy)]
pub struct ReportParts<'a> {
    /// `platform`.
    pub platform: &'a str,
    /// `os_version`.
    pub os_version: &'a str,
    /// `profiles`.
    pub profiles: &'a [ReportedProfile],
    /// `session_users`.
    pub session_users: &'a [ReportedSessionUser],
    /// `doctor`; `None` when the body has none (host.pair as DESIGN 3.4 pins it).
    /// When present, the doctor rules apply in both contexts.
    pub doctor: Option<&'a [DoctorEntry]>,
}

/// The code of one finding, as `errors[].code` of a 400 `validation_failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorCode {
    /// `required`: absent, empty, or a list without an entry it must have.
    Required,
    /// `too_long`: more characters than the limit.
    TooLong,
    /// `duplicate`: equal to an earlier entry.
    Duplicate,
    /// `limit_reached`: a list with more entries than the limit.
    LimitReached,
    /// `invalid_format`: not of the required form.
    InvalidFormat,
    /// `not_allowed`: a value that the other members of its entry rule out.
    NotAllowed,
}

impl FieldErrorCode {
    /// Every code.
    pub const ALL: [FieldErrorCode; 6] = [
        Self::Required,
        Self::TooLong,
        Self::Duplicate,
        Self::LimitReached,
        Self::InvalidFormat,
        Self::NotAllowed,
    ];

    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::TooLong => "too_long",
            Self::Duplicate => "duplicate",
            Self::LimitReached => "limit_reached",
            Self::InvalidFormat => "invalid_format",
            Self::NotAllowed => "not_allowed",
        }
    }

    /// The code with this exact string.
    pub fn parse(text: &str) -> Result<Self, ReportError> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or(ReportError::UnknownFieldErrorCode)
    }
}

impl FromStr for FieldErrorCode {
    type Err = ReportError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for FieldErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FieldErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One finding: a pointer and a code, never the value.
///
/// Wire form `{"pointer": "/session_users/1/name", "code": "duplicate"}`, plus
/// `"check": "hd3_sudo"` on the finding of a missing check (pointer `/doctor`,
/// code `required`): the pointer cannot name an entry that is not there, and the
/// name of a check is ours, not a value the peer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// RFC 6901 pointer relative to the object that holds the report members.
    pub pointer: String,
    /// What is wrong.
    pub code: FieldErrorCode,
    /// The missing check, only on the finding of a missing check.
    pub check: Option<Check>,
}

impl FieldError {
    /// The members of a finding.
    pub const MEMBERS: &'static [&'static str] = &["pointer", "code", "check"];

    /// A finding at `pointer`.
    pub fn new(pointer: impl Into<String>, code: FieldErrorCode) -> Self {
        Self {
            pointer: pointer.into(),
            code,
            check: None,
        }
    }

    /// Decodes one finding strictly (the host service reads them from a control
    /// `error`).
    pub fn decode(member: Member<'_>) -> Result<Self, JsonError> {
        let object = member.into_object(Self::MEMBERS)?;
        let code = object.member("code")?;
        let check = match object.opt_member("check") {
            Some(check) => Some(Check::parse(check.as_str()?).map_err(|_| check.invalid())?),
            None => None,
        };
        Ok(Self {
            pointer: object.str("pointer")?.to_owned(),
            code: FieldErrorCode::parse(code.as_str()?).map_err(|_| code.invalid())?,
            check,
        })
    }

    /// The wire form.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("pointer".into(), self.pointer.as_str().into());
        map.insert("code".into(), self.code.as_str().into());
        if let Some(check) = self.check {
            map.insert("check".into(), check.as_str().into());
        }
        Value::Object(map)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.pointer, self.code)?;
        if let Some(check) = self.check {
            write!(f, " ({check})")?;
        }
        Ok(())
    }
}

/// Whether `name` matches [`SESSION_USER_NAME_PATTERN`] (length is a separate rule).
pub fn is_session_user_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(first) if first.is_ascii_alphabetic() || first == b'_' => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether `text` is a `host_version`: SemVer 2.0.0, without a leading `v` and
/// without surrounding space (3.2, 3.5 step 3). The `semver` crate parses SemVer
/// 2.0.0 exactly (no leading zeros in numbers or numeric pre-release identifiers,
/// no empty identifiers) and refuses `v1.2.3`.
pub fn is_valid_host_version(text: &str) -> bool {
    semver::Version::parse(text).is_ok()
}

/// Checks a report against every rule of the module docs and returns all findings
/// in document order (empty: valid). The same function serves the server (host.pair
/// with [`ReportContext::Pair`], the control `report` with
/// [`ReportContext::Control`]) and the host service.
pub fn validate(
    parts: &ReportParts<'_>,
    limits: &ReportLimits,
    context: ReportContext,
) -> Vec<FieldError> {
    let mut findings = Findings {
        limits,
        out: Vec::new(),
    };
    findings.label("/platform".into(), parts.platform);
    findings.label("/os_version".into(), parts.os_version);
    findings.profiles(parts.profiles);
    findings.session_users(parts.session_users, context);
    match (parts.doctor, context) {
        (Some(doctor), _) => findings.doctor(doctor),
        (None, ReportContext::Control) => findings.push("/doctor".into(), FieldErrorCode::Required),
        (None, ReportContext::Pair) => {}
    }
    findings.out
}

/// The state of one run of [`validate`].
struct Findings<'l> {
    limits: &'l ReportLimits,
    out: Vec<FieldError>,
}

fn at(base: &str, index: usize) -> String {
    json::pointer_join(base, &index.to_string())
}

fn chars_over(text: &str, max: usize) -> bool {
    text.chars().nth(max).is_some()
}

/// Names compared without regard to case. Valid names are ASCII, so this is ASCII
/// folding for them; an invalid name is already a finding of its own.
fn fold(name: &str) -> String {
    name.to_lowercase()
}

impl Findings<'_> {
    fn push(&mut self, pointer: String, code: FieldErrorCode) {
        self.out.push(FieldError::new(pointer, code));
    }

    /// A display text (our reading of SEC-IN-4, which we do not have): not empty,
    /// no control characters (a terminal would run them), at most the label limit.
    fn label(&mut self, pointer: String, text: &str) {
        if text.is_empty() {
            self.push(pointer, FieldErrorCode::Required);
            return;
        }
        if text.chars().any(char::is_control) {
            self.push(pointer.clone(), FieldErrorCode::InvalidFormat);
        }
        if chars_over(text, self.limits.label_max_chars) {
            self.push(pointer, FieldErrorCode::TooLong);
        }
    }

    fn os_user(&mut self, pointer: String, name: &str) {
        if !is_session_user_name(name) {
            self.push(pointer.clone(), FieldErrorCode::InvalidFormat);
        }
        if chars_over(name, self.limits.os_user_max_chars) {
            self.push(pointer, FieldErrorCode::TooLong);
        }
    }

    /// `limit_reached` at the list when it is too long; `false` then, and the
    /// caller does not look into the list (bounded work and findings).
    fn within_limit(&mut self, pointer: &str, len: usize) -> bool {
        if len > self.limits.max_entries {
            self.push(pointer.into(), FieldErrorCode::LimitReached);
            return false;
        }
        true
    }

    fn profiles(&mut self, profiles: &[ReportedProfile]) {
        if !self.within_limit("/profiles", profiles.len()) {
            return;
        }
        let mut names = HashSet::new();
        for (i, profile) in profiles.iter().enumerate() {
            let base = at("/profiles", i);
            let name_pointer = json::pointer_join(&base, "name");
            self.label(name_pointer.clone(), &profile.name);
            // Exactly: a client names the profile exactly (`profile`, `prf`).
            if !names.insert(profile.name.as_str()) {
                self.push(name_pointer, FieldErrorCode::Duplicate);
            }
            self.label(
                json::pointer_join(&base, "display_name"),
                &profile.display_name,
            );
        }
    }

    fn session_users(&mut self, users: &[ReportedSessionUser], context: ReportContext) {
        if users.is_empty() && context == ReportContext::Pair {
            self.push("/session_users".into(), FieldErrorCode::Required);
            return;
        }
        if !self.within_limit("/session_users", users.len()) {
            return;
        }
        let mut names = HashSet::new();
        for (i, user) in users.iter().enumerate() {
            let base = at("/session_users", i);
            let name_pointer = json::pointer_join(&base, "name");
            self.os_user(name_pointer.clone(), &user.name);
            if !names.insert(fold(&user.name)) {
                self.push(name_pointer, FieldErrorCode::Duplicate);
            }
            let workdirs_pointer = json::pointer_join(&base, "workdirs");
            if !self.within_limit(&workdirs_pointer, user.workdirs.len()) {
                continue;
            }
            for (j, workdir) in user.workdirs.iter().enumerate() {
                let pointer = json::pointer_join(&at(&workdirs_pointer, j), "display_name");
                self.label(pointer, &workdir.display_name);
            }
        }
    }

    fn doctor(&mut self, entries: &[DoctorEntry]) {
        if !self.within_limit("/doctor", entries.len()) {
            return;
        }
        let mut seen: HashSet<(Check, Option<String>)> = HashSet::new();
        for (i, entry) in entries.iter().enumerate() {
            let base = at("/doctor", i);
            let code_pointer = json::pointer_join(&base, "code");
            match entry.code {
                Some(code) if code.check() != entry.check => {
                    self.push(code_pointer, FieldErrorCode::InvalidFormat);
                }
                Some(code) if code.is_warning() != entry.ok => {
                    self.push(code_pointer, FieldErrorCode::NotAllowed);
                }
                Some(_) => {}
                None if !entry.ok => self.push(code_pointer, FieldErrorCode::Required),
                None => {}
            }
            if let Some(name) = &entry.session_user {
                let pointer = json::pointer_join(&base, "session_user");
                if entry.ok {
                    self.push(pointer.clone(), FieldErrorCode::NotAllowed);
                }
                self.os_user(pointer, name);
            }
            let key = (entry.check, entry.session_user.as_deref().map(fold));
            if !seen.insert(key) {
                self.push(base, FieldErrorCode::Duplicate);
            }
        }
        for check in Check::ALL {
            if !entries.iter().any(|e| e.check == check) {
                self.out.push(FieldError {
                    pointer: "/doctor".into(),
                    code: FieldErrorCode::Required,
                    check: Some(check),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::DoctorCode;
    use crate::json::JsonType;
    use FieldErrorCode as F;

    fn all_passed() -> Vec<DoctorEntry> {
        Check::ALL.into_iter().map(DoctorEntry::passed).collect()
    }

    fn profile(name: &str, kind: ProfileKind) -> ReportedProfile {
        ReportedProfile {
            name: name.into(),
            display_name: format!("{name} profile"),
            kind,
        }
    }

    fn user(name: &str, workdirs: &[&str]) -> ReportedSessionUser {
        ReportedSessionUser {
            name: name.into(),
            workdirs: workdirs
                .iter()
                .map(|w| ReportedWorkdir {
                    display_name: (*w).into(),
                })
                .collect(),
        }
    }

    fn valid() -> Report {
        Report {
            platform: "linux".into(),
            os_version: "Debian GNU/Linux 12 (bookworm)".into(),
            profiles: vec![
                profile("shell", ProfileKind::Shell),
                profile("claude", ProfileKind::Claude),
                profile("htop", ProfileKind::Command),
            ],
            session_users: vec![user("alice", &["api", "web"]), user("bob_2", &[])],
            doctor: all_passed(),
            is_server_host: false,
            require_local_confirm: true,
        }
    }

    fn decode_text(text: &str) -> Result<Report, JsonError> {
        let value = json::parse(text.as_bytes(), 1 << 20)?;
        Report::decode(Member::new(&value, String::new()))
    }

    fn e(pointer: &str, code: FieldErrorCode) -> FieldError {
        FieldError::new(pointer, code)
    }

    fn missing(check: Check) -> FieldError {
        FieldError {
            pointer: "/doctor".into(),
            code: F::Required,
            check: Some(check),
        }
    }

    #[test]
    fn a_valid_report_round_trips_and_has_no_findings() {
        let report = valid();
        let text = report.to_value().to_string();
        assert_eq!(serde_json::to_string(&report).unwrap(), text);
        assert_eq!(decode_text(&text).unwrap(), report);
        let limits = ReportLimits::default();
        assert_eq!(report.validate(&limits, ReportContext::Control), []);
        assert_eq!(report.validate(&limits, ReportContext::Pair), []);
    }

    #[test]
    fn wire_form_is_exact() {
        let report = Report {
            platform: "linux".into(),
            os_version: "12".into(),
            profiles: vec![ReportedProfile {
                name: "shell".into(),
                display_name: "Shell".into(),
                kind: ProfileKind::Shell,
            }],
            session_users: vec![user("alice", &["api"])],
            doctor: vec![DoctorEntry::naming(DoctorCode::PeerMismatch, "alice")],
            is_server_host: true,
            require_local_confirm: false,
        };
        assert_eq!(
            report.to_value(),
            serde_json::json!({
                "platform": "linux",
                "os_version": "12",
                "profiles": [{"name": "shell", "display_name": "Shell", "kind": "shell"}],
                "session_users": [{"name": "alice", "workdirs": [{"display_name": "api"}]}],
                "doctor": [{
                    "check": "hd10_helper_integrity",
                    "ok": false,
                    "code": "peer_mismatch",
                    "session_user": "alice"
                }],
                "is_server_host": true,
                "require_local_confirm": false
            })
        );
    }

    #[test]
    fn decode_refusals() {
        let p = |s: &str| s.to_owned();
        let good = valid().to_value();
        let with = |pointer: &str, value: Value| {
            let mut v = good.clone();
            *v.pointer_mut(pointer).unwrap() = value;
            v.to_string()
        };
        let without = |member: &str| {
            let mut v = good.clone();
            v.as_object_mut().unwrap().remove(member);
            v.to_string()
        };
        let extra = |pointer: &str| {
            let mut v = good.clone();
            v.pointer_mut(pointer)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .insert("path".into(), "/home/alice".into());
            v.to_string()
        };
        let cases: Vec<(String, JsonError)> = vec![
            (
                "[]".into(),
                JsonError::WrongType {
                    pointer: p(""),
                    expected: JsonType::Object,
                },
            ),
            (
                extra(""),
                JsonError::UnknownMember {
                    pointer: p("/path"),
                },
            ),
            (
                extra("/profiles/0"),
                JsonError::UnknownMember {
                    pointer: p("/profiles/0/path"),
                },
            ),
            (
                extra("/session_users/0"),
                JsonError::UnknownMember {
                    pointer: p("/session_users/0/path"),
                },
            ),
            (
                extra("/session_users/0/workdirs/1"),
                JsonError::UnknownMember {
                    pointer: p("/session_users/0/workdirs/1/path"),
                },
            ),
            (
                extra("/doctor/3"),
                JsonError::UnknownMember {
                    pointer: p("/doctor/3/path"),
                },
            ),
            (
                without("platform"),
                JsonError::MissingMember {
                    pointer: p("/platform"),
                },
            ),
            (
                without("doctor"),
                JsonError::MissingMember {
                    pointer: p("/doctor"),
                },
            ),
            (
                without("require_local_confirm"),
                JsonError::MissingMember {
                    pointer: p("/require_local_confirm"),
                },
            ),
            (
                with("/os_version", 12.into()),
                JsonError::WrongType {
                    pointer: p("/os_version"),
                    expected: JsonType::String,
                },
            ),
            (
                with("/profiles", Value::Object(Map::new())),
                JsonError::WrongType {
                    pointer: p("/profiles"),
                    expected: JsonType::Array,
                },
            ),
            (
                with("/profiles/1/kind", "script".into()),
                JsonError::InvalidValue {
                    pointer: p("/profiles/1/kind"),
                },
            ),
            (
                with("/profiles/1/kind", "Shell".into()),
                JsonError::InvalidValue {
                    pointer: p("/profiles/1/kind"),
                },
            ),
            (
                with("/session_users/1", "bob".into()),
                JsonError::WrongType {
                    pointer: p("/session_users/1"),
                    expected: JsonType::Object,
                },
            ),
            (
                with("/session_users/0/workdirs", "api".into()),
                JsonError::WrongType {
                    pointer: p("/session_users/0/workdirs"),
                    expected: JsonType::Array,
                },
            ),
            (
                with("/session_users/0/workdirs/0", "api".into()),
                JsonError::WrongType {
                    pointer: p("/session_users/0/workdirs/0"),
                    expected: JsonType::Object,
                },
            ),
            (
                with("/doctor/4/check", "hd5".into()),
                JsonError::InvalidValue {
                    pointer: p("/doctor/4/check"),
                },
            ),
            (
                with("/is_server_host", "false".into()),
                JsonError::WrongType {
                    pointer: p("/is_server_host"),
                    expected: JsonType::Boolean,
                },
            ),
            (
                r#"{"platform":"linux","platform":"linux"}"#.into(),
                JsonError::DuplicateMember {
                    pointer: p("/platform"),
                },
            ),
            (
                with("/session_users/0/workdirs", Value::Null),
                JsonError::NullMember {
                    pointer: p("/session_users/0/workdirs"),
                },
            ),
        ];
        for (text, want) in &cases {
            assert_eq!(decode_text(text).as_ref(), Err(want), "{text}");
        }
    }

    /// Every rule, each case a change of the valid report and its exact findings.
    #[test]
    fn validation_findings() {
        type Case = (&'static str, fn(&mut Report), Vec<FieldError>);
        let cases: Vec<Case> = vec![
            (
                "empty os_version",
                |r| r.os_version.clear(),
                vec![e("/os_version", F::Required)],
            ),
            (
                "empty platform",
                |r| r.platform.clear(),
                vec![e("/platform", F::Required)],
            ),
            (
                "os_version of 101 characters",
                |r| r.os_version = "é".repeat(101),
                vec![e("/os_version", F::TooLong)],
            ),
            (
                "os_version of 100 two-byte characters is fine",
                |r| r.os_version = "é".repeat(100),
                vec![],
            ),
            (
                "escape sequence in a display name",
                |r| r.profiles[0].display_name = "\u{1b}[31mred".into(),
                vec![e("/profiles/0/display_name", F::InvalidFormat)],
            ),
            (
                "control character and too long",
                |r| r.platform = format!("\n{}", "a".repeat(100)),
                vec![e("/platform", F::InvalidFormat), e("/platform", F::TooLong)],
            ),
            (
                "profile name too long",
                |r| r.profiles[2].name = "p".repeat(101),
                vec![e("/profiles/2/name", F::TooLong)],
            ),
            (
                "profile display name empty",
                |r| r.profiles[1].display_name.clear(),
                vec![e("/profiles/1/display_name", F::Required)],
            ),
            (
                "profile names duplicate, the later one",
                |r| r.profiles[2].name = "shell".into(),
                vec![e("/profiles/2/name", F::Duplicate)],
            ),
            (
                "profile names differing in case are distinct",
                |r| r.profiles[2].name = "Shell".into(),
                vec![],
            ),
            (
                "workdir display name too long",
                |r| r.session_users[0].workdirs[1].display_name = "w".repeat(101),
                vec![e("/session_users/0/workdirs/1/display_name", F::TooLong)],
            ),
            (
                "workdir display name empty",
                |r| r.session_users[0].workdirs[0].display_name.clear(),
                vec![e("/session_users/0/workdirs/0/display_name", F::Required)],
            ),
            (
                "session user names duplicate without case",
                |r| r.session_users[1].name = "ALICE".into(),
                vec![e("/session_users/1/name", F::Duplicate)],
            ),
            (
                "session user name with a space",
                |r| r.session_users[1].name = "bob smith".into(),
                vec![e("/session_users/1/name", F::InvalidFormat)],
            ),
            (
                "session user name starting with a digit",
                |r| r.session_users[1].name = "2bob".into(),
                vec![e("/session_users/1/name", F::InvalidFormat)],
            ),
            (
                "session user name starting with a hyphen",
                |r| r.session_users[1].name = "-bob".into(),
                vec![e("/session_users/1/name", F::InvalidFormat)],
            ),
            (
                "session user name empty",
                |r| r.session_users[1].name.clear(),
                vec![e("/session_users/1/name", F::InvalidFormat)],
            ),
            (
                "session user name non-ASCII",
                |r| r.session_users[1].name = "bjørn".into(),
                vec![e("/session_users/1/name", F::InvalidFormat)],
            ),
            (
                "session user name of 33 characters",
                |r| r.session_users[1].name = "b".repeat(33),
                vec![e("/session_users/1/name", F::TooLong)],
            ),
            (
                "session user name of 32 characters with . - _",
                |r| r.session_users[1].name = format!("_a.b-c{}", "d".repeat(26)),
                vec![],
            ),
            (
                "65 profiles",
                |r| {
                    r.profiles = (0..65)
                        .map(|i| profile(&format!("p{i}"), ProfileKind::Command))
                        .collect()
                },
                vec![e("/profiles", F::LimitReached)],
            ),
            (
                "64 profiles",
                |r| {
                    r.profiles = (0..64)
                        .map(|i| profile(&format!("p{i}"), ProfileKind::Command))
                        .collect()
                },
                vec![],
            ),
            (
                "65 session users, not looked into",
                |r| r.session_users = (0..65).map(|_| user("same", &[])).collect(),
                vec![e("/session_users", F::LimitReached)],
            ),
            (
                "65 workdirs of one user, other users still checked",
                |r| {
                    r.session_users[0].workdirs = (0..65)
                        .map(|_| ReportedWorkdir {
                            display_name: String::new(),
                        })
                        .collect();
                    r.session_users[1].name = "Alice".into();
                },
                vec![
                    e("/session_users/0/workdirs", F::LimitReached),
                    e("/session_users/1/name", F::Duplicate),
                ],
            ),
            (
                "65 doctor entries",
                |r| {
                    r.doctor = (0..65)
                        .map(|i| DoctorEntry::naming(DoctorCode::PeerMismatch, format!("u{i}")))
                        .collect()
                },
                vec![e("/doctor", F::LimitReached)],
            ),
            (
                "empty session users allowed in control",
                |r| r.session_users.clear(),
                vec![],
            ),
            (
                "missing checks, one finding each",
                |r| {
                    r.doctor
                        .retain(|d| !matches!(d.check, Check::Hd3Sudo | Check::Hd11SharedLocations))
                },
                vec![missing(Check::Hd3Sudo), missing(Check::Hd11SharedLocations)],
            ),
            (
                "empty doctor list",
                |r| r.doctor.clear(),
                Check::ALL.into_iter().map(missing).collect(),
            ),
            (
                "check twice without a name",
                |r| r.doctor.push(DoctorEntry::passed(Check::Hd2Groups)),
                vec![e("/doctor/11", F::Duplicate)],
            ),
            (
                "check twice with the same name, without case",
                |r| {
                    r.doctor[9] = DoctorEntry::naming(DoctorCode::PeerMismatch, "alice");
                    r.doctor
                        .push(DoctorEntry::naming(DoctorCode::HelperUnreachable, "Alice"));
                },
                vec![e("/doctor/11", F::Duplicate)],
            ),
            (
                "one check for two names, and the same name for two checks",
                |r| {
                    r.doctor[9] = DoctorEntry::naming(DoctorCode::PeerMismatch, "alice");
                    r.doctor
                        .push(DoctorEntry::naming(DoctorCode::PeerMismatch, "bob_2"));
                    r.doctor
                        .push(DoctorEntry::naming(DoctorCode::SharedLocation, "alice"));
                },
                vec![],
            ),
            (
                "a named entry beside an unnamed entry of the same check",
                |r| {
                    r.doctor[5] = DoctorEntry::for_code(DoctorCode::AuthStatusUnknown);
                    r.doctor.push(DoctorEntry::naming(
                        DoctorCode::SubscriptionLoginDetected,
                        "former",
                    ));
                },
                vec![],
            ),
            (
                "session_user on a passed entry",
                |r| r.doctor[0].session_user = Some("alice".into()),
                vec![e("/doctor/0/session_user", F::NotAllowed)],
            ),
            (
                "session_user that is no session user name",
                |r| r.doctor[8] = DoctorEntry::naming(DoctorCode::ForeignHomeListable, "a b"),
                vec![e("/doctor/8/session_user", F::InvalidFormat)],
            ),
            (
                "session_user too long",
                |r| {
                    r.doctor[8] =
                        DoctorEntry::naming(DoctorCode::ForeignHomeListable, "f".repeat(33))
                },
                vec![e("/doctor/8/session_user", F::TooLong)],
            ),
            (
                "code of another check",
                |r| {
                    r.doctor[0] = DoctorEntry {
                        check: Check::Hd1User,
                        ok: false,
                        code: Some(DoctorCode::PasswordlessSudo),
                        session_user: None,
                    }
                },
                vec![e("/doctor/0/code", F::InvalidFormat)],
            ),
            (
                "warning code on a failed entry",
                |r| {
                    r.doctor[4] = DoctorEntry {
                        ok: false,
                        ..DoctorEntry::for_code(DoctorCode::ServerHostDetected)
                    }
                },
                vec![e("/doctor/4/code", F::NotAllowed)],
            ),
            (
                "failing code on a passed entry",
                |r| {
                    r.doctor[2] = DoctorEntry {
                        ok: true,
                        ..DoctorEntry::for_code(DoctorCode::PasswordlessSudo)
                    }
                },
                vec![e("/doctor/2/code", F::NotAllowed)],
            ),
            (
                "failed entry without a code",
                |r| r.doctor[3].ok = false,
                vec![e("/doctor/3/code", F::Required)],
            ),
            (
                "warnings and failures where they belong",
                |r| {
                    r.doctor[4] = DoctorEntry::for_code(DoctorCode::ServerHostDetected);
                    r.doctor[5] = DoctorEntry::for_code(DoctorCode::DeclarationUnknown);
                    r.doctor[6] = DoctorEntry::for_code(DoctorCode::ProfileDropped);
                    r.doctor[10] = DoctorEntry::for_code(DoctorCode::ProgramLocationUntrusted);
                },
                vec![],
            ),
            (
                "findings come in document order",
                |r| {
                    r.doctor.remove(0);
                    r.doctor[0].session_user = Some("x".into());
                    r.session_users[0].name = "".into();
                    r.os_version.clear();
                },
                vec![
                    e("/os_version", F::Required),
                    e("/session_users/0/name", F::InvalidFormat),
                    e("/doctor/0/session_user", F::NotAllowed),
                    missing(Check::Hd1User),
                ],
            ),
        ];
        let limits = ReportLimits::default();
        for (name, change, want) in cases {
            let mut report = valid();
            change(&mut report);
            assert_eq!(
                report.validate(&limits, ReportContext::Control),
                want,
                "{name}"
            );
            // Also valid JSON that decodes to the same report (the rules are not
            // decode errors).
            let text = report.to_value().to_string();
            assert_eq!(decode_text(&text).unwrap(), report, "{name}");
        }
    }

    #[test]
    fn pair_context() {
        let limits = ReportLimits::default();
        let report = valid();
        let mut parts = report.parts();
        parts.doctor = None;
        assert_eq!(validate(&parts, &limits, ReportContext::Pair), []);
        // Control always needs the doctor list.
        assert_eq!(
            validate(&parts, &limits, ReportContext::Control),
            [e("/doctor", F::Required)]
        );
        // At least one session user in host.pair, and the rest still checked.
        parts.session_users = &[];
        parts.os_version = "";
        assert_eq!(
            validate(&parts, &limits, ReportContext::Pair),
            [
                e("/os_version", F::Required),
                e("/session_users", F::Required)
            ]
        );
        // A doctor list in a host.pair body gets the same rules.
        let doctor = [DoctorEntry::passed(Check::Hd1User)];
        parts.os_version = "12";
        parts.session_users = &report.session_users;
        parts.doctor = Some(&doctor);
        assert_eq!(
            validate(&parts, &limits, ReportContext::Pair),
            Check::ALL[1..]
                .iter()
                .copied()
                .map(missing)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn limits_come_from_the_configuration() {
        let limits = ReportLimits {
            label_max_chars: 3,
            max_entries: 1,
            os_user_max_chars: 4,
        };
        let mut report = valid();
        report.profiles.truncate(1);
        report.session_users.truncate(1);
        report.session_users[0].workdirs.truncate(1);
        report.platform = "abc".into();
        report.os_version = "abcd".into();
        assert_eq!(
            report.validate(&limits, ReportContext::Pair),
            [
                e("/os_version", F::TooLong),
                e("/profiles/0/name", F::TooLong),
                e("/profiles/0/display_name", F::TooLong),
                e("/session_users/0/name", F::TooLong),
                e("/doctor", F::LimitReached),
            ]
        );
        assert_eq!(
            ReportLimits::default(),
            ReportLimits {
                label_max_chars: 100,
                max_entries: 64,
                os_user_max_chars: 32
            }
        );
    }

    #[test]
    fn session_user_name_pattern() {
        for good in ["a", "_", "A", "alice", "bob_2", "a.b-c", "_x.", "Z9"] {
            assert!(is_session_user_name(good), "{good:?}");
        }
        for bad in [
            "", "1a", "-a", ".a", "a b", "a/b", "a:b", "a\n", "ä", "a@b", "a$",
        ] {
            assert!(!is_session_user_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn host_version_is_semver_without_v() {
        for good in [
            "0.0.0",
            "1.2.3",
            "10.20.30",
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-0.3.7",
            "1.0.0-x.7.z.92",
            "1.0.0-alpha+001",
            "1.0.0+20130313144700",
            "1.0.0-beta+exp.sha.5114f85",
            "1.0.0-x-y-z.--",
        ] {
            assert!(is_valid_host_version(good), "{good:?}");
        }
        for bad in [
            "",
            "v1.2.3",
            "V1.2.3",
            "1",
            "1.2",
            "1.2.3.4",
            " 1.2.3",
            "1.2.3 ",
            "01.2.3",
            "1.02.3",
            "1.2.03",
            "1.0.0-01",
            "1.0.0-",
            "1.0.0+",
            "1.0.0-alpha..1",
            "1.0.0-alpha_1",
            "1.0.0+build+2",
            "-1.0.0",
            "1.2.3\n",
        ] {
            assert!(!is_valid_host_version(bad), "{bad:?}");
        }
    }

    #[test]
    fn field_errors_round_trip_and_refuse() {
        let cases = [
            e("/session_users/1/name", F::Duplicate),
            missing(Check::Hd7Profiles),
        ];
        for finding in cases {
            let text = finding.to_value().to_string();
            assert_eq!(serde_json::to_string(&finding).unwrap(), text);
            let value = json::parse(text.as_bytes(), 1000).unwrap();
            assert_eq!(
                FieldError::decode(Member::new(&value, String::new())).unwrap(),
                finding
            );
        }
        assert_eq!(
            missing(Check::Hd3Sudo).to_value(),
            serde_json::json!({"pointer": "/doctor", "code": "required", "check": "hd3_sudo"})
        );
        let refusals = [
            (r#"{"pointer":"/a"}"#, "/code"),
            (r#"{"code":"required"}"#, "/pointer"),
            (r#"{"pointer":"/a","code":"Required"}"#, "/code"),
            (
                r#"{"pointer":"/a","code":"required","check":"hd0"}"#,
                "/check",
            ),
            (
                r#"{"pointer":"/a","code":"required","value":"x"}"#,
                "/value",
            ),
            (r#"{"pointer":1,"code":"required"}"#, "/pointer"),
        ];
        for (text, pointer) in refusals {
            let value = json::parse(text.as_bytes(), 1000).unwrap();
            let err = FieldError::decode(Member::new(&value, String::new())).unwrap_err();
            assert_eq!(err.pointer(), Some(pointer), "{text}");
        }
        for code in FieldErrorCode::ALL {
            assert_eq!(FieldErrorCode::parse(code.as_str()), Ok(code));
            assert_eq!(code.to_string().parse::<FieldErrorCode>(), Ok(code));
        }
        assert_eq!(
            FieldErrorCode::parse("unknown_member"),
            Err(ReportError::UnknownFieldErrorCode)
        );
        assert_eq!(
            missing(Check::Hd3Sudo).to_string(),
            "\"/doctor\": required (hd3_sudo)"
        );
    }

    #[test]
    fn profile_kinds() {
        for kind in ProfileKind::ALL {
            assert_eq!(ProfileKind::parse(kind.as_str()), Ok(kind));
            assert_eq!(kind.to_string().parse::<ProfileKind>(), Ok(kind));
        }
        assert_eq!(
            ProfileKind::parse("SHELL"),
            Err(ReportError::UnknownProfileKind)
        );
    }

    #[test]
    fn part_decoders_for_host_pair() {
        // The server opens the host.pair body with its own members and reads the
        // report parts with the part decoders.
        let body = r#"{"code":"c","profiles":[{"name":"shell","display_name":"Shell","kind":"shell"}],"session_users":[{"name":"alice","workdirs":[]}]}"#;
        let value = json::parse(body.as_bytes(), 1000).unwrap();
        let object = json::Object::root(&value, &["code", "profiles", "session_users"]).unwrap();
        let profiles = decode_profiles(object.member("profiles").unwrap()).unwrap();
        let users = decode_session_users(object.member("session_users").unwrap()).unwrap();
        assert_eq!(
            profiles,
            [profile_with("shell", "Shell", ProfileKind::Shell)]
        );
        assert_eq!(users, [user("alice", &[])]);
        let value = json::parse(br#"[{"check":"hd1_user","ok":true}]"#, 100).unwrap();
        assert_eq!(
            decode_doctor(Member::new(&value, "/doctor".into())).unwrap(),
            [DoctorEntry::passed(Check::Hd1User)]
        );
    }

    fn profile_with(name: &str, display_name: &str, kind: ProfileKind) -> ReportedProfile {
        ReportedProfile {
            name: name.into(),
            display_name: display_name.into(),
            kind,
        }
    }
}
