//! An attempt's record of calls: the ordinals and idempotency keys of its
//! outbound calls, the recorded responses it replays, and the clock and
//! random reads it records and replays with them.
//!
//! # Why
//!
//! A job that charges a card and dies before it reports must not charge
//! it again on its next attempt. Two things see to that:
//!
//! * **Idempotency keys.** Every call carries an `Idempotency-Key` header
//!   (unless the job set one): the same for the same call (its ordinal,
//!   which of the job's calls it is, counting every call from 0) in every
//!   attempt of the job, and different for every other call of every other
//!   job: hex of `sha256("cohort/idempotency/1" ‖ job id ‖ submitted-at ‖
//!   ordinal)`, cut to 32 digits. A server that honours such keys (Stripe,
//!   and most payment and messaging APIs) acts once whatever happens.
//! * **Recorded calls.** A call a grant records
//!   ([`HttpGrant::records`](cohort_master::HttpGrant::records)) is sent,
//!   its whole response read, and the response handed to a [`Recorder`]
//!   (the worker: a `RecordCall` command, durable on a majority of the
//!   back-ends) *before* the job sees it. An attempt's [`Replay`] holds the
//!   calls its job recorded; a call that matches the next one (the same
//!   ordinal, method, URL and body digest) gets the recorded response and
//!   is not sent. So a worker killed right after a response arrived costs
//!   nothing: the next attempt, on any node, is answered from the record.
//!
//! # Reads
//!
//! A deterministic job makes the same calls again only if it reads the
//! same clock and random numbers. So for a job with a recording grant the
//! wall clock and both random sources go through the tape: each read is
//! kept, and sent with the next recorded call; an attempt that replays a
//! call first replays the reads recorded before it, in order, while they
//! are of the same kind and size. A read past them, or of another kind,
//! ends the replay of reads; so does a call that does not match the one
//! recorded at its ordinal, which is sent and recorded in that one's
//! place. Calls are matched by ordinal, as their idempotency keys are, so
//! a job's concurrent calls replay in whatever order their tasks run, and
//! the other calls of the record still answer calls that match them.
//!
//! A checkpoint carries a [`TapeMark`]: the lowest ordinal of a call not
//! yet ended (a call in flight when it was taken is made again, with its
//! ordinal and key, by an attempt resuming from it), and the reads since
//! the last recorded call. An attempt resuming from it
//! starts its ordinals there and skips that many reads of the first
//! recorded call; if it records that call anew, placeholders stand in for
//! the reads it never made, which no attempt replays.
//!
//! # Not covered
//!
//! The monotonic clock is not recorded (timers and timeouts run on it).
//! A recorded call whose response could not be made durable fails the
//! call and the attempt (`internal`, retried): its request was sent, so
//! the next attempt sends it again, with the same idempotency key.

use cohort_master::{Read, RecordedCall, Replay, TapeMark};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cohort_master::limits::{RECORD_RANDOM_BYTES_MAX, RECORD_READS_MAX};

/// A recorder's answer: `Ok` once the call is durable.
pub type RecordFuture = Pin<Box<dyn Future<Output = Result<(), Unrecorded>> + Send>>;

/// Why a recorded call was not kept.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Unrecorded {
    /// The job's record has no room for it (the master's
    /// `record_too_large`): the call fails `egress_record_too_large`, and
    /// the attempt goes on.
    TooLarge(String),
    /// It could not be made durable (no master took it in time): the call
    /// fails `egress_record_failed`, and so does the attempt.
    Failed(String),
}

impl fmt::Display for Unrecorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unrecorded::TooLarge(why) | Unrecorded::Failed(why) => f.write_str(why),
        }
    }
}

/// Makes an attempt's recorded call durable before its job sees the
/// response (the worker sends it to the master).
pub trait Recorder: Send + Sync + fmt::Debug {
    /// Keeps `call`; an error says why it could not be kept.
    fn record(&self, call: RecordedCall) -> RecordFuture;
}

/// What an attempt replays and where it records, as its request carries it.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// The job.
    pub job: u64,
    /// The recorded calls and where to start.
    pub replay: Replay,
    /// Where recorded calls go; `None`: nothing is recorded (a job run
    /// once, by `cohort exec`), and calls are sent as they are.
    pub recorder: Option<Arc<dyn Recorder>>,
}

/// The attempt's side: shared by its calls and its clock and random reads.
#[derive(Clone)]
pub(crate) struct Tape(Arc<Mutex<State>>);

struct State {
    /// Hashes the job's identity; an ordinal finishes a key.
    seed: Sha256,
    /// The ordinal of the next call.
    next: u32,
    /// The ordinals of the calls begun and not yet ended.
    open: BTreeSet<u32>,
    /// Recorded calls not yet replayed, by ordinal.
    replay: VecDeque<RecordedCall>,
    /// The reads to replay before the next recorded call.
    reads: VecDeque<Read>,
    /// The reads since the last recorded call, as the job saw them: what
    /// the next recorded call keeps.
    pending: Vec<Read>,
    /// Random bytes in `pending`.
    pending_random: usize,
    /// Whether a read was past what one recorded call keeps: later ones
    /// are not kept either, so the kept ones stay the reads' first ones.
    full: bool,
    /// How many reads since the last recorded call (those before a mark
    /// this attempt resumed from included).
    since_call: u32,
    /// The reads before the mark this attempt resumed from, until its
    /// first recorded call.
    before_mark: u32,
    recorder: Option<Arc<dyn Recorder>>,
    /// Why a recorded call could not be made durable: the attempt fails.
    failed: Option<String>,
}

/// What the tape answers for a call it records.
pub(crate) enum Replayed {
    /// The recorded response: send nothing.
    Found(Box<RecordedCall>),
    /// None: send it (and record it); `diverged` when a recorded call at
    /// this ordinal did not match (it is replaced, and the replay of reads
    /// ends).
    Live { diverged: bool },
}

impl Tape {
    pub(crate) fn new(recording: Recording) -> Self {
        let Recording {
            job,
            replay,
            recorder,
        } = recording;
        let mut seed = Sha256::new();
        seed.update(b"cohort/idempotency/1");
        seed.update(job.to_be_bytes());
        seed.update(replay.submitted_at.to_be_bytes());
        if job == 0 {
            // A job run outside a cluster: keys of its own.
            let mut nonce = [0u8; 16];
            let _ = getrandom::fill(&mut nonce);
            seed.update(nonce);
        }
        let Replay {
            mark,
            calls,
            submitted_at: _,
        } = replay;
        let mut replay: VecDeque<RecordedCall> = calls.into();
        replay.retain(|call| call.ordinal >= mark.calls);
        let reads = (replay.front())
            .map(|call| {
                call.reads
                    .iter()
                    .skip(mark.reads as usize)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Self(Arc::new(Mutex::new(State {
            seed,
            next: mark.calls,
            open: BTreeSet::new(),
            replay,
            reads,
            pending: Vec::new(),
            pending_random: 0,
            full: false,
            since_call: mark.reads,
            before_mark: mark.reads,
            recorder,
            failed: None,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is a few assignments: a panic cannot leave it torn.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the next call's ordinal, when the job makes the call (not
    /// when its request is first polled: a job's concurrent calls are
    /// numbered in the order it made them); the call is open until
    /// [`ended`](Self::ended).
    pub(crate) fn ordinal(&self) -> u32 {
        let mut state = self.lock();
        let ordinal = state.next;
        state.next = state.next.saturating_add(1);
        state.open.insert(ordinal);
        ordinal
    }

    /// Call `ordinal` ended (its response read, recorded, or failed).
    pub(crate) fn ended(&self, ordinal: u32) {
        self.lock().open.remove(&ordinal);
    }

    /// The idempotency key of call `ordinal`.
    pub(crate) fn idempotency_key(&self, ordinal: u32) -> String {
        let mut hash = self.lock().seed.clone();
        hash.update(ordinal.to_be_bytes());
        let digest = hash.finalize();
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether calls are recorded at all (there is a recorder).
    pub(crate) fn records(&self) -> bool {
        self.lock().recorder.is_some()
    }

    /// The recorded response of call `ordinal`, if it matches the record.
    pub(crate) fn replayed(
        &self,
        ordinal: u32,
        method: &str,
        url: &str,
        body_sha256: &[u8; 32],
    ) -> Replayed {
        let mut state = self.lock();
        // The record at this very ordinal: a job's concurrent calls come
        // in any order.
        let Some(at) = state.replay.iter().position(|call| call.ordinal == ordinal) else {
            // A call the record has not: one not recorded (a `GET`).
            return Replayed::Live { diverged: false };
        };
        let found = state.replay.remove(at).expect("found above");
        if found.method != method || found.url != url || &found.body_sha256 != body_sha256 {
            state.reads.clear();
            return Replayed::Live { diverged: true };
        }
        state.next_call_done(ordinal, usize::MAX);
        Replayed::Found(Box::new(found))
    }

    /// The reads to keep with a call recorded now; once it is durable,
    /// [`recorded`](Self::recorded) takes as many of them as this gave
    /// (reads made while the master keeps it belong to the next one).
    pub(crate) fn pending_reads(&self) -> Vec<Read> {
        let state = self.lock();
        // The reads before the mark this attempt resumed from.
        let placeholders = state.before_mark as usize;
        let mut reads = vec![
            Read::Clock {
                seconds: 0,
                nanos: 0
            };
            placeholders.min(RECORD_READS_MAX)
        ];
        reads.extend(state.pending.iter().cloned());
        reads.truncate(RECORD_READS_MAX);
        reads
    }

    /// Call `ordinal`, recorded with `reads` of the pending reads (what
    /// [`pending_reads`](Self::pending_reads) gave, placeholders
    /// included), was made durable: its record replaces any at its ordinal.
    pub(crate) fn recorded(&self, ordinal: u32, reads: usize) {
        let mut state = self.lock();
        state.replay.retain(|call| call.ordinal != ordinal);
        let taken = reads.saturating_sub(state.before_mark as usize);
        state.next_call_done(ordinal, taken);
    }

    /// A recorded call could not be made durable: the attempt fails.
    pub(crate) fn fail(&self, why: String) {
        self.lock().failed.get_or_insert(why);
    }

    /// Why the attempt must fail, if a recorded call could not be kept.
    pub(crate) fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// The recorder, for a call recorded now.
    pub(crate) fn recorder(&self) -> Option<Arc<dyn Recorder>> {
        self.lock().recorder.clone()
    }

    /// Where the attempt is, for a checkpoint taken now: its lowest call
    /// not ended (one in flight is made again by an attempt resuming from
    /// the checkpoint, with the same ordinal and key), or its next.
    pub(crate) fn mark(&self) -> TapeMark {
        let state = self.lock();
        TapeMark {
            calls: state.open.first().copied().unwrap_or(state.next),
            reads: state.since_call,
        }
    }

    /// The wall clock as the job reads it.
    pub(crate) fn clock(&self) -> Duration {
        let mut state = self.lock();
        let now = match state.reads.front() {
            Some(Read::Clock { seconds, nanos }) => {
                let now = Duration::new(*seconds, (*nanos).min(999_999_999));
                state.reads.pop_front();
                now
            }
            _ => {
                state.reads.clear();
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
            }
        };
        state.keep(Read::Clock {
            seconds: now.as_secs(),
            nanos: now.subsec_nanos(),
        });
        now
    }

    /// Random bytes as the job reads them.
    pub(crate) fn random(&self, into: &mut [u8]) {
        let mut state = self.lock();
        match state.reads.front() {
            Some(Read::Random(bytes)) if bytes.len() == into.len() => {
                into.copy_from_slice(bytes);
                state.reads.pop_front();
            }
            _ => {
                state.reads.clear();
                if getrandom::fill(into).is_err() {
                    // The kernel's source never fails once the process
                    // runs; if it did, a job must not get zeros.
                    panic!("the system's random source failed");
                }
            }
        }
        state.keep(Read::Random(into.to_vec()));
    }
}

impl State {
    /// Recorded call `ordinal` was made durable with the first `taken`
    /// pending reads (all, for one replayed): the reads before the next
    /// recorded call start with those made since.
    fn next_call_done(&mut self, ordinal: u32, taken: usize) {
        self.before_mark = 0;
        let taken = taken.min(self.pending.len());
        let gone: usize = (self.pending.drain(..taken))
            .map(|read| match read {
                Read::Random(bytes) => bytes.len(),
                Read::Clock { .. } => 0,
            })
            .sum();
        self.pending_random -= gone;
        if self.pending.is_empty() {
            self.full = false;
        }
        self.since_call = self.pending.len() as u32;
        self.reads = (self.replay.iter())
            .filter(|call| call.ordinal > ordinal)
            .min_by_key(|call| call.ordinal)
            .map(|call| call.reads.iter().cloned().collect())
            .unwrap_or_default();
    }

    /// Keeps a read for the next recorded call, within the bounds of one.
    fn keep(&mut self, read: Read) {
        self.since_call = self.since_call.saturating_add(1);
        let random = match &read {
            Read::Random(bytes) => bytes.len(),
            Read::Clock { .. } => 0,
        };
        if !self.full
            && self.pending.len() < RECORD_READS_MAX
            && self.pending_random + random <= RECORD_RANDOM_BYTES_MAX
        {
            self.pending_random += random;
            self.pending.push(read);
        } else {
            self.full = true;
        }
    }
}

/// The job's wall clock, through its tape.
pub(crate) struct TapeClock(pub(crate) Tape);

impl wasmtime_wasi::HostWallClock for TapeClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        self.0.clock()
    }
}

/// The job's random sources, through its tape.
pub(crate) struct TapeRandom(pub(crate) Tape);

impl rand_core::TryRng for TapeRandom {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let mut bytes = [0; 4];
        self.0.random(&mut bytes);
        Ok(u32::from_le_bytes(bytes))
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut bytes = [0; 8];
        self.0.random(&mut bytes);
        Ok(u64::from_le_bytes(bytes))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.0.random(dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(ordinal: u32, reads: Vec<Read>) -> RecordedCall {
        RecordedCall {
            ordinal,
            method: "POST".into(),
            url: "http://127.0.0.1:1/hook".into(),
            body_sha256: [7; 32],
            status: 201,
            headers: Vec::new(),
            body: b"ok".to_vec(),
            reads,
        }
    }

    fn tape(mark: TapeMark, calls: Vec<RecordedCall>) -> Tape {
        Tape::new(Recording {
            job: 9,
            replay: Replay {
                mark,
                calls,
                submitted_at: 1_000,
            },
            recorder: None,
        })
    }

    #[test]
    fn a_key_is_the_same_for_a_call_in_every_attempt_and_differs_between_calls_and_jobs() {
        let first = tape(TapeMark::default(), Vec::new());
        let again = tape(TapeMark::default(), Vec::new());
        assert_eq!(first.idempotency_key(3), again.idempotency_key(3));
        assert_ne!(first.idempotency_key(3), first.idempotency_key(4));
        let other = Tape::new(Recording {
            job: 10,
            replay: Replay {
                submitted_at: 1_000,
                ..Replay::default()
            },
            recorder: None,
        });
        assert_ne!(first.idempotency_key(3), other.idempotency_key(3));
        assert_eq!(first.idempotency_key(0).len(), 32);
    }

    #[test]
    fn a_matching_call_is_replayed_with_the_reads_before_it() {
        let clock = Read::Clock {
            seconds: 1_700_000_000,
            nanos: 5,
        };
        let tape = tape(
            TapeMark::default(),
            vec![call(0, vec![clock.clone(), Read::Random(vec![1, 2, 3, 4])])],
        );
        assert_eq!(tape.clock(), Duration::new(1_700_000_000, 5));
        let mut random = [0; 4];
        tape.random(&mut random);
        assert_eq!(random, [1, 2, 3, 4]);
        let ordinal = tape.ordinal();
        match tape.replayed(ordinal, "POST", "http://127.0.0.1:1/hook", &[7; 32]) {
            Replayed::Found(found) => assert_eq!(found.status, 201),
            Replayed::Live { .. } => panic!("not replayed"),
        }
        // Past the record: live, and kept for the next recorded call.
        tape.random(&mut random);
        assert_eq!(tape.pending_reads(), vec![Read::Random(random.to_vec())]);
    }

    #[test]
    fn a_call_that_differs_is_sent_and_the_others_still_replay() {
        let tape = tape(
            TapeMark::default(),
            vec![call(0, Vec::new()), call(1, Vec::new())],
        );
        let ordinal = tape.ordinal();
        assert!(matches!(
            tape.replayed(ordinal, "POST", "http://127.0.0.1:1/other", &[7; 32]),
            Replayed::Live { diverged: true }
        ));
        // Call 1 is the one recorded at 1: the call its key names.
        let ordinal = tape.ordinal();
        assert!(matches!(
            tape.replayed(ordinal, "POST", "http://127.0.0.1:1/hook", &[7; 32]),
            Replayed::Found(_)
        ));
    }

    #[test]
    fn concurrent_calls_replay_by_ordinal_in_any_order() {
        let tape = tape(
            TapeMark::default(),
            vec![call(0, Vec::new()), call(1, Vec::new())],
        );
        let (first, second) = (tape.ordinal(), tape.ordinal());
        // The second call's task runs first.
        for ordinal in [second, first] {
            assert!(matches!(
                tape.replayed(ordinal, "POST", "http://127.0.0.1:1/hook", &[7; 32]),
                Replayed::Found(found) if found.ordinal == ordinal
            ));
        }
    }

    #[test]
    fn reads_made_while_a_call_is_being_kept_go_with_the_next_one() {
        let tape = tape(TapeMark::default(), Vec::new());
        let ordinal = tape.ordinal();
        let mut random = [0; 4];
        tape.random(&mut random);
        let reads = tape.pending_reads();
        assert_eq!(reads.len(), 1);
        // A read while the master keeps the call.
        let now = tape.clock();
        tape.recorded(ordinal, reads.len());
        assert_eq!(
            tape.pending_reads(),
            [Read::Clock {
                seconds: now.as_secs(),
                nanos: now.subsec_nanos()
            }]
        );
    }

    #[test]
    fn a_call_the_record_skips_goes_out_and_the_replay_goes_on() {
        let tape = tape(TapeMark::default(), vec![call(1, Vec::new())]);
        let get = tape.ordinal();
        assert!(matches!(
            tape.replayed(get, "GET", "http://127.0.0.1:1/status", &[0; 32]),
            Replayed::Live { diverged: false }
        ));
        let post = tape.ordinal();
        assert!(matches!(
            tape.replayed(post, "POST", "http://127.0.0.1:1/hook", &[7; 32]),
            Replayed::Found(_)
        ));
    }

    #[test]
    fn a_read_of_another_kind_ends_the_replay_of_reads() {
        let tape = tape(
            TapeMark::default(),
            vec![call(0, vec![Read::Random(vec![9; 8])])],
        );
        let mut random = [0; 4];
        tape.random(&mut random);
        // The recorded read was 8 bytes: this one is live, and so is the rest.
        let now = tape.clock();
        assert!(now.as_secs() > 1_600_000_000);
    }

    #[test]
    fn resuming_from_a_mark_starts_its_ordinals_and_skips_its_reads() {
        let tape = tape(
            TapeMark { calls: 2, reads: 1 },
            vec![call(
                2,
                vec![
                    Read::Random(vec![1; 4]),
                    Read::Clock {
                        seconds: 5,
                        nanos: 0,
                    },
                ],
            )],
        );
        assert_eq!(tape.clock(), Duration::from_secs(5));
        assert_eq!(tape.ordinal(), 2);
        // A checkpoint while call 2 is in flight comes back to it.
        assert_eq!(tape.mark(), TapeMark { calls: 2, reads: 2 });
        tape.ended(2);
        assert_eq!(tape.mark(), TapeMark { calls: 3, reads: 2 });
        // Recorded anew, the read before the mark is a placeholder.
        let reads = tape.pending_reads();
        assert_eq!(reads.len(), 2);
        assert_eq!(
            reads[1],
            Read::Clock {
                seconds: 5,
                nanos: 0
            }
        );
    }

    #[test]
    fn reads_kept_for_one_call_are_bounded() {
        let tape = tape(TapeMark::default(), Vec::new());
        let mut big = vec![0; RECORD_RANDOM_BYTES_MAX];
        tape.random(&mut big);
        let mut more = [0; 1];
        tape.random(&mut more);
        // Nor a later read that would fit: the kept ones are the first.
        tape.clock();
        assert_eq!(tape.pending_reads().len(), 1);
        assert_eq!(tape.mark().reads, 3);
    }
}
