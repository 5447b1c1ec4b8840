//! The master's shadow: a second instance of the master, on a thread of its
//! own, that applies every batch of events the master proposes, in order,
//! so that snapshots are serialized from it while the master goes on
//! serving.
//!
//! # Why
//!
//! Serializing the master's state takes as long as the state is large
//! (0.3-1 s for a million jobs), and a master that does it on its
//! own thread answers nobody meanwhile: every submission, poll and read
//! waits. The master is deterministic, so the same events applied to the
//! same starting state give the same state, byte for byte. A snapshot of
//! the shadow at a point of the journal therefore *is* the master's
//! snapshot at that point.
//!
//! # How
//!
//! ```text
//! master thread ──propose(batch)──────────────▶ replication: append, commit
//!      │        ──snapshot_slot()─────────────▶   the index is fixed here
//!      └──feed(batch), snapshot(slot)──▶ shadow thread: apply, …, serialize
//!                                              └──slot.fill(state)──▶ compact once
//!                                                                    committed
//! ```
//!
//! * The master marks the place (`Replication::snapshot_slot`: after every
//!   event proposed so far) and goes on; the shadow fills the slot when it
//!   reaches it; replication compacts under it once it is filled and
//!   committed, exactly as under a snapshot the master took itself.
//! * An upgrade's rehearsal, which needs the running state, takes it from
//!   the shadow the same way.
//! * The shadow recovers from the same snapshot and journal as the master,
//!   through the same [`Replayer`], *after* the master did: taking the
//!   master over never waits for it. What the master proposes meanwhile
//!   waits in the shadow's channel. Build switches are journal entries in
//!   the batches, so the shadow switches where recovery would.
//! * Costs: a second copy of the state in memory, and applying each event
//!   twice (only applied: deciding stays the master's). `--snapshots
//!   master` turns the shadow off.
//! * A shadow that fails (a trap, a refused event) says so once
//!   (`master_shadow_failed`) and is gone; the master then snapshots on its
//!   own thread, as without a shadow. It never stops the master.
//! * The shadow never holds the master back: one that falls
//!   [`SHADOW_BATCHES_WAITING_MAX`] batches behind is given up like a failed one.
//!   It runs at the master's priority: it must keep up, and a lower one
//!   would let a busy machine starve it.
//! * A stop still snapshots the master itself: the shadow may be behind,
//!   and the next master should start from the newest state.
//!
//! [`SHADOW_BATCHES_WAITING_MAX`]: crate::limits::SHADOW_BATCHES_WAITING_MAX

use super::recovery::{Loaded, MasterOptions, Recovered, Replayer, ShadowFrom, StartError};
use super::upgrade::Builds;
use crate::events::{self, emit};
use crate::limits::SHADOW_BATCHES_WAITING_MAX;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// What to do with a snapshot: the builds it runs and its state, or why
/// there is none.
pub(super) type Taken = Box<dyn FnOnce(anyhow::Result<(Builds, Vec<u8>)>) + Send>;

enum Input {
    Events(Vec<Vec<u8>>),
    Snapshot(Taken),
}

/// The master's side of its shadow.
pub(super) struct Shadow {
    tx: SyncSender<Input>,
    failed: Arc<AtomicBool>,
}

impl Shadow {
    /// Starts the shadow: it recovers from `from` (the master's own
    /// recovery, whose compiled builds are `loaded`), then follows what
    /// it is fed.
    pub fn start(options: MasterOptions, loaded: Loaded, from: ShadowFrom) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel(SHADOW_BATCHES_WAITING_MAX);
        let failed = Arc::new(AtomicBool::new(false));
        let flag = failed.clone();
        let spawned = std::thread::Builder::new()
            .name("cohort-shadow".into())
            .spawn(move || {
                if let Err(error) = run(&options, loaded, from, rx, &flag) {
                    flag.store(true, Ordering::Relaxed);
                    emit!(
                        error,
                        events::MASTER_SHADOW_FAILED,
                        error = %format!("{error:#}"),
                        "the master's shadow failed; the master takes its snapshots itself"
                    );
                }
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start the master's shadow");
            failed.store(true, Ordering::Relaxed);
        }
        Self { tx, failed }
    }

    /// Whether the shadow is still following.
    pub fn healthy(&self) -> bool {
        !self.failed.load(Ordering::Relaxed)
    }

    /// Applies `events` (the master's batch, as proposed) after what came
    /// before. Never waits: a shadow [`SHADOW_BATCHES_WAITING_MAX`] batches
    /// behind is given up (the master then snapshots itself), so the
    /// master never serves at the shadow's pace.
    pub fn feed(&self, events: &[Vec<u8>]) {
        if events.is_empty() || !self.healthy() {
            return;
        }
        match self.tx.try_send(Input::Events(events.to_vec())) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.failed.store(true, Ordering::Relaxed);
                emit!(
                    error,
                    events::MASTER_SHADOW_FAILED,
                    error = %format!("it fell {SHADOW_BATCHES_WAITING_MAX} batches behind"),
                    "the master's shadow failed; the master takes its snapshots itself"
                );
            }
            Err(TrySendError::Disconnected(_)) => self.failed.store(true, Ordering::Relaxed),
        }
    }

    /// Hands `taken` a snapshot of the state after everything fed so far,
    /// once the shadow is there; or gives it back when there is no shadow
    /// to take it (the caller then takes it itself).
    pub fn snapshot(&self, taken: Taken) -> Result<(), Taken> {
        if !self.healthy() {
            return Err(taken);
        }
        match self.tx.try_send(Input::Snapshot(taken)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(input) | TrySendError::Disconnected(input)) => {
                self.failed.store(true, Ordering::Relaxed);
                match input {
                    Input::Snapshot(taken) => Err(taken),
                    Input::Events(_) => unreachable!("sent a snapshot"),
                }
            }
        }
    }
}

fn run(
    options: &MasterOptions,
    loaded: Loaded,
    from: ShadowFrom,
    rx: Receiver<Input>,
    given_up: &AtomicBool,
) -> anyhow::Result<()> {
    let fail = |e: StartError| anyhow::anyhow!("{e}");
    let from = match from {
        ShadowFrom::Recovered(recovered) => recovered,
        ShadowFrom::Disk(plan) => {
            let (snapshot, events) = plan
                .read()
                .map_err(|e| anyhow::anyhow!("reading the journal: {e}"))?;
            Arc::new(Recovered { snapshot, events })
        }
    };
    let mut replayer =
        Replayer::recover_with(options, loaded, from.snapshot.as_ref()).map_err(fail)?;
    replayer.replay(&from.events).map_err(fail)?;
    // The recovered journal is no longer needed once both have it.
    drop(from);
    while let Ok(input) = rx.recv() {
        if given_up.load(Ordering::Relaxed) {
            // Behind for good: let go of the state now.
            break;
        }
        match input {
            Input::Events(events) => replayer.replay(&events).map_err(fail)?,
            Input::Snapshot(taken) => match replayer.core.snapshot() {
                Ok(state) => taken(Ok((replayer.builds, state))),
                Err(error) => {
                    taken(Err(anyhow::anyhow!(
                        "the master's shadow failed: {error:#}"
                    )));
                    return Err(error.context("taking a snapshot"));
                }
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::durable::Snapshot as StoredSnapshot;
    use crate::master::core::{Core, NativeCore};
    use crate::master::testing::{self, decide};
    use crate::master::upgrade;

    fn options(dir: &std::path::Path) -> MasterOptions {
        testing::native_options(dir, u64::MAX, true)
    }

    /// The shadow's snapshot, once it has everything fed so far.
    fn snapshot_of(shadow: &Shadow) -> (Builds, Vec<u8>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let taken: Taken = Box::new(move |state| tx.send(state.unwrap()).unwrap());
        assert!(shadow.snapshot(taken).is_ok(), "the shadow is there");
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the shadow answers")
    }

    /// Fed what the master decided, in batches of any size, the shadow
    /// holds the master's state byte for byte: from an empty journal, and
    /// recovered from a snapshot and the events after it.
    #[test]
    fn the_shadow_holds_the_masters_state_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let mut master = NativeCore::new(None).unwrap();
        let journal = decide(&mut master, 0, 300);
        let shadow = Shadow::start(
            options(dir.path()),
            Default::default(),
            ShadowFrom::Recovered(Arc::new(Recovered {
                snapshot: None,
                events: journal[..100].to_vec(),
            })),
        );
        for batch in journal[100..].chunks(37) {
            shadow.feed(batch);
        }
        let (builds, state) = snapshot_of(&shadow);
        assert_eq!(builds, Builds::default());
        assert_eq!(state, master.snapshot().unwrap());

        // More after the snapshot; a new shadow recovers from it and the
        // journal after it.
        let later = decide(&mut master, 300, 200);
        shadow.feed(&later);
        let again = Shadow::start(
            options(dir.path()),
            Default::default(),
            ShadowFrom::Recovered(Arc::new(Recovered {
                snapshot: Some(StoredSnapshot {
                    index: journal.len() as u64 + 1,
                    epoch: 1,
                    state: upgrade::wrap_state(builds, state),
                }),
                events: later,
            })),
        );
        let expected = master.snapshot().unwrap();
        assert_eq!(snapshot_of(&shadow).1, expected);
        assert_eq!(snapshot_of(&again).1, expected);
        assert!(shadow.healthy() && again.healthy());
    }

    /// An event the master would refuse stops the shadow, which says so;
    /// a snapshot asked of it afterwards is handed back to be taken by the
    /// caller.
    #[test]
    fn a_failed_shadow_hands_snapshots_back() {
        let dir = tempfile::tempdir().unwrap();
        let shadow = Shadow::start(
            options(dir.path()),
            Default::default(),
            ShadowFrom::Recovered(Arc::new(Recovered {
                snapshot: None,
                events: Vec::new(),
            })),
        );
        shadow.feed(&[vec![0xFF, 0xFF, 0xFF]]);
        let (tx, rx) = std::sync::mpsc::channel();
        let taken: Taken = Box::new(move |state| tx.send(state.is_ok()).unwrap());
        // Failed before the request arrived: handed back. Sent before the
        // failure was seen: dropped unanswered with the channel.
        if let Err(taken) = shadow.snapshot(taken) {
            taken(Ok((Builds::default(), Vec::new())));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while shadow.healthy() {
            assert!(std::time::Instant::now() < deadline, "the shadow fails");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_ne!(
            rx.recv_timeout(std::time::Duration::from_secs(30)),
            Ok(false)
        );
        let taken: Taken = Box::new(|_| {});
        assert!(shadow.snapshot(taken).is_err(), "handed back");
    }
}
