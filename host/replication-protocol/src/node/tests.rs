//! Scenario tests of the protocol, a few nodes at a time: messages are
//! delivered by hand, so each test shows one rule (a majority suffices, a
//! live master is not replaced, Raft's commit rule, voter changes) in the
//! order that exercises it. The simulator (`crate::sim`) covers the rest
//! under random faults.

use super::*;
use crate::storage::{MemStorage, Payload};
use std::collections::{BTreeMap, VecDeque};

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
