//! The signals between nodes of spec 24 section 9: what a use case that acts
//! on a live connection after its commit tells every api process, the sender
//! included.
//!
//! # Layout
//! - this file: [`Signal`] with exactly the members of the table of section 9,
//!   its compact JSON ([`Signal::encode`]) and the strict decoding
//!   ([`decode`]), staging in a unit of work ([`stage`]) and sending outside
//!   one ([`send`]), and [`deliver`], the one way a received payload reaches a
//!   [`SignalHandler`];
//! - [`listener`]: `cluster.mode: multi` — the one `LISTEN ephemeral`
//!   connection of the process (application name `bothy-ephemeral`), its
//!   reconnect and the reconciliation after it;
//! - [`node`]: this process's handler ([`node::Node`]) and the task that feeds
//!   it from the listener (several nodes) or the local transport (one node);
//! - [`presence`]: the presence view of the node and the port
//!   [`ControlLinks`](crate::terminal::links::ControlLinks) over it.
//!
//! # Transport
//! The `db` module carries the payloads: with several nodes a signal staged in
//! a unit of work is a `NOTIFY ephemeral` inside its transaction (PostgreSQL
//! delivers it after the commit, never after a rollback), one sent outside a
//! unit is a `NOTIFY` at once; with one node both go to the local transport of
//! the process (after the commit) and no `NOTIFY` is sent. Either way the same
//! handler receives the same payload through [`deliver`].
//!
//! # What a signal may carry
//! Exactly `kind`, `host_id` and per kind `session_id` or `conn_id`, each a
//! UUID; never a token, jti, profile, name, path, address or byte of a stream.
//! The types make anything else impossible to send. A receiver reads the state
//! from the database, so a signal that arrives late, twice, out of order or
//! forged (anyone with the database's login can `NOTIFY`) causes nothing the
//! committed rows do not allow.

pub mod listener;
pub mod node;
pub mod presence;

use std::future::Future;

use serde::Deserialize;
use uuid::Uuid;

use crate::db::{self, Db, DbError, UnitOfWork};

/// The prefix of the kinds this module owns; kinds outside it belong to other
/// modules on the same channel and are ignored here.
pub const KIND_PREFIX: &str = "terminal.";

/// One signal of the table of section 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// `terminal.session_open`: the units of terminal.open and terminal.attach.
    SessionOpen {
        /// The host of the session.
        host_id: Uuid,
        /// The session.
        session_id: Uuid,
    },
    /// `terminal.host_close`: every transition out of active, a re-pairing,
    /// the fallback of the confirmation and the duplicate verdict of 3.4.
    HostClose {
        /// The host.
        host_id: Uuid,
    },
    /// `terminal.host_present`: a control connection after its first report
    /// and after each heartbeat.
    HostPresent {
        /// The host.
        host_id: Uuid,
        /// The connection (UUIDv7 of the accepting node).
        conn_id: Uuid,
    },
    /// `terminal.host_gone`: a control connection that closes.
    HostGone {
        /// The host.
        host_id: Uuid,
        /// The connection.
        conn_id: Uuid,
    },
    /// `terminal.session_paired`: the relay paired both sides of a session in
    /// opening on a host with `require_local_confirm = true`.
    SessionPaired {
        /// The host of the session.
        host_id: Uuid,
        /// The session.
        session_id: Uuid,
    },
}

impl Signal {
    /// The kind on the wire.
    pub const fn kind(&self) -> &'static str {
        match self {
            Signal::SessionOpen { .. } => "terminal.session_open",
            Signal::HostClose { .. } => "terminal.host_close",
            Signal::HostPresent { .. } => "terminal.host_present",
            Signal::HostGone { .. } => "terminal.host_gone",
            Signal::SessionPaired { .. } => "terminal.session_paired",
        }
    }

    /// The host the signal is about.
    pub const fn host_id(&self) -> Uuid {
        match *self {
            Signal::SessionOpen { host_id, .. }
            | Signal::HostClose { host_id }
            | Signal::HostPresent { host_id, .. }
            | Signal::HostGone { host_id, .. }
            | Signal::SessionPaired { host_id, .. } => host_id,
        }
    }

    /// Compact JSON with exactly the members of the kind, `kind` first; UUIDs
    /// hyphenated in lower case.
    pub fn encode(&self) -> String {
        let kind = self.kind();
        let host = db::id_text(&self.host_id());
        match *self {
            Signal::HostClose { .. } => format!(r#"{{"kind":"{kind}","host_id":"{host}"}}"#),
            Signal::SessionOpen { session_id, .. } | Signal::SessionPaired { session_id, .. } => {
                format!(
                    r#"{{"kind":"{kind}","host_id":"{host}","session_id":"{}"}}"#,
                    db::id_text(&session_id)
                )
            }
            Signal::HostPresent { conn_id, .. } | Signal::HostGone { conn_id, .. } => format!(
                r#"{{"kind":"{kind}","host_id":"{host}","conn_id":"{}"}}"#,
                db::id_text(&conn_id)
            ),
        }
    }
}

/// Why a payload with the prefix `terminal.` was dropped (the one log record
/// names this code, never the payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    /// Not a JSON object with a string `kind` (duplicate members included).
    #[error("malformed")]
    Malformed,
    /// A kind with the prefix `terminal.` that this build does not know.
    #[error("unknown_kind")]
    UnknownKind,
    /// A member missing, unknown or duplicated, or of the wrong type.
    #[error("members")]
    Members,
    /// A member that is no UUID.
    #[error("not_a_uuid")]
    NotAUuid,
}

/// What [`decode`] made of a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// A valid signal.
    Signal(Signal),
    /// A kind outside the prefix `terminal.`: another module's, ignored.
    Ignored,
    /// Dropped (logged once by [`deliver`]).
    Dropped(Dropped),
}

/// Only the kind, members of other modules' kinds ignored.
#[derive(Deserialize)]
struct KindOnly {
    kind: String,
}

/// The members a terminal signal may have; anything else is refused (and
/// serde refuses a duplicate member of a struct).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Members {
    #[allow(dead_code)] // read through `KindOnly`; present here to be allowed
    kind: String,
    host_id: String,
    session_id: Option<String>,
    conn_id: Option<String>,
}

/// Decodes a payload strictly (module docs): a payload that is no JSON object
/// with a string `kind` is dropped; a kind outside `terminal.` is ignored; a
/// terminal kind needs exactly its members, each a UUID.
pub fn decode(payload: &str) -> Decoded {
    let Ok(KindOnly { kind }) = serde_json::from_str::<KindOnly>(payload) else {
        return Decoded::Dropped(Dropped::Malformed);
    };
    if !kind.starts_with(KIND_PREFIX) {
        return Decoded::Ignored;
    }
    enum Third {
        None,
        Session,
        Conn,
    }
    let third = match kind.as_str() {
        "terminal.host_close" => Third::None,
        "terminal.session_open" | "terminal.session_paired" => Third::Session,
        "terminal.host_present" | "terminal.host_gone" => Third::Conn,
        _ => return Decoded::Dropped(Dropped::UnknownKind),
    };
    let Ok(members) = serde_json::from_str::<Members>(payload) else {
        return Decoded::Dropped(Dropped::Members);
    };
    let uuid = |text: &str| bothy_proto::ids::parse_uuid(text).map_err(|_| Dropped::NotAUuid);
    let decoded = (|| {
        let host_id = uuid(&members.host_id)?;
        let third_id = match (&third, &members.session_id, &members.conn_id) {
            (Third::None, None, None) => None,
            (Third::Session, Some(id), None) | (Third::Conn, None, Some(id)) => Some(uuid(id)?),
            _ => return Err(Dropped::Members),
        };
        Ok(match (kind.as_str(), third_id) {
            ("terminal.host_close", None) => Signal::HostClose { host_id },
            ("terminal.session_open", Some(session_id)) => Signal::SessionOpen {
                host_id,
                session_id,
            },
            ("terminal.session_paired", Some(session_id)) => Signal::SessionPaired {
                host_id,
                session_id,
            },
            ("terminal.host_present", Some(conn_id)) => Signal::HostPresent { host_id, conn_id },
            ("terminal.host_gone", Some(conn_id)) => Signal::HostGone { host_id, conn_id },
            _ => return Err(Dropped::Members),
        })
    })();
    match decoded {
        Ok(signal) => Decoded::Signal(signal),
        Err(dropped) => Decoded::Dropped(dropped),
    }
}

/// Stages `signal` in the unit of work: sent with its commit, never after a
/// rollback (module docs).
pub fn stage(uow: &mut UnitOfWork, signal: &Signal) {
    uow.signal(signal.encode());
}

/// Sends `signal` now, outside a unit of work (`terminal.host_present`,
/// `terminal.host_gone`, `terminal.session_paired`).
pub async fn send(db: &Db, signal: &Signal) -> Result<(), DbError> {
    db.send_signal(signal.encode()).await
}

/// What acts on the signals in a process.
pub trait SignalHandler: Send + Sync + 'static {
    /// One decoded signal, in the order received.
    fn handle(&self, signal: Signal) -> impl Future<Output = ()> + Send;

    /// After the listener's `LISTEN` succeeded again (and at its first
    /// start): the signals missed meanwhile are gone, so read the state.
    fn reconcile(&self) -> impl Future<Output = ()> + Send;
}

/// Decodes one received payload and hands a valid signal to `handler`; a
/// dropped payload writes one log record with the reason code (never the
/// payload), an ignored one nothing. Returns what the payload was.
pub async fn deliver<H: SignalHandler>(handler: &H, payload: &str) -> Decoded {
    let decoded = decode(payload);
    match decoded {
        Decoded::Signal(signal) => handler.handle(signal).await,
        Decoded::Ignored => {}
        Decoded::Dropped(reason) => {
            tracing::warn!(%reason, "a terminal signal on the channel ephemeral was dropped");
        }
    }
    decoded
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "0192f0c1-7a4e-7c3b-9d2e-1f0a2b3c4d5e";
    const OTHER: &str = "0192f0c1-7a4e-7c3b-9d2e-1f0a2b3c4d5f";

    fn id(text: &str) -> Uuid {
        Uuid::parse_str(text).unwrap()
    }

    fn all() -> Vec<Signal> {
        let (host_id, other) = (id(HOST), id(OTHER));
        vec![
            Signal::SessionOpen {
                host_id,
                session_id: other,
            },
            Signal::HostClose { host_id },
            Signal::HostPresent {
                host_id,
                conn_id: other,
            },
            Signal::HostGone {
                host_id,
                conn_id: other,
            },
            Signal::SessionPaired {
                host_id,
                session_id: other,
            },
        ]
    }

    #[test]
    fn every_kind_round_trips_with_exactly_its_members() {
        let expected = [
            format!(
                r#"{{"kind":"terminal.session_open","host_id":"{HOST}","session_id":"{OTHER}"}}"#
            ),
            format!(r#"{{"kind":"terminal.host_close","host_id":"{HOST}"}}"#),
            format!(r#"{{"kind":"terminal.host_present","host_id":"{HOST}","conn_id":"{OTHER}"}}"#),
            format!(r#"{{"kind":"terminal.host_gone","host_id":"{HOST}","conn_id":"{OTHER}"}}"#),
            format!(
                r#"{{"kind":"terminal.session_paired","host_id":"{HOST}","session_id":"{OTHER}"}}"#
            ),
        ];
        for (signal, text) in all().into_iter().zip(expected) {
            assert_eq!(signal.encode(), text);
            assert_eq!(decode(&text), Decoded::Signal(signal));
            assert!(text.len() < 160, "compact: {text}");
        }
    }

    #[test]
    fn members_in_another_order_decode_the_same() {
        let text =
            format!(r#"{{"conn_id":"{OTHER}","host_id":"{HOST}","kind":"terminal.host_gone"}}"#);
        assert_eq!(
            decode(&text),
            Decoded::Signal(Signal::HostGone {
                host_id: id(HOST),
                conn_id: id(OTHER)
            })
        );
    }

    #[test]
    fn other_prefixes_are_ignored_and_unknown_terminal_kinds_dropped() {
        assert_eq!(decode(r#"{"kind":"gateway.bump","x":1}"#), Decoded::Ignored);
        assert_eq!(
            decode(r#"{"kind":"terminalx.host_close"}"#),
            Decoded::Ignored
        );
        assert_eq!(
            decode(&format!(
                r#"{{"kind":"terminal.host_reboot","host_id":"{HOST}"}}"#
            )),
            Decoded::Dropped(Dropped::UnknownKind)
        );
        assert_eq!(
            decode(r#"{"kind":"terminal."}"#),
            Decoded::Dropped(Dropped::UnknownKind)
        );
    }

    #[test]
    fn malformed_payloads_are_dropped() {
        for text in [
            "",
            "not json",
            "[]",
            "42",
            r#"{"host_id":"x"}"#,
            r#"{"kind":7}"#,
            r#"{"kind":"terminal.host_close","kind":"terminal.host_close"}"#,
        ] {
            assert_eq!(decode(text), Decoded::Dropped(Dropped::Malformed), "{text}");
        }
    }

    #[test]
    fn members_must_be_exactly_those_of_the_kind() {
        let cases = [
            // extra member
            format!(r#"{{"kind":"terminal.host_close","host_id":"{HOST}","token":"t"}}"#),
            // a member of another kind
            format!(r#"{{"kind":"terminal.host_close","host_id":"{HOST}","conn_id":"{OTHER}"}}"#),
            format!(r#"{{"kind":"terminal.session_open","host_id":"{HOST}","conn_id":"{OTHER}"}}"#),
            // missing
            format!(r#"{{"kind":"terminal.session_open","host_id":"{HOST}"}}"#),
            r#"{"kind":"terminal.host_close"}"#.to_owned(),
            // duplicated
            format!(r#"{{"kind":"terminal.host_close","host_id":"{HOST}","host_id":"{HOST}"}}"#),
            // wrong type
            r#"{"kind":"terminal.host_close","host_id":7}"#.to_owned(),
            r#"{"kind":"terminal.host_close","host_id":null}"#.to_owned(),
        ];
        for text in cases {
            assert_eq!(decode(&text), Decoded::Dropped(Dropped::Members), "{text}");
        }
    }

    #[test]
    fn values_must_be_uuids() {
        for text in [
            r#"{"kind":"terminal.host_close","host_id":"host-1"}"#.to_owned(),
            r#"{"kind":"terminal.host_close","host_id":""}"#.to_owned(),
            format!(r#"{{"kind":"terminal.host_close","host_id":"{{{HOST}}}"}}"#),
            format!(r#"{{"kind":"terminal.host_gone","host_id":"{HOST}","conn_id":"../etc"}}"#),
        ] {
            assert_eq!(decode(&text), Decoded::Dropped(Dropped::NotAUuid), "{text}");
        }
    }
}
