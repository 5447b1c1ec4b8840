//! Recorded calls: each job's record of the outbound calls whose responses
//! it may only see once they are durable, so that an attempt after a lost
//! worker replays them instead of sending them again.
//!
//! # What is kept
//!
//! A call a grant records ([`HttpGrant::records`]: by default every method
//! but `GET`, `HEAD` and `OPTIONS`) is sent by the worker's node, which
//! reads its whole response and sends a [`Command::RecordCall`]: the
//! call's ordinal (which of the job's calls it is, from 0, every call
//! counting), method, URL and request body digest, the response's status,
//! headers and body, and the wall-clock and random reads the attempt made
//! since its previous recorded call. The master decides one
//! [`EventKind::CallRecorded`]; only once that is durable (journaled and
//! on a majority of the back-ends, like every event) does the node hand
//! the response to the job. A call recorded at ordinal `n` replaces the
//! job's record at `n` only, whatever order an attempt's concurrent calls
//! are recorded in: an attempt that made another call there than the one
//! before it (its job is not deterministic) writes its own over that one,
//! and the rest stays. Calls are keyed as idempotency keys are, by
//! ordinal: a later identical call at an ordinal is the call that key
//! names, which a server honouring keys would not act on twice either.
//!
//! # What is replayed
//!
//! Every attempt's [`Assignment::replay`] carries the job's record. The
//! worker's node answers a call that matches the one recorded at its
//! ordinal (the same method, URL and body digest) with the recorded
//! response, sending nothing; and it answers the job's clock and random
//! reads before that call with the recorded ones. A call that does not
//! match is sent and recorded anew, and ends the replay of reads.
//!
//! A checkpoint carries a [`TapeMark`]: the lowest ordinal of a call the
//! attempt had not finished (a call in flight when the checkpoint was
//! taken is made again after it), and how many reads since its last
//! recorded call. An attempt
//! resuming from that checkpoint starts its ordinals there and skips those
//! reads; the record before the mark is dropped ([`EventKind::TapeMarked`],
//! decided with the `Checkpointed` it belongs to).
//!
//! # Bounds
//!
//! A recorded call is checked against [`check_call`]'s bounds (URL,
//! headers, body, reads: `crate::limits`, "Recorded calls"), and a job
//! keeps at most [`TAPE_CALLS_MAX`] calls and [`TAPE_BYTES_MAX`] bytes
//! since its last checkpoint; past either the command is refused with
//! `record_too_large` (the node checks a call's own bounds first; either
//! way the call fails `egress_record_too_large`). The
//! record is dropped when the job settles. Kept in snapshots from
//! version 8.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limits::{
    CALL_METHOD_BYTES_MAX, READ_BYTES_MIN, RECORD_BODY_BYTES_MAX, RECORD_HEADER_BYTES_MAX,
    RECORD_HEADERS_MAX, RECORD_RANDOM_BYTES_MAX, RECORD_READS_MAX, RECORD_URL_BYTES_MAX,
    TAPE_BYTES_MAX, TAPE_CALLS_MAX,
};
use crate::master::{Master, decided, reject};
use crate::protocol::*;

/// The recorded calls of each job that has any (or a mark).
pub(crate) type Tapes = BTreeMap<JobId, Tape>;

/// One job's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Tape {
    /// Where its last checkpoint was taken.
    pub(crate) mark: TapeMark,
    /// Its recorded calls from the mark on, by ordinal.
    pub(crate) calls: Vec<RecordedCall>,
}

impl RecordedCall {
    /// The bytes it counts for against [`TAPE_BYTES_MAX`]: its strings,
    /// headers, body and reads (each at least [`READ_BYTES_MIN`]).
    pub fn bytes(&self) -> u64 {
        let headers: usize = (self.headers.iter())
            .map(|(name, value)| name.len() + value.len())
            .sum();
        let reads: usize = (self.reads.iter())
            .map(|read| match read {
                Read::Clock { .. } => READ_BYTES_MIN,
                Read::Random(bytes) => bytes.len().max(READ_BYTES_MIN),
            })
            .sum();
        (self.method.len() + self.url.len() + 32 + 2 + headers + self.body.len() + reads) as u64
    }
}

/// Whether `call` is within the bounds of one recorded call; the error
/// says which it crosses. The worker's node checks this before it sends
/// the command (and fails the call instead), the master again.
pub fn check_call(call: &RecordedCall) -> Result<(), String> {
    if call.method.is_empty() || call.method.len() > CALL_METHOD_BYTES_MAX {
        return Err(format!(
            "a recorded call's method is 1 to {CALL_METHOD_BYTES_MAX} bytes"
        ));
    }
    if call.url.len() > RECORD_URL_BYTES_MAX {
        return Err(format!(
            "a recorded call's URL is at most {RECORD_URL_BYTES_MAX} bytes"
        ));
    }
    if !(100..=999).contains(&call.status) {
        return Err(format!("{} is no HTTP status", call.status));
    }
    let header_bytes: usize = (call.headers.iter())
        .map(|(name, value)| name.len() + value.len())
        .sum();
    if call.headers.len() > RECORD_HEADERS_MAX || header_bytes > RECORD_HEADER_BYTES_MAX {
        return Err(format!(
            "a recorded response keeps at most {RECORD_HEADERS_MAX} headers of \
             {RECORD_HEADER_BYTES_MAX} bytes in all"
        ));
    }
    if call.body.len() > RECORD_BODY_BYTES_MAX {
        return Err(format!(
            "a recorded response's body is at most {RECORD_BODY_BYTES_MAX} bytes; this one has {}",
            call.body.len()
        ));
    }
    let random: usize = (call.reads.iter())
        .map(|read| match read {
            Read::Random(bytes) => bytes.len(),
            Read::Clock { .. } => 0,
        })
        .sum();
    if call.reads.len() > RECORD_READS_MAX || random > RECORD_RANDOM_BYTES_MAX {
        return Err(format!(
            "a recorded call keeps at most {RECORD_READS_MAX} reads and \
             {RECORD_RANDOM_BYTES_MAX} random bytes"
        ));
    }
    Ok(())
}

impl Master {
    /// A running attempt's recorded call: kept if it is the job's current
    /// attempt and the call fits its bounds and the job's record.
    pub(crate) fn decide_record_call(
        &self,
        now: Millis,
        id: JobId,
        attempt: u32,
        call: &RecordedCall,
    ) -> Result<Decision, Rejection> {
        if let Err(reason) = self.current_attempt(id, attempt, None) {
            return Ok(Decision {
                events: Vec::new(),
                reply: Reply::Ignored { reason },
            });
        }
        check_call(call).map_err(|why| Rejection::new(codes::RECORD_TOO_LARGE, why))?;
        let tape = self.tapes.get(&id);
        let mark = tape.map(|tape| tape.mark).unwrap_or_default();
        if call.ordinal < mark.calls {
            return reject(
                codes::INVALID_JOB,
                format!(
                    "call {} is before the job's checkpoint, taken at call {}",
                    call.ordinal, mark.calls
                ),
            );
        }
        if !room_for(tape, call) {
            return reject(
                codes::RECORD_TOO_LARGE,
                format!(
                    "a job keeps at most {TAPE_CALLS_MAX} recorded calls and {TAPE_BYTES_MAX} \
                     bytes of them since its last checkpoint"
                ),
            );
        }
        decided(
            now,
            vec![EventKind::CallRecorded {
                id,
                attempt,
                call: call.clone(),
            }],
        )
    }

    /// The mark a checkpoint carries, if it may be kept: never before the
    /// job's current one.
    pub(crate) fn check_mark(&self, id: JobId, mark: &TapeMark) -> Result<(), Rejection> {
        let current = self.tapes.get(&id).map(|tape| tape.mark.calls);
        if current.is_some_and(|calls| mark.calls < calls) {
            return reject(
                codes::INVALID_JOB,
                format!(
                    "a checkpoint at call {} is before the job's last, at call {}",
                    mark.calls,
                    current.unwrap_or_default()
                ),
            );
        }
        Ok(())
    }

    pub(crate) fn apply_call_recorded(&mut self, id: JobId, attempt: u32, call: &RecordedCall) {
        if !self.is_running_attempt(id, attempt) {
            return;
        }
        // A journal is decoded, not trusted: a call a decision would have
        // refused (over its bounds, before the mark, past the record's
        // room) changes nothing, as the refusal did. Dropping the oldest
        // calls instead would leave the record without its first ones, so
        // a later attempt would send those again and replay the rest.
        let tape = self.tapes.get(&id);
        let mark = tape.map(|tape| tape.mark).unwrap_or_default();
        if call.ordinal < mark.calls || check_call(call).is_err() || !room_for(tape, call) {
            return;
        }
        let tape = self.tapes.entry(id).or_default();
        // Only the call at this ordinal is replaced: the others stay, in
        // order, whichever of an attempt's concurrent calls is recorded
        // first.
        match (tape.calls).binary_search_by_key(&call.ordinal, |kept| kept.ordinal) {
            Ok(at) => tape.calls[at] = call.clone(),
            Err(at) => tape.calls.insert(at, call.clone()),
        }
    }

    pub(crate) fn apply_tape_marked(&mut self, id: JobId, attempt: u32, mark: &TapeMark) {
        if !self.is_running_attempt(id, attempt) {
            return;
        }
        let tape = self.tapes.entry(id).or_default();
        tape.mark = *mark;
        tape.calls.retain(|kept| kept.ordinal >= mark.calls);
    }

    fn is_running_attempt(&self, id: JobId, attempt: u32) -> bool {
        self.jobs.get(&id).is_some_and(|job| {
            job.state == JobState::Running && job.attempts.last().map(|a| a.number) == Some(attempt)
        })
    }

    /// What an attempt of job `id` (submitted at `submitted_at`) replays.
    pub(crate) fn replay_of(&self, id: JobId, submitted_at: Millis) -> Replay {
        let tape = self.tapes.get(&id);
        Replay {
            mark: tape.map(|tape| tape.mark).unwrap_or_default(),
            calls: tape.map(|tape| tape.calls.clone()).unwrap_or_default(),
            submitted_at,
        }
    }
}

/// Whether `tape` (none yet: empty) has room for `call`, which replaces
/// its calls from `call.ordinal` on: at most [`TAPE_CALLS_MAX`] calls and
/// [`TAPE_BYTES_MAX`] bytes with those before it.
fn room_for(tape: Option<&Tape>, call: &RecordedCall) -> bool {
    let kept = (tape.into_iter())
        .flat_map(|tape| &tape.calls)
        .filter(|kept| kept.ordinal != call.ordinal);
    let (count, bytes) = kept.fold((1, call.bytes()), |(count, bytes), kept| {
        (count + 1, bytes + kept.bytes())
    });
    count <= TAPE_CALLS_MAX && bytes <= TAPE_BYTES_MAX
}

/// `tapes` as a snapshot read them, bounded as decisions would have kept
/// them: by ordinal, one call an ordinal, none before the mark or over its
/// bounds, and each only if the record had room for it after those before
/// it (the first ones kept, a later one refused). In one pass: a decoded
/// record may be as long as its snapshot allows.
pub(crate) fn bounded(mut tapes: Tapes) -> Tapes {
    for tape in tapes.values_mut() {
        let mut calls = std::mem::take(&mut tape.calls);
        calls.retain(|call| call.ordinal >= tape.mark.calls && check_call(call).is_ok());
        calls.sort_by_key(|call| call.ordinal);
        calls.dedup_by_key(|call| call.ordinal);
        let mut bytes = 0;
        for call in calls {
            if tape.calls.len() == TAPE_CALLS_MAX {
                break;
            }
            if bytes + call.bytes() <= TAPE_BYTES_MAX {
                bytes += call.bytes();
                tape.calls.push(call);
            }
        }
    }
    tapes
}

#[cfg(test)]
#[path = "tapes_tests.rs"]
mod tapes_tests;
