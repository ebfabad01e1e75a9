//! Questions on the terminal (`/dev/tty`, like ssh and sudo): a line, a
//! secret without echo, and a confirmation that needs a typed word. Answers
//! never come from a pipe on stdin, so a script cannot confirm a changed host
//! key by accident.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};

use nix::sys::termios::{self, LocalFlags, SetArg};
use zeroize::Zeroizing;

use crate::error::ClientError;

/// The controlling terminal, opened for one question.
pub struct Tty {
    reader: BufReader<File>,
    writer: File,
}

impl std::fmt::Debug for Tty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tty").finish_non_exhaustive()
    }
}

impl Tty {
    /// Opens `/dev/tty`; `what` names the question for the error.
    pub fn open(what: &'static str) -> Result<Tty, ClientError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .map_err(|_| ClientError::NoTerminal(what))?;
        let writer = file
            .try_clone()
            .map_err(|_| ClientError::NoTerminal(what))?;
        Ok(Tty {
            reader: BufReader::new(file),
            writer,
        })
    }

    /// Writes text to the terminal.
    pub fn say(&mut self, text: &str) -> Result<(), ClientError> {
        self.writer
            .write_all(text.as_bytes())
            .and_then(|()| self.writer.flush())
            .map_err(|_| ClientError::NoTerminal("output"))
    }

    fn read_line(&mut self) -> Result<Zeroizing<String>, ClientError> {
        let mut line = Zeroizing::new(String::new());
        let read = self
            .reader
            .read_line(&mut line)
            .map_err(|_| ClientError::NoTerminal("input"))?;
        if read == 0 {
            return Err(ClientError::Cancelled);
        }
        let trimmed = line.trim_end_matches(['\n', '\r']).len();
        line.truncate(trimmed);
        Ok(line)
    }

    /// Asks for a line.
    pub fn ask(&mut self, question: &str) -> Result<Zeroizing<String>, ClientError> {
        self.say(question)?;
        self.read_line()
    }

    /// Asks for a secret with the echo turned off (restored afterwards, also
    /// on an error). The echo goes off before the question shows, as
    /// `readpassphrase(3)` does: the flush drops only what was typed before
    /// the question, never an answer typed as soon as it appeared.
    pub fn ask_secret(&mut self, question: &str) -> Result<Zeroizing<String>, ClientError> {
        let saved =
            termios::tcgetattr(&self.writer).map_err(|_| ClientError::NoTerminal("secret"))?;
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        quiet.local_flags.insert(LocalFlags::ECHONL);
        termios::tcsetattr(&self.writer, SetArg::TCSAFLUSH, &quiet)
            .map_err(|_| ClientError::NoTerminal("secret"))?;
        let answer = self.say(question).and_then(|()| self.read_line());
        let _ = termios::tcsetattr(&self.writer, SetArg::TCSAFLUSH, &saved);
        answer
    }

    /// Asks the person to type `word` to go on; anything else is a no.
    pub fn confirm_word(&mut self, question: &str, word: &str) -> Result<bool, ClientError> {
        let answer = self.ask(&format!("{question} Type \"{word}\" to continue: "))?;
        Ok(answer.trim() == word)
    }
}
