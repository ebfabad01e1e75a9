//! The doctor's messages between the service and a PTY helper (2.2: "the
//! results of the checks that the helper runs, plus the identities of its
//! working directories for HD7"), carried as the bytes of
//! [`crate::channel::ToHelper::Checks`] and [`crate::channel::FromHelper::CheckResults`],
//! and between `bothy-host doctor` and its `doctor-probe` children.
//!
//! Strict JSON ([`bothy_proto::json`]): exactly the members of the kind, no
//! `null`, paths absolute and without NUL. The service sends everything the
//! helper needs (the helper reads no configuration file); the helper answers
//! with flags, identities and indexes only — never content, paths or values.
//!
//! ```text
//! request  {"kind": "identities"|"light"|"full"|"sudo", "uid": 1001,
//!           "home": "/home/a", "shell": "/bin/bash",
//!           "others": [{"uid": 1002, "gids": [1002]}],
//!           "declaration": "none"|"personal"|"organization"|"unknown",
//!           "claude_bin": "/usr/local/bin/claude" (absent: empty),
//!           "search_tail": ["/usr/bin", "/bin"], "workdirs": ["/srv/a"],
//!           "state_dir": "/var/lib/bothy-host", "key_files": [...],
//!           "homes": ["/root", ...], "sudo": ["/usr/bin/sudo", ...],
//!           "auth_status_timeout_ms": 30000, "entry_scan_timeout_ms": 600000}
//! answer   {"kind": "identities", "workdirs": [{"dev": 1, "ino": 2}, {}]}
//!          {"kind": "light", "workdirs": [...], "hd6": {...}, "hd11": {...},
//!           "entry_scan": {"awaited": 1, "finished": 0, "result": "none"}}
//!          {"kind": "full", ...light..., "passwordless_sudo": false,
//!           "reads_state": false, "listable_homes": [0, 3], "dumpable": false}
//!          {"kind": "sudo", "passwordless_sudo": false}
//!          {"kind": "refused", "reason": "bad_request"|"wrong_user"}
//! ```

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use bothy_proto::control::LlmCredentials;
use bothy_proto::json::{self, JsonError, Member, Object};
use serde_json::{Map, Value, json};

use super::terms::{Account, FileId};

/// Largest message either way.
pub const MAX_WIRE_BYTES: usize = 1 << 20;
/// Longest path carried (Linux `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Only the identities of the configured working directories (HD7, first
    /// phase of a full run).
    Identities,
    /// HD6 and HD11 without the check of the entries (gate, periodic run).
    Light,
    /// Every check of the helper, and the check of the entries.
    Full,
    /// Only `sudo -n true` (the service user's HD3 when `bothy-host doctor`
    /// runs as root).
    Sudo,
}

impl RequestKind {
    const fn as_str(self) -> &'static str {
        match self {
            RequestKind::Identities => "identities",
            RequestKind::Light => "light",
            RequestKind::Full => "full",
            RequestKind::Sudo => "sudo",
        }
    }

    fn parse(text: &str) -> Option<RequestKind> {
        [
            RequestKind::Identities,
            RequestKind::Light,
            RequestKind::Full,
            RequestKind::Sudo,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// A request of the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest {
    /// What is asked.
    pub kind: RequestKind,
    /// The session user the helper must run as.
    pub uid: u32,
    /// Its home from the user database.
    pub home: PathBuf,
    /// Its login shell from the user database.
    pub shell: PathBuf,
    /// The other session users (HD11: who must not reach this user's locations).
    pub others: Vec<Account>,
    /// The declaration; `None` is unknown (D-M2-42-15).
    pub declaration: Option<LlmCredentials>,
    /// `host_service.claude_bin` as configured; `None` when empty.
    pub claude_bin: Option<PathBuf>,
    /// The fixed folders of the search list after the configured one (7.4).
    pub search_tail: Vec<PathBuf>,
    /// Working directories: the configured list (identities) or the list after
    /// HD7 (light, full).
    pub workdirs: Vec<PathBuf>,
    /// `host_service.state_dir` (HD8's read attempt).
    pub state_dir: PathBuf,
    /// The key files of the state directory (HD8's read attempt).
    pub key_files: Vec<PathBuf>,
    /// Homes of the other accounts (HD9's listing attempt).
    pub homes: Vec<PathBuf>,
    /// Where `sudo` may be (HD3), tried in order.
    pub sudo: Vec<PathBuf>,
    /// `host_service.auth_status_timeout` in milliseconds.
    pub auth_status_timeout_ms: u64,
    /// `host_service.entry_scan_timeout` in milliseconds.
    pub entry_scan_timeout_ms: u64,
}

const REQUEST_MEMBERS: &[&str] = &[
    "kind",
    "uid",
    "home",
    "shell",
    "others",
    "declaration",
    "claude_bin",
    "search_tail",
    "workdirs",
    "state_dir",
    "key_files",
    "homes",
    "sudo",
    "auth_status_timeout_ms",
    "entry_scan_timeout_ms",
];

impl CheckRequest {
    /// The bytes of the request.
    pub fn encode(&self) -> Vec<u8> {
        let mut map = Map::new();
        map.insert("kind".into(), self.kind.as_str().into());
        map.insert("uid".into(), self.uid.into());
        map.insert("home".into(), path_value(&self.home));
        map.insert("shell".into(), path_value(&self.shell));
        map.insert(
            "others".into(),
            Value::Array(
                self.others
                    .iter()
                    .map(|a| json!({"uid": a.uid, "gids": a.gids}))
                    .collect(),
            ),
        );
        map.insert(
            "declaration".into(),
            self.declaration.map_or("unknown", |d| d.as_str()).into(),
        );
        if let Some(bin) = &self.claude_bin {
            map.insert("claude_bin".into(), path_value(bin));
        }
        map.insert("search_tail".into(), paths_value(&self.search_tail));
        map.insert("workdirs".into(), paths_value(&self.workdirs));
        map.insert("state_dir".into(), path_value(&self.state_dir));
        map.insert("key_files".into(), paths_value(&self.key_files));
        map.insert("homes".into(), paths_value(&self.homes));
        map.insert("sudo".into(), paths_value(&self.sudo));
        map.insert(
            "auth_status_timeout_ms".into(),
            self.auth_status_timeout_ms.into(),
        );
        map.insert(
            "entry_scan_timeout_ms".into(),
            self.entry_scan_timeout_ms.into(),
        );
        serde_json::to_vec(&Value::Object(map)).unwrap_or_default()
    }

    /// Decodes a request strictly.
    pub fn decode(bytes: &[u8]) -> Result<CheckRequest, JsonError> {
        let value = json::parse(bytes, MAX_WIRE_BYTES)?;
        let o = Object::root(&value, REQUEST_MEMBERS)?;
        let kind_member = o.member("kind")?;
        let kind =
            RequestKind::parse(kind_member.as_str()?).ok_or_else(|| kind_member.invalid())?;
        let declaration_member = o.member("declaration")?;
        let declaration = match declaration_member.as_str()? {
            "unknown" => None,
            text => Some(LlmCredentials::parse(text).ok_or_else(|| declaration_member.invalid())?),
        };
        let others = o
            .array("others")?
            .iter()
            .map(|m| {
                let a = m.into_object(&["uid", "gids"])?;
                let gids = a
                    .array("gids")?
                    .iter()
                    .map(|g| g.as_uint::<u32>())
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Account {
                    uid: a.uint("uid")?,
                    gids,
                })
            })
            .collect::<Result<Vec<_>, JsonError>>()?;
        Ok(CheckRequest {
            kind,
            uid: o.uint("uid")?,
            home: path(o.member("home")?)?,
            shell: path(o.member("shell")?)?,
            others,
            declaration,
            claude_bin: o.opt_member("claude_bin").map(path).transpose()?,
            search_tail: paths(&o, "search_tail")?,
            workdirs: paths(&o, "workdirs")?,
            state_dir: path(o.member("state_dir")?)?,
            key_files: paths(&o, "key_files")?,
            homes: paths(&o, "homes")?,
            sudo: paths(&o, "sudo")?,
            auth_status_timeout_ms: o.uint("auth_status_timeout_ms")?,
            entry_scan_timeout_ms: o.uint("entry_scan_timeout_ms")?,
        })
    }
}

fn path_value(path: &Path) -> Value {
    // Paths the service sends come from the configuration (UTF-8) or the user
    // database; one that is not UTF-8 is never sent (the caller fails closed).
    Value::String(path.to_string_lossy().into_owned())
}

fn paths_value(paths: &[PathBuf]) -> Value {
    Value::Array(paths.iter().map(|p| path_value(p)).collect())
}

fn path(member: Member<'_>) -> Result<PathBuf, JsonError> {
    let text = member.as_str()?;
    if !text.starts_with('/') || text.contains('\0') || text.len() > MAX_PATH_BYTES {
        return Err(member.invalid());
    }
    Ok(PathBuf::from(OsStr::from_bytes(text.as_bytes())))
}

fn paths(o: &Object<'_>, name: &str) -> Result<Vec<PathBuf>, JsonError> {
    o.array(name)?.iter().map(path).collect()
}

/// Whether a path can travel in a request (UTF-8, absolute, no NUL).
pub fn sendable(path: &Path) -> bool {
    path.to_str()
        .is_some_and(|t| t.starts_with('/') && !t.contains('\0') && t.len() <= MAX_PATH_BYTES)
}

/// HD6 as the helper observed it (7.4); the service weighs it against the
/// declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hd6Observation {
    /// A subscription login: `authMethod` claude.ai or oauth_token, a
    /// credentials file, or `CLAUDE_CODE_OAUTH_TOKEN` in the login shell.
    pub subscription: bool,
    /// `claude auth status` or the login-shell probe gave no usable answer.
    pub status_unknown: bool,
    /// `host_service.claude_bin` is empty or counts as empty for this user.
    pub unchecked: bool,
}

/// HD11 at the locations of the session user, without the check of the entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hd11Observation {
    /// The home does not resolve.
    pub home_unresolvable: bool,
    /// A location, a folder on its way or a chain file breaks the rule.
    pub shared_location: bool,
}

/// The result of one finished check of the entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanResult {
    /// Every entry seen, none of another session user.
    Clean,
    /// An entry of another session user, or a folder that could not be read.
    ForeignEntry,
    /// Aborted after `host_service.entry_scan_timeout`.
    Timeout,
}

impl ScanResult {
    const fn as_str(self) -> &'static str {
        match self {
            ScanResult::Clean => "clean",
            ScanResult::ForeignEntry => "foreign_entry",
            ScanResult::Timeout => "timeout",
        }
    }
}

/// Where the helper's check of the entries stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanReport {
    /// The run a full request waits for (runs are numbered from 1).
    pub awaited: u64,
    /// The last finished run (0: none yet).
    pub finished: u64,
    /// Its result (`None` exactly when `finished` is 0).
    pub result: Option<ScanResult>,
}

/// The answer to a light request (and the light part of a full one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LightAnswer {
    /// Per working directory of the request: its identity, `None` when it does
    /// not resolve for this user.
    pub workdirs: Vec<Option<FileId>>,
    /// HD6.
    pub hd6: Hd6Observation,
    /// HD11 without the entries.
    pub hd11: Hd11Observation,
    /// The check of the entries.
    pub entry_scan: ScanReport,
}

/// The answer to a full request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FullAnswer {
    /// HD6, HD11, identities, the entries.
    pub light: LightAnswer,
    /// HD3: `sudo -n true` succeeded (or did not end in time).
    pub passwordless_sudo: bool,
    /// HD8: the helper could list the state directory or read a key file.
    pub reads_state: bool,
    /// HD9: the indexes of `homes` the helper could list.
    pub listable_homes: Vec<usize>,
    /// HD10: the helper's memory is not protected (`PR_GET_DUMPABLE` is 1).
    pub dumpable: bool,
}

/// Why a helper refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The request did not decode.
    BadRequest,
    /// The helper does not run as the user of the request.
    WrongUser,
}

impl Refusal {
    const fn as_str(self) -> &'static str {
        match self {
            Refusal::BadRequest => "bad_request",
            Refusal::WrongUser => "wrong_user",
        }
    }
}

/// A helper's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckAnswer {
    /// The request was refused.
    Refused(Refusal),
    /// Identities of the configured working directories.
    Identities(Vec<Option<FileId>>),
    /// A light answer.
    Light(LightAnswer),
    /// A full answer.
    Full(FullAnswer),
    /// HD3 only.
    Sudo {
        /// `sudo -n true` succeeded.
        passwordless_sudo: bool,
    },
}

const LIGHT_MEMBERS: &[&str] = &["kind", "workdirs", "hd6", "hd11", "entry_scan"];
const FULL_MEMBERS: &[&str] = &[
    "kind",
    "workdirs",
    "hd6",
    "hd11",
    "entry_scan",
    "passwordless_sudo",
    "reads_state",
    "listable_homes",
    "dumpable",
];

impl CheckAnswer {
    /// The bytes of the answer.
    pub fn encode(&self) -> Vec<u8> {
        let value = match self {
            CheckAnswer::Refused(reason) => json!({"kind": "refused", "reason": reason.as_str()}),
            CheckAnswer::Identities(ids) => {
                json!({"kind": "identities", "workdirs": ids_value(ids)})
            }
            CheckAnswer::Light(light) => {
                let mut map = light_map(light);
                map.insert("kind".into(), "light".into());
                Value::Object(map)
            }
            CheckAnswer::Full(full) => {
                let mut map = light_map(&full.light);
                map.insert("kind".into(), "full".into());
                map.insert("passwordless_sudo".into(), full.passwordless_sudo.into());
                map.insert("reads_state".into(), full.reads_state.into());
                map.insert("listable_homes".into(), full.listable_homes.clone().into());
                map.insert("dumpable".into(), full.dumpable.into());
                Value::Object(map)
            }
            CheckAnswer::Sudo { passwordless_sudo } => {
                json!({"kind": "sudo", "passwordless_sudo": passwordless_sudo})
            }
        };
        serde_json::to_vec(&value).unwrap_or_default()
    }

    /// Decodes an answer strictly.
    pub fn decode(bytes: &[u8]) -> Result<CheckAnswer, JsonError> {
        let value = json::parse(bytes, MAX_WIRE_BYTES)?;
        let kind_member = Member::new(&value, String::new())
            .into_object(
                FULL_MEMBERS
                    .iter()
                    .chain(&["reason"])
                    .copied()
                    .collect::<Vec<_>>()
                    .as_slice(),
            )?
            .member("kind")?;
        let kind = kind_member.as_str()?;
        Ok(match kind {
            "refused" => {
                let o = Object::root(&value, &["kind", "reason"])?;
                let reason = o.member("reason")?;
                CheckAnswer::Refused(match reason.as_str()? {
                    "bad_request" => Refusal::BadRequest,
                    "wrong_user" => Refusal::WrongUser,
                    _ => return Err(reason.invalid()),
                })
            }
            "identities" => {
                let o = Object::root(&value, &["kind", "workdirs"])?;
                CheckAnswer::Identities(ids(&o)?)
            }
            "light" => CheckAnswer::Light(light(&Object::root(&value, LIGHT_MEMBERS)?)?),
            "full" => {
                let o = Object::root(&value, FULL_MEMBERS)?;
                CheckAnswer::Full(FullAnswer {
                    light: light(&o)?,
                    passwordless_sudo: o.bool("passwordless_sudo")?,
                    reads_state: o.bool("reads_state")?,
                    listable_homes: o
                        .array("listable_homes")?
                        .iter()
                        .map(|m| m.as_uint::<usize>())
                        .collect::<Result<Vec<_>, _>>()?,
                    dumpable: o.bool("dumpable")?,
                })
            }
            "sudo" => {
                let o = Object::root(&value, &["kind", "passwordless_sudo"])?;
                CheckAnswer::Sudo {
                    passwordless_sudo: o.bool("passwordless_sudo")?,
                }
            }
            _ => return Err(kind_member.invalid()),
        })
    }
}

fn ids_value(ids: &[Option<FileId>]) -> Value {
    Value::Array(
        ids.iter()
            .map(|id| match id {
                Some(id) => json!({"dev": id.dev, "ino": id.ino}),
                None => json!({}),
            })
            .collect(),
    )
}

fn light_map(light: &LightAnswer) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("workdirs".into(), ids_value(&light.workdirs));
    map.insert(
        "hd6".into(),
        json!({
            "subscription": light.hd6.subscription,
            "status_unknown": light.hd6.status_unknown,
            "unchecked": light.hd6.unchecked,
        }),
    );
    map.insert(
        "hd11".into(),
        json!({
            "home_unresolvable": light.hd11.home_unresolvable,
            "shared_location": light.hd11.shared_location,
        }),
    );
    map.insert(
        "entry_scan".into(),
        json!({
            "awaited": light.entry_scan.awaited,
            "finished": light.entry_scan.finished,
            "result": light.entry_scan.result.map_or("none", ScanResult::as_str),
        }),
    );
    map
}

fn ids(o: &Object<'_>) -> Result<Vec<Option<FileId>>, JsonError> {
    o.array("workdirs")?
        .iter()
        .map(|m| {
            let id = m.into_object(&["dev", "ino"])?;
            match (id.has("dev"), id.has("ino")) {
                (false, false) => Ok(None),
                _ => Ok(Some(FileId {
                    dev: id.uint("dev")?,
                    ino: id.uint("ino")?,
                })),
            }
        })
        .collect()
}

fn light(o: &Object<'_>) -> Result<LightAnswer, JsonError> {
    let hd6 = o.object("hd6", &["subscription", "status_unknown", "unchecked"])?;
    let hd11 = o.object("hd11", &["home_unresolvable", "shared_location"])?;
    let scan = o.object("entry_scan", &["awaited", "finished", "result"])?;
    let finished: u64 = scan.uint("finished")?;
    let result_member = scan.member("result")?;
    let result = match result_member.as_str()? {
        "none" => None,
        "clean" => Some(ScanResult::Clean),
        "foreign_entry" => Some(ScanResult::ForeignEntry),
        "timeout" => Some(ScanResult::Timeout),
        _ => return Err(result_member.invalid()),
    };
    if (finished == 0) != result.is_none() {
        return Err(result_member.invalid());
    }
    Ok(LightAnswer {
        workdirs: ids(o)?,
        hd6: Hd6Observation {
            subscription: hd6.bool("subscription")?,
            status_unknown: hd6.bool("status_unknown")?,
            unchecked: hd6.bool("unchecked")?,
        },
        hd11: Hd11Observation {
            home_unresolvable: hd11.bool("home_unresolvable")?,
            shared_location: hd11.bool("shared_location")?,
        },
        entry_scan: ScanReport {
            awaited: scan.uint("awaited")?,
            finished,
            result,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample_request() -> CheckRequest {
        CheckRequest {
            kind: RequestKind::Full,
            uid: 1001,
            home: "/home/a".into(),
            shell: "/bin/bash".into(),
            others: vec![Account {
                uid: 1002,
                gids: vec![1002, 27],
            }],
            declaration: Some(LlmCredentials::Organization),
            claude_bin: Some("/usr/local/bin/claude".into()),
            search_tail: vec!["/usr/bin".into(), "/bin".into()],
            workdirs: vec!["/srv/a".into()],
            state_dir: "/var/lib/bothy-host".into(),
            key_files: vec!["/var/lib/bothy-host/keys".into()],
            homes: vec!["/root".into()],
            sudo: vec!["/usr/bin/sudo".into()],
            auth_status_timeout_ms: 30_000,
            entry_scan_timeout_ms: 600_000,
        }
    }

    #[test]
    fn requests_round_trip_and_refuse_strictly() {
        let request = sample_request();
        assert_eq!(CheckRequest::decode(&request.encode()), Ok(request.clone()));
        let without = CheckRequest {
            claude_bin: None,
            declaration: None,
            ..request.clone()
        };
        assert_eq!(CheckRequest::decode(&without.encode()), Ok(without));
        let text = String::from_utf8(request.encode()).expect("utf-8");
        for (from, to, pointer) in [
            ("\"kind\":\"full\"", "\"kind\":\"fast\"", "/kind"),
            ("\"home\":\"/home/a\"", "\"home\":\"home/a\"", "/home"),
            ("\"uid\":1001", "\"uid\":-1", "/uid"),
            (
                "\"declaration\":\"organization\"",
                "\"declaration\":\"Organization\"",
                "/declaration",
            ),
            ("\"uid\":1001", "\"uid\":1001,\"extra\":1", "/extra"),
            (
                "\"claude_bin\":\"/usr/local/bin/claude\"",
                "\"claude_bin\":null",
                "/claude_bin",
            ),
        ] {
            let changed = text.replacen(from, to, 1);
            assert_ne!(changed, text, "{from}");
            let e = CheckRequest::decode(changed.as_bytes()).expect_err(&changed);
            assert_eq!(e.pointer(), Some(pointer), "{changed}: {e}");
        }
        let missing = text.replacen("\"sudo\":[\"/usr/bin/sudo\"],", "", 1);
        assert!(matches!(
            CheckRequest::decode(missing.as_bytes()),
            Err(JsonError::MissingMember { .. })
        ));
    }

    #[test]
    fn answers_round_trip_and_refuse_strictly() {
        let light = LightAnswer {
            workdirs: vec![
                Some(FileId {
                    dev: 1,
                    ino: u64::MAX,
                }),
                None,
            ],
            hd6: Hd6Observation {
                subscription: true,
                status_unknown: false,
                unchecked: true,
            },
            hd11: Hd11Observation {
                home_unresolvable: false,
                shared_location: true,
            },
            entry_scan: ScanReport {
                awaited: 2,
                finished: 1,
                result: Some(ScanResult::ForeignEntry),
            },
        };
        for answer in [
            CheckAnswer::Refused(Refusal::WrongUser),
            CheckAnswer::Identities(vec![None, Some(FileId { dev: 3, ino: 4 })]),
            CheckAnswer::Light(light.clone()),
            CheckAnswer::Full(FullAnswer {
                light,
                passwordless_sudo: true,
                reads_state: false,
                listable_homes: vec![0, 5],
                dumpable: false,
            }),
            CheckAnswer::Sudo {
                passwordless_sudo: false,
            },
        ] {
            let bytes = answer.encode();
            assert_eq!(CheckAnswer::decode(&bytes), Ok(answer.clone()));
        }
        for bad in [
            r#"{"kind":"sudo"}"#,
            r#"{"kind":"sudo","passwordless_sudo":true,"reads_state":true}"#,
            r#"{"kind":"identities","workdirs":[{"dev":1}]}"#,
            r#"{"kind":"identities","workdirs":[{"dev":1,"ino":2,"x":3}]}"#,
            r#"{"kind":"refused","reason":"other"}"#,
            r#"{"kind":"what"}"#,
            r#"{"kind":"light","workdirs":[],"hd6":{"subscription":false,"status_unknown":false,"unchecked":false},"hd11":{"home_unresolvable":false,"shared_location":false},"entry_scan":{"awaited":1,"finished":0,"result":"clean"}}"#,
            r#"{"kind":"light","workdirs":[],"hd6":{"subscription":false,"status_unknown":false,"unchecked":false},"hd11":{"home_unresolvable":false,"shared_location":false},"entry_scan":{"awaited":1,"finished":1,"result":"none"}}"#,
            r#"[]"#,
            "",
        ] {
            assert!(CheckAnswer::decode(bad.as_bytes()).is_err(), "{bad}");
        }
        let ok = r#"{"kind":"light","workdirs":[],"hd6":{"subscription":false,"status_unknown":false,"unchecked":false},"hd11":{"home_unresolvable":false,"shared_location":false},"entry_scan":{"awaited":1,"finished":0,"result":"none"}}"#;
        assert!(CheckAnswer::decode(ok.as_bytes()).is_ok());
    }
}
