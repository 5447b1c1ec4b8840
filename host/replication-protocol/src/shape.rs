//! A journal's shape: which entries it holds and which epoch wrote each,
//! in a handful of numbers.
//!
//! Two entries with the same index and epoch are the same entry (one epoch
//! has one master, and it writes each index once), so comparing shapes
//! finds where two journals diverge without reading either.

use serde::{Deserialize, Serialize};

/// Which entries a journal holds and which epochs wrote them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Index of the oldest entry held (entries below were compacted into a
    /// snapshot).
    pub first: u64,
    /// Index the next entry gets.
    pub next: u64,
    /// `(first index, epoch)` of each run of entries written by one epoch,
    /// ascending; a run lasts until the next one starts (the last until
    /// `next`).
    pub runs: Vec<(u64, u64)>,
    /// Epoch of the newest entry (or, for an empty journal, of the snapshot
    /// it starts from).
    pub last_epoch: u64,
    /// Epoch of entry `first - 1`, the last one compacted into the
    /// snapshot (0 without one).
    pub base_epoch: u64,
}

impl Shape {
    /// The epoch that wrote entry `index`, if held (or, for `first - 1`,
    /// if it is the last entry compacted).
    pub fn epoch_at(&self, index: u64) -> Option<u64> {
        if self.first > 0 && index == self.first - 1 {
            return Some(self.base_epoch);
        }
        if index < self.first || index >= self.next {
            return None;
        }
        let run = self.runs.partition_point(|&(start, _)| start <= index);
        run.checked_sub(1).map(|run| self.runs[run].1)
    }

    /// The first index from which `other` differs from this journal:
    /// entries below it are the same in both (or compacted in one of them).
    /// Entries of `other` from there on must be dropped and replaced by
    /// this journal's.
    pub fn divergence(&self, other: &Shape) -> u64 {
        // Entries this journal compacted are committed. If `other` holds
        // the last of them with another epoch, its entries there are an
        // old master's: everything it holds up to here must go.
        if self.first > other.first
            && other.next >= self.first
            && other.epoch_at(self.first - 1) != Some(self.base_epoch)
        {
            return other.first.min(self.first - 1);
        }
        let low = self.first.max(other.first);
        let high = self.next.min(other.next);
        if low >= high {
            return high.min(other.next);
        }
        // Epochs are constant between run starts: compare at each start.
        let mut points: Vec<u64> = self
            .runs
            .iter()
            .chain(&other.runs)
            .map(|&(start, _)| start)
            .filter(|&start| start > low && start < high)
            .collect();
        points.push(low);
        points.sort_unstable();
        points
            .into_iter()
            .find(|&index| self.epoch_at(index) != other.epoch_at(index))
            .unwrap_or(high)
    }

    /// How far ahead this journal is: by the epoch of its newest entry,
    /// then by length. A take-over adopts the most advanced journal.
    pub fn rank(&self) -> (u64, u64) {
        (self.last_epoch, self.next)
    }

    /// Records that an entry written by `epoch` was appended.
    pub fn push(&mut self, epoch: u64) {
        debug_assert!(
            epoch >= self.last_epoch,
            "epochs in a journal never decrease"
        );
        if self.runs.last().is_none_or(|&(_, last)| last != epoch) {
            self.runs.push((self.next, epoch));
        }
        self.next += 1;
        self.last_epoch = epoch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(first: u64, epochs: &[u64]) -> Shape {
        let mut shape = Shape {
            first,
            next: first,
            ..Shape::default()
        };
        for &epoch in epochs {
            shape.push(epoch);
        }
        shape
    }

    #[test]
    fn divergence_is_the_first_differing_index() {
        let a = shape(0, &[1, 1, 2, 2, 2]);
        assert_eq!(a.divergence(&shape(0, &[1, 1, 2])), 3);
        assert_eq!(a.divergence(&shape(0, &[1, 1, 3, 3])), 2);
        assert_eq!(a.divergence(&shape(0, &[1, 1, 2, 2, 2, 2])), 5);
        assert_eq!(a.divergence(&shape(0, &[])), 0);
        // Compacted below 3 on the other side: equal as far as both hold.
        let mut compacted = shape(3, &[2, 2]);
        compacted.base_epoch = 1;
        assert_eq!(a.divergence(&compacted), 5);
    }

    #[test]
    fn an_old_entry_under_the_snapshot_boundary_is_a_divergence() {
        // The journal compacted 0..3 (entry 2 by epoch 3); the other holds
        // entry 2 from epoch 1 and later entries of epoch 3: not the same.
        let mut ours = shape(3, &[3, 3]);
        ours.base_epoch = 3;
        let theirs = shape(0, &[1, 1, 1, 3, 3]);
        assert!(ours.divergence(&theirs) < 3);
        let same = shape(0, &[1, 1, 3, 3, 3]);
        assert_eq!(ours.divergence(&same), 5);
    }
}
