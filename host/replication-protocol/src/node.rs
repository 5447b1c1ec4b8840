//! One back-end node's side of replication, as a sans-IO state machine.
//!
//! A [`Replicator`] is driven by four kinds of input: a message from
//! another node ([`step`](Replicator::step)), the passing of time
//! ([`tick`](Replicator::tick)), the node's own decisions (take the master
//! over, propose entries, hand the master over, remove a voter) and the
//! membership view ([`set_members`](Replicator::set_members)). Each input
//! returns an [`Output`]: messages to send and [`Effect`]s for the node to
//! apply (start or stop the master, release committed work). Storage sits
//! behind the [`Storage`] trait; time is a number of milliseconds the
//! caller passes in; nothing here blocks, sleeps or talks to a socket, so
//! the simulator (`crate::sim`) runs many nodes in one thread from a seed.
//!
//! # Roles
//!
//! A node is a **follower** (a replica keeping a durable *promise*, the
//! highest epoch it accepted), a **candidate** (taking the master over by
//! claiming a newer epoch from a majority of the voters) or a **leader**
//! (hosting the master, replicating its journal and changing the voter
//! set). Each role's state and the messages it handles live in their own
//! file: `node/follower.rs`, `node/candidate.rs`, `node/leader.rs`, each
//! with its own design note. Every role answers requests as a replica
//! (claims, appends, reads): that side is the follower's, and a leader or
//! candidate that grants a newer epoch becomes a follower first.
//!
//! This file owns what the roles share: the [`Replicator`] itself (options,
//! storage, commit index, membership view, the output being built), the
//! public types of its interface, the read-only queries, and the two entry
//! points [`step`](Replicator::step) and [`tick`](Replicator::tick), which
//! only dispatch to the role that handles the message or the timer. A role
//! changes only by replacing `role` whole, in the role modules; the
//! protocol's decisions are theirs, not this file's.
//!
//! # Invariants
//!
//! The promise and every node's commit index only grow; a leader's epoch
//! is its promise (asserted as it starts leading); one epoch has one
//! leader (a second one is reported as a fault).

mod candidate;
mod follower;
mod leader;
#[cfg(test)]
mod tests;

use crate::message::Message;
use crate::storage::{NodeId, Snapshot, Storage, StorageError};
use candidate::Candidacy;
use leader::Leadership;
use std::collections::BTreeSet;

/// Timings and limits.
#[derive(Debug, Clone)]
pub struct Options {
    /// This node.
    pub id: NodeId,
    /// Start a voter set with this node if none exists anywhere reachable.
    pub bootstrap: bool,
    /// An idle leader sends an empty append this often.
    pub heartbeat_ms: u64,
    /// A request unanswered this long is sent again.
    pub request_timeout_ms: u64,
    /// A follower that heard from its master this recently declines claims
    /// (and does not take over itself).
    pub lease_ms: u64,
    /// A take-over that has no majority after this long gives up.
    pub claim_timeout_ms: u64,
    /// Least wait between two take-over attempts.
    pub retry_ms: u64,
    /// Entry bytes per append or read, about.
    pub bytes_max: usize,
    /// A voter gone from the view this long is removed (never, if `None`).
    pub voter_timeout_ms: Option<u64>,
}

impl Options {
    /// Defaults for node `id`.
    pub fn new(id: impl Into<NodeId>) -> Self {
        Self {
            id: id.into(),
            bootstrap: false,
            heartbeat_ms: 200,
            request_timeout_ms: 2_000,
            lease_ms: 1_000,
            claim_timeout_ms: 2_000,
            retry_ms: 1_000,
            bytes_max: 4 << 20,
            voter_timeout_ms: None,
        }
    }
}

/// What the node must do after an input.
#[derive(Debug, Default, PartialEq)]
pub struct Output {
    /// Messages to send, in order.
    pub sends: Vec<(NodeId, Message)>,
    /// Effects to apply, in order.
    pub effects: Vec<Effect>,
}

/// Something the node applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// This node leads `epoch`: start the master from the journal.
    /// `adopted` names the node whose journal was copied, if any.
    Leading { epoch: u64, adopted: Option<NodeId> },
    /// This node's master of `epoch` must stop at once (no snapshot, no
    /// hand-over): `newer` is the epoch that superseded it, or the same
    /// epoch for a voluntary step-down.
    SteppedDown { epoch: u64, newer: u64 },
    /// Entries below `index` are committed (leader: release their
    /// completions).
    Committed { index: u64 },
    /// A take-over did not succeed; the node may try again from
    /// `retry_at`.
    TakeOverFailed {
        reason: TakeOverError,
        retry_at: u64,
    },
    /// The voter set changed (appended, not yet committed).
    Voters { voters: Vec<NodeId> },
    /// The master's node `from` handed the master over to this node: the
    /// take-over started (`Leading` or `TakeOverFailed` follows).
    HandedOver { from: NodeId, epoch: u64 },
    /// Something that must never happen did (a bug or a damaged disk).
    Fault { reason: String },
}

/// Why a take-over did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeOverError {
    /// Called again before `retry_at`.
    TooSoon { retry_at: u64 },
    /// This node heard from a live master of `epoch` within the lease.
    MasterAlive { epoch: u64 },
    /// Already leading or taking over.
    Busy,
    /// Too few voters answered in time.
    NoMajority { answered: usize, voters: usize },
    /// Other nodes kept promising newer epochs.
    Outbid { promised: u64 },
    /// No voter set is known and this node may not start one.
    NoVoters,
    /// The journal could not be copied or stored.
    Storage(String),
}

impl std::fmt::Display for TakeOverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooSoon { retry_at } => write!(f, "too soon: retry at {retry_at} ms"),
            Self::MasterAlive { epoch } => write!(f, "the master of epoch {epoch} is alive"),
            Self::Busy => f.write_str("already leading or taking over"),
            Self::NoMajority { answered, voters } => {
                write!(
                    f,
                    "{answered} of {voters} voters answered; a majority is needed"
                )
            }
            Self::Outbid { promised } => write!(f, "other nodes promised epoch {promised}"),
            Self::NoVoters => f.write_str("no voter set is known and this node may not start one"),
            Self::Storage(reason) => write!(f, "storage: {reason}"),
        }
    }
}

/// Why a proposal was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// This node does not lead.
    NotLeader,
    /// The journal failed; the node must stop its master.
    Storage(String),
}

/// What a node is doing now; the state each role keeps lives in that
/// role's module.
#[derive(Debug)]
enum Role {
    Follower {
        /// The master heard from last, its epoch and when.
        leader: Option<(NodeId, u64, u64)>,
    },
    Candidate(Candidacy),
    Leader(Leadership),
}

/// One node's replication state machine. See the module docs.
#[derive(Debug)]
pub struct Replicator<S: Storage> {
    options: Options,
    storage: S,
    role: Role,
    /// Entries below are committed (as far as this node knows).
    commit: u64,
    /// Back-end nodes in the membership view (this one included).
    members: BTreeSet<NodeId>,
    retry_at: u64,
    /// Highest epoch seen in any message.
    seen: u64,
    out: Output,
}

impl<S: Storage> Replicator<S> {
    /// A follower over `storage` (as found after a start or a crash).
    pub fn new(options: Options, storage: S) -> Self {
        let seen = storage.promise();
        Self {
            options,
            storage,
            role: Role::Follower { leader: None },
            commit: 0,
            members: BTreeSet::new(),
            retry_at: 0,
            seen,
            out: Output::default(),
        }
    }

    /// This node.
    pub fn id(&self) -> &NodeId {
        &self.options.id
    }

    /// The storage, for what its driver does beside the protocol (a
    /// snapshot file written ahead on another thread). Changing what the
    /// protocol sees through it breaks the protocol.
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// The storage (read-only).
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The epoch this node leads, if it does.
    pub fn leading(&self) -> Option<u64> {
        match &self.role {
            Role::Leader(leader) => Some(leader.epoch),
            _ => None,
        }
    }

    /// The options this node runs with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Whether a take-over is under way.
    pub fn taking_over(&self) -> bool {
        matches!(self.role, Role::Candidate(_))
    }

    /// The master this node last heard from, with its epoch.
    pub fn leader(&self) -> Option<(&NodeId, u64)> {
        match &self.role {
            Role::Follower {
                leader: Some((node, epoch, _)),
            } => Some((node, *epoch)),
            Role::Leader(leader) => Some((&self.options.id, leader.epoch)),
            _ => None,
        }
    }

    /// The master this follower last heard from, if that was `silence_ms`
    /// or more ago: with `silence_ms` beyond the lease, every follower that
    /// heard the same heartbeats has let its lease lapse, so a claim is
    /// not declined for a lease only just running out.
    pub fn silent_leader(&self, now: u64, silence_ms: u64) -> Option<(&NodeId, u64)> {
        match &self.role {
            Role::Follower {
                leader: Some((node, epoch, heard)),
            } if now >= heard.saturating_add(silence_ms) => Some((node, *epoch)),
            _ => None,
        }
    }

    /// Entries below this index are committed.
    pub fn commit(&self) -> u64 {
        self.commit
    }

    /// The voter set in force here.
    pub fn voters(&self) -> Vec<NodeId> {
        self.storage.voters()
    }

    /// Whether this node may host the master: it is a voter, or no voter
    /// set exists yet and it may start one. The membership prefers the
    /// oldest eligible node; the protocol stays safe either way.
    pub fn eligible(&self) -> bool {
        let voters = self.storage.voters();
        voters.contains(&self.options.id) || (voters.is_empty() && self.options.bootstrap)
    }

    fn take(&mut self) -> Output {
        std::mem::take(&mut self.out)
    }

    fn send(&mut self, to: &NodeId, message: Message) {
        self.out.sends.push((to.clone(), message));
    }

    fn effect(&mut self, effect: Effect) {
        self.out.effects.push(effect);
    }

    fn fault(&mut self, reason: String) {
        self.effect(Effect::Fault { reason });
    }

    fn promise(&mut self, epoch: u64) -> Result<(), StorageError> {
        if epoch > self.storage.promise() {
            self.storage.set_promise(epoch)?;
        }
        self.seen = self.seen.max(epoch);
        Ok(())
    }

    fn set_commit(&mut self, index: u64) {
        if index > self.commit {
            self.commit = index;
            if self.leading().is_some() {
                self.effect(Effect::Committed { index });
            }
        }
    }

    /// The back-end nodes in the membership view (this one included).
    pub fn set_members(&mut self, now: u64, members: impl IntoIterator<Item = NodeId>) -> Output {
        self.members = members.into_iter().collect();
        self.track_members(now);
        self.tick(now)
    }

    /// Replaces the journal below `snapshot.index` (at most the commit
    /// index) by the snapshot.
    pub fn compact(&mut self, snapshot: Snapshot) -> Result<(), StorageError> {
        if snapshot.index > self.commit {
            return Err(StorageError(format!(
                "a snapshot at {} is beyond the commit index {}",
                snapshot.index, self.commit
            )));
        }
        self.storage.install(snapshot)
    }

    /// Time passed: resend what timed out, heartbeat, give up a take-over
    /// that took too long, change voters that are due.
    pub fn tick(&mut self, now: u64) -> Output {
        match self.role {
            Role::Leader(_) => self.tick_leader(now),
            Role::Candidate(_) => self.tick_candidate(now),
            Role::Follower { .. } => {}
        }
        self.take()
    }

    /// A message from `from`.
    pub fn step(&mut self, now: u64, from: &NodeId, message: Message) -> Output {
        let epoch = message.epoch();
        match message {
            // Requests this node answers as a replica (follower.rs).
            Message::Claim { epoch, transfer } => self.on_claim(now, from, epoch, transfer),
            Message::Append {
                first,
                prev_epoch,
                entries,
                commit,
                ..
            } => {
                if self.accept_master(now, from, epoch) {
                    let reply = self.append(first, prev_epoch, entries, commit);
                    self.send(from, reply);
                }
            }
            Message::Alive { .. } => {
                self.accept_master(now, from, epoch);
            }
            Message::Install { snapshot, .. } => {
                if self.accept_master(now, from, epoch) {
                    let reply = self.install(epoch, snapshot);
                    self.send(from, reply);
                }
            }
            Message::HandOver { .. } => self.on_hand_over(now, from, epoch),
            Message::Read {
                from: index,
                bytes_max,
                ..
            } => {
                let reply = self.read(epoch, index, bytes_max);
                self.send(from, reply);
            }
            // Answers to a take-over's claims and reads (candidate.rs).
            Message::Claimed { shape, voters, .. } => {
                self.on_claimed(now, from, epoch, shape, voters);
            }
            Message::Declined { leader_epoch, .. } => {
                self.seen = self.seen.max(leader_epoch);
                self.on_declined(now, from, epoch);
            }
            Message::Entries {
                from: index,
                entries,
                ..
            } => self.on_entries(now, from, epoch, index, entries),
            Message::SnapshotIs { snapshot, .. } => {
                self.on_snapshot_is(now, from, epoch, snapshot);
            }
            // Answers to a leader's appends (leader.rs).
            Message::Appended { shape, .. } => self.on_appended(now, from, epoch, shape),
            Message::Refused { .. } => self.on_refused(from, epoch),
            // Either: a claim or an append met a newer promise.
            Message::Fenced { promised, .. } => {
                self.seen = self.seen.max(promised);
                match self.role {
                    Role::Leader(_) => self.on_append_fenced(epoch, promised),
                    Role::Candidate(_) => self.on_claim_fenced(now, from, epoch, promised),
                    Role::Follower { .. } => {}
                }
            }
        }
        self.take()
    }
}
