//! The candidate: a node taking the master over.
//!
//! It claims an epoch above its promise on itself and every known back-end
//! node. A node grants a claim only above its own promise, and declines one
//! while it hears from a live master (unless the master itself hands over:
//! `transfer`), so a busy master is not replaced because gossip thought it
//! dead. As soon as a majority of the voters answered (of the voter set in
//! its own journal *and* in the most advanced journal among the answers),
//! it adopts that journal (copying what it lacks) and leads. It never waits
//! for the slowest node.
//!
//! This module owns the take-over's state (`Candidacy`, and `Copying`
//! while it reads the adopted journal), the answers to its claims and
//! reads, and every way a take-over ends without leading: all of them go
//! through `give_up`, which makes the node a follower and sets when it may
//! try again.
//!
//! Invariants: the candidate makes its own promise of its epoch only once a
//! majority granted it (`seal`), so a node cut off from the others comes
//! back without a raised promise; it copies only after sealing, and leads
//! only with a journal at least as advanced as every answer. It does not
//! answer other nodes' claims (`follower.rs`) nor replicate (`leader.rs`,
//! whose `lead` ends a successful take-over).

use super::{Effect, Output, Replicator, Role, TakeOverError};
use crate::message::Message;
use crate::shape::Shape;
use crate::storage::{Entry, NodeId, Snapshot, Storage};
use std::collections::{BTreeMap, BTreeSet};

/// Claims tried in one take-over, each above the promise a refusal named.
const CLAIM_ROUNDS_MAX: u32 = 5;
/// Reads resent without an answer before a take-over gives up copying.
const COPY_RESENDS_MAX: u32 = 3;

/// A take-over under way.
#[derive(Debug)]
pub(super) struct Candidacy {
    /// The epoch claimed.
    pub(super) epoch: u64,
    /// The master handed over: claims are granted despite its lease.
    transfer: bool,
    /// When this round's claims went out.
    started: u64,
    /// Claims tried in this take-over before this one.
    rounds: u32,
    /// The nodes asked (every member and voter but this one).
    pub(super) targets: BTreeSet<NodeId>,
    /// Grants so far, this node's own included: each journal and the
    /// voter set in force in it.
    answers: BTreeMap<NodeId, (Shape, Vec<NodeId>)>,
    /// Nodes that declined or were fenced this round.
    refused: BTreeSet<NodeId>,
    /// Set once the claim is sealed and a more advanced journal must be
    /// copied.
    copying: Option<Copying>,
}

impl Candidacy {
    /// How many of `voters` granted the claim.
    fn answered(&self, voters: &[NodeId]) -> usize {
        voters
            .iter()
            .filter(|v| self.answers.contains_key(*v))
            .count()
    }

    /// Whether a majority of `voters` granted the claim.
    fn majority(&self, voters: &[NodeId]) -> bool {
        self.answered(voters) > voters.len() / 2
    }
}

/// The sealed take-over reading the most advanced journal it found.
#[derive(Debug)]
struct Copying {
    /// The node whose journal is adopted.
    from: NodeId,
    /// Its journal, as it answered the claim.
    theirs: Shape,
    /// Where the read in flight starts.
    next: u64,
    /// When that read was sent.
    sent_at: u64,
    /// Reads resent in a row without an answer.
    resends: u32,
}

impl<S: Storage> Replicator<S> {
    /// Starts taking the master over (the membership says this node should
    /// host it). `transfer` when the current master hands it over.
    pub fn take_over(&mut self, now: u64, transfer: bool) -> Result<Output, TakeOverError> {
        if now < self.retry_at {
            return Err(TakeOverError::TooSoon {
                retry_at: self.retry_at,
            });
        }
        match &self.role {
            Role::Follower {
                leader: Some((_, epoch, heard)),
            } if !transfer && now < heard + self.options.lease_ms => {
                return Err(TakeOverError::MasterAlive { epoch: *epoch });
            }
            Role::Follower { .. } => {}
            _ => return Err(TakeOverError::Busy),
        }
        let epoch = self.seen.max(self.storage.promise()) + 1;
        self.claim(now, epoch, transfer, 0);
        Ok(self.take())
    }

    /// Asks every member and voter to promise `epoch`. The claimant makes
    /// its own promise only once a majority granted it ([`Self::seal`]): a
    /// node cut off from the others that claims again and again must not
    /// come back with a raised promise that fences the live master.
    fn claim(&mut self, now: u64, epoch: u64, transfer: bool, rounds: u32) {
        let mut targets: BTreeSet<NodeId> = self.members.clone();
        targets.extend(self.storage.voters());
        targets.remove(&self.options.id);
        let mut answers = BTreeMap::new();
        answers.insert(
            self.options.id.clone(),
            (self.storage.shape(), self.storage.voters()),
        );
        for node in &targets {
            self.send(node, Message::Claim { epoch, transfer });
        }
        self.role = Role::Candidate(Candidacy {
            epoch,
            transfer,
            started: now,
            rounds,
            targets,
            answers,
            refused: BTreeSet::new(),
            copying: None,
        });
        self.evaluate(now);
    }

    /// Ends the take-over without leading: the node follows no one and may
    /// try again after `retry_ms`. Every failed take-over ends here.
    pub(super) fn give_up(&mut self, now: u64, reason: TakeOverError) {
        self.role = Role::Follower { leader: None };
        self.retry_at = now + self.options.retry_ms;
        self.effect(Effect::TakeOverFailed {
            reason,
            retry_at: self.retry_at,
        });
    }

    /// Gives up for want of a majority of `voters` among the answers.
    fn no_majority(&mut self, now: u64, voters: &[NodeId]) {
        let Role::Candidate(candidacy) = &self.role else {
            return;
        };
        let answered = candidacy.answered(voters);
        self.give_up(
            now,
            TakeOverError::NoMajority {
                answered,
                voters: voters.len(),
            },
        );
    }

    /// Makes the claimant's own promise of `epoch` once its claim won, before
    /// it leads or copies a journal in that epoch. A promise of `epoch` or
    /// more made meanwhile (another claim granted) ends the claim.
    fn seal(&mut self, now: u64, epoch: u64) -> bool {
        let promised = self.storage.promise();
        if promised >= epoch {
            self.give_up(now, TakeOverError::Outbid { promised });
            return false;
        }
        if let Err(error) = self.promise(epoch) {
            self.give_up(now, TakeOverError::Storage(error.0));
            return false;
        }
        true
    }

    /// Decides a take-over once enough answers are in.
    fn evaluate(&mut self, now: u64) {
        let Role::Candidate(candidacy) = &self.role else {
            return;
        };
        if candidacy.copying.is_some() {
            return;
        }
        let me = &self.options.id;
        let (own_shape, own_voters) = candidacy.answers[me].clone();
        let (best_node, (best_shape, best_voters)) = candidacy
            .answers
            .iter()
            .max_by_key(|(node, (shape, _))| (shape.rank(), *node == me))
            .map(|(node, answer)| (node.clone(), answer.clone()))
            .expect("the candidate's own answer");
        let everyone = candidacy.answers.len() + candidacy.refused.len() > candidacy.targets.len();
        let epoch = candidacy.epoch;
        if own_voters.is_empty() && best_voters.is_empty() {
            // No voter set anywhere that answered: a new cluster.
            if self.options.bootstrap {
                if self.seal(now, epoch) {
                    self.lead(now, None);
                }
            } else if everyone {
                self.give_up(now, TakeOverError::NoVoters);
            }
            return;
        }
        let quorum = (own_voters.is_empty() || candidacy.majority(&own_voters))
            && (best_voters.is_empty() || candidacy.majority(&best_voters));
        if !quorum {
            if everyone {
                let voters = if best_voters.is_empty() {
                    own_voters
                } else {
                    best_voters
                };
                self.no_majority(now, &voters);
            }
            return;
        }
        if !self.seal(now, epoch) {
            return;
        }
        if best_shape.rank() <= own_shape.rank() {
            self.lead(now, None);
            return;
        }
        let next = best_shape.divergence(&own_shape);
        let Role::Candidate(candidacy) = &mut self.role else {
            unreachable!()
        };
        candidacy.copying = Some(Copying {
            from: best_node.clone(),
            theirs: best_shape,
            next,
            sent_at: now,
            resends: 0,
        });
        self.send_read(&best_node, epoch, next);
    }

    /// Asks `to` for its journal from `from` (a take-over copying it).
    fn send_read(&mut self, to: &NodeId, epoch: u64, from: u64) {
        let bytes_max = self.options.bytes_max as u64;
        self.send(
            to,
            Message::Read {
                epoch,
                from,
                bytes_max,
            },
        );
    }

    /// Continues copying the adopted journal after storing a part of it.
    fn copied(&mut self, now: u64) {
        let shape = self.storage.shape();
        let Role::Candidate(candidacy) = &mut self.role else {
            return;
        };
        let epoch = candidacy.epoch;
        let Some(copying) = &mut candidacy.copying else {
            return;
        };
        if shape.rank() >= copying.theirs.rank() {
            let from = copying.from.clone();
            self.lead(now, Some(from));
            return;
        }
        let next = copying.theirs.divergence(&shape).max(shape.first);
        if next <= copying.next && shape.first <= copying.next {
            let reason = format!("no progress copying from {} at {next}", copying.from);
            self.give_up(now, TakeOverError::Storage(reason));
            return;
        }
        copying.next = next;
        copying.sent_at = now;
        copying.resends = 0;
        let from = copying.from.clone();
        self.send_read(&from, epoch, next);
    }

    /// A claim's timeout or a copy's resend is due.
    pub(super) fn tick_candidate(&mut self, now: u64) {
        let Role::Candidate(candidacy) = &mut self.role else {
            return;
        };
        if let Some(copying) = &mut candidacy.copying {
            // Copying takes as long as the journal needs, while the node it
            // copies from answers.
            if now >= copying.sent_at + self.options.request_timeout_ms {
                if copying.resends >= COPY_RESENDS_MAX {
                    let reason = format!("{} stopped answering reads", copying.from);
                    self.give_up(now, TakeOverError::Storage(reason));
                } else {
                    copying.sent_at = now;
                    copying.resends += 1;
                    let (epoch, from, to) = (candidacy.epoch, copying.next, copying.from.clone());
                    self.send_read(&to, epoch, from);
                }
            }
        } else if now >= candidacy.started + self.options.claim_timeout_ms {
            let voters = self.storage.voters();
            self.no_majority(now, &voters);
        }
    }

    /// `from` granted the claim of `epoch`; this is its journal.
    pub(super) fn on_claimed(
        &mut self,
        now: u64,
        from: &NodeId,
        epoch: u64,
        shape: Shape,
        voters: Vec<NodeId>,
    ) {
        if let Role::Candidate(c) = &mut self.role
            && c.epoch == epoch
            && c.copying.is_none()
        {
            c.answers.insert(from.clone(), (shape, voters));
            self.evaluate(now);
        }
    }

    /// `from` declined the claim of `epoch`: it hears from a live master.
    pub(super) fn on_declined(&mut self, now: u64, from: &NodeId, epoch: u64) {
        if let Role::Candidate(c) = &mut self.role
            && c.epoch == epoch
        {
            c.refused.insert(from.clone());
            self.evaluate(now);
        }
    }

    /// `from` promised `promised`, not below the claim of `epoch`: claim
    /// again above it, a few rounds at most.
    pub(super) fn on_claim_fenced(&mut self, now: u64, from: &NodeId, epoch: u64, promised: u64) {
        let Role::Candidate(c) = &mut self.role else {
            return;
        };
        if c.epoch != epoch || c.copying.is_some() {
            return;
        }
        c.refused.insert(from.clone());
        if promised >= epoch {
            if c.rounds + 1 >= CLAIM_ROUNDS_MAX {
                self.give_up(now, TakeOverError::Outbid { promised });
            } else {
                let (transfer, rounds) = (c.transfer, c.rounds + 1);
                let next = promised.max(self.storage.promise()) + 1;
                self.claim(now, next, transfer, rounds);
            }
        }
    }

    /// Entries of the adopted journal from `index`, read from `from`.
    pub(super) fn on_entries(
        &mut self,
        now: u64,
        from: &NodeId,
        epoch: u64,
        index: u64,
        entries: Vec<Entry>,
    ) {
        if self.copying_from(from, epoch, Some(index)) {
            let commit = self.commit;
            let first = entries.first().map_or(index, |e| e.index);
            let prev = None;
            let entries = entries.into_iter().map(|e| (e.epoch, e.payload)).collect();
            match self.store(first, prev, entries, commit) {
                Ok(()) => self.copied(now),
                Err(reason) => self.give_up(now, TakeOverError::Storage(reason)),
            }
        }
    }

    /// The adopted journal's snapshot, read from `from` (the entries asked
    /// for were compacted there).
    pub(super) fn on_snapshot_is(
        &mut self,
        now: u64,
        from: &NodeId,
        epoch: u64,
        snapshot: Snapshot,
    ) {
        if self.copying_from(from, epoch, None) {
            let index = snapshot.index;
            match self.storage.install(snapshot) {
                Ok(()) => {
                    self.commit = self.commit.max(index);
                    self.copied(now)
                }
                Err(error) => self.give_up(now, TakeOverError::Storage(error.0)),
            }
        }
    }

    /// Whether this node is copying from `from` in `epoch` (and, if
    /// given, expects entries from `index`).
    fn copying_from(&self, from: &NodeId, epoch: u64, index: Option<u64>) -> bool {
        matches!(&self.role, Role::Candidate(c) if c.epoch == epoch
            && c.copying.as_ref().is_some_and(|k| k.from == *from
                && index.is_none_or(|index| k.next == index)))
    }
}
