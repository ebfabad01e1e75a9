//! The value types of the configuration that are more than a number or a path:
//! the public URL, the database URL (whose password never leaves through `Debug`
//! or the redacted output), the TLS mode, the cluster mode and a rate limit.
//! Durations are `bothy_config::duration`'s.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::path::PathBuf;

use super::ConfigError;

/// `server.public_url`: the https (or http) URL under which hosts and clients
/// reach the server, without user, path, query or fragment. Kept normalized:
/// scheme and host in lower case, no trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    url: String,
    https: bool,
    host_end: usize,
    port: u16,
}

const PUBLIC_URL_EXPECTED: &str = "an http or https URL with a host and an optional port, \
     without user, path, query or fragment (such as https://bothy.example.org)";

impl PublicUrl {
    /// Parses and normalizes a public URL; the error names `server.public_url`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Self::parse_inner(text)
            .ok_or_else(|| ConfigError::invalid("server.public_url", PUBLIC_URL_EXPECTED))
    }

    fn parse_inner(text: &str) -> Option<Self> {
        let (scheme, rest) = text.split_once("://")?;
        let https = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else {
            return None;
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty()
            || authority.chars().any(|c| {
                matches!(c, '/' | '?' | '#' | '@' | '\\') || c.is_whitespace() || c.is_control()
            })
        {
            return None;
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (inside, after) = bracketed.split_once(']')?;
            let ip: Ipv6Addr = inside.parse().ok()?;
            (format!("[{ip}]"), after)
        } else {
            let (host, after) = match authority.find(':') {
                Some(i) => authority.split_at(i),
                None => (authority, ""),
            };
            let host = host.to_ascii_lowercase();
            if host.parse::<Ipv4Addr>().is_err() && !is_dns_name(&host) {
                return None;
            }
            (host, after)
        };
        let port = match port {
            "" => None,
            p => {
                let digits = p.strip_prefix(':')?;
                if digits.is_empty()
                    || digits.len() > 5
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                let n: u16 = digits.parse().ok()?;
                if n == 0 {
                    return None;
                }
                Some(n)
            }
        };
        let scheme = if https { "https" } else { "http" };
        let mut url = format!("{scheme}://{host}");
        let host_end = url.len();
        if let Some(port) = port {
            url.push_str(&format!(":{port}"));
        }
        Some(PublicUrl {
            url,
            https,
            host_end,
            port: port.unwrap_or(if https { 443 } else { 80 }),
        })
    }

    /// The normalized URL, such as `https://bothy.example.org:8443`.
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// Whether the scheme is https.
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The host: a DNS name, an IPv4 address or a bracketed IPv6 address.
    pub fn host(&self) -> &str {
        let start = if self.https {
            "https://".len()
        } else {
            "http://".len()
        };
        self.url.get(start..self.host_end).unwrap_or_default()
    }

    /// The port, explicit or the scheme's default (443, 80).
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Default for PublicUrl {
    fn default() -> Self {
        PublicUrl {
            url: "https://localhost:8443".to_owned(),
            https: true,
            host_end: "https://localhost".len(),
            port: 8443,
        }
    }
}

fn is_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The database engine a URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseEngine {
    /// SQLite, the embedded default (a file in the data directory).
    Sqlite,
    /// PostgreSQL, required for `cluster.mode: multi`.
    Postgres,
}

/// `database.url`: `sqlite://<file>` or `postgres://...` / `postgresql://...`.
///
/// It may carry a password, so `Debug` and [`DatabaseUrl::redacted`] replace the
/// password with `***`; only [`DatabaseUrl::expose`] gives the whole URL, for
/// connecting.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    url: String,
    engine: DatabaseEngine,
}

const DATABASE_URL_EXPECTED: &str = "a URL starting with sqlite://, postgres:// or postgresql://";

impl DatabaseUrl {
    /// Checks a database URL; the error names `database.url` and not the URL.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let invalid = || ConfigError::invalid("database.url", DATABASE_URL_EXPECTED);
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid());
        }
        let engine = if let Some(file) = text.strip_prefix("sqlite://") {
            if file.is_empty() {
                return Err(invalid());
            }
            DatabaseEngine::Sqlite
        } else if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            DatabaseEngine::Postgres
        } else {
            return Err(invalid());
        };
        Ok(DatabaseUrl {
            url: text.to_owned(),
            engine,
        })
    }

    /// The URL of an SQLite database in `file` (`%`, `?` and `#` percent-encoded,
    /// because the driver decodes them). A path that is not UTF-8 is taken lossily.
    pub fn sqlite_file(file: &Path) -> Self {
        let mut url = String::from("sqlite://");
        for c in file.to_string_lossy().chars() {
            match c {
                '%' => url.push_str("%25"),
                '?' => url.push_str("%3F"),
                '#' => url.push_str("%23"),
                c => url.push(c),
            }
        }
        DatabaseUrl {
            url,
            engine: DatabaseEngine::Sqlite,
        }
    }

    /// The engine the URL selects.
    pub fn engine(&self) -> DatabaseEngine {
        self.engine
    }

    /// The whole URL, password included, for the database driver. Never log it;
    /// log [`DatabaseUrl::redacted`].
    pub fn expose(&self) -> &str {
        &self.url
    }

    /// The URL with any password replaced by `***`: the password of the user
    /// part, and every query parameter whose name contains `password`.
    pub fn redacted(&self) -> String {
        redact_url(&self.url)
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DatabaseUrl")
            .field(&self.redacted())
            .finish()
    }
}

/// Replaces the passwords in a URL. The user part ends at the last `@` (a
/// password with an unencoded `/`, `?` or `#` is still covered; an `@` later in
/// the URL only makes the redaction larger, never smaller).
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (userinfo, after_at) = match rest.rsplit_once('@') {
        Some((userinfo, after)) => (Some(userinfo), after),
        None => (None, rest),
    };
    let mut out = format!("{scheme}://");
    if let Some(userinfo) = userinfo {
        match userinfo.split_once(':') {
            Some((user, _password)) => {
                out.push_str(user);
                out.push_str(":***");
            }
            None => out.push_str(userinfo),
        }
        out.push('@');
    }
    match after_at.split_once('?') {
        Some((base, query)) => {
            out.push_str(base);
            out.push('?');
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            for (i, pair) in query.split('&').enumerate() {
                if i > 0 {
                    out.push('&');
                }
                match pair.split_once('=') {
                    Some((name, _value)) if name.to_ascii_lowercase().contains("password") => {
                        out.push_str(name);
                        out.push_str("=***");
                    }
                    _ => out.push_str(pair),
                }
            }
            if let Some(fragment) = fragment {
                out.push('#');
                out.push_str(fragment);
            }
        }
        None => out.push_str(after_at),
    }
    out
}

/// `server.tls`: how the server gets its TLS certificate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Tls {
    /// `auto`: the server creates its own CA and server certificate in the data
    /// directory on first start.
    #[default]
    Auto,
    /// `off`: plain HTTP, behind an edge that terminates TLS.
    Off,
    /// `{cert_file, key_file}`: PEM files.
    Files {
        /// The certificate chain (PEM).
        cert_file: PathBuf,
        /// The private key (PEM).
        key_file: PathBuf,
    },
}

/// `cluster.mode` (spec 24 section 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterMode {
    /// One node; no NOTIFY is sent.
    #[default]
    Single,
    /// Several nodes on one PostgreSQL database, signals through LISTEN/NOTIFY.
    Multi,
}

impl ClusterMode {
    /// The spelling in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterMode::Single => "single",
            ClusterMode::Multi => "multi",
        }
    }
}

/// One token bucket (`rl.*`): `burst` tokens at most, `refill_per_minute`
/// tokens added per minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Size of the bucket.
    pub burst: u32,
    /// Tokens added per minute.
    pub refill_per_minute: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls() {
        let u = PublicUrl::parse("HTTPS://Bothy.Example.org:8443/").unwrap();
        assert_eq!(u.as_str(), "https://bothy.example.org:8443");
        assert_eq!(u.host(), "bothy.example.org");
        assert_eq!(u.port(), 8443);
        assert!(u.is_https());
        let u = PublicUrl::parse("http://127.0.0.1").unwrap();
        assert_eq!((u.host(), u.port(), u.is_https()), ("127.0.0.1", 80, false));
        let u = PublicUrl::parse("https://[::1]:9000").unwrap();
        assert_eq!((u.host(), u.port()), ("[::1]", 9000));
        assert_eq!(PublicUrl::parse("https://x").unwrap().port(), 443);
        assert_eq!(
            PublicUrl::default(),
            PublicUrl::parse("https://localhost:8443").unwrap()
        );
        assert_eq!(PublicUrl::default().host(), "localhost");
        for bad in [
            "ftp://x",
            "https://",
            "https:///",
            "bothy.example.org",
            "https://x/path",
            "https://x?q=1",
            "https://x#f",
            "https://user:pw@x",
            "https://x:0",
            "https://x:65536",
            "https://x:+1",
            "https://x:",
            "https://-x",
            "https://x y",
            "https://[::1",
            "https://[zz]",
            "https://x//",
        ] {
            let err = PublicUrl::parse(bad).unwrap_err();
            assert_eq!(err.key(), Some("server.public_url"), "{bad}");
        }
    }

    #[test]
    fn database_urls() {
        let u = DatabaseUrl::parse("postgres://bothy:s3cr3t-canary@db:5432/bothy").unwrap();
        assert_eq!(u.engine(), DatabaseEngine::Postgres);
        assert_eq!(u.redacted(), "postgres://bothy:***@db:5432/bothy");
        assert!(!format!("{u:?}").contains("s3cr3t"));
        assert!(u.expose().contains("s3cr3t-canary"));
        assert_eq!(
            DatabaseUrl::parse("postgresql://db/bothy?user=a&password=s3cr3t&sslpassword=x#f")
                .unwrap()
                .redacted(),
            "postgresql://db/bothy?user=a&password=***&sslpassword=***#f"
        );
        // An unencoded `/` or `@` in a password is still hidden.
        assert_eq!(
            redact_url("postgres://u:ab/c@d@host/db"),
            "postgres://u:***@host/db"
        );
        assert_eq!(redact_url("postgres://u@host/db"), "postgres://u@host/db");
        let s = DatabaseUrl::parse("sqlite:///var/lib/x.sqlite").unwrap();
        assert_eq!(s.engine(), DatabaseEngine::Sqlite);
        assert_eq!(s.redacted(), "sqlite:///var/lib/x.sqlite");
        assert_eq!(
            DatabaseUrl::sqlite_file(Path::new("/d/a?b#c%d/bothy.sqlite")).expose(),
            "sqlite:///d/a%3Fb%23c%25d/bothy.sqlite"
        );
        for bad in [
            "mysql://x",
            "sqlite://",
            "sqlite:x",
            "postgres:/x",
            "",
            "postgres://x y",
            "postgres://x\n",
        ] {
            assert_eq!(
                DatabaseUrl::parse(bad).unwrap_err().key(),
                Some("database.url")
            );
        }
    }
}
