//! YAML text to a [`serde_json::Value`], strictly: one document (serde-saphyr's
//! single-document entry refuses a second one), no key twice (serde-saphyr's
//! default [`DuplicateKeyPolicy::Error`], stated here so that a change of the
//! default cannot loosen it), no merge keys (`<<` would let one mapping override
//! another silently), no unknown tags, YAML 1.2 booleans only (so `off` stays the
//! string `off`), and no `null` below the top level (docs/decisions.md D-6).
//!
//! The parser's own messages are never passed on: they can quote the text they
//! stopped at. An error keeps only the kind of problem, the line and column, and
//! the dotted key where the reader was.

use std::cell::RefCell;
use std::fmt;

use bothy_proto::json::pointer_join;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use serde_saphyr::{DuplicateKeyPolicy, MergeKeyPolicy, Options};

use crate::ConfigError;
use crate::error::dotted;

fn options() -> Options {
    let mut options = Options::default();
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    options.merge_keys = MergeKeyPolicy::Error;
    options.strict_booleans = true;
    options.reject_unsupported_tags = true;
    options.with_snippet = false;
    options
}

/// Reads one YAML document. An empty document (or only comments) is `Null`.
pub fn parse_document(text: &str) -> Result<Value, ConfigError> {
    let context = Context::default();
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        ValueSeed { context: &context }.deserialize(de)
    });
    match parsed {
        Ok(value) => Ok(value),
        Err(error) => Err(context.take_error().unwrap_or_else(|| {
            let failed_at = context.failed_at.borrow().clone().unwrap_or_default();
            from_saphyr(&error, &failed_at)
        })),
    }
}

/// Why a text is not one YAML scalar.
#[derive(Debug, PartialEq, Eq)]
pub enum ScalarError {
    /// YAML `null` (also the empty text).
    Null,
    /// A mapping, a sequence, several documents or not YAML at all.
    NotAScalar,
}

/// Reads the value of an environment override: one YAML scalar (a string, an
/// integer, a boolean).
pub fn parse_scalar(text: &str) -> Result<Value, ScalarError> {
    match parse_document(text) {
        Ok(Value::Null) => Err(ScalarError::Null),
        Ok(value @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => Ok(value),
        Ok(Value::Array(_) | Value::Object(_)) | Err(_) => Err(ScalarError::NotAScalar),
    }
}

/// An error of serde-saphyr, reduced to its kind and place.
fn from_saphyr(error: &serde_saphyr::Error, failed_at: &str) -> ConfigError {
    let mut error = error;
    while let serde_saphyr::Error::AliasError { error: inner, .. }
    | serde_saphyr::Error::WithSnippet { error: inner, .. } = error
    {
        error = inner;
    }
    let location = error.location().map(|l| (l.line(), l.column()));
    let reason = match error {
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => {
            let pointer = match key {
                Some(key) => pointer_join(failed_at, key),
                None => failed_at.to_owned(),
            };
            return ConfigError::DuplicateKey {
                key: dotted(&pointer),
                location,
            };
        }
        serde_saphyr::Error::NonFiniteFloat { .. } => {
            return ConfigError::invalid(&dotted(failed_at), "a finite number");
        }
        serde_saphyr::Error::MultipleDocuments { .. } => "more than one YAML document",
        serde_saphyr::Error::MergeKeyNotAllowed { .. } => "merge keys (<<) are not allowed",
        serde_saphyr::Error::UnsupportedTag { .. } => {
            "tags other than the standard ones are not allowed"
        }
        serde_saphyr::Error::NullIntoString { .. } => "a mapping key is null",
        serde_saphyr::Error::UnknownAnchor { .. } => "an alias names no anchor",
        serde_saphyr::Error::Budget { .. }
        | serde_saphyr::Error::AliasReplayCounterOverflow { .. }
        | serde_saphyr::Error::AliasReplayLimitExceeded { .. }
        | serde_saphyr::Error::AliasExpansionLimitExceeded { .. }
        | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. } => {
            "the document is over the parser's limits"
        }
        _ => "the text is not a valid YAML document",
    };
    ConfigError::Syntax { reason, location }
}

/// State of one parse: the pointer being read, where the parser failed, and the
/// first refusal of our own (serde's error type cannot carry it).
#[derive(Default)]
struct Context {
    path: RefCell<Vec<String>>,
    failed_at: RefCell<Option<String>>,
    error: RefCell<Option<ConfigError>>,
}

impl Context {
    fn pointer(&self) -> String {
        let mut pointer = String::new();
        for token in self.path.borrow().iter() {
            pointer = pointer_join(&pointer, token);
        }
        pointer
    }

    /// Remembers the innermost place where an error passed (the first call wins).
    fn note_failure(&self) {
        let mut slot = self.failed_at.borrow_mut();
        if slot.is_none() {
            *slot = Some(self.pointer());
        }
    }

    fn fail<E: de::Error>(&self, error: ConfigError) -> E {
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(error);
        }
        E::custom("refused")
    }

    fn take_error(&self) -> Option<ConfigError> {
        self.error.borrow_mut().take()
    }
}

struct ValueSeed<'c> {
    context: &'c Context,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        match serde_json::Number::from_f64(v) {
            Some(n) => Ok(Value::Number(n)),
            None => {
                let key = dotted(&self.context.pointer());
                Err(self
                    .context
                    .fail(ConfigError::invalid(&key, "a finite number")))
            }
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        if self.context.path.borrow().is_empty() {
            // The empty document: every default.
            return Ok(Value::Null);
        }
        let key = dotted(&self.context.pointer());
        Err(self.context.fail(ConfigError::NullValue { key }))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.context.path.borrow_mut().push(items.len().to_string());
            let next = seq.next_element_seed(ValueSeed {
                context: self.context,
            });
            if next.is_err() {
                self.context.note_failure();
            }
            self.context.path.borrow_mut().pop();
            match next? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        loop {
            // serde-saphyr refuses a duplicate key while reading the key; the
            // pointer noted here is the mapping that holds it.
            let name = match map.next_key::<String>() {
                Ok(Some(name)) => name,
                Ok(None) => return Ok(Value::Object(members)),
                Err(error) => {
                    self.context.note_failure();
                    return Err(error);
                }
            };
            if members.contains_key(&name) {
                // Only reached if the parser ever lets a duplicate through.
                self.context.path.borrow_mut().push(name);
                let key = dotted(&self.context.pointer());
                return Err(self.context.fail(ConfigError::DuplicateKey {
                    key,
                    location: None,
                }));
            }
            self.context.path.borrow_mut().push(name.clone());
            let value = map.next_value_seed(ValueSeed {
                context: self.context,
            });
            if value.is_err() {
                self.context.note_failure();
            }
            self.context.path.borrow_mut().pop();
            members.insert(name, value?);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ConfigError {
        parse_document(text).unwrap_err()
    }

    #[test]
    fn documents() {
        assert_eq!(parse_document("").unwrap(), Value::Null);
        assert_eq!(parse_document("# only a comment\n").unwrap(), Value::Null);
        assert_eq!(parse_document("---\na: 1\n").unwrap()["a"], 1);
        let v = parse_document("a: off\nb: 15m\nc: 262_144\nd: '5'\ne: [1]\n").unwrap();
        assert_eq!(v["a"], "off");
        assert_eq!(v["b"], "15m");
        assert_eq!(v["c"], 262_144);
        assert_eq!(v["d"], "5");
        assert!(v["e"].is_array());
    }

    #[test]
    fn duplicates_name_the_dotted_key() {
        match err("a: 1\nb: 2\na: s3cr3t\n") {
            ConfigError::DuplicateKey { key, location } => {
                assert_eq!(key, "a");
                assert_eq!(location, Some((3, 1)));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(err("t:\n  x:\n    k: 1\n    k: 2\n").key(), Some("t.x.k"));
        assert_eq!(err("t: {x: 1, x: 2}\n").key(), Some("t.x"));
        assert_eq!(err("s:\n  - {a: 1, a: 2}\n").key(), Some("s.0.a"));
    }

    #[test]
    fn refusals() {
        assert!(matches!(
            err("a: 1\n---\nb: 2\n"),
            ConfigError::Syntax {
                reason: "more than one YAML document",
                ..
            }
        ));
        assert!(matches!(
            err("b: &b {x: 1}\nt:\n  <<: *b\n"),
            ConfigError::Syntax { .. }
        ));
        assert!(matches!(err("a: !secret x\n"), ConfigError::Syntax { .. }));
        assert!(matches!(
            err("a: [x\n"),
            ConfigError::Syntax {
                location: Some(_),
                ..
            }
        ));
        assert_eq!(err("t:\n  x: ~\n").key(), Some("t.x"));
        assert!(matches!(err("t:\n"), ConfigError::NullValue { .. }));
        assert_eq!(err("t:\n  x: .inf\n").key(), Some("t.x"));
        assert!(matches!(err("~: 1\n"), ConfigError::Syntax { .. }));
    }

    #[test]
    fn scalars() {
        assert_eq!(parse_scalar("20m"), Ok(Value::from("20m")));
        assert_eq!(parse_scalar("7"), Ok(Value::from(7)));
        assert_eq!(parse_scalar("off"), Ok(Value::from("off")));
        assert_eq!(parse_scalar("'quoted'"), Ok(Value::from("quoted")));
        assert_eq!(
            parse_scalar("postgres://u:p@h/db?x=1"),
            Ok(Value::from("postgres://u:p@h/db?x=1"))
        );
        assert_eq!(parse_scalar(""), Err(ScalarError::Null));
        assert_eq!(parse_scalar("~"), Err(ScalarError::Null));
        assert_eq!(parse_scalar("a: b"), Err(ScalarError::NotAScalar));
        assert_eq!(parse_scalar("- a"), Err(ScalarError::NotAScalar));
        assert_eq!(parse_scalar("[a"), Err(ScalarError::NotAScalar));
        assert_eq!(parse_scalar("a\n---\nb"), Err(ScalarError::NotAScalar));
    }
}
