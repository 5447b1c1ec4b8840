//! Blobs: what the master knows of the large data jobs read and write,
//! their digests and sizes; never their bytes.
//!
//! # What is kept
//!
//! The nodes store blobs under their sha256 and copy them among
//! themselves; the master journals and keeps only what names them. A job
//! submitted with an [`input_blob`](JobOptions::input_blob) keeps that
//! [`Blob`] for its life: every attempt reads it, a bulk retry keeps it, a
//! schedule gives its template's to every job it fires and a DAG's job
//! has its own. A worker whose job wrote output blobs stores them first,
//! then reports [`Outcome::Wrote`] with their names, digests and sizes;
//! the attempt that finishes the job keeps them as the job's outputs,
//! replacing any it held (a failed attempt's outputs are never reported).
//! Both go with the job's record when it is purged (retention,
//! `finished_max`, the result bytes' bound), as its result does; the
//! outputs count against `results_bytes_total_max` for their names,
//! digests and sizes (`output_bytes`), so what the master holds for them
//! is bounded by the setting that bounds results.
//!
//! The facts live here, by job, not in the job's record: a finished job
//! is packed as its record's bytes (see `done`), which a snapshot copies
//! as they are, so the record's layout stays that of every snapshot
//! version. Kept in snapshots from version 9, after the recorded calls.
//!
//! # What an attempt reads
//!
//! [`Assignment::blobs`]: `input` for the job's input blob, then, for a
//! DAG's job submitted with `outputs`, each parent's outputs named
//! `PARENT/OUTPUT`, where `PARENT` is the parent's name in its DAG, or its
//! id in decimal for a job in no DAG; parents in the order of the job's
//! `parents`, outputs in the order the parent wrote them. The DAG's input
//! envelope lists the same blobs under each parent (see [`crate::dag`]).
//! An output's name holds no `/`, so two blobs' names meet only when a
//! DAG's job is named after the id of another of its child's parents; the
//! first keeps the name, and the other blob is neither given nor listed.
//!
//! # Bounds
//!
//! An output's name is 1 to [`OUTPUT_NAME_BYTES_MAX`] bytes of ASCII
//! letters, digits, `.`, `_` and `-`, unique in its report, and a job
//! writes at most [`OUTPUTS_MAX`] outputs: a report breaking these is
//! refused (`invalid_job`, as other malformed reports of a worker;
//! [`check_outputs`], which the worker's node applies as the job creates
//! its outputs). A journal or snapshot is decoded, not trusted: a
//! `Finished` whose outputs a decision would have refused changes
//! nothing, as the refusal did, and a snapshot's outputs that break the
//! bounds are dropped (`bounded`).
//!
//! # Which blobs the cluster keeps
//!
//! The [`Registry`] is the one place that decides whether a blob's bytes
//! may be deleted. A blob is *kept* once an upload of it is durable on a
//! majority of the back-end nodes ([`Command::KeepBlob`], which the
//! uploading node sends before it answers), and while a held job (its
//! input, or an output its successful attempt wrote) or a schedule (its
//! template's input) *names* it: the registry counts those names
//! (`refs`). A blob nothing names stays kept for `retention_ms` from the
//! moment nothing named it or it was last uploaded, whichever is later;
//! then a tick stops keeping it (`BlobsCollected`, at most
//! [`BLOBS_COLLECTED_MAX`] a tick). `DELETE /v1/blobs/{digest}`
//! ([`Command::DropBlob`]) stops keeping a blob nothing names at once, and
//! is refused (`blob_in_use`) while something does. An admin's purge
//! ([`Command::PurgeBlob`], `POST /v1/blobs/{digest}/purge`) also stops
//! keeping one that only finished jobs name: those that read it as their
//! input are purged, as at retention (so none is retried without it), and
//! those that wrote it drop it from their outputs, all in one event
//! (`BlobPurged`). It is refused (`blob_in_use`, naming the holder) while
//! an unfinished job reads it as its input, or reads the outputs of a job
//! that names it (a DAG's child, which would lose that output or, its
//! parent purged, the parent's result), or a schedule gives it to its
//! jobs: the caller cancels or deletes those first, so no job that has
//! not run yet loses its data.
//!
//! A submission, DAG or schedule may name as its input only a blob the
//! cluster keeps (`blob_not_found` otherwise; its size must be the kept
//! one), decided in the same order as the collection: once a blob is
//! collected no job can start to name it, and a job that names it keeps
//! it. The nodes delete their copies of the blobs the master says it does
//! not keep ([`Query::Blobs`]) and only the copies they have not stored or
//! copied within their own grace period, which outlasts an upload's or an
//! output's way from a node's disk to the registry (see the host's
//! `cluster::blob_gc`).
//!
//! The registry is journaled (the events above, and every event that
//! adds or removes a job's or schedule's blobs) and snapshotted (which
//! blobs are kept, each with its size and since when nothing named it), so
//! a master that takes over keeps and collects exactly what the one before
//! it would have; the counts of names and the order of idle blobs are
//! rebuilt on restore. Bounds: uploads keep at most [`BLOBS_KEPT_MAX`]
//! blobs (`blobs_full` beyond; the blobs jobs name are kept whatever the
//! count: they are bounded by the jobs' own bounds).
//!
//! Invariants: an entry of [`Blobs`] exists only for a held job with an
//! input blob or outputs; only a succeeded job has outputs, and the
//! index's `result_bytes` counts them (`output_bytes`). Every blob a held
//! job or schedule names is kept, and `refs` counts exactly those names; a
//! kept blob is in `idle` exactly when nothing names it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::limits::{
    BLOBS_ASKED_MAX, BLOBS_COLLECTED_MAX, BLOBS_KEPT_MAX, OUTPUT_BYTES_FIXED,
    OUTPUT_NAME_BYTES_MAX, OUTPUTS_MAX,
};
use crate::master::{Master, decided, reject};
use crate::protocol::*;

/// What the master knows of each job's blobs, for the jobs that have any.
pub(crate) type Blobs = BTreeMap<JobId, JobBlobs>;

/// One job's blobs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobBlobs {
    /// The blob it reads as `input`.
    pub(crate) input: Option<Blob>,
    /// The output blobs of the attempt that succeeded, in the order it
    /// wrote them.
    pub(crate) outputs: Vec<NamedBlob>,
}

impl JobBlobs {
    fn is_empty(&self) -> bool {
        self.input.is_none() && self.outputs.is_empty()
    }

    /// The digests it names, once per name.
    fn named(&self) -> impl Iterator<Item = Digest> + '_ {
        (self.input.iter().map(|input| input.digest))
            .chain(self.outputs.iter().map(|output| output.digest))
    }
}

/// A blob the cluster keeps, as a snapshot holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Kept {
    /// Its size in bytes (the first kept; a digest names its bytes).
    pub(crate) size: u64,
    /// Since when nothing names it, or when it was last uploaded,
    /// whichever is later (meaningless while something names it).
    pub(crate) idle_since: Millis,
}

/// The blobs the cluster keeps (see the module notes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Registry {
    /// Every kept blob (in snapshots).
    pub(crate) kept: BTreeMap<Digest, Kept>,
    /// How many names each named blob has (rebuilt on restore).
    refs: BTreeMap<Digest, u32>,
    /// The kept blobs nothing names, by `idle_since` (rebuilt on
    /// restore).
    idle: BTreeSet<(Millis, Digest)>,
    /// The kept blobs' sizes, summed (rebuilt on restore); wide enough
    /// that no sum of kept sizes overflows, so it does not depend on the
    /// order blobs came and went.
    bytes: u128,
}

impl Registry {
    /// Whether the cluster keeps `digest`.
    pub(crate) fn keeps(&self, digest: &Digest) -> bool {
        self.kept.contains_key(digest)
    }

    /// How many names `digest` has.
    fn refs(&self, digest: &Digest) -> u32 {
        self.refs.get(digest).copied().unwrap_or(0)
    }

    /// How many blobs are kept, and their bytes in all.
    pub(crate) fn totals(&self) -> (u64, u64) {
        (
            self.kept.len() as u64,
            u64::try_from(self.bytes).unwrap_or(u64::MAX),
        )
    }

    /// Blob `digest`'s entry, made (kept from `at`, `size` bytes) if it
    /// had none.
    fn entry(&mut self, digest: Digest, size: u64, at: Millis) -> &mut Kept {
        let bytes = &mut self.bytes;
        self.kept.entry(digest).or_insert_with(|| {
            *bytes += u128::from(size);
            Kept {
                size,
                idle_since: at,
            }
        })
    }

    /// An upload of `blob` at `at`: kept, for `retention_ms` from `at` at
    /// least.
    fn keep(&mut self, blob: &Blob, at: Millis) {
        let named = self.refs(&blob.digest) > 0;
        let kept = self.entry(blob.digest, blob.size, at);
        let before = kept.idle_since;
        kept.idle_since = before.max(at);
        let after = kept.idle_since;
        if !named {
            self.idle.remove(&(before, blob.digest));
            self.idle.insert((after, blob.digest));
        }
    }

    /// One more name of `digest` (`size` bytes) at `at`; kept from now on
    /// if it was not (a journal's blob, from before the registry).
    fn hold(&mut self, digest: Digest, size: u64, at: Millis) {
        let kept = *self.entry(digest, size, at);
        let refs = self.refs.entry(digest).or_insert(0);
        if *refs == 0 {
            self.idle.remove(&(kept.idle_since, digest));
        }
        *refs += 1;
    }

    /// One name fewer of `digest` at `at`: idle from `at` when it was the
    /// last.
    fn release(&mut self, digest: Digest, at: Millis) {
        let Some(refs) = self.refs.get_mut(&digest) else {
            return;
        };
        *refs -= 1;
        if *refs > 0 {
            return;
        }
        self.refs.remove(&digest);
        if let Some(kept) = self.kept.get_mut(&digest) {
            kept.idle_since = kept.idle_since.max(at);
            self.idle.insert((kept.idle_since, digest));
        }
    }

    /// No longer keeps `digest`, unless something names it.
    fn forget(&mut self, digest: &Digest) {
        if self.refs(digest) > 0 {
            return;
        }
        if let Some(kept) = self.kept.remove(digest) {
            self.idle.remove(&(kept.idle_since, *digest));
            self.bytes -= u128::from(kept.size);
        }
    }

    /// The blobs to stop keeping at `now`: idle for `retention_ms`, the
    /// oldest first, at most [`BLOBS_COLLECTED_MAX`].
    fn collectable(&self, now: Millis, retention_ms: u64) -> Vec<Digest> {
        (self.idle.iter())
            .take_while(|(since, _)| since.saturating_add(retention_ms) <= now)
            .take(BLOBS_COLLECTED_MAX)
            .map(|&(_, digest)| digest)
            .collect()
    }

    /// A registry of the `kept` blobs a snapshot held, with the names in
    /// `named` counted. All of them, even past [`BLOBS_KEPT_MAX`]: the
    /// blobs jobs name are kept whatever the count, and stay kept, idle,
    /// once released, so a live registry may hold more (the snapshot's
    /// bytes bound what it holds).
    pub(crate) fn rebuilt(
        kept: BTreeMap<Digest, Kept>,
        named: impl Iterator<Item = (Digest, u64)>,
    ) -> Self {
        let bytes = kept.values().map(|kept| u128::from(kept.size)).sum();
        let mut registry = Registry {
            kept,
            bytes,
            ..Registry::default()
        };
        for (digest, size) in named {
            // A snapshot from before the registry held the jobs' blobs
            // only; they are kept from the start of time, as named.
            registry.hold(digest, size, 0);
        }
        for (&digest, kept) in &registry.kept {
            if !registry.refs.contains_key(&digest) {
                registry.idle.insert((kept.idle_since, digest));
            }
        }
        registry
    }
}

/// The name a job's own input blob has for it.
pub const INPUT_BLOB_NAME: &str = "input";

/// Whether `name` may name an output blob: 1 to
/// [`OUTPUT_NAME_BYTES_MAX`] bytes of ASCII letters, digits, `.`, `_` and
/// `-`, not starting with `.` (so that every name is also a plain file
/// name: not `.`, `..` or hidden).
pub fn valid_output_name(name: &str) -> bool {
    (1..=OUTPUT_NAME_BYTES_MAX).contains(&name.len())
        && !name.starts_with('.')
        && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether the output blobs of one report are within their bounds: at
/// most [`OUTPUTS_MAX`], each named as [`valid_output_name`] says, no
/// name twice. The error names the first output that is not.
pub fn check_outputs(outputs: &[NamedBlob]) -> Result<(), String> {
    if outputs.len() > OUTPUTS_MAX {
        return Err(format!(
            "outputs: a job writes at most {OUTPUTS_MAX} output blobs; this one reports {}",
            outputs.len()
        ));
    }
    let mut names = BTreeSet::new();
    for (at, output) in outputs.iter().enumerate() {
        if !valid_output_name(&output.name) {
            return Err(format!(
                "outputs[{at}].name: 1 to {OUTPUT_NAME_BYTES_MAX} bytes of ASCII letters, \
                 digits, `.`, `_` and `-`"
            ));
        }
        if !names.insert(output.name.as_str()) {
            return Err(format!(
                "outputs[{at}].name: {:?} is reported twice",
                output.name
            ));
        }
    }
    Ok(())
}

/// What `outputs` count for against `results_bytes_total_max` (and in
/// [`Stats::result_bytes`]): each its name's bytes, digest and size.
pub(crate) fn output_bytes(outputs: &[NamedBlob]) -> u64 {
    (outputs.iter())
        .map(|output| output.name.len() as u64 + OUTPUT_BYTES_FIXED)
        .sum()
}

/// `digest` as the API and jobs write it: 64 lowercase hex digits.
pub(crate) fn digest_text(digest: &Digest) -> String {
    let mut text = String::with_capacity(64);
    for byte in digest {
        write!(text, "{byte:02x}").expect("writes to a string");
    }
    text
}

/// `blobs` as a snapshot read them, as decisions would have kept them:
/// outputs that a report could not have carried ([`check_outputs`]) are
/// dropped, and so are entries left with nothing.
pub(crate) fn bounded(mut blobs: Blobs) -> Blobs {
    blobs.retain(|_, job| {
        if check_outputs(&job.outputs).is_err() {
            job.outputs.clear();
        }
        !job.is_empty()
    });
    blobs
}

impl Master {
    /// Job `id` was (re)submitted with `input` as its input blob: its
    /// blobs are that one, with no outputs yet.
    pub(crate) fn record_input_blob(&mut self, id: JobId, input: Option<&Blob>, at: Millis) {
        if let Some(input) = input {
            self.registry.hold(input.digest, input.size, at);
        }
        let replaced = match input {
            Some(input) => self.blobs.insert(
                id,
                JobBlobs {
                    input: Some(input.clone()),
                    outputs: Vec::new(),
                },
            ),
            None => self.blobs.remove(&id),
        };
        // Only a hostile journal submits an id twice; what the first held
        // is no longer counted.
        if let Some(replaced) = replaced {
            let namespace = self.namespaces.of(id);
            (self.index).sub_results(namespace, output_bytes(&replaced.outputs));
            self.release_all(&replaced, at);
        }
    }

    /// Releases every name `job`'s blobs had.
    fn release_all(&mut self, job: &JobBlobs, at: Millis) {
        for digest in job.named() {
            self.registry.release(digest, at);
        }
    }

    /// Job `id`'s attempt succeeded with `outputs`: they are its outputs
    /// now, in place of any it had.
    pub(crate) fn record_outputs(&mut self, id: JobId, outputs: &[NamedBlob], at: Millis) {
        for output in outputs {
            self.registry.hold(output.digest, output.size, at);
        }
        let job = self.blobs.entry(id).or_default();
        let before = std::mem::replace(&mut job.outputs, outputs.to_vec());
        for output in &before {
            self.registry.release(output.digest, at);
        }
        let (index, namespace) = (&mut self.index, self.namespaces.of(id));
        index.sub_results(namespace, output_bytes(&before));
        index.add_results(namespace, output_bytes(outputs), true);
        if job.is_empty() {
            self.blobs.remove(&id);
        }
    }

    /// Forgets a purged job's blobs: they are named once fewer.
    pub(crate) fn forget_blobs(&mut self, id: JobId, at: Millis) {
        if let Some(job) = self.blobs.remove(&id) {
            let namespace = self.namespaces.of(id);
            (self.index).sub_results(namespace, output_bytes(&job.outputs));
            self.release_all(&job, at);
        }
    }

    /// A schedule whose template reads `input` was created (`hold`) or
    /// deleted at `at`.
    pub(crate) fn schedule_names(&mut self, input: Option<&Blob>, hold: bool, at: Millis) {
        if let Some(input) = input {
            match hold {
                true => self.registry.hold(input.digest, input.size, at),
                false => self.registry.release(input.digest, at),
            }
        }
    }

    /// Refuses `options` naming an input blob the cluster does not keep
    /// (`blob_not_found`), or with another size than the kept one.
    pub(crate) fn check_input_blob(&self, options: &JobOptions) -> Result<(), Rejection> {
        let Some(blob) = &options.input_blob else {
            return Ok(());
        };
        match self.registry.kept.get(&blob.digest) {
            None => reject(
                codes::BLOB_NOT_FOUND,
                format!(
                    "the cluster keeps no blob sha256:{}: upload it (PUT /v1/blobs) first; \
                     a blob nothing names is collected after the retention time",
                    digest_text(&blob.digest)
                ),
            ),
            Some(kept) if kept.size != blob.size => reject(
                codes::INVALID_JOB,
                format!(
                    "input_blob: sha256:{} is {} bytes, not {}",
                    digest_text(&blob.digest),
                    kept.size,
                    blob.size
                ),
            ),
            Some(_) => Ok(()),
        }
    }

    /// [`Command::KeepBlob`].
    pub(crate) fn decide_keep_blob(&self, now: Millis, blob: &Blob) -> Result<Decision, Rejection> {
        if !self.registry.keeps(&blob.digest) && self.registry.kept.len() >= BLOBS_KEPT_MAX {
            return reject(
                codes::BLOBS_FULL,
                format!(
                    "the cluster keeps {BLOBS_KEPT_MAX} blobs, as many as it may; \
                     delete some (DELETE /v1/blobs/{{digest}}) or wait for their collection"
                ),
            );
        }
        decided(now, vec![EventKind::BlobKept { blob: blob.clone() }])
    }

    /// Refuses a blob the cluster does not keep (`blob_not_found`).
    fn check_kept(&self, digest: &Digest) -> Result<(), Rejection> {
        if self.registry.keeps(digest) {
            return Ok(());
        }
        reject(
            codes::BLOB_NOT_FOUND,
            format!("the cluster keeps no blob sha256:{}", digest_text(digest)),
        )
    }

    /// [`Command::DropBlob`].
    pub(crate) fn decide_drop_blob(
        &self,
        now: Millis,
        digest: &Digest,
    ) -> Result<Decision, Rejection> {
        self.check_kept(digest)?;
        let refs = self.registry.refs(digest);
        if refs > 0 {
            return reject(
                codes::BLOB_IN_USE,
                format!(
                    "blob sha256:{} is named {refs} time(s) by held jobs (inputs, outputs) or \
                     schedules; it is collected after the retention time once none does",
                    digest_text(digest)
                ),
            );
        }
        decided(now, vec![EventKind::BlobDropped { digest: *digest }])
    }

    /// [`Command::PurgeBlob`]: refused while a live name holds the blob
    /// (`blob_in_use`, naming it); answers how many jobs forget it.
    pub(crate) fn decide_purge_blob(
        &self,
        now: Millis,
        digest: &Digest,
    ) -> Result<Decision, Rejection> {
        self.check_kept(digest)?;
        if let Some(holder) = self.live_name_of(digest) {
            return reject(
                codes::BLOB_IN_USE,
                format!(
                    "blob sha256:{} cannot be purged: {holder}",
                    digest_text(digest)
                ),
            );
        }
        let changed = self.namers_of(digest).count() as u64;
        let mut decision = decided(now, vec![EventKind::BlobPurged { digest: *digest }])?;
        decision.reply = Reply::Bulk { changed };
        Ok(decision)
    }

    /// What keeps a purge of `digest` from going ahead, in words: the
    /// first unfinished job that reads it as its input; or that reads the
    /// outputs of a job that names it (which would lose that output, or,
    /// purged for reading it, its result); or the first schedule whose
    /// jobs would read it.
    fn live_name_of(&self, digest: &Digest) -> Option<String> {
        let unfinished = |id: &JobId| self.jobs.contains_key(id);
        for (id, job) in &self.blobs {
            if !job.named().any(|named| named == *digest) {
                continue;
            }
            let reads = job.input.as_ref().is_some_and(|i| i.digest == *digest);
            if reads && unfinished(id) {
                return Some(format!(
                    "job {id}, not finished, reads it as its input: cancel it first"
                ));
            }
            let children = self.dags.children.get(id).map_or(&[][..], Vec::as_slice);
            let reader = children.iter().find(|child| {
                unfinished(child) && self.dags.nodes.get(child).is_some_and(|node| node.outputs)
            });
            if let Some(child) = reader {
                return Some(format!(
                    "job {child}, not finished, reads the outputs of job {id}, which names it: \
                     cancel it first"
                ));
            }
        }
        (self.schedules.iter())
            .find(|(_, schedule)| {
                let input = schedule.spec.options.input_blob.as_ref();
                input.is_some_and(|input| input.digest == *digest)
            })
            .map(|(name, _)| format!("schedule {name:?} gives it to its jobs: delete it first"))
    }

    /// The jobs whose blobs name `digest`.
    fn namers_of<'a>(&'a self, digest: &'a Digest) -> impl Iterator<Item = JobId> + 'a {
        (self.blobs.iter())
            .filter(|(_, job)| job.named().any(|named| named == *digest))
            .map(|(&id, _)| id)
    }

    /// [`EventKind::BlobPurged`]. A journal is decoded, not trusted: an
    /// unfinished job's input or a schedule's that names the blob keeps
    /// it kept and named (the decision refused that case).
    pub(crate) fn apply_blob_purged(&mut self, digest: &Digest, at: Millis) {
        let namers: Vec<JobId> = self.namers_of(digest).collect();
        for id in namers {
            let job = self.blobs.get_mut(&id).expect("listed");
            let reads = job.input.as_ref().is_some_and(|i| i.digest == *digest);
            if reads && !self.jobs.contains_key(&id) {
                self.apply_purged(id, at);
                continue;
            }
            let before = output_bytes(&job.outputs);
            let count = job.outputs.len();
            job.outputs.retain(|output| output.digest != *digest);
            let dropped = count - job.outputs.len();
            let after = output_bytes(&job.outputs);
            if job.is_empty() {
                self.blobs.remove(&id);
            }
            let namespace = self.namespaces.of(id);
            (self.index).sub_results(namespace, before - after);
            for _ in 0..dropped {
                self.registry.release(*digest, at);
            }
        }
        self.registry.forget(digest);
    }

    /// The blobs a tick at `now` stops keeping, as one event.
    pub(crate) fn collect_blobs(&self, now: Millis, kinds: &mut Vec<EventKind>) {
        let digests = self.registry.collectable(now, self.config.retention_ms);
        if !digests.is_empty() {
            kinds.push(EventKind::BlobsCollected { digests });
        }
    }

    pub(crate) fn apply_blob_kept(&mut self, blob: &Blob, at: Millis) {
        // A journal's upload past the bound changes nothing, as its
        // refusal would have.
        if self.registry.keeps(&blob.digest) || self.registry.kept.len() < BLOBS_KEPT_MAX {
            self.registry.keep(blob, at);
        }
    }

    pub(crate) fn apply_blob_dropped(&mut self, digest: &Digest) {
        self.registry.forget(digest);
    }

    pub(crate) fn apply_blobs_collected(&mut self, digests: &[Digest]) {
        for digest in digests {
            self.registry.forget(digest);
        }
    }

    /// Answers [`Query::Blobs`].
    pub(crate) fn blobs_status(&self, digests: &[Digest]) -> Result<Answer, Rejection> {
        if digests.len() > BLOBS_ASKED_MAX {
            return reject(
                codes::INVALID_FILTER,
                format!(
                    "at most {BLOBS_ASKED_MAX} blobs a query; {} asked",
                    digests.len()
                ),
            );
        }
        let retention = self.config.retention_ms;
        let status = (digests.iter())
            .map(|digest| {
                let kept = self.registry.kept.get(digest);
                let refs = self.registry.refs(digest);
                BlobStatus {
                    digest: *digest,
                    kept: kept.is_some(),
                    refs,
                    collect_at: kept
                        .filter(|_| refs == 0)
                        .map(|kept| kept.idle_since.saturating_add(retention)),
                }
            })
            .collect();
        Ok(Answer::Blobs(status))
    }

    /// Answers [`Query::KeptBlobs`]: the first `limit` kept blobs after
    /// `after`, by digest.
    pub(crate) fn kept_blobs(&self, after: Option<&Digest>, limit: u32) -> Answer {
        let limit = limit.clamp(1, crate::limits::LIST_LIMIT_MAX) as usize;
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut kept = self
            .registry
            .kept
            .range::<Digest, _>((from, Bound::Unbounded));
        let retention = self.config.retention_ms;
        let blobs: Vec<KeptBlob> = (kept.by_ref().take(limit))
            .map(|(digest, kept)| {
                let refs = self.registry.refs(digest);
                KeptBlob {
                    status: BlobStatus {
                        digest: *digest,
                        kept: true,
                        refs,
                        collect_at: (refs == 0).then(|| kept.idle_since.saturating_add(retention)),
                    },
                    size: kept.size,
                }
            })
            .collect();
        let next = match kept.next() {
            Some(_) => blobs.last().map(|blob| blob.status.digest),
            None => None,
        };
        Answer::KeptBlobs { blobs, next }
    }

    /// Every blob held jobs and schedules name, once per name (what the
    /// registry's counts are rebuilt from).
    pub(crate) fn named_blobs(&self) -> impl Iterator<Item = (Digest, u64)> + '_ {
        let jobs = (self.blobs.values()).flat_map(|job| {
            job.input
                .iter()
                .map(|b| (b.digest, b.size))
                .chain(job.outputs.iter().map(|b| (b.digest, b.size)))
        });
        let schedules = (self.schedules.values())
            .filter_map(|schedule| schedule.spec.options.input_blob.as_ref())
            .map(|b| (b.digest, b.size));
        jobs.chain(schedules)
    }

    /// The blob job `id` reads as its input.
    pub(crate) fn input_blob_of(&self, id: JobId) -> Option<&Blob> {
        self.blobs.get(&id)?.input.as_ref()
    }

    /// The output blobs job `id` wrote (none until it succeeded).
    pub(crate) fn outputs_of(&self, id: JobId) -> &[NamedBlob] {
        self.blobs
            .get(&id)
            .map_or(&[], |job| job.outputs.as_slice())
    }

    /// The output blobs of each of `parents` that a child of theirs reads,
    /// named `PARENT/OUTPUT` (see the module notes), in order; `taken`
    /// holds the names given already (the child's `input`), and gets
    /// these.
    pub(crate) fn parents_blobs(
        &self,
        parents: &[JobId],
        taken: &mut BTreeSet<String>,
    ) -> Vec<Vec<NamedBlob>> {
        (parents.iter())
            .map(|&parent| {
                let outputs = self.outputs_of(parent);
                if outputs.is_empty() {
                    return Vec::new();
                }
                let prefix = match self.dags.nodes.get(&parent) {
                    Some(node) => node.name.clone(),
                    None => parent.to_string(),
                };
                (outputs.iter())
                    .map(|output| NamedBlob {
                        name: format!("{prefix}/{}", output.name),
                        digest: output.digest,
                        size: output.size,
                    })
                    .filter(|blob| taken.insert(blob.name.clone()))
                    .collect()
            })
            .collect()
    }

    /// What an attempt of job `id` may read ([`Assignment::blobs`]), and
    /// the part of it each parent gives, for its input envelope (empty
    /// unless the job is a DAG's job that asked for its parents'
    /// outputs).
    pub(crate) fn assignment_blobs(&self, id: JobId) -> (Vec<NamedBlob>, Vec<Vec<NamedBlob>>) {
        let mut blobs = Vec::new();
        let mut taken = BTreeSet::new();
        if let Some(input) = self.input_blob_of(id) {
            taken.insert(INPUT_BLOB_NAME.to_owned());
            blobs.push(NamedBlob {
                name: INPUT_BLOB_NAME.to_owned(),
                digest: input.digest,
                size: input.size,
            });
        }
        let by_parent = match self.dags.nodes.get(&id) {
            Some(node) if node.outputs => self.parents_blobs(&node.parents, &mut taken),
            _ => Vec::new(),
        };
        blobs.extend(by_parent.iter().flatten().cloned());
        (blobs, by_parent)
    }
}

#[cfg(test)]
#[path = "blobs_tests.rs"]
mod blobs_tests;
