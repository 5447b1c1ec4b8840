//! Finished jobs, held packed.
//!
//! Finished jobs are most of what a master holds and never change again
//! until they are purged or retried, so each is kept as the bytes a
//! snapshot holds for it (see [`Done`]) and decoded only when read. A
//! listing, a filter or a bulk change reads what it needs in place
//! ([`Packed`], without unpacking); a view, a retry or a purge unpacks.
//!
//! Invariant: a packed record is exactly `postcard` of its [`Job`], so a
//! snapshot copies it as is, and the in-place readers mirror [`Job`]'s
//! field order (a unit test checks the two agree). This module does not
//! decide when a job is finished or purged (see `jobs`).

use serde::Deserialize;

use crate::master::{Job, Master};
use crate::protocol::*;
use crate::scan::Facts;

/// A finished job, packed: its state's number (its place in
/// [`JobState::ALL`]), then its record as `postcard` bytes (exactly the
/// bytes a snapshot holds for it), in one allocation. Finished jobs are
/// most of what a master holds (a million by default), never change again
/// until they are purged or retried, and are read one at a time; packed,
/// one takes about a third of the memory it takes as a [`Job`] in a map
/// (BENCHMARKS.md, "Finished jobs packed"), and its map entry is a
/// pointer and a length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Done {
    packed: Box<[u8]>,
}

impl Done {
    pub(crate) fn pack(job: &Job) -> Done {
        let packed =
            postcard::to_extend(job, Self::state_byte(job)).expect("postcard encoding into a Vec");
        Done {
            packed: packed.into(),
        }
    }

    /// `job` as `record`, its postcard bytes.
    pub(crate) fn of(job: &Job, record: &[u8]) -> Done {
        let mut packed = Vec::with_capacity(1 + record.len());
        packed.extend_from_slice(&Self::state_byte(job));
        packed.extend_from_slice(record);
        Done {
            packed: packed.into(),
        }
    }

    /// The state's number: its place in [`JobState::ALL`], as the index's
    /// counts number it.
    fn state_byte(job: &Job) -> Vec<u8> {
        vec![job.state as u8]
    }

    pub(crate) fn state(&self) -> JobState {
        JobState::ALL[usize::from(self.packed[0])]
    }

    /// The job's record, as a snapshot holds it.
    pub(crate) fn record(&self) -> &[u8] {
        &self.packed[1..]
    }

    /// When the job was submitted, read in place.
    pub(crate) fn submitted_at(&self) -> Option<Millis> {
        let (head, _): (PackedHead, _) = postcard::take_from_bytes(self.record()).ok()?;
        Some(head.submitted_at)
    }

    /// The job. The bytes were encoded by [`Done::pack`] or checked when
    /// their snapshot was restored, so decoding them fails only if memory
    /// was corrupted; such a job reads as gone (on every replica alike).
    pub(crate) fn unpack(&self) -> Option<Job> {
        postcard::from_bytes(self.record()).ok()
    }

    /// Its [`Facts`], read in place (`None` only as [`Done::unpack`]).
    pub(crate) fn facts(&self) -> Option<Facts<'_>> {
        let (packed, _): (Packed, _) = postcard::take_from_bytes(self.record()).ok()?;
        Some(Facts {
            state: packed.state,
            module: packed.spec.module,
            priority: packed.spec.priority,
            submitted_at: packed.submitted_at,
            finished_at: packed.finished_at,
            attempts: packed.attempts.len() as u32,
            error: packed.error.map(|e| (e.code, e.message)),
        })
    }
}

impl Master {
    /// Moves job `id` to `done` if it finished.
    pub(crate) fn pack(&mut self, id: JobId) {
        if let Some(job) = self.jobs.get(&id)
            && job.state.is_terminal()
        {
            let job = self.jobs.remove(&id).expect("present");
            self.done.insert(id, Done::pack(&job));
        }
    }
}

/// A [`Job`]'s record read in place, field for field up to its error (a
/// unit test checks the two agree): postcard has no field names, so the
/// order is the format.
#[derive(Deserialize)]
struct Packed<'a> {
    #[serde(borrow)]
    spec: PackedSpec<'a>,
    state: JobState,
    submitted_at: Millis,
    finished_at: Option<Millis>,
    _not_before: Option<Millis>,
    _lease_until: Option<Millis>,
    _seq: u64,
    #[serde(borrow)]
    attempts: Vec<PackedAttempt<'a>>,
    #[serde(borrow)]
    error: Option<PackedFailure<'a>>,
}

/// The first fields of a [`Job`]'s record, read in place.
#[derive(Deserialize)]
struct PackedHead<'a> {
    #[serde(borrow)]
    _spec: PackedSpec<'a>,
    _state: JobState,
    submitted_at: Millis,
}

/// [`JobSpec`] read in place.
#[derive(Deserialize)]
struct PackedSpec<'a> {
    module: Digest,
    _input: &'a [u8],
    _timeout_ms: u64,
    _memory_bytes: Option<u64>,
    _max_attempts: u32,
    priority: i32,
    #[serde(borrow)]
    _idempotency_key: Option<&'a str>,
}

/// [`Attempt`] read in place (only counted).
#[derive(Deserialize)]
struct PackedAttempt<'a> {
    _number: u32,
    _worker: &'a str,
    _started_at: Millis,
    _ended_at: Option<Millis>,
    #[serde(borrow)]
    _outcome: Option<&'a str>,
    #[serde(borrow)]
    _message: Option<&'a str>,
    _duration_ms: Option<u64>,
    _log_tail: &'a str,
    /// [`Usage`]: CPU, memory peak, egress.
    _usage: Option<(u64, u64, u64)>,
}

/// [`Failure`] read in place.
#[derive(Deserialize)]
struct PackedFailure<'a> {
    code: &'a str,
    message: &'a str,
}

#[cfg(test)]
#[path = "done_tests.rs"]
mod done_tests;
