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

use super::frame::{self, Tail};
use super::storage::Storage;

/// A segment is closed and a new one started past this size.
pub const SEGMENT_BYTES_MAX: u64 = 64 << 20;
/// Bytes of an entry's header inside its frame: index and epoch.
const ENTRY_HEADER_BYTES: usize = 16;

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Every entry still in the journal, in order.
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
    /// An append with an epoch lower than the journal's last.
    #[error("epoch {epoch} is older than the journal's epoch {last_epoch}")]
    StaleEpoch {
        /// The epoch of the refused append.
        epoch: u64,
        /// The newest epoch in the journal.
        last_epoch: u64,
    },
}

/// An open journal. See the module docs.
#[derive(Debug)]
pub struct Journal<S: Storage> {
    storage: S,
    /// Id of the segment being appended to (the index of its first entry).
    segment: u64,
    segment_bytes: u64,
    next_index: u64,
    last_epoch: u64,
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
        mut storage: S,
        segment_bytes_max: u64,
    ) -> Result<(Self, Recovered), JournalError> {
        let segments = storage.segments()?;
        let mut recovered = Recovered::default();
        let mut next_index = segments.first().copied().unwrap_or(0);
        let mut last_epoch = 0;
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
                let entry = decode_entry(payload)
                    .ok_or_else(|| corrupt(offset, "entry shorter than its header".into()))?;
                if entry.index != next_index {
                    return Err(corrupt(
                        offset,
                        format!("entry {} where {next_index} was expected", entry.index),
                    ));
                }
                if entry.epoch < last_epoch {
                    return Err(corrupt(
                        offset,
                        format!("epoch {} after epoch {last_epoch}", entry.epoch),
                    ));
                }
                offset += frame::FRAME_HEADER_BYTES + payload.len();
                next_index += 1;
                last_epoch = entry.epoch;
                recovered.entries.push(entry);
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

    /// Appends an entry written by `epoch`; returns its index. Not durable
    /// until [`sync`](Self::sync).
    pub fn append(&mut self, epoch: u64, data: &[u8]) -> Result<u64, JournalError> {
        if epoch < self.last_epoch {
            return Err(JournalError::StaleEpoch {
                epoch,
                last_epoch: self.last_epoch,
            });
        }
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
        self.next_index += 1;
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
            }
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

fn decode_entry(payload: &[u8]) -> Option<Entry> {
    if payload.len() < ENTRY_HEADER_BYTES {
        return None;
    }
    let index = u64::from_le_bytes(payload[0..8].try_into().ok()?);
    let epoch = u64::from_le_bytes(payload[8..16].try_into().ok()?);
    Some(Entry {
        index,
        epoch,
        data: payload[ENTRY_HEADER_BYTES..].to_vec(),
    })
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
        assert_eq!(recovered.entries.last().unwrap().index, 9);
    }
}
