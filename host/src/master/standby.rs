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
//! * A standby that falls [`BATCHES_WAITING_MAX`] batches behind, fails
//!   (a trap, a refused event, a build this node lacks), or whose journal
//!   was replaced under it (the master sent a snapshot) ends; the node
//!   starts another ([`crate::node`]) from this node's journal. A take-over
//!   without a standby that kept up recovers from the journal as before.
//! * Cost: a copy of the master's state in memory on every back-end node,
//!   and applying every event once more per node. `cohort node --standby
//!   off` turns it off.

use super::service::{Loaded, MasterOptions, Replayer, Warm};
use super::upgrade;
use crate::events::{self, emit};
use crate::replication::{Follow, Replication};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use tokio::sync::oneshot;

/// Batches waiting for the standby at most; beyond, it is given up. A
/// follower hands over committed entries about once per replication
/// wake-up, so this is minutes of a busy cluster.
const BATCHES_WAITING_MAX: usize = 65_536;

enum Input {
    Follow(Follow),
    Promote(u64, oneshot::Sender<Result<Warm, String>>),
}

/// The node's side of its standby. Dropping it ends the standby.
pub struct Standby {
    tx: SyncSender<Input>,
    /// Set when the standby ended (or must).
    ended: Arc<AtomicBool>,
}

impl Standby {
    /// Starts a standby on a thread of its own: it registers with
    /// `replication`, recovers from this node's journal, then follows.
    /// `options.component` should hold the compiled master.
    pub fn start(options: MasterOptions, replication: Replication) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel(BATCHES_WAITING_MAX);
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
                            reason = %format!("it fell {BATCHES_WAITING_MAX} batches behind"),
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
        let spawned = std::thread::Builder::new()
            .name("cohort-standby".into())
            .spawn(move || {
                let result = run(&options, &replication, follower, rx, &flag);
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
        Self { tx, ended }
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
) -> Result<(), String> {
    let began = std::time::Instant::now();
    let plan = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(replication.follow(follower))?;
    let (snapshot, events) = plan.read().map_err(|e| e.to_string())?;
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
