//! The leader: the node hosting the master.
//!
//! It writes a `Noop` of its epoch first, replicates to every known
//! back-end node one request at a time (each carrying everything appended
//! since; heartbeats when idle), and commits an index once a majority of
//! the voters hold it durably and the entry before it is of its own epoch
//! (older entries are committed only through one of its own: Raft's rule).
//! A `Fenced` answer or any message of a newer epoch makes it step down at
//! once.
//!
//! # The voter set
//!
//! Which nodes count for a majority is itself journaled (`Voters`
//! entries), and the newest one in a journal is in force from the moment
//! it is appended. The leader changes it one node at a time, and only once
//! its previous change and its own first entry are committed: any majority
//! of the old set then meets any majority of the new one. It adds a live
//! back-end node once that node's journal is within a few thousand entries
//! of the commit index, and removes a voter that has been gone from the
//! view for `voter_timeout_ms` or that an operator removed. A node started
//! with `bootstrap` whose journal and every answer hold no voter set yet
//! starts one with itself; other nodes never invent one.
//!
//! This module owns the leader's state (`Leadership`, a `Peer` per other
//! node), becoming leader at the end of a take-over (`lead`), proposing,
//! replication and its answers, the commit index, voter changes, and
//! stepping down. Invariants: the leader's epoch is its promise; at most one
//! append is in flight per peer; a voter change waits for the previous one
//! to commit; the leader never removes itself. It does not answer other
//! nodes' appends or claims (`follower.rs`, which also makes it step down
//! for a newer epoch).

use super::{Effect, Output, ProposeError, Replicator, Role, TakeOverError};
use crate::message::Message;
use crate::shape::Shape;
use crate::storage::{NodeId, Payload, Storage};
use std::collections::{BTreeMap, BTreeSet};

/// A node joins the voters once its journal is within this many entries
/// of the commit index: under steady load a replica is always an append
/// or two behind, so "all of it" would never come.
const CATCH_UP_ENTRIES: u64 = 4096;

/// The master's node's replication state.
#[derive(Debug)]
pub(super) struct Leadership {
    /// The epoch led: this node's promise.
    pub(super) epoch: u64,
    /// Every other back-end node it replicates to: the nodes it claimed
    /// from and every member since.
    peers: BTreeMap<NodeId, Peer>,
    /// Index of the newest voter change this leader may not build on yet.
    pending_change: u64,
    /// Operator removals waiting their turn.
    removals: BTreeSet<NodeId>,
    /// Nodes an operator removed: not added back while they stay in the
    /// view (a node still being declared dead, or one asked to go).
    barred: BTreeSet<NodeId>,
}

/// What the leader knows of one other back-end node.
#[derive(Debug, Default)]
struct Peer {
    /// Entries below agree with this journal and are durable there.
    matched: u64,
    /// Where the next append starts.
    next: u64,
    /// When the request in flight was sent.
    inflight: Option<u64>,
    /// When the last request was sent (`None`: never, so one is due).
    last_sent: Option<u64>,
    /// When the node left the view (members only).
    gone_since: Option<u64>,
    /// When it last acknowledged an append.
    acked_at: Option<u64>,
}

impl<S: Storage> Replicator<S> {
    /// Whether `node`'s journal holds every entry this leader holds.
    pub fn caught_up(&self, node: &str) -> bool {
        match &self.role {
            Role::Leader(leader) => leader
                .peers
                .get(node)
                .is_some_and(|peer| peer.matched >= self.storage.shape().next),
            _ => false,
        }
    }

    /// Entries each other node lacks (leader only).
    pub fn lag(&self) -> Vec<(NodeId, u64)> {
        let next = self.storage.shape().next;
        match &self.role {
            Role::Leader(leader) => leader
                .peers
                .iter()
                .map(|(node, peer)| (node.clone(), next.saturating_sub(peer.matched)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Asks the leader to remove `node` from the voter set (an operator's
    /// decision). Done once earlier changes are committed.
    pub fn remove_voter(&mut self, now: u64, node: &str) -> Result<Output, ProposeError> {
        let Role::Leader(leader) = &mut self.role else {
            return Err(ProposeError::NotLeader);
        };
        leader.removals.insert(node.to_string());
        leader.barred.insert(node.to_string());
        Ok(self.tick(now))
    }

    /// Leads the epoch a take-over just won, with `adopted` the node whose
    /// journal it copied, if any.
    pub(super) fn lead(&mut self, now: u64, adopted: Option<NodeId>) {
        let Role::Candidate(candidacy) = &self.role else {
            return;
        };
        let epoch = candidacy.epoch;
        assert_eq!(
            self.storage.promise(),
            epoch,
            "a leader's epoch is its promise"
        );
        let mut peers: BTreeSet<NodeId> = candidacy.targets.clone();
        peers.extend(self.members.iter().cloned());
        peers.remove(&self.options.id);
        let mut voters = self.storage.voters();
        let bootstrap = voters.is_empty();
        let written = (|| {
            self.storage.append(epoch, Payload::Noop)?;
            if bootstrap {
                voters = vec![self.options.id.clone()];
                self.storage
                    .append(epoch, Payload::Voters(voters.clone()))?;
            }
            self.storage.sync()
        })();
        if let Err(error) = written {
            self.give_up(now, TakeOverError::Storage(error.0));
            return;
        }
        let next = self.storage.shape().next;
        self.role = Role::Leader(Leadership {
            epoch,
            peers: peers
                .into_iter()
                .map(|node| {
                    let peer = Peer {
                        next,
                        ..Peer::default()
                    };
                    (node, peer)
                })
                .collect(),
            pending_change: next - 1,
            removals: BTreeSet::new(),
            barred: BTreeSet::new(),
        });
        self.effect(Effect::Leading { epoch, adopted });
        if bootstrap {
            self.effect(Effect::Voters { voters });
        }
        self.advance(now);
        self.replicate(now);
    }

    /// Appends `payloads` as the leader, makes them durable here and sends
    /// them on. Returns the index range they got.
    pub fn propose(
        &mut self,
        now: u64,
        payloads: Vec<Payload>,
    ) -> Result<(std::ops::Range<u64>, Output), ProposeError> {
        let Some(epoch) = self.leading() else {
            return Err(ProposeError::NotLeader);
        };
        let first = self.storage.shape().next;
        let written = (|| {
            for payload in payloads {
                self.storage.append(epoch, payload)?;
            }
            self.storage.sync()
        })();
        if let Err(error) = written {
            self.stop(epoch, epoch);
            self.fault(format!("journal write failed: {error}"));
            return Err(ProposeError::Storage(error.0));
        }
        let next = self.storage.shape().next;
        self.advance(now);
        self.replicate(now);
        Ok((first..next, self.take()))
    }

    /// Whether a majority of the voters (this node counting if it is one)
    /// acknowledged an append within `within_ms` (leader only): while not,
    /// the master refuses new work rather than let it wait for a commit.
    pub fn quorum_heard(&self, now: u64, within_ms: u64) -> bool {
        self.leading().is_some() && self.heard_voters(now, within_ms) > self.voters().len() / 2
    }

    /// Voters that acknowledged an append within `within_ms`, this node
    /// included if it is one (leader only; 0 otherwise).
    pub fn heard_voters(&self, now: u64, within_ms: u64) -> usize {
        let Role::Leader(leader) = &self.role else {
            return 0;
        };
        let voters = self.storage.voters();
        voters
            .iter()
            .filter(|voter| {
                **voter == self.options.id
                    || leader
                        .peers
                        .get(*voter)
                        .and_then(|peer| peer.acked_at)
                        .is_some_and(|at| now < at + within_ms)
            })
            .count()
    }

    /// Steps down and hands the master over to `to`, which must hold every
    /// entry ([`caught_up`](Self::caught_up)).
    pub fn hand_over(&mut self, to: &NodeId) -> Result<Output, ProposeError> {
        let Some(epoch) = self.leading() else {
            return Err(ProposeError::NotLeader);
        };
        self.stop(epoch, epoch);
        self.send(to, Message::HandOver { epoch });
        Ok(self.take())
    }

    /// Steps down voluntarily (before handing the master over).
    pub fn step_down(&mut self) -> Output {
        if let Some(epoch) = self.leading() {
            self.stop(epoch, epoch);
        }
        self.take()
    }

    /// Stops leading `epoch`, superseded by `newer` (the same epoch for a
    /// voluntary step-down).
    pub(super) fn stop(&mut self, epoch: u64, newer: u64) {
        self.role = Role::Follower { leader: None };
        self.effect(Effect::SteppedDown { epoch, newer });
    }

    /// Recomputes the commit index from the voters' acknowledgements.
    fn advance(&mut self, _now: u64) {
        let Role::Leader(leader) = &self.role else {
            return;
        };
        let shape = self.storage.shape();
        let voters = self.storage.voters();
        if voters.is_empty() {
            return;
        }
        let mut matched: Vec<u64> = voters
            .iter()
            .map(|voter| {
                if *voter == self.options.id {
                    shape.next
                } else {
                    leader.peers.get(voter).map_or(0, |peer| peer.matched)
                }
            })
            .collect();
        matched.sort_unstable_by(|a, b| b.cmp(a));
        let index = matched[voters.len() / 2];
        if index > self.commit && shape.epoch_at(index - 1) == Some(leader.epoch) {
            self.set_commit(index);
        }
    }

    /// Sends an append to every peer with nothing in flight that lacks
    /// entries or is due a heartbeat.
    fn replicate(&mut self, now: u64) {
        let Role::Leader(leader) = &self.role else {
            return;
        };
        let shape = self.storage.shape();
        let due: Vec<NodeId> = leader
            .peers
            .iter()
            .filter(|(_, peer)| {
                peer.inflight.is_none()
                    && (peer.next < shape.next
                        || peer
                            .last_sent
                            .is_none_or(|sent| now >= sent + self.options.heartbeat_ms))
            })
            .map(|(node, _)| node.clone())
            .collect();
        for node in due {
            self.send_append(now, &node, &shape);
        }
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        let epoch = leader.epoch;
        let mut waiting = Vec::new();
        for (node, peer) in &mut leader.peers {
            let due = peer
                .last_sent
                .is_none_or(|sent| now >= sent + self.options.heartbeat_ms);
            if peer.inflight.is_some() && due {
                peer.last_sent = Some(now);
                waiting.push(node.clone());
            }
        }
        for node in waiting {
            self.send(&node, Message::Alive { epoch });
        }
    }

    /// Sends `node` the entries from its `next` on (an empty append is a
    /// heartbeat), or the snapshot if they were compacted away.
    fn send_append(&mut self, now: u64, node: &NodeId, shape: &Shape) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        let epoch = leader.epoch;
        let Some(peer) = leader.peers.get_mut(node) else {
            return;
        };
        peer.inflight = Some(now);
        peer.last_sent = Some(now);
        let next = peer.next.min(shape.next);
        let message = if next < shape.first {
            match self.storage.snapshot() {
                Ok(Some(snapshot)) => Message::Install { epoch, snapshot },
                Ok(None) | Err(_) => {
                    peer.inflight = None;
                    let reason =
                        format!("entries from {next} are compacted and no snapshot is here");
                    self.fault(reason);
                    return;
                }
            }
        } else {
            let entries = match self.storage.read(next, self.options.bytes_max) {
                Ok(entries) => entries,
                Err(error) => {
                    peer.inflight = None;
                    self.fault(format!("journal read failed: {error}"));
                    return;
                }
            };
            Message::Append {
                epoch,
                first: next,
                prev_epoch: next.checked_sub(1).and_then(|prev| shape.epoch_at(prev)),
                entries: entries.into_iter().map(|e| (e.epoch, e.payload)).collect(),
                commit: self.commit,
            }
        };
        self.send(node, message);
    }

    /// Makes voter changes that are due (leader only).
    fn change_voters(&mut self, now: u64) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        if self.commit <= leader.pending_change {
            return;
        }
        let voters = self.storage.voters();
        let me = &self.options.id;
        leader.removals.retain(|node| voters.contains(node));
        let timeout = self.options.voter_timeout_ms;
        let remove = leader
            .removals
            .iter()
            .find(|node| *node != me)
            .cloned()
            .or_else(|| {
                let timeout = timeout?;
                voters
                    .iter()
                    .filter(|v| *v != me)
                    .find(|v| {
                        leader
                            .peers
                            .get(*v)
                            .and_then(|p| p.gone_since)
                            .is_some_and(|since| now >= since + timeout)
                    })
                    .cloned()
            });
        let add = || {
            self.members
                .iter()
                .filter(|node| !voters.contains(node) && !leader.barred.contains(*node))
                .find(|node| {
                    *node == me
                        || leader
                            .peers
                            .get(*node)
                            .is_some_and(|peer| peer.matched + CATCH_UP_ENTRIES >= self.commit)
                })
                .cloned()
        };
        let mut next = voters.clone();
        if let Some(node) = remove {
            leader.removals.remove(&node);
            next.retain(|v| *v != node);
        } else if let Some(node) = add() {
            next.push(node);
            next.sort();
        } else {
            return;
        }
        if let Ok((range, output)) = self.propose(now, vec![Payload::Voters(next.clone())]) {
            if let Role::Leader(leader) = &mut self.role {
                leader.pending_change = range.start;
            }
            self.out.sends.extend(output.sends);
            self.out.effects.extend(output.effects);
            self.effect(Effect::Voters { voters: next });
        }
    }

    /// Time passed: resend what timed out, heartbeat, give up a take-over
    /// Tracks the membership view (leader only): a peer for each new
    /// member, when each peer left the view, and which barred nodes left it.
    pub(super) fn track_members(&mut self, now: u64) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        for node in &self.members {
            if *node != self.options.id {
                leader.peers.entry(node.clone()).or_insert_with(|| Peer {
                    next: self.storage.shape().next,
                    ..Peer::default()
                });
            }
        }
        leader.barred.retain(|node| self.members.contains(node));
        for (node, peer) in &mut leader.peers {
            if self.members.contains(node) {
                peer.gone_since = None;
            } else {
                peer.gone_since.get_or_insert(now);
            }
        }
    }

    /// Requests that timed out are due again; heartbeats and voter changes
    /// that are due go out.
    pub(super) fn tick_leader(&mut self, now: u64) {
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        for peer in leader.peers.values_mut() {
            if peer
                .inflight
                .is_some_and(|sent| now >= sent + self.options.request_timeout_ms)
            {
                peer.inflight = None;
            }
        }
        self.change_voters(now);
        self.replicate(now);
    }

    /// `from` acknowledged an append of `epoch`: its journal is `theirs`.
    pub(super) fn on_appended(&mut self, now: u64, from: &NodeId, epoch: u64, theirs: Shape) {
        let shape = self.storage.shape();
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        if leader.epoch != epoch {
            return;
        }
        let Some(peer) = leader.peers.get_mut(from) else {
            return;
        };
        peer.inflight = None;
        peer.acked_at = Some(now);
        let agreed = shape.divergence(&theirs);
        peer.next = agreed;
        peer.matched = peer.matched.max(agreed.min(theirs.next));
        self.advance(now);
        let Role::Leader(leader) = &self.role else {
            return;
        };
        if leader.peers.get(from).is_some_and(|p| p.next < shape.next) {
            self.send_append(now, from, &shape);
        }
    }

    /// `from` could not store an append of `epoch`: it is due again.
    pub(super) fn on_refused(&mut self, from: &NodeId, epoch: u64) {
        if let Role::Leader(leader) = &mut self.role
            && leader.epoch == epoch
            && let Some(peer) = leader.peers.get_mut(from)
        {
            peer.inflight = None;
        }
    }

    /// An append of `epoch` met a newer promise: step down.
    pub(super) fn on_append_fenced(&mut self, epoch: u64, promised: u64) {
        if let Role::Leader(leader) = &self.role
            && leader.epoch == epoch
            && promised > epoch
        {
            self.stop(epoch, promised);
        }
    }
}
