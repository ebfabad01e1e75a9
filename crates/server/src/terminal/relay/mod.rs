//! The relay (6.1 steps 5–7, 6.2, 6.3, 9): pairs the host's data connection
//! and the device stream of a session in memory and forwards each binary
//! message unchanged.
//!
//! This file holds the registry other parts ask ([`Relay::device_present`]);
//! the pairing, forwarding and backpressure live beside it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use uuid::Uuid;

/// Which sides of a session are connected on this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sides {
    /// The device stream passed its identify.
    pub device: bool,
    /// The host's data connection passed its identify.
    pub host: bool,
}

/// The relay of this process.
#[derive(Default)]
pub struct Relay {
    sessions: Mutex<HashMap<Uuid, Sides>>,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.sessions.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("Relay").field("sessions", &count).finish()
    }
}

impl Relay {
    /// An empty relay.
    pub fn new() -> Relay {
        Relay::default()
    }

    /// The connected sides of a session.
    pub fn sides(&self, session_id: Uuid) -> Sides {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(&session_id).copied().unwrap_or_default()
    }

    /// Whether the device side of the session is connected here (a
    /// `session.started` without it makes the session detached at once, 6.1).
    pub fn device_present(&self, session_id: Uuid) -> bool {
        self.sides(session_id).device
    }

    /// Records a side's arrival or departure.
    pub fn set_sides(&self, session_id: Uuid, sides: Sides) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sides == Sides::default() {
            sessions.remove(&session_id);
        } else {
            sessions.insert(session_id, sides);
        }
    }
}
