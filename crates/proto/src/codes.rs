//! Close codes of the terminal channels (spec 24, section 13), the reasons for
//! ending a session `close_reason` and their detail `close_detail` (10.3), and the
//! pairs of them that may be stored (M2-46, D-M2-46-2).
//!
//! - [`CloseCode`]: the WebSocket close codes of the streams, the control and the
//!   data connection, with their numbers and snake_case names.
//! - [`CloseReason`] and [`CloseDetail`]: the closed lists of 10.3, as the exact
//!   strings that travel in JSON and are stored in `terminal_sessions`.
//! - [`check_close_pair`]: the one rule for which `close_detail` goes with which
//!   `close_reason`, for every writer.
//! - [`CloseReason::host_may_report`]: what a host service may send in
//!   `session.ended` (3.5 "Session reports").
//! - [`CloseDetail::handshake_close_code`]: the close code of a refused handshake
//!   (5.3).

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Every refusal of this module. No variant carries the refused value: an unknown
/// number or string comes from the peer and stays out of logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    /// A number that is not a close code of section 13 (or of chapter 04 used here).
    #[error("unknown close code")]
    UnknownCloseCode,
    /// A string that is not a `close_reason` of 10.3.
    #[error("unknown close_reason")]
    UnknownCloseReason,
    /// A string that is not a `close_detail` of 10.3.
    #[error("unknown close_detail")]
    UnknownCloseDetail,
    /// `open_failed` or `host_policy_violation` without a `close_detail`.
    #[error("close_reason requires a close_detail")]
    DetailRequired,
    /// A `close_detail` with a reason that takes none.
    #[error("close_reason takes no close_detail")]
    DetailNotAllowed,
    /// `host_policy_violation` with a detail other than `subscription_login_detected`,
    /// `helper_untrusted` or `shared_location`.
    #[error("close_detail does not belong to close_reason")]
    DetailNotForReason,
}

/// The close codes of the terminal channels.
///
/// Section 13 defines 4000 and 41xx. The chapter also uses codes of chapter 04
/// section 6.4, which we do not have; their numbers come from the uses in chapter
/// 24, their names are ours:
///
/// | Code | Name (ours)          | Use in chapter 24                                        |
/// |------|----------------------|----------------------------------------------------------|
/// | 4002 | `invalid_message`    | a frame that fails decoding, a text or binary frame where the other is required, a frame over the size limit (3.5, 5.4) |
/// | 4004 | `credential_invalid` | the device stream's credential fails its check (6.3 rate limits) |
/// | 4008 | `rate_limited`       | a rate limit; the host waits `retry_after` of the close reason (3.5) |
/// | 4009 | `heartbeat_timeout`  | no heartbeat in time, or no answer to the duplicate probe (3.4, 3.5) |
/// | 4012 | `credential_revoked` | the device stream's credential was revoked (6.3 rate limits) |
/// | 4013 | `server_shutdown`    | the server shuts down (3.5)                              |
/// | 4014 | `slow_consumer`      | full outbound queue, missed write deadline, relay stall (3.5, 6.3) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum CloseCode {
    /// 4000: internal error of the server; reconnect with backoff.
    UnknownError = 4000,
    /// 4002 (chapter 04): a message that fails decoding or breaks the channel's rules.
    InvalidMessage = 4002,
    /// 4004 (chapter 04): the credential of the connection is invalid.
    CredentialInvalid = 4004,
    /// 4008 (chapter 04): rate limited.
    RateLimited = 4008,
    /// 4009 (chapter 04): heartbeat missed, or no answer to the duplicate probe.
    HeartbeatTimeout = 4009,
    /// 4012 (chapter 04): the credential was revoked.
    CredentialRevoked = 4012,
    /// 4013 (chapter 04): the server shuts down.
    ServerShutdown = 4013,
    /// 4014 (chapter 04): the receiver does not keep up.
    SlowConsumer = 4014,
    /// 4100: session ended, reason in `close_reason`; do not reconnect.
    TerminalClosed = 4100,
    /// 4101: terminal session token expired or already used; open or attach again.
    TerminalTokenStale = 4101,
    /// 4102: counterpart missing.
    TerminalHostUnavailable = 4102,
    /// 4103: another device has attached.
    TerminalReplaced = 4103,
    /// 4104: any other error of the token, the handshake or a frame; no new attempt.
    TerminalHandshakeFailed = 4104,
    /// 4110: host key unknown or replaced by a re-pairing.
    HostUnpaired = 4110,
    /// 4111: host disabled or retired.
    HostDisabled = 4111,
    /// 4112: second live control connection with the same keys.
    HostDuplicate = 4112,
    /// 4113: host proof invalid or too late.
    HostAuthFailed = 4113,
    /// 4114: host version below the minimum.
    HostVersionUnsupported = 4114,
}

impl CloseCode {
    /// Every close code, in numeric order.
    pub const ALL: &'static [CloseCode] = &[
        Self::UnknownError,
        Self::InvalidMessage,
        Self::CredentialInvalid,
        Self::RateLimited,
        Self::HeartbeatTimeout,
        Self::CredentialRevoked,
        Self::ServerShutdown,
        Self::SlowConsumer,
        Self::TerminalClosed,
        Self::TerminalTokenStale,
        Self::TerminalHostUnavailable,
        Self::TerminalReplaced,
        Self::TerminalHandshakeFailed,
        Self::HostUnpaired,
        Self::HostDisabled,
        Self::HostDuplicate,
        Self::HostAuthFailed,
        Self::HostVersionUnsupported,
    ];

    /// The number sent in the WebSocket close frame.
    pub const fn as_u16(self) -> u16 {
        self as u16
    }

    /// The close code with this number.
    pub fn from_u16(code: u16) -> Result<Self, CodeError> {
        Self::ALL
            .iter()
            .copied()
            .find(|c| c.as_u16() == code)
            .ok_or(CodeError::UnknownCloseCode)
    }

    /// The snake_case name (section 13; for the codes of chapter 04 our name).
    pub const fn name(self) -> &'static str {
        match self {
            Self::UnknownError => "unknown_error",
            Self::InvalidMessage => "invalid_message",
            Self::CredentialInvalid => "credential_invalid",
            Self::RateLimited => "rate_limited",
            Self::HeartbeatTimeout => "heartbeat_timeout",
            Self::CredentialRevoked => "credential_revoked",
            Self::ServerShutdown => "server_shutdown",
            Self::SlowConsumer => "slow_consumer",
            Self::TerminalClosed => "terminal_closed",
            Self::TerminalTokenStale => "terminal_token_stale",
            Self::TerminalHostUnavailable => "terminal_host_unavailable",
            Self::TerminalReplaced => "terminal_replaced",
            Self::TerminalHandshakeFailed => "terminal_handshake_failed",
            Self::HostUnpaired => "host_unpaired",
            Self::HostDisabled => "host_disabled",
            Self::HostDuplicate => "host_duplicate",
            Self::HostAuthFailed => "host_auth_failed",
            Self::HostVersionUnsupported => "host_version_unsupported",
        }
    }
}

impl TryFrom<u16> for CloseCode {
    type Error = CodeError;

    fn try_from(code: u16) -> Result<Self, Self::Error> {
        Self::from_u16(code)
    }
}

impl From<CloseCode> for u16 {
    fn from(code: CloseCode) -> u16 {
        code.as_u16()
    }
}

impl fmt::Display for CloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Defines a closed list of snake_case codes: the enum, `ALL`, `as_str`, `FromStr`,
/// `Display` and serde as exactly the strings.
///
/// Serde is written by hand rather than derived: a derived enum also accepts the
/// externally tagged form `{"client_closed": null}` from serde_json, and its error
/// for an unknown variant quotes the refused string. Here only a JSON string with
/// exactly one of the codes is accepted, and the error names no input.
macro_rules! code_list {
    (
        $(#[$meta:meta])*
        $name:ident, $error:ident, $expecting:literal,
        { $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+ }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in the order of the spec's list.
            pub const ALL: &'static [$name] = &[ $( Self::$variant, )+ ];

            /// The exact string of the spec.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }

            /// The value for the exact string of the spec; nothing is trimmed or
            /// case-folded.
            pub fn parse(text: &str) -> Result<Self, CodeError> {
                match text {
                    $( $text => Ok(Self::$variant), )+
                    _ => Err(CodeError::$error),
                }
            }
        }

        impl FromStr for $name {
            type Err = CodeError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Self::parse(text)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct StrVisitor;

                impl Visitor<'_> for StrVisitor {
                    type Value = $name;

                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }

                    fn visit_str<E: de::Error>(self, text: &str) -> Result<$name, E> {
                        $name::parse(text).map_err(E::custom)
                    }
                }

                deserializer.deserialize_str(StrVisitor)
            }
        }
    };
}

code_list! {
    /// Why a terminal session ended: `terminal_sessions.close_reason` (10.3).
    CloseReason, UnknownCloseReason, "a close_reason string",
    {
        /// Frame close or `terminal.close` by the person.
        ClientClosed => "client_closed",
        /// `terminal.close` by an owner.
        ClosedByOwner => "closed_by_owner",
        /// The process of the PTY ended.
        ProcessExited => "process_exited",
        /// Idle limit (6.3).
        IdleTimeout => "idle_timeout",
        /// Maximum duration (6.3).
        MaxDuration => "max_duration",
        /// Detached too long (6.2).
        DetachExpired => "detach_expired",
        /// Revocation (8.3).
        AccessRevoked => "access_revoked",
        /// Change of the LLM declaration or its holder (7.3).
        I6Violation => "i6_violation",
        /// The host was disabled (3.1).
        HostDisabled => "host_disabled",
        /// The host was retired (3.1).
        HostRetired => "host_retired",
        /// The host was paired again (3.3).
        HostRekeyed => "host_rekeyed",
        /// The host service restarted and no longer names the session (6.2).
        HostRestarted => "host_restarted",
        /// Identity (08): the person was disabled.
        UserDisabled => "user_disabled",
        /// Identity (08): the device was revoked.
        DeviceRevoked => "device_revoked",
        /// Identity (08): the session was revoked.
        SessionRevoked => "session_revoked",
        /// Identity (08): logout.
        Logout => "logout",
        /// Handshake, token, timeout on opening or refusal by the host service;
        /// code in `close_detail`.
        OpenFailed => "open_failed",
        /// A check of the host service failed during operation; code in `close_detail`.
        HostPolicyViolation => "host_policy_violation",
    }
}

code_list! {
    /// The closed list of `close_detail` codes (10.3).
    CloseDetail, UnknownCloseDetail, "a close_detail string",
    {
        /// Signature, kid, typ, aud, sid, cek or att of the token wrong (5.3).
        TokenInvalid => "token_invalid",
        /// The token's exp has passed (5.3).
        TokenExpired => "token_expired",
        /// The token's jti was already seen (5.3).
        TokenReplayed => "token_replayed",
        /// The Noise handshake failed, or a fault of the encrypted stream (5.3, 5.4).
        HandshakeFailed => "handshake_failed",
        /// Profile unknown or wdi not a working directory of osu (5.3).
        ProfileUnknown => "profile_unknown",
        /// osu not in `host_service.session_users` (5.3).
        SessionUserUnknown => "session_user_unknown",
        /// osu bound to another person (5.3).
        SessionUserMismatch => "session_user_mismatch",
        /// Server host without own = true (5.3).
        ServerHostOwnerOnly => "server_host_owner_only",
        /// Local confirmation refused or unanswered (6.4).
        LocalConfirmDenied => "local_confirm_denied",
        /// HD6 failed: a subscription login was detected (7.4).
        SubscriptionLoginDetected => "subscription_login_detected",
        /// HD10 failed, or a failed peer check of a session channel (7.4).
        HelperUntrusted => "helper_untrusted",
        /// HD11 failed: a shared location, or a path outside the session user's home (7.4).
        SharedLocation => "shared_location",
        /// The PTY or the profile could not be started (6.5, 7.4).
        PtyFailed => "pty_failed",
        /// The opening did not finish within `terminal.open_timeout` (6.1).
        OpenTimeout => "open_timeout",
    }
}

impl CloseReason {
    /// Whether a host service may send this reason in `session.ended` (3.5
    /// "Session reports", 10.3): only `client_closed`, `process_exited`,
    /// `idle_timeout`, `detach_expired`, `open_failed` and `host_policy_violation`.
    pub const fn host_may_report(self) -> bool {
        matches!(
            self,
            Self::ClientClosed
                | Self::ProcessExited
                | Self::IdleTimeout
                | Self::DetachExpired
                | Self::OpenFailed
                | Self::HostPolicyViolation
        )
    }
}

impl CloseDetail {
    /// The close code of a handshake that the host service refuses with this detail
    /// (5.3): `token_expired` and `token_replayed` give 4101, every other detail 4104.
    pub const fn handshake_close_code(self) -> CloseCode {
        match self {
            Self::TokenExpired | Self::TokenReplayed => CloseCode::TerminalTokenStale,
            _ => CloseCode::TerminalHandshakeFailed,
        }
    }
}

/// The one rule for a stored pair (M2-46, D-M2-46-2), for every writer: a
/// `close_detail` is set exactly with `open_failed` (any detail) and
/// `host_policy_violation` (only `subscription_login_detected`, `helper_untrusted`,
/// `shared_location`); both require one, every other reason takes none.
pub fn check_close_pair(reason: CloseReason, detail: Option<CloseDetail>) -> Result<(), CodeError> {
    match (reason, detail) {
        (CloseReason::OpenFailed, Some(_)) => Ok(()),
        (
            CloseReason::HostPolicyViolation,
            Some(
                CloseDetail::SubscriptionLoginDetected
                | CloseDetail::HelperUntrusted
                | CloseDetail::SharedLocation,
            ),
        ) => Ok(()),
        (CloseReason::HostPolicyViolation, Some(_)) => Err(CodeError::DetailNotForReason),
        (CloseReason::OpenFailed | CloseReason::HostPolicyViolation, None) => {
            Err(CodeError::DetailRequired)
        }
        (_, Some(_)) => Err(CodeError::DetailNotAllowed),
        (_, None) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTION_13: &[(u16, &str)] = &[
        (4000, "unknown_error"),
        (4100, "terminal_closed"),
        (4101, "terminal_token_stale"),
        (4102, "terminal_host_unavailable"),
        (4103, "terminal_replaced"),
        (4104, "terminal_handshake_failed"),
        (4110, "host_unpaired"),
        (4111, "host_disabled"),
        (4112, "host_duplicate"),
        (4113, "host_auth_failed"),
        (4114, "host_version_unsupported"),
    ];

    const CHAPTER_04: &[(u16, &str)] = &[
        (4002, "invalid_message"),
        (4004, "credential_invalid"),
        (4008, "rate_limited"),
        (4009, "heartbeat_timeout"),
        (4012, "credential_revoked"),
        (4013, "server_shutdown"),
        (4014, "slow_consumer"),
    ];

    #[test]
    fn close_codes_match_the_tables() {
        let expected: Vec<(u16, &str)> = SECTION_13.iter().chain(CHAPTER_04).copied().collect();
        assert_eq!(CloseCode::ALL.len(), expected.len());
        for &(number, name) in &expected {
            let code = CloseCode::from_u16(number).unwrap();
            assert_eq!(code.as_u16(), number);
            assert_eq!(u16::from(code), number);
            assert_eq!(code.name(), name);
            assert_eq!(code.to_string(), name);
            assert_eq!(CloseCode::try_from(number), Ok(code));
        }
    }

    #[test]
    fn every_close_code_round_trips_and_all_is_sorted_and_distinct() {
        for pair in CloseCode::ALL.windows(2) {
            assert!(pair[0].as_u16() < pair[1].as_u16());
        }
        for &code in CloseCode::ALL {
            assert_eq!(CloseCode::from_u16(code.as_u16()), Ok(code));
        }
    }

    #[test]
    fn unknown_close_codes_are_refused() {
        let known: Vec<u16> = CloseCode::ALL.iter().map(|c| c.as_u16()).collect();
        let mut refused = 0;
        for number in 0..=u16::MAX {
            if !known.contains(&number) {
                assert_eq!(
                    CloseCode::from_u16(number),
                    Err(CodeError::UnknownCloseCode)
                );
                refused += 1;
            }
        }
        assert_eq!(refused, 65536 - known.len());
        for number in [
            0,
            1000,
            1001,
            3999,
            4001,
            4003,
            4099,
            4105,
            4109,
            4115,
            u16::MAX,
        ] {
            assert_eq!(
                CloseCode::try_from(number),
                Err(CodeError::UnknownCloseCode)
            );
        }
    }

    const REASONS: &[&str] = &[
        "client_closed",
        "closed_by_owner",
        "process_exited",
        "idle_timeout",
        "max_duration",
        "detach_expired",
        "access_revoked",
        "i6_violation",
        "host_disabled",
        "host_retired",
        "host_rekeyed",
        "host_restarted",
        "user_disabled",
        "device_revoked",
        "session_revoked",
        "logout",
        "open_failed",
        "host_policy_violation",
    ];

    const DETAILS: &[&str] = &[
        "token_invalid",
        "token_expired",
        "token_replayed",
        "handshake_failed",
        "profile_unknown",
        "session_user_unknown",
        "session_user_mismatch",
        "server_host_owner_only",
        "local_confirm_denied",
        "subscription_login_detected",
        "helper_untrusted",
        "shared_location",
        "pty_failed",
        "open_timeout",
    ];

    #[test]
    fn reasons_match_the_spec_list_and_round_trip() {
        let texts: Vec<&str> = CloseReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(texts, REASONS);
        for &reason in CloseReason::ALL {
            let text = reason.as_str();
            assert_eq!(CloseReason::parse(text), Ok(reason));
            assert_eq!(text.parse::<CloseReason>(), Ok(reason));
            assert_eq!(reason.to_string(), text);
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<CloseReason>(&json).unwrap(), reason);
        }
    }

    #[test]
    fn details_match_the_spec_list_and_round_trip() {
        let texts: Vec<&str> = CloseDetail::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(texts, DETAILS);
        for &detail in CloseDetail::ALL {
            let text = detail.as_str();
            assert_eq!(CloseDetail::parse(text), Ok(detail));
            assert_eq!(text.parse::<CloseDetail>(), Ok(detail));
            assert_eq!(detail.to_string(), text);
            let json = serde_json::to_string(&detail).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<CloseDetail>(&json).unwrap(), detail);
        }
    }

    /// Near misses of a valid string: nothing is trimmed, case-folded or mapped.
    const UNKNOWN_STRINGS: &[&str] = &[
        "",
        " ",
        "client_closed ",
        " client_closed",
        "Client_Closed",
        "CLIENT_CLOSED",
        "client-closed",
        "clientclosed",
        "ClientClosed",
        "client_closed\0",
        "token_invalid\n",
        "TOKEN_INVALID",
        "token-invalid",
        "i6-violation",
        "I6_violation",
        "unknown",
        "open_failed,token_invalid",
        "ｃlient_closed",
    ];

    #[test]
    fn unknown_reason_strings_are_refused() {
        for &text in UNKNOWN_STRINGS {
            assert_eq!(
                CloseReason::parse(text),
                Err(CodeError::UnknownCloseReason),
                "{text:?}"
            );
        }
        // A detail is not a reason, and the other way round.
        for &text in DETAILS {
            assert_eq!(CloseReason::parse(text), Err(CodeError::UnknownCloseReason));
        }
    }

    #[test]
    fn unknown_detail_strings_are_refused() {
        for &text in UNKNOWN_STRINGS {
            assert_eq!(
                CloseDetail::parse(text),
                Err(CodeError::UnknownCloseDetail),
                "{text:?}"
            );
        }
        for &text in REASONS {
            assert_eq!(CloseDetail::parse(text), Err(CodeError::UnknownCloseDetail));
        }
    }

    #[test]
    fn serde_accepts_only_a_json_string_with_an_exact_code() {
        for json in [
            "\"Client_Closed\"",
            "\"client_closed \"",
            "\"\"",
            "null",
            "0",
            "16",
            "true",
            "[\"client_closed\"]",
            "{\"client_closed\":null}",
        ] {
            assert!(serde_json::from_str::<CloseReason>(json).is_err(), "{json}");
            assert!(serde_json::from_str::<CloseDetail>(json).is_err(), "{json}");
        }
        // An escaped but equal string is the same string.
        assert_eq!(
            serde_json::from_str::<CloseReason>("\"logo\\u0075t\"").unwrap(),
            CloseReason::Logout
        );
    }

    #[test]
    fn serde_errors_do_not_quote_the_input() {
        let err = serde_json::from_str::<CloseReason>("\"secret_value\"").unwrap_err();
        assert!(!err.to_string().contains("secret_value"), "{err}");
        let err = serde_json::from_str::<CloseDetail>("\"secret_value\"").unwrap_err();
        assert!(!err.to_string().contains("secret_value"), "{err}");
    }

    /// The rule of M2-46 written out independently of `check_close_pair`.
    fn expected_pair(reason: &str, detail: Option<&str>) -> Result<(), CodeError> {
        const POLICY: &[&str] = &[
            "subscription_login_detected",
            "helper_untrusted",
            "shared_location",
        ];
        match (reason, detail) {
            ("open_failed", Some(_)) => Ok(()),
            ("open_failed", None) | ("host_policy_violation", None) => {
                Err(CodeError::DetailRequired)
            }
            ("host_policy_violation", Some(d)) if POLICY.contains(&d) => Ok(()),
            ("host_policy_violation", Some(_)) => Err(CodeError::DetailNotForReason),
            (_, Some(_)) => Err(CodeError::DetailNotAllowed),
            (_, None) => Ok(()),
        }
    }

    #[test]
    fn every_reason_and_detail_pair_follows_m2_46() {
        let mut allowed = 0;
        let mut checked = 0;
        for &reason in CloseReason::ALL {
            let details = std::iter::once(None).chain(CloseDetail::ALL.iter().copied().map(Some));
            for detail in details {
                let got = check_close_pair(reason, detail);
                let want = expected_pair(reason.as_str(), detail.map(CloseDetail::as_str));
                assert_eq!(got, want, "{reason} with {detail:?}");
                checked += 1;
                if got.is_ok() {
                    allowed += 1;
                }
            }
        }
        assert_eq!(checked, 18 * 15);
        // 16 reasons without a detail, open_failed with 14 details, host_policy_violation with 3.
        assert_eq!(allowed, 16 + 14 + 3);
    }

    #[test]
    fn host_may_report_exactly_six_reasons() {
        let reported: Vec<&str> = CloseReason::ALL
            .iter()
            .filter(|r| r.host_may_report())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(
            reported,
            [
                "client_closed",
                "process_exited",
                "idle_timeout",
                "detach_expired",
                "open_failed",
                "host_policy_violation"
            ]
        );
    }

    #[test]
    fn handshake_details_map_to_4101_or_4104() {
        for &detail in CloseDetail::ALL {
            let want = match detail.as_str() {
                "token_expired" | "token_replayed" => 4101,
                _ => 4104,
            };
            assert_eq!(detail.handshake_close_code().as_u16(), want, "{detail}");
        }
    }
}
