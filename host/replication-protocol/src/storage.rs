//! What the replication core keeps on disk, behind a small trait.
//!
//! [`Storage`] is the journal (entries with the epoch that wrote each),
//! the newest snapshot and the durable *promise* (the highest epoch this
//! node accepted). The node implements it over its journal files; the
//! simulator uses [`MemStorage`], whose [`crash`](MemStorage::crash) loses
//! what was not synced, as a power loss would.
//!
//! Contract: `append` and `truncate` may stay in memory until `sync`;
//! `set_promise` and `install` are durable when they return. An error
//! leaves the storage unusable until reopened (the node reopens it).

use crate::shape::Shape;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A node's name.
pub type NodeId = String;

/// What an entry carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Payload {
    /// Written by each new master first: an entry of its own epoch, whose
    /// commit commits everything before it (and nothing for the master).
    Noop,
    /// From this entry on, these back-end nodes are the voters (sorted).
    Voters(Vec<NodeId>),
    /// The master's events: opaque here.
    Data(Vec<u8>),
}

impl Payload {
    /// Bytes counted against message budgets.
    pub fn size(&self) -> usize {
        match self {
            Self::Noop => 1,
            Self::Voters(voters) => voters.iter().map(|v| v.len() + 1).sum::<usize>() + 1,
            Self::Data(data) => data.len() + 1,
        }
    }
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the journal, dense from 0.
    pub index: u64,
    /// The epoch of the master that wrote it.
    pub epoch: u64,
    /// What it carries.
    pub payload: Payload,
}

/// Entries from `entries` up to about `bytes_max` of payload, at least one
/// if there is one: what [`Storage::read`] returns.
pub fn take_within<'a>(entries: impl Iterator<Item = &'a Entry>, bytes_max: usize) -> Vec<Entry> {
    let mut bytes = 0;
    let mut out = Vec::new();
    for entry in entries {
        if !out.is_empty() && bytes + entry.payload.size() > bytes_max {
            break;
        }
        bytes += entry.payload.size();
        out.push(entry.clone());
    }
    out
}

/// The master's state as of an index, replacing the entries before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Entries below this index are covered.
    pub index: u64,
    /// Epoch of the last entry covered.
    pub epoch: u64,
    /// The voters as of `index`.
    pub voters: Vec<NodeId>,
    /// The master's state, opaque here.
    pub state: Vec<u8>,
}

/// A storage failure: the node stops using this storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageError(pub String);

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StorageError {}

/// The journal, snapshot and promise. See the module docs.
pub trait Storage {
    /// The journal's shape (entries held, including unsynced ones).
    fn shape(&self) -> Shape;
    /// The highest epoch promised.
    fn promise(&self) -> u64;
    /// Durably promises `epoch` (never lower than the current promise).
    fn set_promise(&mut self, epoch: u64) -> Result<(), StorageError>;
    /// Appends one entry at `shape().next`.
    fn append(&mut self, epoch: u64, payload: Payload) -> Result<(), StorageError>;
    /// Drops every entry from `index` on (`index >= shape().first`).
    fn truncate(&mut self, index: u64) -> Result<(), StorageError>;
    /// Makes every append and truncation so far durable.
    fn sync(&mut self) -> Result<(), StorageError>;
    /// Entries from `from` (at least `shape().first`) on, about `bytes_max`
    /// of them at most but at least one if any.
    fn read(&self, from: u64, bytes_max: usize) -> Result<Vec<Entry>, StorageError>;
    /// The newest snapshot, if any.
    fn snapshot(&self) -> Result<Option<Snapshot>, StorageError>;
    /// Durably replaces the journal by `snapshot`: entries below its index
    /// are dropped; so are the ones from it on unless the journal holds the
    /// snapshot's last entry with the snapshot's epoch.
    fn install(&mut self, snapshot: Snapshot) -> Result<(), StorageError>;
    /// The voter set in force: the newest `Voters` entry held, else the
    /// snapshot's, else none (a journal that never had one).
    fn voters(&self) -> Vec<NodeId>;
}

/// An in-memory [`Storage`] for tests and the simulator: durable and
/// pending state are kept apart, so [`crash`](Self::crash) can lose what
/// was not synced.
#[derive(Debug, Clone, Default)]
pub struct MemStorage {
    durable: Disk,
    current: Disk,
}

#[derive(Debug, Clone, Default)]
struct Disk {
    snapshot: Option<Snapshot>,
    /// Index of `entries[0]`.
    first: u64,
    entries: Vec<Entry>,
    promise: u64,
}

impl MemStorage {
    /// An empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// What is left after a power loss: only what was synced.
    pub fn crash(&self) -> Self {
        Self {
            durable: self.durable.clone(),
            current: self.durable.clone(),
        }
    }

    /// Every entry held (for checks).
    pub fn entries(&self) -> &[Entry] {
        &self.current.entries
    }
}

impl Storage for MemStorage {
    fn shape(&self) -> Shape {
        let disk = &self.current;
        let mut shape = Shape {
            first: disk.first,
            next: disk.first,
            runs: Vec::new(),
            last_epoch: disk.snapshot.as_ref().map_or(0, |s| s.epoch),
            base_epoch: disk.snapshot.as_ref().map_or(0, |s| s.epoch),
        };
        for entry in &disk.entries {
            shape.push(entry.epoch);
        }
        shape
    }

    fn promise(&self) -> u64 {
        self.current.promise
    }

    fn set_promise(&mut self, epoch: u64) -> Result<(), StorageError> {
        assert!(epoch >= self.current.promise, "a promise never goes down");
        self.current.promise = epoch;
        self.durable.promise = epoch;
        Ok(())
    }

    fn append(&mut self, epoch: u64, payload: Payload) -> Result<(), StorageError> {
        let disk = &mut self.current;
        let index = disk.first + disk.entries.len() as u64;
        let last = disk
            .entries
            .last()
            .map(|e| e.epoch)
            .or(disk.snapshot.as_ref().map(|s| s.epoch))
            .unwrap_or(0);
        assert!(
            epoch >= last,
            "an append with an older epoch ({epoch} < {last})"
        );
        disk.entries.push(Entry {
            index,
            epoch,
            payload,
        });
        Ok(())
    }

    fn truncate(&mut self, index: u64) -> Result<(), StorageError> {
        let disk = &mut self.current;
        assert!(index >= disk.first, "truncating compacted entries");
        disk.entries.truncate((index - disk.first) as usize);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        self.durable = self.current.clone();
        Ok(())
    }

    fn read(&self, from: u64, bytes_max: usize) -> Result<Vec<Entry>, StorageError> {
        let disk = &self.current;
        if from < disk.first {
            return Err(StorageError(format!("entries from {from} are compacted")));
        }
        Ok(take_within(
            disk.entries.iter().skip((from - disk.first) as usize),
            bytes_max,
        ))
    }

    fn snapshot(&self) -> Result<Option<Snapshot>, StorageError> {
        Ok(self.current.snapshot.clone())
    }

    fn install(&mut self, snapshot: Snapshot) -> Result<(), StorageError> {
        let disk = &mut self.current;
        if snapshot.index <= disk.first && disk.snapshot.is_some() {
            return Ok(()); // Already covered.
        }
        let keeps_tail = snapshot.index > disk.first
            && disk
                .entries
                .get((snapshot.index - disk.first - 1) as usize)
                .is_some_and(|e| e.epoch == snapshot.epoch);
        if keeps_tail {
            disk.entries.drain(..(snapshot.index - disk.first) as usize);
        } else {
            disk.entries.clear();
        }
        disk.first = snapshot.index;
        disk.snapshot = Some(snapshot);
        // Installing is durable, and so is everything before it.
        self.durable = self.current.clone();
        Ok(())
    }

    fn voters(&self) -> Vec<NodeId> {
        let disk = &self.current;
        disk.entries
            .iter()
            .rev()
            .find_map(|e| match &e.payload {
                Payload::Voters(voters) => Some(voters.clone()),
                _ => None,
            })
            .or_else(|| disk.snapshot.as_ref().map(|s| s.voters.clone()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_loses_what_was_not_synced() {
        let mut storage = MemStorage::new();
        storage.append(1, Payload::Noop).unwrap();
        storage.sync().unwrap();
        storage.append(1, Payload::Data(vec![1])).unwrap();
        storage.set_promise(3).unwrap();
        let after = storage.crash();
        assert_eq!(after.shape().next, 1);
        assert_eq!(after.promise(), 3);
    }

    #[test]
    fn installing_keeps_a_matching_tail_and_drops_a_foreign_one() {
        let mut storage = MemStorage::new();
        for epoch in [1, 1, 2, 2] {
            storage.append(epoch, Payload::Noop).unwrap();
        }
        let snapshot = |index, epoch| Snapshot {
            index,
            epoch,
            voters: vec!["a".into()],
            state: vec![],
        };
        storage.install(snapshot(3, 2)).unwrap();
        assert_eq!((storage.shape().first, storage.shape().next), (3, 4));
        storage.install(snapshot(4, 3)).unwrap();
        assert_eq!((storage.shape().first, storage.shape().next), (4, 4));
        assert_eq!(storage.shape().last_epoch, 3);
        assert_eq!(storage.voters(), vec!["a".to_string()]);
    }
}
