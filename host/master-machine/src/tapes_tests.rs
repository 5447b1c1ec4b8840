//! Recorded calls: kept for the current attempt and replayed to the next,
//! replaced from an ordinal on, cut at a checkpoint's mark, bounded,
//! dropped when the job settles, kept in snapshots; which calls a grant
//! records; and the older formats, which never held them.

use super::*;
use crate::limits::CALL_METHOD_BYTES_MAX;
use crate::master::SNAPSHOT_VERSION;
use crate::scenarios::{failed, finish, poll, spec, submit, submit_with};
use crate::testing::restore_in_parts;

const T: Millis = 1_000_000;

/// A master driven as the host drives it, keeping the assignments its
/// events made.
struct Run {
    master: Master,
    assignments: Vec<Assignment>,
}

impl Run {
    fn new() -> Self {
        Self {
            master: Master::new(),
            assignments: Vec::new(),
        }
    }

    fn run(&mut self, now: Millis, command: Command) -> Result<Reply, Rejection> {
        let decision = self.master.decide(now, &command)?;
        for event in &decision.events {
            for effect in self.master.apply(event) {
                if let Effect::Assign(assignment) = effect {
                    self.assignments.push(*assignment);
                }
            }
        }
        Ok(decision.reply)
    }

    fn ok(&mut self, now: Millis, command: Command) -> Reply {
        self.run(now, command).expect("accepted")
    }

    fn refused(&mut self, now: Millis, command: Command) -> Code {
        self.run(now, command).expect_err("refused").code
    }

    /// The events `command` is decided to at `now`, without applying them.
    fn decided(&self, now: Millis, command: &Command) -> Vec<EventKind> {
        let decision = self.master.decide(now, command).expect("accepted");
        decision
            .events
            .into_iter()
            .map(|event| event.kind)
            .collect()
    }

    /// The assignment of attempt `attempt` of job `id`.
    fn assignment(&self, id: JobId, attempt: u32) -> &Assignment {
        (self.assignments.iter())
            .find(|a| a.id == id && a.attempt == attempt)
            .unwrap_or_else(|| panic!("attempt {attempt} of job {id} was never assigned"))
    }

    /// Job `id`'s record, as the master keeps it.
    fn tape(&self, id: JobId) -> Option<&Tape> {
        self.master.tapes.get(&id)
    }

    /// The ordinals of job `id`'s recorded calls.
    fn ordinals(&self, id: JobId) -> Vec<u32> {
        (self.tape(id).into_iter())
            .flat_map(|tape| &tape.calls)
            .map(|call| call.ordinal)
            .collect()
    }

    /// Job 1's attempt `attempt` lost with its worker at `now`, and the
    /// next one assigned to `next` once its backoff is over: that
    /// attempt's assignment.
    fn lose_worker(&mut self, now: Millis, attempt: u32, next: &str) -> &Assignment {
        let worker = self.assignment(1, attempt).worker.clone();
        self.ok(now, Command::WorkerGone { worker });
        self.ok(now + 60_000, Command::Tick);
        self.ok(now + 60_001, poll(next, 1));
        self.assignment(1, attempt + 1)
    }
}

/// Job 1 submitted at `T`, its first attempt running on `w1` since `T + 1`.
fn running() -> Run {
    let mut run = Run::new();
    run.ok(T, submit(1, spec(1, b"pay")));
    run.ok(T + 1, poll("w1", 1));
    run
}

/// The call at `ordinal`, its response's body `body`, after one clock
/// read.
fn call(ordinal: u32, body: &[u8]) -> RecordedCall {
    RecordedCall {
        ordinal,
        method: "POST".into(),
        url: format!("https://api.example.com/v1/charges?n={ordinal}"),
        body_sha256: [ordinal as u8; 32],
        status: 201,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: body.to_vec(),
        reads: vec![Read::Clock {
            seconds: 1_700_000_000,
            nanos: ordinal,
        }],
    }
}

fn record(id: JobId, attempt: u32, call: RecordedCall) -> Command {
    Command::RecordCall { id, attempt, call }
}

/// A checkpoint of attempt `attempt` of job `id` taken at `mark`.
fn checkpoint(id: JobId, attempt: u32, data: &[u8], mark: Option<TapeMark>) -> Command {
    Command::Checkpoint {
        id,
        attempt,
        data: data.to_vec(),
        mark,
    }
}

fn mark(calls: u32, reads: u32) -> TapeMark {
    TapeMark { calls, reads }
}

#[test]
fn a_recorded_call_is_kept_and_replayed_to_the_next_attempt() {
    let mut run = running();
    // The first attempt has nothing to replay; what names its calls is
    // there from the start.
    let first = &run.assignment(1, 1).replay;
    assert_eq!(
        *first,
        Replay {
            mark: TapeMark::default(),
            calls: Vec::new(),
            submitted_at: T,
        }
    );
    let calls = [call(0, b"ch_1"), call(1, b"ch_2")];
    for (at, call) in (T + 2..).zip(&calls) {
        let command = record(1, 1, call.clone());
        let decided = run.decided(at, &command);
        assert_eq!(
            decided,
            [EventKind::CallRecorded {
                id: 1,
                attempt: 1,
                call: call.clone(),
            }]
        );
        assert_eq!(run.ok(at, command), Reply::Done);
    }
    let replay = &run.lose_worker(T + 10, 1, "w2").replay;
    assert_eq!(replay.calls, calls);
    assert_eq!(replay.mark, TapeMark::default());
    assert_eq!(replay.submitted_at, T);
}

#[test]
fn a_call_at_an_ordinal_replaces_the_record_there_only() {
    let mut run = running();
    // Concurrent calls are recorded in any order: each keeps its place.
    for ordinal in [3, 0, 2, 1] {
        run.ok(T + 2, record(1, 1, call(ordinal, b"first")));
    }
    assert_eq!(run.ordinals(1), [0, 1, 2, 3]);
    // An attempt that made another call 1 than the one recorded (its job
    // is not deterministic) writes over that one; the rest stays.
    let other = call(1, b"other");
    run.ok(T + 3, record(1, 1, other.clone()));
    let tape = run.tape(1).expect("a record");
    assert_eq!(
        tape.calls,
        [
            call(0, b"first"),
            other.clone(),
            call(2, b"first"),
            call(3, b"first")
        ]
    );
    // The same ordinal again replaces only itself.
    run.ok(T + 4, record(1, 1, call(1, b"again")));
    assert_eq!(run.ordinals(1), [0, 1, 2, 3]);
    assert_eq!(run.tape(1).unwrap().calls[1].body, b"again");
    let replay = &run.lose_worker(T + 10, 1, "w2").replay;
    assert_eq!(replay.calls.len(), 4);
    assert_eq!(replay.calls[1], call(1, b"again"));
}

#[test]
fn a_checkpoint_with_a_mark_drops_the_calls_before_it_and_the_next_attempt_starts_there() {
    let mut run = running();
    for ordinal in 0..3 {
        run.ok(T + 2, record(1, 1, call(ordinal, b"r")));
    }
    // A checkpoint without a mark (a job that records nothing) keeps the
    // record as it is.
    let unmarked = checkpoint(1, 1, b"early", None);
    assert_eq!(run.decided(T + 3, &unmarked).len(), 1);
    run.ok(T + 3, unmarked);
    assert_eq!(run.ordinals(1), [0, 1, 2]);
    // Taken after call 1 (two calls made) and one read since: the mark is
    // decided with its checkpoint, and the record before it is dropped.
    let marked = checkpoint(1, 1, b"half", Some(mark(2, 1)));
    assert_eq!(
        run.decided(T + 4, &marked),
        [
            EventKind::Checkpointed {
                id: 1,
                attempt: 1,
                data: b"half".to_vec(),
            },
            EventKind::TapeMarked {
                id: 1,
                attempt: 1,
                mark: mark(2, 1),
            },
        ]
    );
    run.ok(T + 4, marked);
    assert_eq!(run.ordinals(1), [2]);
    // A call before the mark can no longer be recorded: the attempt that
    // resumes from the checkpoint never makes it.
    let before = record(1, 1, call(1, b"late"));
    assert_eq!(run.refused(T + 5, before), codes::INVALID_JOB);
    run.ok(T + 5, record(1, 1, call(3, b"r")));
    let next = run.lose_worker(T + 10, 1, "w2");
    assert_eq!(next.checkpoint.as_deref(), Some(&b"half"[..]));
    assert_eq!(next.replay.mark, mark(2, 1));
    assert_eq!(next.replay.calls, [call(2, b"r"), call(3, b"r")]);
}

#[test]
fn a_mark_before_the_jobs_last_is_refused() {
    let mut run = running();
    run.ok(T + 2, checkpoint(1, 1, b"at 3", Some(mark(3, 0))));
    let before = checkpoint(1, 1, b"at 2", Some(mark(2, 5)));
    assert_eq!(run.refused(T + 3, before), codes::INVALID_JOB);
    // Refused whole: the checkpoint kept is the one at the mark.
    assert_eq!(run.tape(1).unwrap().mark, mark(3, 0));
    let next = run.lose_worker(T + 10, 1, "w2");
    assert_eq!(next.checkpoint.as_deref(), Some(&b"at 3"[..]));
    // The same mark again, with other reads, is no step back.
    run.ok(T + 60_020, checkpoint(1, 2, b"again", Some(mark(3, 2))));
    assert_eq!(run.tape(1).unwrap().mark, mark(3, 2));
}

#[test]
fn a_record_call_of_an_attempt_not_current_is_ignored_and_changes_nothing() {
    let mut run = running();
    run.ok(T + 2, record(1, 1, call(0, b"kept")));
    // Its worker lost, the job waits for its next attempt: the lost
    // attempt's calls and checkpoints are late.
    run.ok(
        T + 3,
        Command::WorkerGone {
            worker: "w1".into(),
        },
    );
    let before = run.master.clone();
    for late in [
        record(1, 1, call(1, b"late")),
        record(1, 1, call(0, b"over")),
        checkpoint(1, 1, b"late", Some(mark(1, 0))),
    ] {
        assert!(run.decided(T + 4, &late).is_empty());
        let reply = run.ok(T + 4, late);
        assert!(matches!(reply, Reply::Ignored { .. }), "{reply:?}");
        assert_eq!(run.master, before);
    }
    // Once attempt 2 runs, attempt 1 is superseded; an attempt yet to
    // come, or a job that does not exist, is no better.
    run.ok(T + 60_000, Command::Tick);
    run.ok(T + 60_001, poll("w2", 1));
    let before = run.master.clone();
    for stale in [
        record(1, 1, call(1, b"stale")),
        record(1, 3, call(1, b"early")),
        record(9, 1, call(0, b"nobody")),
    ] {
        let reply = run.ok(T + 60_002, stale);
        let Reply::Ignored { reason } = reply else {
            panic!("{reply:?}")
        };
        assert!(!reason.is_empty());
        assert_eq!(run.master, before);
    }
    assert_eq!(run.tape(1).unwrap().calls, [call(0, b"kept")]);
    // The stale attempt's call is ignored even when it is over its bounds:
    // nothing of it is looked at.
    let mut huge = call(1, b"");
    huge.body = vec![0; RECORD_BODY_BYTES_MAX + 1];
    let reply = run.ok(T + 60_003, record(1, 1, huge));
    assert!(matches!(reply, Reply::Ignored { .. }), "{reply:?}");
}

#[test]
fn a_call_over_its_bounds_is_refused_as_too_large() {
    let mut over: Vec<(&str, RecordedCall)> = Vec::new();
    let mut body = call(0, b"");
    body.body = vec![7; RECORD_BODY_BYTES_MAX + 1];
    over.push(("body", body));
    let mut headers = call(0, b"");
    headers.headers = (0..=RECORD_HEADERS_MAX)
        .map(|n| (format!("x-{n}"), b"v".to_vec()))
        .collect();
    over.push(("headers", headers));
    let mut header_bytes = call(0, b"");
    header_bytes.headers = vec![("x-big".into(), vec![b'v'; RECORD_HEADER_BYTES_MAX])];
    over.push(("header bytes", header_bytes));
    let mut reads = call(0, b"");
    reads.reads = vec![
        Read::Clock {
            seconds: 1,
            nanos: 0
        };
        RECORD_READS_MAX + 1
    ];
    over.push(("reads", reads));
    let mut random = call(0, b"");
    random.reads = vec![Read::Random(vec![1; RECORD_RANDOM_BYTES_MAX + 1])];
    over.push(("random bytes", random));
    let mut url = call(0, b"");
    url.url = format!("https://a.example/{}", "p".repeat(RECORD_URL_BYTES_MAX));
    over.push(("url", url));
    let mut method = call(0, b"");
    method.method = String::new();
    over.push(("no method", method));
    let mut long_method = call(0, b"");
    long_method.method = "P".repeat(CALL_METHOD_BYTES_MAX + 1);
    over.push(("method", long_method));
    let mut status = call(0, b"");
    status.status = 99;
    over.push(("status", status));

    let mut run = running();
    for (what, call) in over {
        assert!(check_call(&call).is_err(), "{what}");
        assert_eq!(
            run.refused(T + 2, record(1, 1, call)),
            codes::RECORD_TOO_LARGE,
            "{what}"
        );
        assert_eq!(run.tape(1), None, "{what}");
    }

    // Each bound itself is within.
    let mut most = call(0, b"");
    most.body = vec![7; RECORD_BODY_BYTES_MAX];
    most.headers = (0..RECORD_HEADERS_MAX)
        .map(|n| (format!("x-{n:02}"), vec![b'v'; 100]))
        .collect();
    most.reads = (0..RECORD_READS_MAX)
        .map(|n| match n {
            0 => Read::Random(vec![1; RECORD_RANDOM_BYTES_MAX]),
            _ => Read::Clock {
                seconds: n as u64,
                nanos: 0,
            },
        })
        .collect();
    most.url = format!(
        "https://a.example/{}",
        "p".repeat(RECORD_URL_BYTES_MAX - "https://a.example/".len())
    );
    most.method = "P".repeat(CALL_METHOD_BYTES_MAX);
    assert_eq!(check_call(&most), Ok(()));
    assert_eq!(run.ok(T + 3, record(1, 1, most.clone())), Reply::Done);
    assert_eq!(run.tape(1).unwrap().calls, [most]);
}

#[test]
fn a_job_keeps_at_most_its_bound_of_calls_since_its_checkpoint() {
    let mut run = running();
    let count = TAPE_CALLS_MAX as u32;
    for ordinal in 0..count {
        run.ok(T + 2, record(1, 1, call(ordinal, b"")));
    }
    let one_more = record(1, 1, call(count, b""));
    assert_eq!(
        run.refused(T + 3, one_more.clone()),
        codes::RECORD_TOO_LARGE
    );
    assert_eq!(run.ordinals(1).len(), TAPE_CALLS_MAX);
    // A call that replaces the last one takes no more room.
    run.ok(T + 3, record(1, 1, call(count - 1, b"again")));
    // A checkpoint past them all leaves the record empty again.
    run.ok(T + 4, checkpoint(1, 1, b"", Some(mark(count, 0))));
    assert_eq!(run.ordinals(1), [] as [u32; 0]);
    assert_eq!(run.ok(T + 5, one_more), Reply::Done);
}

#[test]
fn a_job_keeps_at_most_its_bound_of_bytes_since_its_checkpoint() {
    let big = |ordinal| {
        let mut big = call(ordinal, b"");
        big.body = vec![9; RECORD_BODY_BYTES_MAX];
        big
    };
    let fit = (TAPE_BYTES_MAX / big(0).bytes()) as u32;
    assert!(fit > 1 && (fit as usize) < TAPE_CALLS_MAX);
    let mut run = running();
    for ordinal in 0..fit {
        run.ok(T + 2, record(1, 1, big(ordinal)));
    }
    assert_eq!(
        run.refused(T + 3, record(1, 1, big(fit))),
        codes::RECORD_TOO_LARGE
    );
    assert_eq!(run.ordinals(1).len(), fit as usize);
    // The bound is on bytes, not calls: a small call still fits.
    run.ok(T + 3, record(1, 1, call(fit, b"small")));
    // A checkpoint frees the room of the calls before it.
    run.ok(T + 4, checkpoint(1, 1, b"", Some(mark(2, 0))));
    run.ok(T + 5, record(1, 1, big(fit + 1)));
    assert_eq!(run.ordinals(1).len(), fit as usize);
}

#[test]
fn a_journaled_call_a_decision_would_refuse_changes_nothing() {
    // A journal is decoded, not trusted: events applied without their
    // decision (a corrupt journal, or one written under other bounds)
    // keep the record a decision would have kept, its first calls first.
    let mut run = running();
    let count = TAPE_CALLS_MAX as u32;
    for ordinal in 0..count {
        run.ok(T + 2, record(1, 1, call(ordinal, b"")));
    }
    let journaled = |call| Event {
        at: T + 3,
        kind: EventKind::CallRecorded {
            id: 1,
            attempt: 1,
            call,
        },
    };
    let before = run.master.clone();
    run.master.apply(&journaled(call(count, b"past the room")));
    assert_eq!(run.master, before);
    run.ok(T + 3, checkpoint(1, 1, b"", Some(mark(1, 0))));
    let before = run.master.clone();
    let mut over = call(1, b"");
    over.status = 0;
    for call in [call(0, b"before the mark"), over] {
        run.master.apply(&journaled(call));
        assert_eq!(run.master, before);
    }
    // With room (after the mark cut one call) the same call is kept.
    let room = record(1, 1, call(count, b"now"));
    assert_eq!(run.ok(T + 5, room), Reply::Done);
    assert_eq!(run.ordinals(1).first(), Some(&1));
}

#[test]
fn the_record_is_dropped_when_the_job_settles() {
    // Succeeded.
    let mut run = running();
    run.ok(T + 2, record(1, 1, call(0, b"r")));
    run.ok(
        T + 3,
        finish(1, 1, "w1", Outcome::Succeeded(b"ok".to_vec())),
    );
    assert_eq!(run.tape(1), None);
    // Cancelled while it runs.
    let mut run = running();
    run.ok(T + 2, checkpoint(1, 1, b"", Some(mark(0, 0))));
    run.ok(T + 3, record(1, 1, call(0, b"r")));
    run.ok(T + 4, Command::Cancel { id: 1 });
    assert_eq!(run.tape(1), None);
    // Cancelled while it waits for its next attempt.
    let mut run = running();
    run.ok(T + 2, record(1, 1, call(0, b"r")));
    run.ok(
        T + 3,
        Command::WorkerGone {
            worker: "w1".into(),
        },
    );
    assert!(run.tape(1).is_some());
    run.ok(T + 4, Command::Cancel { id: 1 });
    assert_eq!(run.tape(1), None);
    // Failed by its own error.
    let mut run = running();
    run.ok(T + 2, record(1, 1, call(0, b"r")));
    run.ok(T + 3, finish(1, 1, "w1", failed("job_error")));
    let Ok(Answer::Job(job)) = run.master.query(T, &Query::Job { id: 1 }) else {
        panic!("job 1 is kept")
    };
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(run.tape(1), None);
    // A failure that is retried keeps it for the retry.
    let mut run = running();
    run.ok(T + 2, record(1, 1, call(0, b"r")));
    run.ok(T + 3, finish(1, 1, "w1", failed("trap")));
    assert_eq!(run.ordinals(1), [0]);
}

#[test]
fn recorded_calls_survive_a_snapshot_and_a_version_7_one_restores_with_none() {
    let mut run = Run::new();
    run.ok(T, submit(1, spec(1, b"waits")));
    run.ok(T, submit(2, spec(1, b"runs")));
    run.ok(T + 1, poll("w1", 1));
    run.ok(T + 1, poll("w2", 1));
    for id in [1, 2] {
        run.ok(T + 2, record(id, 1, call(0, b"r")));
        run.ok(T + 2, record(id, 1, call(1, b"r")));
    }
    run.ok(T + 3, checkpoint(2, 1, b"half", Some(mark(1, 3))));
    // Job 1's worker is gone: it waits for its next attempt.
    run.ok(
        T + 4,
        Command::WorkerGone {
            worker: "w1".into(),
        },
    );
    assert_eq!(run.ordinals(1), [0, 1]);
    assert_eq!(run.ordinals(2), [1]);
    let snapshot = run.master.snapshot();
    assert_eq!(snapshot[0], SNAPSHOT_VERSION);
    let restored = Master::restore(&snapshot).unwrap();
    assert_eq!(restored, run.master);
    assert_eq!(restored.tapes, run.master.tapes);
    assert_eq!(restored.snapshot(), snapshot, "identical bytes");
    for size in [1, 7, 100] {
        assert_eq!(restore_in_parts(&snapshot, size).unwrap(), run.master);
    }
    // The restored master hands the waiting job's record to its next
    // attempt.
    let mut again = Run {
        master: restored,
        assignments: Vec::new(),
    };
    again.ok(T + 60_000, Command::Tick);
    again.ok(T + 60_001, poll("w3", 1));
    let next = again.assignment(1, 2);
    assert_eq!(next.replay.calls, [call(0, b"r"), call(1, b"r")]);
    // Version 7 ended before the recorded calls (and readable secrets,
    // and the blobs and blobs kept after them).
    let tapes = postcard::to_allocvec(&(&run.master.tapes, &run.master.egress.readable)).unwrap();
    let blobs = postcard::to_allocvec(&run.master.blobs).unwrap();
    let kept = postcard::to_allocvec(&run.master.registry.kept).unwrap();
    let snapshot = run.master.snapshot_v10();
    let mut old = snapshot[..snapshot.len() - tapes.len() - blobs.len() - kept.len()].to_vec();
    old[0] = 7;
    let restored = Master::restore(&old).unwrap();
    assert!(restored.tapes.is_empty());
    assert_eq!(
        Master {
            tapes: Tapes::new(),
            ..run.master.before_locality()
        },
        restored
    );
}

#[test]
fn decoded_records_are_bounded_as_decisions_would_have_kept_them() {
    let mut bad = call(4, b"");
    bad.status = 0;
    let messy = Tape {
        mark: mark(2, 0),
        calls: vec![
            call(5, b"a"),
            call(3, b"a"),
            call(1, b"a"),
            call(3, b"b"),
            bad,
        ],
    };
    let long = Tape {
        mark: TapeMark::default(),
        calls: (0..TAPE_CALLS_MAX as u32 + 10)
            .map(|n| call(n, b""))
            .collect(),
    };
    let big = |ordinal| {
        let mut big = call(ordinal, b"");
        big.body = vec![9; RECORD_BODY_BYTES_MAX];
        big
    };
    let fit = (TAPE_BYTES_MAX / big(0).bytes()) as u32;
    let heavy = Tape {
        mark: TapeMark::default(),
        calls: (0..=fit)
            .map(big)
            .chain([call(fit + 1, b"small")])
            .collect(),
    };
    let tapes = bounded(Tapes::from([(1, messy), (2, long), (3, heavy)]));
    // By ordinal, one a call, none before the mark or over its bounds.
    let ordinals = |id| -> Vec<u32> { tapes[&id].calls.iter().map(|c| c.ordinal).collect() };
    assert_eq!(ordinals(1), [3, 5]);
    assert_eq!(tapes[&1].mark, mark(2, 0));
    // The first calls are kept: a later attempt replays them in order and
    // goes live where the record ends.
    assert_eq!(ordinals(2), (0..TAPE_CALLS_MAX as u32).collect::<Vec<_>>());
    let mut kept: Vec<u32> = (0..fit).collect();
    kept.push(fit + 1);
    assert_eq!(ordinals(3), kept);
    let bytes: u64 = tapes[&3].calls.iter().map(RecordedCall::bytes).sum();
    assert!(bytes <= TAPE_BYTES_MAX);
    // A snapshot's records are read through it.
    let mut run = running();
    run.ok(T + 2, record(1, 1, call(0, b"r")));
    run.master
        .tapes
        .get_mut(&1)
        .unwrap()
        .calls
        .push(call(0, b"twice"));
    let restored = Master::restore(&run.master.snapshot()).unwrap();
    assert_eq!(restored.tapes[&1].calls, [call(0, b"r")]);
}

#[test]
fn a_grant_records_the_calls_that_change_something_unless_it_says_otherwise() {
    let grant = HttpGrant::parse("https://api.example.com", &[], false).unwrap();
    assert_eq!(grant.record, None);
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        assert!(grant.records(method), "{method}");
    }
    for method in ["GET", "HEAD", "OPTIONS"] {
        assert!(!grant.records(method), "{method}");
    }
    let always = grant.clone().with_record(Some(true));
    let never = grant.with_record(Some(false));
    for method in ["GET", "HEAD", "OPTIONS", "POST", "DELETE"] {
        assert!(always.records(method), "{method}");
        assert!(!never.records(method), "{method}");
    }
}

#[test]
fn a_narrowed_job_gets_the_recording_choice_of_the_grant_that_covers_it() {
    let mut run = Run::new();
    let deploy = Command::Deploy {
        name: "hooks".into(),
        digest: [1; 32],
    };
    run.ok(T, deploy);
    let wide = HttpGrant::parse("https://api.example.com/v1/", &[], false)
        .unwrap()
        .with_record(Some(false));
    let grant = Command::Grant {
        name: "hooks".into(),
        grants: vec![wide.clone()],
        secrets: Vec::new(),
    };
    run.ok(T, grant);
    let narrow = HttpGrant::parse(
        "https://api.example.com/v1/charges",
        &["POST".into()],
        false,
    )
    .unwrap();
    assert!(wide.covers(&narrow));
    let by_name = |egress| JobOptions {
        module: Some("hooks".into()),
        egress,
        ..JobOptions::default()
    };
    run.ok(T + 1, submit_with(1, spec(9, b"all"), by_name(None)));
    run.ok(
        T + 1,
        submit_with(2, spec(9, b"narrowed"), by_name(Some(vec![narrow.clone()]))),
    );
    run.ok(T + 2, poll("w1", 2));
    assert_eq!(run.assignment(1, 1).egress, std::slice::from_ref(&wide));
    assert_eq!(
        run.assignment(2, 1).egress,
        [narrow.clone().with_record(Some(false))]
    );
    // A job's own grant makes no recording choice: that is the operator's.
    for choice in [Some(true), Some(false)] {
        let chooses = narrow.clone().with_record(choice);
        assert!(!wide.covers(&chooses), "{choice:?}");
        let submission = submit_with(3, spec(9, b"chooses"), by_name(Some(vec![chooses])));
        assert_eq!(run.refused(T + 3, submission), codes::INVALID_GRANT);
    }
}

#[test]
fn recorded_call_events_are_refused_in_the_bytes_of_older_formats() {
    let events = [
        EventKind::CallRecorded {
            id: 1,
            attempt: 1,
            call: call(0, b"r"),
        },
        EventKind::TapeMarked {
            id: 1,
            attempt: 1,
            mark: mark(2, 1),
        },
    ];
    for kind in events {
        let event = Event { at: T, kind };
        let bytes = encode(&event);
        assert_eq!(decode_event(&bytes), Ok(event.clone()));
        for format in [FORMAT_VERSION_6, FORMAT_VERSION_5] {
            let old = [&[format][..], &bytes[1..]].concat();
            let refused = decode_event(&old).unwrap_err();
            assert_eq!(refused.code, codes::UNDECODABLE, "{format}: {event:?}");
        }
    }
}

#[test]
fn the_scenario_replays_the_record_from_the_mark_to_the_next_attempts() {
    let scenario = crate::scenarios::all()
        .into_iter()
        .find(|s| s.name == "recorded calls replayed to the next attempt")
        .expect("scenario exists");
    let mut run = Run::new();
    for (now, command) in scenario.steps {
        let _ = run.run(now, command);
    }
    // Each attempt's mark, and its calls' ordinals and bodies.
    type Replayed<'a> = (TapeMark, Vec<(u32, &'a [u8])>);
    let replays: Vec<Replayed> = (run.assignments.iter())
        .map(|a| {
            let calls = (a.replay.calls.iter())
                .map(|c| (c.ordinal, c.body.as_slice()))
                .collect();
            (a.replay.mark, calls)
        })
        .collect();
    assert_eq!(
        replays,
        [
            (TapeMark::default(), vec![]),
            (mark(2, 1), vec![(2, &b"re_1"[..]), (3, b"po_1")]),
            (mark(2, 1), vec![(2, &b"re_1"[..]), (3, b"tr_1")]),
        ]
    );
    assert_eq!(run.tape(1), None, "dropped once the job succeeded");
}
