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
//! Idempotency keys belong to their namespace: two teams using the same
//! key get two jobs, and neither learns of the other's. Key limits and
//! uniqueness keys stay cluster-wide on purpose: they guard a shared
//! resource (one database's connections), whoever submits.
//!
//! Job ids stay one dense sequence for the cluster: an id says how many
//! jobs the cluster took before it, not whose they were.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limits::NAMESPACES_NAME_BYTES_MAX;
use crate::master::{Master, reject};
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

/// A job's namespace as the API names it.
pub fn name_of(namespace: Option<&str>) -> &str {
    namespace.unwrap_or(DEFAULT)
}

/// The jobs of namespaces other than the default one, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespaces {
    pub(crate) jobs: BTreeMap<JobId, String>,
}

impl Namespaces {
    /// Records job `id`'s namespace (the default one is not recorded).
    pub(crate) fn record(&mut self, id: JobId, namespace: Option<&str>) {
        match namespace {
            Some(name) => drop(self.jobs.insert(id, name.to_owned())),
            // A journal's id submitted twice replaces the first's record.
            None => drop(self.jobs.remove(&id)),
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
        let visible = |id: JobId| match self.find(id) {
            Some(_) if self.namespaces.holds(namespace, id) => Ok(()),
            _ => reject(codes::JOB_NOT_FOUND, format!("no job {id}")),
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
                    .and_then(|dag| dag.jobs.iter().find(|&&job| self.find(job).is_some()));
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
                    ids.iter().partition(|&&id| visible(id).is_ok());
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
                    error: Some(Failure {
                        code: codes::JOB_NOT_FOUND.as_str().to_owned(),
                        message: format!("no job {id}"),
                    }),
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
            _ => reject(
                codes::INVALID_NAMESPACE,
                "this query is cluster-wide: a namespace's caller cannot ask it",
            ),
        }
    }
}

#[cfg(test)]
#[path = "namespaces_tests.rs"]
mod namespaces_tests;
