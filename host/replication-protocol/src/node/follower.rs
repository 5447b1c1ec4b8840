//! The follower, and every node's side as a replica.
//!
//! A follower keeps a durable *promise*, the highest epoch it accepted, and
//! refuses anything older (`Fenced`). Appends skip entries it holds with
//! the same epoch, cut its journal at the first difference (never below
//! the commit index it was told: that is a fault, reported and refused) and
//! are acknowledged after a sync.
//!
//! This module owns the follower's state (the master it heard from last,
//! kept in `Role::Follower`) and the requests a node answers whatever its
//! role: claims (granted only above the promise, declined while a live
//! master is heard unless it hands over), appends and installs from a
//! master, reads from a take-over copying this journal, and a master's
//! hand-over. A leader or candidate that accepts a newer epoch becomes a
//! follower through one path (`follow`): the leader steps down, the
//! candidate gives up.
//!
//! Invariants: the promise only grows and is durable before any answer
//! that relies on it; committed entries are never cut; the commit index
//! learned from an append covers only entries that append vouched for. It
//! does not start take-overs (`candidate.rs`) nor replicate (`leader.rs`).

use super::{Effect, Replicator, Role, TakeOverError};
use crate::message::Message;
use crate::storage::{NodeId, Payload, Snapshot, Storage, StorageError};

impl<S: Storage> Replicator<S> {
    /// A claim of `epoch` from `from`: granted (promised durably, answered
    /// with this journal), declined or fenced.
    pub(super) fn on_claim(&mut self, now: u64, from: &NodeId, epoch: u64, transfer: bool) {
        let promised = self.storage.promise();
        if epoch <= promised {
            self.send(from, Message::Fenced { epoch, promised });
            return;
        }
        let alive = match &self.role {
            Role::Leader(leader) => Some(leader.epoch),
            Role::Follower {
                leader: Some((_, leader_epoch, heard)),
            } if now < heard + self.options.lease_ms => Some(*leader_epoch),
            _ => None,
        };
        if let Some(leader_epoch) = alive
            && !transfer
        {
            self.send(
                from,
                Message::Declined {
                    epoch,
                    leader_epoch,
                },
            );
            return;
        }
        if let Err(error) = self.promise(epoch) {
            self.send(
                from,
                Message::Refused {
                    epoch,
                    reason: error.0,
                },
            );
            return;
        }
        self.follow(now, epoch, None);
        let shape = self.storage.shape();
        let voters = self.storage.voters();
        self.send(
            from,
            Message::Claimed {
                epoch,
                shape,
                voters,
            },
        );
    }

    /// Follows `epoch` (its master `leader`, when heard from): a leader of
    /// an older epoch steps down, a take-over under way gives up.
    fn follow(&mut self, now: u64, epoch: u64, leader: Option<(NodeId, u64, u64)>) {
        match &self.role {
            Role::Leader(leadership) => {
                let own = leadership.epoch;
                self.stop(own, epoch);
            }
            // A claim of `epoch` was granted here, or another node claimed
            // this candidate's epoch and won a majority first (each node
            // grants an epoch once): this take-over is lost.
            Role::Candidate(_) => self.give_up(now, TakeOverError::Outbid { promised: epoch }),
            Role::Follower { .. } => {}
        }
        self.role = Role::Follower { leader };
    }

    /// Checks a master's append or install against the promise; follows
    /// it if it is current. Answers `Fenced` and returns false if not.
    pub(super) fn accept_master(&mut self, now: u64, from: &NodeId, epoch: u64) -> bool {
        let promised = self.storage.promise();
        if epoch < promised {
            self.send(from, Message::Fenced { epoch, promised });
            return false;
        }
        if let Err(error) = self.promise(epoch) {
            self.send(
                from,
                Message::Refused {
                    epoch,
                    reason: error.0,
                },
            );
            return false;
        }
        if let Role::Leader(leader) = &self.role
            && leader.epoch == epoch
        {
            let reason = format!("two masters in epoch {epoch}: this node and {from}");
            self.fault(reason);
            return false;
        }
        self.follow(now, epoch, Some((from.clone(), epoch, now)));
        true
    }

    /// Stores a master's append and answers it: the journal's shape once
    /// durable, or `Refused`.
    pub(super) fn append(
        &mut self,
        first: u64,
        prev_epoch: Option<u64>,
        entries: Vec<(u64, Payload)>,
        commit: u64,
    ) -> Message {
        let epoch = self.storage.promise();
        match self.store(first, prev_epoch, entries, commit) {
            Ok(()) => Message::Appended {
                epoch,
                shape: self.storage.shape(),
            },
            Err(reason) => Message::Refused { epoch, reason },
        }
    }

    /// Stores entries from `first` on: skips the ones held with the same
    /// epoch, cuts the journal at the first difference, appends the rest,
    /// syncs. Leaves the journal alone if `first` is beyond its end or the
    /// entry before `first` differs (the sender learns the shape and
    /// resends from the right place).
    pub(super) fn store(
        &mut self,
        first: u64,
        prev_epoch: Option<u64>,
        entries: Vec<(u64, Payload)>,
        commit: u64,
    ) -> Result<(), String> {
        let shape = self.storage.shape();
        let end = first + entries.len() as u64;
        if first > shape.next {
            return Ok(());
        }
        if let (Some(prev), Some(held)) = (prev_epoch, first.checked_sub(1))
            && let Some(own) = shape.epoch_at(held)
            && own != prev
        {
            return Ok(());
        }
        let mut index = first;
        let mut entries = entries.into_iter().peekable();
        while let Some((entry_epoch, _)) = entries.peek() {
            let compacted = index < shape.first;
            if !compacted && shape.epoch_at(index) != Some(*entry_epoch) {
                break;
            }
            entries.next();
            index += 1;
        }
        let result = (|| {
            if entries.peek().is_some() {
                if index < shape.next {
                    if index < self.commit {
                        let reason = format!(
                            "refusing to drop committed entries from {index} (committed below {})",
                            self.commit
                        );
                        return Err(StorageError(reason));
                    }
                    self.storage.truncate(index)?;
                }
                for (entry_epoch, payload) in entries {
                    self.storage.append(entry_epoch, payload)?;
                }
            }
            self.storage.sync()
        })();
        if let Err(error) = result {
            if error.0.starts_with("refusing") {
                self.fault(error.0.clone());
            }
            return Err(error.0);
        }
        // Only entries this append vouched for are known committed.
        let known = commit.min(end).min(self.storage.shape().next);
        self.commit = self.commit.max(known);
        Ok(())
    }

    /// Installs a master's snapshot and answers it as an append.
    pub(super) fn install(&mut self, epoch: u64, snapshot: Snapshot) -> Message {
        let index = snapshot.index;
        match self.storage.install(snapshot) {
            Ok(()) => {
                self.commit = self.commit.max(index);
                Message::Appended {
                    epoch,
                    shape: self.storage.shape(),
                }
            }
            Err(error) => Message::Refused {
                epoch,
                reason: error.0,
            },
        }
    }

    /// Answers a take-over's read of this journal from `from`: entries, or
    /// the snapshot if they were compacted, or `Fenced` below the promise.
    pub(super) fn read(&mut self, epoch: u64, from: u64, bytes_max: u64) -> Message {
        let promised = self.storage.promise();
        if epoch < promised {
            return Message::Fenced { epoch, promised };
        }
        let shape = self.storage.shape();
        let result = if from < shape.first {
            self.storage.snapshot().and_then(|snapshot| {
                snapshot
                    .map(|snapshot| Message::SnapshotIs { epoch, snapshot })
                    .ok_or_else(|| StorageError(format!("entries from {from} are compacted")))
            })
        } else {
            let bytes_max = usize::try_from(bytes_max).unwrap_or(usize::MAX);
            self.storage
                .read(from, bytes_max.min(self.options.bytes_max))
                .map(|entries| Message::Entries {
                    epoch,
                    from,
                    entries,
                })
        };
        result.unwrap_or_else(|error| Message::Refused {
            epoch,
            reason: error.0,
        })
    }

    /// The master `from` of `epoch` hands the master over to this node.
    pub(super) fn on_hand_over(&mut self, now: u64, from: &NodeId, epoch: u64) {
        // Only from the master this node follows, of the current epoch: the
        // claim then goes out as a transfer, which followers grant although
        // they heard that master lately.
        let from_master = matches!(&self.role, Role::Follower { leader: Some((node, e, _)) }
            if node == from && *e == epoch);
        if from_master && epoch == self.storage.promise() {
            self.retry_at = 0;
            self.role = Role::Follower { leader: None };
            self.effect(Effect::HandedOver {
                from: from.clone(),
                epoch,
            });
            if let Ok(output) = self.take_over(now, true) {
                self.out = output;
            }
        }
    }
}
