//! Deployments: module names that point at a module digest, with their
//! versions, so a job (a DAG's job, a schedule) may name its module by
//! name (`cohort deploy send-email ./job.wasm`).
//!
//! A [`Command::Deploy`] points a name at a digest: a new version (from 1
//! per name), unless the digest is the current version's (then nothing
//! changes and the reply says `existing`). A [`Command::Rollback`] makes a
//! new version with an earlier version's digest (`rollback_of` says
//! which): with no target, the version current before the current one, so
//! two rollbacks in a row flip between two versions (as `kubectl rollout
//! undo`); with `to`, that version, if still kept. A
//! [`Command::Undeploy`] removes the name and its history, unless a
//! schedule names it (`module_name_in_use`); jobs and DAGs submitted by
//! the name keep the digest they were resolved to and do not block it.
//!
//! A submission whose [`JobOptions::module`] names a deployment is
//! resolved when it is decided: its `Submitted` event carries the current
//! digest as `spec.module` (and the name in its options). A schedule keeps
//! the name, and each firing runs the digest current when it is applied
//! (the master applies a tick's events before it decides the next
//! command, so that is the digest current at the tick's decision): a
//! deploy between two firings changes what the next one runs. The name
//! and the version current at submission are recorded per job
//! (`Deployments::jobs`) until retention purges the job.
//!
//! Invariants: at most [`MODULE_NAMES_MAX`] names and
//! [`MODULE_VERSIONS_KEPT`] versions per name (the oldest are forgotten;
//! their numbers are never reused while the name exists); two consecutive
//! versions of a name have different digests. Version numbers restart at
//! 1 after an undeploy: the history is gone with the name, and a job
//! record's version then refers to the deployment of its time. Kept in
//! snapshots from version 6 (an older snapshot restores with none).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::limits::{MODULE_NAME_BYTES_MAX, MODULE_NAMES_MAX, MODULE_VERSIONS_KEPT};
use crate::master::{Master, reject};
use crate::protocol::*;

/// Whether `name` may name a deployment: 1 to [`MODULE_NAME_BYTES_MAX`]
/// bytes of `a-z 0-9 . _ -`, the first a letter or a digit. Shorter than a
/// sha256 in hex, so a name is never taken for a digest.
pub fn valid_module_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(b);
    (1..=MODULE_NAME_BYTES_MAX).contains(&bytes.len())
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes.iter().all(allowed)
}

/// The rejection of an invalid name, naming `field`.
fn invalid_name(field: &str, name: &str) -> Rejection {
    Rejection::new(
        codes::INVALID_MODULE_NAME,
        format!(
            "{field}: {name:?} is no module name (1 to {MODULE_NAME_BYTES_MAX} bytes of a-z 0-9 . _ -, \
             starting with a letter or a digit)"
        ),
    )
}

/// The deployments and the jobs submitted by a name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Deployments {
    /// Deployments by name.
    pub(crate) names: BTreeMap<String, Deployment>,
    /// Each held job submitted by a module name: the name (shared with its
    /// deployment's, one allocation per name) and the version current at
    /// submission (0: none was, in a journal that named an unknown
    /// deployment). Dropped when the job is purged.
    pub(crate) jobs: BTreeMap<JobId, (Arc<str>, u32)>,
}

/// One name's versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deployment {
    /// The name, shared with the records of its jobs.
    pub(crate) name: Arc<str>,
    /// The versions kept, oldest first; the last is current (never empty).
    pub(crate) versions: VecDeque<ModuleVersion>,
}

impl Deployment {
    pub(crate) fn current(&self) -> &ModuleVersion {
        self.versions.back().expect("a deployment has a version")
    }

    /// The view of it, with its versions newest first when `versions`.
    fn view(&self, versions: bool, grants: &[HttpGrant], secrets: &[String]) -> DeploymentView {
        DeploymentView {
            name: self.name.to_string(),
            current: self.current().clone(),
            versions: match versions {
                true => self.versions.iter().rev().cloned().collect(),
                false => Vec::new(),
            },
            versions_total: self.current().version,
            grants: grants.to_vec(),
            secrets: secrets.to_vec(),
        }
    }

    /// The kept version `number`.
    fn version(&self, number: u32) -> Option<&ModuleVersion> {
        self.versions.iter().find(|v| v.version == number)
    }
}

impl Deployments {
    /// The version job `id` was submitted by name with, and the name.
    pub(crate) fn of_job(&self, id: JobId) -> Option<(&str, Option<u32>)> {
        let (name, version) = self.jobs.get(&id)?;
        Some((name, (*version > 0).then_some(*version)))
    }

    /// The digest `options` name, current now (`None`: no name, or one no
    /// deployment has).
    pub(crate) fn digest(&self, options: &JobOptions) -> Option<Digest> {
        let name = options.module.as_deref()?;
        Some(self.names.get(name)?.current().digest)
    }

    /// Records that job `id` was submitted by `name`, running `digest`.
    pub(crate) fn record_job(&mut self, id: JobId, name: &str, digest: &Digest) {
        let record = match self.names.get(name) {
            Some(deployment) => {
                let current = deployment.current();
                // A journal is decoded, not trusted: a digest that is not
                // the current one's is the newest kept version with it.
                let version = match current.digest == *digest {
                    true => Some(current.version),
                    false => (deployment.versions.iter().rev())
                        .find(|v| v.digest == *digest)
                        .map(|v| v.version),
                };
                (deployment.name.clone(), version.unwrap_or(0))
            }
            None => (Arc::from(name), 0),
        };
        self.jobs.insert(id, record);
    }
}

/// A snapshot holds the deployments as their versions by name, then the
/// job records grouped by name (each name written once): `(map of name to
/// versions oldest first, map of name to [(job, version)] by job)`.
impl Serialize for Deployments {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let names: BTreeMap<&str, &VecDeque<ModuleVersion>> = (self.names.iter())
            .map(|(name, deployment)| (name.as_str(), &deployment.versions))
            .collect();
        let mut jobs: BTreeMap<&str, Vec<(JobId, u32)>> = BTreeMap::new();
        for (&id, (name, version)) in &self.jobs {
            jobs.entry(name).or_default().push((id, *version));
        }
        (names, jobs).serialize(serializer)
    }
}

/// Decoded, not trusted: a name without versions is dropped, and only the
/// newest [`MODULE_VERSIONS_KEPT`] versions are kept.
impl<'de> Deserialize<'de> for Deployments {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        type Form = (
            BTreeMap<String, VecDeque<ModuleVersion>>,
            BTreeMap<String, Vec<(JobId, u32)>>,
        );
        let (names, jobs) = Form::deserialize(deserializer)?;
        let mut deployments = Deployments::default();
        for (name, mut versions) in names {
            while versions.len() > MODULE_VERSIONS_KEPT {
                versions.pop_front();
            }
            if !versions.is_empty() {
                let deployment = Deployment {
                    name: Arc::from(name.as_str()),
                    versions,
                };
                deployments.names.insert(name, deployment);
            }
        }
        for (name, records) in jobs {
            let shared: Arc<str> = match deployments.names.get(&name) {
                Some(deployment) => deployment.name.clone(),
                None => Arc::from(name),
            };
            for (id, version) in records {
                deployments.jobs.insert(id, (shared.clone(), version));
            }
        }
        Ok(deployments)
    }
}

impl Master {
    /// The deployment named `name`.
    fn deployment(&self, name: &str) -> Result<&Deployment, Rejection> {
        self.deployments.names.get(name).ok_or_else(|| {
            Rejection::new(
                codes::MODULE_NAME_NOT_FOUND,
                format!("no module is deployed as {name:?}"),
            )
        })
    }

    /// The deployment named `name`, which must be a valid name.
    pub(crate) fn deployment_named(&self, name: &str) -> Result<&Deployment, Rejection> {
        if !valid_module_name(name) {
            return Err(invalid_name("name", name));
        }
        self.deployment(name)
    }

    /// The current version of the deployment `options` name, if they name
    /// one; `field` names the options in a refusal.
    pub(crate) fn resolve(
        &self,
        field: &str,
        options: &JobOptions,
    ) -> Result<Option<&ModuleVersion>, Rejection> {
        let Some(name) = &options.module else {
            return Ok(None);
        };
        if !valid_module_name(name) {
            return Err(invalid_name(field, name));
        }
        let deployment = self
            .deployment(name)
            .map_err(|r| Rejection::new(r.code, format!("{field}: {}", r.message)))?;
        Ok(Some(deployment.current()))
    }

    /// `spec` running the module `options` name, if they name one.
    pub(crate) fn resolved_spec<'a>(
        &self,
        spec: &'a JobSpec,
        options: &JobOptions,
    ) -> Result<std::borrow::Cow<'a, JobSpec>, Rejection> {
        Ok(match self.resolve("module", options)? {
            Some(version) if version.digest != spec.module => std::borrow::Cow::Owned(JobSpec {
                module: version.digest,
                ..spec.clone()
            }),
            _ => std::borrow::Cow::Borrowed(spec),
        })
    }

    pub(crate) fn decide_deploy(
        &self,
        now: Millis,
        name: &str,
        digest: &Digest,
    ) -> Result<Decision, Rejection> {
        if !valid_module_name(name) {
            return Err(invalid_name("name", name));
        }
        let version = match self.deployments.names.get(name) {
            Some(deployment) if deployment.current().digest == *digest => {
                return Ok(deployed(Vec::new(), deployment.current(), true));
            }
            Some(deployment) => deployment.current().version,
            None if self.deployments.names.len() >= MODULE_NAMES_MAX => {
                return reject(
                    codes::MODULE_NAMES_FULL,
                    format!("at most {MODULE_NAMES_MAX} module names; undeploy some first"),
                );
            }
            None => 0,
        };
        self.new_version(now, name, *digest, version, None)
    }

    pub(crate) fn decide_rollback(
        &self,
        now: Millis,
        name: &str,
        to: Option<u32>,
    ) -> Result<Decision, Rejection> {
        if !valid_module_name(name) {
            return Err(invalid_name("name", name));
        }
        let deployment = self.deployment(name)?;
        let current = deployment.current();
        let target = match to {
            None => {
                let before = deployment.versions.len().checked_sub(2);
                before.map(|at| &deployment.versions[at]).ok_or_else(|| {
                    Rejection::new(
                        codes::NOTHING_TO_ROLL_BACK,
                        format!("{name} has no version before {}", current.version),
                    )
                })?
            }
            Some(number) => deployment.version(number).ok_or_else(|| {
                Rejection::new(
                    codes::MODULE_VERSION_NOT_FOUND,
                    format!(
                        "{name} keeps versions {} to {} (the newest {MODULE_VERSIONS_KEPT}), not {number}",
                        deployment.versions[0].version, current.version
                    ),
                )
            })?,
        };
        if target.digest == current.digest {
            return Ok(deployed(Vec::new(), current, true));
        }
        let rollback_of = Some(target.version);
        self.new_version(now, name, target.digest, current.version, rollback_of)
    }

    /// The decision making version `after + 1` of `name`, with `digest`.
    fn new_version(
        &self,
        now: Millis,
        name: &str,
        digest: Digest,
        after: u32,
        rollback_of: Option<u32>,
    ) -> Result<Decision, Rejection> {
        let Some(version) = after.checked_add(1) else {
            return reject(
                codes::MODULE_VERSION_NOT_FOUND,
                format!("{name} has used every version number; undeploy it first"),
            );
        };
        let event = Event {
            at: now,
            kind: EventKind::Deployed {
                name: name.to_owned(),
                digest,
                version,
                rollback_of,
            },
        };
        let made = ModuleVersion {
            version,
            digest,
            at: now,
            rollback_of,
        };
        Ok(deployed(vec![event], &made, false))
    }

    pub(crate) fn decide_undeploy(&self, now: Millis, name: &str) -> Result<Decision, Rejection> {
        if !valid_module_name(name) {
            return Err(invalid_name("name", name));
        }
        self.deployment(name)?;
        let user = (self.schedules.values())
            .find(|schedule| schedule.spec.options.module.as_deref() == Some(name));
        if let Some(schedule) = user {
            return reject(
                codes::MODULE_NAME_IN_USE,
                format!(
                    "schedule {} runs {name}; delete it or change its module first",
                    schedule.spec.name
                ),
            );
        }
        crate::master::decided(
            now,
            vec![EventKind::Undeployed {
                name: name.to_owned(),
            }],
        )
    }

    pub(crate) fn apply_deployed(
        &mut self,
        name: &str,
        digest: &Digest,
        version: u32,
        rollback_of: Option<u32>,
        at: Millis,
    ) {
        let deployment = (self.deployments.names)
            .entry(name.to_owned())
            .or_insert_with(|| Deployment {
                name: Arc::from(name),
                versions: VecDeque::new(),
            });
        deployment.versions.push_back(ModuleVersion {
            version,
            digest: *digest,
            at,
            rollback_of,
        });
        while deployment.versions.len() > MODULE_VERSIONS_KEPT {
            deployment.versions.pop_front();
        }
    }

    pub(crate) fn apply_undeployed(&mut self, name: &str) {
        self.deployments.names.remove(name);
        self.egress.grants.remove(name);
        self.egress.readable.remove(name);
    }

    /// Answers [`Query::Deployments`].
    pub(crate) fn deployments_view(&self) -> Vec<DeploymentView> {
        (self.deployments.names.values())
            .take(MODULE_NAMES_MAX)
            .map(|deployment| {
                let name = &deployment.name;
                deployment.view(false, self.grants_of(name), self.readable_of(name))
            })
            .collect()
    }

    /// Answers [`Query::Deployment`].
    pub(crate) fn deployment_view(&self, name: &str) -> Result<DeploymentView, Rejection> {
        Ok(self
            .deployment(name)?
            .view(true, self.grants_of(name), self.readable_of(name)))
    }
}

/// A decision of `events` replying with `version`.
fn deployed(events: Vec<Event>, version: &ModuleVersion, existing: bool) -> Decision {
    Decision {
        events,
        reply: Reply::Deployed {
            version: version.version,
            digest: version.digest,
            existing,
        },
    }
}

#[cfg(test)]
#[path = "deployments_tests.rs"]
mod deployments_tests;
