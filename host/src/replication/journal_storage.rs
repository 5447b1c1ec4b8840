//! The replication core's [`Storage`] over this node's data directory: the
//! journal files, the snapshot files and the promise file.
//!
//! * **Entries.** A journal entry's data is the master's event bytes
//!   (`[format version] ++ postcard`, the version byte is small) or one of
//!   the replication core's own entries, told apart by a first byte no
//!   event starts with: [`TAG_NOOP`] (a new master's first entry) and
//!   [`TAG_VOTERS`] (`++ postcard` of the voter set). The master never sees
//!   those two ([`is_master_event`]).
//! * **Snapshots.** A snapshot file's state is [`SNAPSHOT_MAGIC`] `++
//!   postcard(voters, master state)`, so the voter set in force at the
//!   snapshot survives compaction. A file without the magic byte is the
//!   master's state alone (written before the voter set was journaled).
//! * **A window in memory.** The newest entries (up to [`REPLICATION_WINDOW_BYTES_MAX`])
//!   are kept in memory as appended, so sending them to replicas reads no
//!   file; a replica further behind is served from the segment files (a
//!   read loads whole segments, which is fine for catching up and ruinous
//!   per append: the first version did that, and three nodes ran 856
//!   jobs/s instead of thousands).
//! * **The core's view.** Entries physically still held below the newest
//!   snapshot's index (a segment is deleted only once wholly below it) are
//!   hidden: the shape starts at the snapshot, whose last entry's epoch is
//!   `base_epoch`.
//!
//! [`REPLICATION_WINDOW_BYTES_MAX`]: crate::limits::REPLICATION_WINDOW_BYTES_MAX

use crate::journal::durable::{self, Snapshot as StoredSnapshot};
use crate::journal::{FsStorage, Journal};
use crate::limits::{REPLICATION_WINDOW_BYTES_MAX, RESTORE_CHUNK, SLOW_SYNC};
use cohort_replication::{
    Entry, NodeId, Payload, Shape, Snapshot, Storage, StorageError, take_within,
};
use std::path::{Path, PathBuf};

/// First byte of a new master's `Noop` entry.
pub const TAG_NOOP: u8 = 0xF0;
/// First byte of a voter-set entry (then postcard of the sorted node ids).
pub const TAG_VOTERS: u8 = 0xF1;
/// First byte of a snapshot state that carries the voter set.
pub const SNAPSHOT_MAGIC: u8 = 0xFA;

/// Encodes a payload as journal entry data.
pub fn encode_payload(payload: &Payload) -> Vec<u8> {
    match payload {
        Payload::Noop => vec![TAG_NOOP],
        Payload::Voters(voters) => {
            let mut data = vec![TAG_VOTERS];
            data.extend(postcard::to_allocvec(voters).expect("strings encode"));
            data
        }
        Payload::Data(data) => {
            debug_assert!(
                !matches!(data.first(), Some(&TAG_NOOP | &TAG_VOTERS)),
                "master events never start with a replication tag"
            );
            data.clone()
        }
    }
}

/// Decodes journal entry data (hostile-safe: a damaged voter entry is an
/// error, not a panic).
pub fn decode_payload(data: Vec<u8>) -> Result<Payload, StorageError> {
    match data.first() {
        Some(&TAG_NOOP) if data.len() == 1 => Ok(Payload::Noop),
        Some(&TAG_VOTERS) => postcard::from_bytes::<Vec<String>>(&data[1..])
            .map(Payload::Voters)
            .map_err(|e| StorageError(format!("a damaged voter-set entry: {e}"))),
        _ => Ok(Payload::Data(data)),
    }
}

/// Whether a journal entry's data is the master's (not replication's own
/// no-op or voter change).
pub fn is_master_event(data: &[u8]) -> bool {
    !matches!(data.first(), Some(&TAG_NOOP | &TAG_VOTERS))
}

/// Splits a snapshot file's state into the voter set and the master's
/// state.
pub fn split_snapshot_state(state: &[u8]) -> Result<(Vec<NodeId>, Vec<u8>), StorageError> {
    match state.first() {
        Some(&SNAPSHOT_MAGIC) => postcard::from_bytes::<(Vec<String>, Vec<u8>)>(&state[1..])
            .map_err(|e| StorageError(format!("a damaged snapshot: {e}"))),
        _ => Ok((Vec::new(), state.to_vec())),
    }
}

/// Writes `snapshot` durably as this node's newest snapshot file (the
/// voter set with the master's state), without touching the journal: safe
/// on any thread, before the journal is compacted under it.
pub fn write_snapshot(dir: &Path, snapshot: &Snapshot) -> Result<(), durable::StoreError> {
    let stored = StoredSnapshot {
        index: snapshot.index,
        epoch: snapshot.epoch,
        state: join_snapshot_state(&snapshot.voters, &snapshot.state),
    };
    durable::write_snapshot(dir, &stored)
}

/// The state a snapshot file stores for `voters` and the master's state.
pub fn join_snapshot_state(voters: &[NodeId], master: &[u8]) -> Vec<u8> {
    let mut state = vec![SNAPSHOT_MAGIC];
    state.extend(postcard::to_allocvec(&(voters, master)).expect("encodes"));
    state
}

fn error(e: impl std::fmt::Display) -> StorageError {
    StorageError(format!("{e:#}"))
}

/// What the newest snapshot covers, kept in memory.
#[derive(Debug, Clone, Default)]
struct Base {
    index: u64,
    epoch: u64,
    voters: Vec<NodeId>,
}

/// The journal, snapshots and promise of one data directory.
#[derive(Debug)]
pub struct JournalStorage {
    dir: PathBuf,
    journal: Journal<FsStorage>,
    promise: u64,
    base: Base,
    /// Voter-set entries held at or above `base.index`: `(index, voters)`.
    configs: Vec<(u64, Vec<NodeId>)>,
    /// Bytes of a torn write cut off when the journal was opened.
    pub torn_bytes: u64,
    /// Fsyncs of the journal, and the time they took.
    pub syncs: u64,
    pub sync_nanos: u64,
    /// The newest entries, contiguous up to the journal's end.
    window: std::collections::VecDeque<Entry>,
    window_bytes: usize,
    /// A snapshot file already written durably (by another thread) for
    /// this index: `install` then only compacts.
    written: Option<u64>,
}

impl JournalStorage {
    /// Says the snapshot file for `index` was written durably already
    /// ([`write_snapshot`]): the next `install` at `index` only compacts.
    pub fn snapshot_written(&mut self, index: u64) {
        self.written = Some(index);
    }

    /// Opens (creating) the journal in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        let promise = durable::read_promise(dir).map_err(error)?;
        let base = match durable::latest_snapshot(dir).map_err(error)? {
            Some(snapshot) => Base {
                index: snapshot.index,
                epoch: snapshot.epoch,
                voters: split_snapshot_state(&snapshot.state)?.0,
            },
            None => Base::default(),
        };
        // Of the entries, only the voter changes since the snapshot are
        // kept (the master's events are read when it starts).
        let (journal, recovered) = durable::open_journal_keeping(dir, |index, data| {
            index >= base.index && data.first() == Some(&TAG_VOTERS)
        })
        .map_err(error)?;
        let mut configs = Vec::new();
        for entry in recovered.entries {
            if let Payload::Voters(voters) = decode_payload(entry.data)? {
                configs.push((entry.index, voters));
            }
        }
        let mut storage = Self {
            dir: dir.to_path_buf(),
            journal,
            promise,
            base,
            configs,
            torn_bytes: recovered.torn_bytes,
            syncs: 0,
            sync_nanos: 0,
            window: std::collections::VecDeque::new(),
            window_bytes: 0,
            written: None,
        };
        // The epoch of the snapshot's last entry, when the journal still
        // holds it (a snapshot's own epoch is its master's).
        if let Some(epoch) = storage
            .journal
            .shape()
            .epoch_at(storage.base.index.wrapping_sub(1))
        {
            storage.base.epoch = epoch;
        }
        Ok(storage)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The voter set in force for the entries below `index`: the newest
    /// `Voters` entry before it, else the snapshot's (what a snapshot at
    /// `index` must carry; a newer, uncommitted change may still be cut).
    pub fn voters_before(&self, index: u64) -> Vec<NodeId> {
        self.configs
            .iter()
            .rev()
            .find(|(at, _)| *at < index)
            .map(|(_, voters)| voters.clone())
            .unwrap_or_else(|| self.base.voters.clone())
    }

    /// Index the next entry gets.
    pub fn next_index(&self) -> u64 {
        self.journal.next_index()
    }

    /// The newest snapshot's master state and the master's events after it:
    /// what a master starts from.
    pub fn restore(&self) -> Result<(Option<StoredSnapshot>, Vec<Vec<u8>>), StorageError> {
        self.restore_plan().read()
    }

    /// What [`restore`](Self::restore) reads, to read it on another
    /// thread: the journal as it ends now.
    pub fn restore_plan(&self) -> Restore {
        Restore {
            dir: self.dir.clone(),
            first: self.base.index.max(self.journal.shape().first),
            end: self.journal.next_index(),
            tail: None,
        }
    }
}

/// A master's starting point to be read from a data directory, up to the
/// journal's end when it was planned ([`JournalStorage::restore_plan`]).
/// Reads through its own file handles, so the replication thread goes on
/// meanwhile (a million entries take about a quarter of a second, each
/// segment read once); entries are only ever appended past `end`
/// meanwhile.
#[derive(Debug, Clone)]
pub struct Restore {
    dir: PathBuf,
    first: u64,
    end: u64,
    /// Only the entries from here: a warm standby holds the state before
    /// ([`crate::master::standby`]).
    tail: Option<u64>,
}

impl Restore {
    /// The index the read ends at (exclusive).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The index of the oldest entry held when planned.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The same read, ending at `end` instead (at most the planned end).
    pub fn until(mut self, end: u64) -> Self {
        self.end = self.end.min(end);
        self
    }

    /// Only the events from `from` on, with no snapshot.
    pub fn tail(mut self, from: u64) -> Self {
        self.tail = Some(from);
        self
    }

    /// The newest snapshot and the master's events from its index up to
    /// the planned end (for a [`tail`](Self::tail): no snapshot, and the
    /// events from there). A snapshot past the planned end (the journal
    /// was replaced meanwhile) is an error: what follows the read would
    /// not follow that state.
    pub fn read(&self) -> Result<(Option<StoredSnapshot>, Vec<Vec<u8>>), StorageError> {
        let snapshot = self.read_snapshot()?;
        let mut events = Vec::new();
        self.read_events(snapshot.as_ref().map(|s| s.index), |chunk| {
            events.extend(chunk);
            true
        })?;
        Ok((snapshot, events))
    }

    /// [`read`](Self::read)'s snapshot alone.
    pub fn read_snapshot(&self) -> Result<Option<StoredSnapshot>, StorageError> {
        let mut snapshot = match self.tail {
            Some(_) => None,
            None => durable::latest_snapshot(&self.dir).map_err(error)?,
        };
        if let Some(snapshot) = &mut snapshot {
            snapshot.state = split_snapshot_state(&snapshot.state)?.1;
        }
        if let Some(snapshot) = &snapshot
            && snapshot.index > self.end
        {
            return Err(StorageError(format!(
                "the journal was replaced by a snapshot at {}, past the planned end {}",
                snapshot.index, self.end
            )));
        }
        Ok(snapshot)
    }

    /// [`read`](Self::read)'s events after the snapshot at `snapshot_index`
    /// (what [`read_snapshot`](Self::read_snapshot) gave), handed to `chunk` in
    /// order, [`RESTORE_CHUNK`] at a time, so a master replays the first
    /// while the rest are read. Stops early, with no error, once `chunk`
    /// returns false; an error says the events handed so far are not all.
    pub fn read_events(
        &self,
        snapshot_index: Option<u64>,
        mut chunk: impl FnMut(Vec<Vec<u8>>) -> bool,
    ) -> Result<(), StorageError> {
        // The events after the snapshot read, whichever it is.
        let mut next = (self.tail).or(snapshot_index).unwrap_or(self.first);
        let journal = FsStorage::open(&self.dir.join("journal")).map_err(error)?;
        let mut events = Vec::with_capacity(RESTORE_CHUNK);
        let mut wanted = true;
        crate::journal::log::visit_entries(&journal, next, |index, _, data| {
            if index >= self.end {
                return false;
            }
            next = index + 1;
            if is_master_event(data) {
                events.push(data.to_vec());
                if events.len() == RESTORE_CHUNK {
                    let full = std::mem::replace(&mut events, Vec::with_capacity(RESTORE_CHUNK));
                    wanted = chunk(full);
                }
            }
            wanted
        })
        .map_err(error)?;
        if !wanted {
            return Ok(());
        }
        if next < self.end {
            return Err(StorageError(format!(
                "the journal holds entries up to {next}, not up to {}",
                self.end
            )));
        }
        if !events.is_empty() {
            chunk(events);
        }
        Ok(())
    }
}

impl Storage for JournalStorage {
    fn shape(&self) -> Shape {
        let held = self.journal.shape();
        let first = held.first.max(self.base.index);
        let runs: Vec<(u64, u64)> = held
            .runs
            .iter()
            .enumerate()
            .filter_map(|(i, &(start, epoch))| {
                let end = held.runs.get(i + 1).map_or(held.next, |r| r.0);
                (end > first).then_some((start.max(first), epoch))
            })
            .collect();
        let last_epoch = runs.last().map_or(self.base.epoch, |&(_, epoch)| epoch);
        Shape {
            first,
            next: held.next.max(first),
            runs,
            last_epoch,
            base_epoch: self.base.epoch,
        }
    }

    fn promise(&self) -> u64 {
        self.promise
    }

    fn set_promise(&mut self, epoch: u64) -> Result<(), StorageError> {
        assert!(epoch >= self.promise, "a promise never goes down");
        if epoch > self.promise {
            durable::write_promise(&self.dir, epoch).map_err(error)?;
            self.promise = epoch;
        }
        Ok(())
    }

    fn append(&mut self, epoch: u64, payload: Payload) -> Result<(), StorageError> {
        let index = self.journal.next_index();
        if let Payload::Voters(voters) = &payload {
            self.configs.push((index, voters.clone()));
        }
        self.journal
            .append(epoch, &encode_payload(&payload))
            .map_err(error)?;
        self.window_bytes += payload.size();
        self.window.push_back(Entry {
            index,
            epoch,
            payload,
        });
        while self.window_bytes > REPLICATION_WINDOW_BYTES_MAX
            && let Some(old) = self.window.pop_front()
        {
            self.window_bytes -= old.payload.size();
        }
        Ok(())
    }

    fn truncate(&mut self, index: u64) -> Result<(), StorageError> {
        durable::truncate_journal(&self.dir, &mut self.journal, index).map_err(error)?;
        self.configs.retain(|(at, _)| *at < index);
        while self.window.back().is_some_and(|e| e.index >= index) {
            let cut = self.window.pop_back().expect("checked");
            self.window_bytes -= cut.payload.size();
        }
        if self.journal.shape().first == 0 && self.journal.next_index() == 0 {
            // Emptied (what was left could not stand on its own).
            self.base = Base::default();
            self.configs.clear();
            self.window.clear();
            self.window_bytes = 0;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        if self.journal.sync().map_err(error)? {
            self.syncs += 1;
            self.sync_nanos += started.elapsed().as_nanos() as u64;
        }
        if started.elapsed() > SLOW_SYNC {
            tracing::info!(elapsed = ?started.elapsed(), "slow journal fsync");
        }
        Ok(())
    }

    fn read(&self, from: u64, bytes_max: usize) -> Result<Vec<Entry>, StorageError> {
        if let Some(first) = self.window.front()
            && from >= first.index
        {
            let skip = (from - first.index) as usize;
            return Ok(take_within(self.window.iter().skip(skip), bytes_max));
        }
        self.journal
            .read_from(from, bytes_max)
            .map_err(error)?
            .into_iter()
            .map(|e| {
                Ok(Entry {
                    index: e.index,
                    epoch: e.epoch,
                    payload: decode_payload(e.data)?,
                })
            })
            .collect()
    }

    fn snapshot(&self) -> Result<Option<Snapshot>, StorageError> {
        let Some(stored) = durable::latest_snapshot(&self.dir).map_err(error)? else {
            return Ok(None);
        };
        let (voters, state) = split_snapshot_state(&stored.state)?;
        Ok(Some(Snapshot {
            index: stored.index,
            epoch: self.base.epoch,
            voters,
            state,
        }))
    }

    fn install(&mut self, snapshot: Snapshot) -> Result<(), StorageError> {
        if snapshot.index <= self.base.index && self.base.index > 0 {
            return Ok(());
        }
        let shape = self.shape();
        let keeps_tail = snapshot.index > shape.first
            && shape.epoch_at(snapshot.index - 1) == Some(snapshot.epoch);
        if self.written.take() != Some(snapshot.index) {
            write_snapshot(&self.dir, &snapshot).map_err(|e| StorageError(e.to_string()))?;
        }
        if keeps_tail {
            self.journal.compact(snapshot.index).map_err(error)?;
        } else {
            self.journal
                .reset_to(snapshot.index, snapshot.epoch)
                .map_err(error)?;
            self.configs.clear();
            self.window.clear();
            self.window_bytes = 0;
        }
        while self
            .window
            .front()
            .is_some_and(|e| e.index < snapshot.index)
        {
            let old = self.window.pop_front().expect("checked");
            self.window_bytes -= old.payload.size();
        }
        self.configs.retain(|(at, _)| *at >= snapshot.index);
        self.base = Base {
            index: snapshot.index,
            epoch: snapshot.epoch,
            voters: snapshot.voters,
        };
        Ok(())
    }

    fn voters(&self) -> Vec<NodeId> {
        self.configs
            .last()
            .map(|(_, voters)| voters.clone())
            .unwrap_or_else(|| self.base.voters.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restore planned now reads up to the journal's end now, through
    /// its own handles, whatever is appended meanwhile; from the snapshot
    /// it finds.
    #[test]
    fn a_planned_restore_reads_up_to_the_planned_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut storage = JournalStorage::open(dir.path()).unwrap();
        storage.set_promise(1).unwrap();
        storage.append(1, Payload::Noop).unwrap();
        storage.append(1, Payload::Data(vec![1, 1])).unwrap();
        storage
            .install(Snapshot {
                index: 2,
                epoch: 1,
                voters: Vec::new(),
                state: b"after 1".to_vec(),
            })
            .unwrap();
        storage.append(1, Payload::Data(vec![1, 2])).unwrap();
        storage.sync().unwrap();
        let plan = storage.restore_plan();
        storage.append(1, Payload::Data(vec![1, 3])).unwrap();
        storage.sync().unwrap();
        let (snapshot, events) = plan.read().unwrap();
        assert_eq!(snapshot.unwrap().state, b"after 1");
        assert_eq!(events, vec![vec![1, 2]]);
        let (_, events) = storage.restore().unwrap();
        assert_eq!(events, vec![vec![1, 2], vec![1, 3]]);
        // A standby's plans: up to a commit index, and a tail alone.
        let committed = storage.restore_plan().until(3);
        assert_eq!(committed.end(), 3);
        assert_eq!(committed.read().unwrap().1, vec![vec![1, 2]]);
        let (snapshot, events) = storage.restore_plan().tail(3).read().unwrap();
        assert!(snapshot.is_none());
        assert_eq!(events, vec![vec![1, 3]]);
        // Replaced past the planned end meanwhile: refused, not misread.
        let stale = storage.restore_plan().until(2);
        storage
            .install(Snapshot {
                index: 4,
                epoch: 1,
                voters: Vec::new(),
                state: b"after 3".to_vec(),
            })
            .unwrap();
        assert!(stale.read().is_err());
    }

    /// A restore's events come in chunks of [`RESTORE_CHUNK`], the
    /// replication core's own entries left out, the same as one read;
    /// a reader that stops early stops the read without an error.
    #[test]
    fn a_restore_hands_its_events_on_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let mut storage = JournalStorage::open(dir.path()).unwrap();
        storage.set_promise(1).unwrap();
        let count = 2 * RESTORE_CHUNK + 5;
        for n in 0..count {
            if n % 1000 == 0 {
                storage.append(1, Payload::Noop).unwrap();
            }
            // A master event starts with its format's version byte.
            let event = [&[1][..], &(n as u32).to_le_bytes()].concat();
            storage.append(1, Payload::Data(event)).unwrap();
        }
        storage.sync().unwrap();
        let plan = storage.restore_plan();
        let mut chunks = Vec::new();
        plan.read_events(None, |chunk| {
            chunks.push(chunk);
            true
        })
        .unwrap();
        let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![RESTORE_CHUNK, RESTORE_CHUNK, 5]);
        let all: Vec<Vec<u8>> = chunks.into_iter().flatten().collect();
        assert_eq!(all, plan.read().unwrap().1);
        let numbers = all
            .iter()
            .map(|e| u32::from_le_bytes(e[1..].try_into().unwrap()));
        assert!(numbers.eq(0..count as u32));
        let mut taken = 0;
        plan.read_events(None, |_| {
            taken += 1;
            false
        })
        .unwrap();
        assert_eq!(taken, 1);
    }

    #[test]
    fn entries_snapshots_and_the_voter_set_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut storage = JournalStorage::open(dir.path()).unwrap();
        storage.set_promise(2).unwrap();
        storage.append(2, Payload::Noop).unwrap();
        storage
            .append(2, Payload::Voters(vec!["a".into(), "b".into()]))
            .unwrap();
        storage.append(2, Payload::Data(vec![1, 9])).unwrap();
        storage.sync().unwrap();
        drop(storage);
        let mut storage = JournalStorage::open(dir.path()).unwrap();
        assert_eq!(storage.promise(), 2);
        assert_eq!(storage.voters(), vec!["a", "b"]);
        assert_eq!(storage.shape().next, 3);
        let read = storage.read(0, 1 << 20).unwrap();
        assert_eq!(read[0].payload, Payload::Noop);
        assert_eq!(read[2].payload, Payload::Data(vec![1, 9]));
        // Compact at 3: the snapshot carries the voters.
        storage
            .install(Snapshot {
                index: 3,
                epoch: 2,
                voters: vec!["a".into(), "b".into()],
                state: b"master".to_vec(),
            })
            .unwrap();
        storage.append(2, Payload::Data(vec![1, 10])).unwrap();
        storage.sync().unwrap();
        drop(storage);
        let storage = JournalStorage::open(dir.path()).unwrap();
        let shape = storage.shape();
        assert_eq!((shape.first, shape.next, shape.base_epoch), (3, 4, 2));
        assert_eq!(storage.voters(), vec!["a", "b"]);
        let (snapshot, events) = storage.restore().unwrap();
        assert_eq!(snapshot.unwrap().state, b"master");
        assert_eq!(events, vec![vec![1, 10]]);
    }

    #[test]
    fn a_foreign_snapshot_replaces_a_journal_that_does_not_line_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut storage = JournalStorage::open(dir.path()).unwrap();
        for _ in 0..3 {
            storage.append(1, Payload::Data(vec![1])).unwrap();
        }
        storage.sync().unwrap();
        storage
            .install(Snapshot {
                index: 2,
                epoch: 3,
                voters: vec!["x".into()],
                state: vec![],
            })
            .unwrap();
        let shape = storage.shape();
        assert_eq!((shape.first, shape.next, shape.last_epoch), (2, 2, 3));
        assert_eq!(storage.voters(), vec!["x"]);
    }

    #[test]
    fn a_snapshot_gets_the_voters_in_force_at_its_index_not_a_later_change() {
        let dir = tempfile::tempdir().unwrap();
        let mut storage = JournalStorage::open(dir.path()).unwrap();
        storage
            .append(1, Payload::Voters(vec!["a".into()]))
            .unwrap();
        storage.append(1, Payload::Data(vec![1])).unwrap();
        storage
            .append(1, Payload::Voters(vec!["a".into(), "b".into()]))
            .unwrap();
        assert_eq!(storage.voters_before(2), vec!["a"]);
        assert_eq!(storage.voters_before(3), vec!["a", "b"]);
        assert_eq!(storage.voters(), vec!["a", "b"]);
    }

    #[test]
    fn damaged_voter_entries_are_errors() {
        assert!(decode_payload(vec![TAG_VOTERS, 0xFF, 0xFF]).is_err());
        assert_eq!(
            decode_payload(vec![1, 2]).unwrap(),
            Payload::Data(vec![1, 2])
        );
    }
}
