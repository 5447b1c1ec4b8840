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
//! Invariants: an entry exists only for a held job with an input blob or
//! outputs; only a succeeded job has outputs, and the index's
//! `result_bytes` counts them (`output_bytes`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::limits::{OUTPUT_BYTES_FIXED, OUTPUT_NAME_BYTES_MAX, OUTPUTS_MAX};
use crate::master::Master;
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
    pub(crate) fn record_input_blob(&mut self, id: JobId, input: Option<&Blob>) {
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
            self.index.result_bytes =
                (self.index.result_bytes).saturating_sub(output_bytes(&replaced.outputs));
        }
    }

    /// Job `id`'s attempt succeeded with `outputs`: they are its outputs
    /// now, in place of any it had.
    pub(crate) fn record_outputs(&mut self, id: JobId, outputs: &[NamedBlob]) {
        let job = self.blobs.entry(id).or_default();
        let before = std::mem::replace(&mut job.outputs, outputs.to_vec());
        let index = &mut self.index;
        index.result_bytes = index.result_bytes.saturating_sub(output_bytes(&before));
        index.result_bytes += output_bytes(outputs);
        if job.is_empty() {
            self.blobs.remove(&id);
        }
    }

    /// Forgets a purged job's blobs.
    pub(crate) fn forget_blobs(&mut self, id: JobId) {
        if let Some(job) = self.blobs.remove(&id) {
            self.index.result_bytes =
                (self.index.result_bytes).saturating_sub(output_bytes(&job.outputs));
        }
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
