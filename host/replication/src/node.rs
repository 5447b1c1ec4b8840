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
//! * **Follower**: a replica. It keeps a durable *promise*, the highest
//!   epoch it accepted, and refuses anything older (`Fenced`). Appends skip
//!   entries it holds with the same epoch, cut its journal at the first
//!   difference (never below the commit index it was told: that is a
//!   fault, reported and refused) and are acknowledged after a sync.
//! * **Candidate**: taking the master over. It claims an epoch above its
//!   promise on itself and every known back-end node. A node grants a
//!   claim only above its own promise, and declines one while it hears
//!   from a live master (unless the master itself hands over: `transfer`),
//!   so a busy master is not replaced because gossip thought it dead. As
//!   soon as a majority of the voters answered (of the voter set in its
//!   own journal *and* in the most advanced journal among the answers), it
//!   adopts that journal (copying what it lacks) and leads. It never waits
//!   for the slowest node.
//! * **Leader**: hosts the master. It writes a `Noop` of its epoch first,
//!   replicates to every known back-end node one request at a time (each
//!   carrying everything appended since; heartbeats when idle), and
//!   commits an index once a majority of the voters hold it durably and the
//!   entry before it is of its own epoch (older entries are committed only
//!   through one of its own: Raft's rule). A `Fenced` answer or any message
//!   of a newer epoch makes it step down at once.
//!
//! # The voter set
//!
//! Which nodes count for a majority is itself journaled (`Voters`
//! entries), and the newest one in a journal is in force from the moment
//! it is appended. The leader changes it one node at a time, and only once
//! its previous change and its own first entry are committed: any majority
//! of the old set then meets any majority of the new one. It adds a live
//! back-end node once that node's journal is within a few thousand entries
//! of the commit index, and removes a voter that has been gone from the view for
//! `voter_timeout_ms` or that an operator removed. A node started with
//! `bootstrap` whose journal and every answer hold no voter set yet starts
//! one with itself; other nodes never invent one.
//!
//! # Invariants asserted here
//!
//! The promise and every node's commit index only grow; a leader's epoch
//! is its promise; one epoch has one leader (a second one is a fault).

use crate::message::Message;
use crate::shape::Shape;
use crate::storage::{NodeId, Payload, Snapshot, Storage, StorageError};
use std::collections::{BTreeMap, BTreeSet};

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

/// Claims tried in one take-over, each above the promise a refusal named.
const CLAIM_ROUNDS_MAX: u32 = 5;
/// A node joins the voters once its journal is within this many entries
/// of the commit index: under steady load a replica is always an append
/// or two behind, so "all of it" would never come.
const CATCH_UP_ENTRIES: u64 = 4096;
/// Reads resent without an answer before a take-over gives up copying.
const COPY_RESENDS_MAX: u32 = 3;

#[derive(Debug)]
enum Role {
    Follower {
        /// The master heard from last, its epoch and when.
        leader: Option<(NodeId, u64, u64)>,
    },
    Candidate(Candidacy),
    Leader(Leadership),
}

#[derive(Debug)]
struct Candidacy {
    epoch: u64,
    transfer: bool,
    started: u64,
    rounds: u32,
    targets: BTreeSet<NodeId>,
    answers: BTreeMap<NodeId, (Shape, Vec<NodeId>)>,
    /// Nodes that declined or were fenced this round.
    refused: BTreeSet<NodeId>,
    copying: Option<Copying>,
}

#[derive(Debug)]
struct Copying {
    from: NodeId,
    theirs: Shape,
    next: u64,
    sent_at: u64,
    /// Reads resent in a row without an answer.
    resends: u32,
}

#[derive(Debug)]
struct Leadership {
    epoch: u64,
    peers: BTreeMap<NodeId, Peer>,
    /// Index of the newest voter change this leader may not build on yet.
    pending_change: u64,
    /// Operator removals waiting their turn.
    removals: BTreeSet<NodeId>,
    /// Nodes an operator removed: not added back while they stay in the
    /// view (a node still being declared dead, or one asked to go).
    barred: BTreeSet<NodeId>,
}

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
        if let Role::Leader(leader) = &mut self.role {
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
        self.tick(now)
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

    fn give_up(&mut self, now: u64, reason: TakeOverError) {
        self.role = Role::Follower { leader: None };
        self.retry_at = now + self.options.retry_ms;
        self.effect(Effect::TakeOverFailed {
            reason,
            retry_at: self.retry_at,
        });
    }

    /// Whether `answers` include a majority of `voters`.
    fn majority(answers: &BTreeMap<NodeId, (Shape, Vec<NodeId>)>, voters: &[NodeId]) -> bool {
        let answered = voters.iter().filter(|v| answers.contains_key(*v)).count();
        answered > voters.len() / 2
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
        let quorum = (own_voters.is_empty() || Self::majority(&candidacy.answers, &own_voters))
            && (best_voters.is_empty() || Self::majority(&candidacy.answers, &best_voters));
        if !quorum {
            if everyone {
                let voters = if best_voters.is_empty() {
                    own_voters
                } else {
                    best_voters
                };
                let answered = voters
                    .iter()
                    .filter(|v| candidacy.answers.contains_key(*v))
                    .count();
                self.give_up(
                    now,
                    TakeOverError::NoMajority {
                        answered,
                        voters: voters.len(),
                    },
                );
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

    fn lead(&mut self, now: u64, adopted: Option<NodeId>) {
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

    fn stop(&mut self, epoch: u64, newer: u64) {
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
    /// that took too long, change voters that are due.
    pub fn tick(&mut self, now: u64) -> Output {
        match &mut self.role {
            Role::Leader(leader) => {
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
            Role::Candidate(candidacy) => {
                if let Some(copying) = &mut candidacy.copying {
                    // Copying takes as long as the journal needs, while
                    // the node it copies from answers.
                    if now >= copying.sent_at + self.options.request_timeout_ms {
                        if copying.resends >= COPY_RESENDS_MAX {
                            let reason = format!("{} stopped answering reads", copying.from);
                            self.give_up(now, TakeOverError::Storage(reason));
                        } else {
                            copying.sent_at = now;
                            copying.resends += 1;
                            let (epoch, from, to) =
                                (candidacy.epoch, copying.next, copying.from.clone());
                            self.send_read(&to, epoch, from);
                        }
                    }
                } else if now >= candidacy.started + self.options.claim_timeout_ms {
                    let voters = self.storage.voters();
                    let answered = voters
                        .iter()
                        .filter(|v| candidacy.answers.contains_key(*v))
                        .count();
                    self.give_up(
                        now,
                        TakeOverError::NoMajority {
                            answered,
                            voters: voters.len(),
                        },
                    );
                }
            }
            Role::Follower { .. } => {}
        }
        self.take()
    }

    /// A message from `from`.
    pub fn step(&mut self, now: u64, from: &NodeId, message: Message) -> Output {
        let epoch = message.epoch();
        match message {
            Message::Claim { epoch, transfer } => self.on_claim(now, from, epoch, transfer),
            Message::Claimed { shape, voters, .. } => {
                if let Role::Candidate(c) = &mut self.role
                    && c.epoch == epoch
                    && c.copying.is_none()
                {
                    c.answers.insert(from.clone(), (shape, voters));
                    self.evaluate(now);
                }
            }
            Message::Declined { leader_epoch, .. } => {
                self.seen = self.seen.max(leader_epoch);
                if let Role::Candidate(c) = &mut self.role
                    && c.epoch == epoch
                {
                    c.refused.insert(from.clone());
                    self.evaluate(now);
                }
            }
            Message::Fenced { promised, .. } => self.on_fenced(now, from, epoch, promised),
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
            Message::Appended { shape, .. } => self.on_appended(now, from, epoch, shape),
            Message::HandOver { .. } => {
                // Only from the master this node follows, of the current
                // epoch: the claim then goes out as a transfer, which
                // followers grant although they heard that master lately.
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
            Message::Refused { .. } => {
                if let Role::Leader(leader) = &mut self.role
                    && leader.epoch == epoch
                    && let Some(peer) = leader.peers.get_mut(from)
                {
                    peer.inflight = None;
                }
            }
            Message::Read {
                from: index,
                bytes_max,
                ..
            } => {
                let reply = self.read(epoch, index, bytes_max);
                self.send(from, reply);
            }
            Message::Entries {
                from: index,
                entries,
                ..
            } => {
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
            Message::SnapshotIs { snapshot, .. } => {
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
        }
        self.take()
    }

    /// Whether this node is copying from `from` in `epoch` (and, if
    /// given, expects entries from `index`).
    fn copying_from(&self, from: &NodeId, epoch: u64, index: Option<u64>) -> bool {
        matches!(&self.role, Role::Candidate(c) if c.epoch == epoch
            && c.copying.as_ref().is_some_and(|k| k.from == *from
                && index.is_none_or(|index| k.next == index)))
    }

    fn on_claim(&mut self, now: u64, from: &NodeId, epoch: u64, transfer: bool) {
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
        match &self.role {
            Role::Leader(leader) => {
                let own = leader.epoch;
                self.stop(own, epoch);
            }
            Role::Candidate(_) => self.give_up(now, TakeOverError::Outbid { promised: epoch }),
            Role::Follower { .. } => {}
        }
        self.role = Role::Follower { leader: None };
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

    fn on_fenced(&mut self, now: u64, from: &NodeId, epoch: u64, promised: u64) {
        self.seen = self.seen.max(promised);
        match &mut self.role {
            Role::Leader(leader) if leader.epoch == epoch && promised > epoch => {
                self.stop(epoch, promised);
            }
            Role::Candidate(c) if c.epoch == epoch && c.copying.is_none() => {
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
            _ => {}
        }
    }

    /// Checks a master's append or install against the promise; follows
    /// it if it is current. Answers `Fenced` and returns false if not.
    fn accept_master(&mut self, now: u64, from: &NodeId, epoch: u64) -> bool {
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
        match &self.role {
            Role::Leader(leader) if leader.epoch == epoch => {
                let reason = format!("two masters in epoch {epoch}: this node and {from}");
                self.fault(reason);
                return false;
            }
            Role::Leader(leader) => {
                let own = leader.epoch;
                self.stop(own, epoch);
            }
            // Another node claimed the same epoch and won a majority
            // first (each node grants an epoch once): follow it.
            Role::Candidate(_) => self.give_up(now, TakeOverError::Outbid { promised: epoch }),
            Role::Follower { .. } => {}
        }
        self.role = Role::Follower {
            leader: Some((from.clone(), epoch, now)),
        };
        true
    }

    fn append(
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
    fn store(
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

    fn install(&mut self, epoch: u64, snapshot: Snapshot) -> Message {
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

    fn read(&mut self, epoch: u64, from: u64, bytes_max: u64) -> Message {
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

    fn on_appended(&mut self, now: u64, from: &NodeId, epoch: u64, theirs: Shape) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;
    use std::collections::VecDeque;

    /// A few replicators and the messages between them, delivered by hand.
    struct Net {
        nodes: BTreeMap<NodeId, Replicator<MemStorage>>,
        queue: VecDeque<(NodeId, NodeId, Message)>,
        effects: Vec<(NodeId, Effect)>,
    }

    fn options(id: &str) -> Options {
        Options {
            bootstrap: id == "n0",
            voter_timeout_ms: None,
            ..Options::new(id)
        }
    }

    impl Net {
        fn new(ids: &[&str]) -> Self {
            let nodes = ids
                .iter()
                .map(|id| {
                    (
                        id.to_string(),
                        Replicator::new(options(id), MemStorage::new()),
                    )
                })
                .collect();
            Self {
                nodes,
                queue: VecDeque::new(),
                effects: Vec::new(),
            }
        }

        fn node(&mut self, id: &str) -> &mut Replicator<MemStorage> {
            self.nodes.get_mut(id).expect("a node")
        }

        fn absorb(&mut self, id: &str, output: Output) {
            for (to, message) in output.sends {
                self.queue.push_back((id.to_string(), to, message));
            }
            for effect in output.effects {
                self.effects.push((id.to_string(), effect));
            }
        }

        /// Delivers until quiet, dropping what is to or from `down`.
        fn settle(&mut self, now: u64, down: &[&str]) {
            while let Some((from, to, message)) = self.queue.pop_front() {
                if down.contains(&from.as_str()) || down.contains(&to.as_str()) {
                    continue;
                }
                let output = self.node(&to).step(now, &from, message);
                self.absorb(&to, output);
            }
        }

        fn members(&mut self, now: u64, members: &[&str]) {
            let ids: Vec<NodeId> = self.nodes.keys().cloned().collect();
            for id in ids {
                let view = members.iter().map(|m| m.to_string());
                let output = self.node(&id).set_members(now, view);
                self.absorb(&id, output);
            }
        }

        /// n0 bootstraps and adds the others as voters.
        fn cluster(ids: &[&str]) -> Self {
            let mut net = Self::new(ids);
            net.members(0, ids);
            let output = net.node("n0").take_over(0, false).expect("bootstrap");
            net.absorb("n0", output);
            for round in 1..=ids.len() as u64 * 2 {
                net.settle(round, &[]);
                net.members(round, ids);
            }
            net.settle(100, &[]);
            assert_eq!(net.node("n0").voters().len(), ids.len());
            net
        }
    }

    #[test]
    fn a_take_over_proceeds_once_a_majority_answered() {
        let mut net = Net::cluster(&["n0", "n1", "n2", "n3", "n4"]);
        // n0 and n4 are gone; n1 claims after the lease.
        let now = 10_000;
        let output = net.node("n1").take_over(now, false).expect("claims");
        net.absorb("n1", output);
        // n2 and n3 answer; n4 never does: n1 does not wait for it.
        net.settle(now, &["n0", "n4"]);
        assert_eq!(net.node("n1").leading(), Some(2));
        assert!(
            net.effects
                .iter()
                .any(|(id, e)| id == "n1" && matches!(e, Effect::Leading { epoch: 2, .. }))
        );
    }

    #[test]
    fn a_minority_cannot_take_over_and_waits_before_trying_again() {
        let mut net = Net::cluster(&["n0", "n1", "n2", "n3", "n4"]);
        let now = 10_000;
        let output = net.node("n1").take_over(now, false).expect("claims");
        net.absorb("n1", output);
        net.settle(now, &["n0", "n2", "n3"]);
        assert_eq!(net.node("n1").leading(), None);
        // Not everyone answered: it gives up when the claim times out.
        let output = net.node("n1").tick(now + 2_000);
        assert!(matches!(
            output.effects[..],
            [Effect::TakeOverFailed {
                reason: TakeOverError::NoMajority {
                    answered: 2,
                    voters: 5
                },
                ..
            }]
        ));
        // And it refuses to try again before retry_at.
        assert!(matches!(
            net.node("n1").take_over(now + 2_001, false),
            Err(TakeOverError::TooSoon { .. })
        ));
    }

    #[test]
    fn a_replica_whose_append_is_unanswered_still_hears_the_master_alive() {
        let mut net = Net::cluster(&["n0", "n1", "n2"]);
        let heartbeat = options("n0").heartbeat_ms;
        let lease = options("n0").lease_ms;
        // An append to n1 goes unanswered (lost, or a large one being
        // written): n0 sends no second append while it is in flight, but
        // tells n1 it is alive every heartbeat.
        let start = 1_000;
        let (_, output) = net
            .node("n0")
            .propose(start, vec![Payload::Data(b"x".to_vec())])
            .unwrap();
        net.absorb("n0", output);
        net.queue
            .retain(|(_, to, m)| !(to == "n1" && matches!(m, Message::Append { .. })));
        net.settle(start, &[]);
        let mut now = start;
        let mut alive = 0;
        while now < start + 2 * lease {
            now += heartbeat;
            let output = net.node("n0").tick(now);
            net.absorb("n0", output);
            alive += net
                .queue
                .iter()
                .filter(|(_, to, m)| to == "n1" && matches!(m, Message::Alive { epoch: 1 }))
                .count();
            net.queue
                .retain(|(_, to, m)| !(to == "n1" && matches!(m, Message::Append { .. })));
            net.settle(now, &[]);
        }
        assert!(alive >= 2, "{alive} Alive messages to n1");
        // n1 heard the master within its lease: it is not silent and
        // refuses to take over.
        assert_eq!(net.node("n1").silent_leader(now, lease), None);
        assert!(matches!(
            net.node("n1").take_over(now, false),
            Err(TakeOverError::MasterAlive { epoch: 1 })
        ));
        // Once nothing comes at all, it is silent after `silence`.
        let silent_at = now + lease;
        assert_eq!(
            net.node("n1").silent_leader(silent_at, lease),
            Some((&"n0".to_string(), 1))
        );
    }

    #[test]
    fn a_cut_off_node_that_claims_in_vain_does_not_fence_the_master_when_it_returns() {
        let mut net = Net::cluster(&["n0", "n1", "n2"]);
        let claim_timeout = options("n2").claim_timeout_ms;
        let retry = options("n2").retry_ms;
        // n2 hears nothing (its lease lapsed) and claims, again and again,
        // but none of its claims gets through.
        let mut now = 10_000;
        for _ in 0..3 {
            let output = net.node("n2").take_over(now, false).expect("claims");
            net.absorb("n2", output);
            net.queue.retain(|(from, ..)| from != "n2");
            now += claim_timeout;
            let output = net.node("n2").tick(now);
            net.absorb("n2", output);
            net.queue.retain(|(from, ..)| from != "n2");
            now += retry;
        }
        assert_eq!(net.node("n2").storage().promise(), 1, "no promise raised");
        // Healed: the master's next append is taken, not fenced.
        let output = net.node("n0").tick(now);
        net.absorb("n0", output);
        net.settle(now, &[]);
        assert_eq!(net.node("n0").leading(), Some(1));
        let output = net
            .node("n0")
            .propose(now, vec![Payload::Data(b"x".to_vec())]);
        let (range, output) = output.expect("still the master");
        net.absorb("n0", output);
        net.settle(now, &[]);
        assert!(net.node("n0").commit() >= range.end);
    }

    #[test]
    fn nodes_that_hear_a_live_master_decline_to_replace_it() {
        let mut net = Net::cluster(&["n0", "n1", "n2"]);
        // n2's failure detector is wrong: n0 is busy, not dead, and its
        // heartbeats arrive.
        let output = net.node("n0").tick(200);
        net.absorb("n0", output);
        net.settle(200, &[]);
        assert!(matches!(
            net.node("n2").take_over(300, false),
            Err(TakeOverError::MasterAlive { epoch: 1 })
        ));
        // Even a node that missed the heartbeats is declined by the others
        // while they hear from the master.
        let output = net.node("n0").tick(10_000);
        net.absorb("n0", output);
        net.settle(10_000, &["n2"]);
        let output = net.node("n2").take_over(10_100, false).expect("claims");
        net.absorb("n2", output);
        net.settle(10_100, &[]);
        assert_eq!(net.node("n0").leading(), Some(1));
        assert_eq!(net.node("n2").leading(), None);
        assert!(net.effects.iter().any(|(id, e)| id == "n2"
            && matches!(
                e,
                Effect::TakeOverFailed {
                    reason: TakeOverError::NoMajority { .. },
                    ..
                }
            )));
    }

    #[test]
    fn an_older_epochs_entry_commits_only_with_one_of_the_leaders_own() {
        // Raft's "figure 8": an entry of an older epoch on a majority is
        // not committed by counting; only an entry of the leader's epoch
        // commits it.
        let mut net = Net::cluster(&["n0", "n1", "n2"]);
        let (range, output) = net
            .node("n0")
            .propose(1_000, vec![Payload::Data(b"x".to_vec())])
            .expect("leads");
        // The entry reaches nobody: n0 crashes.
        drop(output);
        let old = range.start;
        let storage = net.node("n0").storage().crash();
        let mut n0 = Replicator::new(
            Options {
                bytes_max: 1,
                ..options("n0")
            },
            storage,
        );
        // n0 takes over again in epoch 2 with n1's answer (n2 is away).
        let output = n0.take_over(20_000, false).expect("claims");
        net.nodes.insert("n0".into(), n0);
        net.absorb("n0", output);
        net.queue.retain(|(_, to, _)| to != "n2");
        // Deliver the claim and its answer only.
        for _ in 0..2 {
            let (from, to, message) = net.queue.pop_front().expect("a message");
            let output = net.node(&to).step(20_000, &from, message);
            net.absorb(&to, output);
        }
        assert_eq!(net.node("n0").leading(), Some(2));
        let commit_before = net.node("n0").commit();
        assert!(commit_before <= old);
        // One entry per append: deliver until n1 is sent the old entry
        // alone.
        net.queue.retain(|(_, to, _)| to == "n1");
        let ack = loop {
            let (from, to, message) = net.queue.pop_front().expect("a message");
            let old_alone = matches!(&message, Message::Append { entries, first, .. }
                if entries.len() == 1 && *first == old);
            let output = net.node(&to).step(20_000, &from, message);
            if old_alone {
                break output.sends[0].1.clone();
            }
            net.absorb(&to, output);
            net.queue.retain(|(_, to, _)| to != "n2");
        };
        let output = net.node("n0").step(20_000, &"n1".to_string(), ack);
        // The old entry is on 2 of 3 now, yet not committed by counting.
        assert_eq!(net.node("n0").commit(), commit_before);
        net.absorb("n0", output);
        net.settle(20_000, &["n2"]);
        assert_eq!(net.node("n0").commit(), old + 2);
    }

    #[test]
    fn replicas_become_voters_under_steady_load() {
        let mut net = Net::new(&["n0", "n1"]);
        net.members(0, &["n0", "n1"]);
        let output = net.node("n0").take_over(0, false).expect("bootstrap");
        net.absorb("n0", output);
        // Every round proposes before the replica's acknowledgement of the
        // last one arrives: it is never wholly caught up.
        for round in 1..50 {
            let (_, output) = net
                .node("n0")
                .propose(round, vec![Payload::Data(vec![1]); 10])
                .expect("leads");
            net.absorb("n0", output);
            net.members(round, &["n0", "n1"]);
            net.settle(round, &[]);
        }
        assert_eq!(net.node("n0").voters(), vec!["n0", "n1"]);
    }

    #[test]
    fn a_node_an_operator_removed_is_not_added_back_while_it_stays_in_view() {
        let mut net = Net::cluster(&["n0", "n1", "n2"]);
        let output = net.node("n0").remove_voter(500, "n2").expect("leads");
        net.absorb("n0", output);
        for now in 501..520 {
            net.settle(now, &[]);
            net.members(now, &["n0", "n1", "n2"]);
        }
        assert_eq!(net.node("n0").voters(), vec!["n0", "n1"]);
        // Gone from the view, then back (a restart): a voter again.
        net.members(600, &["n0", "n1"]);
        for now in 601..620 {
            net.settle(now, &[]);
            net.members(now, &["n0", "n1", "n2"]);
        }
        assert_eq!(net.node("n0").voters(), vec!["n0", "n1", "n2"]);
    }

    #[test]
    fn voters_change_one_at_a_time_and_never_drop_the_leader() {
        let mut net = Net::cluster(&["n0", "n1", "n2"]);
        let output = net.node("n0").remove_voter(500, "n0").expect("leads");
        net.absorb("n0", output);
        let output = net.node("n0").remove_voter(500, "n1").expect("leads");
        net.absorb("n0", output);
        let output = net.node("n0").remove_voter(500, "n2").expect("leads");
        net.absorb("n0", output);
        // One change is appended; the next waits for its commit.
        assert_eq!(net.node("n0").voters(), vec!["n0", "n2"]);
        net.settle(501, &[]);
        net.members(502, &["n0"]);
        net.settle(503, &[]);
        assert_eq!(net.node("n0").voters(), vec!["n0"]);
    }
}
