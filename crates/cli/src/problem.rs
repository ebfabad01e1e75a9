//! The server's problems (`application/problem+json` with `code`, `reason`,
//! `errors[]`, `attempts_remaining`, `retry_after`) in the client's words.
//!
//! A problem is shown in words of the client, per code, reason and the call
//! that was refused ([`Call`], read off the request's method and path): a
//! 409 `invalid_state_transition` means "the session is closed already" for
//! a close and something else for a host (docs/decisions.md D-370). The
//! server's `title` is the HTTP reason phrase and is never shown.

use bothy_net::Method;

/// The call a problem answered, read off the request (method and path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `POST /auth/enroll/check`.
    EnrollCheck,
    /// `POST /auth/enroll`.
    Enroll,
    /// `POST /auth/enroll/confirm`.
    EnrollConfirm,
    /// `POST /auth/login`.
    Login,
    /// `POST /auth/step-up`.
    StepUp,
    /// Any other `/auth/...` call (whoami, logout).
    Auth,
    /// `POST /hosts` (createHost).
    HostCreate,
    /// `POST /hosts/{id}/confirm`.
    HostConfirm,
    /// `POST /hosts/{id}/pairing-code`.
    HostPairAgain,
    /// `PATCH /hosts/{id}` or `PUT /hosts/{id}/llm-credentials`.
    HostChange,
    /// `GET /hosts...`.
    HostRead,
    /// `POST /hosts/{id}/terminal/sessions`.
    Open,
    /// `POST /terminal/sessions/{id}/attach[-challenge]`.
    Attach,
    /// `POST /terminal/sessions/{id}/close`.
    Close,
    /// `GET /terminal/sessions...`.
    SessionRead,
    /// `/grants...`.
    Grant,
    /// `/persons...`.
    Person,
    /// `/groups...`.
    Group,
    /// Anything else.
    Other,
}

impl Call {
    /// The call of `method path` (the query is ignored).
    pub fn of(method: &Method, path: &str) -> Call {
        let path = path.split('?').next().unwrap_or(path);
        let parts: Vec<&str> = path
            .trim_start_matches("/api/v1/")
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        let post = *method == Method::POST;
        match parts.as_slice() {
            ["auth", "enroll", "check"] => Call::EnrollCheck,
            ["auth", "enroll"] => Call::Enroll,
            ["auth", "enroll", "confirm"] => Call::EnrollConfirm,
            ["auth", "login"] => Call::Login,
            ["auth", "step-up"] => Call::StepUp,
            ["auth", ..] => Call::Auth,
            ["hosts"] if post => Call::HostCreate,
            ["hosts", _, "confirm"] => Call::HostConfirm,
            ["hosts", _, "pairing-code"] => Call::HostPairAgain,
            ["hosts", _, "terminal", "sessions"] if post => Call::Open,
            ["hosts", ..] if *method == Method::GET => Call::HostRead,
            ["hosts", ..] => Call::HostChange,
            ["terminal", "sessions", _, "attach" | "attach-challenge"] => Call::Attach,
            ["terminal", "sessions", _, "close"] => Call::Close,
            ["terminal", "sessions", ..] => Call::SessionRead,
            ["grants", ..] => Call::Grant,
            ["persons", ..] => Call::Person,
            ["groups", ..] => Call::Group,
            _ => Call::Other,
        }
    }

    /// What the call is about, for "not found".
    fn subject(self) -> &'static str {
        match self {
            Call::HostCreate
            | Call::HostConfirm
            | Call::HostPairAgain
            | Call::HostChange
            | Call::HostRead
            | Call::Open => "host",
            Call::Attach | Call::Close | Call::SessionRead => "session",
            Call::Grant => "grant",
            Call::Person => "person",
            Call::Group => "group",
            _ => "thing",
        }
    }
}

/// A refusal of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The HTTP status.
    pub status: u16,
    /// The problem code (section 13 and DESIGN §3.4), e.g. `step_up_required`.
    pub code: String,
    /// The `reason`, where the server names one.
    pub reason: Option<String>,
    /// The codes of `errors[]` with their pointers.
    pub errors: Vec<(String, String)>,
    /// Seconds to wait (`retry_after`), for rate limits.
    pub retry_after: Option<u64>,
    /// Attempts left (`attempts_remaining`, a wrong fingerprint, 3.2).
    pub attempts_remaining: Option<u64>,
    /// The call that was refused.
    pub call: Call,
}

impl Problem {
    /// Reads a problem body of `call`; a body that is not one becomes
    /// `http_<status>`.
    pub fn from_body(call: Call, status: u16, body: &[u8]) -> Problem {
        match serde_json::from_slice::<bothy_api::problem::Problem>(body) {
            Ok(problem) => Problem {
                status,
                code: problem.code,
                reason: problem.reason,
                errors: problem
                    .errors
                    .into_iter()
                    .map(|e| (e.pointer, e.code))
                    .collect(),
                retry_after: problem.retry_after,
                attempts_remaining: problem.attempts_remaining.map(u64::from),
                call,
            },
            // Not a problem of ours (a proxy's page, a cut body): the status.
            Err(_) => Problem {
                status,
                code: format!("http_{status}"),
                reason: None,
                errors: Vec::new(),
                retry_after: None,
                attempts_remaining: None,
                call,
            },
        }
    }

    /// Whether this is `code` (with `reason`, when one is named).
    pub fn is(&self, code: &str, reason: Option<&str>) -> bool {
        self.code == code && (reason.is_none() || self.reason.as_deref() == reason)
    }

    /// The one-line message in words: what was refused, the reason's code in
    /// parentheses, and the fields in words.
    pub fn summary(&self) -> String {
        let mut line = self.words();
        if let Some(reason) = &self.reason {
            line.push_str(&format!(" ({reason})"));
        }
        for (pointer, code) in &self.errors {
            line.push_str(&format!("; {}", field_words(pointer, code)));
        }
        line
    }

    fn words(&self) -> String {
        let call = self.call;
        let reason = self.reason.as_deref();
        match (self.code.as_str(), reason) {
            ("unauthenticated", _) => match call {
                Call::EnrollCheck | Call::Enroll => {
                    "the enrollment code is wrong, used or expired".into()
                }
                Call::EnrollConfirm => {
                    "the TOTP code was not accepted, or the enrollment code is no longer valid"
                        .into()
                }
                Call::Login => "the username, password or TOTP code was not accepted".into(),
                _ => "the login is not valid (ended, expired or revoked)".into(),
            },
            ("step_up_required", Some("totp_invalid")) => {
                "the TOTP code was wrong or used already".into()
            }
            ("step_up_required", _) => "this needs a fresh step-up".into(),
            ("terminal_denied", Some("no_session_user")) => {
                "you have no session user on this host".into()
            }
            ("terminal_denied", Some("session_limit")) => {
                "you have as many sessions open as allowed".into()
            }
            ("terminal_denied", Some("profile_unknown")) => {
                "the host does not offer this profile".into()
            }
            ("terminal_denied", Some("not_host_assignee")) => {
                "this host is assigned to another person".into()
            }
            ("terminal_denied", Some("i6_holder_only")) => {
                "this host's LLM login is personal to another person (I6)".into()
            }
            ("terminal_denied", Some("server_host_owner_only")) => {
                "on the server's own machine only owners open terminals".into()
            }
            ("terminal_denied", _) => "a rule of the host blocks this".into(),
            ("host_unavailable", _) => {
                "the host is not active or its host service is not connected".into()
            }
            ("forbidden", Some("device_revoked")) => "this device was revoked".into(),
            ("forbidden", _) => "you lack the permission for this".into(),
            ("not_found", _) => format!("no such {} that you can see", call.subject()),
            ("rate_limited", _) => "too many attempts".into(),
            ("invalid_state_transition", _) => match call {
                Call::Close => "the session is closed already".into(),
                Call::Attach => "the session cannot be attached: it is closed".into(),
                Call::HostConfirm => "the host is not waiting for a confirmation".into(),
                Call::HostPairAgain => "a retired host cannot be paired again".into(),
                Call::HostChange => "the host's state does not allow this change".into(),
                _ => "the state does not allow this".into(),
            },
            ("validation_failed", _) => "the server refused a value".into(),
            ("fingerprint_mismatch", _) => match self.attempts_remaining {
                Some(0) => "the fingerprint's start does not match; no attempts are left: \
                            the host fell back to pairing"
                    .into(),
                Some(1) => "the fingerprint's start does not match; 1 attempt left \
                            (at 0 the host must be paired again)"
                    .into(),
                Some(n) => format!(
                    "the fingerprint's start does not match; {n} attempts left \
                     (at 0 the host must be paired again)"
                ),
                None => "the fingerprint's start does not match".into(),
            },
            ("conflict", Some("last_owner")) => "this is the last active owner".into(),
            ("conflict", Some("session_user_taken")) => {
                "this session user belongs or belonged to a person already".into()
            }
            ("conflict", Some("host_key_in_use" | "host_key_reused")) => {
                "these host keys are not usable for this host".into()
            }
            ("conflict", _) => "a conflict with the current state".into(),
            ("i6_violation", _) => {
                "the change would give terminal on a host with a personal LLM login to \
                 another person (I6)"
                    .into()
            }
            ("precondition_failed", _) => "the host changed meanwhile".into(),
            ("unavailable", _) => "the server cannot serve this now".into(),
            ("internal", _) => "the server failed on this request".into(),
            _ => format!("the server refused (HTTP {})", self.status),
        }
    }

    /// What to do about it, per code, reason and call (section 13, DESIGN §3.1).
    pub fn hint(&self) -> String {
        let call = self.call;
        match (self.code.as_str(), self.reason.as_deref()) {
            ("unauthenticated", _) => match call {
                Call::EnrollCheck | Call::Enroll | Call::EnrollConfirm => {
                    "ask an owner for a new enrollment code (bothy person invite; for the first \
                     owner: bothy-server admin bootstrap)"
                        .into()
                }
                Call::Login => {
                    "check the username and password; a TOTP code works once: wait for the next one"
                        .into()
                }
                _ => "log in again: bothy login --server URL".into(),
            },
            ("step_up_required", Some("totp_invalid")) => {
                "wait for the next code of your app and run the command again".into()
            }
            ("step_up_required", _) => "run the command again (it asks for a new step-up)".into(),
            ("terminal_denied", Some("no_session_user")) => {
                "an owner must assign you a session user on this host (bothy host assign)".into()
            }
            ("terminal_denied", Some("session_limit")) => {
                "close a session first: bothy sessions, bothy close SESSION".into()
            }
            ("terminal_denied", Some("profile_unknown")) => {
                "see the host's profiles: bothy hosts --json".into()
            }
            ("terminal_denied", _) => "ask an owner of the server".into(),
            ("host_unavailable", _) => match call {
                Call::Attach => "the session stays detached: bothy attach SESSION when the host \
                                 is back (bothy hosts shows it)"
                    .into(),
                _ => "bothy hosts shows whether it is active and connected; try again later".into(),
            },
            ("forbidden", Some("device_revoked")) => {
                "bothy logout, then bothy login (a new key)".into()
            }
            ("forbidden", _) => "ask an owner of the server".into(),
            ("not_found", _) => match call {
                Call::Attach | Call::Close | Call::SessionRead => {
                    "bothy sessions --all lists your sessions".into()
                }
                Call::Grant => "bothy grants lists the grants".into(),
                Call::Person => "check the username".into(),
                _ => "bothy hosts lists the hosts you can see".into(),
            },
            ("rate_limited", _) => match self.retry_after {
                Some(seconds) => format!("wait {seconds} s, then try again"),
                None => "wait a little, then try again".into(),
            },
            ("invalid_state_transition", _) => match call {
                Call::Close | Call::Attach => {
                    "bothy sessions --all shows how it ended; bothy open HOST starts a new one"
                        .into()
                }
                Call::HostConfirm => "bothy hosts shows its state; a host in pairing needs \
                                      bothy-host pair first"
                    .into(),
                _ => "bothy hosts shows the host's state".into(),
            },
            ("validation_failed", _) => "correct the values named above".into(),
            ("fingerprint_mismatch", _) => match self.attempts_remaining {
                Some(0) => {
                    "make a new pairing code (bothy host pair-again) and pair the host again".into()
                }
                _ => "type the first characters that bothy-host pair showed on the host".into(),
            },
            ("conflict", Some("last_owner")) => "make another person an owner first".into(),
            ("conflict", Some("session_user_taken")) => {
                "a session user belongs to one person for good (T12): assign another one".into()
            }
            ("conflict", _) => "look again (bothy hosts) and run the command again".into(),
            ("i6_violation", _) => {
                "only the holder of a personal LLM login may have terminal on that host".into()
            }
            ("precondition_failed", _) => "run the command again".into(),
            ("unavailable", _) => {
                "the server is busy or its database is down; try again in a moment".into()
            }
            ("internal", _) => "the server's log says why; try again".into(),
            _ => "see the server's documentation for this code".into(),
        }
    }
}

/// A field code of `errors[]` in words.
fn field_words(pointer: &str, code: &str) -> String {
    use bothy_api::auth::PASSWORD_MIN_CHARS;
    match (pointer, code) {
        ("/password", "too_short") => {
            format!("the password is too short: at least {PASSWORD_MIN_CHARS} characters")
        }
        ("/password", "too_long") => "the password is too long: at most 256 characters".into(),
        (pointer, "invalid_format") => format!("{pointer} has the wrong form (invalid_format)"),
        (pointer, "session_user_not_on_host") => {
            format!("{pointer} is no session user the host reported (session_user_not_on_host)")
        }
        (pointer, code) => format!("{pointer}: {code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_read_with_their_parts() {
        let body = br#"{"type":"about:blank","title":"Unauthorized","status":401,
            "code":"step_up_required","reason":"totp_invalid"}"#;
        let problem = Problem::from_body(Call::StepUp, 401, body);
        assert_eq!(problem.code, "step_up_required");
        assert_eq!(problem.reason.as_deref(), Some("totp_invalid"));
        assert_eq!(
            problem.summary(),
            "the TOTP code was wrong or used already (totp_invalid)"
        );
        let problem = Problem::from_body(
            Call::Open,
            400,
            br#"{"code":"validation_failed","errors":[{"pointer":"/columns","code":"out_of_range"}]}"#,
        );
        assert_eq!(
            problem.errors,
            vec![("/columns".into(), "out_of_range".into())]
        );
        assert!(problem.summary().contains("/columns: out_of_range"));
        let problem = Problem::from_body(Call::Other, 502, b"<html>bad gateway</html>");
        assert_eq!(problem.code, "http_502");
    }

    /// Issue 16 item 11: no HTTP reason phrase, the words of the client.
    #[test]
    fn the_title_is_never_shown() {
        let body = br#"{"title":"Conflict","status":409,"code":"invalid_state_transition"}"#;
        let problem = Problem::from_body(Call::Close, 409, body);
        assert_eq!(problem.summary(), "the session is closed already");
        let body = br#"{"title":"Not Found","status":404,"code":"not_found"}"#;
        let problem = Problem::from_body(Call::Attach, 404, body);
        assert_eq!(problem.summary(), "no such session that you can see");
        assert!(!problem.summary().contains("Not Found"));
        let body = br#"{"title":"Bad Request","status":400,"code":"validation_failed",
            "errors":[{"pointer":"/password","code":"too_short"}]}"#;
        let problem = Problem::from_body(Call::Enroll, 400, body);
        assert!(
            problem
                .summary()
                .contains("the password is too short: at least 12 characters"),
            "{}",
            problem.summary()
        );
    }

    /// Issue 15 item 4: the hint of a 409 depends on the call.
    #[test]
    fn a_conflict_of_a_host_is_not_a_closed_session() {
        let body = br#"{"status":409,"code":"invalid_state_transition"}"#;
        let host = Problem::from_body(Call::of(&Method::PATCH, "/api/v1/hosts/x"), 409, body);
        assert_eq!(host.call, Call::HostChange);
        assert!(!host.summary().contains("session"), "{}", host.summary());
        assert!(!host.hint().contains("session"), "{}", host.hint());
        let close = Problem::from_body(
            Call::of(&Method::POST, "/api/v1/terminal/sessions/x/close"),
            409,
            body,
        );
        assert_eq!(close.summary(), "the session is closed already");
    }

    #[test]
    fn calls_are_read_off_the_path() {
        let post = Method::POST;
        let get = Method::GET;
        for (method, path, call) in [
            (&post, "/api/v1/auth/enroll/check", Call::EnrollCheck),
            (&post, "/api/v1/auth/enroll", Call::Enroll),
            (&post, "/api/v1/auth/login", Call::Login),
            (&post, "/api/v1/hosts", Call::HostCreate),
            (&get, "/api/v1/hosts", Call::HostRead),
            (&post, "/api/v1/hosts/x/confirm", Call::HostConfirm),
            (&post, "/api/v1/hosts/x/terminal/sessions", Call::Open),
            (
                &Method::PUT,
                "/api/v1/hosts/x/llm-credentials",
                Call::HostChange,
            ),
            (
                &post,
                "/api/v1/terminal/sessions/x/attach-challenge",
                Call::Attach,
            ),
            (
                &get,
                "/api/v1/terminal/sessions?state=open",
                Call::SessionRead,
            ),
            (&post, "/api/v1/grants/x/revoke", Call::Grant),
        ] {
            assert_eq!(Call::of(method, path), call, "{method} {path}");
        }
    }

    #[test]
    fn attempts_remaining_are_shown() {
        let body = br#"{"status":409,"code":"fingerprint_mismatch","attempts_remaining":2}"#;
        let problem = Problem::from_body(Call::HostConfirm, 409, body);
        assert!(
            problem
                .summary()
                .contains("2 attempts left (at 0 the host must be paired again)"),
            "{}",
            problem.summary()
        );
        let body = br#"{"status":409,"code":"fingerprint_mismatch","attempts_remaining":0}"#;
        let problem = Problem::from_body(Call::HostConfirm, 409, body);
        assert!(problem.hint().contains("pair-again"), "{}", problem.hint());
    }
}
