//! The account commands: `enroll`, `login`, `logout`, `whoami`.

use serde_json::json;

use bothy_api::auth::{
    CheckEnrollmentCodeRequest, CheckEnrollmentCodeResponse, ConfirmEnrollmentRequest,
    ConfirmEnrollmentResponse, EnrollRequest, EnrollResponse, LoginRequest, LoginResponse,
    SessionResponse,
};
use bothy_net::ServerUrl;

use super::common::{PASSWORD_MIN_CHARS, TRIES, ask_totp, logged_in, print_json};
use crate::api::Api;
use crate::dirs::Dirs;
use crate::error::{ClientError, EXIT_OK};
use crate::login::{self, StoredLogin};
use crate::progress::Spinner;
use crate::prompt::Tty;

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "this computer".into())
}

/// `bothy login`: password and TOTP code, asked again (up to [`TRIES`]
/// times) when the server refuses them — its answer never says which part
/// was wrong, so both are asked again (D-374).
pub(super) async fn login(
    dirs: &Dirs,
    server: &str,
    username: Option<String>,
    device_name: Option<String>,
) -> Result<i32, ClientError> {
    let server = ServerUrl::parse(server)?;
    let api = Api::new(server.clone(), None)?;
    let key = login::device_key(dirs)?;
    let mut tty = Tty::open("the login")?;
    let username = match username {
        Some(name) => name,
        None => tty.ask("Username: ")?.trim().to_owned(),
    };
    let device_name = device_name.unwrap_or_else(|| format!("bothy on {}", hostname()));
    let mut tries = 0;
    let answer = loop {
        tries += 1;
        let password = tty.ask_secret("Password: ")?;
        let totp = ask_totp(&mut tty, "TOTP code: ")?;
        let body = LoginRequest {
            username: username.clone(),
            password: password.as_str().to_owned(),
            totp,
            device_public_key: login::device_public_key(&key),
            device_name: device_name.clone(),
        };
        drop(password);
        let spinner = Spinner::start("logging in");
        let answer = api
            .post_as::<LoginResponse>("/api/v1/auth/login", &body)
            .await;
        drop(spinner);
        drop(body);
        match answer {
            Ok(answer) => break answer,
            Err(ClientError::Problem(problem))
                if tries < TRIES && problem.is("unauthenticated", None) =>
            {
                tty.say(
                    "Not accepted: the username, password or TOTP code is wrong, or the code was \
                     used already (each code works once: wait for the next one). Try again.\n",
                )?;
            }
            Err(e) => return Err(e),
        }
    };
    let stored = StoredLogin {
        server: server.https_base(),
        username: username.clone(),
        access_token: answer.access_token.clone(),
        login_session_id: answer.login_session_id.clone(),
        device_id: answer.device_id.clone(),
        expires_at: answer.expires_at,
    };
    drop(answer);
    stored.store(dirs)?;
    println!(
        "Logged in as {username} on {server} (device {}).",
        stored.device_id
    );
    Ok(EXIT_OK)
}

/// The TOTP secret of an `otpauth://` URI (its `secret` parameter).
fn otpauth_secret(uri: &str) -> Option<&str> {
    let query = uri.split_once('?')?.1;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("secret="))
}

/// The URI as a QR code of Unicode half blocks, light modules drawn (like
/// `qrencode -t UTF8`: right on a dark terminal; scanners read both).
fn qr_code(uri: &str) -> Option<String> {
    use qrcode::render::unicode::Dense1x2;
    let code = qrcode::QrCode::new(uri.as_bytes()).ok()?;
    Some(
        code.render::<Dense1x2>()
            .dark_color(Dense1x2::Light)
            .light_color(Dense1x2::Dark)
            .quiet_zone(true)
            .build(),
    )
}

/// `bothy enroll`: the code is checked first (a mistyped one is said before
/// any password is asked), then the password rule is stated and checked
/// here before the server does, then the TOTP secret as a QR code, its
/// base32 text and the URI, and the first code of the app (D-372, D-378).
pub(super) async fn enroll(server: &str) -> Result<i32, ClientError> {
    let server = ServerUrl::parse(server)?;
    let api = Api::new(server.clone(), None)?;
    let mut tty = Tty::open("the enrollment")?;
    let mut tries = 0;
    let (code, username) = loop {
        tries += 1;
        let code = tty.ask_secret("Enrollment code: ")?;
        let code = code.trim().to_owned();
        let request = CheckEnrollmentCodeRequest { code };
        match api
            .post_as::<CheckEnrollmentCodeResponse>("/api/v1/auth/enroll/check", &request)
            .await
        {
            Ok(checked) => {
                break (zeroize::Zeroizing::new(request.code), checked.username);
            }
            Err(ClientError::Problem(problem))
                if tries < TRIES && problem.is("unauthenticated", None) =>
            {
                tty.say(
                    "That code is wrong, used or expired: check it, or ask an owner for a new one.\n",
                )?;
            }
            Err(e) => return Err(e),
        }
    };
    tty.say(&format!(
        "Enrolling {username}. Choose a password of at least {PASSWORD_MIN_CHARS} characters \
         (any characters; several words are easy to remember).\n"
    ))?;
    let password = loop {
        let first = tty.ask_secret("New password: ")?;
        let length = first.chars().count();
        if length < PASSWORD_MIN_CHARS {
            tty.say(&format!(
                "Too short: {length} characters, at least {PASSWORD_MIN_CHARS}; once more.\n"
            ))?;
            continue;
        }
        let again = tty.ask_secret("The password again: ")?;
        if *first == *again {
            break first;
        }
        tty.say("The two passwords differ; once more.\n")?;
    };
    let request = EnrollRequest {
        code: code.to_string(),
        password: password.to_string(),
    };
    drop(password);
    let started: EnrollResponse = api.post_as("/api/v1/auth/enroll", &request).await?;
    drop(request);
    let uri = started.otpauth_uri.as_str();
    tty.say(
        "Add your TOTP secret to your authenticator app: scan this code, or type the secret \
         below. It is a secret: show it to no one.\n",
    )?;
    if let Some(qr) = qr_code(uri) {
        tty.say(&format!("{qr}\n"))?;
    }
    if let Some(secret) = otpauth_secret(uri) {
        tty.say(&format!("Secret (base32):\n  {secret}\n"))?;
    }
    tty.say(&format!("As a URI:\n  {uri}\n"))?;
    let mut tries = 0;
    loop {
        tries += 1;
        let totp = ask_totp(&mut tty, "The code your app shows now: ")?;
        let request = ConfirmEnrollmentRequest {
            code: code.to_string(),
            totp,
        };
        match api
            .post_as::<ConfirmEnrollmentResponse>("/api/v1/auth/enroll/confirm", &request)
            .await
        {
            Ok(_) => break,
            Err(ClientError::Problem(problem))
                if tries < TRIES && problem.is("unauthenticated", None) =>
            {
                tty.say(
                    "That code was not accepted: check the app's entry for this server and \
                     type the code it shows now.\n",
                )?;
            }
            Err(e) => return Err(e),
        }
    }
    println!("Enrolled as {username}. Now: bothy login --server {server} --username {username}");
    Ok(EXIT_OK)
}

pub(super) async fn logout(dirs: &Dirs) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    match api.post_empty("/api/v1/auth/logout").await {
        Ok(_) => {}
        // Ended on the server already: forget it here as well.
        Err(ClientError::Problem(problem)) if problem.code == "unauthenticated" => {}
        Err(e) => return Err(e),
    }
    StoredLogin::remove(dirs)?;
    println!("Logged out of {}.", stored.server);
    Ok(EXIT_OK)
}

pub(super) async fn whoami(dirs: &Dirs, as_json: bool) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    let me: SessionResponse = api.get_as("/api/v1/auth/session").await?;
    if as_json {
        let mut value = serde_json::to_value(&me)
            .map_err(|_| ClientError::Protocol("an answer that does not encode".into()))?;
        if let Some(object) = value.as_object_mut() {
            object.insert("server".into(), json!(stored.server));
        }
        print_json(value);
        return Ok(EXIT_OK);
    }
    // A stored login is a person's; an agent's or app's token has none of
    // these.
    let (username, role, device) = match &me {
        SessionResponse::Person(person) => (
            person.username.as_str(),
            person.role.as_str(),
            person.device_id.as_deref().unwrap_or("-"),
        ),
        SessionResponse::Service(_) => ("-", "-", "-"),
    };
    println!("{username} ({role}) on {}", stored.server);
    println!("device {device}");
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_of_an_otpauth_uri() {
        let uri = "otpauth://totp/bothy:alice?secret=ABCDEFGH234567&issuer=bothy&period=30";
        assert_eq!(otpauth_secret(uri), Some("ABCDEFGH234567"));
        let qr = qr_code(uri).expect("a QR code");
        assert!(qr.contains('█') || qr.contains('▀') || qr.contains('▄'));
        assert!(qr.lines().count() > 10);
    }
}
