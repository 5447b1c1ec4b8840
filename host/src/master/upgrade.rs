//! Live upgrade: another master component switched in on a running cluster.
//!
//! # Which master runs
//!
//! A cluster starts on the **built-in** master (the component embedded in
//! the binary). `cohort master upgrade master.wasm` switches it to an
//! **uploaded** one, named by its sha256; `cohort master rollback` switches
//! back to the one before. Which build runs is part of the journal, so
//! every replica, every later take-over and `cohort replay` runs the same
//! component from the same position:
//!
//! * **The switch record.** A journal entry [`TAG_SWITCH`] `++
//!   postcard(Switch)` at the position where the master changed. Master
//!   events start with their format version (small), replication's own
//!   entries with `0xF0`/`0xF1`, so the tag is unambiguous. Whoever
//!   replays the journal applies the entries before it with the old build,
//!   then hands the state over exactly as the live switch did ([`hand_over`])
//!   and goes on with the new build.
//! * **The snapshot.** Once a cluster has been upgraded, a snapshot's
//!   master state is [`TAG_BUILD`] `++ postcard(Builds)` `++` the state, so a
//!   restore knows which build wrote it. A cluster never upgraded writes the
//!   state alone, as before.
//! * **The components.** Uploaded masters are stored under
//!   `<data>/masters/<sha256>.wasm` on every live back-end node before the
//!   switch is made; a back-end node that lacks one when it takes over
//!   fetches it from another back-end node first.
//!
//! # The checks
//!
//! A component is refused, and the running master left untouched, unless:
//! it compiles as a component ([`ErrorCode::InvalidMaster`](crate::codes::ErrorCode::InvalidMaster)); it exports the master
//! world ([`ErrorCode::MasterWrongWorld`](crate::codes::ErrorCode::MasterWrongWorld)); it imports nothing that could make it
//! nondeterministic ([`ErrorCode::MasterNondeterministicImport`](crate::codes::ErrorCode::MasterNondeterministicImport): the master world itself
//! imports nothing, and the few WASI interfaces a Rust build links are
//! allowed only because every call to them traps); `init` works, empty and
//! from the running master's state ([`ErrorCode::MasterTraps`](crate::codes::ErrorCode::MasterTraps),
//! [`ErrorCode::MasterSnapshotUnreadable`](crate::codes::ErrorCode::MasterSnapshotUnreadable)); and the events the running master journaled
//! while the new one was being checked, replayed by the new one from the
//! state the check started from, reach the same state as handing it the
//! running master's state at the switch ([`ErrorCode::MasterReplayDiverged`](crate::codes::ErrorCode::MasterReplayDiverged)).

use crate::runtime::Digest;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// First byte of a switch record in the journal.
pub const TAG_SWITCH: u8 = 0xF2;
/// First byte of a snapshot's master state that names the builds.
pub const TAG_BUILD: u8 = 0xF3;

/// Imports an uploaded master may declare: the master world's types, and
/// the WASI interfaces a Rust `wasm32-wasip2` build links for its standard
/// library's panic and exit paths. Every function a master imports is
/// linked to a trap, so calling one fails the call and never returns a
/// value that could differ between nodes. Clocks, randomness, files, sockets and anything else are refused
/// outright, so the mistake is caught at upload, not at the first call.
pub const ALLOWED_IMPORT_PREFIXES: &[&str] = &[
    // The world's own type definitions (no functions).
    "cohort:master/types@",
    "wasi:cli/environment@",
    "wasi:cli/exit@",
    "wasi:cli/stdin@",
    "wasi:cli/stdout@",
    "wasi:cli/stderr@",
    "wasi:cli/terminal-",
    "wasi:io/error@",
    "wasi:io/poll@",
    "wasi:io/streams@",
];

/// A master build: the one embedded in the binary, or an uploaded one.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub enum Build {
    /// The component embedded in this binary.
    #[default]
    BuiltIn,
    /// An uploaded component, by the sha256 of its bytes.
    Uploaded([u8; 32]),
}

impl Build {
    /// `built-in` or `sha256:<hex>`.
    pub fn name(&self) -> String {
        match self {
            Self::BuiltIn => "built-in".into(),
            Self::Uploaded(digest) => format!("sha256:{}", Digest::from(*digest)),
        }
    }
}

impl std::fmt::Display for Build {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// The build running and the one a rollback returns to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Builds {
    /// Runs now.
    pub active: Build,
    /// Ran before the last switch (the built-in one if none).
    pub previous: Build,
}

impl Builds {
    /// After switching to `to`.
    pub fn switched(self, to: Build) -> Self {
        Self {
            active: to,
            previous: self.active,
        }
    }
}

/// A switch record: from this journal position on, `to` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    /// The build before the switch.
    pub from: Build,
    /// The build after it.
    pub to: Build,
}

/// The journal entry recording `switch`.
pub fn encode_switch(switch: &Switch) -> Vec<u8> {
    let mut data = vec![TAG_SWITCH];
    data.extend(postcard::to_allocvec(switch).expect("a switch encodes"));
    data
}

/// The switch a journal entry records; `None` for a master event.
/// Hostile-safe: a damaged record is an error.
pub fn decode_switch(data: &[u8]) -> Option<Result<Switch, String>> {
    let (&TAG_SWITCH, body) = data.split_first()? else {
        return None;
    };
    Some(postcard::from_bytes(body).map_err(|e| format!("a damaged master switch record: {e}")))
}

/// A snapshot's master state, naming the builds once the cluster was ever
/// upgraded (the plain state otherwise, as written before upgrades).
pub fn wrap_state(builds: Builds, state: Vec<u8>) -> Vec<u8> {
    if builds == Builds::default() {
        return state;
    }
    let mut out = vec![TAG_BUILD];
    out = postcard::to_extend(&builds, out).expect("builds encode");
    out.extend(state);
    out
}

/// The builds a snapshot's master state names and the state itself.
pub fn unwrap_state(bytes: &[u8]) -> Result<(Builds, &[u8]), String> {
    match bytes.split_first() {
        Some((&TAG_BUILD, body)) => {
            postcard::take_from_bytes(body).map_err(|e| format!("a damaged snapshot header: {e}"))
        }
        _ => Ok((Builds::default(), bytes)),
    }
}

/// Every uploaded build a node must have to start from `snapshot` (the
/// master state of the newest snapshot) and replay `entries` after it.
pub fn builds_needed<'a>(
    snapshot: Option<&[u8]>,
    entries: impl IntoIterator<Item = &'a Vec<u8>>,
) -> Vec<[u8; 32]> {
    let mut needed = Vec::new();
    let mut note = |build: Build| {
        if let Build::Uploaded(digest) = build
            && !needed.contains(&digest)
        {
            needed.push(digest);
        }
    };
    if let Some(Ok((builds, _))) = snapshot.map(unwrap_state) {
        note(builds.active);
        note(builds.previous);
    }
    for entry in entries {
        if let Some(Ok(switch)) = decode_switch(entry) {
            note(switch.to);
        }
    }
    needed
}

/// Uploaded master components on this node's disk,
/// `<data>/masters/<sha256>.wasm`, written whole or not at all.
#[derive(Debug, Clone)]
pub struct MasterStore {
    cache_dir: PathBuf,
    dir: PathBuf,
}

impl MasterStore {
    /// The store of `data_dir` (created on first write), compiling into
    /// `data_dir`'s compile cache.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            cache_dir: data_dir.to_path_buf(),
            dir: data_dir.join("masters"),
        }
    }

    /// This store, compiling into the compile cache of `cache_dir` (the
    /// node's `--cache-dir`).
    pub fn caching_in(self, cache_dir: &Path) -> Self {
        Self {
            cache_dir: cache_dir.to_path_buf(),
            ..self
        }
    }

    /// Where masters checked on upload are compiled to (and cached).
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    fn path(&self, digest: &[u8; 32]) -> PathBuf {
        self.dir.join(format!("{}.wasm", Digest::from(*digest)))
    }

    /// Whether the component is stored here.
    pub fn contains(&self, digest: &[u8; 32]) -> bool {
        self.path(digest).is_file()
    }

    /// Stores `wasm` durably; its digest.
    pub fn put(&self, wasm: &[u8]) -> std::io::Result<[u8; 32]> {
        let digest = Digest::of(wasm).to_bytes();
        if self.contains(&digest) {
            return Ok(digest);
        }
        std::fs::create_dir_all(&self.dir)?;
        let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
        file.write_all(wasm)?;
        file.as_file().sync_all()?;
        file.persist(self.path(&digest))?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        Ok(digest)
    }

    /// The stored component's bytes, checked against its digest.
    pub fn read(&self, digest: &[u8; 32]) -> anyhow::Result<Vec<u8>> {
        let path = self.path(digest);
        let bytes = std::fs::read(&path).map_err(|e| {
            anyhow::anyhow!(
                "master {} is not stored here: {e}",
                Build::Uploaded(*digest)
            )
        })?;
        anyhow::ensure!(
            Digest::of(&bytes).to_bytes() == *digest,
            "{} is damaged: its sha256 differs from its name",
            path.display()
        );
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_records_round_trip_and_damage_is_an_error() {
        let switch = Switch {
            from: Build::BuiltIn,
            to: Build::Uploaded([7; 32]),
        };
        let data = encode_switch(&switch);
        assert_eq!(data[0], TAG_SWITCH);
        assert_eq!(decode_switch(&data), Some(Ok(switch)));
        assert!(matches!(decode_switch(&data[..5]), Some(Err(_))));
        // A master event (format version first) is not a switch.
        assert_eq!(decode_switch(&[4, 1, 2]), None);
        assert_eq!(decode_switch(&[]), None);
    }

    /// The bytes of a switch record and of a snapshot header are a format:
    /// pinned, so an accidental change fails here.
    #[test]
    fn the_formats_are_pinned() {
        let switch = Switch {
            from: Build::BuiltIn,
            to: Build::Uploaded([7; 32]),
        };
        let mut expected = vec![0xF2, 0, 1];
        expected.extend([7; 32]);
        assert_eq!(encode_switch(&switch), expected);
        let builds = Builds {
            active: Build::Uploaded([9; 32]),
            previous: Build::BuiltIn,
        };
        let mut expected = vec![0xF3, 1];
        expected.extend([9; 32]);
        expected.extend([0, 5, 6]);
        assert_eq!(wrap_state(builds, vec![5, 6]), expected);
    }

    #[test]
    fn a_never_upgraded_state_is_written_as_before() {
        let state = vec![5, 1, 2, 3];
        assert_eq!(wrap_state(Builds::default(), state.clone()), state);
        let (builds, inner) = unwrap_state(&state).unwrap();
        assert_eq!((builds, inner), (Builds::default(), &state[..]));
        let upgraded = Builds::default().switched(Build::Uploaded([9; 32]));
        let wrapped = wrap_state(upgraded, state.clone());
        assert_eq!(wrapped[0], TAG_BUILD);
        assert_eq!(unwrap_state(&wrapped).unwrap(), (upgraded, &state[..]));
        assert!(unwrap_state(&[TAG_BUILD, 1]).is_err());
    }

    #[test]
    fn the_builds_needed_are_the_snapshots_and_the_switches() {
        let a = Build::Uploaded([1; 32]);
        let b = Build::Uploaded([2; 32]);
        let snapshot = wrap_state(Builds::default().switched(a), vec![5]);
        let entries = vec![
            vec![4, 0],
            encode_switch(&Switch { from: a, to: b }),
            encode_switch(&Switch { from: b, to: a }),
        ];
        assert_eq!(
            builds_needed(Some(&snapshot), &entries),
            vec![[1; 32], [2; 32]]
        );
        assert!(builds_needed(None, &[vec![4u8]]).is_empty());
    }

    #[test]
    fn the_store_keeps_whole_components_and_notices_damage() {
        let dir = tempfile::tempdir().unwrap();
        let store = MasterStore::new(dir.path());
        let digest = store.put(b"not really wasm").unwrap();
        assert!(store.contains(&digest));
        assert_eq!(store.read(&digest).unwrap(), b"not really wasm");
        std::fs::write(store.path(&digest), b"tampered").unwrap();
        assert!(store.read(&digest).is_err());
        assert!(store.read(&[0; 32]).is_err());
    }
}
