//! A test peer for TM-T02 (issue 19): the Rust half of the cross test between
//! this crate and the console's TypeScript Noise (`web/console/src/noise`),
//! speaking lines of hex over stdin/stdout. Not shipped; only the tests of
//! `web/console` run it.
//!
//! `noise_peer responder SESSION_ID HOST_ID STATIC_PRIVATE_HEX`:
//! reads message 1, prints `token HEX`, writes message 2 with the payload
//! `{"peer":"rust"}` as `message2 HEX`, then answers every transport message
//! with one carrying `echo:` and its plaintext (`transport HEX`).
//!
//! `noise_peer initiator SESSION_ID HOST_ID HOST_PUBLIC_HEX TOKEN_HEX`:
//! prints `message1 HEX`, reads message 2 and prints `payload HEX`, then sends
//! `ping` (`transport HEX`) and prints the answer's plaintext (`reply HEX`).
//!
//! A refused step prints `error CODE` (the variant of [`NoiseError`]) and ends
//! the peer with exit status 0: the test reads the code.

use std::io::{BufRead, Write};

use bothy_noise::{Initiator, NoiseError, Responder, StaticKeypair};
use uuid::Uuid;

fn code(error: &NoiseError) -> &'static str {
    match error {
        NoiseError::PayloadTooLong { .. } => "payload_too_long",
        NoiseError::MessageTooLong { .. } => "message_too_long",
        NoiseError::MessageTooShort { .. } => "message_too_short",
        NoiseError::SmallOrderPublicKey => "small_order_public_key",
        NoiseError::Decrypt => "decrypt",
        NoiseError::NonceExhausted => "nonce_exhausted",
        NoiseError::Poisoned => "poisoned",
        NoiseError::OutOfOrder => "out_of_order",
        _ => "other",
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim();
    if text.len() % 2 != 0 {
        return Err("odd hex length".to_owned());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

fn key(text: &str) -> Result<[u8; 32], String> {
    unhex(text)?
        .try_into()
        .map_err(|_| "a key is 32 bytes".to_owned())
}

fn uuid(text: &str) -> Result<Uuid, String> {
    Uuid::parse_str(text).map_err(|e| e.to_string())
}

struct Lines {
    input: std::io::StdinLock<'static>,
    output: std::io::Stdout,
}

impl Lines {
    fn read(&mut self) -> Result<Option<Vec<u8>>, String> {
        let mut line = String::new();
        let n = self.input.read_line(&mut line).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(None);
        }
        unhex(&line).map(Some)
    }

    fn write(&mut self, tag: &str, bytes: &[u8]) -> Result<(), String> {
        writeln!(self.output, "{tag} {}", hex(bytes)).map_err(|e| e.to_string())?;
        self.output.flush().map_err(|e| e.to_string())
    }

    fn refuse(&mut self, error: &NoiseError) -> Result<(), String> {
        writeln!(self.output, "error {}", code(error)).map_err(|e| e.to_string())?;
        self.output.flush().map_err(|e| e.to_string())
    }
}

fn responder(args: &[String], io: &mut Lines) -> Result<(), String> {
    let [session, host, private] = args else {
        return Err("responder SESSION_ID HOST_ID STATIC_PRIVATE_HEX".to_owned());
    };
    let keypair = StaticKeypair::from_private_bytes(key(private)?);
    let mut responder =
        Responder::new(uuid(session)?, uuid(host)?, &keypair).map_err(|e| e.to_string())?;
    let Some(message1) = io.read()? else {
        return Ok(());
    };
    let token = match responder.read_message1(&message1) {
        Ok(message1) => message1.payload,
        Err(error) => return io.refuse(&error),
    };
    io.write("token", &token)?;
    let (message2, mut transport) = match responder.write_message2(br#"{"peer":"rust"}"#) {
        Ok(done) => done,
        Err(error) => return io.refuse(&error),
    };
    io.write("message2", &message2)?;
    while let Some(message) = io.read()? {
        let plaintext = match transport.read_message(&message) {
            Ok(plaintext) => plaintext,
            Err(error) => return io.refuse(&error),
        };
        let mut answer = b"echo:".to_vec();
        answer.extend_from_slice(&plaintext);
        match transport.write_message(&answer) {
            Ok(message) => io.write("transport", &message)?,
            Err(error) => return io.refuse(&error),
        }
    }
    Ok(())
}

fn initiator(args: &[String], io: &mut Lines) -> Result<(), String> {
    let [session, host, public, token] = args else {
        return Err("initiator SESSION_ID HOST_ID HOST_PUBLIC_HEX TOKEN_HEX".to_owned());
    };
    let mut initiator =
        Initiator::new(uuid(session)?, uuid(host)?, &key(public)?).map_err(|e| e.to_string())?;
    match initiator.write_message1(&unhex(token)?) {
        Ok(message1) => io.write("message1", &message1)?,
        Err(error) => return io.refuse(&error),
    }
    let Some(message2) = io.read()? else {
        return Ok(());
    };
    let (payload, mut transport) = match initiator.read_message2(&message2) {
        Ok(done) => done,
        Err(error) => return io.refuse(&error),
    };
    io.write("payload", &payload)?;
    match transport.write_message(b"ping") {
        Ok(message) => io.write("transport", &message)?,
        Err(error) => return io.refuse(&error),
    }
    let Some(answer) = io.read()? else {
        return Ok(());
    };
    match transport.read_message(&answer) {
        Ok(plaintext) => io.write("reply", &plaintext),
        Err(error) => io.refuse(&error),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut io = Lines {
        input: std::io::stdin().lock(),
        output: std::io::stdout(),
    };
    let result = match args.split_first() {
        Some((role, rest)) if role == "responder" => responder(rest, &mut io),
        Some((role, rest)) if role == "initiator" => initiator(rest, &mut io),
        _ => Err("usage: noise_peer responder|initiator ...".to_owned()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("noise_peer: {message}");
            std::process::ExitCode::from(2)
        }
    }
}
