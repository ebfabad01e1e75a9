//! `bothy-config`: the strict reading of configuration files that `bothy-server`
//! and `bothy-host` share (DESIGN §3; spec 2.2 "Configuration file",
//! D-M2-42-3). Each binary keeps its own key tree and typed struct; this crate
//! turns the text into a document and reads it so that every refusal names the
//! dotted key, never the value found there.
//!
//! # Layout
//! - [`yaml`]: YAML text to a [`serde_json::Value`], strictly (one document, no
//!   duplicate or merge key, no unknown tag, YAML 1.2 booleans, no `null` below
//!   the top level).
//! - [`section`]: [`Section`], one mapping with an exact member list and typed
//!   getters (strings, paths, booleans, durations, bounded integers).
//! - [`duration`]: humantime durations and the rules a duration key accepts.
//! - [`error`]: [`ConfigError`] and the dotted form of a key.
#![forbid(unsafe_code)]

pub mod duration;
pub mod error;
pub mod section;
pub mod yaml;

pub use error::ConfigError;
pub use section::Section;
