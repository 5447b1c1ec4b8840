//! Blobs: a job's input blob reaches every attempt, the outputs of the
//! attempt that succeeds are kept (digests, never bytes) until the job is
//! purged, DAG children read their parents' outputs by name, reports out
//! of bounds are refused, and the facts survive packing, snapshots and
//! older formats.

use serde::Serialize;

use super::*;
use crate::limits::{
    BLOBS_ASKED_MAX, BLOBS_COLLECTED_MAX, BLOBS_KEPT_MAX, OUTPUT_NAME_BYTES_MAX, OUTPUTS_MAX,
};
use crate::master::SNAPSHOT_VERSION;
use crate::scenarios::{
    blob, dag_node, failed, finish, limited, named_blob, poll, schedule_spec, spec, submit,
    submit_dag, submit_with, wrote,
};
use crate::testing::{assert_journal_and_snapshot_agree, restore_in_parts};

const T: Millis = 1_000_000;

/// A master driven as the host drives it, keeping the assignments its
/// events made.
struct Run {
    master: Master,
    assignments: Vec<Assignment>,
    /// The journal: every event applied, in order.
    events: Vec<Event>,
}

impl Run {
    fn new() -> Self {
        Self {
            master: Master::new(),
            assignments: Vec::new(),
            events: Vec::new(),
        }
    }

    fn run(&mut self, now: Millis, command: Command) -> Result<Reply, Rejection> {
        let decision = self.master.decide(now, &command)?;
        for event in decision.events {
            for effect in self.master.apply(&event) {
                if let Effect::Assign(assignment) = effect {
                    self.assignments.push(*assignment);
                }
            }
            self.events.push(event);
        }
        Ok(decision.reply)
    }

    fn ok(&mut self, now: Millis, command: Command) -> Reply {
        self.run(now, command).expect("accepted")
    }

    /// The code `command` is refused with, the state unchanged.
    fn refused(&mut self, now: Millis, command: Command) -> Code {
        let before = self.master.clone();
        let refused = self.run(now, command).expect_err("refused");
        assert_eq!(self.master, before, "a refusal changes nothing");
        refused.code
    }

    /// The blobs (by the first byte of their digests) a tick at `now`
    /// stops keeping.
    fn collected(&mut self, now: Millis) -> Vec<u8> {
        let from = self.events.len();
        self.ok(now, Command::Tick);
        (self.events[from..].iter())
            .filter_map(|event| match &event.kind {
                EventKind::BlobsCollected { digests } => Some(digests.iter().map(|d| d[0])),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// What the master says of the blobs numbered `ns` ([`Query::Blobs`]).
    fn status(&self, ns: &[u8]) -> Vec<BlobStatus> {
        let digests = ns.iter().map(|&n| [n; 32]).collect();
        match self.master.query(T, &Query::Blobs { digests }) {
            Ok(Answer::Blobs(status)) => status,
            other => panic!("blobs {ns:?}: {other:?}"),
        }
    }

    /// Whether the cluster keeps the blob numbered `n`.
    fn keeps(&self, n: u8) -> bool {
        self.master.registry.keeps(&[n; 32])
    }

    /// The assignment of attempt `attempt` of job `id`.
    fn assignment(&self, id: JobId, attempt: u32) -> &Assignment {
        (self.assignments.iter())
            .find(|a| a.id == id && a.attempt == attempt)
            .unwrap_or_else(|| panic!("attempt {attempt} of job {id} was never assigned"))
    }

    /// The names of the blobs attempt `attempt` of job `id` may read.
    fn names(&self, id: JobId, attempt: u32) -> Vec<&str> {
        let blobs = &self.assignment(id, attempt).blobs;
        blobs.iter().map(|blob| blob.name.as_str()).collect()
    }

    fn view(&self, id: JobId) -> JobView {
        match self.master.query(T, &Query::Job { id }) {
            Ok(Answer::Job(view)) => *view,
            other => panic!("job {id}: {other:?}"),
        }
    }

    fn finished(&self, id: JobId) -> Finished {
        let query = Query::Finished {
            ids: vec![id],
            output_max: 1 << 20,
            output_total: 1 << 20,
        };
        match self.master.query(T, &query) {
            Ok(Answer::Finished(mut finished)) => finished.remove(0),
            other => panic!("job {id}: {other:?}"),
        }
    }
}

/// An upload of the blob numbered `n`, of `size` bytes.
fn keep(n: u8, size: u64) -> Command {
    Command::KeepBlob {
        blob: blob(n, size),
    }
}

/// Options asking for the blob numbered `n` of `size` bytes as the input.
fn reading(n: u8, size: u64) -> JobOptions {
    JobOptions {
        input_blob: Some(blob(n, size)),
        ..JobOptions::default()
    }
}

/// Two outputs, `rows.csv` and `summary`.
fn two_outputs() -> Vec<NamedBlob> {
    vec![
        named_blob("rows.csv", 5, 1 << 40),
        named_blob("summary", 6, 42),
    ]
}

#[test]
fn a_job_reads_its_input_blob_and_keeps_the_outputs_it_wrote_through_a_snapshot() {
    let mut run = Run::new();
    run.ok(T, keep(9, 1 << 30));
    run.ok(T, submit_with(1, spec(1, b"small"), reading(9, 1 << 30)));
    run.ok(T + 1, poll("w1", 1));
    let input = named_blob(INPUT_BLOB_NAME, 9, 1 << 30);
    assert_eq!(run.assignment(1, 1).blobs, [input]);
    assert_eq!(run.assignment(1, 1).input, b"small", "the inline input too");
    run.ok(T + 2, finish(1, 1, "w1", wrote(b"done", two_outputs())));
    // Finished, the job is packed: its blobs are kept beside it.
    assert!(run.master.done.contains_key(&1));
    let view = run.view(1);
    assert_eq!(view.state, JobState::Succeeded);
    assert_eq!(view.input_blob, Some(blob(9, 1 << 30)));
    assert_eq!(view.outputs, two_outputs());
    assert_eq!(view.result_bytes, Some(4));
    assert_eq!(view.attempts[0].outcome.as_deref(), Some("succeeded"));
    let finished = run.finished(1);
    assert_eq!(finished.output.as_deref(), Some(&b"done"[..]));
    assert_eq!(finished.outputs, two_outputs());
    assert_eq!(
        run.master.query(T, &Query::Result { id: 1 }),
        Ok(Answer::Result(b"done".to_vec()))
    );
    // The outputs count with the results for their names and digests.
    let names = ("rows.csv".len() + "summary".len()) as u64;
    assert_eq!(run.master.stats().result_bytes, 4 + names + 2 * 40);
    let snapshot = run.master.snapshot();
    assert_eq!(snapshot[0], SNAPSHOT_VERSION);
    let restored = Master::restore(&snapshot).unwrap();
    assert_eq!(restored, run.master);
    assert_eq!(restored.index, run.master.index);
    assert_eq!(restored.blobs, run.master.blobs);
    assert_eq!(restored.snapshot(), snapshot, "identical bytes");
    for size in [1, 7, 100] {
        assert_eq!(restore_in_parts(&snapshot, size).unwrap(), run.master);
    }
    // Replaying the journal, as bytes, rebuilds them too.
    let mut replayed = Master::new();
    for event in &run.events {
        replayed.apply(&decode_event(&encode(event)).unwrap());
    }
    assert_eq!(replayed, run.master);
    assert_eq!(replayed.blobs, restored.blobs);
}

#[test]
fn every_attempt_reads_the_input_and_only_the_one_that_succeeds_keeps_outputs() {
    let mut run = Run::new();
    run.ok(T, keep(9, 10));
    run.ok(T, keep(4, 4));
    run.ok(T, submit_with(1, spec(1, b""), reading(9, 10)));
    run.ok(T + 1, poll("w1", 1));
    run.ok(T + 2, finish(1, 1, "w1", failed("trap")));
    assert!(run.view(1).outputs.is_empty());
    run.ok(T + 60_000, Command::Tick);
    run.ok(T + 60_001, poll("w2", 1));
    assert_eq!(run.names(1, 2), [INPUT_BLOB_NAME]);
    assert_eq!(run.assignment(1, 2).blobs, run.assignment(1, 1).blobs);
    // A late report of the first attempt is ignored, blobs and all.
    let late = finish(1, 1, "w1", wrote(b"late", vec![named_blob("x", 1, 1)]));
    assert!(matches!(run.ok(T + 60_002, late), Reply::Ignored { .. }));
    let mine = vec![named_blob("out", 3, 7)];
    run.ok(T + 60_003, finish(1, 2, "w2", wrote(b"ok", mine.clone())));
    assert_eq!(run.view(1).outputs, mine);
    // A bulk retry of a failed job reads its input again.
    run.ok(T + 60_004, submit_with(2, spec(1, b""), reading(4, 4)));
    run.ok(T + 60_005, poll("w1", 1));
    run.ok(T + 60_006, finish(2, 1, "w1", failed("job_error")));
    let retry = Command::Bulk {
        action: BulkAction::Retry { attempts: 1 },
        filter: JobFilter {
            ids: Some(vec![2]),
            ..JobFilter::default()
        },
    };
    run.ok(T + 60_007, retry);
    run.ok(T + 60_008, poll("w1", 1));
    assert_eq!(
        run.assignment(2, 2).blobs,
        [named_blob(INPUT_BLOB_NAME, 4, 4)]
    );
    assert_eq!(run.view(2).input_blob, Some(blob(4, 4)));
}

#[test]
fn a_job_without_blobs_reads_none_and_a_success_without_them_keeps_none() {
    let mut run = Run::new();
    run.ok(T, submit(1, spec(1, b"in")));
    run.ok(T + 1, poll("w1", 1));
    assert!(run.assignment(1, 1).blobs.is_empty());
    // An empty `Wrote` is a success like any other.
    let empty = Outcome::Wrote(Output {
        result: b"r".to_vec(),
        blobs: Vec::new(),
    });
    run.ok(T + 2, finish(1, 1, "w1", empty));
    let view = run.view(1);
    assert_eq!(
        (view.state, view.input_blob, view.outputs),
        (JobState::Succeeded, None, vec![])
    );
    assert!(run.master.blobs.is_empty(), "nothing kept for it");
    // The options the view shows are those it was submitted with, the
    // input blob apart.
    run.ok(T + 3, keep(1, 1));
    run.ok(
        T + 3,
        submit_with(
            2,
            spec(1, b""),
            JobOptions {
                input_blob: Some(blob(1, 1)),
                ..limited("k", Some(1), None)
            },
        ),
    );
    let view = run.view(2);
    assert_eq!(view.options, limited("k", Some(1), None));
    assert_eq!(view.input_blob, Some(blob(1, 1)));
}

#[test]
fn an_idempotency_key_names_one_input_blob() {
    let mut run = Run::new();
    let keyed = || JobSpec {
        idempotency_key: Some("k".into()),
        ..spec(1, b"in")
    };
    run.ok(T, keep(1, 10));
    run.ok(T, keep(2, 10));
    run.ok(T, submit_with(1, keyed(), reading(1, 10)));
    let again = run.ok(T + 1, submit_with(2, keyed(), reading(1, 10)));
    assert_eq!(
        again,
        Reply::Submitted {
            id: 1,
            existing: true
        }
    );
    for (seq, options) in [
        (3, reading(2, 10)),
        (4, reading(1, 11)),
        (5, JobOptions::default()),
    ] {
        let refused = run
            .run(T + 2, submit_with(seq, keyed(), options))
            .unwrap_err();
        assert_eq!(refused.code, codes::IDEMPOTENCY_CONFLICT);
    }
}

#[test]
fn a_schedule_gives_its_template_s_input_blob_to_every_job_it_fires() {
    let mut run = Run::new();
    let mut schedule = schedule_spec("s", Every::Interval { ms: 1_000 }, Overlap::AllowAll, 0);
    schedule.options = reading(2, 20);
    run.ok(T, keep(2, 20));
    run.ok(T, Command::CreateSchedule(schedule));
    run.ok(T + 1_000, Command::Tick);
    run.ok(T + 2_000, Command::Tick);
    run.ok(T + 2_001, poll("w1", 4));
    for id in [1, 2] {
        assert_eq!(run.view(id).input_blob, Some(blob(2, 20)));
        assert_eq!(run.names(id, 1), [INPUT_BLOB_NAME]);
    }
}

/// A DAG's job named `name` after the jobs at `after`.
fn node(name: &str, after: Vec<DagRef>) -> DagNodeSpec {
    dag_node(name, after)
}

#[test]
fn dag_children_read_their_parents_outputs_by_name_in_the_order_of_their_parents() {
    let mut run = Run::new();
    // Job 1, in no DAG, and job 2, `prep` of an earlier DAG.
    run.ok(T, submit(1, spec(1, b"plain")));
    run.ok(
        T,
        submit_dag(2, vec![node("prep", vec![])], OnFailure::SkipDescendants),
    );
    run.ok(T + 1, poll("w1", 2));
    run.ok(
        T + 2,
        finish(1, 1, "w1", wrote(b"1", vec![named_blob("x", 1, 10)])),
    );
    run.ok(
        T + 2,
        finish(2, 1, "w1", wrote(b"2", vec![named_blob("p", 2, 20)])),
    );
    // `b` (job 4) reads its own input, then its parents' outputs: job 1
    // by its id, job 2 by its name in its DAG, `a` (job 3) by its name;
    // parents in id order, outputs as each wrote them. `c` (job 5)
    // asked for no outputs.
    let mut b = node("b", vec![DagRef::Node(0), DagRef::Job(2), DagRef::Job(1)]);
    b.options = reading(9, 90);
    let mut c = node("c", vec![DagRef::Node(0)]);
    c.outputs = false;
    c.options = reading(8, 80);
    let dag = vec![node("a", vec![]), b, c];
    run.ok(T + 3, keep(9, 90));
    run.ok(T + 3, keep(8, 80));
    run.ok(T + 3, submit_dag(3, dag, OnFailure::SkipDescendants));
    run.ok(T + 4, poll("w1", 4));
    assert!(run.assignment(3, 1).blobs.is_empty());
    let a_outputs = vec![named_blob("z", 3, 30), named_blob("y", 4, 40)];
    run.ok(T + 5, finish(3, 1, "w1", wrote(b"3", a_outputs)));
    run.ok(T + 6, poll("w1", 4));
    assert_eq!(
        run.assignment(4, 1).blobs,
        [
            named_blob("input", 9, 90),
            named_blob("1/x", 1, 10),
            named_blob("prep/p", 2, 20),
            named_blob("a/z", 3, 30),
            named_blob("a/y", 4, 40),
        ]
    );
    assert_eq!(run.names(5, 1), ["input"]);
    assert_eq!(run.assignment(5, 1).input, b"c", "its own input alone");
    // The envelope lists each parent's blobs under it, by the same names.
    let envelope: serde_json::Value = serde_json::from_slice(&run.assignment(4, 1).input).unwrap();
    let listed: Vec<(u64, Vec<String>)> = (envelope["parents"].as_array().unwrap().iter())
        .map(|parent| {
            let names = (parent["blobs"].as_array().unwrap().iter())
                .map(|blob| blob["name"].as_str().unwrap().to_owned())
                .collect();
            (parent["id"].as_u64().unwrap(), names)
        })
        .collect();
    assert_eq!(
        listed,
        [
            (1, vec!["1/x".to_owned()]),
            (2, vec!["prep/p".to_owned()]),
            (3, vec!["a/z".to_owned(), "a/y".to_owned()]),
        ]
    );
    let digest = "04".repeat(32);
    assert_eq!(
        envelope["parents"][2]["blobs"][1]["digest"],
        digest.as_str()
    );
    assert_eq!(envelope["parents"][2]["blobs"][1]["size"], 40);
}

#[test]
fn names_that_meet_are_given_once_the_first_parent_s() {
    let mut run = Run::new();
    run.ok(T, submit(1, spec(1, b"")));
    run.ok(T + 1, poll("w1", 1));
    run.ok(
        T + 2,
        finish(1, 1, "w1", wrote(b"", vec![named_blob("out", 1, 1)])),
    );
    // A DAG's job named "1" is a parent beside job 1: both name `1/out`.
    let dag = vec![
        node("1", vec![]),
        node("child", vec![DagRef::Node(0), DagRef::Job(1)]),
    ];
    run.ok(T + 3, submit_dag(2, dag, OnFailure::SkipDescendants));
    run.ok(T + 4, poll("w1", 1));
    run.ok(
        T + 5,
        finish(2, 1, "w1", wrote(b"", vec![named_blob("out", 2, 2)])),
    );
    run.ok(T + 6, poll("w1", 1));
    assert_eq!(run.assignment(3, 1).blobs, [named_blob("1/out", 1, 1)]);
    let envelope: serde_json::Value = serde_json::from_slice(&run.assignment(3, 1).input).unwrap();
    assert_eq!(envelope["parents"][0]["blobs"].as_array().unwrap().len(), 1);
    assert_eq!(envelope["parents"][1]["blobs"], serde_json::json!([]));
}

#[test]
fn reports_with_outputs_out_of_bounds_are_refused_and_change_nothing() {
    let mut run = Run::new();
    run.ok(T, submit(1, spec(1, b"")));
    run.ok(T + 1, poll("w1", 1));
    let longest = "n".repeat(OUTPUT_NAME_BYTES_MAX);
    let many: Vec<NamedBlob> = (0..=OUTPUTS_MAX)
        .map(|n| named_blob(&format!("o{n}"), 1, 1))
        .collect();
    for (blobs, says) in [
        (
            vec![named_blob("", 1, 1)],
            "outputs[0].name: 1 to 128 bytes",
        ),
        (
            vec![named_blob("a", 1, 1), named_blob("a/b", 1, 1)],
            "outputs[1].name",
        ),
        (vec![named_blob("é", 1, 1)], "ASCII"),
        (vec![named_blob("a b", 1, 1)], "outputs[0].name"),
        (vec![named_blob(&format!("{longest}n"), 1, 1)], "128 bytes"),
        (
            vec![named_blob("a", 1, 1), named_blob("a", 2, 2)],
            "\"a\" is reported twice",
        ),
        (many.clone(), "at most 64 output blobs; this one reports 65"),
    ] {
        let refused = run
            .run(T + 2, finish(1, 1, "w1", wrote(b"", blobs.clone())))
            .unwrap_err();
        assert_eq!(refused.code, codes::INVALID_JOB, "{blobs:?}");
        assert!(refused.message.contains(says), "{refused}: not {says:?}");
        assert_eq!(check_outputs(&blobs), Err(refused.message));
    }
    assert_eq!(run.view(1).state, JobState::Running, "the attempt runs on");
    // A journal is not trusted: such a report, applied, changes nothing.
    let before = run.master.clone();
    let effects = run.master.apply(&Event {
        at: T + 3,
        kind: EventKind::Finished {
            id: 1,
            attempt: 1,
            outcome: wrote(b"", many[..OUTPUTS_MAX + 1].to_vec()),
            duration_ms: 1,
            log_tail: String::new(),
            usage: None,
        },
    });
    assert!(effects.is_empty());
    assert_eq!(run.master, before);
    // At the bounds, a report is taken.
    let mut at_bounds = many;
    at_bounds.truncate(OUTPUTS_MAX - 1);
    at_bounds.push(named_blob(&longest, 1, u64::MAX));
    at_bounds.push(named_blob("A-z_0.9", 1, 0));
    run.ok(
        T + 4,
        finish(1, 1, "w1", wrote(b"", at_bounds[1..].to_vec())),
    );
    assert_eq!(run.view(1).outputs.len(), OUTPUTS_MAX);
    assert!(valid_output_name(&longest) && !valid_output_name("../x"));
    assert!(!valid_output_name(".hidden") && !valid_output_name("..") && valid_output_name("a.b"));
}

#[test]
fn an_oversized_result_fails_the_job_and_keeps_no_outputs() {
    let mut run = Run::new();
    let config = Config {
        result_bytes_max: 2,
        ..Config::default()
    };
    run.ok(T, Command::Configure(config));
    run.ok(T, submit(1, spec(1, b"")));
    run.ok(T + 1, poll("w1", 1));
    run.ok(T + 2, finish(1, 1, "w1", wrote(b"abc", two_outputs())));
    let view = run.view(1);
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(
        view.error.map(|e| e.code).as_deref(),
        Some("output_too_large")
    );
    assert!(view.outputs.is_empty());
    assert!(run.finished(1).outputs.is_empty());
    assert_eq!(run.master.stats().result_bytes, 0);
}

#[test]
fn a_purged_job_s_blobs_go_with_it_and_outputs_count_against_the_results_bound() {
    let mut run = Run::new();
    for n in 1..=3 {
        run.ok(T, keep(n as u8, 1));
        run.ok(T, submit_with(n, spec(1, b""), reading(n as u8, 1)));
    }
    run.ok(T + 1, poll("w1", 3));
    // Job 1's outputs take 10 + 40 bytes, job 2's 1 + 40, job 3's none.
    let long = named_blob("0123456789", 1, 1);
    run.ok(T + 2, finish(1, 1, "w1", wrote(b"", vec![long])));
    run.ok(
        T + 3,
        finish(2, 1, "w1", wrote(b"", vec![named_blob("x", 1, 1)])),
    );
    run.ok(T + 4, finish(3, 1, "w1", wrote(b"r", Vec::new())));
    assert_eq!(run.master.stats().result_bytes, 50 + 41 + 1);
    assert_eq!(run.master.blobs.len(), 3);
    // Over a bound of 42 bytes, the oldest go until the rest fit.
    let config = Config {
        results_bytes_total_max: 42,
        ..Config::default()
    };
    run.ok(T + 5, Command::Configure(config));
    run.ok(T + 6, Command::Tick);
    assert_eq!(run.master.done.keys().copied().collect::<Vec<_>>(), [2, 3]);
    assert_eq!(run.master.blobs.keys().copied().collect::<Vec<_>>(), [2, 3]);
    assert_eq!(run.master.stats().result_bytes, 42);
    assert_eq!(
        run.master.query(T, &Query::Job { id: 1 }).unwrap_err().code,
        codes::JOB_EXPIRED
    );
    // Past retention, the rest go, and with them all the master knew.
    run.ok(T + 4 + 3_600_000, Command::Tick);
    assert!(run.master.done.is_empty());
    assert!(run.master.blobs.is_empty());
    assert_eq!(run.master.stats().result_bytes, 0);
}

#[test]
fn a_snapshot_s_blobs_are_checked_as_decisions_would_have_kept_them() {
    let mut run = Run::new();
    run.ok(T, keep(1, 1));
    run.ok(T, submit_with(1, spec(1, b""), reading(1, 1)));
    run.ok(T, submit(2, spec(1, b"")));
    run.ok(T + 1, poll("w1", 1));
    run.ok(T + 2, finish(1, 1, "w1", wrote(b"", two_outputs())));
    let kept = run.master.clone();
    // Outputs of an unfinished job, of one not held, and outputs no
    // report could carry: none is kept.
    let mut master = run.master;
    let bad = JobBlobs {
        input: None,
        outputs: vec![named_blob("a", 1, 1)],
    };
    master.blobs.insert(2, bad.clone());
    master.blobs.insert(99, bad);
    (master.blobs.get_mut(&1).unwrap().outputs).push(named_blob("a/b", 1, 1));
    let restored = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(restored.blobs.keys().copied().collect::<Vec<_>>(), [1]);
    assert_eq!(restored.blobs[&1].outputs, Vec::new());
    assert_eq!(restored.blobs[&1].input, Some(blob(1, 1)));
    assert_eq!(restored.index.result_bytes, 0);
    assert_ne!(restored, kept);
    // The registry counts the names that were kept: the dropped outputs
    // are idle, from when the job wrote them.
    let retention = Config::default().retention_ms;
    let named = |n| BlobStatus {
        digest: [n; 32],
        kept: true,
        refs: 1,
        collect_at: None,
    };
    let idle = BlobStatus {
        refs: 0,
        collect_at: Some(T + 2 + retention),
        ..named(5)
    };
    let asked = Query::Blobs {
        digests: vec![[1; 32], [5; 32]],
    };
    let status = restored.query(T, &asked);
    assert_eq!(status, Ok(Answer::Blobs(vec![named(1), idle])));
    // A restored snapshot restores to itself.
    assert_eq!(Master::restore(&restored.snapshot()).unwrap(), restored);
}

/// [`JobOptions`] as formats 6 and 7 and snapshot versions 7 and 8 wrote
/// them: without `input_blob`.
#[derive(Serialize)]
struct OptionsV8<'a> {
    limit: &'a Option<KeyLimit>,
    unique: &'a Option<Unique>,
    module: &'a Option<String>,
    egress: &'a Option<Vec<HttpGrant>>,
}

impl<'a> OptionsV8<'a> {
    fn of(options: &'a JobOptions) -> Self {
        Self {
            limit: &options.limit,
            unique: &options.unique,
            module: &options.module,
            egress: &options.egress,
        }
    }
}

#[test]
fn a_version_8_snapshot_restores_with_no_blobs_and_options_without_an_input_blob() {
    let mut run = Run::new();
    let mut schedule = schedule_spec("s", Every::Interval { ms: 1_000 }, Overlap::Skip, 0);
    schedule.options = limited("k", Some(2), None);
    run.ok(T, Command::CreateSchedule(schedule));
    run.ok(T + 1_000, Command::Tick);
    run.ok(
        T + 1_001,
        submit_with(1, spec(1, b""), limited("k", Some(2), None)),
    );
    run.ok(T + 1_002, poll("w1", 1));
    let master = run.master.before_locality();
    assert_eq!(master.keyed.options.len(), 2);
    assert!(master.blobs.is_empty());
    // Version 8's layout: its options of four fields, and no blobs (nor
    // blobs kept: empty here, a byte each).
    let snapshot = master.snapshot_v10();
    // As version 10 wrote them: options without `trace`.
    let (keyed_now, schedules_now) = crate::protocol::legacy::written_before_trace(|| {
        let keyed = postcard::to_allocvec(&master.keyed).unwrap();
        (keyed, postcard::to_allocvec(&master.schedules).unwrap())
    });
    let rest = (
        &master.dags,
        &master.deployments,
        &master.egress,
        (&master.tapes, &master.egress.readable),
    );
    let rest = postcard::to_allocvec(&rest).unwrap();
    let at = snapshot.len() - 2 - rest.len() - schedules_now.len() - keyed_now.len();
    assert_eq!(&snapshot[at..at + keyed_now.len()], keyed_now.as_slice());
    let options: BTreeMap<JobId, OptionsV8> = (master.keyed.options.iter())
        .map(|(id, options)| (*id, OptionsV8::of(options)))
        .collect();
    let keyed = (options, &master.keyed.uniques, &master.keyed.starts);
    let schedules: Vec<_> = (master.schedules.iter())
        .map(|(name, s)| {
            let spec = (
                &s.spec.name,
                &s.spec.every,
                &s.spec.job,
                OptionsV8::of(&s.spec.options),
                s.spec.overlap,
                s.spec.catch_up_ms,
            );
            let rest = (
                s.created_at,
                s.paused,
                s.next,
                s.buffered,
                &s.active,
                s.last,
            );
            (
                name,
                (spec, rest, (s.fired_total, s.skipped_total, &s.missed)),
            )
        })
        .collect();
    let old = [
        &[8][..],
        &snapshot[1..at],
        &postcard::to_allocvec(&keyed).unwrap(),
        &postcard::to_allocvec(&schedules).unwrap(),
        &rest,
    ]
    .concat();
    assert_eq!(Master::restore(&old).unwrap(), master);
    assert_eq!(restore_in_parts(&old, 3).unwrap(), master);
    // Read as version 9 or 10, the same bytes are short of the blobs.
    for version in [9, SNAPSHOT_VERSION] {
        let mut newer = old.clone();
        newer[0] = version;
        assert!(Master::restore(&newer).is_err(), "{version}");
    }
}

#[test]
fn format_7_events_decode_with_no_input_blob_and_never_hold_output_blobs() {
    let submitted = Event {
        at: T,
        kind: EventKind::Submitted {
            id: 1,
            spec: spec(1, b"a"),
            request: None,
            options: limited("k", Some(1), None),
        },
    };
    let now = encode(&submitted);
    assert_eq!(now[0], FORMAT_VERSION);
    // Format 7 wrote the same bytes without the last two fields' `None`s
    // (`input_blob`, `trace`).
    assert_eq!(now[now.len() - 2..], [0, 0]);
    let old = [&[FORMAT_VERSION_7][..], &now[1..now.len() - 2]].concat();
    assert_eq!(decode_event(&old), Ok(submitted.clone()));
    // Taken as this format, those bytes are short.
    let short = [&[FORMAT_VERSION][..], &old[1..]].concat();
    assert!(decode_event(&short).is_err());
    let with_blob = Event {
        kind: EventKind::Submitted {
            id: 1,
            spec: spec(1, b"a"),
            request: None,
            options: reading(3, 5),
        },
        ..submitted
    };
    assert_eq!(decode_event(&encode(&with_blob)), Ok(with_blob));
    // A plain success decodes in every format; one with output blobs only
    // in this one.
    let finished = |outcome| Event {
        at: T,
        kind: EventKind::Finished {
            id: 1,
            attempt: 1,
            outcome,
            duration_ms: 1,
            log_tail: String::new(),
            usage: None,
        },
    };
    let plain = finished(Outcome::Succeeded(b"r".to_vec()));
    let blobs = finished(wrote(b"r", two_outputs()));
    for format in [FORMAT_VERSION_7, FORMAT_VERSION_6, FORMAT_VERSION_2] {
        let old = |event: &Event| [&[format][..], &encode(event)[1..]].concat();
        assert_eq!(decode_event(&old(&plain)), Ok(plain.clone()), "{format}");
        let refused = decode_event(&old(&blobs)).unwrap_err();
        assert_eq!(refused.code, codes::UNDECODABLE, "{format}");
        assert!(refused.message.contains("output blobs"), "{refused}");
    }
    assert_eq!(decode_event(&encode(&blobs)), Ok(blobs));
    // Messages of format 7 other than events are refused.
    let command = encode(&Command::Tick);
    let old = [&[FORMAT_VERSION_7][..], &command[1..]].concat();
    assert_eq!(
        decode::<Command>(&old).unwrap_err().code,
        codes::UNKNOWN_VERSION
    );
}

#[test]
fn an_input_blob_reads_by_name_in_self_describing_formats() {
    let options = reading(7, 9);
    let json = serde_json::to_string(&options).unwrap();
    assert!(json.contains("\"input_blob\":{\"digest\":["), "{json}");
    assert_eq!(serde_json::from_str::<JobOptions>(&json).unwrap(), options);
    let older: JobOptions =
        serde_json::from_str(r#"{"limit":null,"unique":null,"module":null,"egress":null}"#)
            .unwrap();
    assert_eq!(older, JobOptions::default());
}

#[test]
fn digests_are_written_as_the_api_writes_them() {
    let mut digest = [0; 32];
    digest[0] = 0xab;
    digest[31] = 0x01;
    assert_eq!(digest_text(&digest), format!("ab{}01", "00".repeat(30)));
}

#[test]
fn the_scenario_passes_an_input_blob_and_a_parent_s_outputs() {
    let scenario = crate::scenarios::all()
        .into_iter()
        .find(|s| s.name.starts_with("jobs read an input blob"))
        .expect("scenario exists");
    let mut run = Run::new();
    let mut refused = Vec::new();
    for (now, command) in scenario.steps {
        if let Err(rejection) = run.run(now, command) {
            refused.push(rejection.code);
        }
    }
    assert_eq!(
        refused,
        [
            codes::BLOB_NOT_FOUND,
            codes::INVALID_JOB,
            codes::INVALID_JOB,
            codes::INVALID_JOB,
            codes::BLOB_IN_USE,
            codes::BLOB_NOT_FOUND,
            codes::BLOB_NOT_FOUND,
        ]
    );
    let reads = |id| -> Vec<(String, u8, u64)> {
        (run.assignment(id, 1).blobs.iter())
            .map(|b| (b.name.clone(), b.digest[0], b.size))
            .collect()
    };
    assert_eq!(reads(1), [("input".into(), 9, 1_000_000)]);
    assert_eq!(reads(2), [("input".into(), 7, 2048)]);
    assert_eq!(
        reads(3),
        [
            ("1/rows.csv".into(), 5, 123_456),
            ("1/summary".into(), 6, 42),
            ("extract/part-0".into(), 8, 1000),
            ("extract/part-1".into(), 10, 2000),
        ]
    );
    assert!(reads(4).is_empty());
    // Purged at the end, with everything the master knew of their blobs,
    // which were then collected or dropped.
    assert!(run.master.blobs.is_empty());
    assert!(run.master.done.is_empty());
    assert_eq!(run.master.registry, Registry::default());
}

// ---- Which blobs the cluster keeps ------------------------------------

/// How long a blob nothing names stays kept, by default.
fn retention() -> Millis {
    Config::default().retention_ms
}

/// What [`Query::Blobs`] says of a kept blob numbered `n` that `refs`
/// names hold, collected at `collect_at` unless named again.
fn kept(n: u8, refs: u32, collect_at: Option<Millis>) -> BlobStatus {
    BlobStatus {
        digest: [n; 32],
        kept: true,
        refs,
        collect_at,
    }
}

/// A plain success.
fn ok(result: &[u8]) -> Outcome {
    Outcome::Succeeded(result.to_vec())
}

#[test]
fn an_upload_is_kept_for_the_retention_time_then_collected_and_a_re_upload_extends_it() {
    let mut run = Run::new();
    let r = retention();
    run.ok(T, keep(1, 10));
    run.ok(T, keep(2, 20));
    assert_eq!(
        run.status(&[1, 2]),
        [kept(1, 0, Some(T + r)), kept(2, 0, Some(T + r))]
    );
    // Blob 2 is uploaded again half-way: its time starts again. An
    // upload journaled with an earlier time shortens nothing.
    run.ok(T + r / 2, keep(2, 20));
    run.master.apply(&Event {
        at: T,
        kind: EventKind::BlobKept { blob: blob(2, 20) },
    });
    assert_eq!(run.status(&[2]), [kept(2, 0, Some(T + r / 2 + r))]);
    assert_eq!(run.collected(T + r - 1), Vec::<u8>::new());
    assert_eq!(run.collected(T + r), [1]);
    assert!(!run.keeps(1) && run.keeps(2));
    let gone = BlobStatus {
        digest: [1; 32],
        kept: false,
        refs: 0,
        collect_at: None,
    };
    assert_eq!(run.status(&[1]), [gone]);
    assert_eq!(run.collected(T + r / 2 + r - 1), Vec::<u8>::new());
    assert_eq!(run.collected(T + r / 2 + r), [2]);
    assert!(run.master.registry.kept.is_empty());
    // Collected, a blob can no longer be named; uploaded again, it can.
    let job = submit_with(1, spec(1, b""), reading(1, 10));
    assert_eq!(run.refused(T + 2 * r, job.clone()), codes::BLOB_NOT_FOUND);
    run.ok(T + 2 * r, keep(1, 10));
    run.ok(T + 2 * r, job);
}

#[test]
fn a_job_s_input_keeps_its_blob_until_the_retention_time_after_the_job_is_purged() {
    let mut run = Run::new();
    let r = retention();
    run.ok(T, keep(1, 10));
    run.ok(T, submit_with(1, spec(1, b""), reading(1, 10)));
    assert_eq!(run.status(&[1]), [kept(1, 1, None)]);
    run.ok(T + 1, poll("w1", 1));
    run.ok(T + 2, finish(1, 1, "w1", ok(b"r")));
    // Past the upload's retention, the finished job still names it.
    assert_eq!(run.collected(T + r), Vec::<u8>::new());
    assert_eq!(run.status(&[1]), [kept(1, 1, None)]);
    // Purged, it names it no more: the blob is idle from then (the tick
    // that purges collects nothing it frees).
    assert_eq!(run.collected(T + 2 + r), Vec::<u8>::new());
    assert!(run.master.done.is_empty());
    assert_eq!(run.status(&[1]), [kept(1, 0, Some(T + 2 + 2 * r))]);
    assert_eq!(run.collected(T + 2 + 2 * r - 1), Vec::<u8>::new());
    assert_eq!(run.collected(T + 2 + 2 * r), [1]);
    assert!(run.master.registry.kept.is_empty());
}

#[test]
fn outputs_keep_their_blobs_while_the_job_is_held_and_replaced_ones_are_released() {
    let mut run = Run::new();
    let r = retention();
    run.ok(T, submit(1, spec(1, b"")));
    run.ok(T, submit(2, spec(1, b"")));
    run.ok(T + 1, poll("w1", 2));
    // Outputs need no upload of their own: the success keeps them. Two
    // jobs wrote blob 6: two names.
    run.ok(T + 2, finish(1, 1, "w1", wrote(b"", two_outputs())));
    let same = vec![named_blob("again", 6, 42)];
    run.ok(T + 3, finish(2, 1, "w1", wrote(b"", same)));
    assert_eq!(run.status(&[5, 6]), [kept(5, 1, None), kept(6, 2, None)]);
    // A later success of job 1 (only a journal could hold one) keeps its
    // new outputs and releases those it replaced.
    let later = vec![named_blob("rows.csv", 7, 1)];
    run.master.record_outputs(1, &later, T + 4);
    assert_eq!(
        run.status(&[5, 6, 7]),
        [
            kept(5, 0, Some(T + 4 + r)),
            kept(6, 1, None),
            kept(7, 1, None)
        ]
    );
    assert_eq!(run.view(1).outputs, later);
    let names = ("rows.csv".len() + "again".len()) as u64;
    assert_eq!(run.master.stats().result_bytes, names + 2 * 40);
    // Purged (job 1 at T + 2 + r, job 2 a millisecond later), the jobs
    // release the rest; each blob is collected `retention_ms` after its
    // last name went.
    assert_eq!(run.collected(T + 2 + r), Vec::<u8>::new());
    assert_eq!(
        run.status(&[6, 7]),
        [kept(6, 1, None), kept(7, 0, Some(T + 2 + 2 * r))]
    );
    assert_eq!(run.collected(T + 3 + r), Vec::<u8>::new());
    assert_eq!(run.collected(T + 4 + r), [5]);
    assert_eq!(run.collected(T + 2 + 2 * r), [7]);
    assert_eq!(run.collected(T + 3 + 2 * r), [6]);
    assert!(run.master.registry.kept.is_empty());
}

#[test]
fn a_schedule_s_template_keeps_its_input_blob_until_the_schedule_is_deleted() {
    let mut run = Run::new();
    let r = retention();
    let mut schedule = schedule_spec("s", Every::Interval { ms: 1_000 }, Overlap::AllowAll, 0);
    schedule.options = reading(2, 20);
    let create = Command::CreateSchedule(schedule);
    assert_eq!(run.refused(T, create.clone()), codes::BLOB_NOT_FOUND);
    run.ok(T, keep(2, 19));
    assert_eq!(run.refused(T, create.clone()), codes::INVALID_JOB);
    run.ok(T, keep(3, 20));
    let mut other = schedule_spec("t", Every::Interval { ms: 1_000 }, Overlap::AllowAll, 0);
    other.options = reading(3, 20);
    run.ok(T, Command::CreateSchedule(other));
    run.ok(T, Command::DropBlob { digest: [2; 32] });
    run.ok(T, keep(2, 20));
    run.ok(T, create);
    // The schedule and the jobs it fires name it.
    run.ok(T + 1_000, Command::Tick);
    assert_eq!(run.status(&[2]), [kept(2, 2, None)]);
    let fired = |name: &str| run.master.schedules[name].last.expect("fired").1;
    let (s, t) = (fired("s"), fired("t"));
    run.ok(T + 1_001, Command::DeleteSchedule { name: "t".into() });
    // The fired jobs end: `t`'s is cancelled, `s`'s succeeds.
    run.ok(
        T + 1_002,
        Command::PauseSchedule {
            name: "s".into(),
            paused: true,
        },
    );
    run.ok(T + 1_003, Command::Cancel { id: t });
    run.ok(T + 1_004, poll("w1", 4));
    run.ok(T + 1_005, finish(s, 1, "w1", ok(b"")));
    // Long after they were purged, the schedule still names its blob;
    // `t`'s is collected.
    assert_eq!(run.collected(T + 2 * r), Vec::<u8>::new());
    assert_eq!(run.collected(T + 10 * r), [3]);
    assert!(run.master.done.is_empty() && run.master.jobs.is_empty());
    assert_eq!(run.status(&[2]), [kept(2, 1, None)]);
    assert_eq!(
        run.refused(T + 10 * r, Command::DropBlob { digest: [2; 32] }),
        codes::BLOB_IN_USE
    );
    // Deleted, it names it no more.
    let deleted = T + 10 * r + 5;
    run.ok(deleted, Command::DeleteSchedule { name: "s".into() });
    assert_eq!(run.status(&[2]), [kept(2, 0, Some(deleted + r))]);
    assert_eq!(run.collected(deleted + r - 1), Vec::<u8>::new());
    assert_eq!(run.collected(deleted + r), [2]);
}

#[test]
fn a_dag_s_jobs_may_name_only_kept_blobs_and_keep_them_while_held() {
    let mut run = Run::new();
    let r = retention();
    let mut b = node("b", vec![DagRef::Node(0)]);
    b.options = reading(9, 90);
    let dag = vec![node("a", vec![]), b];
    let refused = run
        .run(T, submit_dag(1, dag.clone(), OnFailure::SkipDescendants))
        .unwrap_err();
    assert_eq!(refused.code, codes::BLOB_NOT_FOUND);
    assert!(refused.message.starts_with("jobs[1]: "), "{refused}");
    run.ok(T, keep(9, 91));
    let refused = run
        .run(T, submit_dag(1, dag.clone(), OnFailure::SkipDescendants))
        .unwrap_err();
    assert_eq!(refused.code, codes::INVALID_JOB);
    assert!(refused.message.contains("is 91 bytes, not 90"), "{refused}");
    run.ok(T, Command::DropBlob { digest: [9; 32] });
    run.ok(T, keep(9, 90));
    run.ok(T, submit_dag(1, dag, OnFailure::SkipDescendants));
    assert_eq!(run.status(&[9]), [kept(9, 1, None)]);
    // Cancelled, the DAG's jobs are held until purged.
    run.ok(T + 1, Command::Cancel { id: 2 });
    assert_eq!(run.collected(T + r), Vec::<u8>::new());
    assert_eq!(run.status(&[9]), [kept(9, 1, None)]);
    assert_eq!(run.collected(T + 1 + r), Vec::<u8>::new());
    assert_eq!(run.status(&[9]), [kept(9, 0, Some(T + 1 + 2 * r))]);
    assert_eq!(run.collected(T + 1 + 2 * r), [9]);
}

#[test]
fn dropping_a_blob_is_refused_while_named_or_unknown_and_drops_an_idle_one_at_once() {
    let mut run = Run::new();
    let drop = |n| Command::DropBlob { digest: [n; 32] };
    assert_eq!(run.refused(T, drop(1)), codes::BLOB_NOT_FOUND);
    run.ok(T, keep(1, 10));
    run.ok(T, keep(2, 10));
    run.ok(T, submit_with(1, spec(1, b""), reading(1, 10)));
    let refused = run.run(T, drop(1)).unwrap_err();
    assert_eq!(refused.code, codes::BLOB_IN_USE);
    assert!(refused.message.contains("named 1 time(s)"), "{refused}");
    run.ok(T + 1, drop(2));
    assert_eq!(
        run.events.last().map(|e| &e.kind),
        Some(&EventKind::BlobDropped { digest: [2; 32] })
    );
    assert!(!run.keeps(2) && run.keeps(1));
    assert_eq!(run.refused(T + 1, drop(2)), codes::BLOB_NOT_FOUND);
    let refused = run.run(T + 1, submit_with(2, spec(1, b""), reading(2, 10)));
    let refused = refused.unwrap_err();
    assert_eq!(refused.code, codes::BLOB_NOT_FOUND);
    assert!(
        refused.message.contains(&digest_text(&[2; 32])),
        "{refused}"
    );
    // A journal's drop of a named blob changes nothing, as its refusal
    // did.
    let before = run.master.clone();
    run.master.apply(&Event {
        at: T + 2,
        kind: EventKind::BlobDropped { digest: [1; 32] },
    });
    run.master.apply(&Event {
        at: T + 2,
        kind: EventKind::BlobsCollected {
            digests: vec![[1; 32], [3; 32]],
        },
    });
    assert_eq!(run.master, before);
}

#[test]
fn a_submission_naming_a_blob_never_kept_or_collected_is_refused_and_a_wrong_size_is_invalid() {
    let mut run = Run::new();
    let r = retention();
    let job = |seq, n, size| submit_with(seq, spec(1, b""), reading(n, size));
    assert_eq!(run.refused(T, job(1, 1, 10)), codes::BLOB_NOT_FOUND);
    run.ok(T, keep(1, 10));
    let refused = run.run(T, job(1, 1, 11)).unwrap_err();
    assert_eq!(refused.code, codes::INVALID_JOB);
    assert!(refused.message.contains("is 10 bytes, not 11"), "{refused}");
    // An upload of another size keeps the first one (a digest names its
    // bytes).
    run.ok(T, keep(1, 11));
    assert_eq!(run.master.registry.kept[&[1; 32]].size, 10);
    assert_eq!(run.refused(T, job(1, 1, 11)), codes::INVALID_JOB);
    run.ok(T, job(1, 1, 10));
    // Blob 2 is uploaded and collected before a job names it.
    run.ok(T, keep(2, 10));
    assert_eq!(run.collected(T + r), [2]);
    assert_eq!(run.refused(T + r, job(2, 2, 10)), codes::BLOB_NOT_FOUND);
}

/// The digest numbered `n` (none of the `[n; 32]` ones).
fn numbered(n: u64) -> Digest {
    let mut digest = [0xee; 32];
    digest[24..].copy_from_slice(&n.to_be_bytes());
    digest
}

#[test]
fn uploads_past_the_bound_are_refused_but_jobs_keep_what_they_name() {
    // A registry already full of uploads, as one restored would be (a
    // million commands would take the test minutes).
    let mut run = Run::new();
    let full: BTreeMap<Digest, Kept> = (0..BLOBS_KEPT_MAX as u64)
        .map(|n| {
            (
                numbered(n),
                Kept {
                    size: 1,
                    idle_since: T,
                },
            )
        })
        .collect();
    run.master.registry = Registry::rebuilt(full, std::iter::empty());
    // (Refusals read without `Run::refused`, which clones the master.)
    let upload = |run: &mut Run, n| run.run(T + 1, keep(n, 1)).unwrap_err().code;
    assert_eq!(upload(&mut run, 1), codes::BLOBS_FULL);
    let again = Command::KeepBlob {
        blob: Blob {
            digest: numbered(0),
            size: 1,
        },
    };
    run.ok(T + 1, again);
    // A journal's upload past the bound changes nothing.
    run.master.apply(&Event {
        at: T + 1,
        kind: EventKind::BlobKept { blob: blob(1, 1) },
    });
    assert!(!run.keeps(1));
    assert_eq!(run.master.registry.kept.len(), BLOBS_KEPT_MAX);
    // A success keeps its outputs whatever the count.
    let named = Blob {
        digest: numbered(7),
        size: 1,
    };
    let input = JobOptions {
        input_blob: Some(named),
        ..JobOptions::default()
    };
    run.ok(T + 2, submit_with(1, spec(1, b""), input));
    run.ok(T + 2, poll("w1", 1));
    run.ok(T + 3, finish(1, 1, "w1", wrote(b"", two_outputs())));
    assert_eq!(run.master.registry.kept.len(), BLOBS_KEPT_MAX + 2);
    assert_eq!(run.status(&[5, 6]), [kept(5, 1, None), kept(6, 1, None)]);
    // Past the bound, the registry survives a snapshot as it is (not
    // `assert_eq!`: a million blobs to print).
    let restored = Master::restore(&run.master.snapshot()).unwrap();
    assert!(restored == run.master, "restored otherwise");
    // Dropping blobs makes room again, one upload per blob below the
    // bound.
    for n in 10..13 {
        run.ok(
            T + 4,
            Command::DropBlob {
                digest: numbered(n),
            },
        );
    }
    assert_eq!(run.master.registry.kept.len(), BLOBS_KEPT_MAX - 1);
    run.ok(T + 5, keep(1, 1));
    assert_eq!(upload(&mut run, 2), codes::BLOBS_FULL);
}

#[test]
fn a_tick_collects_at_most_its_bound_of_blobs_the_oldest_first_and_the_rest_on_the_next() {
    let mut run = Run::new();
    let r = retention();
    let count = BLOBS_COLLECTED_MAX as u64 + 3;
    for n in 0..count {
        // The later-numbered, the earlier uploaded.
        let at = T + count - n;
        let upload = Command::KeepBlob {
            blob: Blob {
                digest: numbered(n),
                size: n,
            },
        };
        run.ok(at, upload);
    }
    let collected = |run: &Run| -> Vec<Digest> {
        match &run.events.last().unwrap().kind {
            EventKind::BlobsCollected { digests } => digests.clone(),
            other => panic!("{other:?}"),
        }
    };
    run.ok(T + count + r, Command::Tick);
    let first = collected(&run);
    let oldest: Vec<Digest> = (3..count).rev().map(numbered).collect();
    assert_eq!(first, oldest);
    run.ok(T + count + r, Command::Tick);
    assert_eq!(collected(&run), [numbered(2), numbered(1), numbered(0)]);
    assert!(run.master.registry.kept.is_empty());
    let events = run.events.len();
    run.ok(T + count + r, Command::Tick);
    assert_eq!(run.events.len(), events, "nothing left to collect");
}

#[test]
fn the_blobs_query_says_what_is_kept_what_names_it_and_when_it_goes() {
    let mut run = Run::new();
    let r = retention();
    run.ok(T, keep(1, 10));
    run.ok(T + 5, keep(2, 10));
    run.ok(T, submit_with(1, spec(1, b""), reading(1, 10)));
    run.ok(T, submit_with(2, spec(1, b""), reading(1, 10)));
    let unknown = BlobStatus {
        digest: [3; 32],
        kept: false,
        refs: 0,
        collect_at: None,
    };
    // In the order asked, repeats and all.
    assert_eq!(
        run.status(&[2, 3, 1, 2]),
        [
            kept(2, 0, Some(T + 5 + r)),
            unknown,
            kept(1, 2, None),
            kept(2, 0, Some(T + 5 + r))
        ]
    );
    // A shorter retention moves the time.
    let config = Config {
        retention_ms: 10,
        ..Config::default()
    };
    run.ok(T + 6, Command::Configure(config));
    assert_eq!(run.status(&[2]), [kept(2, 0, Some(T + 15))]);
    assert_eq!(run.status(&[]), []);
    let most = Query::Blobs {
        digests: vec![[1; 32]; BLOBS_ASKED_MAX],
    };
    let Ok(Answer::Blobs(answered)) = run.master.query(T, &most) else {
        panic!("the bound is allowed")
    };
    assert_eq!(answered.len(), BLOBS_ASKED_MAX);
    let too_many = Query::Blobs {
        digests: vec![[1; 32]; BLOBS_ASKED_MAX + 1],
    };
    let refused = run.master.query(T, &too_many).unwrap_err();
    assert_eq!(refused.code, codes::INVALID_FILTER);
    assert!(refused.message.contains("at most 1024 blobs"), "{refused}");
}

/// A history touching every way a blob is kept, named and let go: uploads
/// (one again later), jobs' inputs and outputs, a schedule, a DAG, a drop,
/// purges and collections.
fn registry_history() -> Vec<(Millis, Command)> {
    let r = retention();
    let mut schedule = schedule_spec("s", Every::Interval { ms: 60_000 }, Overlap::Skip, 0);
    schedule.options = reading(3, 30);
    let mut b = node("b", vec![DagRef::Node(0)]);
    b.options = reading(2, 20);
    vec![
        (T, keep(1, 10)),
        (T, keep(2, 20)),
        (T, keep(3, 30)),
        (T, keep(4, 40)),
        (T + 1, submit_with(1, spec(1, b""), reading(1, 10))),
        (T + 1, Command::CreateSchedule(schedule)),
        (
            T + 2,
            submit_dag(2, vec![node("a", vec![]), b], OnFailure::SkipDescendants),
        ),
        (T + 3, poll("w1", 4)),
        (T + 4, finish(1, 1, "w1", wrote(b"", two_outputs()))),
        (T + 5, Command::DropBlob { digest: [4; 32] }),
        (T + 6, keep(8, 80)),
        // The DAG ends (`b` is skipped), the schedule fires job 4, which
        // is cancelled, and the schedule is deleted.
        (T + 7, Command::Cancel { id: 2 }),
        (T + 60_001, Command::Tick),
        (T + 60_002, Command::Cancel { id: 4 }),
        (T + 60_003, Command::DeleteSchedule { name: "s".into() }),
        (T + r / 2, keep(8, 80)),
        (T + r + 10, Command::Tick),
        (T + r + 60_002, Command::Tick),
        (T + r + r / 2, Command::Tick),
        (T + 2 * r + 10, Command::Tick),
        (T + 2 * r + 60_002, Command::Tick),
        (T + 3 * r, Command::Tick),
    ]
}

#[test]
fn the_registry_survives_snapshots_and_replay_and_a_take_over_collects_the_same() {
    let history = registry_history();
    let mut live = Run::new();
    for (step, (now, command)) in history.iter().enumerate() {
        let _ = live.run(*now, command.clone());
        // Taken over here, by a snapshot (whole and in parts) or by
        // replaying the journal as bytes: the same master, and the same
        // future.
        let snapshot = live.master.snapshot();
        let mut replayed = Master::new();
        for event in &live.events {
            replayed.apply(&decode_event(&encode(event)).unwrap());
        }
        let mut takers = vec![Master::restore(&snapshot).unwrap(), replayed];
        for size in [1, 9, 64] {
            takers.push(restore_in_parts(&snapshot, size).unwrap());
        }
        for taker in takers {
            assert_eq!(taker, live.master, "after step {step}");
            assert_eq!(taker.registry, live.master.registry, "after step {step}");
            let mut old = Run {
                master: live.master.clone(),
                ..Run::new()
            };
            let mut new = Run {
                master: taker,
                ..Run::new()
            };
            for (now, command) in &history[step + 1..] {
                assert_eq!(
                    old.run(*now, command.clone()),
                    new.run(*now, command.clone())
                );
            }
            assert_eq!(old.events, new.events, "taken over after step {step}");
            assert_eq!(old.master, new.master);
        }
    }
    // The history collects what it should: blob 8 after its second
    // upload's retention; 1, the outputs and 2 after job 1's and the
    // DAG's purge; 3 after the purge of the last job that named it, the
    // schedule's; 4 was dropped.
    let collected: Vec<(Millis, Vec<u8>)> = (live.events.iter())
        .filter_map(|event| match &event.kind {
            EventKind::BlobsCollected { digests } => {
                Some((event.at, digests.iter().map(|d| d[0]).collect()))
            }
            _ => None,
        })
        .collect();
    let r = retention();
    assert_eq!(
        collected,
        [
            (T + r + r / 2, vec![8]),
            (T + 2 * r + 10, vec![1, 2, 5, 6]),
            (T + 2 * r + 60_002, vec![3]),
        ]
    );
    assert!(live.master.registry.kept.is_empty());
}

#[test]
fn a_version_9_snapshot_restores_keeping_the_blobs_its_jobs_and_schedules_name_and_no_other() {
    let mut run = Run::new();
    let r = retention();
    let mut schedule = schedule_spec("s", Every::Interval { ms: 1_000 }, Overlap::Skip, 0);
    schedule.options = reading(3, 30);
    run.ok(T, keep(1, 10));
    run.ok(T, keep(2, 20));
    run.ok(T, keep(3, 30));
    run.ok(T, Command::CreateSchedule(schedule));
    run.ok(T, submit_with(1, spec(1, b""), reading(2, 20)));
    run.ok(T + 1, poll("w1", 1));
    run.ok(T + 2, finish(1, 1, "w1", wrote(b"", two_outputs())));
    let master = run.master.before_locality();
    // Version 9 ended before the blobs kept.
    let snapshot = master.snapshot_v10();
    let kept_now = postcard::to_allocvec(&master.registry.kept).unwrap();
    let mut old = snapshot[..snapshot.len() - kept_now.len()].to_vec();
    old[0] = 9;
    let restored = Master::restore(&old).unwrap();
    assert_eq!(restore_in_parts(&old, 3).unwrap(), restored);
    // The same master, but for the registry: the upload nothing names is
    // not kept, the named blobs are, from the start of time.
    assert_eq!(
        Master {
            registry: restored.registry.clone(),
            ..master.clone()
        },
        restored
    );
    let since_ever = |size| Kept {
        size,
        idle_since: 0,
    };
    let expected = BTreeMap::from([
        ([2; 32], since_ever(20)),
        ([3; 32], since_ever(30)),
        ([5; 32], since_ever(1 << 40)),
        ([6; 32], since_ever(42)),
    ]);
    assert_eq!(restored.registry.kept, expected);
    let mut taken_over = Run {
        master: restored,
        ..Run::new()
    };
    assert_eq!(
        taken_over.status(&[1, 2, 3]),
        [
            BlobStatus {
                digest: [1; 32],
                kept: false,
                refs: 0,
                collect_at: None
            },
            kept(2, 1, None),
            kept(3, 1, None)
        ]
    );
    // Its snapshot is of this version, with the blobs kept, and restores
    // to itself.
    let again = taken_over.master.snapshot();
    assert_eq!(again[0], SNAPSHOT_VERSION);
    assert_eq!(Master::restore(&again).unwrap(), taken_over.master);
    // Once the job is purged, its blobs are collected as any others.
    assert_eq!(taken_over.collected(T + 2 + r), Vec::<u8>::new());
    assert_eq!(taken_over.collected(T + 2 + 2 * r), [2, 5, 6]);
    assert!(taken_over.keeps(3));
}

#[test]
fn format_8_events_never_hold_the_blob_registry() {
    let events = [
        EventKind::BlobKept { blob: blob(1, 1) },
        EventKind::BlobDropped { digest: [1; 32] },
        EventKind::BlobsCollected {
            digests: vec![[1; 32], [2; 32]],
        },
    ];
    for kind in events {
        let event = Event { at: T, kind };
        let now = encode(&event);
        assert_eq!(decode_event(&now), Ok(event.clone()));
        for format in [FORMAT_VERSION_8, FORMAT_VERSION_7, FORMAT_VERSION_6] {
            let old = [&[format][..], &now[1..]].concat();
            let refused = decode_event(&old).unwrap_err();
            assert_eq!(refused.code, codes::UNDECODABLE, "{format}: {event:?}");
            assert!(refused.message.contains("blob registry"), "{refused}");
        }
        let oldest = [&[FORMAT_VERSION_2][..], &now[1..]].concat();
        assert_eq!(decode_event(&oldest).unwrap_err().code, codes::UNDECODABLE);
    }
    // What format 8 held still decodes: a submission with an input blob
    // and a success with outputs.
    let submitted = Event {
        at: T,
        kind: EventKind::Submitted {
            id: 1,
            spec: spec(1, b"a"),
            request: None,
            options: reading(3, 5),
        },
    };
    let wrote_blobs = Event {
        at: T,
        kind: EventKind::Finished {
            id: 1,
            attempt: 1,
            outcome: wrote(b"r", two_outputs()),
            duration_ms: 1,
            log_tail: String::new(),
            usage: None,
        },
    };
    let mut schedule = schedule_spec("s", Every::Interval { ms: 1_000 }, Overlap::Skip, 0);
    schedule.options = reading(3, 5);
    let scheduled = Event {
        at: T,
        kind: EventKind::ScheduleCreated {
            spec: schedule,
            next: Some(T),
        },
    };
    for event in [submitted, wrote_blobs, scheduled] {
        // Format 8's options end before `trace`.
        let then = crate::protocol::legacy::written_before_trace(|| encode(&event));
        let old = [&[FORMAT_VERSION_8][..], &then[1..]].concat();
        assert_eq!(decode_event(&old), Ok(event));
    }
    // Commands of format 8 are refused.
    let command = encode(&Command::DropBlob { digest: [1; 32] });
    let old = [&[FORMAT_VERSION_8][..], &command[1..]].concat();
    assert_eq!(
        decode::<Command>(&old).unwrap_err().code,
        codes::UNKNOWN_VERSION
    );
}

/// The kept blobs are listed by digest a page at a time, each with its
/// size, how many names it has and when it goes unless named; the last
/// page says there is no next; a limit out of range is brought into it.
#[test]
fn the_kept_blobs_are_listed_by_digest_a_page_at_a_time() {
    let mut run = Run::new();
    for n in [3, 1, 2] {
        run.ok(T, keep(n, u64::from(n) * 10));
    }
    run.ok(T, submit_with(1, spec(1, b"x"), reading(2, 20)));
    let page = |after: Option<u8>, limit: u32| match run.master.query(
        T,
        &Query::KeptBlobs {
            after: after.map(|n| blob(n, 0).digest),
            limit,
        },
    ) {
        Ok(Answer::KeptBlobs { blobs, next }) => (blobs, next),
        other => panic!("a page, not {other:?}"),
    };
    let retention = run.master.config.retention_ms;
    let (first, next) = page(None, 2);
    let digests = |blobs: &[KeptBlob]| blobs.iter().map(|b| b.status.digest).collect::<Vec<_>>();
    let mut all = [blob(1, 0).digest, blob(2, 0).digest, blob(3, 0).digest];
    all.sort();
    assert_eq!(digests(&first), all[..2]);
    assert_eq!(next, Some(all[1]));
    let (one, more) = page(None, 0);
    assert_eq!(
        (digests(&one), more),
        (all[..1].to_vec(), Some(all[0])),
        "a limit of 0 is one"
    );
    let after = |digest| match run.master.query(
        T,
        &Query::KeptBlobs {
            after: Some(digest),
            limit: 5_000,
        },
    ) {
        Ok(Answer::KeptBlobs { blobs, next }) => (blobs, next),
        other => panic!("a page, not {other:?}"),
    };
    let (second, none) = after(all[1]);
    assert_eq!((digests(&second), none), (all[2..].to_vec(), None));
    // Each with its size and names: the blob a job reads is named and
    // not collected; the others go after retention.
    let (every, _) = after([0; 32]);
    for kept in &every {
        let n = [1, 2, 3]
            .into_iter()
            .find(|&n| blob(n, 0).digest == kept.status.digest)
            .unwrap();
        assert_eq!(kept.size, u64::from(n) * 10);
        assert!(kept.status.kept);
        match n {
            2 => assert_eq!((kept.status.refs, kept.status.collect_at), (1, None)),
            _ => assert_eq!(
                (kept.status.refs, kept.status.collect_at),
                (0, Some(T + retention))
            ),
        }
    }
}

#[test]
fn purging_a_blob_forgets_it_in_finished_jobs_and_waits_for_unfinished_readers_and_schedules() {
    let mut run = Run::new();
    let purge = |n| Command::PurgeBlob { digest: [n; 32] };
    let in_use = |run: &mut Run, now, n| {
        let before = run.master.clone();
        let refused = run.run(now, purge(n)).unwrap_err();
        assert_eq!(run.master, before, "a refusal changes nothing");
        assert_eq!(refused.code, codes::BLOB_IN_USE, "{refused}");
        refused.message
    };
    assert_eq!(run.refused(T, purge(1)), codes::BLOB_NOT_FOUND);
    run.ok(T, keep(1, 10));
    run.ok(T, keep(5, 50));
    // Job 1 reads blob 1; job 2 will write it and blob 2; job 3 reads
    // blob 5, which stays.
    run.ok(T, submit_with(1, spec(1, b""), reading(1, 10)));
    run.ok(T, submit(2, spec(1, b"")));
    run.ok(T, submit_with(3, spec(1, b""), reading(5, 50)));
    let said = in_use(&mut run, T, 1);
    assert!(
        said.contains("job 1, not finished, reads it as its input"),
        "{said}"
    );
    run.ok(T + 1, poll("w1", 3));
    run.ok(T + 2, finish(1, 1, "w1", ok(b"r")));
    let outputs = vec![named_blob("x", 1, 10), named_blob("y", 2, 20)];
    run.ok(T + 2, finish(2, 1, "w1", wrote(b"2", outputs)));
    // A DAG's job, not finished yet, that reads the outputs of job 2,
    // which wrote it, or of job 1, which read it (purged, job 1 would
    // take its result from the child): each holds it until cancelled.
    for (parent, child) in [(2, 4), (1, 5)] {
        let dag = vec![node("c", vec![DagRef::Job(parent)])];
        run.ok(T + 3, submit_dag(child, dag, OnFailure::SkipDescendants));
        let said = in_use(&mut run, T + 3, 1);
        let words =
            format!("job {child}, not finished, reads the outputs of job {parent}, which names it");
        assert!(said.contains(&words), "{said}");
        run.ok(T + 4, Command::Cancel { id: child });
    }
    // A schedule that gives it to its jobs.
    let mut schedule = schedule_spec("s", Every::Interval { ms: 1_000 }, Overlap::AllowAll, 0);
    schedule.options = reading(1, 10);
    run.ok(T + 4, Command::CreateSchedule(schedule));
    let said = in_use(&mut run, T + 4, 1);
    assert!(
        said.contains("schedule \"s\" gives it to its jobs"),
        "{said}"
    );
    run.ok(T + 5, Command::DeleteSchedule { name: "s".into() });
    assert_eq!(run.status(&[1]), [kept(1, 2, None)]);
    // Purged: job 1, which read it, goes as at retention; job 2 keeps
    // its other output; the cluster keeps it no longer.
    assert_eq!(run.ok(T + 6, purge(1)), Reply::Bulk { changed: 2 });
    assert_eq!(
        run.events.last().map(|e| &e.kind),
        Some(&EventKind::BlobPurged { digest: [1; 32] })
    );
    assert!(!run.keeps(1) && run.keeps(2) && run.keeps(5));
    assert!(run.master.find(1).is_none(), "its reader is purged");
    assert_eq!(run.view(2).outputs, [named_blob("y", 2, 20)]);
    assert_eq!(run.status(&[2, 5]), [kept(2, 1, None), kept(5, 1, None)]);
    assert_eq!(run.refused(T + 6, purge(1)), codes::BLOB_NOT_FOUND);
    let refused = run.run(T + 6, submit_with(9, spec(1, b""), reading(1, 10)));
    assert_eq!(refused.unwrap_err().code, codes::BLOB_NOT_FOUND);
    assert_journal_and_snapshot_agree(&run.master, &run.events);
    // Uploaded again, it is kept again, named by nothing.
    run.ok(T + 7, keep(1, 10));
    assert_eq!(run.status(&[1]), [kept(1, 0, Some(T + 7 + retention()))]);
    // A journal's purge of a blob an unfinished job reads (which the
    // decision refuses) leaves that job's name and the blob kept.
    run.master.apply(&Event {
        at: T + 8,
        kind: EventKind::BlobPurged { digest: [5; 32] },
    });
    assert_eq!(run.view(3).input_blob, Some(blob(5, 50)));
    assert_eq!(run.status(&[5]), [kept(5, 1, None)]);
}
