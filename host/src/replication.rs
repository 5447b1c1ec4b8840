//! Journal replication on this node: the driver of the replication core.
//!
//! The protocol itself (epochs and the fence, replication and commit,
//! take-over, hand-over, catch-up, step-down, the journaled voter set) is
//! the sans-IO state machine in the `cohort-replication` crate, checked by
//! its deterministic simulator. This module runs one instance of it per
//! back-end node, on a thread of its own ("cohort-replication"):
//!
//! ```text
//! master thread ──propose(events, completions)──▶ ┌──────────────────────┐ ──▶ Transport (sealed HTTP)
//! HTTP /internal/v1/replication ──deliver(msg)──▶ │ replication thread:  │
//! singleton: take_over / hand_over / members ───▶ │ Replicator<Journal-  │ ◀── ticks every 10 ms
//!                                                  │ Storage>             │
//! completions run once committed ◀──────────────── └──────────────────────┘
//! ```
//!
//! * **Liveness does not wait for the master.** Heartbeats, acknowledgements
//!   and claims are handled on this thread, never behind the master's
//!   command loop or a snapshot being written, so a busy master is not
//!   mistaken for a dead one (followers that hear it decline claims).
//! * **Nor for the disk, within bounds.** While this thread is held in one
//!   step (appending and syncing the journal on a stalled disk: 0.1–1 s
//!   were seen under load on a VM), a small "pulse" thread sends the leader's followers `Alive`
//!   every heartbeat, up to [`STALL_COVERED_MAX`]; a process that is
//!   paused, cut off or dead sends nothing, and one stuck longer is let go.
//!   `Alive` only keeps followers' leases (liveness); fencing by epoch
//!   keeps safety whatever they believe.
//! * **Group commit.** Every batch waiting when the thread wakes is
//!   appended, then one fsync covers them all; replicas receive them as one
//!   append each. The master thread decides the next batches meanwhile; at
//!   most [`BATCHES_IN_FLIGHT_MAX`] wait, beyond which the master waits for
//!   the disk.
//! * **Commit.** A batch's completions (replies, assignments, reads) run
//!   once the core reports its entries committed: durable on a majority of
//!   the voters. Batches not committed within [`COMMIT_WAIT`] fail with
//!   `replicas_unavailable` (the entries may still commit; clients retry
//!   with their idempotency key).
//! * **Snapshots** the master takes are compacted into the journal once
//!   the entries they cover are committed.
//! * **A warm standby** ([`Replication::follow`], `master::standby`): a
//!   follower hands every committed entry to a copy of the master kept
//!   up to date on its node, whose snapshots compact this node's journal
//!   too. When this node leads, its master starts from that copy and reads
//!   only the entries after it ([`Started::warm`]) instead of a snapshot
//!   and everything since.
//! * **A master with no host.** A node that leads (after a hand-over) but
//!   whose node never starts the master within `UNCLAIMED_MAX` (5 s) steps
//!   down, so the cluster is never held by a leader that serves nothing.
//!
//! Invariants, asserted in debug builds where the driver sees them: the
//! commit index it is told only grows; each epoch this node leads is above
//! every one it led before (no two masters share an epoch, and a node
//! claims above its own promise); waiting batches are in index order, so
//! completions run in the order the master decided them.
//!
//! [`STALL_COVERED_MAX`]: crate::limits::STALL_COVERED_MAX
//! [`BATCHES_IN_FLIGHT_MAX`]: crate::limits::BATCHES_IN_FLIGHT_MAX
//! [`COMMIT_WAIT`]: crate::limits::COMMIT_WAIT

pub mod journal_storage;
#[cfg(test)]
pub(crate) mod testing;
pub mod transport;

use crate::contract::MasterError;
use crate::events::{self, emit};
use crate::journal::durable::Snapshot as StoredSnapshot;
use crate::limits::{
    BATCHES_IN_FLIGHT_MAX, CLAIM_RETRY_MS, CLAIM_TIMEOUT_MS, COMMIT_WAIT, FOLLOW_BYTES_MAX,
    HANDOVER_CATCH_UP_MAX, HEARTBEAT_MS, INPUTS_PER_WAKE_MAX, LEASE_MS, QUORUM_SILENCE_MAX_MS,
    REPLICATION_REQUEST_TIMEOUT_MS, REPLICATION_TICK, STALL_COVERED_MAX, UNCLAIMED_MAX,
};
use cohort_replication::{
    Effect, Message, NodeId, Options, Output, Payload, ProposeError, Replicator, Snapshot,
    TakeOverError,
};
use journal_storage::JournalStorage;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
pub use transport::Transport;

/// Something to run once its batch is committed, or failed.
pub type Completion = Box<dyn FnOnce(Result<(), MasterError>) + Send>;

/// What a master starts from after this node took it over.
#[derive(Debug)]
pub struct Started {
    /// The epoch it runs with.
    pub epoch: u64,
    /// The newest snapshot of the master's state.
    pub snapshot: Option<StoredSnapshot>,
    /// The master's events after it, in order, as they are read.
    pub events: Events,
    /// The node whose journal was adopted, if another was ahead.
    pub adopted: Option<NodeId>,
    /// Set when this node's standby holds the state before this index:
    /// then `snapshot` is `None` and `events` are those from here on, to be
    /// applied to the standby's state ([`Replication::follow`]).
    pub warm: Option<u64>,
    /// The whole read (newest snapshot, events after it) up to the same
    /// end, for whoever needs the state from disk (the master's shadow
    /// after a warm start).
    pub restore: journal_storage::Restore,
}

/// The master's events after [`Started::snapshot`], in order, as the
/// restore thread reads them: a master replays the first chunks while the
/// rest are read (a million events take a quarter of a second to read and
/// over a second to replay).
#[derive(Debug)]
pub struct Events(Receiver<Chunk>);

#[derive(Debug)]
enum Chunk {
    Events(Vec<Vec<u8>>),
    End,
    Failed(String),
}

impl Events {
    /// Events already read, all of them.
    #[cfg(test)]
    pub fn ready(events: Vec<Vec<u8>>) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = tx.send(Chunk::Events(events));
        let _ = tx.send(Chunk::End);
        Self(rx)
    }

    /// The next chunk (waiting for it); `None` once all were handed. An
    /// error if the read failed or stopped before its end: the chunks
    /// handed so far are not the whole.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<Vec<u8>>>, String> {
        match self.0.recv() {
            Ok(Chunk::Events(events)) => Ok(Some(events)),
            Ok(Chunk::End) => Ok(None),
            Ok(Chunk::Failed(reason)) => Err(reason),
            Err(_) => Err("the journal's read stopped before its end".into()),
        }
    }

    /// All of them, once read.
    pub fn collect(mut self) -> Result<Vec<Vec<u8>>, String> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk()? {
            all.extend(chunk);
        }
        Ok(all)
    }
}

/// What a standby is handed ([`Replication::follow`]).
#[derive(Debug)]
pub enum Follow {
    /// The master's events of the committed entries up to `end`
    /// (exclusive), after everything handed before.
    Committed { end: u64, events: Vec<Vec<u8>> },
    /// Nothing more comes: the journal was replaced under the standby (a
    /// snapshot from the master), or could not be read.
    Stopped(String),
}

/// Takes what a standby is handed; `false` when it wants no more (then it
/// is dropped).
pub type Follower = Box<dyn FnMut(Follow) -> bool + Send>;

/// Why a node cannot be removed from the voters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RemoveVoterError {
    /// This node does not host the master (only the master changes voters).
    NotMaster,
    /// The node is not a voter.
    NotAVoter(NodeId),
    /// The node hosts the master: move the master first.
    MasterNode(NodeId),
}

impl std::fmt::Display for RemoveVoterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotMaster => f.write_str("this node does not host the master"),
            Self::NotAVoter(node) => write!(f, "{node} is not a voter"),
            Self::MasterNode(node) => write!(
                f,
                "{node} hosts the master: move it first (`cohort leave` on {node})"
            ),
        }
    }
}

/// How replication stands, as `/metrics` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicationStatus {
    /// The epoch this node leads, if it does.
    pub leading: Option<u64>,
    /// The voters.
    pub voters: Vec<NodeId>,
    /// Voters a commit needs (a majority, this node included).
    pub needed: usize,
    /// Voters that acknowledged an append lately (this node included).
    pub healthy: usize,
    /// Entries appended here but not committed.
    pub uncommitted: u64,
    /// Entries each other node lacks.
    pub behind: Vec<(NodeId, u64)>,
    /// Batches whose callers were told `replicas_unavailable`.
    pub unreplicated_batches: u64,
    /// Whether this node may host the master (a voter, or the first node).
    pub eligible: bool,
    /// Whether a majority of voters answered lately (leader only).
    pub quorum: bool,
    /// Journal fsyncs on this node, and the time they took.
    pub syncs: u64,
    pub sync_nanos: u64,
}

impl Input {
    /// What it is, for the stall warning.
    fn name(&self) -> &'static str {
        match self {
            Input::Deliver(..) => "deliver",
            Input::Propose(..) => "propose",
            Input::Snapshot(..) => "snapshot",
            Input::SnapshotMark(..) => "snapshot_mark",
            Input::SnapshotFilled(..) => "snapshot_filled",
            Input::SnapshotWritten(..) => "snapshot_written",
            Input::RestoreFailed(..) => "restore_failed",
            Input::Follow(..) => "follow",
            Input::StandbySnapshot(..) => "standby_snapshot",
            Input::Members(..) => "members",
            Input::TakeOver(..) => "take_over",
            Input::HandOver(..) => "hand_over",
            Input::StepDown(..) => "step_down",
            Input::RemoveVoter(..) => "remove_voter",
            Input::Flush(..) => "flush",
            #[cfg(test)]
            Input::Hold(..) => "hold",
        }
    }
}

enum Input {
    Deliver(NodeId, Message),
    Propose(Vec<Vec<u8>>, Vec<Completion>),
    Snapshot(Vec<u8>),
    /// A snapshot at the current end of the journal, its state to come
    /// ([`SnapshotSlot`]).
    SnapshotMark(u64),
    /// The state of a marked snapshot (`None`: there will be none).
    SnapshotFilled(u64, Option<Vec<u8>>),
    /// Reading the journal for this node's master of `epoch` failed: it
    /// was not started.
    RestoreFailed(u64),
    /// A standby to feed ([`Replication::follow`]).
    Follow(
        Follower,
        oneshot::Sender<Result<journal_storage::Restore, String>>,
    ),
    /// A standby's state after the entries before the index.
    StandbySnapshot(u64, Vec<u8>),
    /// The snapshot file `compact` had written on its own thread is
    /// durable (`None`: writing it failed).
    SnapshotWritten(Option<Snapshot>),
    Members(Vec<NodeId>),
    TakeOver(oneshot::Sender<Result<Started, String>>),
    HandOver(NodeId, oneshot::Sender<Result<(), String>>),
    StepDown(oneshot::Sender<()>),
    RemoveVoter(NodeId, oneshot::Sender<Result<(), RemoveVoterError>>),
    Flush(oneshot::Sender<()>),
    /// Holds the thread this long, as a stalled disk would (tests).
    #[cfg(test)]
    Hold(Duration),
}

/// What the pulse thread knows of the replication thread.
struct Pulse {
    base: Instant,
    /// Milliseconds from `base` to the end of the thread's last step.
    stepped_ms: std::sync::atomic::AtomicU64,
    /// The epoch this node leads and its followers, while it leads.
    leading: Mutex<Option<(u64, Vec<NodeId>)>>,
    stopped: std::sync::atomic::AtomicBool,
}

impl Pulse {
    /// The epoch this node leads and its followers, or `None`.
    fn lead(&self, leading: Option<(u64, Vec<NodeId>)>) {
        *self.leading.lock().unwrap_or_else(|e| e.into_inner()) = leading;
    }

    fn stepped(&self) {
        let ms = self.base.elapsed().as_millis() as u64;
        self.stepped_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends `Alive` for the leader's epoch to its followers every
    /// heartbeat while the replication thread is held in one step, for at
    /// most [`STALL_COVERED_MAX`].
    fn run(&self, transport: &dyn Transport) {
        let every = Duration::from_millis(HEARTBEAT_MS);
        while !self.stopped.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(every);
            let stepped = self.stepped_ms.load(std::sync::atomic::Ordering::Relaxed);
            let held = self
                .base
                .elapsed()
                .saturating_sub(Duration::from_millis(stepped));
            if held < every || held > STALL_COVERED_MAX {
                continue;
            }
            let leading = self.leading.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((epoch, followers)) = &*leading {
                for follower in followers {
                    transport.send(follower, Message::Alive { epoch: *epoch });
                }
            }
        }
    }
}

struct Shared {
    id: NodeId,
    tx: Mutex<Sender<Input>>,
    status: Mutex<ReplicationStatus>,
    superseded: watch::Sender<Option<u64>>,
    handed_over: watch::Sender<Option<NodeId>>,
    leader: watch::Sender<Leader>,
    in_flight: Mutex<usize>,
    drained: Condvar,
    /// Set when the journal failed: the master must stop.
    failed: std::sync::atomic::AtomicBool,
    /// The last [`SnapshotSlot`] id given out.
    slots: std::sync::atomic::AtomicU64,
}

/// A snapshot whose place in the journal is fixed when it is made (after
/// every event proposed so far) and whose state comes later, from another
/// thread ([`Replication::snapshot_slot`]). Dropped unfilled, the place is
/// forgotten.
pub struct SnapshotSlot {
    id: u64,
    shared: Arc<Shared>,
    filled: bool,
}

impl SnapshotSlot {
    /// The master's state after every event proposed before the slot was
    /// made.
    pub fn fill(mut self, state: Vec<u8>) {
        self.filled = true;
        self.send(Some(state));
    }

    fn send(&self, state: Option<Vec<u8>>) {
        let _ = self
            .shared
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Input::SnapshotFilled(self.id, state));
    }
}

impl Drop for SnapshotSlot {
    fn drop(&mut self) {
        if !self.filled {
            self.send(None);
        }
    }
}

impl std::fmt::Debug for SnapshotSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotSlot")
            .field("id", &self.id)
            .finish()
    }
}

/// This node's replication. Cheap to clone.
#[derive(Clone)]
pub struct Replication {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication")
            .field("id", &self.shared.id)
            .finish_non_exhaustive()
    }
}

/// Timings of the core for a real node.
pub fn options(id: &str, bootstrap: bool, voter_timeout: Option<Duration>) -> Options {
    Options {
        bootstrap,
        heartbeat_ms: HEARTBEAT_MS,
        request_timeout_ms: REPLICATION_REQUEST_TIMEOUT_MS,
        lease_ms: LEASE_MS,
        claim_timeout_ms: CLAIM_TIMEOUT_MS,
        retry_ms: CLAIM_RETRY_MS,
        voter_timeout_ms: voter_timeout.map(|t| t.as_millis() as u64),
        ..Options::new(id)
    }
}

impl Replication {
    /// Opens the journal in `dir` and starts the replication thread.
    pub fn start(
        options: Options,
        dir: &Path,
        transport: Arc<dyn Transport>,
    ) -> Result<Self, cohort_replication::StorageError> {
        let storage = JournalStorage::open(dir)?;
        if storage.torn_bytes > 0 {
            let bytes = storage.torn_bytes;
            emit!(
                warn,
                events::JOURNAL_TORN,
                bytes,
                "an unfinished write was cut from the journal's end"
            );
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            id: options.id.clone(),
            tx: Mutex::new(tx),
            status: Mutex::new(ReplicationStatus::default()),
            superseded: watch::channel(None).0,
            handed_over: watch::channel(None).0,
            leader: watch::channel(Leader::default()).0,
            in_flight: Mutex::new(0),
            drained: Condvar::new(),
            failed: std::sync::atomic::AtomicBool::new(false),
            slots: std::sync::atomic::AtomicU64::new(0),
        });
        let replicator = Replicator::new(options, storage);
        let pulse = Arc::new(Pulse {
            base: Instant::now(),
            stepped_ms: Default::default(),
            leading: Mutex::new(None),
            stopped: Default::default(),
        });
        {
            let pulse = pulse.clone();
            let transport = transport.clone();
            std::thread::Builder::new()
                .name("cohort-pulse".into())
                .spawn(move || pulse.run(transport.as_ref()))
                .map_err(|e| cohort_replication::StorageError(e.to_string()))?;
        }
        let driver = Driver {
            pulse,
            replicator,
            transport,
            shared: shared.clone(),
            rx,
            started: Instant::now(),
            pending: VecDeque::new(),
            takeovers: Vec::new(),
            handover: None,
            snapshots: VecDeque::new(),
            writing_snapshot: false,
            flushes: Vec::new(),
            claimed: false,
            leading_since: None,
            unreplicated: 0,
            commit_seen: 0,
            epoch_led: 0,
            standby: None,
        };
        std::thread::Builder::new()
            .name("cohort-replication".into())
            .spawn(move || driver.run())
            .map_err(|e| cohort_replication::StorageError(e.to_string()))?;
        Ok(Self { shared })
    }

    /// A master on its own: the journal in `dir`, no other node; it leads
    /// at once (starting the voter set with itself if there is none).
    pub async fn solo(dir: &Path) -> anyhow::Result<(Self, Started)> {
        let options = Options {
            bootstrap: true,
            ..options("solo", true, None)
        };
        let replication = Self::start(options, dir, Arc::new(transport::Nowhere))?;
        let started = replication
            .take_over()
            .await
            .map_err(|reason| anyhow::anyhow!("cannot start the master alone: {reason}"))?;
        Ok((replication, started))
    }

    fn send(&self, input: Input) -> bool {
        self.shared
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(input)
            .is_ok()
    }

    /// This node's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// A message from another node.
    pub fn deliver(&self, from: NodeId, message: Message) {
        self.send(Input::Deliver(from, message));
    }

    /// The back-end nodes in the membership view (this one included).
    pub fn set_members(&self, members: Vec<NodeId>) {
        self.send(Input::Members(members));
    }

    /// Appends the master's `events` and runs `completions` once they are
    /// committed (or failed). Blocks while [`BATCHES_IN_FLIGHT_MAX`]
    /// batches wait to be appended (call from the master's thread).
    pub fn propose(&self, events: Vec<Vec<u8>>, completions: Vec<Completion>) {
        {
            let mut in_flight = self
                .shared
                .in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            while *in_flight >= BATCHES_IN_FLIGHT_MAX {
                in_flight = self
                    .shared
                    .drained
                    .wait(in_flight)
                    .unwrap_or_else(|e| e.into_inner());
            }
            *in_flight += 1;
        }
        if !self.send(Input::Propose(events, completions)) {
            // The thread is gone; the completions were dropped with the
            // message, so their callers see the master as unavailable.
            tracing::error!("the replication thread stopped");
        }
    }

    /// Compacts the journal under `state`, the master's state after every
    /// event proposed so far, once those are committed.
    pub fn snapshot(&self, state: Vec<u8>) {
        self.send(Input::Snapshot(state));
    }

    /// A snapshot after every event proposed so far, its state to be
    /// filled in later (by the master's shadow, from another thread). The
    /// journal is compacted under it once it is filled and committed; a
    /// later snapshot that is both first makes it moot.
    pub fn snapshot_slot(&self) -> SnapshotSlot {
        let id = self
            .shared
            .slots
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        self.send(Input::SnapshotMark(id));
        SnapshotSlot {
            id,
            shared: self.shared.clone(),
            filled: false,
        }
    }

    /// Feeds `follower` every entry committed from now on, while this node
    /// does not lead; answers with what it starts from: the newest
    /// snapshot and the committed entries after it. The standby ends when
    /// `follower` returns `false` or is handed [`Follow::Stopped`], and
    /// when this node's master starts (from the standby's state, if it
    /// kept up: [`Started::warm`]). One standby at a time: a new one
    /// replaces the last.
    pub async fn follow(&self, follower: Follower) -> Result<journal_storage::Restore, String> {
        let (tx, rx) = oneshot::channel();
        if !self.send(Input::Follow(follower, tx)) {
            return Err("replication stopped".into());
        }
        rx.await
            .unwrap_or_else(|_| Err("replication stopped".into()))
    }

    /// A standby's state after the committed entries before `index`: the
    /// journal here is compacted under it, as under the master's.
    pub fn standby_snapshot(&self, index: u64, state: Vec<u8>) {
        self.send(Input::StandbySnapshot(index, state));
    }

    /// Waits until everything proposed so far is appended and synced here,
    /// and a snapshot file being written is durable.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.send(Input::Flush(tx)) {
            let _ = rx.await;
        }
    }

    /// Takes the master over (or reports the one this node already leads):
    /// `Err` says why not now.
    pub async fn take_over(&self) -> Result<Started, String> {
        let (tx, rx) = oneshot::channel();
        if !self.send(Input::TakeOver(tx)) {
            return Err("the replication thread stopped".into());
        }
        rx.await
            .unwrap_or_else(|_| Err("the replication thread stopped".into()))
    }

    /// Hands the master over to `to` once its journal caught up.
    pub async fn hand_over(&self, to: NodeId) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        if !self.send(Input::HandOver(to, tx)) {
            return Err("the replication thread stopped".into());
        }
        rx.await
            .unwrap_or_else(|_| Err("the replication thread stopped".into()))
    }

    /// Stops leading (the master stopped without a hand-over).
    pub async fn step_down(&self) {
        let (tx, rx) = oneshot::channel();
        if self.send(Input::StepDown(tx)) {
            let _ = rx.await;
        }
    }

    /// Removes `node` from the voters (the master's node only): the
    /// change is journaled once the ones before it are committed.
    pub async fn remove_voter(&self, node: NodeId) -> Result<(), RemoveVoterError> {
        let (tx, rx) = oneshot::channel();
        if !self.send(Input::RemoveVoter(node, tx)) {
            return Err(RemoveVoterError::NotMaster);
        }
        rx.await.unwrap_or(Err(RemoveVoterError::NotMaster))
    }

    /// The number of voters: what a blob's majority is counted against
    /// (the status's `voters`, without copying the status).
    pub fn voter_count(&self) -> usize {
        self.shared
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .voters
            .len()
    }

    /// How replication stands.
    pub fn status(&self) -> ReplicationStatus {
        self.shared
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the master may decide requests now: a majority of voters
    /// answered lately.
    pub fn ready(&self) -> Result<(), MasterError> {
        let status = self.status();
        if status.leading.is_none() {
            return Err(MasterError::Unavailable(
                "this node does not lead the journal".into(),
            ));
        }
        if !status.quorum {
            return Err(MasterError::Unreplicated(format!(
                "{} of the {} voters needed answer",
                status.healthy, status.needed
            )));
        }
        Ok(())
    }

    /// Whether the journal failed (the master must stop; a restart
    /// recovers from disk).
    pub fn failed(&self) -> bool {
        self.shared
            .failed
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Changes to the epoch that superseded this node's master.
    pub fn superseded(&self) -> watch::Receiver<Option<u64>> {
        self.shared.superseded.subscribe()
    }

    /// Changes to the node that handed the master over to this one.
    pub fn handed_over(&self) -> watch::Receiver<Option<NodeId>> {
        self.shared.handed_over.subscribe()
    }

    /// The master as replication sees it on this node: who leads, and
    /// whether it fell silent.
    pub fn leader(&self) -> watch::Receiver<Leader> {
        self.shared.leader.subscribe()
    }
}

/// The master as this node's replication sees it, faster than gossip: a
/// new master's claim reaches every voter before it serves, and a dead
/// one's heartbeats stop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leader {
    /// The node leading the journal and its epoch (this node, if it leads).
    pub node: Option<(NodeId, u64)>,
    /// The leader this follower has not heard from for [`silence_ms`]: its
    /// lease has lapsed on every follower that heard what this one heard.
    pub silent: Option<NodeId>,
}

/// How long a follower goes without hearing its master before it calls it
/// silent: the lease and one more heartbeat.
pub fn silence_ms(options: &Options) -> u64 {
    options.lease_ms.saturating_add(options.heartbeat_ms)
}

/// A hand-over waiting for its target to catch up: to whom, since when,
/// and who to tell.
type HandOver = (NodeId, Instant, oneshot::Sender<Result<(), String>>);

struct Driver {
    replicator: Replicator<JournalStorage>,
    transport: Arc<dyn Transport>,
    pulse: Arc<Pulse>,
    shared: Arc<Shared>,
    rx: Receiver<Input>,
    started: Instant,
    /// Batches appended, by the index after their last entry.
    pending: VecDeque<(u64, Instant, Vec<Completion>)>,
    takeovers: Vec<oneshot::Sender<Result<Started, String>>>,
    handover: Option<HandOver>,
    /// Snapshots waiting for their index to commit, and for their state
    /// if they came from a [`SnapshotSlot`]: `(index, slot id or 0, state)`.
    snapshots: VecDeque<(u64, u64, Option<Vec<u8>>)>,
    /// Whether a snapshot file is being written on its own thread.
    writing_snapshot: bool,
    /// Flushes waiting for that file.
    flushes: Vec<oneshot::Sender<()>>,
    /// Whether this node's master was started for the epoch it leads.
    claimed: bool,
    leading_since: Option<Instant>,
    unreplicated: u64,
    /// The highest commit index seen (for the invariant that it only grows).
    commit_seen: u64,
    /// The highest epoch this node led (each new one must be above it).
    epoch_led: u64,
    /// The standby being fed, and the index it has everything before.
    standby: Option<(u64, Follower)>,
}

impl Driver {
    fn now(&self) -> u64 {
        // Never 0: the core treats small times like any other.
        self.started.elapsed().as_millis() as u64 + 1_000_000
    }

    fn run(mut self) {
        let mut next_tick = Instant::now();
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            let first = match self.rx.recv_timeout(wait) {
                Ok(input) => Some(input),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            self.pulse.stepped();
            let pass = Instant::now();
            let mut slowest: (Duration, &str) = (Duration::ZERO, "");
            let mut events = Vec::new();
            let mut completions = Vec::new();
            let mut batches = 0;
            let mut next = first;
            let mut taken = 0;
            while let Some(input) = next.take().or_else(|| {
                taken += 1;
                // Bounded, so ticks keep their pace under a flood.
                (taken < INPUTS_PER_WAKE_MAX)
                    .then(|| self.rx.try_recv().ok())
                    .flatten()
            }) {
                match input {
                    Input::Propose(more, done) => {
                        events.extend(more);
                        completions.push(done);
                        batches += 1;
                        if batches >= BATCHES_IN_FLIGHT_MAX {
                            self.step(&mut slowest, "propose", |d| {
                                d.propose(&mut events, &mut completions, &mut batches)
                            });
                        }
                    }
                    other => {
                        // Everything proposed before goes first.
                        self.step(&mut slowest, "propose", |d| {
                            d.propose(&mut events, &mut completions, &mut batches)
                        });
                        self.step(&mut slowest, other.name(), |d| d.handle(other));
                    }
                }
            }
            self.step(&mut slowest, "propose", |d| {
                d.propose(&mut events, &mut completions, &mut batches)
            });
            self.step(&mut slowest, "follow", Self::feed_standby);
            if Instant::now() >= next_tick {
                self.step(&mut slowest, "tick", |d| {
                    let output = d.replicator.tick(d.now());
                    d.apply(output);
                    d.housekeeping();
                });
                next_tick = Instant::now() + REPLICATION_TICK;
            }
            self.publish();
            let busy = pass.elapsed();
            if busy.as_millis() >= u128::from(LEASE_MS) {
                tracing::warn!(
                    busy_ms = busy.as_millis() as u64,
                    slowest_ms = slowest.0.as_millis() as u64,
                    slowest = slowest.1,
                    "the replication thread was busy for longer than the lease (its pulse covers up to {STALL_COVERED_MAX:?})"
                );
            }
        }
        self.pulse
            .stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.fail_pending(MasterError::Unavailable("replication stopped".into()));
    }

    /// Runs one step of a pass: timed for the stall warning (`slowest`),
    /// and the pulse told it ended.
    fn step(
        &mut self,
        slowest: &mut (Duration, &'static str),
        what: &'static str,
        step: impl FnOnce(&mut Self),
    ) {
        let began = Instant::now();
        step(self);
        *slowest = (*slowest).max((began.elapsed(), what));
        self.pulse.stepped();
    }

    fn propose(
        &mut self,
        events: &mut Vec<Vec<u8>>,
        completions: &mut Vec<Vec<Completion>>,
        batches: &mut usize,
    ) {
        if *batches == 0 {
            return;
        }
        let done: Vec<Completion> = completions.drain(..).flatten().collect();
        let payloads = events.drain(..).map(Payload::Data).collect();
        {
            let mut in_flight = self
                .shared
                .in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *in_flight = in_flight.saturating_sub(*batches);
            self.shared.drained.notify_all();
        }
        *batches = 0;
        match self.replicator.propose(self.now(), payloads) {
            Ok((range, output)) => {
                debug_assert!(
                    self.pending
                        .back()
                        .is_none_or(|(end, ..)| *end <= range.end),
                    "batches are appended in index order"
                );
                self.pending.push_back((range.end, Instant::now(), done));
                self.apply(output);
                // A batch of reads only (no events) waits for nothing
                // but the batches before it.
                self.release();
            }
            Err(error) => {
                let error = match error {
                    ProposeError::NotLeader => {
                        MasterError::Unavailable("this node no longer leads the journal".into())
                    }
                    ProposeError::Storage(reason) => {
                        self.shared
                            .failed
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        MasterError::Unavailable(format!("the journal failed: {reason}"))
                    }
                };
                for completion in done {
                    completion(Err(error.clone()));
                }
            }
        }
    }

    fn handle(&mut self, input: Input) {
        let now = self.now();
        match input {
            Input::Deliver(from, message) => {
                let output = self.replicator.step(now, &from, message);
                self.apply(output);
            }
            Input::Propose(..) => unreachable!("batched by run"),
            Input::Snapshot(state) => {
                let index = self.replicator.storage().next_index();
                self.snapshots.push_back((index, 0, Some(state)));
                self.compact();
            }
            Input::SnapshotMark(slot) => {
                let index = self.replicator.storage().next_index();
                self.snapshots.push_back((index, slot, None));
            }
            Input::SnapshotFilled(slot, state) => {
                let position = self.snapshots.iter().position(|(_, id, _)| *id == slot);
                match (position, state) {
                    (Some(at), Some(state)) => self.snapshots[at].2 = Some(state),
                    (Some(at), None) => drop(self.snapshots.remove(at)),
                    // Cleared meanwhile (this node stepped down).
                    (None, _) => {}
                }
                self.compact();
            }
            Input::SnapshotWritten(snapshot) => self.snapshot_written(snapshot),
            Input::RestoreFailed(epoch) => {
                if self.replicator.leading() == Some(epoch) {
                    self.claimed = false;
                }
            }
            Input::Follow(follower, reply) => {
                if self.replicator.leading().is_some() {
                    let _ = reply.send(Err("this node leads".into()));
                    return;
                }
                // Committed entries only: they are never cut, whoever
                // leads next. A snapshot is committed by definition.
                let plan = self.replicator.storage().restore_plan();
                let from = self.commit().max(plan.first());
                let plan = plan.until(from);
                self.standby = Some((plan.end(), follower));
                let _ = reply.send(Ok(plan));
            }
            Input::StandbySnapshot(index, state) => {
                // Any standby's state at a committed index is the state
                // there (committed entries are the same on every node).
                if self.replicator.leading().is_none() && index <= self.commit() {
                    self.snapshots.push_back((index, 0, Some(state)));
                    self.compact();
                }
            }
            Input::Members(members) => {
                let output = self.replicator.set_members(now, members);
                self.apply(output);
            }
            Input::TakeOver(reply) => {
                if self.replicator.leading().is_some() {
                    self.start_master(None, vec![reply]);
                    return;
                }
                match self.replicator.take_over(now, false) {
                    Ok(output) => {
                        self.takeovers.push(reply);
                        self.apply(output);
                    }
                    Err(TakeOverError::Busy) => self.takeovers.push(reply),
                    Err(error) => {
                        let _ = reply.send(Err(error.to_string()));
                    }
                }
            }
            Input::HandOver(to, reply) => {
                if self.replicator.leading().is_none() {
                    let _ = reply.send(Err("this node does not lead".into()));
                    return;
                }
                self.handover = Some((to, Instant::now(), reply));
                self.try_hand_over();
            }
            Input::StepDown(reply) => {
                let output = self.replicator.step_down();
                self.apply(output);
                self.claimed = false;
                let _ = reply.send(());
            }
            Input::RemoveVoter(node, reply) => {
                let result = if self.replicator.leading().is_none() || !self.claimed {
                    Err(RemoveVoterError::NotMaster)
                } else if node == *self.replicator.id() {
                    Err(RemoveVoterError::MasterNode(node))
                } else if !self.replicator.voters().contains(&node) {
                    Err(RemoveVoterError::NotAVoter(node))
                } else {
                    tracing::info!(node = %node, "removing a voter, as asked");
                    self.replicator
                        .remove_voter(now, &node)
                        .map(|output| self.apply(output))
                        .map_err(|_| RemoveVoterError::NotMaster)
                };
                let _ = reply.send(result);
            }
            #[cfg(test)]
            Input::Hold(time) => std::thread::sleep(time),
            Input::Flush(reply) => {
                // A snapshot file being written is part of what a clean
                // stop leaves behind: answer once it is durable.
                if self.writing_snapshot {
                    self.flushes.push(reply);
                } else {
                    let _ = reply.send(());
                }
            }
        }
    }

    fn try_hand_over(&mut self) {
        let Some((to, since, _)) = &self.handover else {
            return;
        };
        let (to, since) = (to.clone(), *since);
        if self.replicator.caught_up(&to) {
            let (_, _, reply) = self.handover.take().expect("checked");
            match self.replicator.hand_over(&to) {
                Ok(output) => {
                    self.apply(output);
                    self.claimed = false;
                    tracing::debug!(to = %to, "handed the master over");
                    let _ = reply.send(Ok(()));
                }
                Err(_) => {
                    let _ = reply.send(Err("this node no longer leads".into()));
                }
            }
        } else if since.elapsed() > HANDOVER_CATCH_UP_MAX {
            let (_, _, reply) = self.handover.take().expect("checked");
            let _ = reply.send(Err(format!(
                "{to} did not catch up within {HANDOVER_CATCH_UP_MAX:?}"
            )));
        }
    }

    /// Hands a standby the entries committed since it was last fed (a
    /// bounded read: [`FOLLOW_BYTES_MAX`]), while this node follows. A
    /// standby the journal moved past (replaced by the master's snapshot)
    /// is stopped: it must start again from that snapshot.
    fn feed_standby(&mut self) {
        let Some((fed, _)) = &self.standby else {
            return;
        };
        let fed = *fed;
        let commit = self.commit();
        if self.replicator.leading().is_some() || fed >= commit {
            return;
        }
        let storage = self.replicator.storage();
        let first = cohort_replication::Storage::shape(storage).first;
        let read = if fed < first {
            Err(format!(
                "the journal here now starts at {first}, past the standby's {fed}"
            ))
        } else {
            cohort_replication::Storage::read(storage, fed, FOLLOW_BYTES_MAX)
                .map_err(|e| format!("cannot read the journal: {e}"))
                .and_then(|entries| match entries.first() {
                    Some(entry) if entry.index == fed => Ok(entries),
                    other => Err(format!(
                        "the journal read from {fed} starts at {:?}",
                        other.map(|e| e.index)
                    )),
                })
        };
        let (_, follower) = self.standby.as_mut().expect("checked");
        let entries = match read {
            Ok(entries) => entries,
            Err(reason) => {
                follower(Follow::Stopped(reason));
                self.standby = None;
                return;
            }
        };
        let mut end = fed;
        let mut events = Vec::new();
        for entry in entries.into_iter().take_while(|e| e.index < commit) {
            end = entry.index + 1;
            if let Payload::Data(event) = entry.payload {
                events.push(event);
            }
        }
        if follower(Follow::Committed { end, events }) {
            self.standby.as_mut().expect("checked").0 = end;
        } else {
            self.standby = None;
        }
    }

    /// Hands `replies` what this node's master starts from (the newest
    /// snapshot and the journal after it), read on a thread of its own: a
    /// million entries once took about a second, and a new leader that
    /// stops heartbeating that long is taken for dead by its followers (a
    /// soak saw take-overs cascade so). The first reply gets it once the
    /// snapshot is read, and the events as they are read ([`Events`]); the
    /// master is counted as started from here, unless the read fails
    /// ([`Input::RestoreFailed`]).
    fn start_master(
        &mut self,
        adopted: Option<NodeId>,
        replies: Vec<oneshot::Sender<Result<Started, String>>>,
    ) {
        let Some(epoch) = self.replicator.leading() else {
            for reply in replies {
                let _ = reply.send(Err("not leading".into()));
            }
            return;
        };
        let restore = self.replicator.storage().restore_plan();
        // A standby that kept up holds the state before `fed`: only the
        // entries from there are read (the journal still holds them).
        let warm = self
            .standby
            .take()
            .map(|(fed, _)| fed)
            .filter(|fed| (restore.first()..=restore.end()).contains(fed));
        let plan = match warm {
            Some(fed) => restore.clone().tail(fed),
            None => restore.clone(),
        };
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("cohort-restore".into())
            .spawn(move || {
                // The master is not started after all (the reason went
                // to whoever waits for it).
                let failed = || {
                    let _ = shared
                        .tx
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .send(Input::RestoreFailed(epoch));
                };
                let mut replies = replies.into_iter();
                let snapshot = match plan.read_snapshot() {
                    Ok(snapshot) => snapshot,
                    Err(error) => {
                        let reason = format!("cannot read the journal: {error}");
                        for reply in replies {
                            let _ = reply.send(Err(reason.clone()));
                        }
                        return failed();
                    }
                };
                // The first reply gets the master; its events follow
                // as they are read.
                let Some(first) = replies.next() else { return };
                // Not bounded by a count: it holds at most the planned
                // read, as one whole read did (a cold start keeps all of
                // it for its shadow anyway), and the reader never waits
                // for a master slow to start, so it is not left reading a
                // journal compacted meanwhile.
                let (tx, rx) = std::sync::mpsc::channel();
                let snapshot_index = snapshot.as_ref().map(|s| s.index);
                let _ = first.send(Ok(Started {
                    epoch,
                    snapshot,
                    events: Events(rx),
                    adopted,
                    warm,
                    restore,
                }));
                for other in replies {
                    let _ = other.send(Err("another take-over got the master".into()));
                }
                let read = plan.read_events(snapshot_index, |chunk| {
                    tx.send(Chunk::Events(chunk)).is_ok()
                });
                match read {
                    Ok(()) => {
                        let _ = tx.send(Chunk::End);
                    }
                    Err(error) => {
                        let reason = format!("cannot read the journal: {error}");
                        let _ = tx.send(Chunk::Failed(reason));
                        failed();
                    }
                }
            });
        self.claimed = spawned.is_ok();
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start reading the journal for the master");
        }
    }

    fn apply(&mut self, output: Output) {
        for (to, message) in output.sends {
            self.transport.send(&to, message);
        }
        if self.replicator.leading().is_none() {
            // Not even for the rest of this pass: a node that let go of
            // the master must not keep its followers' leases.
            self.pulse.lead(None);
        }
        for effect in output.effects {
            match effect {
                Effect::Leading { epoch, adopted } => {
                    debug_assert!(
                        epoch > self.epoch_led,
                        "led epoch {epoch} after epoch {}",
                        self.epoch_led
                    );
                    self.epoch_led = self.epoch_led.max(epoch);
                    emit!(
                        info,
                        events::LEADING,
                        epoch,
                        adopted = %adopted.as_deref().unwrap_or("none"),
                        "this node's journal leads"
                    );
                    self.leading_since = Some(Instant::now());
                    self.claimed = false;
                    let replies = std::mem::take(&mut self.takeovers);
                    if !replies.is_empty() {
                        self.start_master(adopted, replies);
                    }
                }
                Effect::TakeOverFailed { reason, .. } => {
                    tracing::debug!(%reason, "cannot take the master over yet");
                    for reply in std::mem::take(&mut self.takeovers) {
                        let _ = reply.send(Err(reason.to_string()));
                    }
                }
                Effect::SteppedDown { epoch, newer } => {
                    emit!(info, events::STEPPED_DOWN, epoch, newer, "stepped down");
                    self.leading_since = None;
                    self.claimed = false;
                    self.snapshots.clear();
                    if newer > epoch {
                        self.shared.superseded.send_replace(Some(newer));
                    }
                    self.fail_pending(MasterError::Unavailable(format!(
                        "the master of epoch {epoch} stepped down"
                    )));
                }
                Effect::Committed { .. } => {
                    self.release();
                    self.compact();
                }
                Effect::Voters { voters } => {
                    emit!(info, events::VOTERS_CHANGED, voters = ?voters, "the voter set changed")
                }
                Effect::HandedOver { from, epoch } => {
                    emit!(
                        info,
                        events::HANDOVER_RECEIVED,
                        from = %from,
                        epoch,
                        "the master is handed over to this node"
                    );
                    self.shared.handed_over.send_replace(Some(from));
                }
                Effect::Fault { reason } => emit!(
                    error,
                    events::REPLICATION_FAULT,
                    reason = reason.to_string().as_str(),
                    "replication fault"
                ),
            }
        }
    }

    /// Runs the completions of every committed batch, in order.
    fn release(&mut self) {
        let commit = self.commit();
        while self.pending.front().is_some_and(|(end, ..)| *end <= commit) {
            let (_, _, done) = self.pending.pop_front().expect("checked");
            for completion in done {
                completion(Ok(()));
            }
        }
    }

    /// The core's commit index, checked to only grow.
    fn commit(&mut self) -> u64 {
        let commit = self.replicator.commit();
        debug_assert!(
            commit >= self.commit_seen,
            "the commit index went back from {} to {commit}",
            self.commit_seen
        );
        self.commit_seen = self.commit_seen.max(commit);
        commit
    }

    /// Compacts the journal under the oldest snapshot whose index is
    /// committed (and whose state is in, for a slot). Its file (tens of MiB with a million jobs) is written and
    /// fsynced on a thread of its own, one at a time: written here, it held
    /// this thread 150-340 ms, long enough for the followers to find the
    /// master silent and take it over. The journal is compacted here once
    /// the file is durable ([`Input::SnapshotWritten`]), as before.
    fn compact(&mut self) {
        if self.writing_snapshot {
            return;
        }
        let commit = self.replicator.commit();
        while let Some((index, _, state)) = self.snapshots.front() {
            if *index > commit {
                return;
            }
            if state.is_none() {
                // Still being taken: wait for it, unless a later one is
                // ready and committed, which makes it moot.
                let later = self
                    .snapshots
                    .iter()
                    .any(|(index, _, state)| state.is_some() && *index <= commit);
                if !later {
                    return;
                }
                self.snapshots.pop_front();
                continue;
            }
            let (index, _, state) = self.snapshots.pop_front().expect("checked");
            let state = state.expect("checked");
            let shape = cohort_replication::Storage::shape(self.replicator.storage());
            let Some(epoch) = shape.epoch_at(index.saturating_sub(1)) else {
                continue;
            };
            let voters = self.replicator.storage().voters_before(index);
            let snapshot = Snapshot {
                index,
                epoch,
                voters,
                state,
            };
            let dir = self.replicator.storage().dir().to_path_buf();
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("cohort-snapshot".into())
                .spawn(move || {
                    crate::journal::durable::background_priority();
                    let input = match journal_storage::write_snapshot(&dir, &snapshot) {
                        Ok(()) => Input::SnapshotWritten(Some(snapshot)),
                        Err(error) => {
                            tracing::error!(%error, "cannot store a snapshot");
                            Input::SnapshotWritten(None)
                        }
                    };
                    let _ = shared
                        .tx
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .send(input);
                });
            match spawned {
                Ok(_) => self.writing_snapshot = true,
                Err(error) => tracing::error!(%error, "cannot start writing a snapshot"),
            }
            return;
        }
    }

    /// A snapshot file is durable: compacts the journal under it.
    fn snapshot_written(&mut self, snapshot: Option<Snapshot>) {
        self.writing_snapshot = false;
        if let Some(snapshot) = snapshot {
            self.replicator
                .storage_mut()
                .snapshot_written(snapshot.index);
            if let Err(error) = self.replicator.compact(snapshot) {
                tracing::error!(%error, "cannot compact the journal under a snapshot");
            }
        }
        self.compact();
        if !self.writing_snapshot {
            for reply in self.flushes.drain(..) {
                let _ = reply.send(());
            }
        }
    }

    fn fail_pending(&mut self, error: MasterError) {
        for (_, _, done) in self.pending.drain(..) {
            for completion in done {
                completion(Err(error.clone()));
            }
        }
    }

    fn housekeeping(&mut self) {
        // Batches not committed in time: their callers are told.
        while self
            .pending
            .front()
            .is_some_and(|(_, since, _)| since.elapsed() > COMMIT_WAIT)
        {
            let (_, _, done) = self.pending.pop_front().expect("checked");
            self.unreplicated += 1;
            for completion in done {
                completion(Err(MasterError::Unreplicated(format!(
                    "not committed by a majority of voters within {COMMIT_WAIT:?}"
                ))));
            }
        }
        self.try_hand_over();
        // Leading with no master to serve holds the cluster: let go.
        if self.replicator.leading().is_some()
            && !self.claimed
            && self.takeovers.is_empty()
            && self
                .leading_since
                .is_some_and(|since| since.elapsed() > UNCLAIMED_MAX)
        {
            emit!(
                warn,
                events::LEAD_ABANDONED,
                "leading without a master started; stepping down"
            );
            let output = self.replicator.step_down();
            self.apply(output);
        }
    }

    fn publish(&self) {
        let now = self.now();
        let leading = self.replicator.leading();
        let voters = self.replicator.voters();
        let storage = self.replicator.storage();
        let next = storage.next_index();
        let status = ReplicationStatus {
            leading,
            needed: voters.len() / 2 + 1,
            healthy: self.replicator.heard_voters(now, QUORUM_SILENCE_MAX_MS),
            uncommitted: next.saturating_sub(self.replicator.commit()),
            behind: self.replicator.lag(),
            unreplicated_batches: self.unreplicated,
            eligible: self.replicator.eligible(),
            quorum: self.replicator.quorum_heard(now, QUORUM_SILENCE_MAX_MS)
                || self.leading_since.is_some_and(|since| {
                    since.elapsed().as_millis() < QUORUM_SILENCE_MAX_MS as u128
                }),
            voters,
            syncs: storage.syncs,
            sync_nanos: storage.sync_nanos,
        };
        // The followers the pulse speaks to: those the leader replicates to.
        let followers = status.behind.iter().map(|(node, _)| node.clone()).collect();
        self.pulse.lead(leading.map(|epoch| (epoch, followers)));
        *self.shared.status.lock().unwrap_or_else(|e| e.into_inner()) = status;
        let leader = Leader {
            node: self
                .replicator
                .leader()
                .map(|(node, epoch)| (node.clone(), epoch)),
            silent: self
                .replicator
                .silent_leader(now, silence_ms(self.replicator.options()))
                .map(|(node, _)| node.clone()),
        };
        self.shared.leader.send_if_modified(|seen| {
            let changed = *seen != leader;
            if changed {
                *seen = leader;
            }
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{cluster, taken_over, until};
    use super::transport::MemNetwork;
    use super::*;

    /// Chunks arrive in order up to the end; a read that fails, or whose
    /// thread is gone before the end, is an error, never a short replay.
    #[test]
    fn events_end_only_when_the_read_says_so() {
        assert_eq!(
            Events::ready(vec![vec![1], vec![2]]).collect(),
            Ok(vec![vec![1], vec![2]])
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let mut events = Events(rx);
        tx.send(Chunk::Events(vec![vec![1]])).unwrap();
        tx.send(Chunk::Failed("disk".into())).unwrap();
        assert_eq!(events.next_chunk(), Ok(Some(vec![vec![1]])));
        assert_eq!(events.next_chunk(), Err("disk".into()));
        let (tx, rx) = std::sync::mpsc::channel();
        tx.send(Chunk::Events(vec![vec![1]])).unwrap();
        drop(tx);
        assert!(Events(rx).collect().is_err());
    }

    /// Proposes event `[1, event]` and waits for its commit.
    async fn commit(node: &Replication, event: u8) -> Result<(), MasterError> {
        testing::commit(node, vec![vec![1, event]]).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_nodes_elect_commit_and_fail_over_when_the_master_is_cut_off() {
        let network = MemNetwork::new();
        let (nodes, started) = cluster(&network, &["n0", "n1", "n2"]).await;
        assert_eq!(started.epoch, 1);
        assert!(started.events.collect().unwrap().is_empty());
        commit(&nodes[0].replication, 7).await.expect("committed");

        // n0 is cut off: n1 takes over once its lease on n0 ran out, with
        // n0's committed event in its journal.
        network.cut("n0", "n1", true);
        network.cut("n0", "n2", true);
        let mut superseded = nodes[0].replication.superseded();
        let started = taken_over(&nodes[1].replication).await;
        assert_eq!(started.epoch, 2);
        assert_eq!(started.events.collect().unwrap(), vec![vec![1, 7]]);
        // n0 cannot commit alone: its batch fails, it never commits.
        let lone = commit(&nodes[0].replication, 8).await;
        assert!(lone.is_err(), "{lone:?}");
        commit(&nodes[1].replication, 9).await.expect("n1 commits");
        // Healed, n0 learns it was superseded and follows n1.
        network.cut("n0", "n1", false);
        network.cut("n0", "n2", false);
        tokio::time::timeout(Duration::from_secs(20), superseded.changed())
            .await
            .expect("n0 learns it was superseded")
            .unwrap();
        assert_eq!(*superseded.borrow(), Some(2));
        until("n0 follows", || {
            nodes[0].replication.status().leading.is_none()
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hand_over_moves_the_master_with_everything_committed() {
        let network = MemNetwork::new();
        let (nodes, _) = cluster(&network, &["n0", "n1"]).await;
        for event in 0..10 {
            commit(&nodes[0].replication, event)
                .await
                .expect("committed");
        }
        let mut handed = nodes[1].replication.handed_over();
        nodes[0]
            .replication
            .hand_over("n1".into())
            .await
            .expect("handed over");
        tokio::time::timeout(Duration::from_secs(10), handed.changed())
            .await
            .expect("n1 hears of it")
            .unwrap();
        let started = nodes[1].replication.take_over().await.expect("n1 leads");
        assert_eq!(started.events.collect().unwrap().len(), 10);
        assert_eq!(started.epoch, 2);
    }

    /// A follower's standby gets what it starts from and then every
    /// committed event, in order; its snapshot compacts the follower's
    /// journal; and when that follower takes over, it reads only the
    /// entries after the standby's state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_standby_follows_commits_compacts_and_starts_the_next_master_warm() {
        let network = MemNetwork::new();
        let (nodes, _) = cluster(&network, &["n0", "n1", "n2"]).await;
        commit(&nodes[0].replication, 1).await.expect("committed");
        // The master's node has no standby.
        assert!(
            nodes[0]
                .replication
                .follow(Box::new(|_| true))
                .await
                .is_err()
        );

        let (tx, fed) = std::sync::mpsc::channel();
        let plan = nodes[1]
            .replication
            .follow(Box::new(move |follow| tx.send(follow).is_ok()))
            .await
            .expect("n1 follows");
        let (snapshot, mut events) = plan.read().unwrap();
        assert!(snapshot.is_none());
        for event in 2..=5 {
            commit(&nodes[0].replication, event)
                .await
                .expect("committed");
        }
        let mut at = plan.end();
        let deadline = Instant::now() + Duration::from_secs(20);
        while events.len() < 5 {
            let left = deadline.saturating_duration_since(Instant::now());
            match fed.recv_timeout(left).expect("fed in time") {
                Follow::Committed { end, events: more } => {
                    assert!(end > at, "{end} after {at}");
                    at = end;
                    events.extend(more);
                }
                Follow::Stopped(reason) => panic!("stopped: {reason}"),
            }
        }
        assert_eq!(events, (1..=5).map(|e| vec![1, e]).collect::<Vec<_>>());

        // Its snapshot compacts n1's journal.
        nodes[1]
            .replication
            .standby_snapshot(at, b"after 5".to_vec());
        let dir = nodes[1].dir.path().to_path_buf();
        until("n1 holds the standby's snapshot", || {
            crate::journal::durable::latest_snapshot(&dir)
                .unwrap()
                .is_some_and(|s| s.index == at)
        })
        .await;

        // n0 is cut off; n1 takes over from its standby's state.
        network.cut("n0", "n1", true);
        network.cut("n0", "n2", true);
        let started = taken_over(&nodes[1].replication).await;
        assert_eq!(started.warm, Some(at));
        assert!(started.snapshot.is_none());
        let events = started.events.collect().unwrap();
        assert!(events.is_empty(), "{events:?}");
        // The whole read is there for whoever needs it.
        let (snapshot, rest) = started.restore.read().unwrap();
        assert_eq!(snapshot.unwrap().state, b"after 5");
        assert!(rest.is_empty());
        // Leading, n1 feeds no standby.
        assert!(
            nodes[1]
                .replication
                .follow(Box::new(|_| true))
                .await
                .is_err()
        );
    }

    /// A leader whose replication thread is held (as by a stalled fsync)
    /// keeps its followers' leases through its pulse, for at most
    /// [`STALL_COVERED_MAX`]; past that, a follower may take over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_leader_keeps_its_lease_for_a_bounded_time() {
        let network = MemNetwork::new();
        let (nodes, _) = cluster(&network, &["n0", "n1", "n2"]).await;
        commit(&nodes[0].replication, 1).await.expect("committed");

        // Held 4 lease-lengths: the followers still hear it.
        let hold = Duration::from_millis(LEASE_MS * 4);
        nodes[0].replication.send(Input::Hold(hold));
        let held = Instant::now();
        while held.elapsed() < hold - Duration::from_millis(50) {
            for follower in &nodes[1..] {
                let silent = follower.replication.leader().borrow().silent.clone();
                assert_eq!(silent, None, "after {:?}", held.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let refused = nodes[1].replication.take_over().await.unwrap_err();
        assert!(refused.contains("alive"), "{refused}");
        commit(&nodes[0].replication, 2)
            .await
            .expect("n0 still leads");

        // Held past what the pulse covers: n1 takes the master over.
        nodes[0]
            .replication
            .send(Input::Hold(STALL_COVERED_MAX + Duration::from_secs(2)));
        let held = Instant::now();
        let started = taken_over(&nodes[1].replication).await;
        assert!(held.elapsed() >= STALL_COVERED_MAX, "{:?}", held.elapsed());
        assert_eq!(
            started.events.collect().unwrap(),
            vec![vec![1, 1], vec![1, 2]]
        );
    }

    #[tokio::test]
    async fn a_solo_master_commits_on_its_own_fsync_and_restarts_from_its_journal() {
        let dir = tempfile::tempdir().unwrap();
        let (replication, started) = Replication::solo(dir.path()).await.unwrap();
        assert_eq!(started.epoch, 1);
        commit(&replication, 1).await.unwrap();
        replication.snapshot(b"state".to_vec());
        commit(&replication, 2).await.unwrap();
        replication.flush().await;
        drop(replication);
        // The thread lets go of the journal when the last handle is gone.
        let started = loop {
            match Replication::solo(dir.path()).await {
                Ok((_, started)) => break started,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        assert_eq!(started.epoch, 2);
        assert_eq!(started.snapshot.unwrap().state, b"state");
        assert_eq!(started.events.collect().unwrap(), vec![vec![1, 2]]);
    }

    /// Snapshots whose state comes later ([`SnapshotSlot`]) compact the
    /// journal at the place they were made; one still unfilled when a
    /// later one is ready is moot, and a slot dropped unfilled is
    /// forgotten.
    #[tokio::test]
    async fn slots_compact_where_they_were_made_and_late_ones_are_moot() {
        let dir = tempfile::tempdir().unwrap();
        let (replication, _) = Replication::solo(dir.path()).await.unwrap();
        commit(&replication, 1).await.unwrap();
        let early = replication.snapshot_slot();
        commit(&replication, 2).await.unwrap();
        let later = replication.snapshot_slot();
        commit(&replication, 3).await.unwrap();
        drop(replication.snapshot_slot());
        later.fill(b"after 2".to_vec());
        replication.flush().await;
        let newest = || {
            crate::journal::durable::latest_snapshot(dir.path())
                .unwrap()
                .expect("a snapshot")
        };
        // The later one did not wait for the earlier one.
        assert!(newest().state.ends_with(b"after 2"));
        // Too late: the journal is compacted under a later state.
        early.fill(b"after 1".to_vec());
        replication.flush().await;
        assert!(newest().state.ends_with(b"after 2"));
        drop(replication);
        let started = loop {
            match Replication::solo(dir.path()).await {
                Ok((_, started)) => break started,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        assert_eq!(started.snapshot.unwrap().state, b"after 2");
        assert_eq!(started.events.collect().unwrap(), vec![vec![1, 3]]);
    }
}
