//! Test peers for the terminal channels, built from bothy-proto and
//! bothy-noise (real WebSocket clients speaking the real protocol; the real
//! host service comes in its own issue and must pass the same tests).
//!
//! - [`host_control`]: a host service's control connection (hello, identify
//!   with the proof, report, heartbeats, session reports).
//! - [`host_data`]: a host service's data connection and its Noise responder.
//! - [`device`]: a device stream and its Noise initiator.

pub mod device;
pub mod host_control;
pub mod host_data;
