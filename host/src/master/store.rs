//! The master's durable state on one node: journal segments plus snapshots.
//!
//! ```text
//! <data>/journal/<first index:020>.seg     framed (index, epoch, event)
//! <data>/snapshots/<index:020>.snap        index, epoch, len, crc32, state
//! ```
//!
//! A snapshot at index `i` holds the state after applying every event below
//! `i`; recovery restores the newest snapshot and replays the journal from
//! `i`. Snapshots are written to a temporary file, synced and renamed, so a
//! crash leaves either the old or the new one; the journal segments below a
//! snapshot are then deleted and the snapshot before it kept as a spare.

use crate::journal::{Entry, FsStorage, Journal, JournalError};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Snapshots kept (the newest plus spares).
const SNAPSHOTS_KEPT: usize = 2;
/// index u64, epoch u64, state length u64, state crc32.
const SNAPSHOT_HEADER_BYTES: usize = 28;

/// The newest snapshot found at startup.
#[derive(Debug)]
pub struct Snapshot {
    /// Journal index the snapshot covers up to (exclusive).
    pub index: u64,
    /// Epoch of the master that took it.
    pub epoch: u64,
    /// The master's state bytes.
    pub state: Vec<u8>,
}

/// What recovery found on disk.
#[derive(Debug)]
pub struct Recovery {
    /// The journal, open for appending.
    pub journal: Journal<FsStorage>,
    /// The snapshot to start from, if any.
    pub snapshot: Option<Snapshot>,
    /// Entries after the snapshot, to replay in order.
    pub entries: Vec<Entry>,
    /// Bytes of a torn final write that were cut off.
    pub torn_bytes: u64,
}

/// Why the master's state cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The journal is unreadable or corrupt.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A snapshot is unreadable or corrupt.
    #[error("snapshot {path}: {reason}")]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Entries between the snapshot and the journal are missing.
    #[error(
        "the journal starts at entry {journal_start} but the snapshot covers only up to {snapshot_index}: entries are missing"
    )]
    Gap {
        /// First entry in the journal.
        journal_start: u64,
        /// The snapshot's index.
        snapshot_index: u64,
    },
    /// The file system failed.
    #[error("{path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// What.
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Opens (creating if needed) the journal and snapshots under `data_dir`.
pub fn recover(data_dir: &Path) -> Result<Recovery, StoreError> {
    let journal_dir = data_dir.join("journal");
    let storage = FsStorage::open(&journal_dir).map_err(io_error(&journal_dir))?;
    let (journal, recovered) = Journal::open(storage)?;
    let snapshot = newest_snapshot(&data_dir.join("snapshots"))?;
    let start = snapshot.as_ref().map_or(0, |s| s.index);
    let journal_start = recovered
        .entries
        .first()
        .map_or(journal.next_index(), |e| e.index);
    if journal_start > start {
        return Err(StoreError::Gap {
            journal_start,
            snapshot_index: start,
        });
    }
    let entries = recovered
        .entries
        .into_iter()
        .filter(|e| e.index >= start)
        .collect();
    Ok(Recovery {
        journal,
        snapshot,
        entries,
        torn_bytes: recovered.torn_bytes,
    })
}

fn snapshot_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        let index = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".snap"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(index) = index {
            files.push((index, path));
        }
    }
    files.sort();
    Ok(files)
}

fn newest_snapshot(dir: &Path) -> Result<Option<Snapshot>, StoreError> {
    let Some((index, path)) = snapshot_files(dir)?.pop() else {
        return Ok(None);
    };
    let bytes = fs::read(&path).map_err(io_error(&path))?;
    let bad = |reason: &str| StoreError::Snapshot {
        path: path.clone(),
        reason: reason.into(),
    };
    if bytes.len() < SNAPSHOT_HEADER_BYTES {
        return Err(bad("shorter than its header"));
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let (stored, epoch, len) = (word(0), word(8), word(16));
    let crc = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
    let state = &bytes[SNAPSHOT_HEADER_BYTES..];
    if state.len() as u64 != len {
        return Err(bad("truncated"));
    }
    if crc32fast::hash(state) != crc {
        return Err(bad("checksum mismatch"));
    }
    if stored != index {
        return Err(bad("its name and content disagree on the index"));
    }
    Ok(Some(Snapshot {
        index,
        epoch,
        state: state.to_vec(),
    }))
}
/// The newest snapshot in `data_dir`, if any (for handing the master over).
pub fn latest_snapshot(data_dir: &Path) -> Result<Option<Snapshot>, StoreError> {
    newest_snapshot(&data_dir.join("snapshots"))
}

/// Adopts a master's state handed over by another node: stores it as this
/// node's newest snapshot, at the end of this node's journal, so the next
/// start of the master here begins from it (older entries of this journal
/// are below the snapshot and never replayed). `epoch` is the epoch the
/// master will run with here. Returns the snapshot's index.
pub fn adopt_handover(data_dir: &Path, epoch: u64, state: Vec<u8>) -> Result<u64, StoreError> {
    let journal_dir = data_dir.join("journal");
    let storage = FsStorage::open(&journal_dir).map_err(io_error(&journal_dir))?;
    let (journal, _) = Journal::open(storage)?;
    let index = journal.next_index();
    drop(journal);
    write_snapshot(
        data_dir,
        &Snapshot {
            index,
            epoch,
            state,
        },
    )?;
    Ok(index)
}

/// Writes a snapshot durably and removes all but the newest two.
pub fn write_snapshot(data_dir: &Path, snapshot: &Snapshot) -> Result<(), StoreError> {
    let dir = data_dir.join("snapshots");
    fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let mut framed = Vec::with_capacity(snapshot.state.len() + SNAPSHOT_HEADER_BYTES);
    framed.extend_from_slice(&snapshot.index.to_le_bytes());
    framed.extend_from_slice(&snapshot.epoch.to_le_bytes());
    framed.extend_from_slice(&(snapshot.state.len() as u64).to_le_bytes());
    framed.extend_from_slice(&crc32fast::hash(&snapshot.state).to_le_bytes());
    framed.extend_from_slice(&snapshot.state);
    let path = dir.join(format!("{:020}.snap", snapshot.index));
    let mut file = tempfile::NamedTempFile::new_in(&dir).map_err(io_error(&dir))?;
    file.write_all(&framed).map_err(io_error(&path))?;
    file.as_file().sync_all().map_err(io_error(&path))?;
    file.persist(&path)
        .map_err(|e| e.error)
        .map_err(io_error(&path))?;
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(&dir))?;
    let files = snapshot_files(&dir)?;
    for (_, old) in files.iter().rev().skip(SNAPSHOTS_KEPT) {
        fs::remove_file(old).map_err(io_error(old))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_round_trips_and_old_ones_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        for index in [10, 20, 30] {
            let snapshot = Snapshot {
                index,
                epoch: 1,
                state: vec![index as u8; 100],
            };
            write_snapshot(dir.path(), &snapshot).unwrap();
        }
        let found = newest_snapshot(&dir.path().join("snapshots"))
            .unwrap()
            .unwrap();
        assert_eq!((found.index, found.state[0]), (30, 30));
        assert_eq!(
            snapshot_files(&dir.path().join("snapshots")).unwrap().len(),
            SNAPSHOTS_KEPT
        );
    }

    #[test]
    fn an_adopted_handover_is_what_recovery_starts_from() {
        let dir = tempfile::tempdir().unwrap();
        {
            let storage = FsStorage::open(&dir.path().join("journal")).unwrap();
            let (mut journal, _) = Journal::open(storage).unwrap();
            journal.append(1, b"old").unwrap();
            journal.sync().unwrap();
        }
        assert_eq!(adopt_handover(dir.path(), 2, b"state".to_vec()).unwrap(), 1);
        let recovery = recover(dir.path()).unwrap();
        let snapshot = recovery.snapshot.unwrap();
        assert_eq!((snapshot.index, snapshot.epoch), (1, 2));
        assert_eq!(snapshot.state, b"state");
        assert!(
            recovery.entries.is_empty(),
            "older entries are not replayed"
        );
    }

    #[test]
    fn a_damaged_snapshot_is_an_error_not_a_silent_reset() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = Snapshot {
            index: 5,
            epoch: 1,
            state: vec![1; 100],
        };
        write_snapshot(dir.path(), &snapshot).unwrap();
        let path = dir.path().join("snapshots").join(format!("{:020}.snap", 5));
        let mut bytes = fs::read(&path).unwrap();
        bytes[50] ^= 1;
        fs::write(&path, bytes).unwrap();
        let error = recover(dir.path()).unwrap_err();
        assert!(matches!(error, StoreError::Snapshot { .. }), "{error}");
    }

    #[test]
    fn missing_entries_between_snapshot_and_journal_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let storage = FsStorage::open(&dir.path().join("journal")).unwrap();
            let (mut journal, _) = Journal::open(storage).unwrap();
            journal.append(1, b"e0").unwrap();
            journal.sync().unwrap();
        }
        // A segment named 7 with nothing before it and no snapshot.
        fs::rename(
            dir.path().join("journal").join(format!("{:020}.seg", 0)),
            dir.path().join("journal").join(format!("{:020}.seg", 7)),
        )
        .unwrap();
        assert!(recover(dir.path()).is_err());
    }
}
