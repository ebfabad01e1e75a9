//! What an event is (spec 10.2): its kind, its audience and its payload, a
//! durable event before it is written and an ephemeral one, and the position
//! of a durable event in the log. Plain data, below `db` (whose unit of work
//! writes and publishes them) and `events` (the log tail and subscriptions,
//! which re-exports everything here).

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::codes::code_enum;

/// The position of a durable event: increases with every event, in commit order.
/// Position 0 is "before the first event".
pub type EventPosition = i64;

code_enum! {
    /// The kinds of durable events. Add new ones here.
    pub enum EventKind {
        /// A host changed; to everyone with host.read on it.
        HostUpdated => "host.updated",
        /// A terminal session changed; to the person of the session.
        TerminalSessionChanged => "terminal_session.changed",
    }
}

code_enum! {
    /// The kinds of ephemeral events. Add new ones here.
    pub enum EphemeralKind {
        /// A host's control connection came or went (`{host_id, connected}`);
        /// to everyone with host.read on it.
        HostPresenceChanged => "host.presence_changed",
    }
}

/// Who receives an event. The API layer decides per subscriber whether it is in
/// the audience (it knows the principal and the permissions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Audience {
    /// One person.
    Person(Uuid),
    /// Everyone who may read this host (host.read).
    HostReaders(Uuid),
    /// Every active owner.
    Owners,
}

impl Audience {
    pub(crate) const fn kind_str(&self) -> &'static str {
        match self {
            Audience::Person(_) => "person",
            Audience::HostReaders(_) => "host_readers",
            Audience::Owners => "owners",
        }
    }

    pub(crate) fn id(&self) -> Option<Uuid> {
        match *self {
            Audience::Person(id) | Audience::HostReaders(id) => Some(id),
            Audience::Owners => None,
        }
    }

    pub(crate) fn from_parts(kind: &str, id: Option<Uuid>) -> Option<Audience> {
        match (kind, id) {
            ("person", Some(id)) => Some(Audience::Person(id)),
            ("host_readers", Some(id)) => Some(Audience::HostReaders(id)),
            ("owners", None) => Some(Audience::Owners),
            _ => None,
        }
    }
}

/// A durable event before it is written. The payload is a JSON object of states
/// (never a byte stream, never content: the log is read in plain text by the
/// server and by backups, 10.2).
#[derive(Debug, Clone, PartialEq)]
pub struct DurableEvent {
    /// The kind.
    pub kind: EventKind,
    /// The audience.
    pub audience: Audience,
    /// The payload.
    pub payload: Map<String, Value>,
}

impl DurableEvent {
    /// An event.
    pub fn new(kind: EventKind, audience: Audience, payload: Map<String, Value>) -> DurableEvent {
        DurableEvent {
            kind,
            audience,
            payload,
        }
    }
}

/// An ephemeral event: live in this process, never stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EphemeralEvent {
    /// The kind.
    pub kind: EphemeralKind,
    /// The audience.
    pub audience: Audience,
    /// The payload.
    pub payload: Map<String, Value>,
}

impl EphemeralEvent {
    /// An event.
    pub fn new(
        kind: EphemeralKind,
        audience: Audience,
        payload: Map<String, Value>,
    ) -> EphemeralEvent {
        EphemeralEvent {
            kind,
            audience,
            payload,
        }
    }
}
