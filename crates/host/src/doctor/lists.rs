//! HD7 (spec 2.2, table of checks): the lists of working directories the
//! helpers' identities leave after a full run, a working directory that
//! drifts into another user's list since (HD11), and the profiles the host
//! offers after HD7 (11.1).

use std::collections::{HashMap, HashSet};

use bothy_proto::control::LlmCredentials;
use bothy_proto::report::{ProfileKind, ReportedProfile};

use super::requests::{ask_all, request};
use super::service_side::ServiceFindings;
use super::terms::FileId;
use super::wire::{CheckAnswer, CheckRequest, Refusal, RequestKind};
use super::{Asked, Doctor, HelperFault, HelperPort, ListedWorkdir, ServiceContext};

impl Doctor {
    /// HD7's lists from the identities every helper reports for its configured
    /// working directories.
    pub(super) async fn build_lists<P: HelperPort>(
        &mut self,
        ctx: &ServiceContext<'_>,
        findings: &ServiceFindings,
        helpers: &P,
    ) {
        let config = ctx.config;
        let mut dropped = config
            .claude_workdirs
            .iter()
            .any(|w| !w.workdirs.is_empty() && !findings.asked.iter().any(|u| u.name == w.user));
        let requests: Vec<(String, CheckRequest)> = findings
            .asked
            .iter()
            .map(|u| {
                let configured = config.workdirs_of(&u.name);
                let workdirs = configured.iter().map(|w| w.path.clone()).collect();
                (
                    u.name.clone(),
                    request(
                        ctx,
                        &self.places,
                        &findings.asked,
                        &findings.homes,
                        u,
                        RequestKind::Identities,
                        workdirs,
                    ),
                )
            })
            .collect();
        let mut ids: HashMap<String, Vec<Option<FileId>>> = HashMap::new();
        for Asked {
            name,
            request: req,
            answer,
        } in ask_all(helpers, requests).await
        {
            let got = match answer.map(|bytes| CheckAnswer::decode(&bytes)) {
                Ok(Ok(CheckAnswer::Identities(list))) if list.len() == req.workdirs.len() => list,
                Ok(Ok(CheckAnswer::Refused(Refusal::WrongUser))) => {
                    self.record(&name).fault = Some(HelperFault::PeerMismatch);
                    vec![None; req.workdirs.len()]
                }
                Err(fault) => {
                    self.record(&name).fault = Some(fault);
                    vec![None; req.workdirs.len()]
                }
                Ok(_) => {
                    self.record(&name).fault = Some(HelperFault::Unreachable);
                    vec![None; req.workdirs.len()]
                }
            };
            ids.insert(name, got);
        }
        let mut owners: HashMap<FileId, HashSet<&str>> = HashMap::new();
        for (name, list) in &ids {
            for id in list.iter().flatten() {
                owners.entry(*id).or_default().insert(name.as_str());
            }
        }
        let mut lists: Vec<(String, Vec<ListedWorkdir>)> = Vec::new();
        for user in &findings.asked {
            let configured = config.workdirs_of(&user.name);
            let list = ids.get(&user.name).cloned().unwrap_or_default();
            let mut kept = Vec::new();
            for (workdir, id) in configured.iter().zip(list) {
                match id {
                    Some(id) if owners.get(&id).is_some_and(|o| o.len() == 1) => {
                        kept.push(ListedWorkdir {
                            path: workdir.path.clone(),
                            display_name: workdir.display_name.clone(),
                            id,
                        });
                    }
                    _ => dropped = true,
                }
            }
            lists.push((user.name.clone(), kept));
        }
        for (name, list) in lists {
            self.record(&name).workdirs = list;
        }
        self.workdir_dropped = dropped;
    }

    /// HD11 for a working directory that resolves now into a folder of another
    /// user's list (HD7 built the lists earlier).
    pub(super) fn drift(&mut self) {
        let listed: Vec<(String, FileId)> = self
            .users
            .iter()
            .flat_map(|(name, r)| r.workdirs.iter().map(move |w| (name.clone(), w.id)))
            .collect();
        for (name, record) in &mut self.users {
            let Some(light) = &record.light else { continue };
            record.drift = record
                .workdirs
                .iter()
                .zip(&light.workdirs)
                .any(|(listed_dir, now)| match now {
                    Some(now) if *now != listed_dir.id => {
                        listed.iter().any(|(other, id)| other != name && id == now)
                    }
                    _ => false,
                });
        }
    }

    /// The profiles after HD7 (11.1).
    pub(super) fn finish_profiles(&mut self, ctx: &ServiceContext<'_>, findings: &ServiceFindings) {
        let any_workdir = self.users.values().any(|r| !r.workdirs.is_empty());
        let mut profiles = Vec::new();
        let mut claude_unavailable = false;
        let mut profile_dropped = false;
        for (i, profile) in ctx.config.profiles.iter().enumerate() {
            let keep = match profile.kind {
                ProfileKind::Shell => true,
                ProfileKind::Command => {
                    let present = findings.program_present.get(i).copied().unwrap_or(false);
                    profile_dropped |= !present;
                    present
                }
                ProfileKind::Claude => match ctx.declaration {
                    Some(LlmCredentials::Organization) => {
                        let usable = findings.claude_usable && any_workdir;
                        claude_unavailable |= !usable;
                        usable
                    }
                    Some(LlmCredentials::Personal) => {
                        claude_unavailable |= !any_workdir;
                        any_workdir
                    }
                    Some(LlmCredentials::None) | None => false,
                },
            };
            if keep {
                profiles.push(ReportedProfile {
                    name: profile.name.clone(),
                    display_name: profile.display_name.clone(),
                    kind: profile.kind,
                });
            }
        }
        self.profiles = profiles;
        self.claude_unavailable = claude_unavailable;
        self.profile_dropped = profile_dropped;
    }
}
