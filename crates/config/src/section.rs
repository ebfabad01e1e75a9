//! [`Section`]: one mapping of a configuration document read with
//! [`bothy_proto::json::Object`]: an exact member list (an unknown key is
//! refused before any value is read), every member optional, typed getters that
//! name the dotted key in every refusal and never the value.

use std::path::PathBuf;
use std::time::Duration;

use bothy_proto::json::{JsonError, JsonType, Member, Object};
use serde_json::Value;

use crate::ConfigError;
use crate::duration::{DURATION_TYPE, DurationRule};
use crate::error::dotted;

/// One mapping of the file, or an absent one (every member takes its default).
#[derive(Debug)]
pub struct Section<'a> {
    object: Option<Object<'a>>,
}

impl<'a> Section<'a> {
    /// The top level of `document`, with exactly the members `names`.
    pub fn root(document: &'a Value, names: &[&str]) -> Result<Section<'a>, ConfigError> {
        Ok(Section {
            object: Some(Object::root(document, names).map_err(from_json)?),
        })
    }

    /// The mapping held by `member`, with exactly the members `names`.
    pub fn of_member(member: Member<'a>, names: &[&str]) -> Result<Section<'a>, ConfigError> {
        Ok(Section {
            object: Some(member.into_object(names).map_err(from_json)?),
        })
    }

    /// The nested mapping `name`, with exactly the members `names` (absent: an
    /// empty section).
    pub fn section(&self, name: &str, names: &[&str]) -> Result<Section<'a>, ConfigError> {
        let object = match self.member(name) {
            None => None,
            Some(member) => Some(member.into_object(names).map_err(from_json)?),
        };
        Ok(Section { object })
    }

    /// The member `name`, if present.
    pub fn member(&self, name: &str) -> Option<Member<'a>> {
        self.object.as_ref()?.opt_member(name)
    }

    /// A string member with its dotted key.
    pub fn string(&self, name: &str) -> Result<Option<(&'a str, String)>, ConfigError> {
        match self.member(name) {
            None => Ok(None),
            Some(member) => {
                let text = member.as_str().map_err(from_json)?;
                Ok(Some((text, dotted(member.pointer()))))
            }
        }
    }

    /// A boolean member.
    pub fn boolean(&self, name: &str) -> Result<Option<bool>, ConfigError> {
        match self.member(name) {
            None => Ok(None),
            Some(member) => member.as_bool().map(Some).map_err(from_json),
        }
    }

    /// A path: a non-empty string without NUL.
    pub fn path(&self, name: &str) -> Result<Option<PathBuf>, ConfigError> {
        match self.string(name)? {
            None => Ok(None),
            Some((text, key)) => {
                if text.is_empty() || text.contains('\0') {
                    return Err(ConfigError::invalid(&key, "a non-empty path"));
                }
                Ok(Some(PathBuf::from(text)))
            }
        }
    }

    /// A duration string checked against `rule`.
    pub fn duration(
        &self,
        name: &str,
        default: Duration,
        rule: DurationRule,
    ) -> Result<Duration, ConfigError> {
        let Some(member) = self.member(name) else {
            return Ok(default);
        };
        let key = dotted(member.pointer());
        let Value::String(text) = member.value() else {
            return Err(ConfigError::wrong_type(&key, DURATION_TYPE));
        };
        rule.parse(text)
            .ok_or_else(|| ConfigError::invalid(&key, rule.expected(default)))
    }

    /// An integer from `min` to `max`.
    pub fn count<T: TryFrom<u64>>(
        &self,
        name: &str,
        default: T,
        min: u64,
        max: u64,
    ) -> Result<T, ConfigError> {
        let Some(member) = self.member(name) else {
            return Ok(default);
        };
        let key = dotted(member.pointer());
        let out_of_range = || ConfigError::invalid(&key, format!("an integer from {min} to {max}"));
        let n = match member.as_uint::<u64>() {
            Ok(n) => n,
            Err(JsonError::InvalidValue { .. }) => return Err(out_of_range()),
            Err(e) => return Err(from_json(e)),
        };
        if n < min || n > max {
            return Err(out_of_range());
        }
        T::try_from(n).map_err(|_| out_of_range())
    }
}

/// A refusal of `bothy_proto::json`, with the pointer as a dotted key and the
/// JSON type in YAML words.
pub fn from_json(error: JsonError) -> ConfigError {
    match error {
        JsonError::UnknownMember { pointer } => ConfigError::UnknownKey {
            key: dotted(&pointer),
        },
        JsonError::MissingMember { pointer } => ConfigError::MissingKey {
            key: dotted(&pointer),
        },
        JsonError::WrongType { pointer, expected } => {
            ConfigError::wrong_type(&dotted(&pointer), yaml_type(expected))
        }
        JsonError::DuplicateMember { pointer } => ConfigError::DuplicateKey {
            key: dotted(&pointer),
            location: None,
        },
        JsonError::NullMember { pointer } => ConfigError::NullValue {
            key: dotted(&pointer),
        },
        JsonError::InvalidValue { pointer } => ConfigError::invalid(&dotted(&pointer), "valid"),
        JsonError::TooLarge { .. } | JsonError::InvalidUtf8 | JsonError::Syntax => {
            ConfigError::Syntax {
                reason: "the text is not a valid YAML document",
                location: None,
            }
        }
    }
}

/// The YAML word for a JSON type, for a wrong-type refusal.
pub fn yaml_type(t: JsonType) -> &'static str {
    match t {
        JsonType::Object => "a mapping",
        JsonType::Array => "a sequence",
        JsonType::String => "a string",
        JsonType::Integer => "an integer",
        JsonType::Boolean => "a boolean",
    }
}
