//! What attempts cost: each attempt keeps the usage its worker reported
//! (none for one that ended without a report) through the journal,
//! packing, snapshots and restores in parts; bytes of format 12 and
//! snapshots of version 12 decode with none.

use super::*;
use crate::steps::{finish, poll, spec, submit};
use crate::testing::{assert_journal_and_snapshot_agree, decide_and_apply};

const T: Millis = 1_000_000;

fn cost(cpu_us: u64, memory_peak_bytes: u64, egress_bytes: u64) -> Usage {
    Usage {
        cpu_us,
        memory_peak_bytes,
        egress_bytes,
    }
}

/// Worker `w`'s report of `outcome` for attempt `attempt` of job `id`,
/// with `usage`.
fn report(id: JobId, attempt: u32, outcome: Outcome, usage: Usage) -> Command {
    let mut command = finish(id, attempt, "w", outcome);
    if let Command::Finish { usage: said, .. } = &mut command {
        *said = usage;
    }
    command
}

fn usages(master: &Master, id: JobId) -> Vec<Option<Usage>> {
    match master.query(T, &Query::Job { id }) {
        Ok(Answer::Job(view)) => view.attempts.iter().map(|a| a.usage).collect(),
        other => panic!("a job view, not {other:?}"),
    }
}

/// Job 1 loses its first attempt with its worker and reports its second;
/// job 2 succeeds at once (and is packed); job 3 is still running.
fn ran() -> (Master, Vec<Event>) {
    let (mut master, mut journal) = (Master::new(), Vec::new());
    let mut run = |master: &mut Master, now: Millis, command: Command| {
        decide_and_apply(master, &mut journal, now, &command).expect("accepted")
    };
    for n in 1..=2 {
        run(&mut master, T, submit(n, spec(1, b"x")));
    }
    run(&mut master, T, poll("w", 2));
    let ok = || Outcome::Succeeded(b"r".to_vec());
    run(
        &mut master,
        T + 1,
        report(2, 1, ok(), cost(2_500, 1 << 20, 30)),
    );
    run(
        &mut master,
        T + 2,
        Command::WorkerGone { worker: "w".into() },
    );
    run(&mut master, T + 3_600_000, Command::Tick);
    run(&mut master, T + 3_600_000, poll("w", 1));
    run(&mut master, T + 3_600_001, submit(3, spec(1, b"x")));
    run(&mut master, T + 3_600_001, poll("w", 1));
    let second = report(1, 2, ok(), cost(7_000, 2 << 20, 0));
    run(&mut master, T + 3_600_002, second);
    (master, journal)
}

#[test]
fn every_attempt_keeps_what_it_cost_through_the_journal_and_snapshots() {
    let (master, journal) = ran();
    assert_eq!(usages(&master, 1), [None, Some(cost(7_000, 2 << 20, 0))]);
    assert_eq!(usages(&master, 2), [Some(cost(2_500, 1 << 20, 30))]);
    assert_eq!(usages(&master, 3), [None], "still running");
    assert!(master.done.contains_key(&2), "job 2 is packed");
    assert_journal_and_snapshot_agree(&master, &journal);
}

#[test]
fn a_snapshot_of_version_12_restores_attempts_without_usage() {
    let (master, _) = ran();
    let old = Master::restore(&master.snapshot_v12()).unwrap();
    assert_eq!(old, master.before_usage());
    assert_eq!(usages(&old, 1), [None, None]);
    assert_eq!(usages(&old, 2), [None]);
    // Its packed jobs are packed again in this version's bytes: a snapshot
    // of the restored master restores to it.
    assert_eq!(Master::restore(&old.snapshot()).unwrap(), old);
}

#[test]
fn a_report_of_format_12_decodes_without_usage() {
    let finished = |usage| Event {
        at: T,
        kind: EventKind::Finished {
            id: 1,
            attempt: 1,
            outcome: Outcome::Succeeded(b"r".to_vec()),
            duration_ms: 4,
            log_tail: "done\n".into(),
            usage,
        },
    };
    let now = finished(Some(cost(1, 2, 3)));
    assert_eq!(decode_event(&encode(&now)), Ok(now.clone()));
    let old = crate::protocol::legacy::written_before_usage(|| encode(&now));
    let old = [&[FORMAT_VERSION_12][..], &old[1..]].concat();
    assert_eq!(decode_event(&old), Ok(finished(None)));
    // Bytes of this format that lack the usage are refused, not misread.
    let cut = [&[FORMAT_VERSION][..], &old[1..]].concat();
    assert_eq!(decode_event(&cut).unwrap_err().code, codes::UNDECODABLE);
}
