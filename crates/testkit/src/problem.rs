//! The one check of a problem+json answer (spec 10.1): its status and code,
//! and where a test names it, its reason.

use serde_json::Value;

use crate::identity::Reply;

/// An answer that may be a problem: its HTTP status and its body.
pub trait Problem {
    /// The HTTP status.
    fn status(&self) -> u16;
    /// The problem document.
    fn body(&self) -> &Value;
}

impl Problem for Reply {
    fn status(&self) -> u16 {
        self.status.as_u16()
    }

    fn body(&self) -> &Value {
        &self.body
    }
}

/// A problem document on its own (e.g. an error of the domain mapped by the
/// server): the status is its `status` member.
impl Problem for Value {
    fn status(&self) -> u16 {
        self["status"]
            .as_u64()
            .and_then(|status| u16::try_from(status).ok())
            .unwrap_or_default()
    }

    fn body(&self) -> &Value {
        self
    }
}

/// Asserts the status and the problem code; the body, for further checks.
#[track_caller]
pub fn assert_problem<'a>(reply: &'a impl Problem, status: u16, code: &str) -> &'a Value {
    let body = reply.body();
    assert_eq!(reply.status(), status, "{body:?}");
    assert_eq!(body["code"], code, "{body:?}");
    body
}

/// [`assert_problem`] and the reason: `Some` the reason it must carry, `None`
/// that it carries none.
#[track_caller]
pub fn assert_problem_reason(reply: &impl Problem, status: u16, code: &str, reason: Option<&str>) {
    let body = assert_problem(reply, status, code);
    match reason {
        Some(reason) => assert_eq!(body["reason"], reason, "{body:?}"),
        None => assert!(body.get("reason").is_none(), "{body:?}"),
    }
}
