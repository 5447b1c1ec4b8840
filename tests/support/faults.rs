//! What every fault test checks, whatever it broke: the invariants of
//! cohort's fault tolerance.
//!
//! * Every job that got a `202` reaches a terminal state, exactly once:
//!   here every job is an echo, so it must have succeeded, with exactly one
//!   succeeded attempt, and its result must be its own input.
//! * After the run, the journal of every back-end node is a prefix of the
//!   newest epoch's journal: where two journals both hold an entry, it is
//!   the same entry, and none is longer than the newest.

use super::{Node, eventually, eventually_async, job, settle};
use cohort::api::types::JobResponse;
use cohort::client::Node as Api;
use cohort::journal::{FsStorage, Shape, log::read_entries};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fault tests take turns: each runs three or more nodes whose failure
/// detection and timeouts are part of what is tested, and a 2-CPU machine
/// running every scenario's nodes at once measures the machine instead.
static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// Holds the machine for one fault test (released when dropped, even if
/// the test failed).
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Longest journals may take to line up after the last fault.
const JOURNALS_AGREE: Duration = Duration::from_secs(30);
/// Longest submissions may take to flow again after a fault.
const ACKS_WAIT: Duration = Duration::from_secs(30);
/// Pause of a submitter after a refused request, so that submitters do
/// not spin against a node that is down or a master that is moving.
const ERROR_PAUSE: Duration = Duration::from_millis(20);

/// Jobs acknowledged to clients, and how many requests failed.
#[derive(Debug, Default)]
pub struct Ledger {
    /// `(id, input)` of every job that got a `202`.
    pub acked: Mutex<Vec<(u64, String)>>,
    /// Requests that got an error (allowed during a crash: they were never
    /// acknowledged, and a client would retry them).
    pub failed: AtomicU64,
    /// When each `202` arrived, in order.
    pub acked_at: Mutex<Vec<Instant>>,
    /// The first error seen.
    pub first_error: Mutex<Option<String>>,
}

impl Ledger {
    /// Number of jobs acknowledged so far.
    pub fn len(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits (bounded) until at least `count` jobs are acknowledged.
    pub async fn wait_for(&self, count: usize) {
        let what = format!("{count} jobs acknowledged");
        eventually_async(&what, super::CONVERGE, async || match self.len() {
            len if len >= count => Ok(()),
            len => Err(format!("only {len} are")),
        })
        .await
    }

    /// Waits (bounded by [`ACKS_WAIT`]) until `count` jobs were
    /// acknowledged after `instant`: submissions flow.
    pub fn wait_acked_after(&self, instant: Instant, count: usize) {
        let what = format!("{count} jobs acknowledged");
        eventually(&what, ACKS_WAIT, || {
            let acked = (self.acked_at.lock().unwrap().iter())
                .filter(|&&at| at > instant)
                .count();
            if acked >= count {
                return Ok(());
            }
            Err(format!(
                "{acked} were; first error: {:?}",
                self.first_error.lock().unwrap()
            ))
        })
    }

    /// The first acknowledgement after `instant`.
    pub fn first_ack_after(&self, instant: Instant) -> Option<Instant> {
        self.acked_at
            .lock()
            .unwrap()
            .iter()
            .copied()
            .find(|&at| at > instant)
    }
}

/// The front-ends submitters send to; tests swap them as nodes restart on
/// new ports.
pub type Targets = Arc<Mutex<Vec<Api>>>;

/// Targets for `nodes`.
pub fn targets(nodes: &[&Node]) -> Targets {
    Arc::new(Mutex::new(nodes.iter().map(|n| Api::new(&n.url)).collect()))
}

/// Submitters writing echo jobs, each request to the next of the targets,
/// until [`finish`](Self::finish).
pub struct Burst {
    /// What they were told.
    pub ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Burst {
    /// Starts `tasks` submitters of `module` to `targets`.
    pub fn start(
        rt: &tokio::runtime::Runtime,
        targets: &Targets,
        module: &str,
        tasks: usize,
    ) -> Burst {
        let (stop, ledger) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(Ledger::default()),
        );
        let tasks = (0..tasks)
            .map(|w| {
                let (targets, stop, ledger) = (targets.clone(), stop.clone(), ledger.clone());
                let module = module.to_string();
                rt.spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let input = format!("writer {w} job {n}");
                        let client = {
                            let targets = targets.lock().unwrap();
                            targets[n % targets.len()].clone()
                        };
                        n += 1;
                        match client.submit(&job(&module, &input)).await {
                            Ok(accepted) => {
                                ledger.acked.lock().unwrap().push((accepted.id, input));
                                ledger.acked_at.lock().unwrap().push(Instant::now());
                            }
                            Err(error) => {
                                ledger.failed.fetch_add(1, Ordering::Relaxed);
                                ledger
                                    .first_error
                                    .lock()
                                    .unwrap()
                                    .get_or_insert(error.to_string());
                                // A sleep: pacing, not waiting (see ERROR_PAUSE).
                                tokio::time::sleep(ERROR_PAUSE).await;
                            }
                        }
                    }
                })
            })
            .collect();
        Burst {
            ledger,
            stop,
            tasks,
        }
    }

    /// Stops the submitters and waits for them.
    pub fn finish(self, rt: &tokio::runtime::Runtime) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            rt.block_on(task).unwrap();
        }
    }
}

/// Checks that every acknowledged job settled exactly once with its own
/// input as result, asking `client`.
pub async fn check_jobs(client: &Api, ledger: &Ledger) {
    let acked = ledger.acked.lock().unwrap().clone();
    assert!(!acked.is_empty(), "no job was acknowledged");
    for (id, input) in &acked {
        check_job(client, *id, input.as_bytes()).await;
    }
}

/// Checks that acknowledged job `id` settles, succeeded exactly once (an
/// attempt that says what it cost, kept through every fault) and returned
/// `expected`; returns it.
pub async fn check_job(client: &Api, id: u64, expected: &[u8]) -> JobResponse {
    let job = settle(client, id).await;
    assert_eq!(job.state, "succeeded", "acknowledged job {id}: {job:?}");
    let successes: Vec<_> = (job.attempts.iter())
        .filter(|a| a.outcome.as_deref() == Some("succeeded"))
        .collect();
    assert_eq!(successes.len(), 1, "one outcome for job {id}: {job:?}");
    let usage = successes[0].usage.expect("a reported attempt's usage");
    assert!(usage.memory_peak_bytes > 0, "job {id} ran: {job:?}");
    let result = super::retrying(Instant::now(), || client.result(id)).await;
    assert_eq!(&result[..], expected, "job {id}'s result");
    job
}

/// A back-end node's journal, read without writing to it.
struct Read {
    node: String,
    shape: Shape,
    entries: Vec<(u64, u64, Vec<u8>)>,
}

fn read_journal(node: &str, data_dir: &Path) -> Read {
    let storage = FsStorage::open(&data_dir.join("journal")).unwrap();
    let first = {
        use cohort::journal::Storage;
        storage.segments().unwrap().first().copied().unwrap_or(0)
    };
    let entries: Vec<_> = read_entries(&storage, first, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.index, e.epoch, e.data))
        .collect();
    let mut shape = Shape {
        first,
        next: first + entries.len() as u64,
        runs: Vec::new(),
        last_epoch: 0,
        base_epoch: 0,
    };
    for (index, epoch, _) in &entries {
        if shape.runs.last().is_none_or(|&(_, e)| e != *epoch) {
            shape.runs.push((*index, *epoch));
        }
        shape.last_epoch = *epoch;
    }
    Read {
        node: node.into(),
        shape,
        entries,
    }
}

/// Why the journals in `nodes` are not prefixes of the newest, if they
/// are not.
fn journals_disagree(nodes: &[&Node]) -> Option<String> {
    let journals: Vec<Read> = nodes
        .iter()
        .map(|node| read_journal(&node.url, &node.data_dir))
        .collect();
    let newest = journals
        .iter()
        .max_by_key(|j| (j.shape.last_epoch, j.shape.next, j.entries.len()))?;
    if newest.entries.is_empty() {
        // Nothing to compare would make every journal a "prefix".
        return Some(format!(
            "the newest journal ({}) holds no entries",
            newest.node
        ));
    }
    for journal in &journals {
        if journal.shape.next > newest.shape.next {
            return Some(format!(
                "{} holds entries up to {} beyond the newest journal ({}, up to {})",
                journal.node, journal.shape.next, newest.node, newest.shape.next
            ));
        }
        for (index, epoch, data) in &journal.entries {
            if *index < newest.shape.first {
                continue;
            }
            let (_, newest_epoch, newest_data) =
                &newest.entries[(index - newest.shape.first) as usize];
            if newest_epoch != epoch || newest_data != data {
                return Some(format!(
                    "{} entry {index} (epoch {epoch}) differs from {}'s (epoch {newest_epoch})",
                    journal.node, newest.node
                ));
            }
        }
    }
    None
}

/// Waits (bounded) until every back-end node's journal is a prefix of the
/// newest epoch's journal.
pub fn check_journals(nodes: &[&Node]) {
    eventually("the journals to agree", JOURNALS_AGREE, || {
        journals_disagree(nodes).map_or(Ok(()), Err)
    })
}
