//! The checks of `bothy-host doctor` (HD1–HD11) and their codes as they travel in
//! a report (spec 24, section 2.2: the table of checks, "Codes of doctor" and the
//! "Rule for names"; section 3.5 "Report").
//!
//! - [`Check`]: the eleven checks with their wire names. The chapter names them
//!   only as the range "hd1_user to hd11_shared_locations" (3.5); the names in
//!   between (`hd2_groups`, ..., `hd10_helper_integrity`) are ours, built from the
//!   titles of the table of checks in 2.2.
//! - [`DoctorCode`]: every code of "Codes of doctor", each with the check it belongs
//!   to and whether it is a warning. The order of [`DoctorCode::ALL`] and of
//!   [`Check::codes`] is the order of the table, which matters: an entry carries
//!   "the first code that applies in the order of the list" ([`Check::first_code`]).
//! - [`DoctorEntry`]: one entry of `doctor` in a report: one per check, or one per
//!   named account by the rule for names (`session_user`).
//!
//! doctor reports only the result and the code per check, never content, paths or
//! values (2.2); the only free text of an entry is the name of a session user.
//! What makes a list of entries valid (every check present, `session_user` only on
//! failed entries, codes that fit their check and result) is checked with the rest
//! of the report in [`crate::report::validate`].

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::json::{JsonError, Member};

/// Every refusal of this module. No variant carries the refused text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DoctorError {
    /// A string that is not the wire name of a check.
    #[error("unknown doctor check")]
    UnknownCheck,
    /// A string that is not a code of "Codes of doctor".
    #[error("unknown doctor code")]
    UnknownCode,
}

/// One check of `bothy-host doctor` (table of checks in 2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// HD1 Users: `hd1_user`.
    Hd1User,
    /// HD2 Groups: `hd2_groups`.
    Hd2Groups,
    /// HD3 sudo: `hd3_sudo`.
    Hd3Sudo,
    /// HD4 State directory: `hd4_state_dir`.
    Hd4StateDir,
    /// HD5 Server host: `hd5_server_host`.
    Hd5ServerHost,
    /// HD6 LLM login: `hd6_llm_login`.
    Hd6LlmLogin,
    /// HD7 Profiles: `hd7_profiles`.
    Hd7Profiles,
    /// HD8 Separation: `hd8_separation`.
    Hd8Separation,
    /// HD9 Other users' home folders: `hd9_foreign_homes`.
    Hd9ForeignHomes,
    /// HD10 Helper integrity: `hd10_helper_integrity`.
    Hd10HelperIntegrity,
    /// HD11 Shared locations: `hd11_shared_locations`.
    Hd11SharedLocations,
}

impl Check {
    /// Every check, HD1 to HD11.
    pub const ALL: [Check; 11] = [
        Self::Hd1User,
        Self::Hd2Groups,
        Self::Hd3Sudo,
        Self::Hd4StateDir,
        Self::Hd5ServerHost,
        Self::Hd6LlmLogin,
        Self::Hd7Profiles,
        Self::Hd8Separation,
        Self::Hd9ForeignHomes,
        Self::Hd10HelperIntegrity,
        Self::Hd11SharedLocations,
    ];

    /// The wire name, e.g. `hd1_user`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Hd1User => "hd1_user",
            Self::Hd2Groups => "hd2_groups",
            Self::Hd3Sudo => "hd3_sudo",
            Self::Hd4StateDir => "hd4_state_dir",
            Self::Hd5ServerHost => "hd5_server_host",
            Self::Hd6LlmLogin => "hd6_llm_login",
            Self::Hd7Profiles => "hd7_profiles",
            Self::Hd8Separation => "hd8_separation",
            Self::Hd9ForeignHomes => "hd9_foreign_homes",
            Self::Hd10HelperIntegrity => "hd10_helper_integrity",
            Self::Hd11SharedLocations => "hd11_shared_locations",
        }
    }

    /// The check with this exact wire name (nothing trimmed or case-folded).
    pub fn parse(text: &str) -> Result<Self, DoctorError> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or(DoctorError::UnknownCheck)
    }

    /// The number of the check: 1 for HD1, ..., 11 for HD11.
    pub const fn number(self) -> u8 {
        self as u8 + 1
    }

    /// The codes of this check in the order of "Codes of doctor" (HD3 on Windows
    /// passes without a code; HD5 and HD7 have only warnings).
    pub fn codes(self) -> &'static [DoctorCode] {
        use DoctorCode as C;
        match self {
            Self::Hd1User => &[
                C::SessionUsersEmpty,
                C::SessionUserDuplicate,
                C::SessionUserIsServiceUser,
                C::PrivilegedUser,
                C::UserMissing,
                C::SessionUserNameInvalid,
            ],
            Self::Hd2Groups => &[C::ForbiddenGroup, C::DockerSocketWritable],
            Self::Hd3Sudo => &[C::PasswordlessSudo],
            Self::Hd4StateDir => &[C::StateDirOwner, C::StateDirMode, C::KeyFileUnprotected],
            Self::Hd5ServerHost => &[C::ServerHostDetected],
            Self::Hd6LlmLogin => &[
                C::SubscriptionLoginDetected,
                C::AuthStatusUnknown,
                C::DeclarationUnknown,
                C::AuthStatusUnchecked,
            ],
            Self::Hd7Profiles => &[
                C::WorkdirDropped,
                C::ClaudeProfileUnavailable,
                C::ProfileDropped,
            ],
            Self::Hd8Separation => &[C::StateAccessForSessionUser, C::HelperReadsState],
            Self::Hd9ForeignHomes => &[C::ForeignHomeListable],
            Self::Hd10HelperIntegrity => &[
                C::HelperUntrusted,
                C::ClaudeBinUntrusted,
                C::PeerMismatch,
                C::HelperUnreachable,
                C::PeerCheckUnavailable,
                C::PtraceScopeLow,
                C::HelperUnprotected,
            ],
            Self::Hd11SharedLocations => &[
                C::HomeUnresolvable,
                C::SharedLocation,
                C::ForeignEntry,
                C::EntryScanTimeout,
                C::EntryScanRunning,
                C::DriveRootWritable,
                C::ProgramLocationUntrusted,
            ],
        }
    }

    /// The code an entry of this check carries when the codes `found` apply: the
    /// first of [`Check::codes`] that is among them ("the first code that applies
    /// in the order of the list"). Codes of other checks in `found` are ignored;
    /// `None` when none of this check's codes was found.
    pub fn first_code(self, found: &[DoctorCode]) -> Option<DoctorCode> {
        self.codes().iter().copied().find(|c| found.contains(c))
    }
}

impl FromStr for Check {
    type Err = DoctorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Check {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Defines [`DoctorCode`] from one table, so the list, the strings, the check and
/// the warning flag of a code cannot drift apart.
macro_rules! doctor_codes {
    ( $( $(#[$meta:meta])* $variant:ident => $text:literal, $check:ident, $warning:literal; )+ ) => {
        /// A code of "Codes of doctor" (2.2, D-M2-42-6, -8, -9, -10).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DoctorCode {
            $( $(#[$meta])* $variant, )+
        }

        impl DoctorCode {
            /// Every code, check by check, each check's codes in the order of the table.
            pub const ALL: &'static [DoctorCode] = &[ $( Self::$variant, )+ ];

            /// The exact string of the spec.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }

            /// The code with this exact string (nothing trimmed or case-folded).
            pub fn parse(text: &str) -> Result<Self, DoctorError> {
                match text {
                    $( $text => Ok(Self::$variant), )+
                    _ => Err(DoctorError::UnknownCode),
                }
            }

            /// The check this code belongs to.
            pub const fn check(self) -> Check {
                match self {
                    $( Self::$variant => Check::$check, )+
                }
            }

            /// Whether the code is a warning: it keeps the check passed (`ok = true`).
            /// Every other code is a failure (`ok = false`).
            pub const fn is_warning(self) -> bool {
                match self {
                    $( Self::$variant => $warning, )+
                }
            }
        }
    };
}

doctor_codes! {
    /// HD1: `host_service.session_users` is empty.
    SessionUsersEmpty => "session_users_empty", Hd1User, false;
    /// HD1: two session users with the same name, compared without case.
    SessionUserDuplicate => "session_user_duplicate", Hd1User, false;
    /// HD1: a session user is the service user.
    SessionUserIsServiceUser => "session_user_is_service_user", Hd1User, false;
    /// HD1: a user of the host service is root, Administrator or SYSTEM.
    PrivilegedUser => "privileged_user", Hd1User, false;
    /// HD1: a configured user does not exist.
    UserMissing => "user_missing", Hd1User, false;
    /// HD1: a session user name that is not a valid name.
    SessionUserNameInvalid => "session_user_name_invalid", Hd1User, false;
    /// HD2: a user of the host service is in a forbidden group.
    ForbiddenGroup => "forbidden_group", Hd2Groups, false;
    /// HD2: the socket of the Docker daemon is writable for one of them (Linux).
    DockerSocketWritable => "docker_socket_writable", Hd2Groups, false;
    /// HD3: passwordless sudo (`sudo -n true` succeeds).
    PasswordlessSudo => "passwordless_sudo", Hd3Sudo, false;
    /// HD4: the state directory does not belong to the service user.
    StateDirOwner => "state_dir_owner", Hd4StateDir, false;
    /// HD4: the state directory is not mode 0700.
    StateDirMode => "state_dir_mode", Hd4StateDir, false;
    /// HD4: a key file is not 0600 (Windows: not protected by DPAPI).
    KeyFileUnprotected => "key_file_unprotected", Hd4StateDir, false;
    /// HD5 (warning): this host runs the server (2.3).
    ServerHostDetected => "server_host_detected", Hd5ServerHost, true;
    /// HD6: a subscription login was detected (7.4).
    SubscriptionLoginDetected => "subscription_login_detected", Hd6LlmLogin, false;
    /// HD6: `claude auth status` or the login shell probe gave no answer in time.
    AuthStatusUnknown => "auth_status_unknown", Hd6LlmLogin, false;
    /// HD6 (warning): no declaration from `ready` stored yet.
    DeclarationUnknown => "declaration_unknown", Hd6LlmLogin, true;
    /// HD6 (warning): `host_service.claude_bin` empty, only the login locations checked.
    AuthStatusUnchecked => "auth_status_unchecked", Hd6LlmLogin, true;
    /// HD7 (warning): a working directory was dropped.
    WorkdirDropped => "workdir_dropped", Hd7Profiles, true;
    /// HD7 (warning): the profile claude is not offered.
    ClaudeProfileUnavailable => "claude_profile_unavailable", Hd7Profiles, true;
    /// HD7 (warning): a profile was dropped.
    ProfileDropped => "profile_dropped", Hd7Profiles, true;
    /// HD8: the state directory or key file has an entry for a session user.
    StateAccessForSessionUser => "state_access_for_session_user", Hd8Separation, false;
    /// HD8: a PTY helper could read the state directory or the key file.
    HelperReadsState => "helper_reads_state", Hd8Separation, false;
    /// HD9: a PTY helper could list the home of another user.
    ForeignHomeListable => "foreign_home_listable", Hd9ForeignHomes, false;
    /// HD10: the binary of the helper, a service definition or an endpoint folder
    /// is not owned by a trusted owner or is writable by a session user.
    HelperUntrusted => "helper_untrusted", Hd10HelperIntegrity, false;
    /// HD10: `host_service.claude_bin`, its folders or its interpreter are not trusted.
    ClaudeBinUntrusted => "claude_bin_untrusted", Hd10HelperIntegrity, false;
    /// HD10: the peer of a channel is not the helper of its session user.
    PeerMismatch => "peer_mismatch", Hd10HelperIntegrity, false;
    /// HD10: the helper of a session user cannot be reached.
    HelperUnreachable => "helper_unreachable", Hd10HelperIntegrity, false;
    /// HD10: the platform has no proven peer check (D-M2-42-11).
    PeerCheckUnavailable => "peer_check_unavailable", Hd10HelperIntegrity, false;
    /// HD10: `kernel.yama.ptrace_scope` below 1 (Linux).
    PtraceScopeLow => "ptrace_scope_low", Hd10HelperIntegrity, false;
    /// HD10: the helper does not protect its memory.
    HelperUnprotected => "helper_unprotected", Hd10HelperIntegrity, false;
    /// HD11: the home of a session user cannot be resolved.
    HomeUnresolvable => "home_unresolvable", Hd11SharedLocations, false;
    /// HD11: a location shared with another session user.
    SharedLocation => "shared_location", Hd11SharedLocations, false;
    /// HD11: an entry in a location belongs to another session user.
    ForeignEntry => "foreign_entry", Hd11SharedLocations, false;
    /// HD11: the check of the entries did not finish in `host_service.entry_scan_timeout`.
    EntryScanTimeout => "entry_scan_timeout", Hd11SharedLocations, false;
    /// HD11: the check of the entries of this session user is still running.
    EntryScanRunning => "entry_scan_running", Hd11SharedLocations, false;
    /// HD11: the root of a drive with a location is writable (Windows).
    DriveRootWritable => "drive_root_writable", Hd11SharedLocations, false;
    /// HD11: a location for all is not owned by a trusted owner or is writable.
    ProgramLocationUntrusted => "program_location_untrusted", Hd11SharedLocations, false;
}

impl FromStr for DoctorCode {
    type Err = DoctorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for DoctorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DoctorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One entry of `doctor` in a report: the result of one check, or of one check for
/// one named account (rule for names, 2.2).
///
/// Wire form: `{"check": "hd6_llm_login", "ok": false, "code":
/// "subscription_login_detected", "session_user": "alice"}`; `code` and
/// `session_user` are absent when not set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorEntry {
    /// The check.
    pub check: Check,
    /// Whether the check passed (a warning keeps it passed).
    pub ok: bool,
    /// The first code that applies, if any.
    pub code: Option<DoctorCode>,
    /// The account the instance operator has to search in (rule for names); only
    /// on failed entries.
    pub session_user: Option<String>,
}

impl DoctorEntry {
    /// The members of an entry.
    pub const MEMBERS: &'static [&'static str] = &["check", "ok", "code", "session_user"];

    /// A passed entry without a code.
    pub fn passed(check: Check) -> Self {
        Self {
            check,
            ok: true,
            code: None,
            session_user: None,
        }
    }

    /// The entry for `code` in its check: passed for a warning, failed otherwise,
    /// without a name.
    pub fn for_code(code: DoctorCode) -> Self {
        Self {
            check: code.check(),
            ok: code.is_warning(),
            code: Some(code),
            session_user: None,
        }
    }

    /// A failed entry for `code` that names the account `session_user`.
    pub fn naming(code: DoctorCode, session_user: impl Into<String>) -> Self {
        Self {
            check: code.check(),
            ok: false,
            code: Some(code),
            session_user: Some(session_user.into()),
        }
    }

    /// Decodes one entry strictly: exactly the members `check`, `ok`, `code?` and
    /// `session_user?`; an unknown check or code is [`JsonError::InvalidValue`] at
    /// its member. The rules between entries and between members are in
    /// [`crate::report::validate`].
    pub fn decode(member: Member<'_>) -> Result<Self, JsonError> {
        let object = member.into_object(Self::MEMBERS)?;
        let check = object.member("check")?;
        let check = Check::parse(check.as_str()?).map_err(|_| check.invalid())?;
        let ok = object.bool("ok")?;
        let code = match object.opt_member("code") {
            Some(code) => Some(DoctorCode::parse(code.as_str()?).map_err(|_| code.invalid())?),
            None => None,
        };
        let session_user = object.opt_str("session_user")?.map(str::to_owned);
        Ok(Self {
            check,
            ok,
            code,
            session_user,
        })
    }

    /// The wire form as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("check".into(), self.check.as_str().into());
        map.insert("ok".into(), self.ok.into());
        if let Some(code) = self.code {
            map.insert("code".into(), code.as_str().into());
        }
        if let Some(name) = &self.session_user {
            map.insert("session_user".into(), name.as_str().into());
        }
        Value::Object(map)
    }
}

impl Serialize for DoctorEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json;

    const CHECK_NAMES: [&str; 11] = [
        "hd1_user",
        "hd2_groups",
        "hd3_sudo",
        "hd4_state_dir",
        "hd5_server_host",
        "hd6_llm_login",
        "hd7_profiles",
        "hd8_separation",
        "hd9_foreign_homes",
        "hd10_helper_integrity",
        "hd11_shared_locations",
    ];

    /// "Codes of doctor" of 2.2 written out as in the table: (check, code, warning).
    const TABLE: &[(u8, &str, bool)] = &[
        (1, "session_users_empty", false),
        (1, "session_user_duplicate", false),
        (1, "session_user_is_service_user", false),
        (1, "privileged_user", false),
        (1, "user_missing", false),
        (1, "session_user_name_invalid", false),
        (2, "forbidden_group", false),
        (2, "docker_socket_writable", false),
        (3, "passwordless_sudo", false),
        (4, "state_dir_owner", false),
        (4, "state_dir_mode", false),
        (4, "key_file_unprotected", false),
        (5, "server_host_detected", true),
        (6, "subscription_login_detected", false),
        (6, "auth_status_unknown", false),
        (6, "declaration_unknown", true),
        (6, "auth_status_unchecked", true),
        (7, "workdir_dropped", true),
        (7, "claude_profile_unavailable", true),
        (7, "profile_dropped", true),
        (8, "state_access_for_session_user", false),
        (8, "helper_reads_state", false),
        (9, "foreign_home_listable", false),
        (10, "helper_untrusted", false),
        (10, "claude_bin_untrusted", false),
        (10, "peer_mismatch", false),
        (10, "helper_unreachable", false),
        (10, "peer_check_unavailable", false),
        (10, "ptrace_scope_low", false),
        (10, "helper_unprotected", false),
        (11, "home_unresolvable", false),
        (11, "shared_location", false),
        (11, "foreign_entry", false),
        (11, "entry_scan_timeout", false),
        (11, "entry_scan_running", false),
        (11, "drive_root_writable", false),
        (11, "program_location_untrusted", false),
    ];

    #[test]
    fn checks_have_their_wire_names_and_numbers() {
        let names: Vec<&str> = Check::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names, CHECK_NAMES);
        for (i, check) in Check::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(check.number()), i + 1);
            assert_eq!(Check::parse(check.as_str()), Ok(check));
            assert_eq!(check.as_str().parse::<Check>(), Ok(check));
            assert_eq!(check.to_string(), check.as_str());
            assert_eq!(
                serde_json::to_string(&check).unwrap(),
                format!("\"{check}\"")
            );
        }
    }

    #[test]
    fn codes_match_the_table_in_order() {
        let got: Vec<(u8, &str, bool)> = DoctorCode::ALL
            .iter()
            .map(|c| (c.check().number(), c.as_str(), c.is_warning()))
            .collect();
        assert_eq!(got, TABLE);
        for &code in DoctorCode::ALL {
            assert_eq!(DoctorCode::parse(code.as_str()), Ok(code));
            assert_eq!(code.as_str().parse::<DoctorCode>(), Ok(code));
            assert_eq!(code.to_string(), code.as_str());
            assert_eq!(serde_json::to_string(&code).unwrap(), format!("\"{code}\""));
        }
    }

    #[test]
    fn codes_per_check_are_the_table_rows() {
        for check in Check::ALL {
            let from_all: Vec<DoctorCode> = DoctorCode::ALL
                .iter()
                .copied()
                .filter(|c| c.check() == check)
                .collect();
            assert_eq!(check.codes(), from_all.as_slice(), "{check}");
        }
        let total: usize = Check::ALL.iter().map(|c| c.codes().len()).sum();
        assert_eq!(total, DoctorCode::ALL.len());
        assert_eq!(total, 37);
    }

    #[test]
    fn in_every_list_failures_come_before_warnings() {
        // So "the first code that applies" never hides a failure behind a warning.
        for check in Check::ALL {
            let codes = check.codes();
            for pair in codes.windows(2) {
                assert!(
                    !pair[0].is_warning() || pair[1].is_warning(),
                    "{check}: {} before {}",
                    pair[0],
                    pair[1]
                );
            }
        }
    }

    #[test]
    fn first_code_follows_the_order_of_the_list() {
        use DoctorCode as C;
        let hd6 = Check::Hd6LlmLogin;
        assert_eq!(
            hd6.first_code(&[C::AuthStatusUnchecked, C::SubscriptionLoginDetected]),
            Some(C::SubscriptionLoginDetected)
        );
        assert_eq!(
            hd6.first_code(&[C::AuthStatusUnchecked, C::DeclarationUnknown]),
            Some(C::DeclarationUnknown)
        );
        assert_eq!(hd6.first_code(&[C::PeerMismatch]), None);
        assert_eq!(hd6.first_code(&[]), None);
        assert_eq!(
            Check::Hd1User.first_code(&[C::SessionUserNameInvalid, C::UserMissing]),
            Some(C::UserMissing)
        );
        assert_eq!(
            Check::Hd11SharedLocations
                .first_code(&[C::ProgramLocationUntrusted, C::EntryScanRunning]),
            Some(C::EntryScanRunning)
        );
    }

    #[test]
    fn unknown_strings_are_refused() {
        for text in [
            "",
            "hd1",
            "HD1_user",
            "hd1_user ",
            " hd1_user",
            "hd1-user",
            "hd12_extra",
            "hd0_user",
            "session_users_empty",
        ] {
            assert_eq!(
                Check::parse(text),
                Err(DoctorError::UnknownCheck),
                "{text:?}"
            );
        }
        for text in [
            "",
            "Shared_Location",
            "shared_location ",
            "shared-location",
            "hd11_shared_locations",
            "warning",
            "token_invalid",
        ] {
            assert_eq!(
                DoctorCode::parse(text),
                Err(DoctorError::UnknownCode),
                "{text:?}"
            );
        }
    }

    #[test]
    fn constructors() {
        assert_eq!(
            DoctorEntry::passed(Check::Hd3Sudo),
            DoctorEntry {
                check: Check::Hd3Sudo,
                ok: true,
                code: None,
                session_user: None
            }
        );
        let warn = DoctorEntry::for_code(DoctorCode::ServerHostDetected);
        assert_eq!((warn.check, warn.ok), (Check::Hd5ServerHost, true));
        let fail = DoctorEntry::for_code(DoctorCode::PasswordlessSudo);
        assert_eq!((fail.check, fail.ok), (Check::Hd3Sudo, false));
        let named = DoctorEntry::naming(DoctorCode::PeerMismatch, "alice");
        assert_eq!(named.check, Check::Hd10HelperIntegrity);
        assert!(!named.ok);
        assert_eq!(named.session_user.as_deref(), Some("alice"));
    }

    fn decode(text: &str) -> Result<DoctorEntry, JsonError> {
        let value = json::parse(text.as_bytes(), 4096)?;
        DoctorEntry::decode(Member::new(&value, "/doctor/0".into()))
    }

    #[test]
    fn entries_round_trip() {
        let entries = [
            DoctorEntry::passed(Check::Hd1User),
            DoctorEntry::for_code(DoctorCode::AuthStatusUnchecked),
            DoctorEntry::for_code(DoctorCode::DriveRootWritable),
            DoctorEntry::naming(DoctorCode::ForeignHomeListable, "former.user"),
        ];
        for entry in entries {
            let text = entry.to_value().to_string();
            assert_eq!(serde_json::to_string(&entry).unwrap(), text);
            assert_eq!(decode(&text).unwrap(), entry, "{text}");
        }
        assert_eq!(
            DoctorEntry::passed(Check::Hd1User).to_value().to_string(),
            r#"{"check":"hd1_user","ok":true}"#
        );
        assert_eq!(
            decode(r#"{"session_user":"bob","code":"peer_mismatch","ok":false,"check":"hd10_helper_integrity"}"#)
                .unwrap(),
            DoctorEntry::naming(DoctorCode::PeerMismatch, "bob")
        );
    }

    #[test]
    fn entry_refusals() {
        use crate::json::JsonType;
        let p = |s: &str| s.to_owned();
        let cases: &[(&str, JsonError)] = &[
            (
                "[]",
                JsonError::WrongType {
                    pointer: p("/doctor/0"),
                    expected: JsonType::Object,
                },
            ),
            (
                r#"{"ok":true}"#,
                JsonError::MissingMember {
                    pointer: p("/doctor/0/check"),
                },
            ),
            (
                r#"{"check":"hd1_user"}"#,
                JsonError::MissingMember {
                    pointer: p("/doctor/0/ok"),
                },
            ),
            (
                r#"{"check":"hd1_user","ok":true,"detail":"x"}"#,
                JsonError::UnknownMember {
                    pointer: p("/doctor/0/detail"),
                },
            ),
            (
                r#"{"check":"hd12","ok":true}"#,
                JsonError::InvalidValue {
                    pointer: p("/doctor/0/check"),
                },
            ),
            (
                r#"{"check":1,"ok":true}"#,
                JsonError::WrongType {
                    pointer: p("/doctor/0/check"),
                    expected: JsonType::String,
                },
            ),
            (
                r#"{"check":"hd1_user","ok":"true"}"#,
                JsonError::WrongType {
                    pointer: p("/doctor/0/ok"),
                    expected: JsonType::Boolean,
                },
            ),
            (
                r#"{"check":"hd1_user","ok":false,"code":"nope"}"#,
                JsonError::InvalidValue {
                    pointer: p("/doctor/0/code"),
                },
            ),
            (
                r#"{"check":"hd1_user","ok":false,"code":["user_missing"]}"#,
                JsonError::WrongType {
                    pointer: p("/doctor/0/code"),
                    expected: JsonType::String,
                },
            ),
            (
                r#"{"check":"hd1_user","ok":false,"session_user":7}"#,
                JsonError::WrongType {
                    pointer: p("/doctor/0/session_user"),
                    expected: JsonType::String,
                },
            ),
            (
                r#"{"check":"hd1_user","ok":false,"code":null}"#,
                JsonError::NullMember {
                    pointer: p("/code"),
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(decode(text).as_ref(), Err(want), "{text}");
        }
    }
}
