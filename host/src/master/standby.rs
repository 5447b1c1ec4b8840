//! A warm standby: a copy of the master on a back-end node that does not
//! host it, kept up to date with every committed journal entry, so that
//! taking the master over starts from it instead of replaying the journal.
//!
//! # Why
//!
//! A node that takes the master over must bring a master to the state the
//! journal describes before it serves. From its newest snapshot that is a
//! replay of everything since: seconds at a million events (BENCHMARKS.md,
//! recovery), while every caller waits. And a follower that never snapshots
//! keeps its whole journal, on disk and to read at take-over.
//!
//! # How
//!
//! ```text
//! replication thread (follower) ──Follow::Committed{end, events}──▶ standby thread: apply
//!            ▲                                                          │ every `snapshot_every`
//!            └──────────────── standby_snapshot(index, state) ◀─────────┘ events: compact here
//! take-over: Started{warm: Some(at), events: entries from at} ──▶ promote(at) ──▶ the master
//! ```
//!
//! * The standby registers with [`Replication::follow`], which answers
//!   with what it starts from (this node's newest snapshot and the
//!   committed entries after it) and then hands it each committed entry, in
//!   order. Committed entries are never cut, whoever leads next, so the
//!   standby's state is the cluster's state at an index.
//! * Applying goes through the same [`Replayer`] as recovery and the
//!   master's shadow (build switches included), so the standby reaches the
//!   state recovery would.
//! * Every `snapshot_every` events it hands its state to replication, which
//!   compacts this node's journal under it exactly as under the master's
//!   snapshots: a follower's journal stays short, and a cold start of its
//!   master reads little.
//! * When this node leads, replication stops feeding the standby and
//!   reads only the entries from where the standby is
//!   ([`crate::replication::Started::warm`]); [`Standby::promote`] then
//!   hands the standby's master over (once it applied what it was
//!   handed), and the master replays just those entries.
//! * A standby that falls [`STANDBY_BATCHES_WAITING_MAX`] batches behind, fails
//!   (a trap, a refused event, a build this node lacks), or whose journal
//!   was replaced under it (the master sent a snapshot) ends; the node
//!   starts another ([`crate::node`]) from this node's journal. A take-over
//!   without a standby that kept up recovers from the journal as before.
//! * Cost: a copy of the master's state in memory on every back-end node,
//!   and applying every event once more per node. `cohort node --standby
//!   off` turns it off.
//!
//! [`STANDBY_BATCHES_WAITING_MAX`]: crate::limits::STANDBY_BATCHES_WAITING_MAX

use super::recovery::{Loaded, MasterOptions, Replayer, Warm};
use super::upgrade;
use crate::events::{self, emit};
use crate::limits::STANDBY_BATCHES_WAITING_MAX;
use crate::replication::{Follow, Replication};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use tokio::sync::oneshot;

enum Input {
    Follow(Follow),
    Promote(u64, oneshot::Sender<Result<Warm, String>>),
}

/// The node's side of its standby. Dropping it ends the standby.
pub struct Standby {
    tx: SyncSender<Input>,
    /// Set when the standby ended (or must).
    ended: Arc<AtomicBool>,
    /// The uploaded master builds it ended for lack of.
    missing: Arc<std::sync::Mutex<Vec<[u8; 32]>>>,
}

impl Standby {
    /// Starts a standby on a thread of its own: it registers with
    /// `replication`, recovers from this node's journal, then follows.
    /// `options.component` should hold the compiled master.
    pub fn start(options: MasterOptions, replication: Replication) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel(STANDBY_BATCHES_WAITING_MAX);
        let ended = Arc::new(AtomicBool::new(false));
        let follower = {
            let tx = tx.clone();
            let ended = ended.clone();
            Box::new(move |follow| {
                if ended.load(Ordering::Relaxed) {
                    return false;
                }
                match tx.try_send(Input::Follow(follow)) {
                    Ok(()) => true,
                    Err(TrySendError::Full(_)) => {
                        ended.store(true, Ordering::Relaxed);
                        emit!(
                            warn,
                            events::STANDBY_ENDED,
                            reason = %format!("it fell {STANDBY_BATCHES_WAITING_MAX} batches behind"),
                            "the warm standby ended"
                        );
                        false
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        ended.store(true, Ordering::Relaxed);
                        false
                    }
                }
            })
        };
        let flag = ended.clone();
        let missing = Arc::new(std::sync::Mutex::new(Vec::new()));
        let lacking = missing.clone();
        let spawned = std::thread::Builder::new()
            .name("cohort-standby".into())
            .spawn(move || {
                let result = run(&options, &replication, follower, rx, &flag, &lacking);
                flag.store(true, Ordering::Relaxed);
                if let Err(reason) = result {
                    emit!(
                        warn,
                        events::STANDBY_ENDED,
                        reason = %reason,
                        "the warm standby ended"
                    );
                }
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start the warm standby");
            ended.store(true, Ordering::Relaxed);
        }
        Self { tx, ended, missing }
    }

    /// The uploaded master builds this node lacks that the standby ended
    /// for (fetch them, then start another).
    pub fn missing_builds(&self) -> Vec<[u8; 32]> {
        self.missing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the standby is still following (or starting).
    pub fn running(&self) -> bool {
        !self.ended.load(Ordering::Relaxed)
    }

    /// The standby's master, once it applied everything it was handed,
    /// if that is everything before `at`. Ends the standby.
    pub async fn promote(self, at: u64) -> Result<Warm, String> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .try_send(Input::Promote(at, reply))
            .map_err(|_| "the standby ended".to_string())?;
        answer
            .await
            .unwrap_or_else(|_| Err("the standby ended".into()))
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        // Its thread ends at its next input; replication drops it at the
        // next entry it would hand over.
        self.ended.store(true, Ordering::Relaxed);
    }
}

fn run(
    options: &MasterOptions,
    replication: &Replication,
    follower: crate::replication::Follower,
    rx: Receiver<Input>,
    ended: &AtomicBool,
    missing: &std::sync::Mutex<Vec<[u8; 32]>>,
) -> Result<(), String> {
    let began = std::time::Instant::now();
    let plan = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(replication.follow(follower))?;
    let (snapshot, events) = plan.read().map_err(|e| e.to_string())?;
    let store = upgrade::MasterStore::new(&options.data_dir);
    // Builds this node lacks (it joined after an upgrade): the node
    // fetches them and starts another standby.
    let lacks = |snapshot: Option<&[u8]>, events: &[Vec<u8>]| -> Result<(), String> {
        let lacking: Vec<[u8; 32]> = upgrade::builds_needed(snapshot, events)
            .into_iter()
            .filter(|digest| !store.contains(digest))
            .collect();
        if lacking.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = lacking
            .iter()
            .map(|d| format!("sha256:{}", crate::runtime::Digest::from(*d)))
            .collect();
        *missing.lock().unwrap_or_else(|e| e.into_inner()) = lacking;
        Err(format!(
            "this node lacks the master build(s) {} (fetching them)",
            names.join(", ")
        ))
    };
    lacks(snapshot.as_ref().map(|s| s.state.as_slice()), &events)?;
    let mut replayer = Replayer::recover_with(options, Loaded::new(), snapshot.as_ref())
        .map_err(|e| e.to_string())?;
    replayer.replay(&events).map_err(|e| e.to_string())?;
    let mut at = plan.end();
    emit!(
        info,
        events::STANDBY_READY,
        index = at,
        snapshot = %snapshot
            .as_ref()
            .map_or("none".to_string(), |s| s.index.to_string()),
        events_replayed = events.len() as u64,
        took_ms = began.elapsed().as_millis() as u64,
        "the warm standby is up to date"
    );
    drop((snapshot, events));
    let every = options.snapshot_every.max(1);
    let mut since_snapshot = 0u64;
    while let Ok(input) = rx.recv() {
        match input {
            Input::Promote(want, reply) => {
                let warm = if want == at {
                    Ok(replayer.into_warm(at))
                } else {
                    Err(format!(
                        "the standby holds the journal up to {at}, not up to {want}"
                    ))
                };
                let _ = reply.send(warm);
                return Ok(());
            }
            _ if ended.load(Ordering::Relaxed) => return Ok(()),
            Input::Follow(Follow::Stopped(reason)) => return Err(reason),
            Input::Follow(Follow::Committed { end, events }) => {
                lacks(None, &events)?;
                replayer.replay(&events).map_err(|e| e.to_string())?;
                at = end;
                since_snapshot += events.len() as u64;
                if since_snapshot >= every {
                    since_snapshot = 0;
                    let state = replayer
                        .core
                        .snapshot()
                        .map_err(|e| format!("taking a snapshot: {e:#}"))?;
                    replication.standby_snapshot(at, upgrade::wrap_state(replayer.builds, state));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::core::{Core, NativeCore};
    use crate::master::testing::{decide, native_options};
    use crate::replication::testing::{cluster, commit, taken_over, until};
    use crate::replication::transport::MemNetwork;

    /// A follower's standby holds the master's state byte for byte, its
    /// snapshots compact the follower's journal, and when the follower
    /// takes over, the standby's master plus the entries read after it is
    /// the master's state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_standby_holds_the_masters_state_and_starts_the_next_master() {
        let network = MemNetwork::new();
        let (nodes, _) = cluster(&network, &["n0", "n1", "n2"]).await;
        let (leader, n1) = (&nodes[0].replication, &nodes[1].replication);
        let options = native_options(nodes[1].dir.path(), 40, false);
        let mut master = NativeCore::new(None).unwrap();
        commit(leader, decide(&mut master, 0, 30)).await.unwrap();

        let standby = Standby::start(options.clone(), n1.clone());
        for batch in 0..5 {
            let events = decide(&mut master, 30 + batch * 20, 20);
            commit(leader, events).await.unwrap();
        }
        // 130 submissions: the standby snapshotted n1's journal at least
        // twice.
        until("a snapshot on n1", || {
            crate::journal::durable::latest_snapshot(&options.data_dir)
                .unwrap()
                .is_some_and(|s| s.index > 80)
        })
        .await;
        assert!(standby.running());

        // n0 is gone; n1 takes over from its standby, with n2.
        network.cut("n0", "n1", true);
        network.cut("n0", "n2", true);
        let started = taken_over(n1).await;
        let at = started.warm.expect("a warm start");
        let warm = standby.promote(at).await.expect("promoted");
        let mut replayer = Replayer::resume(&options, warm);
        replayer.replay(&started.events.collect().unwrap()).unwrap();
        assert_eq!(
            replayer.core.snapshot().unwrap(),
            master.snapshot().unwrap()
        );
        // The whole read from disk (its snapshot and the rest) agrees.
        let (snapshot, events) = started.restore.read().unwrap();
        let mut cold = Replayer::recover(&options, snapshot.as_ref()).unwrap();
        cold.replay(&events).unwrap();
        assert_eq!(cold.core.snapshot().unwrap(), master.snapshot().unwrap());
    }

    /// A standby asked for another index than the one it holds refuses.
    #[tokio::test]
    async fn a_standby_refuses_a_promotion_to_another_index() {
        let network = MemNetwork::new();
        let (nodes, _) = cluster(&network, &["n0", "n1"]).await;
        let options = native_options(nodes[1].dir.path(), 1_000, false);
        let standby = Standby::start(options, nodes[1].replication.clone());
        let refused = standby.promote(1_000_000).await.unwrap_err();
        assert!(refused.contains("not up to 1000000"), "{refused}");
    }
}
