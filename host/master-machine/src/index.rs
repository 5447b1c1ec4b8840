//! What the master derives from its state rather than keeps: the line of
//! runnable jobs, lease and backoff timers, counts, idempotency keys.
//!
//! The index is never journaled or snapshotted; it is rebuilt from the
//! jobs on restore ([`Master::rebuild_index`]) and kept in step by every
//! `apply`, so a restored master and the one that wrote the snapshot
//! compare equal, index included (unit tests check it). How the line is
//! ordered ([`Order`]) is a property of the master build, which is why two
//! builds that differ only there can read each other's snapshots.
//!
//! Invariant: the common line `ready` and the other [`Line`]s hold
//! together every runnable job without a key limit and exactly the first
//! of each limited key's line, each in the line of its namespace and needs
//! (see `pools`) if it has either, in `ready` if not (the default
//! namespace's jobs that need nothing of a worker); a job that waits for
//! DAG parents or a backoff is in no line. A line per namespace lets a
//! poll pass over a namespace at its quota of running attempts without
//! walking its jobs (see `quotas`). This module does not decide which
//! ready job may start (see `keys`).

use std::collections::{BTreeMap, BTreeSet};

use crate::master::{Job, Master};
use crate::pools::Needs;
use crate::protocol::*;

/// How the master lines runnable jobs up for workers: the one scheduling
/// policy a master build may choose without changing its state or events.
///
/// The line is an index rebuilt from the jobs, never journaled or
/// snapshotted, so two builds that differ only here read each other's
/// snapshots and journals and reach byte-identical states: one can be
/// switched for the other on a running cluster (`cohort master upgrade`),
/// and what changes is which job the next poll hands out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Highest priority first, first come first served within a priority
    /// (the built-in master).
    #[default]
    Priority,
    /// First come first served, whatever the priority.
    Fifo,
}

/// A runnable job's place in line: (-priority, seq, id).
pub(crate) type Place = (i64, u64, JobId);

/// A line of runnable jobs other than the common one: the jobs of one
/// namespace (`None`: the default one) with the same needs (`None`:
/// none).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Line {
    pub(crate) namespace: Option<String>,
    pub(crate) needs: Option<Needs>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Index {
    /// Runnable jobs without a key limit, and the first in line of each
    /// limited key, of the default namespace that need nothing of a
    /// worker.
    pub(crate) ready: BTreeSet<Place>,
    /// The same for the jobs of other namespaces or with needs, per
    /// namespace and needs (see `pools`, `quotas`).
    pub(crate) lines: BTreeMap<Line, BTreeSet<Place>>,
    /// The namespace of every runnable job of a namespace other than the
    /// default one (in a line or waiting in its key's).
    pub(crate) namespace_of: BTreeMap<JobId, String>,
    /// The share key of every namespace with a job in line (see
    /// `shares`) and its first place in any of its lines, kept up to date
    /// at the end of every `apply`.
    pub(crate) share_keys: BTreeMap<Option<String>, (u128, Place)>,
    /// The same ordered by key, then first place: a poll opens the
    /// namespaces in this order and stops once no namespace left could
    /// come before the jobs it has (see `Master::startable`).
    pub(crate) by_key: BTreeSet<((u128, Place), Option<String>)>,
    /// The jobs held (unfinished or finished) of each namespace other than
    /// the default one, by id: a listing or a bulk change of one
    /// namespace walks these, not every job the cluster holds.
    pub(crate) namespace_jobs: BTreeMap<String, BTreeSet<JobId>>,
    /// Namespaces whose share key or lines may have changed in the
    /// `apply` under way (empty between them).
    pub(crate) dirty: BTreeSet<Option<String>>,
    /// The needs of every runnable job that has any (in a [`Line`] or
    /// waiting in its key's).
    pub(crate) needs_of: BTreeMap<JobId, Needs>,
    /// How many runnable jobs have each needs.
    pub(crate) needs_count: BTreeMap<Needs, u64>,
    /// Runnable jobs per limited key, in line.
    pub(crate) key_ready: BTreeMap<String, BTreeSet<Place>>,
    /// Running attempts per limited key.
    pub(crate) key_running: BTreeMap<String, u32>,
    /// Uniqueness holds by their end: (until, key).
    pub(crate) unique_until: BTreeSet<(Millis, String)>,
    /// Limited keys by their latest start: (at, key).
    pub(crate) latest_start: BTreeSet<(Millis, String)>,
    /// Jobs backing off: (not_before, id).
    pub(crate) delayed: BTreeSet<(Millis, JobId)>,
    /// Running attempts: (lease_until, id).
    pub(crate) leases: BTreeSet<(Millis, JobId)>,
    /// Finished jobs: (finished_at, id).
    pub(crate) finished: BTreeSet<(Millis, JobId)>,
    /// Idempotency keys by (namespace, key) (see `namespaces`).
    pub(crate) keys: BTreeMap<(Option<String>, String), JobId>,
    /// Jobs per state of each namespace but the default one.
    pub(crate) namespace_counts: BTreeMap<String, [u64; JobState::COUNT]>,
    /// Jobs per state of the default namespace (the cluster's less the
    /// others').
    pub(crate) default_counts: [u64; JobState::COUNT],
    /// Finished jobs' idempotency keys read from a snapshot before the
    /// namespaces that come after them (empty once the index is built).
    pub(crate) done_keys: Vec<(JobId, String)>,
    pub(crate) counts: [u64; JobState::COUNT],
    pub(crate) result_bytes: u64,
    /// Result bytes kept per namespace but the default one (whose are the
    /// cluster's less these).
    pub(crate) namespace_result_bytes: BTreeMap<String, u64>,
    /// Finished jobs' result bytes read from a snapshot before the
    /// namespaces that come after them (empty once the index is built).
    pub(crate) done_results: Vec<(JobId, u64)>,
    /// Jobs held per module.
    pub(crate) modules: BTreeMap<Digest, u64>,
    /// The schedule that fired each unfinished job a schedule fired.
    pub(crate) fired_by: BTreeMap<JobId, String>,
}

impl Index {
    /// Counts a finished job in, as [`Master::rebuild_index`] counts in an
    /// unfinished one.
    pub(crate) fn add_done(&mut self, id: JobId, job: &Job) {
        self.counts[job.state as usize] += 1;
        *self.modules.entry(job.spec.module).or_default() += 1;
        // Keyed once the namespaces are known (`rebuild_index`).
        if let Some(key) = &job.spec.idempotency_key {
            self.done_keys.push((id, key.clone()));
        }
        self.finished.insert((job.finished_at.unwrap_or(0), id));
        let bytes = job.result.as_ref().map_or(0, |r| r.len() as u64);
        self.result_bytes += bytes;
        // Counted per namespace once the namespaces are known.
        if bytes > 0 {
            self.done_results.push((id, bytes));
        }
    }

    /// Puts a runnable job of `namespace` that needs `needs` in line: in
    /// [`ready`](Self::ready) or its [`Line`], or in its key's line (and in
    /// one of those if it is now that line's first).
    pub(crate) fn enqueue(
        &mut self,
        place: Place,
        key: Option<&str>,
        needs: Option<Needs>,
        namespace: Option<&str>,
    ) {
        if let Some(name) = namespace {
            self.namespace_of.insert(place.2, name.to_owned());
        }
        if let Some(needs) = needs {
            *self.needs_count.entry(needs.clone()).or_default() += 1;
            self.needs_of.insert(place.2, needs);
        }
        let Some(key) = key else {
            self.line_up(place);
            return;
        };
        let line = self.key_ready.entry(key.to_owned()).or_default();
        let first = line.first().copied();
        line.insert(place);
        if first.is_none_or(|first| place < first) {
            if let Some(first) = first {
                self.line_out(first);
            }
            self.line_up(place);
        }
    }

    /// Takes a job out of line (the next of its key's line moves up).
    pub(crate) fn dequeue(&mut self, place: Place, key: Option<&str>) {
        if let Some(key) = key {
            if let Some(line) = self.key_ready.get_mut(key) {
                line.remove(&place);
                let next = line.first().copied();
                if line.is_empty() {
                    self.key_ready.remove(key);
                }
                if self.line_out(place)
                    && let Some(next) = next
                {
                    self.line_up(next);
                }
            }
        } else {
            self.line_out(place);
        }
        self.namespace_of.remove(&place.2);
        if let Some(needs) = self.needs_of.remove(&place.2)
            && let Some(count) = self.needs_count.get_mut(&needs)
        {
            *count -= 1;
            if *count == 0 {
                self.needs_count.remove(&needs);
            }
        }
    }

    /// The line of `place`'s job: `None` for the common one.
    fn line_of(&self, place: Place) -> Option<Line> {
        let namespace = self.namespace_of.get(&place.2);
        let needs = self.needs_of.get(&place.2);
        (namespace.is_some() || needs.is_some()).then(|| Line {
            namespace: namespace.cloned(),
            needs: needs.cloned(),
        })
    }

    /// Notes that namespace `namespace`'s share key or lines may have
    /// changed (see [`Master::rekey`]).
    pub(crate) fn touch(&mut self, namespace: Option<&str>) {
        self.dirty.insert(namespace.map(str::to_owned));
    }

    /// Sets namespace `namespace`'s share key and first place (`None`:
    /// it has no job in line), in both orders.
    pub(crate) fn set_share_key(&mut self, namespace: Option<String>, key: Option<(u128, Place)>) {
        let old = match key {
            Some(key) => self.share_keys.insert(namespace.clone(), key),
            None => self.share_keys.remove(&namespace),
        };
        if old == key {
            return;
        }
        if let Some(old) = old {
            self.by_key.remove(&(old, namespace.clone()));
        }
        if let Some(key) = key {
            self.by_key.insert((key, namespace));
        }
    }

    /// Namespace `namespace`'s lines (not the common one), by needs.
    pub(crate) fn lines_of<'a>(
        &'a self,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a Line, &'a BTreeSet<Place>)> + 'a {
        let from = Line {
            namespace: namespace.map(str::to_owned),
            needs: None,
        };
        (self.lines.range(from..))
            .take_while(move |(line, _)| line.namespace.as_deref() == namespace)
    }

    /// Namespace `namespace`'s first place in any of its lines, if it has
    /// a job in line.
    pub(crate) fn first_in_line(&self, namespace: Option<&str>) -> Option<Place> {
        let mut first = match namespace {
            None => self.ready.first().copied(),
            Some(_) => None,
        };
        for (_, places) in self.lines_of(namespace) {
            if let Some(&place) = places.first() {
                first = Some(first.map_or(place, |first| first.min(place)));
            }
        }
        first
    }

    /// Notes that `place` of `namespace` entered or left a line: the
    /// namespace's first place may change only if it has none known (it
    /// has no job in line, or the `apply` under way already touched it)
    /// or `place` is at or before it.
    fn moved(&mut self, namespace: Option<&str>, place: Place) {
        let namespace = namespace.map(str::to_owned);
        let known = self.share_keys.get(&namespace);
        if known.is_none_or(|&(_, first)| place <= first) {
            self.dirty.insert(namespace);
        }
    }

    /// Puts `place` in the line of its job's namespace and needs (or the
    /// common one).
    fn line_up(&mut self, place: Place) {
        match self.line_of(place) {
            None => {
                self.moved(None, place);
                self.ready.insert(place)
            }
            Some(line) => {
                self.moved(line.namespace.as_deref(), place);
                self.lines.entry(line).or_default().insert(place)
            }
        };
    }

    /// Takes `place` out of the line of its job's namespace and needs (or
    /// the common one); whether it was there.
    fn line_out(&mut self, place: Place) -> bool {
        let Some(key) = self.line_of(place) else {
            self.moved(None, place);
            return self.ready.remove(&place);
        };
        let Some(line) = self.lines.get_mut(&key) else {
            return false;
        };
        let was = line.remove(&place);
        if line.is_empty() {
            self.lines.remove(&key);
        }
        self.moved(key.namespace.as_deref(), place);
        was
    }

    /// Empties every line.
    fn clear_lines(&mut self) {
        self.ready.clear();
        self.key_ready.clear();
        self.lines.clear();
        self.namespace_of.clear();
        self.share_keys.clear();
        self.by_key.clear();
        self.dirty.clear();
        self.needs_of.clear();
        self.needs_count.clear();
    }
}

impl Master {
    /// This master with runnable jobs lined up by `order` (the line is
    /// rebuilt at once).
    pub fn with_order(mut self, order: Order) -> Self {
        self.order = order;
        self.index.clear_lines();
        for (&id, job) in &self.jobs {
            if job.state == JobState::Queued
                && job.not_before.is_none()
                && !self.dags.waiting.contains_key(&id)
            {
                let needs = self.keyed.needs(id, &job.spec);
                let (key, namespace) = (self.keyed.key(id), self.namespaces.of(id));
                (self.index).enqueue(ready_key(order, job, id), key, needs, namespace);
            }
        }
        self.rekey_all();
        self
    }

    /// Builds the index from the unfinished jobs and `done_index`, the
    /// entries of the finished ones ([`Index::add_done`]).
    pub(crate) fn rebuild_index(&mut self, done_index: Index) {
        // A snapshot is decoded, not trusted: a worker "running" a job the
        // snapshot does not hold would make a later event fail. Every node
        // restoring the same bytes drops the same references, so replicas
        // stay identical.
        let jobs = &self.jobs;
        for worker in self.workers.values_mut() {
            worker.running.retain(|id| jobs.contains_key(id));
        }
        // Options of jobs the snapshot does not hold are dropped, like the
        // workers' references above.
        let held = |id: &JobId| jobs.contains_key(id) || self.done.contains_key(id);
        self.keyed.options.retain(|id, _| held(id));
        self.deployments.jobs.retain(|id, _| held(id));
        self.namespaces.jobs.retain(|id, _| held(id));
        // Records of calls belong to unfinished jobs only (a settled job's
        // is dropped), so a retried job never replays one it left behind.
        self.tapes.retain(|id, _| jobs.contains_key(id));
        // Blobs of held jobs only, and outputs of succeeded ones, which
        // count with the results.
        let done = &self.done;
        let mut output_bytes = 0;
        self.blobs.retain(|id, blobs| {
            let succeeded = (done.get(id)).is_some_and(|job| job.state() == JobState::Succeeded);
            if !succeeded {
                blobs.outputs.clear();
            }
            output_bytes += crate::blobs::output_bytes(&blobs.outputs);
            held(id) && (blobs.input.is_some() || !blobs.outputs.is_empty())
        });
        // DAG records of jobs the snapshot does not hold are dropped too;
        // only queued jobs wait.
        self.dags.nodes.retain(|id, _| held(id));
        (self.dags.waiting).retain(|id, _| {
            jobs.get(id)
                .is_some_and(|job| job.state == JobState::Queued)
        });
        self.dags.rebuild();
        let mut fired_by = BTreeMap::new();
        for (name, schedule) in &mut self.schedules {
            schedule
                .active
                .retain(|id| jobs.get(id).is_some_and(|job| !job.state.is_terminal()));
            for &id in &schedule.active {
                fired_by.insert(id, name.clone());
            }
        }
        let mut index = Index {
            unique_until: (self.keyed.uniques.iter())
                .map(|(key, hold)| (hold.until, key.clone()))
                .collect(),
            latest_start: (self.keyed.starts.iter())
                .filter_map(|(key, starts)| Some((*starts.back()?, key.clone())))
                .collect(),
            fired_by,
            ..done_index
        };
        index.result_bytes += output_bytes;
        for (id, bytes) in std::mem::take(&mut index.done_results) {
            index.add_results(self.namespaces.of(id), bytes, false);
        }
        for (id, blobs) in &self.blobs {
            let bytes = crate::blobs::output_bytes(&blobs.outputs);
            index.add_results(self.namespaces.of(*id), bytes, false);
        }
        for (id, name) in &self.namespaces.jobs {
            let state = match (self.jobs.get(id), self.done.get(id)) {
                (Some(job), _) => job.state,
                (None, Some(done)) => done.state(),
                (None, None) => continue,
            };
            let counts = index.namespace_counts.entry(name.clone()).or_default();
            counts[state as usize] += 1;
            (index.namespace_jobs.entry(name.clone()).or_default()).insert(*id);
        }
        for (id, key) in std::mem::take(&mut index.done_keys) {
            let namespace = self.namespaces.of(id).map(str::to_owned);
            index.keys.insert((namespace, key), id);
        }
        self.retain_locality();
        self.retain_pools();
        for (&id, job) in &self.jobs {
            index.counts[job.state as usize] += 1;
            *index.modules.entry(job.spec.module).or_default() += 1;
            if let Some(key) = &job.spec.idempotency_key {
                let namespace = self.namespaces.of(id).map(str::to_owned);
                index.keys.insert((namespace, key.clone()), id);
            }
            match job.state {
                JobState::Queued if self.dags.waiting.contains_key(&id) => {}
                JobState::Queued => match job.not_before {
                    Some(at) => {
                        index.delayed.insert((at, id));
                    }
                    None => {
                        let needs = self.keyed.needs(id, &job.spec);
                        let (key, namespace) = (self.keyed.key(id), self.namespaces.of(id));
                        index.enqueue(ready_key(self.order, job, id), key, needs, namespace)
                    }
                },
                JobState::Running => {
                    if let Some(until) = job.lease_until {
                        index.leases.insert((until, id));
                    }
                    if let Some(key) = self.keyed.key(id) {
                        *index.key_running.entry(key.to_owned()).or_default() += 1;
                    }
                }
                // Finished jobs were counted from `done`.
                _ => {}
            }
        }
        index.default_counts = index.counts;
        for counts in index.namespace_counts.values() {
            for (total, n) in index.default_counts.iter_mut().zip(counts) {
                *total = total.saturating_sub(*n);
            }
        }
        self.index = index;
        self.rekey_all();
    }

    /// Removes a queued job from the ready or delayed set.
    pub(crate) fn unqueue(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("caller checked");
        match job.not_before.take() {
            Some(at) => {
                self.index.delayed.remove(&(at, id));
            }
            None => self
                .index
                .dequeue(ready_key(self.order, job, id), self.keyed.key(id)),
        }
        self.left_line(id);
    }
}

pub(crate) fn ready_key(order: Order, job: &Job, id: JobId) -> Place {
    match order {
        Order::Priority => (-(job.spec.priority as i64), job.seq, id),
        Order::Fifo => (0, job.seq, id),
    }
}

/// Moves `job`, of `namespace` (`None`: the default one), to `state`,
/// counting it out of its state and into the new one, in the cluster's
/// counts and its namespace's.
pub(crate) fn set_state(
    index: &mut Index,
    namespace: Option<&str>,
    job: &mut Job,
    state: JobState,
) {
    index.counts[job.state as usize] -= 1;
    index.counts[state as usize] += 1;
    if job.state == JobState::Running || state == JobState::Running {
        index.touch(namespace);
    }
    let counts = match namespace {
        None => Some(&mut index.default_counts),
        Some(name) => index.namespace_counts.get_mut(name),
    };
    if let Some(counts) = counts {
        counts[job.state as usize] = counts[job.state as usize].saturating_sub(1);
        counts[state as usize] += 1;
    }
    job.state = state;
}

impl Index {
    /// Counts a new job of `namespace` (`None`: the default one) in
    /// `state`.
    pub(crate) fn count_in(&mut self, namespace: Option<&str>, state: JobState) {
        match namespace {
            None => self.default_counts[state as usize] += 1,
            Some(name) => {
                self.namespace_counts.entry(name.to_owned()).or_default()[state as usize] += 1
            }
        }
    }

    /// Counts a forgotten job of `namespace` out of `state`; a namespace
    /// left with none is dropped.
    pub(crate) fn count_out(&mut self, namespace: Option<&str>, state: JobState) {
        let Some(name) = namespace else {
            let count = &mut self.default_counts[state as usize];
            *count = count.saturating_sub(1);
            return;
        };
        let Some(counts) = self.namespace_counts.get_mut(name) else {
            return;
        };
        counts[state as usize] = counts[state as usize].saturating_sub(1);
        if counts.iter().all(|&n| n == 0) {
            self.namespace_counts.remove(name);
        }
    }

    /// How many jobs of `namespace` (`None`: the default one) are in
    /// `state`.
    pub(crate) fn in_state(&self, namespace: Option<&str>, state: JobState) -> u64 {
        match namespace {
            Some(name) => (self.namespace_counts.get(name)).map_or(0, |c| c[state as usize]),
            None => self.default_counts[state as usize],
        }
    }

    /// Counts `bytes` more of results kept by a job of `namespace`, in the
    /// cluster's total too when `total`.
    pub(crate) fn add_results(&mut self, namespace: Option<&str>, bytes: u64, total: bool) {
        if total {
            self.result_bytes += bytes;
        }
        if let Some(name) = namespace
            && bytes > 0
        {
            *self
                .namespace_result_bytes
                .entry(name.to_owned())
                .or_default() += bytes;
        }
    }

    /// Counts `bytes` of results a job of `namespace` kept out.
    pub(crate) fn sub_results(&mut self, namespace: Option<&str>, bytes: u64) {
        self.result_bytes = self.result_bytes.saturating_sub(bytes);
        let Some(name) = namespace else { return };
        if let Some(kept) = self.namespace_result_bytes.get_mut(name) {
            *kept = kept.saturating_sub(bytes);
            if *kept == 0 {
                self.namespace_result_bytes.remove(name);
            }
        }
    }

    /// The bytes of results the jobs of `namespace` (`None`: the default
    /// one) keep.
    pub(crate) fn result_bytes_in(&self, namespace: Option<&str>) -> u64 {
        match namespace {
            Some(name) => self.namespace_result_bytes.get(name).copied().unwrap_or(0),
            None => (self.namespace_result_bytes.values())
                .fold(self.result_bytes, |n, bytes| n.saturating_sub(*bytes)),
        }
    }
}
