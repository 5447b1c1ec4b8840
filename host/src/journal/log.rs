//! The append-only journal: numbered entries in framed segment files.
//!
//! Each entry is `(index, epoch, data)`. Indexes are dense and start at 0;
//! epochs never decrease (a new master incarnation writes with a higher
//! epoch); data is opaque to the journal (the master's events).
//!
//! Entries go to the newest segment; a segment is named by the index of its
//! first entry and closed once it passes [`SEGMENT_BYTES_MAX`]. Appends are
//! buffered by the OS until [`Journal::sync`]; callers batch many appends
//! per sync (group commit) and acknowledge nothing before it returns.
//!
//! # Recovery
//!
//! [`Journal::open`] reads every segment and checks, beyond the frame
//! checksums, that indexes are dense and in order and epochs never decrease.
//! A torn tail of the newest segment (a crash during a write) is cut off and
//! reported; anything else wrong is [`JournalError::Corrupt`] with the
//! segment and offset: a node must not start on a journal that lost
//! acknowledged entries without anyone being told.
//!
//! # Compaction
//!
//! Once a snapshot covers every entry below some index, [`Journal::compact`]
//! deletes the segments that hold only such entries, so recovery time stays
//! bounded by the snapshot interval rather than the journal's age.
//!
//! # Replicas
//!
//! Back-end nodes keep copies of the master's journal (see
//! `crate::replication`). Two journals are compared by their [`Shape`]: the
//! range of entries they hold and the epoch of each run of entries. Two
//! entries with the same index and epoch are the same entry (one master
//! per epoch wrote it, and replicas only take entries in order), so the
//! first index where the epochs differ is where two journals diverge. A
//! replica drops its entries from there on ([`Journal::truncate_from`]) and
//! takes the master's; a replica too far behind gets a snapshot instead and
//! restarts its journal at the snapshot's index ([`Journal::reset_to`]).
//!
//! [`SEGMENT_BYTES_MAX`]: crate::limits::SEGMENT_BYTES_MAX

use super::frame::{self, Tail};
use super::storage::Storage;
use crate::limits::SEGMENT_BYTES_MAX;

/// Bytes of an entry's header inside its frame: index and epoch.
const ENTRY_HEADER_BYTES: usize = 16;

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Position in the journal, dense from 0.
    pub index: u64,
    /// The master epoch that wrote it.
    pub epoch: u64,
    /// The payload (opaque to the journal).
    pub data: Vec<u8>,
}

/// What [`Journal::open`] found.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Every entry still in the journal, in order (those kept, for
    /// [`Journal::open_keeping`]).
    pub entries: Vec<Entry>,
    /// Bytes of an unfinished write cut from the end, if any.
    pub torn_bytes: u64,
}

/// Why the journal cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The storage failed.
    #[error("journal I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Durable data is damaged or inconsistent. Not repaired automatically.
    #[error("journal segment {segment} is corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// The segment's id.
        segment: u64,
        /// Byte offset of the bad frame or entry in the segment.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// An append at the last index a `u64` can name: its entry would have
    /// no successor (only a snapshot index sent by a faulty node leads
    /// here).
    #[error("the journal is full: no entry can follow index {index}")]
    Full {
        /// The index the refused entry would have had.
        index: u64,
    },
    /// An append with an epoch lower than the journal's last.
    #[error("epoch {epoch} is older than the journal's epoch {last_epoch}")]
    StaleEpoch {
        /// The epoch of the refused append.
        epoch: u64,
        /// The newest epoch in the journal.
        last_epoch: u64,
    },
}

/// Which entries a journal holds and which epochs wrote them: the
/// replication core's [`Shape`](cohort_replication::Shape), one definition
/// for the journal and the protocol. A journal alone does not know the
/// epoch of the last entry compacted away, so its `base_epoch` is 0; the
/// replication storage fills it in from the snapshot.
pub use cohort_replication::Shape;

/// An open journal. See the module docs.
#[derive(Debug)]
pub struct Journal<S: Storage> {
    storage: S,
    /// Id of the segment being appended to (the index of its first entry).
    segment: u64,
    segment_bytes: u64,
    next_index: u64,
    last_epoch: u64,
    /// Index of the oldest entry held.
    first_index: u64,
    /// Runs of entries by epoch, as in [`Shape::runs`].
    runs: Vec<(u64, u64)>,
    segment_bytes_max: u64,
    /// Whether anything was appended since the last sync.
    dirty: bool,
    /// Reused frame buffer.
    buffer: Vec<u8>,
}

impl<S: Storage> Journal<S> {
    /// Opens the journal in `storage`, recovering every entry (see the
    /// module docs for what is repaired and what is refused).
    pub fn open(storage: S) -> Result<(Self, Recovered), JournalError> {
        Self::open_with_segment_size(storage, SEGMENT_BYTES_MAX)
    }

    /// [`open`](Self::open), closing segments past `segment_bytes_max`.
    pub fn open_with_segment_size(
        storage: S,
        segment_bytes_max: u64,
    ) -> Result<(Self, Recovered), JournalError> {
        Self::open_keeping(storage, segment_bytes_max, |_, _| true)
    }

    /// [`open_with_segment_size`](Self::open_with_segment_size), with only
    /// the entries `keep` (given an index and data) wants in
    /// [`Recovered::entries`]: every entry is still checked, but only
    /// those are copied (a node opening its journal needs few of them).
    pub fn open_keeping(
        mut storage: S,
        segment_bytes_max: u64,
        mut keep: impl FnMut(u64, &[u8]) -> bool,
    ) -> Result<(Self, Recovered), JournalError> {
        let segments = storage.segments()?;
        let mut recovered = Recovered::default();
        let first_index = segments.first().copied().unwrap_or(0);
        let mut next_index = first_index;
        let mut last_epoch = 0;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut segment_bytes = 0;
        for (position, &segment) in segments.iter().enumerate() {
            let is_newest = position + 1 == segments.len();
            let bytes = storage.read(segment)?;
            let corrupt = |offset: usize, reason: String| JournalError::Corrupt {
                segment,
                offset: offset as u64,
                reason,
            };
            if segment != next_index {
                return Err(corrupt(
                    0,
                    format!("segment should start at index {next_index}"),
                ));
            }
            let scan = frame::scan(&bytes);
            let mut offset = 0;
            for payload in scan.payloads {
                let (index, epoch, data) = split_entry(payload)
                    .ok_or_else(|| corrupt(offset, "entry shorter than its header".into()))?;
                if index != next_index {
                    return Err(corrupt(
                        offset,
                        format!("entry {index} where {next_index} was expected"),
                    ));
                }
                if epoch < last_epoch {
                    return Err(corrupt(
                        offset,
                        format!("epoch {epoch} after epoch {last_epoch}"),
                    ));
                }
                // Only a damaged or forged segment gets here (u64::MAX as
                // the index of an entry leaves no index for the next).
                let Some(after) = next_index.checked_add(1) else {
                    return Err(corrupt(offset, format!("entry {index} has no successor")));
                };
                offset += frame::FRAME_HEADER_BYTES + payload.len();
                if runs.last().is_none_or(|&(_, run)| run != epoch) {
                    runs.push((index, epoch));
                }
                next_index = after;
                last_epoch = epoch;
                if keep(index, data) {
                    recovered.entries.push(Entry {
                        index,
                        epoch,
                        data: data.to_vec(),
                    });
                }
            }
            match scan.tail {
                Tail::Clean => {}
                Tail::Torn { at } if is_newest => {
                    recovered.torn_bytes = (bytes.len() - at) as u64;
                    storage.truncate(segment, at as u64)?;
                }
                Tail::Torn { at } => {
                    return Err(corrupt(
                        at,
                        "unfinished frame before the newest segment".into(),
                    ));
                }
                Tail::Corrupt { at, reason } => return Err(corrupt(at, reason.into())),
            }
            segment_bytes = offset as u64;
        }
        let journal = Self {
            storage,
            segment: segments.last().copied().unwrap_or(0),
            segment_bytes,
            next_index,
            last_epoch,
            first_index,
            runs,
            segment_bytes_max,
            dirty: false,
            buffer: Vec::new(),
        };
        Ok((journal, recovered))
    }

    /// Index the next appended entry gets.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Epoch of the newest entry (0 for an empty journal).
    pub fn last_epoch(&self) -> u64 {
        self.last_epoch
    }

    /// Which entries the journal holds, by epoch.
    pub fn shape(&self) -> Shape {
        Shape {
            first: self.first_index,
            next: self.next_index,
            runs: self.runs.clone(),
            last_epoch: self.last_epoch,
            base_epoch: 0,
        }
    }

    /// Drops every entry from `index` on, durably (a replica's entries that
    /// the master's journal does not have). Entries below the oldest held
    /// cannot be dropped this way: use [`reset_to`](Self::reset_to).
    pub fn truncate_from(&mut self, index: u64) -> Result<(), JournalError> {
        if index >= self.next_index {
            return Ok(());
        }
        if index < self.first_index {
            return Err(JournalError::Corrupt {
                segment: self.first_index,
                offset: 0,
                reason: format!(
                    "cannot cut the journal at {index}: it starts at {}",
                    self.first_index
                ),
            });
        }
        self.sync()?;
        let segments = self.storage.segments()?;
        let holder = segments
            .iter()
            .copied()
            .filter(|&segment| segment <= index)
            .max()
            .unwrap_or(self.first_index);
        // Find the byte offset of entry `index` in its segment.
        let bytes = self.storage.read(holder)?;
        let mut offset = 0u64;
        for payload in frame::scan(&bytes).payloads {
            if split_entry(payload).is_some_and(|(at, _, _)| at >= index) {
                break;
            }
            offset += (frame::FRAME_HEADER_BYTES + payload.len()) as u64;
        }
        self.storage.truncate(holder, offset)?;
        for &later in segments.iter().filter(|&&segment| segment > holder) {
            self.storage.remove(later)?;
        }
        self.segment = holder;
        self.segment_bytes = offset;
        self.next_index = index;
        self.runs.retain(|&(start, _)| start < index);
        // With no entry left, anything older was compacted: any epoch may
        // follow.
        self.last_epoch = self.runs.last().map_or(0, |&(_, epoch)| epoch);
        Ok(())
    }

    /// Drops every entry and continues at `index`, as if entries below it
    /// had been written by `epoch` and compacted: for a replica that took a
    /// snapshot at `index` because it lacked the entries before it.
    pub fn reset_to(&mut self, index: u64, epoch: u64) -> Result<(), JournalError> {
        for segment in self.storage.segments()? {
            self.storage.remove(segment)?;
        }
        // An empty segment named `index` records where the journal starts.
        self.storage.append(index, &[])?;
        self.storage.sync(index)?;
        self.segment = index;
        self.segment_bytes = 0;
        self.next_index = index;
        self.first_index = index;
        self.runs.clear();
        self.last_epoch = epoch;
        self.dirty = false;
        Ok(())
    }

    /// Entries from `from` on, at most about `bytes_max` of data (at least
    /// one entry if there is one), read from storage. Empty if `from` is
    /// below the oldest entry held or at the end.
    pub fn read_from(&self, from: u64, bytes_max: usize) -> Result<Vec<Entry>, JournalError> {
        read_entries(&self.storage, from, bytes_max)
    }

    /// Appends an entry written by `epoch`; returns its index. Not durable
    /// until [`sync`](Self::sync).
    pub fn append(&mut self, epoch: u64, data: &[u8]) -> Result<u64, JournalError> {
        if epoch < self.last_epoch {
            return Err(JournalError::StaleEpoch {
                epoch,
                last_epoch: self.last_epoch,
            });
        }
        let Some(after) = self.next_index.checked_add(1) else {
            return Err(JournalError::Full {
                index: self.next_index,
            });
        };
        if self.segment_bytes >= self.segment_bytes_max {
            // Close the full segment durably before any entry lands in the next.
            self.sync()?;
            self.segment = self.next_index;
            self.segment_bytes = 0;
        }
        let index = self.next_index;
        let mut header = [0u8; ENTRY_HEADER_BYTES];
        header[..8].copy_from_slice(&index.to_le_bytes());
        header[8..].copy_from_slice(&epoch.to_le_bytes());
        self.buffer.clear();
        frame::encode(&[&header, data], &mut self.buffer);
        self.storage.append(self.segment, &self.buffer)?;
        self.segment_bytes += self.buffer.len() as u64;
        self.next_index = after;
        if self.runs.last().is_none_or(|&(_, last)| last != epoch) {
            self.runs.push((index, epoch));
        }
        self.last_epoch = epoch;
        self.dirty = true;
        Ok(index)
    }

    /// Makes every appended entry durable. Cheap when nothing is pending;
    /// returns whether there was something to sync.
    pub fn sync(&mut self) -> Result<bool, JournalError> {
        if !self.dirty {
            return Ok(false);
        }
        self.storage.sync(self.segment)?;
        self.dirty = false;
        Ok(true)
    }

    /// Deletes whole segments whose entries all lie below `index` (they are
    /// covered by a snapshot). The newest segment is always kept. Returns the
    /// number of segments deleted.
    pub fn compact(&mut self, index: u64) -> Result<usize, JournalError> {
        let segments = self.storage.segments()?;
        let mut removed = 0;
        // Segment k holds [k, next segment's id): removable if that end <= index.
        for pair in segments.windows(2) {
            if pair[1] <= index {
                self.storage.remove(pair[0])?;
                removed += 1;
                self.first_index = pair[1];
            }
        }
        // Runs wholly below the oldest entry are gone with their segments.
        let first = self.first_index;
        let keep_from = self.runs.partition_point(|&(start, _)| start <= first);
        if keep_from > 1 {
            self.runs.drain(..keep_from - 1);
        }
        if let Some(run) = self.runs.first_mut() {
            run.0 = run.0.max(first);
        }
        Ok(removed)
    }

    /// The underlying storage (tests simulate crashes through it).
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// Closes the journal and returns its storage.
    pub fn into_storage(self) -> S {
        self.storage
    }
}

/// Entries from `from` on in `storage`, at most about `bytes_max` of data
/// (see [`Journal::read_from`]). Safe to call on storage another handle
/// appends to: an entry being written shows up as a torn tail and is not
/// returned.
pub fn read_entries<S: Storage + ?Sized>(
    storage: &S,
    from: u64,
    bytes_max: usize,
) -> Result<Vec<Entry>, JournalError> {
    let mut entries = Vec::new();
    let mut bytes = 0;
    visit_entries(storage, from, |index, epoch, data| {
        bytes += data.len();
        entries.push(Entry {
            index,
            epoch,
            data: data.to_vec(),
        });
        bytes < bytes_max
    })?;
    Ok(entries)
}

/// Calls `visit` with each entry from `from` on in `storage`, in order,
/// until it returns false, an index is missing or the journal ends; each
/// segment is read once, and nothing is copied. Safe on storage another
/// handle appends to, as [`read_entries`].
pub fn visit_entries<S: Storage + ?Sized>(
    storage: &S,
    from: u64,
    mut visit: impl FnMut(u64, u64, &[u8]) -> bool,
) -> Result<(), JournalError> {
    let segments = storage.segments()?;
    let Some(start) = segments.iter().rposition(|&segment| segment <= from) else {
        return Ok(());
    };
    let mut next = from;
    for &segment in &segments[start..] {
        let content = match storage.read(segment) {
            Ok(content) => content,
            // Compacted meanwhile: what is left starts later.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
            Err(error) => return Err(error.into()),
        };
        for payload in frame::scan(&content).payloads {
            let Some((index, epoch, data)) = split_entry(payload) else {
                return Ok(());
            };
            if index < from {
                continue;
            }
            if index != next || !visit(index, epoch, data) {
                return Ok(());
            }
            let Some(after) = next.checked_add(1) else {
                return Ok(());
            };
            next = after;
        }
    }
    Ok(())
}

/// An entry's index, epoch and data, borrowed from its frame's payload.
fn split_entry(payload: &[u8]) -> Option<(u64, u64, &[u8])> {
    let (header, data) = payload.split_at_checked(ENTRY_HEADER_BYTES)?;
    let index = u64::from_le_bytes(header[0..8].try_into().ok()?);
    let epoch = u64::from_le_bytes(header[8..16].try_into().ok()?);
    Some((index, epoch, data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::storage::{FsStorage, MemStorage};

    fn open(storage: MemStorage) -> (Journal<MemStorage>, Recovered) {
        Journal::open(storage).unwrap()
    }

    fn data(entries: &[Entry]) -> Vec<&[u8]> {
        entries.iter().map(|e| e.data.as_slice()).collect()
    }

    #[test]
    fn synced_entries_survive_a_crash_and_unsynced_ones_do_not() {
        let (mut journal, recovered) = open(MemStorage::new());
        assert!(recovered.entries.is_empty());
        assert_eq!(journal.append(1, b"a").unwrap(), 0);
        assert_eq!(journal.append(1, b"b").unwrap(), 1);
        journal.sync().unwrap();
        journal.append(1, b"lost").unwrap();
        let mut storage = journal.into_storage();
        storage.crash(0);
        let (journal, recovered) = open(storage);
        assert_eq!(data(&recovered.entries), vec![&b"a"[..], b"b"]);
        assert_eq!(recovered.torn_bytes, 0);
        assert_eq!(journal.next_index(), 2);
    }

    #[test]
    fn a_torn_tail_is_cut_and_appends_continue_after_it() {
        for torn in 1..30 {
            let (mut journal, _) = open(MemStorage::new());
            journal.append(1, b"kept").unwrap();
            journal.sync().unwrap();
            journal.append(1, b"half-written entry").unwrap();
            let mut storage = journal.into_storage();
            storage.crash(torn);
            let (mut journal, recovered) = open(storage);
            assert_eq!(data(&recovered.entries), vec![&b"kept"[..]], "torn {torn}");
            assert_eq!(recovered.torn_bytes, torn as u64);
            journal.append(2, b"next").unwrap();
            journal.sync().unwrap();
            let (_, recovered) = open(journal.into_storage());
            assert_eq!(data(&recovered.entries), vec![&b"kept"[..], b"next"]);
            assert_eq!(recovered.entries[1].index, 1);
        }
    }

    #[test]
    fn corruption_before_the_tail_is_an_error_not_a_silent_drop() {
        let (mut journal, _) = open(MemStorage::new());
        for i in 0..5u8 {
            journal.append(1, &[i; 10]).unwrap();
        }
        journal.sync().unwrap();
        let mut storage = journal.into_storage();
        // Each entry's frame is 12 + 16 + 10 = 38 bytes; flip a bit in entry 1.
        storage.corrupt(0, 38 + 20);
        match Journal::open(storage) {
            Err(JournalError::Corrupt {
                segment: 0,
                offset: 38,
                ..
            }) => {}
            other => panic!("expected corruption at entry 1, got {other:?}"),
        }
    }

    #[test]
    fn epochs_never_go_back() {
        let (mut journal, _) = open(MemStorage::new());
        journal.append(3, b"x").unwrap();
        assert!(matches!(
            journal.append(2, b"y"),
            Err(JournalError::StaleEpoch {
                epoch: 2,
                last_epoch: 3
            })
        ));
        journal.append(3, b"z").unwrap();
        journal.append(4, b"w").unwrap();
        journal.sync().unwrap();
        let (journal, recovered) = open(journal.into_storage());
        assert_eq!(journal.last_epoch(), 4);
        assert_eq!(
            recovered
                .entries
                .iter()
                .map(|e| e.epoch)
                .collect::<Vec<_>>(),
            vec![3, 3, 4]
        );
    }

    fn append_epochs(journal: &mut Journal<MemStorage>, epochs: &[u64]) {
        for &epoch in epochs {
            journal.append(epoch, &[epoch as u8]).unwrap();
        }
        journal.sync().unwrap();
    }

    #[test]
    fn shapes_find_where_journals_diverge() {
        let (mut master, _) = open(MemStorage::new());
        append_epochs(&mut master, &[1, 1, 1, 2, 2, 4, 4]);
        let (mut same_prefix, _) = open(MemStorage::new());
        append_epochs(&mut same_prefix, &[1, 1, 1, 2]);
        let (mut diverged, _) = open(MemStorage::new());
        append_epochs(&mut diverged, &[1, 1, 1, 2, 3, 3, 3, 3]);
        let (empty, _) = open(MemStorage::new());
        let shape = master.shape();
        assert_eq!(shape.runs, vec![(0, 1), (3, 2), (5, 4)]);
        assert_eq!(shape.epoch_at(4), Some(2));
        assert_eq!(shape.epoch_at(7), None);
        // Behind but agreeing: diverges at its end.
        assert_eq!(shape.divergence(&same_prefix.shape()), 4);
        // Wrote entries of epoch 3 that the master never had.
        assert_eq!(shape.divergence(&diverged.shape()), 4);
        assert_eq!(shape.divergence(&empty.shape()), 0);
        assert_eq!(shape.divergence(&shape), 7);
        // Cut the diverged one there and copy the master's entries.
        diverged.truncate_from(4).unwrap();
        for entry in master.read_from(4, usize::MAX).unwrap() {
            diverged.append(entry.epoch, &entry.data).unwrap();
        }
        diverged.sync().unwrap();
        assert_eq!(diverged.shape(), shape);
        let (reopened, recovered) = open(diverged.into_storage());
        assert_eq!(reopened.shape(), shape);
        assert_eq!(recovered.entries.len(), 7);
    }

    #[test]
    fn a_reset_journal_starts_at_its_snapshot_index() {
        let (mut journal, _) = open(MemStorage::new());
        append_epochs(&mut journal, &[1, 1, 2]);
        journal.reset_to(10, 3).unwrap();
        assert_eq!((journal.next_index(), journal.last_epoch()), (10, 3));
        let (mut journal, recovered) = open(journal.into_storage());
        assert!(recovered.entries.is_empty());
        assert_eq!(journal.next_index(), 10);
        assert_eq!(journal.append(3, b"x").unwrap(), 10);
        journal.sync().unwrap();
        assert_eq!(journal.read_from(10, 1).unwrap()[0].data, b"x");
        assert!(journal.read_from(3, 1).unwrap().is_empty());
    }

    #[test]
    fn reads_stop_at_the_byte_budget_but_return_at_least_one_entry() {
        let (mut journal, _) = open(MemStorage::new());
        for _ in 0..10 {
            journal.append(1, &[0; 100]).unwrap();
        }
        journal.sync().unwrap();
        assert_eq!(journal.read_from(2, 250).unwrap().len(), 3);
        assert_eq!(journal.read_from(2, 1).unwrap().len(), 1);
        assert_eq!(journal.read_from(9, usize::MAX).unwrap().len(), 1);
    }

    #[test]
    fn segments_roll_and_compaction_drops_covered_ones() {
        let dir = tempfile::tempdir().unwrap();
        let storage = FsStorage::open(dir.path()).unwrap();
        let (mut journal, _) = Journal::open_with_segment_size(storage, 250).unwrap();
        let big = vec![7u8; 100];
        for _ in 0..10 {
            journal.append(1, &big).unwrap();
        }
        journal.sync().unwrap();
        let segments = journal.storage_mut().segments().unwrap();
        assert!(segments.len() >= 3, "{segments:?}");
        assert_eq!(segments[0], 0);
        // Everything below index 8 is covered by a snapshot.
        let removed = journal.compact(8).unwrap();
        assert!(removed >= 1);
        drop(journal);
        let (journal, recovered) = Journal::open(FsStorage::open(dir.path()).unwrap()).unwrap();
        assert_eq!(journal.next_index(), 10);
        let first = recovered.entries.first().unwrap().index;
        assert!(first <= 8 && first > 0, "kept from {first}");
        assert_eq!(journal.shape().first, first);
        assert_eq!(journal.shape().runs, vec![(first, 1)]);
        assert_eq!(recovered.entries.last().unwrap().index, 9);
    }

    #[test]
    fn a_visit_crosses_segments_from_any_index_and_stops_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let storage = FsStorage::open(dir.path()).unwrap();
        let (mut journal, _) = Journal::open_with_segment_size(storage, 250).unwrap();
        for n in 0..10u8 {
            journal.append(1 + u64::from(n / 5), &[n; 100]).unwrap();
        }
        journal.sync().unwrap();
        assert!(journal.storage_mut().segments().unwrap().len() >= 3);
        let storage = FsStorage::open(dir.path()).unwrap();
        let mut seen = Vec::new();
        visit_entries(&storage, 3, |index, epoch, data| {
            seen.push((index, epoch, data[0], data.len()));
            index < 7
        })
        .unwrap();
        let expected: Vec<_> = (3..=7u8)
            .map(|n| (u64::from(n), 1 + u64::from(n / 5), n, 100))
            .collect();
        assert_eq!(seen, expected);
        // Past the end: nothing; the byte-bounded read agrees with a visit.
        let mut past = 0;
        visit_entries(&storage, 10, |_, _, _| {
            past += 1;
            true
        })
        .unwrap();
        assert_eq!(past, 0);
        let read = read_entries(&storage, 0, usize::MAX).unwrap();
        assert_eq!(read.len(), 10);
        assert!(
            read.iter()
                .enumerate()
                .all(|(n, e)| e.data == [n as u8; 100])
        );
    }

    #[test]
    fn an_open_keeping_some_entries_still_checks_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, _) = Journal::open(FsStorage::open(dir.path()).unwrap()).unwrap();
        for n in 0..6u8 {
            journal.append(1, &[n]).unwrap();
        }
        journal.sync().unwrap();
        drop(journal);
        let (journal, recovered) = Journal::open_keeping(
            FsStorage::open(dir.path()).unwrap(),
            SEGMENT_BYTES_MAX,
            |index, data| index >= 2 && data[0] % 2 == 1,
        )
        .unwrap();
        assert_eq!(journal.next_index(), 6);
        let kept: Vec<_> = recovered
            .entries
            .iter()
            .map(|e| (e.index, e.data[0]))
            .collect();
        assert_eq!(kept, vec![(3, 3), (5, 5)]);
        // Damage in an entry it does not keep is still refused.
        let path = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .next()
            .unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() / 3;
        bytes[at] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let opened = Journal::open_keeping(
            FsStorage::open(dir.path()).unwrap(),
            SEGMENT_BYTES_MAX,
            |_, _| false,
        );
        assert!(
            matches!(opened, Err(JournalError::Corrupt { .. })),
            "{opened:?}"
        );
    }
}

#[cfg(test)]
mod properties {
    //! Recovery reads segments from disk and trusts none of them: any
    //! segment names and contents open to a journal whose entries are
    //! dense and whose epochs never go back, or to an error; never a panic.
    //! Damage to a written journal loses entries from the damage on (a torn
    //! tail) or is reported as corruption; it never yields an entry that
    //! was not written. Long run:
    //! `PROPTEST_CASES=100000 cargo test -p cohort --lib journal::log`.
    use super::*;
    use crate::journal::storage::MemStorage;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::Index;

    fn config() -> ProptestConfig {
        // `proptest!` lets PROPTEST_CASES override this.
        ProptestConfig::with_cases(256)
    }

    /// Mostly small, sometimes anything, sometimes at the very end.
    fn n64() -> BoxedStrategy<u64> {
        prop_oneof![6 => 0..6u64, 1 => any::<u64>(), 1 => Just(u64::MAX), 1 => Just(u64::MAX - 1)]
            .boxed()
    }

    fn entry_frame(index: u64, epoch: u64, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::encode(
            &[&index.to_le_bytes(), &epoch.to_le_bytes(), data],
            &mut out,
        );
        out
    }

    /// A segment's content: valid entries (dense from the segment's id or
    /// numbered anyhow), short frames, and garbage.
    fn content(id: u64) -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            3 => (any::<bool>(), n64(), n64(), vec(any::<u8>(), 0..8)),
            1 => (Just(false), n64(), n64(), vec(any::<u8>(), 0..8)),
        ];
        let garbage = vec(any::<u8>(), 0..20);
        (vec(piece, 0..5), garbage, 0..3u8).prop_map(move |(pieces, garbage, tail)| {
            let mut out = Vec::new();
            for (position, (dense, index, epoch, data)) in pieces.into_iter().enumerate() {
                let index = if dense {
                    id.wrapping_add(position as u64)
                } else {
                    index
                };
                out.extend(entry_frame(index, epoch % 3, &data));
            }
            match tail {
                0 => {}
                1 => out.extend(garbage),
                // A frame too short to hold an entry header.
                _ => frame::encode(&[&garbage[..garbage.len().min(15)]], &mut out),
            }
            out
        })
    }

    fn storage() -> impl Strategy<Value = MemStorage> {
        vec(n64().prop_flat_map(|id| (Just(id), content(id))), 0..4).prop_map(|segments| {
            let mut storage = MemStorage::new();
            for (id, bytes) in segments {
                storage.append(id, &bytes).expect("memory");
                storage.sync(id).expect("memory");
            }
            storage
        })
    }

    fn check_recovered(
        journal: &Journal<MemStorage>,
        recovered: &Recovered,
    ) -> Result<(), TestCaseError> {
        let shape = journal.shape();
        for pair in recovered.entries.windows(2) {
            prop_assert_eq!(pair[1].index, pair[0].index + 1);
            prop_assert!(pair[1].epoch >= pair[0].epoch);
        }
        if let Some(last) = recovered.entries.last() {
            prop_assert_eq!(shape.next, last.index + 1);
            prop_assert_eq!(shape.last_epoch, last.epoch);
        }
        for entry in &recovered.entries {
            prop_assert_eq!(shape.epoch_at(entry.index), Some(entry.epoch));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_segments_open_to_a_consistent_journal_or_an_error(storage in storage()) {
            if let Ok((journal, recovered)) = Journal::open(storage) {
                check_recovered(&journal, &recovered)?;
                // The torn tail is gone: opening again finds the same.
                let (again, second) = Journal::open(journal.into_storage())?;
                prop_assert_eq!(&second.entries, &recovered.entries);
                prop_assert_eq!(second.torn_bytes, 0);
                check_recovered(&again, &second)?;
            }
        }

        #[test]
        fn damage_never_yields_an_entry_that_was_not_written(
            entries in vec((0..3u64, vec(any::<u8>(), 0..30)), 1..12),
            segment in any::<Index>(),
            at in any::<Index>(),
            how in 0..3u8,
            with in any::<u8>(),
        ) {
            let (mut journal, _) = Journal::open_with_segment_size(MemStorage::new(), 100)?;
            let mut epoch = 1;
            let mut written = Vec::new();
            for (step, data) in &entries {
                epoch += step;
                let index = journal.append(epoch, data)?;
                written.push(Entry { index, epoch, data: data.clone() });
            }
            journal.sync()?;
            let mut storage = journal.into_storage();
            let ids = storage.segments()?;
            let id = ids[segment.index(ids.len())];
            let mut bytes = storage.read(id)?;
            if !bytes.is_empty() {
                let at = at.index(bytes.len());
                match how {
                    0 => bytes[at] ^= 1 << (with % 8),
                    1 => bytes.truncate(at),
                    _ => bytes.insert(at, with),
                }
            }
            storage.remove(id)?;
            storage.append(id, &bytes)?;
            storage.sync(id)?;
            match Journal::open(storage) {
                Ok((_, recovered)) => {
                    prop_assert!(written.starts_with(&recovered.entries));
                }
                Err(error) => {
                    let corrupt = matches!(error, JournalError::Corrupt { .. });
                    prop_assert!(corrupt, "{error}");
                }
            }
        }

        /// Shapes arrive from other nodes (a replica's answer): any shape,
        /// however inconsistent, is compared without a panic.
        #[test]
        fn any_shapes_compare_without_panic(
            shapes in vec((n64(), n64(), vec((n64(), n64()), 0..4), n64()), 2),
            index in n64(),
        ) {
            let shapes: Vec<Shape> = shapes
                .into_iter()
                .map(|(first, next, runs, last_epoch)| Shape { first, next, runs, last_epoch, base_epoch: 0 })
                .collect();
            let _ = shapes[0].epoch_at(index);
            let divergence = shapes[0].divergence(&shapes[1]);
            prop_assert!(divergence <= shapes[0].next.max(shapes[1].next));
        }
    }

    /// A segment named `u64::MAX` holding entry `u64::MAX`: the next index
    /// does not exist. Found by `any_segments_open_...`; it overflowed.
    #[test]
    fn an_entry_at_the_last_index_is_corruption_not_an_overflow() {
        let mut storage = MemStorage::new();
        storage
            .append(u64::MAX, &entry_frame(u64::MAX, 1, b"x"))
            .unwrap();
        storage.sync(u64::MAX).unwrap();
        match Journal::open(storage) {
            Err(JournalError::Corrupt { segment, .. }) => assert_eq!(segment, u64::MAX),
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    /// The writing side of the same bound. Found by the replica's
    /// `any_requests_are_served_...`: a snapshot installed at index
    /// `u64::MAX`, then an append, overflowed.
    #[test]
    fn an_append_at_the_last_index_is_refused_and_the_journal_still_opens() {
        let (mut journal, _) = Journal::open(MemStorage::new()).unwrap();
        journal.reset_to(u64::MAX, 1).unwrap();
        assert!(matches!(
            journal.append(1, b"x"),
            Err(JournalError::Full { index: u64::MAX })
        ));
        let (journal, recovered) = Journal::open(journal.into_storage()).unwrap();
        assert!(recovered.entries.is_empty());
        assert_eq!(journal.next_index(), u64::MAX);
    }
}
