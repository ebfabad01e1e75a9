//! What the commands share: the stored login with its API client, the
//! questions asked again ([`TRIES`]), the TOTP code's form and the step-up,
//! colour, and the JSON output of listings.

use std::io::IsTerminal;

use serde_json::Value;

use bothy_api::auth::{StepUpRequest, StepUpResponse};

use bothy_net::ServerUrl;

use crate::api::Api;
use crate::dirs::Dirs;
use crate::display;
use crate::error::ClientError;
use crate::login::StoredLogin;
use crate::progress::Spinner;
use crate::prompt::Tty;

/// The server's password rule (`bothy-api`: the server checks it too).
pub use bothy_api::auth::PASSWORD_MIN_CHARS;

/// How many times a question whose answer the server refused is asked
/// (like sudo's three password tries).
pub const TRIES: u32 = 3;

/// Whether stderr may carry colour: a terminal, and `NO_COLOR` unset or empty.
pub fn color_enabled() -> bool {
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

/// The stored login and an API client with its token.
pub(crate) fn logged_in(dirs: &Dirs) -> Result<(StoredLogin, Api), ClientError> {
    let stored = StoredLogin::load(dirs)?;
    let server = ServerUrl::parse(&stored.server)?;
    let api = Api::new(server, Some(stored.access_token.clone()))?;
    Ok((stored, api))
}

/// A TOTP code as typed (spaces, as some apps show them, removed) when it
/// has the form of one: six digits. `None` for a typo, which is said at once
/// and never sent (a refused code would take a try of the rate limit).
pub fn totp_form(typed: &str) -> Option<String> {
    let code: String = typed.chars().filter(|c| !c.is_whitespace()).collect();
    (code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit())).then_some(code)
}

/// Asks for a TOTP code until it has the form of one (a typo is said and
/// asked again, without a try of the server).
pub(crate) fn ask_totp(tty: &mut Tty, question: &str) -> Result<String, ClientError> {
    loop {
        let typed = tty.ask(question)?;
        match totp_form(&typed) {
            Some(code) => return Ok(code),
            None => tty.say("That is not a 6-digit code; type the code your app shows.\n")?,
        }
    }
}

/// Prints `value` as the JSON of a listing (times in RFC 3339).
pub(crate) fn print_json(mut value: Value) {
    display::json_times(&mut value);
    println!("{value}");
}

/// A TOTP step-up (up to [`TRIES`] codes; a typo is said at once and not
/// counted); its `step_up_id`.
pub(crate) async fn step_up(api: &Api) -> Result<String, ClientError> {
    let mut tty = Tty::open("the step-up")?;
    let mut tries = 0;
    loop {
        tries += 1;
        let code = ask_totp(&mut tty, "TOTP code for the step-up: ")?;
        let spinner = Spinner::start("checking the code");
        let answer = totp_step_up(api, code).await;
        drop(spinner);
        match answer {
            Ok(step_up_id) => return Ok(step_up_id),
            Err(ClientError::Problem(problem))
                if tries < TRIES && problem.is("step_up_required", Some("totp_invalid")) =>
            {
                tty.say("That code was wrong or used already; wait for the next one.\n")?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Sends one TOTP step-up with `code`; its `step_up_id`.
pub(crate) async fn totp_step_up(api: &Api, code: String) -> Result<String, ClientError> {
    let answer: StepUpResponse = api
        .post_as("/api/v1/auth/step-up", &StepUpRequest::totp(code))
        .await?;
    Ok(answer.step_up_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totp_codes_have_six_digits() {
        assert_eq!(totp_form("123456").as_deref(), Some("123456"));
        assert_eq!(totp_form(" 123 456 ").as_deref(), Some("123456"));
        for typo in ["12345", "1234567", "12a456", "", "one"] {
            assert_eq!(totp_form(typo), None, "{typo}");
        }
    }
}
