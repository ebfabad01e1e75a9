use super::*;
use crate::doctor::{Check, DoctorEntry};
use crate::json::JsonType;
use crate::jwk::{Ed25519PublicJwk, JwksKey};
use crate::report::{FieldErrorCode, ProfileKind, ReportedProfile, ReportedSessionUser};

const MAX: usize = 64 * 1024;
const SID: &str = "0192f5c4-7d3a-7b2e-9f00-1234567890ab";
const HID: &str = "0192f5c4-0000-7000-8000-000000000001";

fn sid() -> Uuid {
    Uuid::parse_str(SID).unwrap()
}

fn hid() -> Uuid {
    Uuid::parse_str(HID).unwrap()
}

/// The Ed25519 public key of RFC 8032 test 1.
fn jwks() -> Jwks {
    let raw: [u8; 32] = b64::decode_array("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo").unwrap();
    Jwks::new(vec![JwksKey::from_jwk(
        Ed25519PublicJwk::from_raw(&raw).unwrap(),
    )])
    .unwrap()
}

fn hello() -> Hello {
    Hello {
        protocol_versions: vec![1, 2],
        challenge: [7; 32],
        server_time: 1_764_000_000_000,
        heartbeat_interval_ms: 20_000,
        heartbeat_miss_limit: 3,
        jwks: jwks(),
    }
}

fn identify() -> Identify {
    Identify {
        protocol_version: 1,
        host_id: hid(),
        proof: "aGVhZGVy.cGF5bG9hZA.c2ln".into(),
        host_version: "1.4.0-rc.1+build.7".into(),
        live_sessions: Some(vec![sid()]),
        session_id: None,
    }
}

fn report() -> Report {
    Report {
        platform: "linux".into(),
        os_version: "Debian 12".into(),
        profiles: vec![ReportedProfile {
            name: "shell".into(),
            display_name: "Shell".into(),
            kind: ProfileKind::Shell,
        }],
        session_users: vec![ReportedSessionUser {
            name: "alice".into(),
            workdirs: vec![],
        }],
        doctor: Check::ALL.into_iter().map(DoctorEntry::passed).collect(),
        is_server_host: false,
        require_local_confirm: false,
    }
}

fn server_messages() -> Vec<ServerMessage> {
    vec![
        ServerMessage::Hello(hello()),
        ServerMessage::Hello(Hello {
            protocol_versions: (1..=16).collect(),
            jwks: Jwks::default(),
            heartbeat_miss_limit: 0,
            ..hello()
        }),
        ServerMessage::Ready(Ready {
            host_id: hid(),
            state: HostState::Active,
            llm_credentials: LlmCredentials::Organization,
        }),
        ServerMessage::HeartbeatAck(HeartbeatAck {
            server_time: 5,
            jwks: None,
        }),
        ServerMessage::HeartbeatAck(HeartbeatAck {
            server_time: u64::MAX,
            jwks: Some(jwks()),
        }),
        ServerMessage::SessionOpen(SessionOpen {
            session_id: sid(),
            expires_at: 1_764_000_020_000,
        }),
        ServerMessage::SessionClose(SessionClose {
            session_id: sid(),
            close_reason: CloseReason::AccessRevoked,
        }),
        ServerMessage::Error(OpError {
            op: HostOp::SessionEnded,
            code: ErrorCode::NotFound,
            session_id: Some(sid()),
            errors: None,
        }),
        ServerMessage::Error(OpError {
            op: HostOp::Report,
            code: ErrorCode::ValidationFailed,
            session_id: None,
            errors: Some(vec![
                FieldError::new("/session_users/0/name", FieldErrorCode::InvalidFormat),
                FieldError {
                    pointer: "/doctor".into(),
                    code: FieldErrorCode::Required,
                    check: Some(Check::Hd4StateDir),
                },
            ]),
        }),
    ]
}

fn host_messages() -> Vec<HostMessage> {
    vec![
        HostMessage::Identify(identify()),
        HostMessage::Identify(Identify {
            live_sessions: None,
            session_id: Some(sid()),
            ..identify()
        }),
        HostMessage::Report(report()),
        HostMessage::Heartbeat(Heartbeat { active_sessions: 3 }),
        HostMessage::SessionStarted(SessionStarted { session_id: sid() }),
        HostMessage::SessionEnded(SessionEnded {
            session_id: sid(),
            close_reason: CloseReason::ProcessExited,
            close_detail: None,
            exit_code: Some(-1),
        }),
        HostMessage::SessionEnded(SessionEnded {
            session_id: sid(),
            close_reason: CloseReason::OpenFailed,
            close_detail: Some(CloseDetail::LocalConfirmDenied),
            exit_code: None,
        }),
    ]
}

#[test]
fn every_message_round_trips() {
    for message in server_messages() {
        let text = message.to_json();
        assert_eq!(
            ServerMessage::decode(text.as_bytes(), MAX),
            Ok(message),
            "{text}"
        );
    }
    for message in host_messages() {
        let text = message.to_json();
        assert_eq!(
            HostMessage::decode(text.as_bytes(), MAX),
            Ok(message),
            "{text}"
        );
    }
}

#[test]
fn wire_forms_are_exact() {
    // The envelope is written by hand, `op` first; `d` is compared as a value,
    // so the test does not depend on serde_json's member order.
    let parse = |text: &str| -> (String, Value) {
        let value: Value = serde_json::from_str(text).unwrap();
        let prefix = format!(r#"{{"op":{},"d":"#, value["op"]);
        assert!(text.starts_with(&prefix), "{text}");
        (value["op"].as_str().unwrap().to_owned(), value["d"].clone())
    };
    let open = ServerMessage::SessionOpen(SessionOpen {
        session_id: sid(),
        expires_at: 9,
    });
    assert_eq!(
        parse(&open.to_json()),
        (
            "session.open".to_owned(),
            serde_json::json!({
                "session_id": SID,
                "stream_path": format!("/api/v1/hosts/sessions/{SID}/stream"),
                "expires_at": 9
            })
        )
    );
    assert_eq!(
        HostMessage::Heartbeat(Heartbeat { active_sessions: 0 }).to_json(),
        r#"{"op":"heartbeat","d":{"active_sessions":0}}"#
    );
    let ready = ServerMessage::Ready(Ready {
        host_id: hid(),
        state: HostState::Confirming,
        llm_credentials: LlmCredentials::None,
    });
    assert_eq!(
        parse(&ready.to_json()),
        (
            "ready".to_owned(),
            serde_json::json!({"host_id": HID, "state": "confirming", "llm_credentials": "none"})
        )
    );
    let (op, d) = parse(&ServerMessage::Hello(hello()).to_json());
    assert_eq!(op, "hello");
    assert_eq!(
        d,
        serde_json::json!({
            "protocol_versions": [1, 2],
            "challenge": "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc",
            "server_time": 1_764_000_000_000_u64,
            "heartbeat_interval_ms": 20_000,
            "heartbeat_miss_limit": 3,
            "jwks": jwks().to_value()
        })
    );
    let (op, d) = parse(
        &HostMessage::SessionEnded(SessionEnded {
            session_id: sid(),
            close_reason: CloseReason::HostPolicyViolation,
            close_detail: Some(CloseDetail::SharedLocation),
            exit_code: None,
        })
        .to_json(),
    );
    assert_eq!(op, "session.ended");
    assert_eq!(
        d,
        serde_json::json!({
            "session_id": SID,
            "close_reason": "host_policy_violation",
            "close_detail": "shared_location"
        })
    );
}

fn server_err(text: &str) -> MessageError {
    ServerMessage::decode(text.as_bytes(), MAX).unwrap_err()
}

fn host_err(text: &str) -> MessageError {
    HostMessage::decode(text.as_bytes(), MAX).unwrap_err()
}

fn invalid(pointer: &str) -> MessageError {
    MessageError::Json(JsonError::InvalidValue {
        pointer: pointer.into(),
    })
}

fn missing(pointer: &str) -> MessageError {
    MessageError::Json(JsonError::MissingMember {
        pointer: pointer.into(),
    })
}

fn unknown(pointer: &str) -> MessageError {
    MessageError::Json(JsonError::UnknownMember {
        pointer: pointer.into(),
    })
}

fn wrong(pointer: &str, expected: JsonType) -> MessageError {
    MessageError::Json(JsonError::WrongType {
        pointer: pointer.into(),
        expected,
    })
}

/// `message` as JSON with `d` changed by `change`.
fn edit<M>(message: M, change: impl FnOnce(&mut Map<String, Value>)) -> String
where
    M: Fn() -> String,
{
    let mut value: Value = serde_json::from_str(&message()).unwrap();
    change(value["d"].as_object_mut().unwrap());
    value.to_string()
}

#[test]
fn envelope_refusals() {
    let cases: Vec<(&str, MessageError)> = vec![
        ("", MessageError::Json(JsonError::Syntax)),
        (
            "{\"op\":\"heartbeat\"",
            MessageError::Json(JsonError::Syntax),
        ),
        (
            r#"{"op":"heartbeat","d":{}} x"#,
            MessageError::Json(JsonError::Syntax),
        ),
        ("[]", wrong("", JsonType::Object)),
        (r#"{"d":{}}"#, missing("/op")),
        (r#"{"op":"heartbeat"}"#, missing("/d")),
        (r#"{"op":7,"d":{}}"#, wrong("/op", JsonType::String)),
        (
            r#"{"op":"heartbeat","d":[]}"#,
            wrong("/d", JsonType::Object),
        ),
        (
            r#"{"op":"heartbeat","d":"x"}"#,
            wrong("/d", JsonType::Object),
        ),
        (
            r#"{"op":"heartbeat","d":{"active_sessions":1},"id":1}"#,
            unknown("/id"),
        ),
        (
            r#"{"op":"heartbeat","op":"heartbeat","d":{}}"#,
            MessageError::Json(JsonError::DuplicateMember {
                pointer: "/op".into(),
            }),
        ),
        (
            r#"{"op":"heartbeat","d":{"active_sessions":null}}"#,
            MessageError::Json(JsonError::NullMember {
                pointer: "/d/active_sessions".into(),
            }),
        ),
        (r#"{"op":"Heartbeat","d":{}}"#, MessageError::UnknownOp),
        (r#"{"op":"","d":{}}"#, MessageError::UnknownOp),
        (r#"{"op":"replay","d":{}}"#, MessageError::UnknownOp),
        (r#"{"op":"hello","d":{}}"#, MessageError::WrongDirection),
        (
            r#"{"op":"session.open","d":{}}"#,
            MessageError::WrongDirection,
        ),
        (r#"{"op":"error","d":{}}"#, MessageError::WrongDirection),
    ];
    for (text, want) in &cases {
        assert_eq!(&host_err(text), want, "{text}");
    }
    assert_eq!(
        server_err(r#"{"op":"identify","d":{}}"#),
        MessageError::WrongDirection
    );
    assert_eq!(
        server_err(r#"{"op":"report","d":{}}"#),
        MessageError::WrongDirection
    );
    assert_eq!(
        server_err(r#"{"op":"ping","d":{}}"#),
        MessageError::UnknownOp
    );
    assert_eq!(
        HostMessage::decode(b"{\"op\":\"heartbeat\",\"d\":{\"x\":\"\xff\"}}", MAX),
        Err(MessageError::Json(JsonError::InvalidUtf8))
    );
}

#[test]
fn every_refusal_closes_with_4002_and_too_large_says_so() {
    let text = HostMessage::Heartbeat(Heartbeat { active_sessions: 1 }).to_json();
    let too_large = HostMessage::decode(text.as_bytes(), text.len() - 1).unwrap_err();
    assert!(matches!(
        too_large,
        MessageError::Json(JsonError::TooLarge { .. })
    ));
    assert_eq!(too_large.close_reason_text(), Some("frame_too_large"));
    assert!(HostMessage::decode(text.as_bytes(), text.len()).is_ok());
    let all = [
        too_large,
        MessageError::BinaryFrame,
        MessageError::Json(JsonError::Syntax),
        MessageError::Jwks(JwkError::EmptyKid {
            pointer: "/d/jwks/keys/0/kid".into(),
        }),
        MessageError::UnknownOp,
        MessageError::WrongDirection,
        MessageError::LiveSessionsMissing,
        MessageError::SessionIdNotAllowed,
        MessageError::HostVersionInvalid,
        MessageError::LiveSessionsNotAllowed,
        MessageError::SessionIdMissing,
        MessageError::SessionIdMismatch,
    ];
    for (i, error) in all.iter().enumerate() {
        assert_eq!(error.close_code(), CloseCode::InvalidMessage);
        assert_eq!(error.close_code().as_u16(), 4002);
        if i > 0 {
            assert_eq!(error.close_reason_text(), None, "{error}");
        }
    }
}

#[test]
fn server_message_refusals() {
    let h = || ServerMessage::Hello(hello()).to_json();
    let ack = || {
        ServerMessage::HeartbeatAck(HeartbeatAck {
            server_time: 1,
            jwks: None,
        })
        .to_json()
    };
    let ready = || {
        ServerMessage::Ready(Ready {
            host_id: hid(),
            state: HostState::Active,
            llm_credentials: LlmCredentials::Personal,
        })
        .to_json()
    };
    let open = || {
        ServerMessage::SessionOpen(SessionOpen {
            session_id: sid(),
            expires_at: 1,
        })
        .to_json()
    };
    let close = || {
        ServerMessage::SessionClose(SessionClose {
            session_id: sid(),
            close_reason: CloseReason::Logout,
        })
        .to_json()
    };
    let error = || {
        ServerMessage::Error(OpError {
            op: HostOp::Report,
            code: ErrorCode::ValidationFailed,
            session_id: None,
            errors: None,
        })
        .to_json()
    };
    let other_path = format!("/api/v1/hosts/sessions/{SID}/stream/../x");
    let upper_path = format!("/api/v1/hosts/sessions/{}/stream", SID.to_uppercase());
    let cases: Vec<(&str, String, MessageError)> = vec![
        (
            "hello: extra member",
            edit(h, |d| {
                d.insert("x".into(), 1.into());
            }),
            unknown("/d/x"),
        ),
        (
            "hello: no jwks",
            edit(h, |d| {
                d.remove("jwks");
            }),
            missing("/d/jwks"),
        ),
        (
            "hello: no versions",
            edit(h, |d| {
                d.insert("protocol_versions".into(), Value::Array(vec![]));
            }),
            invalid("/d/protocol_versions"),
        ),
        (
            "hello: 17 versions",
            edit(h, |d| {
                d.insert("protocol_versions".into(), (1..=17).collect());
            }),
            invalid("/d/protocol_versions"),
        ),
        (
            "hello: version 0",
            edit(h, |d| {
                d.insert("protocol_versions".into(), vec![1, 0].into());
            }),
            invalid("/d/protocol_versions/1"),
        ),
        (
            "hello: version over u32",
            edit(h, |d| {
                d.insert("protocol_versions".into(), vec![1u64 << 32].into());
            }),
            invalid("/d/protocol_versions/0"),
        ),
        (
            "hello: version negative",
            edit(h, |d| {
                d.insert("protocol_versions".into(), vec![-1].into());
            }),
            invalid("/d/protocol_versions/0"),
        ),
        (
            "hello: version a string",
            edit(h, |d| {
                d.insert("protocol_versions".into(), vec!["1"].into());
            }),
            wrong("/d/protocol_versions/0", JsonType::Integer),
        ),
        (
            "hello: challenge 31 bytes",
            edit(h, |d| {
                d.insert("challenge".into(), b64::encode(&[1; 31]).into());
            }),
            invalid("/d/challenge"),
        ),
        (
            "hello: challenge padded",
            edit(h, |d| {
                d.insert(
                    "challenge".into(),
                    format!("{}=", b64::encode(&[1; 32])).into(),
                );
            }),
            invalid("/d/challenge"),
        ),
        (
            "hello: challenge standard alphabet",
            edit(h, |d| {
                d.insert(
                    "challenge".into(),
                    "+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+".into(),
                );
            }),
            invalid("/d/challenge"),
        ),
        (
            "hello: interval 0",
            edit(h, |d| {
                d.insert("heartbeat_interval_ms".into(), 0.into());
            }),
            invalid("/d/heartbeat_interval_ms"),
        ),
        (
            "hello: interval negative",
            edit(h, |d| {
                d.insert("heartbeat_interval_ms".into(), (-5).into());
            }),
            invalid("/d/heartbeat_interval_ms"),
        ),
        (
            "hello: interval fraction",
            edit(h, |d| {
                d.insert("heartbeat_interval_ms".into(), 1.5.into());
            }),
            wrong("/d/heartbeat_interval_ms", JsonType::Integer),
        ),
        (
            "hello: miss limit over u32",
            edit(h, |d| {
                d.insert("heartbeat_miss_limit".into(), (1u64 << 32).into());
            }),
            invalid("/d/heartbeat_miss_limit"),
        ),
        (
            "hello: server_time negative",
            edit(h, |d| {
                d.insert("server_time".into(), (-1).into());
            }),
            invalid("/d/server_time"),
        ),
        (
            "hello: server_time a string",
            edit(h, |d| {
                d.insert("server_time".into(), "1".into());
            }),
            wrong("/d/server_time", JsonType::Integer),
        ),
        (
            "hello: jwks with a private key",
            edit(h, |d| {
                d["jwks"]["keys"][0]["d"] = "AAAA".into();
            }),
            MessageError::Jwks(JwkError::UnknownMember {
                pointer: "/d/jwks/keys/0/d".into(),
            }),
        ),
        (
            "hello: jwks not an object",
            edit(h, |d| {
                d.insert("jwks".into(), Value::Array(vec![]));
            }),
            MessageError::Jwks(JwkError::WrongType {
                pointer: "/d/jwks".into(),
                expected: JsonType::Object,
            }),
        ),
        (
            "ready: unknown state",
            edit(ready, |d| {
                d.insert("state".into(), "Active".into());
            }),
            invalid("/d/state"),
        ),
        (
            "ready: unknown llm_credentials",
            edit(ready, |d| {
                d.insert("llm_credentials".into(), "subscription".into());
            }),
            invalid("/d/llm_credentials"),
        ),
        (
            "ready: host_id not a UUID",
            edit(ready, |d| {
                d.insert("host_id".into(), "host-1".into());
            }),
            invalid("/d/host_id"),
        ),
        (
            "ready: host_id in braces",
            edit(ready, |d| {
                d.insert("host_id".into(), format!("{{{HID}}}").into());
            }),
            invalid("/d/host_id"),
        ),
        (
            "ready: no state",
            edit(ready, |d| {
                d.remove("state");
            }),
            missing("/d/state"),
        ),
        (
            "heartbeat_ack: jwks empty kid",
            edit(ack, |d| {
                d.insert("jwks".into(), serde_json::json!({"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":""}]}));
            }),
            MessageError::Jwks(JwkError::EmptyKid {
                pointer: "/d/jwks/keys/0/kid".into(),
            }),
        ),
        (
            "heartbeat_ack: extra",
            edit(ack, |d| {
                d.insert("active_sessions".into(), 1.into());
            }),
            unknown("/d/active_sessions"),
        ),
        (
            "session.open: other path",
            edit(open, |d| {
                d.insert("stream_path".into(), other_path.clone().into());
            }),
            invalid("/d/stream_path"),
        ),
        (
            "session.open: upper-case path",
            edit(open, |d| {
                d.insert("stream_path".into(), upper_path.clone().into());
            }),
            invalid("/d/stream_path"),
        ),
        (
            "session.open: absolute URL",
            edit(open, |d| {
                d.insert(
                    "stream_path".into(),
                    format!("https://evil.example/api/v1/hosts/sessions/{SID}/stream").into(),
                );
            }),
            invalid("/d/stream_path"),
        ),
        (
            "session.open: path of another session",
            edit(open, |d| {
                d.insert("session_id".into(), HID.into());
            }),
            invalid("/d/stream_path"),
        ),
        (
            "session.open: no expires_at",
            edit(open, |d| {
                d.remove("expires_at");
            }),
            missing("/d/expires_at"),
        ),
        (
            "session.close: unknown reason",
            edit(close, |d| {
                d.insert("close_reason".into(), "LOGOUT".into());
            }),
            invalid("/d/close_reason"),
        ),
        (
            "session.close: a detail",
            edit(close, |d| {
                d.insert("close_detail".into(), "pty_failed".into());
            }),
            unknown("/d/close_detail"),
        ),
        (
            "error: unknown code",
            edit(error, |d| {
                d.insert("code".into(), "conflict".into());
            }),
            invalid("/d/code"),
        ),
        (
            "error: op of the server",
            edit(error, |d| {
                d.insert("op".into(), "hello".into());
            }),
            invalid("/d/op"),
        ),
        (
            "error: errors not an array",
            edit(error, |d| {
                d.insert("errors".into(), "x".into());
            }),
            wrong("/d/errors", JsonType::Array),
        ),
        (
            "error: finding with a value",
            edit(error, |d| {
                d.insert(
                    "errors".into(),
                    serde_json::json!([{"pointer":"/a","code":"required","value":"secret"}]),
                );
            }),
            unknown("/d/errors/0/value"),
        ),
        (
            "error: session_id not a UUID",
            edit(error, |d| {
                d.insert("session_id".into(), "1".into());
            }),
            invalid("/d/session_id"),
        ),
    ];
    for (name, text, want) in &cases {
        assert_eq!(&server_err(text), want, "{name}: {text}");
    }
}

#[test]
fn host_message_refusals() {
    let id = || HostMessage::Identify(identify()).to_json();
    let hb = || HostMessage::Heartbeat(Heartbeat { active_sessions: 1 }).to_json();
    let started = || HostMessage::SessionStarted(SessionStarted { session_id: sid() }).to_json();
    let ended = || {
        HostMessage::SessionEnded(SessionEnded {
            session_id: sid(),
            close_reason: CloseReason::ClientClosed,
            close_detail: None,
            exit_code: None,
        })
        .to_json()
    };
    let rep = || HostMessage::Report(report()).to_json();
    let cases: Vec<(&str, String, MessageError)> = vec![
        (
            "identify: no proof",
            edit(id, |d| {
                d.remove("proof");
            }),
            missing("/d/proof"),
        ),
        (
            "identify: no host_version",
            edit(id, |d| {
                d.remove("host_version");
            }),
            missing("/d/host_version"),
        ),
        (
            "identify: proof an object",
            edit(id, |d| {
                d.insert("proof".into(), Value::Object(Map::new()));
            }),
            wrong("/d/proof", JsonType::String),
        ),
        (
            "identify: protocol_version negative",
            edit(id, |d| {
                d.insert("protocol_version".into(), (-1).into());
            }),
            invalid("/d/protocol_version"),
        ),
        (
            "identify: protocol_version over u32",
            edit(id, |d| {
                d.insert("protocol_version".into(), (1u64 << 32).into());
            }),
            invalid("/d/protocol_version"),
        ),
        (
            "identify: live_sessions not an array",
            edit(id, |d| {
                d.insert("live_sessions".into(), SID.into());
            }),
            wrong("/d/live_sessions", JsonType::Array),
        ),
        (
            "identify: live_sessions bad UUID",
            edit(id, |d| {
                d.insert("live_sessions".into(), vec![SID, "x"].into());
            }),
            invalid("/d/live_sessions/1"),
        ),
        (
            "identify: session_id bad UUID",
            edit(id, |d| {
                d.insert(
                    "session_id".into(),
                    "0192f5c47d3a7b2e9f001234567890ab".into(),
                );
            }),
            invalid("/d/session_id"),
        ),
        (
            "identify: extra member",
            edit(id, |d| {
                d.insert("iat".into(), 1.into());
            }),
            unknown("/d/iat"),
        ),
        (
            "report: unknown member",
            edit(rep, |d| {
                d.insert("host_version".into(), "1.0.0".into());
            }),
            unknown("/d/host_version"),
        ),
        (
            "report: doctor entry",
            edit(rep, |d| {
                d["doctor"][2]["check"] = "hd3".into();
            }),
            invalid("/d/doctor/2/check"),
        ),
        (
            "report: no doctor",
            edit(rep, |d| {
                d.remove("doctor");
            }),
            missing("/d/doctor"),
        ),
        (
            "heartbeat: negative",
            edit(hb, |d| {
                d.insert("active_sessions".into(), (-1).into());
            }),
            invalid("/d/active_sessions"),
        ),
        (
            "heartbeat: missing",
            edit(hb, |d| {
                d.remove("active_sessions");
            }),
            missing("/d/active_sessions"),
        ),
        (
            "heartbeat: bool",
            edit(hb, |d| {
                d.insert("active_sessions".into(), true.into());
            }),
            wrong("/d/active_sessions", JsonType::Integer),
        ),
        (
            "session.started: missing id",
            edit(started, |d| {
                d.remove("session_id");
            }),
            missing("/d/session_id"),
        ),
        (
            "session.started: extra",
            edit(started, |d| {
                d.insert("exit_code".into(), 0.into());
            }),
            unknown("/d/exit_code"),
        ),
        (
            "session.ended: unknown reason",
            edit(ended, |d| {
                d.insert("close_reason".into(), "crashed".into());
            }),
            invalid("/d/close_reason"),
        ),
        (
            "session.ended: a detail as reason",
            edit(ended, |d| {
                d.insert("close_reason".into(), "pty_failed".into());
            }),
            invalid("/d/close_reason"),
        ),
        (
            "session.ended: unknown detail",
            edit(ended, |d| {
                d.insert("close_detail".into(), "oops".into());
            }),
            invalid("/d/close_detail"),
        ),
        (
            "session.ended: exit_code over i32",
            edit(ended, |d| {
                d.insert("exit_code".into(), (1i64 << 31).into());
            }),
            invalid("/d/exit_code"),
        ),
        (
            "session.ended: exit_code under i32",
            edit(ended, |d| {
                d.insert("exit_code".into(), (-(1i64 << 31) - 1).into());
            }),
            invalid("/d/exit_code"),
        ),
        (
            "session.ended: exit_code over i64",
            edit(ended, |d| {
                d.insert("exit_code".into(), u64::MAX.into());
            }),
            invalid("/d/exit_code"),
        ),
        (
            "session.ended: exit_code a string",
            edit(ended, |d| {
                d.insert("exit_code".into(), "0".into());
            }),
            wrong("/d/exit_code", JsonType::Integer),
        ),
        (
            "session.ended: no reason",
            edit(ended, |d| {
                d.remove("close_reason");
            }),
            missing("/d/close_reason"),
        ),
    ];
    for (name, text, want) in &cases {
        assert_eq!(&host_err(text), want, "{name}: {text}");
    }
    // The extreme exit codes decode.
    for code in [i32::MIN, i32::MAX] {
        let text = edit(ended, |d| {
            d.insert("exit_code".into(), code.into());
        });
        assert!(HostMessage::decode(text.as_bytes(), MAX).is_ok());
    }
}

#[test]
fn identify_control_shape_is_step_3() {
    let ok = identify();
    assert_eq!(ok.check_control_shape(), Ok(()));
    let empty = Identify {
        live_sessions: Some(vec![]),
        ..identify()
    };
    assert_eq!(empty.check_control_shape(), Ok(()));
    let cases = [
        (
            Identify {
                live_sessions: None,
                ..identify()
            },
            MessageError::LiveSessionsMissing,
        ),
        (
            Identify {
                session_id: Some(sid()),
                ..identify()
            },
            MessageError::SessionIdNotAllowed,
        ),
        (
            Identify {
                host_version: "v1.0.0".into(),
                ..identify()
            },
            MessageError::HostVersionInvalid,
        ),
        (
            Identify {
                host_version: "1.0".into(),
                ..identify()
            },
            MessageError::HostVersionInvalid,
        ),
        // The order of step 3: live_sessions first, then session_id, then the version.
        (
            Identify {
                live_sessions: None,
                session_id: Some(sid()),
                host_version: "x".into(),
                ..identify()
            },
            MessageError::LiveSessionsMissing,
        ),
        (
            Identify {
                session_id: Some(sid()),
                host_version: "x".into(),
                ..identify()
            },
            MessageError::SessionIdNotAllowed,
        ),
    ];
    for (identify, want) in cases {
        assert_eq!(
            identify.check_control_shape(),
            Err(want.clone()),
            "{identify:?}"
        );
        assert_eq!(want.close_code().as_u16(), 4002);
    }
    // The shape is not a decode error: the server checks the protocol version first.
    let text = HostMessage::Identify(Identify {
        protocol_version: 99,
        live_sessions: None,
        host_version: "v9".into(),
        ..identify()
    })
    .to_json();
    assert!(HostMessage::decode(text.as_bytes(), MAX).is_ok());
}

#[test]
fn identify_data_shape() {
    let data = Identify {
        live_sessions: None,
        session_id: Some(sid()),
        ..identify()
    };
    assert_eq!(data.check_data_shape(sid()), Ok(()));
    assert_eq!(
        data.check_data_shape(hid()),
        Err(MessageError::SessionIdMismatch)
    );
    assert_eq!(
        identify().check_data_shape(sid()),
        Err(MessageError::LiveSessionsNotAllowed)
    );
    assert_eq!(
        Identify {
            session_id: None,
            ..data.clone()
        }
        .check_data_shape(sid()),
        Err(MessageError::SessionIdMissing)
    );
    assert_eq!(
        Identify {
            host_version: "1.0.0 ".into(),
            ..data.clone()
        }
        .check_data_shape(sid()),
        Err(MessageError::HostVersionInvalid)
    );
}

fn ended(reason: CloseReason, detail: Option<CloseDetail>, exit_code: Option<i32>) -> SessionEnded {
    SessionEnded {
        session_id: sid(),
        close_reason: reason,
        close_detail: detail,
        exit_code,
    }
}

#[test]
fn session_ended_from_a_host() {
    use CloseDetail as D;
    use CloseReason as R;
    let allowed = [
        ended(R::ClientClosed, None, None),
        ended(R::ProcessExited, None, Some(0)),
        ended(R::ProcessExited, None, Some(-9)),
        ended(R::ProcessExited, None, None),
        ended(R::IdleTimeout, None, None),
        ended(R::DetachExpired, None, None),
        ended(R::OpenFailed, Some(D::OpenTimeout), None),
        ended(R::OpenFailed, Some(D::TokenReplayed), None),
        ended(
            R::HostPolicyViolation,
            Some(D::SubscriptionLoginDetected),
            None,
        ),
        ended(R::HostPolicyViolation, Some(D::HelperUntrusted), None),
        ended(R::HostPolicyViolation, Some(D::SharedLocation), None),
    ];
    for end in allowed {
        assert_eq!(end.check_host_may_report(), Ok(()), "{end:?}");
    }
    let refused = [
        (
            ended(R::ClosedByOwner, None, None),
            SessionEndedError::ReasonNotFromHost,
        ),
        (
            ended(R::AccessRevoked, None, None),
            SessionEndedError::ReasonNotFromHost,
        ),
        (
            ended(R::HostRestarted, None, None),
            SessionEndedError::ReasonNotFromHost,
        ),
        (
            ended(R::MaxDuration, None, None),
            SessionEndedError::ReasonNotFromHost,
        ),
        (
            ended(R::I6Violation, None, Some(1)),
            SessionEndedError::ReasonNotFromHost,
        ),
        (
            ended(R::OpenFailed, None, None),
            SessionEndedError::Pair(CodeError::DetailRequired),
        ),
        (
            ended(R::HostPolicyViolation, None, None),
            SessionEndedError::Pair(CodeError::DetailRequired),
        ),
        (
            ended(R::HostPolicyViolation, Some(D::PtyFailed), None),
            SessionEndedError::Pair(CodeError::DetailNotForReason),
        ),
        (
            ended(R::ClientClosed, Some(D::PtyFailed), None),
            SessionEndedError::Pair(CodeError::DetailNotAllowed),
        ),
        (
            ended(R::ProcessExited, Some(D::PtyFailed), Some(0)),
            SessionEndedError::Pair(CodeError::DetailNotAllowed),
        ),
        (
            ended(R::IdleTimeout, None, Some(0)),
            SessionEndedError::ExitCodeNotAllowed,
        ),
        (
            ended(R::OpenFailed, Some(D::PtyFailed), Some(1)),
            SessionEndedError::ExitCodeNotAllowed,
        ),
    ];
    for (end, want) in refused {
        assert_eq!(end.check_host_may_report(), Err(want), "{end:?}");
        assert_eq!(want.error_code(), ErrorCode::ValidationFailed);
    }
    // Every reason a host may not report is refused, whatever else it carries.
    for &reason in CloseReason::ALL {
        if !reason.host_may_report() {
            assert_eq!(
                ended(reason, None, None).check_host_may_report(),
                Err(SessionEndedError::ReasonNotFromHost)
            );
        }
    }
}

#[test]
fn wire_enums() {
    for &op in HostOp::ALL {
        assert_eq!(HostOp::parse(op.as_str()), Some(op));
        assert_eq!(ServerOp::parse(op.as_str()), None);
    }
    for &op in ServerOp::ALL {
        assert_eq!(ServerOp::parse(op.as_str()), Some(op));
        assert_eq!(HostOp::parse(op.as_str()), None);
    }
    let states: Vec<&str> = HostState::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        states,
        ["pairing", "confirming", "active", "disabled", "retired"]
    );
    let llm: Vec<String> = LlmCredentials::ALL.iter().map(|s| s.to_string()).collect();
    assert_eq!(llm, ["none", "personal", "organization"]);
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(codes, ["validation_failed", "not_found"]);
    for message in server_messages() {
        assert!(
            message
                .to_json()
                .contains(&format!("\"op\":\"{}\"", message.op()))
        );
    }
    for message in host_messages() {
        assert!(
            message
                .to_json()
                .contains(&format!("\"op\":\"{}\"", message.op()))
        );
    }
}

#[test]
fn errors_carry_no_peer_values() {
    let secret = "s3cr3t-value";
    let texts = [
        format!(r#"{{"op":"{secret}","d":{{}}}}"#),
        format!(r#"{{"op":"heartbeat","d":{{"active_sessions":"{secret}"}}}}"#),
        format!(
            r#"{{"op":"session.ended","d":{{"session_id":"{SID}","close_reason":"{secret}"}}}}"#
        ),
        format!(r#"{{"op":"session.started","d":{{"session_id":"{secret}"}}}}"#),
    ];
    for text in texts {
        let error = host_err(&text);
        assert!(!format!("{error} {error:?}").contains(secret), "{error:?}");
    }
    let report_value = edit(
        || HostMessage::Report(report()).to_json(),
        |d| {
            d["doctor"][0]["code"] = secret.into();
        },
    );
    let error = host_err(&report_value);
    assert!(!format!("{error:?}").contains(secret));
}
