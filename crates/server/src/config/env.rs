//! `BOTHY_` environment overrides of single keys (DESIGN §3): the key path in
//! upper case with `__` between the levels (`BOTHY_TERMINAL__PAIRING_CODE_TTL`
//! sets `terminal.pairing_code_ttl`, `BOTHY_SERVER__TLS__CERT_FILE` sets
//! `server.tls.cert_file`). The value is read as one YAML scalar, so `20m`, `7`
//! and `off` mean what they mean in the file (a value with ` #` loses the rest as
//! a comment, as in the file; quote it). Overrides are applied to the document
//! before the typed decoding, so they pass the same checks as the file.
//!
//! [`CONFIG_PATH_ENV`] and [`LOG_FILTER_ENV`] belong to the process, not to the
//! configuration, and are skipped. Any other `BOTHY_` name that is not a key is an
//! error naming the variable, never its value.

use std::ffi::OsString;

use serde_json::{Map, Value};

use super::ConfigError;
use super::schema::{self, Key};
use bothy_config::error::{join_key, shown_var};
use bothy_config::yaml::{self, ScalarError};

/// The prefix of every variable the server reads.
pub const ENV_PREFIX: &str = "BOTHY_";

/// The path of the configuration file (read by the command line, not a key).
pub const CONFIG_PATH_ENV: &str = "BOTHY_CONFIG";

/// The log filter (read by the command line, not a key).
pub const LOG_FILTER_ENV: &str = "BOTHY_LOG";

/// `BOTHY_` variables that are not configuration keys.
pub const RESERVED_ENV_VARS: &[&str] = &[CONFIG_PATH_ENV, LOG_FILTER_ENV];

/// The `BOTHY_` variables of this process, for [`super::Config::load`]. Variables
/// without the prefix are left out, so that another program's variable that is
/// not UTF-8 cannot stop the server; a `BOTHY_` one that is not UTF-8 is an error.
pub fn process_env() -> Result<Vec<(String, String)>, ConfigError> {
    collect_process_env(std::env::vars_os())
}

fn collect_process_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for (name, value) in vars {
        if !name.as_encoded_bytes().starts_with(ENV_PREFIX.as_bytes()) {
            continue;
        }
        let shown = shown_var(&name.to_string_lossy());
        let name = name
            .into_string()
            .map_err(|_| ConfigError::EnvNotUnicode { var: shown.clone() })?;
        let value = value
            .into_string()
            .map_err(|_| ConfigError::EnvNotUnicode { var: shown })?;
        out.push((name, value));
    }
    Ok(out)
}

/// One override: which variable sets which key to which value.
#[derive(Debug)]
pub(crate) struct Override {
    var: String,
    path: Vec<&'static str>,
    /// The dotted key.
    key: String,
    value: Value,
}

/// Reads the overrides out of the environment; other variables are ignored.
pub(crate) fn overrides(
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<Override>, ConfigError> {
    let mut found: Vec<Override> = Vec::new();
    for (var, text) in env {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if RESERVED_ENV_VARS.contains(&var.as_str()) {
            continue;
        }
        let path = resolve(rest).ok_or_else(|| ConfigError::UnknownEnvVar {
            var: shown_var(&var),
        })?;
        let key = path
            .iter()
            .fold(String::new(), |k, name| join_key(&k, name));
        let value = yaml::parse_scalar(&text).map_err(|e| {
            let error = match e {
                ScalarError::Null => ConfigError::NullValue { key: key.clone() },
                ScalarError::NotAScalar => {
                    ConfigError::invalid(&key, "one YAML scalar (a string, a number or a duration)")
                }
            };
            ConfigError::FromEnv {
                var: var.clone(),
                error: Box::new(error),
            }
        })?;
        // One variable per key, and none inside another's key: the result
        // would depend on the order of the environment.
        if let Some(other) = found.iter().find(|o| overlaps(&o.path, &path)) {
            return Err(ConfigError::EnvConflict {
                var: other.var.clone(),
                other: var,
            });
        }
        found.push(Override {
            var,
            path,
            key,
            value,
        });
    }
    Ok(found)
}

/// The key path a variable name (without the prefix) names, if any.
fn resolve(name: &str) -> Option<Vec<&'static str>> {
    let mut level: &'static [Key] = schema::ROOT;
    let mut path = Vec::new();
    for segment in name.split("__") {
        let key = level
            .iter()
            .find(|key| key.name.to_ascii_uppercase() == segment)?;
        path.push(key.name);
        level = schema::members(key);
    }
    (!path.is_empty()).then_some(path)
}

fn overlaps(a: &[&str], b: &[&str]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Writes the overrides into the document (a mapping). A level on the way that
/// holds a scalar (`server.tls: auto` under `BOTHY_SERVER__TLS__CERT_FILE`)
/// becomes a mapping.
pub(crate) fn apply(root: &mut Map<String, Value>, overrides: &[Override]) {
    for o in overrides {
        let Some((last, parents)) = o.path.split_last() else {
            continue;
        };
        let mut map = &mut *root;
        for name in parents {
            let slot = map
                .entry(*name)
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            let Value::Object(inner) = slot else {
                return;
            };
            map = inner;
        }
        map.insert((*last).to_owned(), o.value.clone());
    }
}

/// Adds the variable to a refusal of a key an override set.
pub(crate) fn attribute(error: ConfigError, overrides: &[Override]) -> ConfigError {
    let Some(key) = error.key() else {
        return error;
    };
    let by = overrides.iter().find(|o| {
        key == o.key
            || key
                .strip_prefix(o.key.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    });
    match by {
        Some(o) => ConfigError::FromEnv {
            var: o.var.clone(),
            error: Box::new(error),
        },
        None => error,
    }
}

/// The variable that sets `dotted_key` (`terminal.pairing_code_ttl` gives
/// `BOTHY_TERMINAL__PAIRING_CODE_TTL`).
pub fn env_var_for(dotted_key: &str) -> String {
    let mut var = ENV_PREFIX.to_owned();
    var.push_str(&dotted_key.to_ascii_uppercase().replace('.', "__"));
    var
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn names_resolve_to_keys() {
        assert_eq!(
            resolve("TERMINAL__PAIRING_CODE_TTL"),
            Some(vec!["terminal", "pairing_code_ttl"])
        );
        assert_eq!(resolve("SERVER__TLS"), Some(vec!["server", "tls"]));
        assert_eq!(
            resolve("SERVER__TLS__CERT_FILE"),
            Some(vec!["server", "tls", "cert_file"])
        );
        assert_eq!(
            resolve("RL__PUBLIC_AUTH__BURST"),
            Some(vec!["rl", "public_auth", "burst"])
        );
        assert_eq!(resolve("TERMINAL__PAIRING_CODE_TT"), None);
        assert_eq!(resolve("terminal__pairing_code_ttl"), None);
        assert_eq!(resolve("TERMINAL_PAIRING_CODE_TTL"), None);
        assert_eq!(resolve("TERMINAL__PAIRING_CODE_TTL__X"), None);
        assert_eq!(resolve(""), None);
    }

    #[test]
    fn every_key_has_a_variable_and_none_is_reserved() {
        for key in schema::value_keys() {
            let var = env_var_for(&key);
            assert!(!RESERVED_ENV_VARS.contains(&var.as_str()), "{var}");
            let rest = var.strip_prefix(ENV_PREFIX).unwrap();
            let path = resolve(rest).unwrap_or_else(|| panic!("{var}"));
            assert_eq!(path.join("."), key);
        }
    }

    #[test]
    fn reserved_and_foreign_variables_are_skipped() {
        let o = overrides(env(&[
            ("BOTHY_CONFIG", "/etc/bothy/server.yaml"),
            ("BOTHY_LOG", "debug"),
            ("PATH", "/bin"),
            ("HOME", "s3cr3t-canary"),
        ]))
        .unwrap();
        assert!(o.is_empty());
    }

    #[test]
    fn unknown_variable_is_named_without_its_value() {
        let e =
            overrides(env(&[("BOTHY_TERMINAL__PAIRING_CODE_TT", "s3cr3t-canary")])).unwrap_err();
        assert!(
            matches!(&e, ConfigError::UnknownEnvVar { var } if var == "BOTHY_TERMINAL__PAIRING_CODE_TT")
        );
        assert!(!e.to_string().contains("s3cr3t"));
        assert!(!format!("{e:?}").contains("s3cr3t"));
    }

    #[test]
    fn conflicts_and_bad_values() {
        let e = overrides(env(&[
            ("BOTHY_SERVER__TLS", "off"),
            ("BOTHY_SERVER__TLS__CERT_FILE", "/c.pem"),
        ]))
        .unwrap_err();
        assert!(matches!(e, ConfigError::EnvConflict { .. }));
        let e = overrides(env(&[("BOTHY_DATABASE__URL", "a: s3cr3t-canary")])).unwrap_err();
        assert_eq!(e.key(), Some("database.url"));
        assert!(!e.to_string().contains("s3cr3t"));
        let e = overrides(env(&[("BOTHY_DATABASE__URL", "")])).unwrap_err();
        assert!(
            matches!(&e, ConfigError::FromEnv { error, .. } if matches!(**error, ConfigError::NullValue { .. }))
        );
    }

    #[test]
    fn apply_replaces_a_scalar_on_the_way() {
        let mut root = Map::new();
        root.insert("server".into(), serde_json::json!({"tls": "auto"}));
        let o = overrides(env(&[
            ("BOTHY_SERVER__TLS__CERT_FILE", "/c.pem"),
            ("BOTHY_TERMINAL__MAX_SESSIONS_PER_HOST", "12"),
        ]))
        .unwrap();
        apply(&mut root, &o);
        assert_eq!(
            Value::Object(root),
            serde_json::json!({"server": {"tls": {"cert_file": "/c.pem"}}, "terminal": {"max_sessions_per_host": 12}})
        );
    }

    #[cfg(unix)]
    #[test]
    fn process_env_filters_and_checks_unicode() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![0x66, 0xff]);
        let ok = collect_process_env(vec![
            (OsString::from("OTHER"), bad.clone()),
            (OsString::from("BOTHY_LOG"), OsString::from("info")),
        ])
        .unwrap();
        assert_eq!(ok, vec![("BOTHY_LOG".to_owned(), "info".to_owned())]);
        let e =
            collect_process_env(vec![(OsString::from("BOTHY_DATABASE__URL"), bad)]).unwrap_err();
        assert!(matches!(e, ConfigError::EnvNotUnicode { var } if var == "BOTHY_DATABASE__URL"));
    }
}
