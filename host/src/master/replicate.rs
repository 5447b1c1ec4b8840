//! Journal replication: the master's side.
//!
//! The master's journal writer appends a batch and fsyncs it locally; this
//! module sends the same entries to every other live back-end node's
//! replica (`cluster::replica`) and releases the batch's completions
//! (replies, assignments, reads) only once the batch is **committed**:
//! durable here and on at least `min_replicas` replicas.
//!
//! ```text
//! writer thread ──appended(entries)──▶ window ──▶ one session per replica
//!      │                                              │ Append / Install
//!      └──durable(index, completions)──▶ gate ◀──ack──┘
//!                                          └──▶ completions, in order
//! ```
//!
//! * **Sessions.** Each replica gets a task that first fences it with this
//!   master's epoch (learning its journal's [`Shape`]), works out where
//!   its journal diverges from this one, and from there sends entries in
//!   order, one request at a time (each carries everything appended since
//!   the last, so a slow replica gets bigger batches: group commit again).
//!   Entries come from an in-memory window of this epoch's entries, or
//!   from the journal files for a replica that is further behind, or, if
//!   the master compacted them, as its newest snapshot. Newer snapshots
//!   are shipped too, so replicas compact their journals.
//! * **Commit.** The commit index is the least of the local durable index
//!   and the `min_replicas`-th highest acknowledged index. Completions wait
//!   in order; those not committed within [`COMMIT_WAIT`] fail with
//!   `replicas_unavailable` (the entries may still commit later: a client
//!   retries with its idempotency key).
//! * **Refusing instead of diverging.** While fewer than `min_replicas`
//!   replicas answer, the master refuses new requests with
//!   `replicas_unavailable` instead of deciding them.
//! * **Superseded.** A replica that answers `Fenced` has promised a newer
//!   master: this one can commit nothing more. It fails everything pending
//!   and reports it, and the node steps down.

use super::service::{MasterCounters, MasterError};
use super::store;
use crate::cluster::membership::View;
use crate::cluster::replica::{self, ReplicaRequest, ReplicaResponse};
use crate::journal::{FsStorage, Shape, log::read_entries};
use crate::peer::{Peer, TRANSFER_TIMEOUT};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Longest a batch waits to be committed before its callers are told
/// `replicas_unavailable`.
pub const COMMIT_WAIT: Duration = Duration::from_secs(5);
/// Entry data per append request at most.
const APPEND_BYTES_MAX: usize = 4 << 20;
/// Longest an append may take before the replica counts as unreachable.
const APPEND_TIMEOUT: Duration = Duration::from_secs(2);
/// An idle session sends an empty append this often (keeps the replica's
/// health and commit index fresh).
const HEARTBEAT: Duration = Duration::from_millis(500);
/// Pause after a failed exchange before trying again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Bytes of entries kept in memory for sessions; beyond, lagging replicas
/// read from the journal files.
const WINDOW_BYTES_MAX: usize = 256 << 20;
/// How often waiting batches are checked against [`COMMIT_WAIT`].
const EXPIRY_CHECK: Duration = Duration::from_millis(100);

/// Something to run once its batch is committed, or failed.
pub type Completion = Box<dyn FnOnce(Result<(), MasterError>) + Send>;

/// Where and how to replicate.
#[derive(Debug, Clone)]
pub struct ReplicationOptions {
    /// Replicas (besides this node) that must hold a batch before it is
    /// committed.
    pub min_replicas: usize,
    /// Raise `min_replicas` to 1 as soon as another back-end node appears
    /// (the default for a master that started alone).
    pub auto: bool,
    /// The membership view: replicas are the other live back-end nodes.
    pub view: watch::Receiver<View>,
    /// The HTTP client for replica requests.
    pub peer: Peer,
}

/// How replication stands, as `/metrics` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicationStatus {
    /// Replicas a batch needs now.
    pub needed: usize,
    /// Replicas whose last exchange succeeded.
    pub healthy: usize,
    /// Entries appended here but not yet committed.
    pub uncommitted: u64,
    /// Entries each replica (by node id) lacks.
    pub behind: Vec<(String, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct Follower {
    /// The replica's journal holds every entry below this (durably).
    acked: u64,
    /// Whether its last exchange succeeded.
    healthy: bool,
}

struct Pending {
    index: u64,
    since: Instant,
    completions: Vec<Completion>,
}

#[derive(Default)]
struct Inner {
    window_first: u64,
    window: VecDeque<Vec<u8>>,
    window_bytes: usize,
    appended: u64,
    durable: u64,
    commit: u64,
    followers: BTreeMap<String, Follower>,
    pending: VecDeque<Pending>,
    /// Set once superseded or stopped: everything fails from then on.
    closed: Option<MasterError>,
}

/// The master's replication state, shared by the writer thread, the master
/// thread and the sessions.
pub struct Replication {
    epoch: u64,
    min_replicas: AtomicUsize,
    data_dir: PathBuf,
    /// The journal as it was when this master started.
    start: Shape,
    inner: Mutex<Inner>,
    /// Notified whenever waiting batches leave `Inner::pending`.
    settled: Condvar,
    appended: watch::Sender<u64>,
    snapshot: watch::Sender<u64>,
    superseded: watch::Sender<Option<u64>>,
    counters: Arc<MasterCounters>,
}

impl Replication {
    /// Replication for a master with `epoch` whose journal (in `data_dir`)
    /// has shape `start`; it counts refused batches in `counters`.
    pub fn new(
        epoch: u64,
        min_replicas: usize,
        data_dir: PathBuf,
        start: Shape,
        counters: Arc<MasterCounters>,
    ) -> Arc<Self> {
        let next = start.next;
        Arc::new(Self {
            epoch,
            min_replicas: AtomicUsize::new(min_replicas),
            data_dir,
            inner: Mutex::new(Inner {
                window_first: next,
                appended: next,
                durable: next,
                commit: next,
                ..Inner::default()
            }),
            start,
            settled: Condvar::new(),
            appended: watch::channel(next).0,
            snapshot: watch::channel(0).0,
            superseded: watch::channel(None).0,
            counters,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the sessions (one per other live back-end node, following
    /// the view) and the expiry of uncommitted batches.
    pub fn spawn(self: &Arc<Self>, options: ReplicationOptions) {
        let replication = self.clone();
        tokio::spawn(async move { replication.supervise(options).await });
    }

    /// The writer appended `entries` (written by this epoch) from `first`.
    pub fn appended(&self, first: u64, entries: Vec<Vec<u8>>) {
        let mut inner = self.lock();
        debug_assert_eq!(first, inner.appended);
        inner.appended = first + entries.len() as u64;
        for entry in entries {
            inner.window_bytes += entry.len();
            inner.window.push_back(entry);
        }
        let appended = inner.appended;
        self.trim(&mut inner);
        drop(inner);
        self.appended.send_replace(appended);
    }

    /// Every entry below `index` is durable here; `completions` wait for
    /// them to be committed.
    pub fn durable(&self, index: u64, completions: Vec<Completion>) {
        let mut inner = self.lock();
        inner.durable = inner.durable.max(index);
        if !completions.is_empty() {
            if let Some(error) = &inner.closed {
                let error = error.clone();
                drop(inner);
                return fail(completions, &error);
            }
            inner.pending.push_back(Pending {
                index,
                since: Instant::now(),
                completions,
            });
        }
        self.advance(inner);
    }

    /// A snapshot covering entries below `index` was stored.
    pub fn snapshot_stored(&self, index: u64) {
        self.snapshot.send_replace(index);
    }

    /// Whether the master may take new requests: not superseded, and
    /// enough replicas answering.
    pub fn ready(&self) -> Result<(), MasterError> {
        let inner = self.lock();
        if let Some(error) = &inner.closed {
            return Err(error.clone());
        }
        let healthy = healthy(&inner);
        let needed = self.min_replicas();
        if healthy < needed {
            return Err(MasterError::Unreplicated(format!(
                "{healthy} of the {needed} replicas needed answer"
            )));
        }
        Ok(())
    }

    /// How replication stands now (for `/metrics`; computed per scrape).
    pub fn status(&self) -> ReplicationStatus {
        let inner = self.lock();
        ReplicationStatus {
            needed: self.min_replicas(),
            healthy: healthy(&inner),
            uncommitted: inner.appended.saturating_sub(inner.commit),
            behind: inner
                .followers
                .iter()
                .map(|(node, f)| (node.clone(), inner.appended.saturating_sub(f.acked)))
                .collect(),
        }
    }

    /// Changes to the newer epoch once a replica says this master was
    /// superseded.
    pub fn superseded(&self) -> watch::Receiver<Option<u64>> {
        self.superseded.subscribe()
    }

    /// Waits (blocking, at most [`COMMIT_WAIT`]) until every batch handed
    /// over so far is committed or failed: a master stopping for a
    /// hand-over lets its last batches reach the replicas first, so their
    /// callers get their answer instead of an error they would retry.
    pub fn drain(&self) {
        let inner = self.lock();
        let _ = self
            .settled
            .wait_timeout_while(inner, COMMIT_WAIT, |inner| {
                !inner.pending.is_empty() && inner.closed.is_none()
            });
    }

    /// Fails everything waiting and everything to come (the master stops).
    pub fn close(&self, error: MasterError) {
        let mut inner = self.lock();
        inner.closed.get_or_insert(error.clone());
        let pending: Vec<Pending> = inner.pending.drain(..).collect();
        drop(inner);
        self.settled.notify_all();
        for batch in pending {
            fail(batch.completions, &error);
        }
    }

    /// Replicas a batch needs now.
    pub fn min_replicas(&self) -> usize {
        self.min_replicas.load(Ordering::Relaxed)
    }

    /// Recomputes the commit index and runs what it releases.
    fn advance(&self, mut inner: std::sync::MutexGuard<'_, Inner>) {
        let mut acks: Vec<u64> = inner.followers.values().map(|f| f.acked).collect();
        acks.sort_unstable_by(|a, b| b.cmp(a));
        let replicated = match self.min_replicas() {
            0 => u64::MAX,
            r => acks.get(r - 1).copied().unwrap_or(0),
        };
        let commit = inner.durable.min(replicated).max(inner.commit);
        inner.commit = commit;
        let mut released = Vec::new();
        while inner.pending.front().is_some_and(|p| p.index <= commit) {
            released.push(inner.pending.pop_front().expect("checked"));
        }
        self.trim(&mut inner);
        drop(inner);
        let any = !released.is_empty();
        for batch in released {
            for completion in batch.completions {
                completion(Ok(()));
            }
        }
        // After the completions: a drain that returns has its replies sent.
        if any {
            self.settled.notify_all();
        }
    }

    /// Drops window entries every replica has, or the oldest when the
    /// window is too big.
    fn trim(&self, inner: &mut Inner) {
        let needed = inner
            .followers
            .values()
            .map(|f| f.acked)
            .min()
            .unwrap_or(inner.appended)
            .min(inner.commit);
        while inner.window_first < needed || inner.window_bytes > WINDOW_BYTES_MAX {
            let Some(entry) = inner.window.pop_front() else {
                break;
            };
            inner.window_bytes -= entry.len();
            inner.window_first += 1;
        }
    }

    fn expire(&self) {
        let mut inner = self.lock();
        let mut expired = Vec::new();
        while inner
            .pending
            .front()
            .is_some_and(|p| p.since.elapsed() >= COMMIT_WAIT)
        {
            expired.push(inner.pending.pop_front().expect("checked"));
        }
        let healthy = healthy(&inner);
        drop(inner);
        if expired.is_empty() {
            return;
        }
        self.settled.notify_all();
        let error = MasterError::Unreplicated(format!(
            "not committed within {COMMIT_WAIT:?}: {healthy} of the {} replicas needed answer",
            self.min_replicas()
        ));
        tracing::warn!("{error}");
        self.counters
            .unreplicated_batches
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
        for batch in expired {
            fail(batch.completions, &error);
        }
    }

    /// The index below which entries are known committed. Entries adopted
    /// from older epochs count only once one of this epoch's own entries
    /// is committed after them (before that, a replica holding them is no
    /// proof: a newer journal may still replace them).
    fn committed(&self) -> u64 {
        let commit = self.lock().commit;
        if commit > self.start.next { commit } else { 0 }
    }

    /// This master's journal: the start shape plus this epoch's entries.
    fn shape(&self) -> Shape {
        let appended = self.lock().appended;
        let mut shape = self.start.clone();
        if appended > shape.next {
            if shape.runs.last().is_none_or(|&(_, e)| e != self.epoch) {
                shape.runs.push((shape.next, self.epoch));
            }
            shape.next = appended;
            shape.last_epoch = self.epoch;
        }
        shape
    }

    fn set_follower(&self, node: &str, follower: Option<Follower>) {
        let mut inner = self.lock();
        match follower {
            Some(follower) => {
                inner.followers.insert(node.to_string(), follower);
            }
            None => {
                inner.followers.remove(node);
            }
        }
        self.advance(inner);
    }

    fn unhealthy(&self, node: &str) {
        let mut inner = self.lock();
        if let Some(follower) = inner.followers.get_mut(node) {
            follower.healthy = false;
        }
        self.advance(inner);
    }

    fn supersede(&self, epoch: u64) {
        self.superseded.send_replace(Some(epoch));
        self.close(MasterError::Unavailable(format!(
            "this master (epoch {}) was superseded by epoch {epoch}",
            self.epoch
        )));
    }

    /// Entries from `from` on for a session: from the window, the journal
    /// files, or `None` if compacted (send the snapshot instead).
    async fn entries(&self, from: u64) -> anyhow::Result<Option<Vec<(u64, Vec<u8>)>>> {
        {
            let inner = self.lock();
            if from >= inner.window_first {
                let mut bytes = 0;
                let skip = (from - inner.window_first) as usize;
                let entries = inner
                    .window
                    .iter()
                    .skip(skip)
                    .take_while(|entry| {
                        let take = bytes < APPEND_BYTES_MAX;
                        bytes += entry.len();
                        take
                    })
                    .map(|entry| (self.epoch, entry.clone()))
                    .collect();
                return Ok(Some(entries));
            }
        }
        let dir = self.data_dir.join("journal");
        let entries = tokio::task::spawn_blocking(move || {
            let storage = FsStorage::open(&dir)?;
            anyhow::Ok(read_entries(&storage, from, APPEND_BYTES_MAX)?)
        })
        .await??;
        if entries.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            entries
                .into_iter()
                .map(|entry| (entry.epoch, entry.data))
                .collect(),
        ))
    }

    async fn supervise(self: Arc<Self>, mut options: ReplicationOptions) {
        // By node id: the URL it had when the session started (a node that
        // restarts keeps its id but may get another address).
        let mut sessions: BTreeMap<String, (String, tokio::task::JoinHandle<()>)> = BTreeMap::new();
        let mut superseded = self.superseded();
        let mut expiry = tokio::time::interval(EXPIRY_CHECK);
        loop {
            if self.lock().closed.is_some() {
                break;
            }
            let targets: BTreeMap<String, String> = {
                let view = options.view.borrow_and_update();
                view.back_ends()
                    .filter(|m| m.node_id != view.me)
                    .map(|m| (m.node_id.clone(), m.http.clone()))
                    .collect()
            };
            if options.auto && !targets.is_empty() && self.min_replicas() == 0 {
                // From now on every batch needs a second copy: this node is
                // no longer alone, and losing it must not lose work.
                tracing::info!("another back-end node joined: batches now need 1 replica");
                self.min_replicas.store(1, Ordering::Relaxed);
            }
            sessions.retain(|node, (url, task)| {
                let keep = targets.get(node) == Some(url) && !task.is_finished();
                if !keep {
                    task.abort();
                    self.set_follower(node, None);
                }
                keep
            });
            for (node, url) in targets {
                if sessions.contains_key(&node) {
                    continue;
                }
                self.set_follower(
                    &node,
                    Some(Follower {
                        acked: 0,
                        healthy: true,
                    }),
                );
                let replication = self.clone();
                let peer = options.peer.clone();
                let (name, address) = (node.clone(), url.clone());
                sessions.insert(
                    node,
                    (
                        url,
                        tokio::spawn(async move { replication.session(peer, name, address).await }),
                    ),
                );
            }
            tokio::select! {
                changed = options.view.changed() => if changed.is_err() { break },
                _ = superseded.changed() => {}
                _ = expiry.tick() => self.expire(),
            }
        }
        for (_, (_, task)) in sessions {
            task.abort();
        }
    }

    /// Keeps one replica in step with this master's journal.
    async fn session(self: Arc<Self>, peer: Peer, node: String, url: String) {
        let mut appended = self.appended.subscribe();
        let mut snapshots = self.snapshot.subscribe();
        // The replica's journal holds the master's entries below `next`;
        // `None` until a fence has told where it diverges.
        let mut next: Option<u64> = None;
        let mut shipped = 0;
        loop {
            if self.lock().closed.is_some() {
                return;
            }
            let request = match next {
                None => ReplicaRequest::Fence {
                    epoch: self.epoch,
                    claim: false,
                },
                Some(from) => {
                    let snapshot = *snapshots.borrow_and_update();
                    let commit = self.lock().commit;
                    if snapshot > shipped && from >= snapshot && commit >= snapshot {
                        shipped = snapshot;
                        match self.install_request().await {
                            Some(request) => request,
                            None => continue,
                        }
                    } else {
                        if *appended.borrow_and_update() <= from {
                            tokio::select! {
                                _ = appended.changed() => {}
                                _ = snapshots.changed() => {}
                                _ = tokio::time::sleep(HEARTBEAT) => {}
                            }
                        }
                        match self.entries(from).await {
                            Ok(Some(entries)) => ReplicaRequest::Append {
                                epoch: self.epoch,
                                first: from,
                                entries,
                                commit: self.committed(),
                            },
                            Ok(None) => match self.install_request().await {
                                Some(request) => request,
                                None => continue,
                            },
                            Err(error) => {
                                tracing::warn!("replication to {node}: {error:#}");
                                tokio::time::sleep(RETRY_PAUSE).await;
                                continue;
                            }
                        }
                    }
                }
            };
            let timeout = match request {
                ReplicaRequest::Install { .. } => TRANSFER_TIMEOUT,
                _ => APPEND_TIMEOUT,
            };
            let response = replica::call(&peer, &url, &request, timeout).await;
            match (request, response) {
                (ReplicaRequest::Append { .. }, Ok(ReplicaResponse::Shape(shape))) => {
                    // Acknowledged up to where it agrees with this journal.
                    let agreed = self.shape().divergence(&shape);
                    next = Some(agreed);
                    self.set_follower(
                        &node,
                        Some(Follower {
                            acked: agreed,
                            healthy: true,
                        }),
                    );
                }
                (_, Ok(ReplicaResponse::Shape(shape))) => {
                    next = Some(self.shape().divergence(&shape));
                }
                (_, Ok(ReplicaResponse::Fenced { promised })) => {
                    tracing::warn!(
                        "{node} promised epoch {promised}: this master (epoch {}) was superseded",
                        self.epoch
                    );
                    return self.supersede(promised);
                }
                (_, Ok(other)) => {
                    tracing::warn!("replication to {node}: {other:?}");
                    self.unhealthy(&node);
                    next = None;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                (_, Err(error)) => {
                    tracing::debug!("replication to {node}: {error}");
                    self.unhealthy(&node);
                    next = None;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    async fn install_request(&self) -> Option<ReplicaRequest> {
        let data_dir = self.data_dir.clone();
        match tokio::task::spawn_blocking(move || store::latest_snapshot(&data_dir)).await {
            Ok(Ok(Some(snapshot))) => Some(ReplicaRequest::Install {
                epoch: self.epoch,
                snapshot,
            }),
            other => {
                tracing::warn!("replication: no snapshot to send ({other:?})");
                tokio::time::sleep(RETRY_PAUSE).await;
                None
            }
        }
    }
}

/// Replicas whose last exchange succeeded.
fn healthy(inner: &Inner) -> usize {
    inner.followers.values().filter(|f| f.healthy).count()
}

fn fail(completions: Vec<Completion>, error: &MasterError) {
    for completion in completions {
        completion(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counter() -> (Arc<AtomicUsize>, impl Fn() -> Completion) {
        let done = Arc::new(AtomicUsize::new(0));
        let made = done.clone();
        (done, move || {
            let done = made.clone();
            Box::new(move |result: Result<(), MasterError>| {
                if result.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }) as Completion
        })
    }

    fn follower(acked: u64) -> Option<Follower> {
        Some(Follower {
            acked,
            healthy: true,
        })
    }

    #[test]
    fn a_batch_is_released_once_durable_here_and_on_enough_replicas() {
        let replication =
            Replication::new(2, 1, PathBuf::new(), Shape::default(), Default::default());
        let (done, completion) = counter();
        replication.set_follower("b", follower(0));
        replication.set_follower("c", follower(0));
        replication.appended(0, vec![b"a".to_vec(), b"b".to_vec()]);
        replication.durable(2, vec![completion()]);
        assert_eq!(done.load(Ordering::Relaxed), 0, "on no replica yet");
        replication.set_follower("c", follower(1));
        assert_eq!(done.load(Ordering::Relaxed), 0, "only half the batch");
        replication.set_follower("b", follower(2));
        assert_eq!(done.load(Ordering::Relaxed), 1);
        // Durable on a replica before it is here: still waits for here.
        replication.appended(2, vec![b"c".to_vec()]);
        replication.set_follower("b", follower(3));
        replication.durable(2, vec![completion()]);
        assert_eq!(done.load(Ordering::Relaxed), 2, "nothing new to wait for");
        replication.durable(3, vec![completion()]);
        assert_eq!(done.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn too_few_replicas_refuse_and_a_fence_closes_everything() {
        let replication =
            Replication::new(2, 2, PathBuf::new(), Shape::default(), Default::default());
        replication.set_follower("b", follower(0));
        assert!(matches!(
            replication.ready(),
            Err(MasterError::Unreplicated(_))
        ));
        replication.set_follower("c", follower(0));
        assert!(replication.ready().is_ok());
        let failed = Arc::new(AtomicUsize::new(0));
        let seen = failed.clone();
        replication.appended(0, vec![b"a".to_vec()]);
        replication.durable(
            1,
            vec![Box::new(move |result: Result<(), MasterError>| {
                if result.is_err() {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            })],
        );
        replication.supersede(3);
        assert_eq!(failed.load(Ordering::Relaxed), 1);
        assert_eq!(*replication.superseded().borrow(), Some(3));
        assert!(matches!(
            replication.ready(),
            Err(MasterError::Unavailable(_))
        ));
    }

    #[test]
    fn a_drain_returns_once_the_last_batch_is_committed() {
        let replication =
            Replication::new(2, 1, PathBuf::new(), Shape::default(), Default::default());
        let (done, completion) = counter();
        replication.set_follower("b", follower(0));
        replication.appended(0, vec![b"a".to_vec()]);
        replication.durable(1, vec![completion()]);
        let acking = replication.clone();
        let ack = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            acking.set_follower("b", follower(1));
        });
        let started = Instant::now();
        replication.drain();
        assert_eq!(
            done.load(Ordering::Relaxed),
            1,
            "committed before the drain ended"
        );
        assert!(started.elapsed() < COMMIT_WAIT, "woken, not timed out");
        ack.join().unwrap();
    }

    #[test]
    fn the_window_keeps_what_some_replica_still_needs() {
        let replication =
            Replication::new(1, 1, PathBuf::new(), Shape::default(), Default::default());
        replication.set_follower("b", follower(0));
        replication.appended(0, vec![vec![1], vec![2], vec![3]]);
        replication.durable(3, Vec::new());
        replication.set_follower("b", follower(2));
        let inner = replication.lock();
        assert_eq!(inner.window_first, 2);
        assert_eq!(inner.window, VecDeque::from([vec![3]]));
    }

    #[test]
    fn this_epochs_entries_extend_the_start_shape() {
        let start = Shape {
            first: 0,
            next: 4,
            runs: vec![(0, 1), (2, 3)],
            last_epoch: 3,
        };
        let replication = Replication::new(5, 1, PathBuf::new(), start, Default::default());
        replication.appended(4, vec![vec![0], vec![0]]);
        let shape = replication.shape();
        assert_eq!(shape.runs, vec![(0, 1), (2, 3), (4, 5)]);
        assert_eq!((shape.next, shape.last_epoch), (6, 5));
    }
}
