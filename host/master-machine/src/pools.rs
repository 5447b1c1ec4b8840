//! Worker pools: a job starts only on a worker that has every label it
//! asks for and gives one attempt the memory it asks for.
//!
//! # What the master is told
//!
//! A worker's node starts with labels (`--labels gpu=a100,zone=eu`) and a
//! most memory per attempt (`--job-memory-max`); every poll carries them
//! as its [`WorkerPool`]. The master journals a pool only when it differs
//! from the one it knew (`WorkerPool`), keeps it per worker, drops it with
//! the worker (`WorkerLost`) and writes it in snapshots (from version 12),
//! so a master that takes over places jobs as the one before did. A
//! pool a journal or snapshot holds is decoded, not trusted: labels that
//! do not check are dropped as it is applied, and only a known worker
//! keeps one. A worker it was never told of (a journal before format 12)
//! has the default pool: no labels, memory not said.
//!
//! A job asks with [`JobOptions::labels`] (each `key=value` must be one of
//! the worker's labels) and its spec's `memory_bytes` (at most the
//! worker's `memory_max`, when said). Labels are an equality match, not
//! an expression language: that is what placement on a pool needs, and
//! it keeps each check a binary search.
//!
//! # Placement
//!
//! A runnable job that asks for anything has [`Needs`]; the index lines
//! such jobs up per namespace and distinct `Needs` (`Index::lines`)
//! instead of in the common line, and a poll merges the common line and
//! the lines of the `Needs` its pool fits (`Master::startable`; between
//! namespaces by their fair shares, see `shares`, within one in line
//! order).
//! So jobs no poller can run are never walked past: a flood of jobs for a
//! pool that has no worker costs a poll of another worker nothing, and
//! line order (priority, then first come) holds among the jobs a worker
//! may run. A limited key's line spans needs as before: the first of its
//! line is in the line of its own needs; when a later one moves up and
//! the poller cannot run it, the key waits for another poll.
//!
//! **Bound.** A poll checks its pool against each distinct `Needs` waiting
//! and merges the heads of the lines it fits, so its cost grows with the
//! number of distinct needs in line (the labels sets and memory sizes jobs
//! ask for), not with the jobs that have them: a few pools and memory
//! sizes cost a few comparisons; jobs each asking for another memory size
//! cost a check per size at every poll.
//!
//! Room is counted in slots, as for every job; memory is a ceiling per
//! attempt, not summed across a worker's running attempts.
//!
//! # A job no worker can run
//!
//! A job in line whose needs no known worker fits is *unplaceable*: its
//! view says so and [`Stats::unplaceable`] counts such jobs (the
//! index keeps a count per `Needs`, so the count costs one check per
//! distinct `Needs`). It is not refused: it runs as soon as a worker
//! that fits polls, which is how a pool is added to a running cluster.
//! Known workers are those not yet lost (see `workers`), so a pool whose
//! last worker died makes its jobs unplaceable once the worker's TTL
//! passes or its node leaves the cluster.

use std::collections::BTreeMap;

use crate::limits::{LABEL_BYTES_MAX, LABELS_MAX};
use crate::master::Master;
use crate::protocol::*;

/// What a runnable job asks of a worker beyond a free slot: its labels
/// and memory. Ordered, so that it keys the index's lines.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Needs {
    /// `(key, value)`, sorted by key.
    pub(crate) labels: Vec<(String, String)>,
    /// Memory of one attempt (0: the worker's default).
    pub(crate) memory: u64,
}

impl Needs {
    /// What a job with `labels` and `memory_bytes` asks for, or `None`
    /// when it asks for nothing (any worker runs it).
    pub(crate) fn of(labels: &[(String, String)], memory_bytes: Option<u64>) -> Option<Needs> {
        let memory = memory_bytes.unwrap_or(0);
        (!labels.is_empty() || memory > 0).then(|| Needs {
            labels: labels.to_vec(),
            memory,
        })
    }

    /// Whether a worker with `pool` may run a job that needs this.
    pub(crate) fn fit(&self, pool: &WorkerPool) -> bool {
        pool.memory_max.is_none_or(|max| self.memory <= max)
            && self.labels.iter().all(|(key, value)| {
                (pool
                    .labels
                    .binary_search_by(|(have, _)| have.as_str().cmp(key)))
                .is_ok_and(|at| pool.labels[at].1 == *value)
            })
    }
}

/// Checks labels as a job asks for them or a worker has them: at most
/// [`LABELS_MAX`], sorted by key, keys unique; a key 1 to
/// [`LABEL_BYTES_MAX`] bytes of lowercase ASCII letters, digits and `.`,
/// `_`, `-`, `/`, starting with a letter or digit; a value 1 to
/// [`LABEL_BYTES_MAX`] bytes of ASCII letters, digits and `.`, `_`, `-`.
pub fn check_labels(labels: &[(String, String)]) -> Result<(), String> {
    if labels.len() > LABELS_MAX {
        return Err(format!("at most {LABELS_MAX} labels"));
    }
    for (key, value) in labels {
        let key_ok = (1..=LABEL_BYTES_MAX).contains(&key.len())
            && key.as_bytes()[0].is_ascii_alphanumeric()
            && (key.bytes())
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b));
        if !key_ok {
            return Err(format!(
                "label key {key:?} is not 1 to {LABEL_BYTES_MAX} bytes of a-z, 0-9, '.', '_', '-', '/' starting with a letter or digit"
            ));
        }
        let value_ok = (1..=LABEL_BYTES_MAX).contains(&value.len())
            && (value.bytes()).all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !value_ok {
            return Err(format!(
                "label value {value:?} of {key:?} is not 1 to {LABEL_BYTES_MAX} bytes of letters, digits, '.', '_', '-'"
            ));
        }
    }
    if labels.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
        return Err("labels are sorted by key, each key once".into());
    }
    Ok(())
}

/// The pool of a worker the master was never told of.
static NO_POOL: WorkerPool = WorkerPool {
    labels: Vec::new(),
    memory_max: None,
};

/// Workers' pools the master was told of, by worker; a worker with the
/// default pool has no entry.
pub(crate) type Pools = BTreeMap<String, WorkerPool>;

impl Master {
    /// What job `id` asks of a worker, if anything.
    #[cfg(test)]
    pub(crate) fn needs_of(&self, id: JobId) -> Option<Needs> {
        self.keyed.needs(id, &self.jobs.get(&id)?.spec)
    }

    /// `worker`'s pool (the default if never told).
    pub(crate) fn pool_of(&self, worker: &str) -> &WorkerPool {
        self.pools.get(worker).unwrap_or(&NO_POOL)
    }

    /// The `WorkerPool` a poll by `worker` with `pool` is journaled with,
    /// if it is not the one the master knows.
    pub(crate) fn worker_pool(&self, worker: &str, pool: &WorkerPool) -> Option<EventKind> {
        (self.pool_of(worker) != pool).then(|| EventKind::WorkerPool {
            worker: worker.to_owned(),
            pool: pool.clone(),
        })
    }

    /// Applies a `WorkerPool`. A journal is decoded, not trusted: labels
    /// that do not check are dropped, so placement never reads unsorted
    /// ones, and only a known worker has a pool.
    pub(crate) fn apply_worker_pool(&mut self, worker: &str, pool: &WorkerPool) {
        let mut pool = pool.clone();
        if check_labels(&pool.labels).is_err() {
            pool.labels.clear();
        }
        if pool == NO_POOL || !self.workers.contains_key(worker) {
            self.pools.remove(worker);
        } else {
            self.pools.insert(worker.to_owned(), pool);
        }
    }

    /// Whether some known worker may run a job that needs `needs`.
    pub(crate) fn placeable(&self, needs: &Needs) -> bool {
        (self.workers.keys()).any(|worker| needs.fit(self.pool_of(worker)))
    }

    /// Whether job `id` is in line (runnable, not backing off or waiting
    /// for DAG parents) and no known worker may run it.
    pub(crate) fn unplaceable(&self, id: JobId) -> bool {
        (self.index.needs_of.get(&id)).is_some_and(|needs| !self.placeable(needs))
    }

    /// Runnable jobs no known worker may run ([`Stats::unplaceable`]).
    pub(crate) fn unplaceable_count(&self) -> u64 {
        (self.index.needs_count.iter())
            .filter(|(needs, _)| !self.placeable(needs))
            .map(|(_, count)| count)
            .sum()
    }

    /// Drops the pools of workers a snapshot does not hold.
    pub(crate) fn retain_pools(&mut self) {
        let workers = &self.workers;
        self.pools.retain(|worker, _| workers.contains_key(worker));
    }
}

#[cfg(test)]
#[path = "pools_tests.rs"]
mod pools_tests;
