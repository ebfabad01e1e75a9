//! The configuration of the host service: one YAML file nested like the
//! `host_service.*` keys of spec section 17 (D-M2-42-3), decoded strictly with
//! `bothy-config` (unknown key, duplicate key, wrong type → [`ConfigError`]
//! naming the dotted key, never the value). `bothy-host run` logs
//! `config_invalid` with the key and exits 78 on a refusal.
//!
//! The file chooses every program of every session user, so it is a place HD10
//! checks (trusted owner, writable by no session user). It holds no secret: the
//! organization API key lives in the state directory (`claude_api_key`).
//!
//! Semantic checks of the values (names of session users, groups, programs,
//! working directories) are the doctor's (HD1, HD2, HD7, HD11): the decoder only
//! refuses what cannot be a value of the key at all.
//!
//! # Keys
//! | Key | Default | Source |
//! |---|---|---|
//! | `host_service.state_dir` | `/var/lib/bothy-host` | 17 |
//! | `host_service.auth_status_timeout` | `30s` | 17 |
//! | `host_service.session_users` | `[]` | 17; names, read only at start |
//! | `host_service.extra_forbidden_groups` | `[]` | 17 |
//! | `host_service.credential_check_interval` | `60s` | 17 |
//! | `host_service.entry_scan_timeout` | `10m` | 17 |
//! | `host_service.profiles` | `[{name: shell, display_name: Shell, kind: shell}]` | 17, 11.1 |
//! | `host_service.claude_bin` | `""` (empty) | 17, 7.4 |
//! | `host_service.claude_workdirs` | `{}` | 17; `{user: [{path, display_name}]}` |
//! | `host_service.scrollback_bytes` | `1048576` | 17 |
//! | `host_service.require_local_confirm` | `false` | 17, 6.4 |
//! | `host_service.local_confirm_timeout` | `60s` | 17 |
//! | `host_service.reconnect_backoff_base` | `1s` | 17, 3.5 |
//! | `host_service.reconnect_backoff_cap` | `5m` | 17, 3.5 |
//!
//! Keys of ours (the chapter names the places, not keys for them; D-100):
//!
//! | Key | Default | What |
//! |---|---|---|
//! | `host_service.service_user` | `bothy-host` | the service user (2.2) |
//! | `host_service.runtime_dir` | `/run/bothy-host` | helper endpoints `helper/<user>.sock`, `supervise` records |

use std::path::{Path, PathBuf};
use std::time::Duration;

use bothy_config::duration::{DurationRule, POSITIVE};
use bothy_config::error::{dotted, join_key};
use bothy_config::section::from_json;
use bothy_config::{ConfigError, Section, yaml};
use bothy_proto::json::Member;
use bothy_proto::report::ProfileKind;
use serde_json::Value;

/// Where `bothy-host` reads its configuration unless `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/bothy-host/config.yaml";

/// Largest configuration file read (a bound against a runaway file).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// `host_service.*`
    pub host_service: HostServiceConfig,
}

/// `host_service.*` (spec section 17, "Place: Host service").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostServiceConfig {
    /// `state_dir`: keys, bindings, pairing record, declaration, admin socket.
    pub state_dir: PathBuf,
    /// `auth_status_timeout`: bound of `claude auth status` and the login-shell probe.
    pub auth_status_timeout: Duration,
    /// `session_users`: one per person; never the service user (HD1).
    pub session_users: Vec<String>,
    /// `extra_forbidden_groups`: added to HD2's fixed list.
    pub extra_forbidden_groups: Vec<String>,
    /// `credential_check_interval`: the periodic light run (HD6, HD11).
    pub credential_check_interval: Duration,
    /// `entry_scan_timeout`: bound of HD11's check of the entries per user.
    pub entry_scan_timeout: Duration,
    /// `profiles`: the offered profiles (11.1), in the order of the file.
    pub profiles: Vec<Profile>,
    /// `claude_bin`: absolute path of the coding agent; `None` when empty.
    pub claude_bin: Option<PathBuf>,
    /// `claude_workdirs`: working directories of the profile claude per
    /// session user, in the order of the file.
    pub claude_workdirs: Vec<UserWorkdirs>,
    /// `scrollback_bytes`: the ring buffer per session (6.2).
    pub scrollback_bytes: usize,
    /// `require_local_confirm`: every PTY only after consent on the host (6.4).
    pub require_local_confirm: bool,
    /// `local_confirm_timeout`
    pub local_confirm_timeout: Duration,
    /// `reconnect_backoff_base`
    pub reconnect_backoff_base: Duration,
    /// `reconnect_backoff_cap`
    pub reconnect_backoff_cap: Duration,
    /// `service_user` (ours): the account of the host service.
    pub service_user: String,
    /// `runtime_dir` (ours): helper endpoints and `supervise` records.
    pub runtime_dir: PathBuf,
}

impl Default for HostServiceConfig {
    fn default() -> Self {
        HostServiceConfig {
            state_dir: PathBuf::from("/var/lib/bothy-host"),
            auth_status_timeout: Duration::from_secs(30),
            session_users: Vec::new(),
            extra_forbidden_groups: Vec::new(),
            credential_check_interval: Duration::from_secs(60),
            entry_scan_timeout: Duration::from_secs(600),
            profiles: vec![Profile::default_shell()],
            claude_bin: None,
            claude_workdirs: Vec::new(),
            scrollback_bytes: 1_048_576,
            require_local_confirm: false,
            local_confirm_timeout: Duration::from_secs(60),
            reconnect_backoff_base: Duration::from_secs(1),
            reconnect_backoff_cap: Duration::from_secs(300),
            service_user: "bothy-host".to_owned(),
            runtime_dir: PathBuf::from("/run/bothy-host"),
        }
    }
}

/// One entry of `host_service.profiles` (11.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The name the server and the token (`prf`) use.
    pub name: String,
    /// What the apps show.
    pub display_name: String,
    /// shell, claude or command.
    pub kind: ProfileKind,
    /// For `kind: command`: the absolute program and its arguments.
    pub command: Option<ProfileCommand>,
}

impl Profile {
    /// The default profile: the login shell.
    pub fn default_shell() -> Profile {
        Profile {
            name: "shell".to_owned(),
            display_name: "Shell".to_owned(),
            kind: ProfileKind::Shell,
            command: None,
        }
    }
}

/// The fixed command of a profile of kind command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileCommand {
    /// Absolute path of the program (resolved by HD7/HD11 before use).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// The working directories of one session user (`claude_workdirs.<user>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserWorkdirs {
    /// The key: a name that should be in `session_users` (HD7 drops it if not).
    pub user: String,
    /// The folders in the order of the file.
    pub workdirs: Vec<Workdir>,
}

/// One working directory: a path on the host and the name the apps show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workdir {
    /// The folder as configured (resolved by the helper of its user).
    pub path: PathBuf,
    /// The display name (the only part that is reported).
    pub display_name: String,
}

const ROOT_KEYS: &[&str] = &["host_service"];
const HOST_SERVICE_KEYS: &[&str] = &[
    "state_dir",
    "auth_status_timeout",
    "session_users",
    "extra_forbidden_groups",
    "credential_check_interval",
    "entry_scan_timeout",
    "profiles",
    "claude_bin",
    "claude_workdirs",
    "scrollback_bytes",
    "require_local_confirm",
    "local_confirm_timeout",
    "reconnect_backoff_base",
    "reconnect_backoff_cap",
    "service_user",
    "runtime_dir",
];
const PROFILE_KEYS: &[&str] = &["name", "display_name", "kind", "program", "args"];
const WORKDIR_KEYS: &[&str] = &["path", "display_name"];

/// Largest scrollback buffer accepted (1 GiB): a typo must not exhaust memory.
const MAX_SCROLLBACK_BYTES: u64 = 1 << 30;

impl Config {
    /// Reads and decodes the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let read = |error| ConfigError::Read {
            path: path.to_owned(),
            error,
        };
        let metadata = std::fs::metadata(path).map_err(read)?;
        if metadata.len() > MAX_FILE_BYTES {
            return Err(ConfigError::Syntax {
                reason: "the file is larger than 1 MiB",
                location: None,
            });
        }
        let bytes = std::fs::read(path).map_err(read)?;
        let text = String::from_utf8(bytes).map_err(|_| ConfigError::Syntax {
            reason: "the file is not UTF-8",
            location: None,
        })?;
        Config::from_yaml_str(&text)
    }

    /// Decodes YAML text (an empty text is every default).
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        let document = yaml::parse_document(text)?;
        let document = match document {
            Value::Null => Value::Object(serde_json::Map::new()),
            Value::Object(_) => document,
            _ => return Err(ConfigError::wrong_type("", "a mapping with host_service")),
        };
        let root = Section::root(&document, ROOT_KEYS)?;
        let s = root.section("host_service", HOST_SERVICE_KEYS)?;
        let d = HostServiceConfig::default();
        let host_service = HostServiceConfig {
            state_dir: absolute_path(&s, "state_dir")?.unwrap_or(d.state_dir),
            auth_status_timeout: s.duration(
                "auth_status_timeout",
                d.auth_status_timeout,
                POSITIVE,
            )?,
            session_users: string_list(&s, "session_users")?.unwrap_or(d.session_users),
            extra_forbidden_groups: string_list(&s, "extra_forbidden_groups")?
                .unwrap_or(d.extra_forbidden_groups),
            credential_check_interval: s.duration(
                "credential_check_interval",
                d.credential_check_interval,
                POSITIVE,
            )?,
            entry_scan_timeout: s.duration("entry_scan_timeout", d.entry_scan_timeout, POSITIVE)?,
            profiles: match s.member("profiles") {
                None => d.profiles,
                Some(member) => profiles(member)?,
            },
            claude_bin: match s.string("claude_bin")? {
                None => None,
                Some(("", _)) => None,
                Some((text, key)) => Some(absolute(text, &key)?),
            },
            claude_workdirs: match s.member("claude_workdirs") {
                None => d.claude_workdirs,
                Some(member) => claude_workdirs(member)?,
            },
            scrollback_bytes: s.count(
                "scrollback_bytes",
                d.scrollback_bytes,
                1,
                MAX_SCROLLBACK_BYTES,
            )?,
            require_local_confirm: s
                .boolean("require_local_confirm")?
                .unwrap_or(d.require_local_confirm),
            local_confirm_timeout: s.duration(
                "local_confirm_timeout",
                d.local_confirm_timeout,
                POSITIVE,
            )?,
            reconnect_backoff_base: s.duration(
                "reconnect_backoff_base",
                d.reconnect_backoff_base,
                BACKOFF,
            )?,
            reconnect_backoff_cap: s.duration(
                "reconnect_backoff_cap",
                d.reconnect_backoff_cap,
                BACKOFF,
            )?,
            service_user: match s.string("service_user")? {
                None => d.service_user,
                Some(("", key)) => return Err(ConfigError::invalid(&key, "a user name")),
                Some((text, _)) => text.to_owned(),
            },
            runtime_dir: absolute_path(&s, "runtime_dir")?.unwrap_or(d.runtime_dir),
        };
        if host_service.reconnect_backoff_cap < host_service.reconnect_backoff_base {
            return Err(ConfigError::invalid(
                "host_service.reconnect_backoff_cap",
                "at least host_service.reconnect_backoff_base",
            ));
        }
        Ok(Config { host_service })
    }
}

/// Reads the configuration for a command that refuses to run without one:
/// on a refusal it logs `config_invalid` with the key (never the value) and
/// returns the exit code of a refused start (78), D-M2-42-3.
pub fn load_or_refuse(path: &Path) -> Result<Config, i32> {
    Config::load(path).map_err(|error| {
        tracing::error!(
            code = "config_invalid",
            key = error.key().unwrap_or(""),
            "{error}"
        );
        crate::EXIT_REFUSED_START
    })
}

impl HostServiceConfig {
    /// The working directories configured for `user` (before HD7).
    pub fn workdirs_of(&self, user: &str) -> &[Workdir] {
        self.claude_workdirs
            .iter()
            .find(|w| w.user == user)
            .map_or(&[], |w| w.workdirs.as_slice())
    }

    /// The endpoint of the local channel of `user`'s PTY helper.
    pub fn helper_endpoint(&self, user: &str) -> PathBuf {
        self.runtime_dir.join("helper").join(format!("{user}.sock"))
    }

    /// The profile named `name`.
    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.name == name)
    }
}

/// Backoff values: at least 1 ms, at most a day.
const BACKOFF: DurationRule = DurationRule {
    min: Duration::from_millis(1),
    max: Duration::from_secs(24 * 3600),
    whole_seconds: false,
};

fn absolute_path(s: &Section<'_>, name: &str) -> Result<Option<PathBuf>, ConfigError> {
    match s.string(name)? {
        None => Ok(None),
        Some((text, key)) => absolute(text, &key).map(Some),
    }
}

fn absolute(text: &str, key: &str) -> Result<PathBuf, ConfigError> {
    if !text.starts_with('/') || text.contains('\0') {
        return Err(ConfigError::invalid(key, "an absolute path"));
    }
    Ok(PathBuf::from(text))
}

fn string_list(s: &Section<'_>, name: &str) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(member) = s.member(name) else {
        return Ok(None);
    };
    strings(member).map(Some)
}

fn strings(member: Member<'_>) -> Result<Vec<String>, ConfigError> {
    let array = member.into_array().map_err(from_json)?;
    array
        .iter()
        .map(|item| item.as_str().map(str::to_owned).map_err(from_json))
        .collect()
}

fn profiles(member: Member<'_>) -> Result<Vec<Profile>, ConfigError> {
    let array = member.into_array().map_err(from_json)?;
    let mut out: Vec<Profile> = Vec::new();
    for item in array.iter() {
        let key = dotted(item.pointer());
        let p = Section::of_member(item, PROFILE_KEYS)?;
        let required = |name: &str| -> Result<String, ConfigError> {
            match p.string(name)? {
                Some((text, _)) => Ok(text.to_owned()),
                None => Err(ConfigError::MissingKey {
                    key: join_key(&key, name),
                }),
            }
        };
        let name = required("name")?;
        let display_name = required("display_name")?;
        let kind = match p.string("kind")? {
            None => {
                return Err(ConfigError::MissingKey {
                    key: join_key(&key, "kind"),
                });
            }
            Some((text, kind_key)) => match text {
                "shell" => ProfileKind::Shell,
                "claude" => ProfileKind::Claude,
                "command" => ProfileKind::Command,
                _ => return Err(ConfigError::invalid(&kind_key, "shell, claude or command")),
            },
        };
        let program = p.string("program")?;
        let args = match p.member("args") {
            None => None,
            Some(member) => Some(strings(member)?),
        };
        let command = match kind {
            ProfileKind::Command => {
                let Some((text, program_key)) = program else {
                    return Err(ConfigError::MissingKey {
                        key: join_key(&key, "program"),
                    });
                };
                Some(ProfileCommand {
                    program: absolute(text, &program_key)?,
                    args: args.unwrap_or_default(),
                })
            }
            ProfileKind::Shell | ProfileKind::Claude => {
                if let Some((_, program_key)) = program {
                    return Err(ConfigError::invalid(
                        &program_key,
                        "absent: only a profile of kind command has a program",
                    ));
                }
                if args.is_some() {
                    return Err(ConfigError::invalid(
                        &join_key(&key, "args"),
                        "absent: only a profile of kind command has arguments",
                    ));
                }
                None
            }
        };
        if out.iter().any(|other| other.name == name) {
            return Err(ConfigError::invalid(
                &join_key(&key, "name"),
                "a name no other profile has",
            ));
        }
        out.push(Profile {
            name,
            display_name,
            kind,
            command,
        });
    }
    Ok(out)
}

fn claude_workdirs(member: Member<'_>) -> Result<Vec<UserWorkdirs>, ConfigError> {
    let key = dotted(member.pointer());
    let Value::Object(map) = member.value() else {
        return Err(ConfigError::wrong_type(
            &key,
            "a mapping of session user names to lists of {path, display_name}",
        ));
    };
    let mut out = Vec::new();
    for (user, value) in map {
        let list = Member::new(
            value,
            bothy_proto::json::pointer_join(member.pointer(), user),
        );
        let array = list.into_array().map_err(from_json)?;
        let mut workdirs = Vec::new();
        for item in array.iter() {
            let item_key = dotted(item.pointer());
            let w = Section::of_member(item, WORKDIR_KEYS)?;
            let path = match w.string("path")? {
                Some((text, path_key)) => absolute(text, &path_key)?,
                None => {
                    return Err(ConfigError::MissingKey {
                        key: join_key(&item_key, "path"),
                    });
                }
            };
            let display_name = match w.string("display_name")? {
                Some((text, _)) => text.to_owned(),
                None => {
                    return Err(ConfigError::MissingKey {
                        key: join_key(&item_key, "display_name"),
                    });
                }
            };
            workdirs.push(Workdir { path, display_name });
        }
        out.push(UserWorkdirs {
            user: user.clone(),
            workdirs,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    /// docs/configuration.md names every key of the file (issue 17).
    #[test]
    fn every_key_is_in_the_configuration_reference() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
        let reference = std::fs::read_to_string(path).expect("docs/configuration.md");
        let host_part = reference
            .split("# bothy-host configuration reference")
            .nth(1)
            .expect("a section for bothy-host");
        for key in HOST_SERVICE_KEYS {
            assert!(
                host_part.contains(&format!("`host_service.{key}`")),
                "host_service.{key} is missing from docs/configuration.md"
            );
        }
        for key in PROFILE_KEYS.iter().chain(WORKDIR_KEYS) {
            assert!(
                host_part.contains(key),
                "{key} is missing from docs/configuration.md"
            );
        }
        // Its example is a valid configuration.
        let start = host_part.find("```yaml\n").expect("an example") + "```yaml\n".len();
        let end = start + host_part[start..].find("```").expect("the example's end");
        let config = Config::from_yaml_str(&host_part[start..end]).expect("a valid example");
        assert_eq!(config.host_service.session_users.len(), 2);
        assert_eq!(config.host_service.profiles.len(), 3);
    }

    use super::*;

    fn err(text: &str) -> ConfigError {
        Config::from_yaml_str(text).expect_err("refused")
    }

    #[test]
    fn empty_file_is_every_default() {
        let c = Config::from_yaml_str("").expect("defaults");
        assert_eq!(c, Config::default());
        let h = &c.host_service;
        assert_eq!(h.state_dir, PathBuf::from("/var/lib/bothy-host"));
        assert_eq!(h.scrollback_bytes, 1_048_576);
        assert_eq!(h.profiles, vec![Profile::default_shell()]);
        assert_eq!(h.reconnect_backoff_cap, Duration::from_secs(300));
        assert!(h.claude_bin.is_none());
    }

    #[test]
    fn a_full_file_decodes() {
        let c = Config::from_yaml_str(
            r#"
host_service:
  state_dir: /srv/bothy
  session_users: [alice, bob]
  extra_forbidden_groups: [wireshark]
  profiles:
    - {name: shell, display_name: Shell, kind: shell}
    - {name: claude, display_name: Claude Code, kind: claude}
    - {name: top, display_name: top, kind: command, program: /usr/bin/top, args: ["-d", "1"]}
  claude_bin: /usr/local/bin/claude
  claude_workdirs:
    alice:
      - {path: /srv/a/project, display_name: project}
  scrollback_bytes: 4096
  require_local_confirm: true
  reconnect_backoff_base: 100ms
  reconnect_backoff_cap: 2s
  service_user: bhs
  runtime_dir: /run/bh-test
"#,
        )
        .expect("valid");
        let h = c.host_service;
        assert_eq!(h.session_users, ["alice", "bob"]);
        assert_eq!(h.profiles.len(), 3);
        assert_eq!(
            h.profiles[2].command,
            Some(ProfileCommand {
                program: PathBuf::from("/usr/bin/top"),
                args: vec!["-d".into(), "1".into()],
            })
        );
        assert_eq!(h.workdirs_of("alice")[0].display_name, "project");
        assert!(h.workdirs_of("bob").is_empty());
        assert_eq!(
            h.helper_endpoint("alice"),
            PathBuf::from("/run/bh-test/helper/alice.sock")
        );
        assert_eq!(h.claude_bin, Some(PathBuf::from("/usr/local/bin/claude")));
        assert!(h.require_local_confirm);
    }

    #[test]
    fn refusals_name_the_key_never_the_value() {
        for (text, key) in [
            ("host_service:\n  nope: 1\n", "host_service.nope"),
            ("other: 1\n", "other"),
            (
                "host_service:\n  state_dir: relative/s3cret\n",
                "host_service.state_dir",
            ),
            (
                "host_service:\n  session_users: s3cret\n",
                "host_service.session_users",
            ),
            (
                "host_service:\n  session_users: [1]\n",
                "host_service.session_users.0",
            ),
            (
                "host_service:\n  scrollback_bytes: 0\n",
                "host_service.scrollback_bytes",
            ),
            (
                "host_service:\n  require_local_confirm: s3cret\n",
                "host_service.require_local_confirm",
            ),
            (
                "host_service:\n  auth_status_timeout: s3cret\n",
                "host_service.auth_status_timeout",
            ),
            (
                "host_service:\n  claude_bin: s3cret\n",
                "host_service.claude_bin",
            ),
            (
                "host_service:\n  profiles: [{name: x, display_name: X, kind: s3cret}]\n",
                "host_service.profiles.0.kind",
            ),
            (
                "host_service:\n  profiles: [{name: x, display_name: X, kind: command}]\n",
                "host_service.profiles.0.program",
            ),
            (
                "host_service:\n  profiles: [{name: x, display_name: X, kind: shell, program: /bin/sh}]\n",
                "host_service.profiles.0.program",
            ),
            (
                "host_service:\n  profiles: [{name: x, display_name: X, kind: shell}, {name: x, display_name: Y, kind: shell}]\n",
                "host_service.profiles.1.name",
            ),
            (
                "host_service:\n  claude_workdirs: {alice: [{path: /a}]}\n",
                "host_service.claude_workdirs.alice.0.display_name",
            ),
            (
                "host_service:\n  reconnect_backoff_base: 10s\n  reconnect_backoff_cap: 1s\n",
                "host_service.reconnect_backoff_cap",
            ),
        ] {
            let e = err(text);
            assert_eq!(e.key(), Some(key), "{text}: {e}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
        assert!(matches!(
            err("host_service:\n  state_dir: /a\n  state_dir: /b\n"),
            ConfigError::DuplicateKey { .. }
        ));
        assert!(matches!(err("- a\n"), ConfigError::WrongType { .. }));
    }
}
