//! The envelope `{"op": string, "d": object}` of every JSON message of the
//! control connection, the data connection and the device stream (3.5, 6.1,
//! 6.2), and the member helpers their messages share. The refusals are
//! [`JsonError`]s; each connection's decoder turns them into its own error.

use serde_json::Value;
use uuid::Uuid;

use crate::json::{self, JsonError, Member};

/// Opens the envelope `{"op": string, "d": object}` of a decoded frame.
pub(crate) fn envelope(value: &Value) -> Result<(&str, Member<'_>), JsonError> {
    let root = json::Object::root(value, &["op", "d"])?;
    let op = root.str("op")?;
    let d = root.member("d")?;
    Ok((op, d))
}

/// The JSON text `{"op": op, "d": d}` (written by hand so `op` comes first; the
/// members of `d` are in name order).
pub(crate) fn envelope_json(op: &str, d: Value) -> String {
    format!("{{\"op\":{},\"d\":{d}}}", Value::from(op))
}

/// A string member whose value must be one of a closed list.
pub(crate) fn closed<T>(
    member: Member<'_>,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, JsonError> {
    parse(member.as_str()?).ok_or_else(|| member.invalid())
}

pub(crate) fn uuid_value(id: &Uuid) -> Value {
    id.hyphenated().to_string().into()
}
