//! Strict JSON decoding for everything that arrives from the network or a file:
//! the `{op, d}` messages of the control and data connections (3.5), the claims
//! and headers of a JWS (5.3 step 1) and the JWKs of host.pair (3.2).
//!
//! Strict means, in this order:
//! 1. at most the given number of bytes ([`JsonError::TooLarge`]);
//! 2. valid UTF-8 ([`JsonError::InvalidUtf8`]);
//! 3. one JSON value and nothing after it ([`JsonError::Syntax`]); nesting is
//!    bounded by serde_json's recursion limit, so no input overflows the stack;
//! 4. no member twice in one object ([`JsonError::DuplicateMember`]) and no `null`
//!    anywhere ([`JsonError::NullMember`]): an optional member is absent, never null;
//! 5. then, per message, through [`Object`] and [`Member`]: no unknown member, no
//!    missing member, every member of its JSON type, every value of its form.
//!
//! Every error names the place as a JSON pointer (RFC 6901), never the value, so
//! an error can be logged and answered without carrying what a peer sent.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::{b64, ids};

/// Longest member name a pointer repeats; longer names are cut (and marked),
/// so an error about an unknown member stays small.
const POINTER_NAME_MAX_CHARS: usize = 64;

/// The JSON type a member must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    /// `{...}`
    Object,
    /// `[...]`
    Array,
    /// `"..."`
    String,
    /// A number without fraction or exponent.
    Integer,
    /// `true` or `false`.
    Boolean,
}

impl fmt::Display for JsonType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JsonType::Object => "an object",
            JsonType::Array => "an array",
            JsonType::String => "a string",
            JsonType::Integer => "an integer",
            JsonType::Boolean => "a boolean",
        })
    }
}

/// Why a JSON document was refused. Pointers are RFC 6901 pointers into the
/// document; the root is the empty pointer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The document is longer than the limit (e.g. `sync.ws_max_frame_bytes`).
    #[error("document of {len} bytes is over the limit of {max} bytes")]
    TooLarge {
        /// Length of the document.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The bytes are not valid UTF-8.
    #[error("document is not valid UTF-8")]
    InvalidUtf8,
    /// Not one JSON value: a syntax error, trailing data or nesting too deep.
    #[error("document is not one valid JSON value")]
    Syntax,
    /// An object holds the same member twice.
    #[error("duplicate member at {pointer:?}")]
    DuplicateMember {
        /// Where.
        pointer: String,
    },
    /// A `null` value (absent members are the only way to leave something out).
    #[error("null value at {pointer:?}")]
    NullMember {
        /// Where.
        pointer: String,
    },
    /// A member the schema does not name.
    #[error("unknown member at {pointer:?}")]
    UnknownMember {
        /// Where (its last token is the member's name).
        pointer: String,
    },
    /// A member the schema requires is absent.
    #[error("missing member at {pointer:?}")]
    MissingMember {
        /// Where.
        pointer: String,
    },
    /// A value of the wrong JSON type.
    #[error("value at {pointer:?} must be {expected}")]
    WrongType {
        /// Where.
        pointer: String,
        /// The type the schema requires.
        expected: JsonType,
    },
    /// A value of the right type but the wrong form (a UUID, base64url, a range).
    #[error("invalid value at {pointer:?}")]
    InvalidValue {
        /// Where.
        pointer: String,
    },
}

impl JsonError {
    /// The pointer of the error, if it has one.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            JsonError::TooLarge { .. } | JsonError::InvalidUtf8 | JsonError::Syntax => None,
            JsonError::DuplicateMember { pointer }
            | JsonError::NullMember { pointer }
            | JsonError::UnknownMember { pointer }
            | JsonError::MissingMember { pointer }
            | JsonError::WrongType { pointer, .. }
            | JsonError::InvalidValue { pointer } => Some(pointer),
        }
    }
}

/// Parses `bytes` as one strict JSON value of at most `max_len` bytes
/// (rules 1 to 4 of the module docs).
pub fn parse(bytes: &[u8], max_len: usize) -> Result<Value, JsonError> {
    if bytes.len() > max_len {
        return Err(JsonError::TooLarge {
            len: bytes.len(),
            max: max_len,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| JsonError::InvalidUtf8)?;
    let context = Context::default();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = StrictSeed { context: &context }.deserialize(&mut deserializer);
    let value = match parsed {
        Ok(value) => value,
        Err(_) => return Err(context.error.into_inner().unwrap_or(JsonError::Syntax)),
    };
    deserializer.end().map_err(|_| JsonError::Syntax)?;
    Ok(value)
}

/// Joins a pointer and one more token, escaped as RFC 6901 says (`~0`, `~1`).
/// Control characters become `?` and long names are cut, because pointers end
/// up in logs and in problem responses.
pub fn pointer_join(base: &str, token: &str) -> String {
    let mut out = String::with_capacity(base.len() + token.len().min(POINTER_NAME_MAX_CHARS) + 4);
    out.push_str(base);
    out.push('/');
    for (i, c) in token.chars().enumerate() {
        if i == POINTER_NAME_MAX_CHARS {
            out.push_str("...");
            break;
        }
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c if c.is_control() => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// State shared by the nested seeds of one parse: the current path and the
/// first strictness error (serde's own error type cannot carry ours).
#[derive(Default)]
struct Context {
    path: RefCell<Vec<String>>,
    error: RefCell<Option<JsonError>>,
}

impl Context {
    fn pointer(&self, last: Option<&str>) -> String {
        let path = self.path.borrow();
        let mut pointer = String::new();
        for token in path.iter().map(String::as_str).chain(last) {
            pointer = pointer_join(&pointer, token);
        }
        pointer
    }

    fn fail<E: de::Error>(&self, error: JsonError) -> E {
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(error);
        }
        E::custom("strict JSON")
    }
}

struct StrictSeed<'c> {
    context: &'c Context,
}

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value without null")
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
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        let pointer = self.context.pointer(None);
        Err(self.context.fail(JsonError::NullMember { pointer }))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.context.path.borrow_mut().push(items.len().to_string());
            let next = seq.next_element_seed(StrictSeed {
                context: self.context,
            });
            self.context.path.borrow_mut().pop();
            match next? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if members.contains_key(&name) {
                let pointer = self.context.pointer(Some(&name));
                return Err(self.context.fail(JsonError::DuplicateMember { pointer }));
            }
            self.context.path.borrow_mut().push(name.clone());
            let value = map.next_value_seed(StrictSeed {
                context: self.context,
            });
            self.context.path.borrow_mut().pop();
            members.insert(name, value?);
        }
        Ok(Value::Object(members))
    }
}

/// An object whose members were checked against the schema's list of names.
#[derive(Debug, Clone)]
pub struct Object<'a> {
    members: &'a Map<String, Value>,
    pointer: String,
}

impl<'a> Object<'a> {
    /// Takes `value` as the root object, allowing exactly the members `names`.
    pub fn root(value: &'a Value, names: &[&str]) -> Result<Self, JsonError> {
        Member::new(value, String::new()).into_object(names)
    }

    /// The pointer of this object.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The pointer of one member of this object.
    pub fn member_pointer(&self, name: &str) -> String {
        pointer_join(&self.pointer, name)
    }

    /// Whether the member is present.
    pub fn has(&self, name: &str) -> bool {
        self.members.contains_key(name)
    }

    /// A required member.
    pub fn member(&self, name: &str) -> Result<Member<'a>, JsonError> {
        self.opt_member(name)
            .ok_or_else(|| JsonError::MissingMember {
                pointer: self.member_pointer(name),
            })
    }

    /// An optional member.
    pub fn opt_member(&self, name: &str) -> Option<Member<'a>> {
        self.members
            .get(name)
            .map(|value| Member::new(value, self.member_pointer(name)))
    }

    /// A required string member.
    pub fn str(&self, name: &str) -> Result<&'a str, JsonError> {
        self.member(name)?.as_str()
    }

    /// An optional string member.
    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>, JsonError> {
        self.opt_member(name).map(|m| m.as_str()).transpose()
    }

    /// A required boolean member.
    pub fn bool(&self, name: &str) -> Result<bool, JsonError> {
        self.member(name)?.as_bool()
    }

    /// A required non-negative integer member that fits `T`.
    pub fn uint<T: TryFrom<u64>>(&self, name: &str) -> Result<T, JsonError> {
        self.member(name)?.as_uint()
    }

    /// A required signed integer member.
    pub fn i64(&self, name: &str) -> Result<i64, JsonError> {
        self.member(name)?.as_i64()
    }

    /// A required UUID member (hyphenated text).
    pub fn uuid(&self, name: &str) -> Result<Uuid, JsonError> {
        self.member(name)?.as_uuid()
    }

    /// A required nested object with exactly the members `names` allowed.
    pub fn object(&self, name: &str, names: &[&str]) -> Result<Object<'a>, JsonError> {
        self.member(name)?.into_object(names)
    }

    /// A required array member.
    pub fn array(&self, name: &str) -> Result<Array<'a>, JsonError> {
        self.member(name)?.into_array()
    }
}

/// An array, with pointers for its elements.
#[derive(Debug, Clone)]
pub struct Array<'a> {
    items: &'a [Value],
    pointer: String,
}

impl<'a> Array<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The pointer of this array.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The elements with their pointers.
    pub fn iter(&self) -> impl Iterator<Item = Member<'a>> + '_ {
        self.items
            .iter()
            .enumerate()
            .map(|(i, value)| Member::new(value, pointer_join(&self.pointer, &i.to_string())))
    }
}

/// One value at a known place, read with the type the schema requires.
#[derive(Debug, Clone)]
pub struct Member<'a> {
    value: &'a Value,
    pointer: String,
}

impl<'a> Member<'a> {
    /// Wraps a value found at `pointer`.
    pub fn new(value: &'a Value, pointer: String) -> Self {
        Member { value, pointer }
    }

    /// The pointer of this value.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The raw value (for a schema that keeps it as it came, e.g. a stored list).
    pub fn value(&self) -> &'a Value {
        self.value
    }

    fn wrong_type(&self, expected: JsonType) -> JsonError {
        JsonError::WrongType {
            pointer: self.pointer.clone(),
            expected,
        }
    }

    /// The error for a value of the right type but the wrong form.
    pub fn invalid(&self) -> JsonError {
        JsonError::InvalidValue {
            pointer: self.pointer.clone(),
        }
    }

    /// A string.
    pub fn as_str(&self) -> Result<&'a str, JsonError> {
        self.value
            .as_str()
            .ok_or_else(|| self.wrong_type(JsonType::String))
    }

    /// A boolean.
    pub fn as_bool(&self) -> Result<bool, JsonError> {
        self.value
            .as_bool()
            .ok_or_else(|| self.wrong_type(JsonType::Boolean))
    }

    /// A signed integer (no fraction, no exponent).
    pub fn as_i64(&self) -> Result<i64, JsonError> {
        match self.value {
            Value::Number(n) if n.is_i64() || n.is_u64() => {
                n.as_i64().ok_or_else(|| self.invalid())
            }
            _ => Err(self.wrong_type(JsonType::Integer)),
        }
    }

    /// A non-negative integer that fits `T` (out of range: [`JsonError::InvalidValue`]).
    pub fn as_uint<T: TryFrom<u64>>(&self) -> Result<T, JsonError> {
        match self.value {
            Value::Number(n) if n.is_u64() => n
                .as_u64()
                .and_then(|v| T::try_from(v).ok())
                .ok_or_else(|| self.invalid()),
            Value::Number(n) if n.is_i64() => Err(self.invalid()),
            _ => Err(self.wrong_type(JsonType::Integer)),
        }
    }

    /// A UUID in hyphenated form.
    pub fn as_uuid(&self) -> Result<Uuid, JsonError> {
        ids::parse_uuid(self.as_str()?).map_err(|_| self.invalid())
    }

    /// Strict base64url of exactly `N` bytes.
    pub fn as_b64_array<const N: usize>(&self) -> Result<[u8; N], JsonError> {
        b64::decode_array(self.as_str()?).map_err(|_| self.invalid())
    }

    /// An object with exactly the members `names` allowed; the first other
    /// member (in name order) is [`JsonError::UnknownMember`].
    pub fn into_object(self, names: &[&str]) -> Result<Object<'a>, JsonError> {
        let members = self
            .value
            .as_object()
            .ok_or_else(|| self.wrong_type(JsonType::Object))?;
        if let Some(unknown) = members.keys().find(|k| !names.contains(&k.as_str())) {
            return Err(JsonError::UnknownMember {
                pointer: pointer_join(&self.pointer, unknown),
            });
        }
        Ok(Object {
            members,
            pointer: self.pointer,
        })
    }

    /// An array.
    pub fn into_array(self) -> Result<Array<'a>, JsonError> {
        let items = self
            .value
            .as_array()
            .ok_or_else(|| self.wrong_type(JsonType::Array))?;
        Ok(Array {
            items,
            pointer: self.pointer,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> JsonError {
        parse(text.as_bytes(), 1 << 16).unwrap_err()
    }

    #[test]
    fn accepts_plain_documents() {
        let v = parse(br#"{"op":"x","d":{"a":[1,true,"s",{"b":-2}]}}"#, 100).unwrap();
        assert_eq!(v["d"]["a"][3]["b"], -2);
    }

    #[test]
    fn document_level_refusals() {
        assert_eq!(parse(b"{}", 1), Err(JsonError::TooLarge { len: 2, max: 1 }));
        assert_eq!(parse(b"{\"a\":\"\xff\"}", 100), Err(JsonError::InvalidUtf8));
        assert_eq!(err(""), JsonError::Syntax);
        assert_eq!(err("{"), JsonError::Syntax);
        assert_eq!(err("{} {}"), JsonError::Syntax);
        assert_eq!(err("{}x"), JsonError::Syntax);
        assert_eq!(err("{'a':1}"), JsonError::Syntax);
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert_eq!(err(&deep), JsonError::Syntax);
        // Whitespace around one value is JSON.
        assert!(parse(b" {} \n", 10).is_ok());
    }

    #[test]
    fn duplicates_and_nulls_with_pointers() {
        assert_eq!(
            err(r#"{"a":1,"a":2}"#),
            JsonError::DuplicateMember {
                pointer: "/a".into()
            }
        );
        assert_eq!(
            err(r#"{"d":{"x":[{"k":1,"k":1}]}}"#),
            JsonError::DuplicateMember {
                pointer: "/d/x/0/k".into()
            }
        );
        assert_eq!(
            err(r#"{"d":{"a/b~":null}}"#),
            JsonError::NullMember {
                pointer: "/d/a~1b~0".into()
            }
        );
        assert_eq!(
            err("[1,null]"),
            JsonError::NullMember {
                pointer: "/1".into()
            }
        );
        assert_eq!(err("null"), JsonError::NullMember { pointer: "".into() });
    }

    #[test]
    fn object_schema() {
        let v = parse(
            br#"{"s":"t","b":true,"n":7,"neg":-1,"f":1.5,"big":70000,"u":"0192f5c4-7d3a-7b2e-9f00-1234567890ab","k":"AAEC","o":{"x":1},"a":[1,2]}"#,
            1000,
        )
        .unwrap();
        let all = ["s", "b", "n", "neg", "f", "big", "u", "k", "o", "a"];
        let o = Object::root(&v, &all).unwrap();
        assert_eq!(o.str("s").unwrap(), "t");
        assert!(o.bool("b").unwrap());
        assert_eq!(o.uint::<u16>("n").unwrap(), 7);
        assert_eq!(o.i64("neg").unwrap(), -1);
        assert_eq!(o.opt_str("zz").unwrap(), None);
        assert_eq!(
            o.member("k").unwrap().as_b64_array::<3>().unwrap(),
            [0, 1, 2]
        );
        assert_eq!(o.array("a").unwrap().len(), 2);
        assert!(o.uuid("u").is_ok());

        assert_eq!(
            o.uint::<u16>("big"),
            Err(JsonError::InvalidValue {
                pointer: "/big".into()
            })
        );
        assert_eq!(
            o.uint::<u64>("neg"),
            Err(JsonError::InvalidValue {
                pointer: "/neg".into()
            })
        );
        assert_eq!(
            o.i64("f"),
            Err(JsonError::WrongType {
                pointer: "/f".into(),
                expected: JsonType::Integer
            })
        );
        assert_eq!(
            o.str("n"),
            Err(JsonError::WrongType {
                pointer: "/n".into(),
                expected: JsonType::String
            })
        );
        assert_eq!(
            o.bool("s"),
            Err(JsonError::WrongType {
                pointer: "/s".into(),
                expected: JsonType::Boolean
            })
        );
        assert_eq!(
            o.uuid("s"),
            Err(JsonError::InvalidValue {
                pointer: "/s".into()
            })
        );
        assert_eq!(
            o.member("k").unwrap().as_b64_array::<4>(),
            Err(JsonError::InvalidValue {
                pointer: "/k".into()
            })
        );
        assert_eq!(
            o.str("missing"),
            Err(JsonError::MissingMember {
                pointer: "/missing".into()
            })
        );
        assert_eq!(
            o.object("o", &["y"]).unwrap_err(),
            JsonError::UnknownMember {
                pointer: "/o/x".into()
            }
        );
        assert_eq!(
            o.object("a", &[]).unwrap_err(),
            JsonError::WrongType {
                pointer: "/a".into(),
                expected: JsonType::Object
            }
        );
        assert_eq!(
            Object::root(&v, &["s"]).unwrap_err(),
            JsonError::UnknownMember {
                pointer: "/a".into()
            }
        );
        let pointers: Vec<String> = o
            .array("a")
            .unwrap()
            .iter()
            .map(|m| m.pointer().to_owned())
            .collect();
        assert_eq!(pointers, ["/a/0", "/a/1"]);
    }

    #[test]
    fn pointers_stay_small_and_printable() {
        let long = "x".repeat(500);
        let p = pointer_join("", &long);
        assert!(p.len() < 80, "{p}");
        assert_eq!(pointer_join("/a", "b\nc"), "/a/b?c");
    }
}
