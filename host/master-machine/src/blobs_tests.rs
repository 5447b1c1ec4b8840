//! Blobs: a job's input blob reaches every attempt, the outputs of the
//! attempt that succeeds are kept (digests, never bytes) until the job is
//! purged, DAG children read their parents' outputs by name, reports out
//! of bounds are refused, and the facts survive packing, snapshots and
//! older formats.

use serde::Serialize;

use super::*;
use crate::limits::{OUTPUT_NAME_BYTES_MAX, OUTPUTS_MAX};
use crate::master::SNAPSHOT_VERSION;
use crate::scenarios::{
    blob, dag_node, failed, finish, limited, named_blob, poll, schedule_spec, spec, submit,
    submit_dag, submit_with, wrote,
};
use crate::testing::restore_in_parts;

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
    let master = run.master;
    assert_eq!(master.keyed.options.len(), 2);
    assert!(master.blobs.is_empty());
    // Version 8's layout: its options of four fields, and no blobs.
    let snapshot = master.snapshot();
    let keyed_now = postcard::to_allocvec(&master.keyed).unwrap();
    let schedules_now = postcard::to_allocvec(&master.schedules).unwrap();
    let rest = (
        &master.dags,
        &master.deployments,
        &master.egress,
        (&master.tapes, &master.egress.readable),
    );
    let rest = postcard::to_allocvec(&rest).unwrap();
    let at = snapshot.len() - 1 - rest.len() - schedules_now.len() - keyed_now.len();
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
    // Read as version 9, the same bytes are short of the blobs.
    let mut newer = old.clone();
    newer[0] = 9;
    assert!(Master::restore(&newer).is_err());
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
    // Format 7 wrote the same bytes without the last field's `None`.
    assert_eq!(now.last(), Some(&0));
    let old = [&[FORMAT_VERSION_7][..], &now[1..now.len() - 1]].concat();
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
    assert_eq!(refused, [codes::INVALID_JOB, codes::INVALID_JOB]);
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
    // Purged at the end, with everything the master knew of their blobs.
    assert!(run.master.blobs.is_empty());
    assert!(run.master.done.is_empty());
}
