//! Request ids for submissions, drawn where a client's request arrives.
//!
//! A node draws one [`RequestId`] per job a client submits (one per job of
//! a batch, consecutive) before forwarding anything to the master, and the
//! id travels with every forward and retry of that submission, so the
//! master creates the job once however often the submission reaches it
//! (see `cohort_master::master`'s notes). Ids are `(origin, seq)`: the
//! origin is drawn at random when the process starts, so a restarted node
//! never repeats an id of its previous life, and `seq` counts from 0.

use cohort_master::RequestId;
use std::sync::atomic::{AtomicU64, Ordering};

/// Draws this process's request ids. One per node, shared by its handlers.
#[derive(Debug)]
pub struct RequestIds {
    origin: u64,
    next: AtomicU64,
}

impl Default for RequestIds {
    fn default() -> Self {
        let mut origin = [0; 8];
        crate::security::random(&mut origin);
        Self {
            origin: u64::from_le_bytes(origin),
            next: AtomicU64::new(0),
        }
    }
}

impl RequestIds {
    /// `count` ids no other call of this process gets: consecutive, in order.
    pub fn take(&self, count: usize) -> impl Iterator<Item = RequestId> + use<> {
        let first = self.next.fetch_add(count as u64, Ordering::Relaxed);
        let origin = self.origin;
        (first..first + count as u64).map(move |seq| RequestId { origin, seq })
    }

    /// One id no other call of this process gets.
    pub fn next(&self) -> RequestId {
        self.take(1).next().expect("one id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_never_repeat_within_a_process_or_across_processes() {
        let ids = RequestIds::default();
        let mut seen: Vec<RequestId> = ids.take(3).collect();
        seen.push(ids.next());
        seen.extend(ids.take(2));
        let seqs: Vec<u64> = seen.iter().map(|id| id.seq).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4, 5]);
        // Another process (a restart) draws another origin.
        assert_ne!(RequestIds::default().origin, ids.origin);
    }
}
