//! The master's durable state on one node: journal segments plus snapshots.
//!
//! ```text
//! <data>/journal/<first index:020>.seg     framed (index, epoch, event)
//! <data>/snapshots/<index:020>.snap        index, epoch, len, crc32, state
//! <data>/promise                           the highest master epoch accepted
//! ```
//!
//! A snapshot at index `i` holds the state after applying every event below
//! `i`; recovery restores the newest snapshot and replays the journal from
//! `i`. Snapshots are written to a temporary file, synced and renamed, so a
//! crash leaves either the old or the new one; the journal segments below a
//! snapshot are then deleted and the snapshot before it kept as a spare.

use crate::journal::{Entry, FsStorage, Journal, JournalError};
use crate::limits::{SEGMENT_BYTES_MAX, SNAPSHOT_SYNC_BYTES, SNAPSHOTS_KEPT};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// index u64, epoch u64, state length u64, crc32 of those and the state.
const SNAPSHOT_HEADER_BYTES: usize = 28;

/// A snapshot of the master's state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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

/// Opens (creating if needed) the journal under `data_dir`, cutting a torn
/// tail; returns it with what it holds.
pub fn open_journal(
    data_dir: &Path,
) -> Result<(Journal<FsStorage>, crate::journal::Recovered), StoreError> {
    open_journal_keeping(data_dir, |_, _| true)
}

/// [`open_journal`], returning only the entries `keep` wants (see
/// [`Journal::open_keeping`]).
pub fn open_journal_keeping(
    data_dir: &Path,
    keep: impl FnMut(u64, &[u8]) -> bool,
) -> Result<(Journal<FsStorage>, crate::journal::Recovered), StoreError> {
    let journal_dir = data_dir.join("journal");
    let storage = FsStorage::open(&journal_dir).map_err(io_error(&journal_dir))?;
    Ok(Journal::open_keeping(storage, SEGMENT_BYTES_MAX, keep)?)
}

/// Opens (creating if needed) the journal and snapshots under `data_dir`.
pub fn recover(data_dir: &Path) -> Result<Recovery, StoreError> {
    let (journal, recovered) = open_journal(data_dir)?;
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
    read_snapshot(&path, index).map(Some)
}

/// A snapshot file's checksum: the header's fields as well as the state,
/// so a flipped epoch is caught like a flipped state byte.
fn snapshot_crc(index: u64, epoch: u64, state: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&index.to_le_bytes());
    crc.update(&epoch.to_le_bytes());
    crc.update(&(state.len() as u64).to_le_bytes());
    crc.update(state);
    crc.finalize()
}

/// Every snapshot in `data_dir` that reads back whole, oldest first (for
/// `cohort replay`, which never writes: a missing directory is none).
pub fn snapshots(data_dir: &Path) -> Result<Vec<Snapshot>, StoreError> {
    let dir = data_dir.join("snapshots");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut all = Vec::new();
    for (index, path) in snapshot_files(&dir)? {
        let one = read_snapshot(&path, index)?;
        all.push(one);
    }
    Ok(all)
}

/// One snapshot file, checked as [`newest_snapshot`] checks the newest.
fn read_snapshot(path: &Path, index: u64) -> Result<Snapshot, StoreError> {
    let bytes = fs::read(path).map_err(io_error(path))?;
    let bad = |reason: &str| StoreError::Snapshot {
        path: path.to_path_buf(),
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
    if crc != snapshot_crc(stored, epoch, state) && crc != crc32fast::hash(state) {
        return Err(bad("checksum mismatch"));
    }
    if stored != index {
        return Err(bad("its name and content disagree on the index"));
    }
    Ok(Snapshot {
        index,
        epoch,
        state: state.to_vec(),
    })
}

/// The newest snapshot in `data_dir`, if any (for handing the master over).
pub fn latest_snapshot(data_dir: &Path) -> Result<Option<Snapshot>, StoreError> {
    newest_snapshot(&data_dir.join("snapshots"))
}

/// Stores a snapshot of the master's state made elsewhere (a hand-over, or
/// a replica catching up) as this node's newest, and lines the journal up
/// behind it: a journal that ends before the snapshot restarts at its
/// index; entries already below it are compacted away; entries after it
/// stay (the master's replication replaces them if they differ).
pub fn install_snapshot(
    data_dir: &Path,
    journal: &mut Journal<FsStorage>,
    snapshot: &Snapshot,
) -> Result<(), StoreError> {
    write_snapshot(data_dir, snapshot)?;
    let shape = journal.shape();
    if shape.next < snapshot.index || shape.first > snapshot.index {
        journal.reset_to(snapshot.index, snapshot.epoch)?;
    } else {
        journal.compact(snapshot.index)?;
    }
    Ok(())
}

/// Drops the journal's entries from `index` on, and every snapshot that
/// covers any of them (a replica's divergent, never committed tail). If
/// what is left cannot be recovered on its own (entries below were
/// compacted into a snapshot now dropped), the journal is emptied instead:
/// the master then sends a snapshot.
pub fn truncate_journal(
    data_dir: &Path,
    journal: &mut Journal<FsStorage>,
    index: u64,
) -> Result<(), StoreError> {
    let dir = data_dir.join("snapshots");
    for (snapshot, path) in snapshot_files(&dir)? {
        if snapshot > index {
            fs::remove_file(&path).map_err(io_error(&path))?;
        }
    }
    let base = snapshot_files(&dir)?.last().map_or(0, |(i, _)| *i);
    if index < journal.shape().first || journal.shape().first > base {
        for (_, path) in snapshot_files(&dir)? {
            fs::remove_file(&path).map_err(io_error(&path))?;
        }
        journal.reset_to(0, 0)?;
    } else {
        journal.truncate_from(index)?;
    }
    Ok(())
}

/// The highest master epoch this node has promised to accept (0: none).
pub fn read_promise(data_dir: &Path) -> Result<u64, StoreError> {
    let path = data_dir.join("promise");
    match fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| StoreError::Snapshot {
            path: path.clone(),
            reason: format!("not an epoch: {text:?}"),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(io_error(&path)(error)),
    }
}

/// Durably records the promise to refuse master epochs below `epoch`.
pub fn write_promise(data_dir: &Path, epoch: u64) -> Result<(), StoreError> {
    let path = data_dir.join("promise");
    let mut file = tempfile::NamedTempFile::new_in(data_dir).map_err(io_error(data_dir))?;
    file.write_all(epoch.to_string().as_bytes())
        .map_err(io_error(&path))?;
    file.as_file().sync_all().map_err(io_error(&path))?;
    file.persist(&path)
        .map_err(|e| e.error)
        .map_err(io_error(&path))?;
    fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(data_dir))
}

/// How much lower than the threads that answer callers the thread
/// writing a snapshot file runs (a `nice` increment).
const NICE: i32 = 10;

/// Lowers the calling thread's priority ([`NICE`]); best effort.
pub fn background_priority() {
    // SAFETY: `setpriority` only reads its arguments. On Linux the nice
    // value is per thread, and `who == 0` is the calling thread.
    #[cfg(target_os = "linux")]
    let failed = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE) } != 0;
    #[cfg(not(target_os = "linux"))]
    let failed = false;
    if failed {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "cannot lower a background thread's priority"
        );
    }
}

/// Writes a snapshot durably and removes all but the newest two.
pub fn write_snapshot(data_dir: &Path, snapshot: &Snapshot) -> Result<(), StoreError> {
    let dir = data_dir.join("snapshots");
    fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let mut header = Vec::with_capacity(SNAPSHOT_HEADER_BYTES);
    header.extend_from_slice(&snapshot.index.to_le_bytes());
    header.extend_from_slice(&snapshot.epoch.to_le_bytes());
    header.extend_from_slice(&(snapshot.state.len() as u64).to_le_bytes());
    let crc = snapshot_crc(snapshot.index, snapshot.epoch, &snapshot.state);
    header.extend_from_slice(&crc.to_le_bytes());
    let path = dir.join(format!("{:020}.snap", snapshot.index));
    let mut file = tempfile::NamedTempFile::new_in(&dir).map_err(io_error(&dir))?;
    file.write_all(&header).map_err(io_error(&path))?;
    // Synced as it goes: a journal fsync issued meanwhile then waits for
    // one piece at most, not for the whole file's writeback.
    for piece in snapshot.state.chunks(SNAPSHOT_SYNC_BYTES) {
        file.write_all(piece).map_err(io_error(&path))?;
        file.as_file().sync_data().map_err(io_error(&path))?;
    }
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

    fn journal_with(dir: &Path, epochs: &[u64]) -> Journal<FsStorage> {
        let (mut journal, _) = open_journal(dir).unwrap();
        for &epoch in epochs {
            journal.append(epoch, b"e").unwrap();
        }
        journal.sync().unwrap();
        journal
    }

    fn snapshot(index: u64, epoch: u64) -> Snapshot {
        Snapshot {
            index,
            epoch,
            state: b"state".to_vec(),
        }
    }

    #[test]
    fn an_installed_snapshot_is_what_recovery_starts_from() {
        // Behind the snapshot: the journal restarts at its index.
        let dir = tempfile::tempdir().unwrap();
        let mut journal = journal_with(dir.path(), &[1]);
        install_snapshot(dir.path(), &mut journal, &snapshot(5, 2)).unwrap();
        drop(journal);
        let recovery = recover(dir.path()).unwrap();
        let found = recovery.snapshot.unwrap();
        assert_eq!((found.index, found.epoch), (5, 2));
        assert_eq!(found.state, b"state");
        assert!(recovery.entries.is_empty());
        assert_eq!(recovery.journal.next_index(), 5);
        // Ahead of it: the entries after the snapshot are kept.
        let dir = tempfile::tempdir().unwrap();
        let mut journal = journal_with(dir.path(), &[1, 1, 1, 1]);
        install_snapshot(dir.path(), &mut journal, &snapshot(2, 1)).unwrap();
        drop(journal);
        let recovery = recover(dir.path()).unwrap();
        assert_eq!(recovery.snapshot.unwrap().index, 2);
        assert_eq!(recovery.entries.len(), 2);
    }

    #[test]
    fn a_truncated_tail_takes_the_snapshots_covering_it_along() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = journal_with(dir.path(), &[1, 1, 1, 1, 1]);
        write_snapshot(dir.path(), &snapshot(2, 1)).unwrap();
        write_snapshot(dir.path(), &snapshot(4, 1)).unwrap();
        truncate_journal(dir.path(), &mut journal, 3).unwrap();
        drop(journal);
        let recovery = recover(dir.path()).unwrap();
        assert_eq!(recovery.snapshot.unwrap().index, 2);
        assert_eq!(recovery.entries.len(), 1);
        assert_eq!(recovery.journal.next_index(), 3);
    }

    #[test]
    fn promises_persist() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_promise(dir.path()).unwrap(), 0);
        write_promise(dir.path(), 7).unwrap();
        write_promise(dir.path(), 9).unwrap();
        assert_eq!(read_promise(dir.path()).unwrap(), 9);
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

#[cfg(test)]
mod properties {
    //! Snapshot files and the promise are read from disk and trusted no
    //! more than the journal: any content gives the snapshot that was
    //! written or a `Snapshot` error naming the file, never a panic, and a
    //! header claiming a huge state is refused for what the file holds, not
    //! allocated for. Long run:
    //! `PROPTEST_CASES=100000 cargo test -p cohort --lib journal::durable`.
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::Index;

    fn config() -> ProptestConfig {
        // Each case writes a file; `proptest!` lets PROPTEST_CASES override.
        ProptestConfig::with_cases(128)
    }

    fn header(index: u64, epoch: u64, len: u64, crc: u32) -> Vec<u8> {
        [
            &index.to_le_bytes()[..],
            &epoch.to_le_bytes(),
            &len.to_le_bytes(),
            &crc.to_le_bytes(),
        ]
        .concat()
    }

    /// Reads `bytes` as the snapshot file for `index`.
    fn read_as(index: u64, bytes: &[u8]) -> Result<Option<Snapshot>, StoreError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let snapshots = dir.path().join("snapshots");
        fs::create_dir_all(&snapshots).expect("snapshots dir");
        fs::write(snapshots.join(format!("{index:020}.snap")), bytes).expect("write");
        latest_snapshot(dir.path())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_file_is_a_well_formed_snapshot_or_an_error(
            index in 0..4u64,
            claimed in prop_oneof![0..4u64, 0..64u64, any::<u64>()],
            epoch in any::<u64>(),
            crc in any::<u32>(),
            state in vec(any::<u8>(), 0..64),
            headerless in any::<bool>(),
        ) {
            let bytes = if headerless {
                state.clone()
            } else {
                [header(index, epoch, claimed, crc), state.clone()].concat()
            };
            match read_as(index, &bytes) {
                Ok(Some(snapshot)) => {
                    // Only a consistent file is accepted, and read as written.
                    prop_assert_eq!(snapshot.state.len() as u64, claimed);
                    let sums = [
                        snapshot_crc(index, epoch, &snapshot.state),
                        crc32fast::hash(&snapshot.state),
                    ];
                    prop_assert!(sums.contains(&crc));
                    prop_assert_eq!((snapshot.index, snapshot.epoch), (index, epoch));
                }
                Ok(None) => prop_assert!(false, "the file was not found"),
                Err(error) => {
                    let named = matches!(error, StoreError::Snapshot { .. });
                    prop_assert!(named, "{error}");
                }
            }
        }

        #[test]
        fn a_damaged_snapshot_is_an_error(
            state in vec(any::<u8>(), 0..64),
            at in any::<Index>(),
            how in 0..3u8,
            with in any::<u8>(),
        ) {
            let snapshot = Snapshot { index: 7, epoch: 3, state };
            let dir = tempfile::tempdir()?;
            write_snapshot(dir.path(), &snapshot)?;
            let path = dir.path().join("snapshots").join(format!("{:020}.snap", 7));
            let mut bytes = fs::read(&path)?;
            let at = at.index(bytes.len());
            match how {
                0 => bytes[at] ^= 1 << (with % 8),
                1 => bytes.truncate(at),
                _ => bytes.insert(at, with),
            }
            let read = read_as(7, &bytes);
            prop_assert!(matches!(read, Err(StoreError::Snapshot { .. })), "{read:?}");
        }

        #[test]
        fn any_promise_file_is_an_epoch_or_an_error(text in any::<String>()) {
            let dir = tempfile::tempdir()?;
            fs::write(dir.path().join("promise"), &text)?;
            match read_promise(dir.path()) {
                Ok(epoch) => prop_assert_eq!(Some(epoch), text.trim().parse().ok()),
                Err(error) => {
                    let named = matches!(error, StoreError::Snapshot { .. });
                    prop_assert!(named, "{error}");
                }
            }
        }
    }

    /// Found by `a_damaged_snapshot_is_an_error`: the checksum covered the
    /// state only, so a flipped bit in the epoch went unnoticed.
    #[test]
    fn a_flipped_epoch_is_a_checksum_mismatch() {
        let snapshot = Snapshot {
            index: 7,
            epoch: 2,
            state: vec![0; 10],
        };
        let dir = tempfile::tempdir().unwrap();
        write_snapshot(dir.path(), &snapshot).unwrap();
        let path = dir.path().join("snapshots").join(format!("{:020}.snap", 7));
        let mut bytes = fs::read(&path).unwrap();
        bytes[8] ^= 1;
        match read_as(7, &bytes) {
            Err(StoreError::Snapshot { reason, .. }) => assert_eq!(reason, "checksum mismatch"),
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
    }

    /// Snapshots written before the checksum covered the header still load.
    #[test]
    fn a_snapshot_checksummed_over_its_state_alone_still_reads() {
        let state = b"state".to_vec();
        let bytes = [header(4, 2, 5, crc32fast::hash(&state)), state.clone()].concat();
        let read = read_as(4, &bytes).unwrap().unwrap();
        assert_eq!((read.index, read.epoch, read.state), (4, 2, state));
    }

    /// 28 bytes of header claiming a 2^64 - 1 byte state: refused as
    /// truncated, never read or allocated for.
    #[test]
    fn a_header_claiming_a_huge_state_is_truncated_not_allocated() {
        let bytes = header(1, 1, u64::MAX, 0);
        match read_as(1, &bytes) {
            Err(StoreError::Snapshot { reason, .. }) => assert_eq!(reason, "truncated"),
            other => panic!("expected a truncated snapshot, got {other:?}"),
        }
    }
}
