//! Bringing a master up to date: from a snapshot and the journal's events
//! after it, or from a warm standby's state.
//!
//! The master thread ([`super::service`]) and the shadow that takes its
//! snapshots ([`super::shadow`]) both start here, through the same
//! [`Replayer`]: events applied in chunks, builds switched at the journal's
//! switch records, so the two reach the same state byte for byte. Kept
//! apart from the service so that the shadow, which the service runs, does
//! not import the service back.
//!
//! Invariant: a replay applies exactly the committed events after the
//! snapshot, in journal order, each with the build in force when it was
//! written; a switch record that names a build this node cannot load stops
//! the recovery (`StartError`), never skips it.

use super::core::{Core, CoreKind, MasterComponent, NativeCore};
use super::handover;
use super::upgrade::{self, Build, Builds};
use crate::journal::durable::{Snapshot as StoredSnapshot, StoreError};
use crate::limits::REPLAY_CHUNK;
use crate::replication::Events;
use cohort_master::Config;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// How to start the master.
#[derive(Debug, Clone)]
pub struct MasterOptions {
    /// Where the journal and snapshots live.
    pub data_dir: PathBuf,
    /// Where compiled masters are cached (`<cache_dir>/compiled`): the
    /// node's `--cache-dir`, by default `data_dir`.
    pub cache_dir: PathBuf,
    /// The master's tunables.
    pub config: Config,
    /// Which backend runs the logic.
    pub core: CoreKind,
    /// Events between snapshots.
    pub snapshot_every: u64,
    /// Workers known to be alive now: their running attempts are kept.
    /// Every other worker the journal knows is declared gone at start, and
    /// its attempts re-queued.
    pub live_workers: Vec<String>,
    /// The master component already compiled (`None`: compile it, or load
    /// it from `<cache_dir>/compiled`).
    pub component: Option<MasterComponent>,
    /// Take snapshots from a shadow instance on its own thread
    /// ([`super::shadow`]) rather than pausing the master for them.
    pub shadow: bool,
}

/// Why the master could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The journal or a snapshot is damaged or unreadable.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The master component failed to load or to replay.
    #[error("master: {0:#}")]
    Core(anyhow::Error),
}

/// The master components a recovery needs, each compiled once.
pub(super) struct Components<'a> {
    options: &'a MasterOptions,
    pub(super) loaded: Loaded,
}

/// Master builds compiled so far.
pub(super) type Loaded = HashMap<Build, MasterComponent>;

impl<'a> Components<'a> {
    fn new(options: &'a MasterOptions, mut loaded: Loaded) -> Self {
        if let Some(component) = &options.component {
            loaded.insert(Build::BuiltIn, component.clone());
        }
        Self { options, loaded }
    }

    fn get(&mut self, build: Build) -> Result<MasterComponent, StartError> {
        if let Some(component) = self.loaded.get(&build) {
            return Ok(component.clone());
        }
        let component =
            MasterComponent::load_build(&self.options.data_dir, &self.options.cache_dir, build)
                .map_err(|e| StartError::Core(e.context(format!("loading master {build}"))))?;
        self.loaded.insert(build, component.clone());
        Ok(component)
    }
}

/// Replays `events` into `replayer` chunk by chunk as they are read,
/// each after `prepare` and before `keep`; how many there were.
pub(super) fn replay_as_read(
    replayer: &mut Replayer<'_>,
    mut events: Events,
    mut prepare: impl FnMut(&[Vec<u8>]) -> Result<(), String>,
    mut keep: impl FnMut(Vec<Vec<u8>>),
) -> Result<u64, StartError> {
    let failed = |reason: String| StartError::Core(anyhow::anyhow!(reason));
    let mut replayed = 0;
    while let Some(chunk) = events.next_chunk().map_err(failed)? {
        prepare(&chunk).map_err(failed)?;
        replayer.replay(&chunk)?;
        replayed += chunk.len() as u64;
        keep(chunk);
    }
    Ok(replayed)
}

/// What a master recovers from: the newest snapshot and the journal's
/// events after it.
pub(super) struct Recovered {
    pub snapshot: Option<StoredSnapshot>,
    pub events: Vec<Vec<u8>>,
}

/// Where the master's shadow gets its starting state.
pub(super) enum ShadowFrom {
    /// What the master recovered from.
    Recovered(Arc<Recovered>),
    /// Read from disk, up to where the master started (the master started
    /// from a warm standby, with no full read to share).
    Disk(crate::replication::journal_storage::Restore),
}

/// A master a warm standby kept up to date (`super::standby`), with
/// everything before `at` applied: a master taking over starts from it.
pub struct Warm {
    core: Box<dyn Core>,
    builds: Builds,
    loaded: Loaded,
    pub(super) at: u64,
}

impl std::fmt::Debug for Warm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warm").field("at", &self.at).finish()
    }
}

/// A master brought up to date from the journal, as the live master went:
/// events applied in chunks, builds switched at switch records. Recovery
/// and the shadow ([`super::shadow`]) both replay through it, so they
/// reach the same state.
pub(super) struct Replayer<'a> {
    pub core: Box<dyn Core>,
    pub builds: Builds,
    kind: CoreKind,
    pub(super) components: Components<'a>,
}

impl<'a> Replayer<'a> {
    /// The master as `snapshot` left it (empty without one).
    pub fn recover(
        options: &'a MasterOptions,
        snapshot: Option<&StoredSnapshot>,
    ) -> Result<Self, StartError> {
        Self::recover_with(options, Loaded::new(), snapshot)
    }

    /// Goes on from a standby's master.
    pub fn resume(options: &'a MasterOptions, warm: Warm) -> Self {
        Self {
            core: warm.core,
            builds: warm.builds,
            kind: options.core,
            components: Components::new(options, warm.loaded),
        }
    }

    /// This master, for another to go on from, having applied everything
    /// before `at`.
    pub fn into_warm(self, at: u64) -> Warm {
        Warm {
            core: self.core,
            builds: self.builds,
            loaded: self.components.loaded,
            at,
        }
    }

    /// [`Self::recover`], with the builds already compiled.
    pub fn recover_with(
        options: &'a MasterOptions,
        loaded: Loaded,
        snapshot: Option<&StoredSnapshot>,
    ) -> Result<Self, StartError> {
        let (builds, state) = match snapshot {
            Some(snapshot) => upgrade::unwrap_state(&snapshot.state).map_err(|e| {
                StartError::Core(anyhow::anyhow!("snapshot {}: {e}", snapshot.index))
            })?,
            None => (Builds::default(), &[][..]),
        };
        let state = snapshot.map(|_| state);
        let mut components = Components::new(options, loaded);
        let core: Box<dyn Core> = match options.core {
            CoreKind::Wasm => Box::new(
                components
                    .get(builds.active)?
                    .instantiate(state)
                    .map_err(StartError::Core)?
                    .map_err(|r| StartError::Core(anyhow::anyhow!("snapshot refused: {r}")))?,
            ),
            CoreKind::Native if builds.active != Build::BuiltIn => {
                return Err(StartError::Core(anyhow::anyhow!(
                    "the cluster runs the uploaded master {}, which --master-core native cannot run",
                    builds.active
                )));
            }
            CoreKind::Native => Box::new(
                NativeCore::new(state)
                    .map_err(|r| StartError::Core(anyhow::anyhow!("snapshot refused: {r}")))?,
            ),
        };
        Ok(Self {
            core,
            builds,
            kind: options.core,
            components,
        })
    }

    /// Applies `events` (journal entries: the master's events and switch
    /// records) in order.
    pub fn replay(&mut self, events: &[Vec<u8>]) -> Result<(), StartError> {
        let mut from = 0;
        for (at, event) in events.iter().enumerate() {
            let Some(switch) = upgrade::decode_switch(event) else {
                continue;
            };
            self.apply(&events[from..at])?;
            from = at + 1;
            let switch = switch.map_err(|e| StartError::Core(anyhow::anyhow!(e)))?;
            if self.kind == CoreKind::Native {
                return Err(StartError::Core(anyhow::anyhow!(
                    "the journal switches to master {}, which --master-core native cannot run",
                    switch.to
                )));
            }
            let component = self.components.get(switch.to)?;
            self.core = handover::hand_over(self.core.as_mut(), &component)
                .map_err(StartError::Core)?
                .map_err(|r| {
                    StartError::Core(anyhow::anyhow!(
                        "replaying the switch to {}: {r}",
                        switch.to
                    ))
                })?;
            self.builds = self.builds.switched(switch.to);
        }
        self.apply(&events[from..])
    }

    fn apply(&mut self, events: &[Vec<u8>]) -> Result<(), StartError> {
        for chunk in events.chunks(REPLAY_CHUNK) {
            self.core
                .apply(chunk)
                .map_err(StartError::Core)?
                .map_err(|r| {
                    StartError::Core(anyhow::anyhow!("the master refused a journal entry: {r}"))
                })?;
        }
        Ok(())
    }
}
