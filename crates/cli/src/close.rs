//! How a device stream ends (section 13): the close code and the
//! `close_reason` (10.3) or `close_detail` in the close text become a message
//! and the client's reaction.

use bothy_proto::codes::CloseCode;

/// The end of a device stream as the server (or the relay) sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEnd {
    /// The close code (1000 and others outside section 13 are kept as they came).
    pub code: u16,
    /// The close text: the close_reason (4100) or close_detail (4101, 4104).
    pub reason: String,
}

/// What the client does after the end (section 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    /// 4100: the session ended; do not reconnect.
    Ended,
    /// 4101: open or attach again with a new step-up.
    OpenAgain,
    /// 4104: a hard warning; no new attempt.
    HardWarning,
    /// 4103: another device attached; no automatic reconnect.
    Replaced,
    /// 4102: the host is away; a started session stays detached.
    HostUnavailable,
    /// Anything else (a lost connection, a code of chapter 04).
    Other,
}

impl StreamEnd {
    /// The close code of section 13, if it is one.
    pub fn close_code(&self) -> Option<CloseCode> {
        CloseCode::from_u16(self.code).ok()
    }

    /// The reaction of section 13.
    pub fn reaction(&self) -> Reaction {
        match self.close_code() {
            Some(CloseCode::TerminalClosed) => Reaction::Ended,
            Some(CloseCode::TerminalTokenStale) => Reaction::OpenAgain,
            Some(CloseCode::TerminalHandshakeFailed) => Reaction::HardWarning,
            Some(CloseCode::TerminalReplaced) => Reaction::Replaced,
            Some(CloseCode::TerminalHostUnavailable) => Reaction::HostUnavailable,
            _ => Reaction::Other,
        }
    }

    /// Whether the client reattaches by itself after this end, as after a
    /// connection lost without a close (6.2): the server shutting down for a
    /// restart (4013 `server_shutdown`, issue 16 item 8), a server going
    /// away (1001), a connection that broke (1006).
    pub fn reattachable(&self) -> bool {
        matches!(self.code, 1001 | 1006) || self.close_code() == Some(CloseCode::ServerShutdown)
    }

    /// The code's name (`terminal_closed`, ...) or `closed_<n>`.
    pub fn code_name(&self) -> String {
        match self.close_code() {
            Some(code) => code.name().to_owned(),
            None => format!("closed_{}", self.code),
        }
    }

    fn reason_text(&self) -> &'static str {
        match self.reason.as_str() {
            "client_closed" => "you closed the session",
            "closed_by_owner" => "an owner closed the session",
            "process_exited" => "the program ended",
            "idle_timeout" => "the session was idle too long",
            "max_duration" => "the session reached its maximum duration",
            "detach_expired" => "the session was detached too long",
            "access_revoked" => "your access to the host was revoked",
            "i6_violation" => "the host's LLM login changed (I6)",
            "host_disabled" => "the host was disabled",
            "host_retired" => "the host was retired",
            "host_rekeyed" => "the host was paired again",
            "host_restarted" => "the host service restarted",
            "user_disabled" => "your account was disabled",
            "device_revoked" => "this device was revoked",
            "session_revoked" => "your login session was revoked",
            "logout" => "you logged out",
            "open_failed" => "the opening failed",
            "host_policy_violation" => "a check of the host service failed",
            _ => "the session ended",
        }
    }

    /// The message shown on stderr.
    pub fn message(&self) -> String {
        match self.reaction() {
            Reaction::Ended => format!("session ended: {} ({})", self.reason_text(), self.reason),
            Reaction::OpenAgain => format!(
                "the session token was not accepted ({}): open or attach again with a new step-up",
                self.reason
            ),
            Reaction::HardWarning => format!(
                "WARNING: the host refused the handshake or the token ({}). This can mean \
                 that someone tampers with the connection. bothy will not retry.",
                self.reason
            ),
            Reaction::Replaced => {
                "another device attached this session; this one lets go and does not reconnect"
                    .to_owned()
            }
            Reaction::HostUnavailable => {
                "the host is not reachable: a started session stays detached (bothy attach \
                 SESSION later); an opening failed (open again)"
                    .to_owned()
            }
            Reaction::Other => {
                if self.reason.is_empty() {
                    format!("the connection closed (code {})", self.code)
                } else {
                    format!(
                        "the connection closed (code {}: {})",
                        self.code, self.reason
                    )
                }
            }
        }
    }

    /// One line that says what to do.
    pub fn hint(&self) -> &'static str {
        match self.reaction() {
            Reaction::Ended => "bothy open HOST starts a new session",
            Reaction::OpenAgain => "run the command again (it asks for a new step-up)",
            Reaction::HardWarning => {
                "tell the owner of the server and the host; do not retry blindly"
            }
            Reaction::Replaced => "bothy attach SESSION takes the session back",
            Reaction::HostUnavailable => "bothy sessions shows the state; attach later",
            Reaction::Other => "check your network and run bothy sessions",
        }
    }
}

impl std::fmt::Display for StreamEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(code: u16, reason: &str) -> StreamEnd {
        StreamEnd {
            code,
            reason: reason.to_owned(),
        }
    }

    #[test]
    fn the_codes_of_section_13_get_their_reaction() {
        assert_eq!(end(4100, "process_exited").reaction(), Reaction::Ended);
        assert_eq!(end(4101, "token_expired").reaction(), Reaction::OpenAgain);
        assert_eq!(end(4102, "").reaction(), Reaction::HostUnavailable);
        assert_eq!(end(4103, "").reaction(), Reaction::Replaced);
        assert_eq!(
            end(4104, "handshake_failed").reaction(),
            Reaction::HardWarning
        );
        assert_eq!(end(1006, "").reaction(), Reaction::Other);
        assert!(end(4100, "idle_timeout").message().contains("idle"));
        assert!(end(4104, "token_invalid").message().starts_with("WARNING"));
        assert_eq!(end(4103, "").code_name(), "terminal_replaced");
        assert_eq!(end(1006, "").code_name(), "closed_1006");
        assert!(end(4013, "server_shutdown").reattachable());
        assert!(end(1006, "").reattachable());
        assert!(!end(4103, "").reattachable());
        assert!(!end(4100, "client_closed").reattachable());
    }
}
