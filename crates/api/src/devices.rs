//! The bodies of the device routes (DESIGN 3.1): `GET /api/v1/devices`
//! (`POST /api/v1/devices/{id}/revoke` answers `204` without a body).

use serde::{Deserialize, Serialize};

/// `GET /api/v1/devices` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeviceList {
    /// Oldest first.
    pub devices: Vec<Device>,
}

/// A device: the Ed25519 key of a CLI login (doc-only; `devices::Device::to_json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Device {
    /// The device's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
    /// Whose device it is.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub person_id: String,
    /// The `device_name` of the last login with it.
    pub name: String,
    /// The raw Ed25519 public key, base64url without padding.
    pub public_key: String,
    /// The first login with it (Unix ms).
    pub created_at: i64,
    /// The last login with it (Unix ms).
    pub last_login_at: i64,
    /// When it was revoked (Unix ms); `null` while it is not.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub revoked_at: Option<i64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_device_not_revoked_says_null() {
        let device = Device {
            id: "i".into(),
            person_id: "p".into(),
            name: "n".into(),
            public_key: "k".into(),
            created_at: 1,
            last_login_at: 2,
            revoked_at: None,
        };
        let text = serde_json::to_string(&device).unwrap();
        assert!(text.ends_with(r#""revoked_at":null}"#), "{text}");
        assert_eq!(serde_json::from_str::<Device>(&text).unwrap(), device);
    }
}
