//! Concurrency and rate keys: at most `running_max` attempts of a key's
//! jobs at once, at most `starts_per_second` started in any
//! [`RATE_WINDOW_MS`](crate::limits::RATE_WINDOW_MS).
//!
//! Each limited key has its own line of ready jobs, and only its first is
//! in a line a poll walks (`Index::enqueue`), so a poll looks at one
//! job per waiting key ([`Master::startable`]) however long the key's line.
//! Start times are state, not index: a purged job's starts still count
//! for their window. [`Keyed`] also holds every job's options and the
//! uniqueness holds (see `uniqueness`), since all three are what
//! [`JobOptions`] leave behind.
//!
//! Invariants: a key's running count is the number of its jobs running;
//! no key keeps more than [`KEY_LIMIT_MAX`] start times; an event that
//! adds a start forgets at most [`FORGET_PER_EVENT`] idle keys, so no
//! `apply` does unbounded work. This module does not check options (see
//! `validation`).

use crate::limits::{FORGET_PER_EVENT, KEY_LIMIT_MAX, RATE_WINDOW_MS};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::index::{Index, Place};
use crate::master::Master;
use crate::pools::Needs;
use crate::protocol::*;
use crate::uniqueness::Hold;

/// What jobs submitted with [`JobOptions`] leave behind. Holds and start
/// times outlive the jobs (a purged job's key still holds for its window,
/// its starts still count for a second), so they are state, not index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Keyed {
    /// The options of every job submitted with some.
    pub(crate) options: BTreeMap<JobId, JobOptions>,
    /// Uniqueness keys: the job holding each, and until when.
    pub(crate) uniques: BTreeMap<String, Hold>,
    /// Start times of the latest attempts per limited key, oldest first
    /// (at most [`KEY_LIMIT_MAX`], the highest rate one may ask for).
    pub(crate) starts: BTreeMap<String, VecDeque<Millis>>,
}

impl Keyed {
    /// The limit job `id` was submitted with.
    pub(crate) fn limit(&self, id: JobId) -> Option<&KeyLimit> {
        self.options.get(&id)?.limit.as_ref()
    }

    /// The key of job `id`'s limit.
    pub(crate) fn key(&self, id: JobId) -> Option<&str> {
        self.limit(id).map(|limit| limit.key.as_str())
    }

    /// What job `id`, with `spec`, asks of a worker, if anything: the
    /// labels kept with its options and its memory (see `pools`).
    pub(crate) fn needs(&self, id: JobId, spec: &JobSpec) -> Option<Needs> {
        let labels = (self.options.get(&id)).map_or(&[][..], |options| &options.labels);
        Needs::of(labels, spec.memory_bytes)
    }
}

impl Master {
    /// Up to `free` ready jobs that may start at `now` on a worker with
    /// `pool`: each time from the namespace with the smallest share key
    /// (see `shares`), and within it in line; only jobs whose needs the
    /// pool fits (see `pools`), only jobs of a namespace under its quota
    /// of running attempts (see `quotas`), and a limited key's jobs only
    /// while the key is under its limits, counting the starts this
    /// decision makes. A key whose first job may not start is passed over
    /// whole, and so is a namespace at its quota, so a poll looks at no
    /// more than one job per waiting key and namespace beyond those it
    /// starts, and never at a job of a line its pool does not fit.
    pub(crate) fn startable(&self, now: Millis, free: usize, pool: &WorkerPool) -> Vec<JobId> {
        let mut out = Vec::new();
        let mut lines = Lines::new(&self.index, pool, |namespace| self.has_room(namespace, 0));
        // The next of a key's jobs, once the one before it was taken.
        let mut moved_up: BTreeSet<Place> = BTreeSet::new();
        let mut started: BTreeMap<&str, u32> = BTreeMap::new();
        // Attempts this decision starts per namespace with a running quota.
        let mut running: BTreeMap<Option<&str>, u32> = BTreeMap::new();
        let namespace_of = |id: &JobId| self.index.namespace_of.get(id).map(String::as_str);
        while out.len() < free {
            let key_of = |lines: &Lines<_>, namespace: Option<&str>| match lines.key(namespace) {
                Some(key) => key,
                None => match self.index.share_keys.get(&namespace.map(str::to_owned)) {
                    Some(&(key, _)) => key,
                    None => self.share_key(namespace),
                },
            };
            let up = (moved_up.iter())
                .map(|&place| (key_of(&lines, namespace_of(&place.2)), place))
                .min();
            let place = match (lines.peek(), up) {
                (Some(first), Some(up)) if up < first => moved_up.take(&up.1),
                (Some(_), _) => lines.next(),
                (None, Some(up)) => moved_up.take(&up.1),
                (None, None) => None,
            };
            let Some(place) = place else {
                break;
            };
            let id = place.2;
            // A key's next job moved up from a line the pool may not fit.
            if (self.index.needs_of.get(&id)).is_some_and(|needs| !needs.fit(pool)) {
                continue;
            }
            let namespace = namespace_of(&id);
            let quota = self.quotas.running_max(namespace);
            if quota.is_some() {
                let count = running.get(&namespace).copied().unwrap_or(0);
                if !self.has_room(namespace, count) {
                    // Its other lines are passed over whole.
                    lines.drop_namespace(namespace);
                    continue;
                }
            }
            if let Some(limit) = self.keyed.limit(id) {
                let count = started.entry(limit.key.as_str()).or_default();
                if !self.under_limit(limit, now, *count) {
                    continue;
                }
                *count += 1;
                // A journal is decoded, not trusted: a job replaced under
                // its id may name a key whose line is gone; it then moves
                // no one up.
                let line = self.index.key_ready.get(&limit.key);
                let after = (Bound::Excluded(place), Bound::Unbounded);
                if let Some(&next) = line.and_then(|line| line.range(after).next()) {
                    moved_up.insert(next);
                }
            }
            out.push(id);
            if quota.is_some() {
                *running.entry(namespace).or_default() += 1;
            }
            let key = key_of(&lines, namespace).saturating_add(self.share_step(namespace));
            lines.raise(namespace, key);
        }
        out
    }

    /// Whether `namespace` may start one more attempt with `started` more
    /// already started by the decision being made: under its quota of
    /// running attempts, or without one.
    fn has_room(&self, namespace: Option<&str>, started: u32) -> bool {
        let Some(max) = self.quotas.running_max(namespace) else {
            return true;
        };
        let running = self.index.in_state(namespace, JobState::Running);
        running.saturating_add(u64::from(started)) < u64::from(max)
    }

    /// Whether one more attempt of `limit`'s key may start at `now`, with
    /// `started` more already started by the decision being made.
    fn under_limit(&self, limit: &KeyLimit, now: Millis, started: u32) -> bool {
        if let Some(max) = limit.running_max {
            let running = self.index.key_running.get(&limit.key).copied();
            if running.unwrap_or(0).saturating_add(started) >= max {
                return false;
            }
        }
        if let Some(rate) = limit.starts_per_second {
            let since = now.saturating_sub(RATE_WINDOW_MS);
            let recent = self.keyed.starts.get(&limit.key).map_or(0, |starts| {
                starts.len() - starts.partition_point(|&at| at <= since)
            });
            if (recent as u32).saturating_add(started) >= rate {
                return false;
            }
        }
        true
    }

    /// Counts an attempt of job `id` started at `at` against its key, if
    /// it has a limit.
    pub(crate) fn key_started(&mut self, id: JobId, at: Millis) {
        if let Some(key) = self.keyed.key(id) {
            *self.index.key_running.entry(key.to_owned()).or_default() += 1;
            let key = key.to_owned();
            self.note_start(key, at);
        }
    }

    /// Counts an ended attempt of job `id` off its key, if it has a limit.
    pub(crate) fn key_ended(&mut self, id: JobId, effects: &mut Vec<Effect>) {
        if let Some(key) = self.keyed.key(id)
            && let Some(running) = self.index.key_running.get_mut(key)
        {
            *running -= 1;
            if *running == 0 {
                self.index.key_running.remove(key);
            }
            // A place under the key's limit opened: its next job may start.
            if self.index.key_ready.contains_key(key) {
                effects.push(Effect::WorkAvailable);
            }
        }
    }

    /// Records an attempt of a limited key's job started at `at`; forgets
    /// the start times of keys idle for a whole window.
    fn note_start(&mut self, key: String, at: Millis) {
        let idle = at.saturating_sub(RATE_WINDOW_MS);
        for _ in 0..FORGET_PER_EVENT {
            match self.index.latest_start.first() {
                Some((latest, _)) if *latest <= idle => {
                    let (_, key) = self.index.latest_start.pop_first().expect("present");
                    self.keyed.starts.remove(&key);
                }
                _ => break,
            }
        }
        let starts = self.keyed.starts.entry(key.clone()).or_default();
        if let Some(&latest) = starts.back() {
            self.index.latest_start.remove(&(latest, key.clone()));
        }
        starts.push_back(at);
        if starts.len() > KEY_LIMIT_MAX as usize {
            starts.pop_front();
        }
        let latest = *starts.back().expect("just pushed");
        self.index.latest_start.insert((latest, key));
    }
}

/// Several lines of places walked as one: the line whose namespace has
/// the smallest share key first, and among a namespace's lines, the
/// first place in line (a poll's merge of the common line and the lines
/// its pool fits of namespaces with room: one per namespace and distinct
/// needs of the jobs waiting).
///
/// Namespaces are opened lazily, in the order of the keys and first
/// places the index keeps ([`Index::by_key`]): one is opened only once no
/// line already open comes before its key and first place (none of its
/// lines can offer anything earlier), so a poll that starts `n` jobs opens
/// the namespaces that come before the `n`th job, not every namespace with
/// a job in line, and namespaces whose keys tie are not all opened.
/// Keys only rise during a decision (each start adds its step), so a
/// line's entry in the heap whose key has gone stale is put back at its
/// namespace's key when it comes up.
struct Lines<'a, R> {
    index: &'a Index,
    pool: &'a WorkerPool,
    /// Whether a namespace has room for one more attempt (see `quotas`).
    room: R,
    /// The namespaces not opened yet, smallest key first.
    order: std::iter::Peekable<std::collections::btree_set::Iter<'a, ByKey>>,
    /// Each open line's namespace and what is left of it after its place
    /// in `next`.
    heads: Vec<(Option<&'a str>, Head<'a>)>,
    /// The key of every namespace opened or raised by this decision.
    keys: BTreeMap<Option<&'a str>, u128>,
    /// Namespaces whose lines are walked no more.
    dropped: BTreeSet<Option<&'a str>>,
    /// The first place of every open line, at its namespace's key when
    /// pushed, smallest first.
    next: BinaryHeap<Reverse<(u128, Place, usize)>>,
}

/// An entry of [`Index::by_key`]: a namespace's key and first place, and
/// the namespace.
type ByKey = ((u128, Place), Option<String>);

/// What is left of a line.
type Head<'a> = std::iter::Copied<std::collections::btree_set::Iter<'a, Place>>;

impl<'a, R: Fn(Option<&str>) -> bool> Lines<'a, R> {
    fn new(index: &'a Index, pool: &'a WorkerPool, room: R) -> Self {
        Lines {
            index,
            pool,
            room,
            order: index.by_key.iter().peekable(),
            heads: Vec::new(),
            keys: BTreeMap::new(),
            dropped: BTreeSet::new(),
            next: BinaryHeap::new(),
        }
    }

    /// Opens `namespace`'s lines that the pool fits, if it has room; its
    /// key is `key` unless this decision raised it already.
    fn open(&mut self, namespace: Option<&'a str>, key: u128) {
        let key = *self.keys.entry(namespace).or_insert(key);
        if self.dropped.contains(&namespace) || !(self.room)(namespace) {
            return;
        }
        let index = self.index;
        if namespace.is_none() {
            self.push(None, key, &index.ready);
        }
        for (line, places) in index.lines_of(namespace) {
            if line.needs.as_ref().is_none_or(|needs| needs.fit(self.pool)) {
                self.push(namespace, key, places);
            }
        }
    }

    fn push(&mut self, namespace: Option<&'a str>, key: u128, line: &'a BTreeSet<Place>) {
        let mut head = line.iter().copied();
        if let Some(place) = head.next() {
            self.next.push(Reverse((key, place, self.heads.len())));
            self.heads.push((namespace, head));
        }
    }

    /// The first place of all lines and its namespace's key.
    fn peek(&mut self) -> Option<(u128, Place)> {
        loop {
            if let Some(&Reverse((key, place, at))) = self.next.peek() {
                let namespace = self.heads[at].0;
                if self.dropped.contains(&namespace) {
                    self.next.pop();
                    continue;
                }
                let now = self.keys.get(&namespace).copied().unwrap_or(key);
                if now != key {
                    self.next.pop();
                    self.next.push(Reverse((now, place, at)));
                    continue;
                }
            }
            let top = self
                .next
                .peek()
                .map(|&Reverse((key, place, _))| (key, place));
            match self.order.peek() {
                Some(&&((key, first), ref namespace))
                    if top.is_none_or(|top| (key, first) <= top) =>
                {
                    self.order.next();
                    self.open(namespace.as_deref(), key);
                }
                _ => {
                    return self
                        .next
                        .peek()
                        .map(|&Reverse((key, place, _))| (key, place));
                }
            }
        }
    }

    /// Takes the first place of all lines.
    fn next(&mut self) -> Option<Place> {
        self.peek()?;
        let Reverse((key, place, at)) = self.next.pop()?;
        if let Some(after) = self.heads[at].1.next() {
            self.next.push(Reverse((key, after, at)));
        }
        Some(place)
    }

    /// `namespace`'s key in this decision, if it was opened or raised.
    fn key(&self, namespace: Option<&str>) -> Option<u128> {
        self.keys.get(&namespace).copied()
    }

    /// `namespace`'s key is `key` now (never lower than it was).
    fn raise(&mut self, namespace: Option<&'a str>, key: u128) {
        self.keys.insert(namespace, key);
    }

    /// Walks no more of `namespace`'s lines.
    fn drop_namespace(&mut self, namespace: Option<&'a str>) {
        self.dropped.insert(namespace);
    }
}
