//! This back-end node's copy of the master's journal, and the epoch fence.
//!
//! Every back-end node keeps a replica of the journal in its data directory
//! (the same files its own master uses when it hosts). The master's
//! replication (`master::replicate`) sends it entries, and a new master
//! gathers journal tails from replicas; both go through [`Replica::handle`]
//! (`POST /internal/v1/replica`, postcard [`ReplicaRequest`]s).
//!
//! # The fence
//!
//! Every request carries the sender's master epoch. The replica keeps a
//! durable **promise**: the highest epoch it has accepted. A request below
//! the promise is refused with [`ReplicaResponse::Fenced`], so once a new
//! master has fenced a replica, the old master can no longer count it
//! towards a commit: the old master can commit nothing more, and learns
//! that it was superseded. The promise is fsynced before the answer. A new
//! master *claims* its epoch: a claim must be strictly above the promise,
//! so two nodes can never both run with the same epoch.
//!
//! # Appends
//!
//! An append carries entries from some index with the epoch that wrote
//! each. Entries the replica already holds with the same epoch are skipped
//! (a resend); at the first difference the replica's tail is dropped
//! (it was written by an old master and never committed) and the master's
//! entries take its place. Dropping an entry at or below the commit index
//! the master told this replica about would lose acknowledged work: that
//! is refused and logged loudly, never done. The replica fsyncs before it
//! answers with its journal's [`Shape`], which is the acknowledgement.
//!
//! While this node hosts the master itself the journal belongs to the
//! master service: requests from lower epochs are fenced, and one from a
//! higher epoch means another node has taken the master over, so this
//! node's master must step down ([`Replica::superseded`]).

use crate::journal::{Entry, FsStorage, Journal, Shape};
use crate::master::store::{self, Snapshot};
use crate::peer::Peer;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The internal route replicas answer on.
pub const REPLICA_PATH: &str = "/internal/v1/replica";
/// Largest replica request accepted (a snapshot of the master's state).
pub const REPLICA_BYTES_MAX: usize = 1 << 30;

/// What a master (or a node taking the master over) asks of a replica.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ReplicaRequest {
    /// Refuse every epoch below `epoch` from now on; answer the journal's
    /// shape.
    Fence {
        /// The sender's epoch.
        epoch: u64,
        /// A new master claiming `epoch`: refused unless `epoch` is above
        /// every epoch promised so far, so no two masters ever share one.
        /// (A running master re-fencing a replica does not claim.)
        claim: bool,
    },
    /// Entries from index `first` on, each with the epoch that wrote it.
    Append {
        /// The sender's epoch.
        epoch: u64,
        /// Index of the first entry.
        first: u64,
        /// `(epoch, data)` of each entry.
        entries: Vec<(u64, Vec<u8>)>,
        /// Entries below this index are committed (never to be dropped).
        commit: u64,
    },
    /// Take this snapshot (the replica lacks the entries it covers, or may
    /// compact them).
    Install {
        /// The sender's epoch.
        epoch: u64,
        /// The snapshot.
        snapshot: Snapshot,
    },
    /// Entries from `from` on, at most about `bytes_max` of data; or the
    /// newest snapshot if entries from `from` were compacted.
    Read {
        /// The sender's epoch.
        epoch: u64,
        /// First index wanted.
        from: u64,
        /// Data budget.
        bytes_max: u64,
    },
}

impl ReplicaRequest {
    fn epoch(&self) -> u64 {
        match self {
            Self::Fence { epoch, .. }
            | Self::Append { epoch, .. }
            | Self::Install { epoch, .. }
            | Self::Read { epoch, .. } => *epoch,
        }
    }
}

/// A replica's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ReplicaResponse {
    /// Done; the journal now holds this (durably).
    Shape(Shape),
    /// Entries read.
    Entries(Vec<Entry>),
    /// The entries asked for were compacted: start from this snapshot.
    Snapshot(Snapshot),
    /// The sender's epoch is below the one promised.
    Fenced {
        /// The promise.
        promised: u64,
    },
    /// Not now (this node is stepping down from hosting the master); retry.
    Busy(String),
    /// Refused: doing it would lose committed entries or the storage failed.
    Refused(String),
}

struct State {
    /// Open while this node does not host the master.
    journal: Option<Journal<FsStorage>>,
    promise: u64,
    /// The highest commit index a master told this replica.
    commit: u64,
    /// This node's own master epoch while it hosts the master.
    hosting: Option<u64>,
}

/// This node's replica. See the module docs.
pub struct Replica {
    data_dir: PathBuf,
    state: Mutex<State>,
    superseded: watch::Sender<u64>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

impl Replica {
    /// The replica in `data_dir` (its journal opens on first use).
    pub fn open(data_dir: PathBuf) -> Result<Arc<Self>, store::StoreError> {
        let promise = store::read_promise(&data_dir)?;
        Ok(Arc::new(Self {
            data_dir,
            state: Mutex::new(State {
                journal: None,
                promise,
                commit: 0,
                hosting: None,
            }),
            superseded: watch::channel(0).0,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The epoch promised (the highest accepted).
    pub fn promise(&self) -> u64 {
        self.lock().promise
    }

    /// Changes to a higher epoch than this node's own master's when another
    /// node's master reaches this replica: this node's master must step
    /// down.
    pub fn superseded(&self) -> watch::Receiver<u64> {
        self.superseded.subscribe()
    }

    /// Records that this node's master was refused for `epoch` elsewhere.
    pub fn note_superseded(&self, epoch: u64) {
        self.superseded.send_if_modified(|newest| {
            let newer = epoch > *newest;
            *newest = (*newest).max(epoch);
            newer
        });
    }

    /// Hands the journal to this node's master, which runs with `epoch`.
    pub fn host(&self, epoch: u64) -> Result<(), store::StoreError> {
        let mut state = self.lock();
        state.journal = None;
        state.hosting = Some(epoch);
        if epoch > state.promise {
            store::write_promise(&self.data_dir, epoch)?;
            state.promise = epoch;
        }
        Ok(())
    }

    /// Takes the journal back once this node's master has stopped writing.
    pub fn unhost(&self) {
        self.lock().hosting = None;
    }

    /// Serves one request (blocking: it writes and fsyncs).
    pub fn handle(&self, request: ReplicaRequest) -> ReplicaResponse {
        let mut state = self.lock();
        let epoch = request.epoch();
        let claim = matches!(request, ReplicaRequest::Fence { claim: true, .. });
        if epoch < state.promise || (claim && epoch == state.promise) {
            return ReplicaResponse::Fenced {
                promised: state.promise,
            };
        }
        if let Some(own) = state.hosting {
            if epoch > own {
                self.note_superseded(epoch);
                return ReplicaResponse::Busy(format!(
                    "this node's master (epoch {own}) is stepping down"
                ));
            }
            return ReplicaResponse::Fenced { promised: own };
        }
        match self.serve(&mut state, request) {
            Ok(response) => response,
            Err(error) => {
                // Reopen from disk next time rather than trust this handle.
                state.journal = None;
                ReplicaResponse::Refused(format!("{error:#}"))
            }
        }
    }

    fn serve(&self, state: &mut State, request: ReplicaRequest) -> anyhow::Result<ReplicaResponse> {
        let epoch = request.epoch();
        if epoch > state.promise {
            store::write_promise(&self.data_dir, epoch)?;
            state.promise = epoch;
        }
        if state.journal.is_none() {
            let (journal, recovered) = store::open_journal(&self.data_dir)?;
            if recovered.torn_bytes > 0 {
                eprintln!(
                    "journal: {} bytes of an unfinished write cut from the journal's end",
                    recovered.torn_bytes
                );
            }
            state.journal = Some(journal);
        }
        let journal = state.journal.as_mut().expect("opened above");
        Ok(match request {
            ReplicaRequest::Fence { .. } => ReplicaResponse::Shape(journal.shape()),
            ReplicaRequest::Append {
                first,
                entries,
                commit,
                ..
            } => {
                let shape = journal.shape();
                if first > shape.next || first < shape.first {
                    // A gap, or entries this journal compacted: the master
                    // works out what to send from the shape.
                    return Ok(ReplicaResponse::Shape(shape));
                }
                // Skip what is already here, cut at the first difference.
                let mut index = first;
                let mut entries = entries.into_iter().peekable();
                while let Some((entry_epoch, _)) = entries.peek() {
                    if shape.epoch_at(index) != Some(*entry_epoch) {
                        break;
                    }
                    entries.next();
                    index += 1;
                }
                if index < shape.next && entries.peek().is_some() {
                    if index < state.commit {
                        let reason = format!(
                            "refusing to drop committed entries from {index} (committed below {})",
                            state.commit
                        );
                        tracing::error!("replica: {reason}");
                        return Ok(ReplicaResponse::Refused(reason));
                    }
                    store::truncate_journal(&self.data_dir, journal, index)?;
                    if journal.next_index() != index {
                        return Ok(ReplicaResponse::Shape(journal.shape()));
                    }
                }
                for (entry_epoch, data) in entries {
                    journal.append(entry_epoch, &data)?;
                }
                let syncing = std::time::Instant::now();
                journal.sync()?;
                if syncing.elapsed() > crate::journal::SLOW_SYNC {
                    tracing::info!("replica: a journal fsync took {:.1?}", syncing.elapsed());
                }
                let shape = journal.shape();
                state.commit = state.commit.max(commit.min(shape.next));
                ReplicaResponse::Shape(shape)
            }
            ReplicaRequest::Install { snapshot, .. } => {
                store::install_snapshot(&self.data_dir, journal, &snapshot)?;
                ReplicaResponse::Shape(journal.shape())
            }
            ReplicaRequest::Read {
                from, bytes_max, ..
            } => {
                let shape = journal.shape();
                if from < shape.first {
                    match store::latest_snapshot(&self.data_dir)? {
                        Some(snapshot) => ReplicaResponse::Snapshot(snapshot),
                        None => ReplicaResponse::Refused(format!(
                            "entries from {from} are compacted and no snapshot is here"
                        )),
                    }
                } else {
                    ReplicaResponse::Entries(journal.read_from(from, bytes_max as usize)?)
                }
            }
        })
    }

    /// Serves a request from the network (postcard in, postcard out).
    pub async fn serve_wire(self: &Arc<Self>, body: &[u8]) -> Vec<u8> {
        let response = match cohort_master::decode::<ReplicaRequest>(body) {
            Ok(request) => self.call_local(request).await,
            Err(rejection) => ReplicaResponse::Refused(rejection.to_string()),
        };
        cohort_master::encode(&response)
    }

    /// Serves a request from this node itself.
    pub async fn call_local(self: &Arc<Self>, request: ReplicaRequest) -> ReplicaResponse {
        let replica = self.clone();
        tokio::task::spawn_blocking(move || replica.handle(request))
            .await
            .unwrap_or_else(|e| ReplicaResponse::Refused(e.to_string()))
    }
}

/// Sends `request` to the replica at `url` (a node's HTTP base URL).
pub async fn call(
    peer: &Peer,
    url: &str,
    request: &ReplicaRequest,
    timeout: Duration,
) -> Result<ReplicaResponse, String> {
    let body = peer
        .post_postcard(&format!("{url}{REPLICA_PATH}"), request, timeout)
        .await
        .map_err(|e| e.message)?;
    cohort_master::decode(&body).map_err(|r| format!("{url}: {r}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(response: ReplicaResponse) -> Shape {
        match response {
            ReplicaResponse::Shape(shape) => shape,
            other => panic!("expected a shape, got {other:?}"),
        }
    }

    fn append(epoch: u64, first: u64, epochs: &[u64], commit: u64) -> ReplicaRequest {
        ReplicaRequest::Append {
            epoch,
            first,
            entries: epochs.iter().map(|&e| (e, vec![e as u8])).collect(),
            commit,
        }
    }

    #[test]
    fn a_fence_refuses_older_epochs_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let replica = Replica::open(dir.path().into()).unwrap();
        assert_eq!(shape(replica.handle(append(1, 0, &[1, 1], 0))).next, 2);
        shape(replica.handle(ReplicaRequest::Fence {
            epoch: 3,
            claim: true,
        }));
        // Nobody else may claim epoch 3 now; its holder may re-fence.
        assert!(matches!(
            replica.handle(ReplicaRequest::Fence {
                epoch: 3,
                claim: true
            }),
            ReplicaResponse::Fenced { promised: 3 }
        ));
        shape(replica.handle(ReplicaRequest::Fence {
            epoch: 3,
            claim: false,
        }));
        assert!(matches!(
            replica.handle(append(2, 2, &[2], 0)),
            ReplicaResponse::Fenced { promised: 3 }
        ));
        drop(replica);
        let replica = Replica::open(dir.path().into()).unwrap();
        assert_eq!(replica.promise(), 3);
        assert!(matches!(
            replica.handle(append(1, 2, &[1], 0)),
            ReplicaResponse::Fenced { promised: 3 }
        ));
    }

    #[test]
    fn an_uncommitted_divergent_tail_is_replaced_and_a_committed_one_never() {
        let dir = tempfile::tempdir().unwrap();
        let replica = Replica::open(dir.path().into()).unwrap();
        // Epoch 1 wrote 3 entries, 2 of them committed; epoch 2 wrote 2
        // more that nobody else has.
        shape(replica.handle(append(1, 0, &[1, 1, 1], 2)));
        shape(replica.handle(append(2, 3, &[2, 2], 2)));
        // Epoch 3 took over from a journal ending at entry 2 (epoch 1) and
        // wrote its own entry 3: the resend of 0..3 is skipped, 3.. is cut.
        let after = shape(replica.handle(append(3, 0, &[1, 1, 1, 3], 3)));
        assert_eq!(after.runs, vec![(0, 1), (3, 3)]);
        assert_eq!(after.next, 4);
        // Nothing may cut below the commit index (3 now).
        let refused = replica.handle(append(4, 2, &[4], 0));
        assert!(
            matches!(refused, ReplicaResponse::Refused(_)),
            "{refused:?}"
        );
        // A gap is answered with the shape, nothing written.
        assert_eq!(shape(replica.handle(append(4, 9, &[4], 0))).next, 4);
    }

    #[test]
    fn reads_fall_back_to_the_snapshot_below_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let replica = Replica::open(dir.path().into()).unwrap();
        shape(replica.handle(append(1, 0, &[1, 1], 0)));
        let snapshot = Snapshot {
            index: 10,
            epoch: 1,
            state: b"s".to_vec(),
        };
        let installed = shape(replica.handle(ReplicaRequest::Install { epoch: 1, snapshot }));
        assert_eq!((installed.first, installed.next), (10, 10));
        let read = |from| {
            replica.handle(ReplicaRequest::Read {
                epoch: 1,
                from,
                bytes_max: 1 << 20,
            })
        };
        assert!(matches!(read(3), ReplicaResponse::Snapshot(s) if s.index == 10));
        shape(replica.handle(append(1, 10, &[1, 1], 0)));
        assert!(matches!(read(10), ReplicaResponse::Entries(e) if e.len() == 2));
    }

    #[test]
    fn a_hosting_replica_fences_and_notices_a_newer_master() {
        let dir = tempfile::tempdir().unwrap();
        let replica = Replica::open(dir.path().into()).unwrap();
        replica.host(5).unwrap();
        let fence = |epoch| ReplicaRequest::Fence { epoch, claim: true };
        assert!(matches!(
            replica.handle(fence(5)),
            ReplicaResponse::Fenced { promised: 5 }
        ));
        let superseded = replica.superseded();
        assert!(matches!(replica.handle(fence(6)), ReplicaResponse::Busy(_)));
        assert_eq!(*superseded.borrow(), 6);
        replica.unhost();
        shape(replica.handle(fence(6)));
    }
}

#[cfg(test)]
mod properties {
    //! A replica serves whatever requests decode from the network: any
    //! sequence of them is answered without a panic, the promise never goes
    //! back, and the journal left behind opens again (a request can be
    //! refused, never leave the replica unable to restart). Each case
    //! fsyncs, so a few dozen run inside `cargo test`. Long run:
    //! `PROPTEST_CASES=5000 cargo test -p cohort --lib cluster::replica`.
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Small (so requests meet the journal's real indexes), or at the end
    /// of the range.
    fn n64() -> BoxedStrategy<u64> {
        prop_oneof![8 => 0..6u64, 1 => Just(u64::MAX), 1 => Just(u64::MAX - 1), 1 => any::<u64>()]
            .boxed()
    }

    fn request() -> impl Strategy<Value = ReplicaRequest> {
        let epoch = || 0..4u64;
        prop_oneof![
            1 => (epoch(), any::<bool>())
                .prop_map(|(epoch, claim)| ReplicaRequest::Fence { epoch, claim }),
            3 => (epoch(), n64(), vec((epoch(), vec(any::<u8>(), 0..4)), 0..4), n64()).prop_map(
                |(epoch, first, entries, commit)| ReplicaRequest::Append {
                    epoch,
                    first,
                    entries,
                    commit,
                }
            ),
            1 => (epoch(), n64(), epoch(), vec(any::<u8>(), 0..4)).prop_map(
                |(epoch, index, snapshot_epoch, state)| ReplicaRequest::Install {
                    epoch,
                    snapshot: Snapshot {
                        index,
                        epoch: snapshot_epoch,
                        state,
                    },
                }
            ),
            1 => (epoch(), n64(), n64()).prop_map(|(epoch, from, bytes_max)| {
                ReplicaRequest::Read {
                    epoch,
                    from,
                    bytes_max,
                }
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn any_requests_are_served_and_the_journal_still_opens(
            requests in vec(request(), 1..8),
        ) {
            let dir = tempfile::tempdir()?;
            let replica = Replica::open(dir.path().into())?;
            let mut promise = 0;
            for request in requests {
                replica.handle(request);
                prop_assert!(replica.promise() >= promise);
                promise = replica.promise();
            }
            drop(replica);
            prop_assert!(store::open_journal(dir.path()).is_ok());
            prop_assert_eq!(Replica::open(dir.path().into())?.promise(), promise);
        }
    }

    /// Found by `any_requests_are_served_...`: a snapshot at the last index
    /// a `u64` names, then an entry after it, overflowed the journal.
    #[test]
    fn an_append_after_a_snapshot_at_the_last_index_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let replica = Replica::open(dir.path().into()).unwrap();
        let snapshot = Snapshot {
            index: u64::MAX,
            epoch: 0,
            state: Vec::new(),
        };
        replica.handle(ReplicaRequest::Install { epoch: 0, snapshot });
        let append = ReplicaRequest::Append {
            epoch: 0,
            first: u64::MAX,
            entries: vec![(0, Vec::new())],
            commit: 0,
        };
        assert!(matches!(
            replica.handle(append),
            ReplicaResponse::Refused(_)
        ));
        drop(replica);
        assert!(store::open_journal(dir.path()).is_ok());
    }
}
