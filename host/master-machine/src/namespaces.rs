//! Namespaces: which team a job belongs to, and what a caller confined to
//! one may see.
//!
//! Every job belongs to one namespace, given at submission
//! ([`JobOptions::namespace`]); `None` is the default namespace, named
//! [`DEFAULT`] on the API and never written by its name, so a cluster
//! that uses none stores nothing more. A job of another namespace is
//! recorded in `Namespaces::jobs`, from its submission until it is
//! forgotten (retention), whether it is running or finished, so a
//! finished job is as confined as a running one; the map is replicated
//! in every snapshot (version 14 on) and rebuilt from the journal like
//! the rest.
//!
//! A token may be confined to one namespace ([`TokenRecord::namespace`]);
//! the host then asks its job and DAG queries through
//! [`Query::InNamespace`], answered here: a job of another namespace is
//! `job_not_found` (a DAG `dag_not_found`), with
//! the message of a job that never was, and so is a removed one, so a
//! confined caller cannot tell another team's job from no job. Listings,
//! bulk counts and waits see the namespace's jobs only.
//!
//! Idempotency and uniqueness keys belong to their namespace: two teams
//! using the same key get two jobs, and neither learns of the other's.
//! Key limits (concurrency and rate keys) stay cluster-wide on purpose:
//! they guard a shared resource (one database's connections), whoever
//! submits.
//!
//! Job ids stay one dense sequence for the cluster: an id says how many
//! jobs the cluster took before it, not whose they were.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::index::Index;
use crate::limits::{NAMESPACES_MAX, NAMESPACES_NAME_BYTES_MAX};
use crate::master::{Master, no_job, reject};
use crate::protocol::*;

/// The default namespace's name on the API.
pub const DEFAULT: &str = "default";

/// Whether `name` may name a namespace: 1 to
/// [`NAMESPACES_NAME_BYTES_MAX`] of `a-z 0-9 -`, starting with a letter or
/// digit; `Err` says why not.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= NAMESPACES_NAME_BYTES_MAX
        && !name.starts_with('-')
        && (name.bytes()).all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    match valid {
        true => Ok(()),
        false => Err(format!(
            "namespace {name:?}: 1 to {NAMESPACES_NAME_BYTES_MAX} of a-z, 0-9 and -, not starting with -"
        )),
    }
}

/// The key a namespace's idempotency key of a DAG, or uniqueness key, is
/// kept under: itself in the default namespace, `NAMESPACE\0KEY` in
/// another, so that each namespace's keys are its own (keys hold no NUL,
/// namespace names neither).
pub(crate) fn scoped_key<'a>(namespace: Option<&str>, key: &'a str) -> std::borrow::Cow<'a, str> {
    match namespace {
        Some(namespace) => format!("{namespace}\0{key}").into(),
        None => key.into(),
    }
}

/// `namespace` as the master keeps it: the default one as `None`, also
/// when a journal spells it out.
pub(crate) fn canonical(namespace: Option<&str>) -> Option<&str> {
    namespace.filter(|&name| name != DEFAULT)
}

/// Keeps what a restored snapshot holds within the master's bounds: at
/// most [`NAMESPACES_MAX`] namespaces' totals, and no job recorded in the
/// default namespace by name.
pub(crate) fn bounded(mut namespaces: Namespaces) -> Namespaces {
    while namespaces.totals.len() > NAMESPACES_MAX {
        namespaces.totals.pop_last();
    }
    namespaces.jobs.retain(|_, name| name.as_str() != DEFAULT);
    namespaces
}

/// A job's namespace as the API names it.
pub fn name_of(namespace: Option<&str>) -> &str {
    namespace.unwrap_or(DEFAULT)
}

/// The jobs of namespaces other than the default one, by id, and what
/// each namespace ever submitted and spent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespaces {
    pub(crate) jobs: BTreeMap<JobId, String>,
    /// Each namespace's totals since its first job, by name (the default
    /// one's as `default`); at most
    /// [`NAMESPACES_MAX`](crate::limits::NAMESPACES_MAX) names.
    pub(crate) totals: BTreeMap<String, NamespaceTotals>,
}

/// What a namespace submitted and what its attempts cost, counted as they
/// are journaled (a job purged later still counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceTotals {
    /// Jobs submitted (a DAG's and a schedule's included).
    pub submitted: u64,
    /// Attempts whose worker said what they cost.
    pub attempts_metered: u64,
    /// Their CPU time, in microseconds.
    pub cpu_us: u64,
    /// Their outbound body bytes, both ways.
    pub egress_bytes: u64,
}

impl Namespaces {
    /// Records job `id`'s namespace (the default one is not recorded),
    /// and the job among `index`'s jobs of its namespace.
    pub(crate) fn record(&mut self, index: &mut Index, id: JobId, namespace: Option<&str>) {
        // A journal's id submitted twice replaces the first's record.
        self.forget(index, id);
        if let Some(name) = namespace {
            self.jobs.insert(id, name.to_owned());
            match index.namespace_jobs.get_mut(name) {
                Some(ids) => drop(ids.insert(id)),
                None => drop(
                    index
                        .namespace_jobs
                        .insert(name.to_owned(), BTreeSet::from([id])),
                ),
            }
        }
    }

    /// Forgets job `id`'s namespace (a purged job), in `index` too.
    pub(crate) fn forget(&mut self, index: &mut Index, id: JobId) {
        let Some(name) = self.jobs.remove(&id) else {
            return;
        };
        if let Some(ids) = index.namespace_jobs.get_mut(&name) {
            ids.remove(&id);
            if ids.is_empty() {
                index.namespace_jobs.remove(&name);
            }
        }
    }

    /// Job `id`'s namespace (`None`: the default one).
    pub(crate) fn of(&self, id: JobId) -> Option<&str> {
        self.jobs.get(&id).map(String::as_str)
    }

    /// Whether job `id` is in the namespace the API names `name`.
    pub(crate) fn holds(&self, name: &str, id: JobId) -> bool {
        name_of(self.of(id)) == name
    }

    /// Counts a job submitted in `namespace`.
    pub(crate) fn submitted(&mut self, namespace: Option<&str>) {
        let name = name_of(namespace);
        // A known name costs no allocation: this runs for every job.
        if let Some(totals) = self.totals.get_mut(name) {
            totals.submitted += 1;
        } else if self.totals.len() < NAMESPACES_MAX {
            // Bounded by the decision, which refuses a new name past the
            // bound; a hostile journal may only add to the names it has.
            let totals = NamespaceTotals {
                submitted: 1,
                ..NamespaceTotals::default()
            };
            self.totals.insert(name.to_owned(), totals);
        }
    }

    /// Charges job `id`'s namespace for an attempt that cost `usage`.
    pub(crate) fn charge(&mut self, id: JobId, usage: Usage) {
        let name = name_of(self.jobs.get(&id).map(String::as_str));
        if let Some(totals) = self.totals.get_mut(name) {
            totals.attempts_metered += 1;
            totals.cpu_us = totals.cpu_us.saturating_add(usage.cpu_us);
            totals.egress_bytes = totals.egress_bytes.saturating_add(usage.egress_bytes);
        }
    }

    /// Whether the master knows the namespace the API names `name`, making
    /// it known when there is room (a namespace given quotas before its
    /// first job).
    pub(crate) fn known(&mut self, name: &str) -> bool {
        if self.totals.contains_key(name) {
            return true;
        }
        if self.totals.len() >= NAMESPACES_MAX {
            return false;
        }
        self.totals
            .insert(name.to_owned(), NamespaceTotals::default());
        true
    }

    /// Whether namespace `name` may be given a setting (quotas, a weight):
    /// a name that can be one, and, when the setting is kept (`kept`: not
    /// the default's none), room for it if the master does not know it.
    pub(crate) fn check_setting(&self, name: &str, kept: bool) -> Result<(), Rejection> {
        check_name(name).or_else(|why| reject(codes::INVALID_NAMESPACE, why))?;
        match kept && !self.totals.contains_key(name) {
            true => self.check_room(Some(name)),
            false => Ok(()),
        }
    }

    /// Whether a job may be submitted in `namespace`: refused when it is a
    /// new name and the master knows as many as it may.
    pub(crate) fn check_room(&self, namespace: Option<&str>) -> Result<(), Rejection> {
        let name = name_of(namespace);
        if self.totals.len() >= NAMESPACES_MAX && !self.totals.contains_key(name) {
            return reject(
                codes::NAMESPACES_FULL,
                format!(
                    "namespace {name:?}: the cluster has {NAMESPACES_MAX} namespaces, the most it keeps"
                ),
            );
        }
        Ok(())
    }
}

/// Refuses the options' namespace if it cannot name one, or names the
/// default one by its name (it is written as none).
pub(crate) fn validate(options: &JobOptions) -> Result<(), Rejection> {
    let Some(name) = &options.namespace else {
        return Ok(());
    };
    if name == DEFAULT {
        return reject(
            codes::INVALID_NAMESPACE,
            "the default namespace is given as none, not by its name",
        );
    }
    check_name(name).or_else(|why| reject(codes::INVALID_NAMESPACE, why))
}

impl Master {
    /// Answers [`Query::InNamespace`]: `query` as seen from `namespace`.
    pub(crate) fn query_in_namespace(
        &self,
        now: Millis,
        namespace: &str,
        query: &Query,
    ) -> Result<Answer, Rejection> {
        check_name(namespace).or_else(|why| reject(codes::INVALID_NAMESPACE, why))?;
        // Whether a job is held, not the job: a finished one stays packed.
        let seen = |id: JobId| self.holds(id) && self.namespaces.holds(namespace, id);
        let visible = |id: JobId| match seen(id) {
            true => Ok(()),
            false => Err(no_job(id)),
        };
        let scoped = |filter: &JobFilter| JobFilter {
            namespace: Some(namespace.to_owned()),
            ..filter.clone()
        };
        match query {
            Query::Job { id } | Query::Result { id } | Query::Input { id } => {
                visible(*id)?;
                self.query(now, query)
            }
            Query::Dag { id } => {
                // A DAG's jobs share its namespace: any it still holds says
                // which (a DAG goes with its last job).
                let held = (self.dags.dags.get(id))
                    .and_then(|dag| dag.jobs.iter().find(|&&job| self.holds(job)));
                match held {
                    Some(&job) if self.namespaces.holds(namespace, job) => self.query(now, query),
                    _ => reject(codes::DAG_NOT_FOUND, format!("no DAG {id}")),
                }
            }
            Query::Jobs {
                filter,
                after,
                limit,
                newest_first,
            } => self.query(
                now,
                &Query::Jobs {
                    filter: scoped(filter),
                    after: *after,
                    limit: *limit,
                    newest_first: *newest_first,
                },
            ),
            Query::Bulk { action, filter } => self.query(
                now,
                &Query::Bulk {
                    action: *action,
                    filter: scoped(filter),
                },
            ),
            Query::Finished {
                ids,
                output_max,
                output_total,
            } => {
                let (mine, others): (Vec<JobId>, Vec<JobId>) =
                    ids.iter().partition(|&&id| seen(id));
                let Answer::Finished(mut finished) = self.query(
                    now,
                    &Query::Finished {
                        ids: mine,
                        output_max: *output_max,
                        output_total: *output_total,
                    },
                )?
                else {
                    unreachable!("a Finished query is answered as such")
                };
                finished.extend(others.into_iter().map(|id| Finished {
                    id,
                    state: None,
                    error: Some(Failure::from(no_job(id))),
                    output: None,
                    output_bytes: None,
                    outputs: Vec::new(),
                }));
                // In the order asked, as a cluster-wide answer is.
                let order: BTreeMap<JobId, usize> =
                    ids.iter().enumerate().map(|(at, &id)| (id, at)).collect();
                finished.sort_by_key(|f| order.get(&f.id).copied());
                Ok(Answer::Finished(finished))
            }
            Query::Namespaces => {
                let mut views = self.namespaces_view();
                views.retain(|view| view.name == namespace);
                Ok(Answer::Namespaces(views))
            }
            Query::Schedules => {
                let views = (self.schedules.values())
                    .filter(|schedule| schedule.is_of(namespace))
                    .map(|schedule| schedule.view())
                    .collect();
                Ok(Answer::Schedules(views))
            }
            Query::Schedule { name } => {
                let schedule = self.schedule_in(namespace, name)?;
                Ok(Answer::Schedule(Box::new(schedule.view())))
            }
            _ => reject(
                codes::INVALID_NAMESPACE,
                "this query is cluster-wide: a namespace's caller cannot ask it",
            ),
        }
    }

    /// Every namespace that ever held a job, by name ([`Query::Namespaces`]):
    /// the default one's counts are the cluster's less the others'.
    pub(crate) fn namespaces_view(&self) -> Vec<NamespaceView> {
        let default_jobs = self.index.default_counts;
        (self.namespaces.totals.iter())
            .map(|(name, totals)| NamespaceView {
                name: name.clone(),
                jobs: match name.as_str() {
                    DEFAULT => default_jobs,
                    _ => (self.index.namespace_counts.get(name))
                        .copied()
                        .unwrap_or_default(),
                },
                totals: *totals,
                quotas: self.quotas.of(name),
                result_bytes: (self.index).result_bytes_in(canonical(Some(name))),
                weight: self.shares.weight(name),
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "namespaces_tests.rs"]
mod namespaces_tests;
