//! Host key pins (5.5): on the first successful opening on a host the device
//! stores the host's `noise_public_key` and `key_generation` (with the
//! fingerprint, to show it later), per server and host, in
//! `$XDG_DATA_HOME/bothy/pins.json` (mode 0600). A different key or
//! generation later is a change the person must confirm.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dirs::{self, Dirs};
use crate::error::ClientError;

const PINS_FILE: &str = "pins.json";

/// One pinned host key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// The host's static Noise key (base64url, as the server delivers it).
    pub noise_public_key: String,
    /// The host's key generation.
    pub key_generation: i64,
    /// The fingerprint of 4.3 the server gave with the key.
    pub key_fingerprint: String,
}

/// What the key the server delivers is, against the pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinCheck {
    /// No pin for this host yet (the first opening pins it).
    New,
    /// The pinned key.
    Same,
    /// Another key or generation than the pinned one.
    Changed(Pin),
}

/// All pins of this device: server → host ID → pin.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Pins {
    #[serde(flatten)]
    servers: BTreeMap<String, BTreeMap<String, Pin>>,
}

impl Pins {
    /// The stored pins (none when the file does not exist).
    pub fn load(dirs: &Dirs) -> Result<Pins, ClientError> {
        let path = dirs.data.join(PINS_FILE);
        match dirs::read_private(&path)? {
            None => Ok(Pins::default()),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|_| ClientError::Damaged(path.display().to_string())),
        }
    }

    /// Stores the pins (0600).
    pub fn store(&self, dirs: &Dirs) -> Result<(), ClientError> {
        let bytes =
            serde_json::to_vec_pretty(self).map_err(|_| ClientError::Damaged(PINS_FILE.into()))?;
        dirs::write_private(&dirs.data.join(PINS_FILE), &bytes)
    }

    /// Compares `offered` with the pin of `host_id` on `server`.
    pub fn check(&self, server: &str, host_id: &str, offered: &Pin) -> PinCheck {
        match self
            .servers
            .get(server)
            .and_then(|hosts| hosts.get(host_id))
        {
            None => PinCheck::New,
            Some(pin)
                if pin.noise_public_key == offered.noise_public_key
                    && pin.key_generation == offered.key_generation =>
            {
                PinCheck::Same
            }
            Some(pin) => PinCheck::Changed(pin.clone()),
        }
    }

    /// Pins `pin` for `host_id` on `server` (replacing an older pin).
    pub fn pin(&mut self, server: &str, host_id: &str, pin: Pin) {
        self.servers
            .entry(server.to_owned())
            .or_default()
            .insert(host_id.to_owned(), pin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(key: &str, generation: i64) -> Pin {
        Pin {
            noise_public_key: key.into(),
            key_generation: generation,
            key_fingerprint: format!("FP-{key}-{generation}"),
        }
    }

    #[test]
    fn pins_are_per_server_and_host_and_survive_a_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dirs = Dirs {
            config: dir.path().join("config"),
            data: dir.path().join("data"),
        };
        let mut pins = Pins::load(&dirs).expect("empty");
        assert_eq!(pins.check("https://s:1", "h1", &pin("A", 1)), PinCheck::New);
        pins.pin("https://s:1", "h1", pin("A", 1));
        pins.store(&dirs).expect("stored");
        let pins = Pins::load(&dirs).expect("loaded");
        assert_eq!(
            pins.check("https://s:1", "h1", &pin("A", 1)),
            PinCheck::Same
        );
        assert_eq!(
            pins.check("https://s:1", "h1", &pin("B", 2)),
            PinCheck::Changed(pin("A", 1))
        );
        assert_eq!(
            pins.check("https://s:1", "h1", &pin("A", 2)),
            PinCheck::Changed(pin("A", 1))
        );
        assert_eq!(pins.check("https://s:2", "h1", &pin("A", 1)), PinCheck::New);
        assert_eq!(pins.check("https://s:1", "h2", &pin("A", 1)), PinCheck::New);
    }
}
