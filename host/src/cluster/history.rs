//! What this node saw happen to the cluster lately: members joining,
//! leaving and dying, and the master moving. The dashboard's overview
//! lists it.
//!
//! It is derived from the membership view alone (each change of the view
//! is compared with the one before), so every node keeps its own account
//! of what it saw, in memory, at most [`CLUSTER_HISTORY_MAX`] entries; nothing is
//! journaled or gossiped for it. A node that started later has a shorter
//! history.
//!
//! [`CLUSTER_HISTORY_MAX`]: crate::limits::CLUSTER_HISTORY_MAX

use crate::limits::CLUSTER_HISTORY_MAX;
use crate::membership::View;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::watch;

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// When this node saw it (ms since the Unix epoch).
    pub at: u64,
    /// `node_joined`, `node_leaving`, `node_gone` or `master_moved`.
    pub kind: &'static str,
    /// For people.
    pub message: String,
}

/// The recent entries, newest first.
#[derive(Debug, Default)]
pub struct History(Mutex<VecDeque<Entry>>);

impl History {
    /// The entries, newest first.
    pub fn entries(&self) -> Vec<Entry> {
        self.lock().iter().cloned().collect()
    }

    fn push(&self, entry: Entry) {
        let mut entries = self.lock();
        entries.push_front(entry);
        entries.truncate(CLUSTER_HISTORY_MAX);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what changed from `before` to `after`, seen at `at`.
    pub fn record(&self, at: u64, before: &View, after: &View) {
        for entry in changes(at, before, after) {
            self.push(entry);
        }
    }

    /// Follows `views` until the sender is dropped.
    pub async fn follow(&self, mut views: watch::Receiver<View>) {
        let mut before = views.borrow_and_update().clone();
        while views.changed().await.is_ok() {
            let after = views.borrow_and_update().clone();
            self.record(crate::contract::now_ms(), &before, &after);
            before = after;
        }
    }
}

/// The entries between two views, oldest event first.
fn changes(at: u64, before: &View, after: &View) -> Vec<Entry> {
    let entry = |kind, message| Entry { at, kind, message };
    let by_id = |view: &View| -> BTreeMap<String, (u64, bool)> {
        view.members
            .iter()
            .map(|m| (m.node_id.clone(), (m.generation, m.leaving)))
            .collect()
    };
    let (old, new) = (by_id(before), by_id(after));
    let mut out = Vec::new();
    for (id, (generation, _)) in &old {
        match new.get(id) {
            None => out.push(entry("node_gone", format!("node {id} left the live set"))),
            Some((later, _)) if later != generation => out.push(entry(
                "node_joined",
                format!("node {id} restarted (a new generation)"),
            )),
            Some((_, true)) if !old[id].1 => {
                out.push(entry("node_leaving", format!("node {id} is leaving")))
            }
            Some(_) => {}
        }
    }
    for id in new.keys().filter(|id| !old.contains_key(*id)) {
        out.push(entry("node_joined", format!("node {id} joined")));
    }
    let master = |view: &View| {
        view.master_host()
            .and_then(|m| Some((m.node_id.clone(), m.master_epoch?)))
    };
    if let Some((node, epoch)) = master(after).filter(|now| master(before).as_ref() != Some(now)) {
        out.push(entry(
            "master_moved",
            format!("the master runs on {node} (epoch {epoch})"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::tests::member;

    fn view(members: &[(&str, u64, bool, Option<u64>)]) -> View {
        View {
            members: members
                .iter()
                .map(|&(id, generation, leaving, epoch)| {
                    let mut m = member(id, generation, "back-end");
                    m.leaving = leaving;
                    m.master_epoch = epoch;
                    m
                })
                .collect(),
            ..View::default()
        }
    }

    #[test]
    fn joins_departures_restarts_and_master_moves_are_recorded_newest_first() {
        let history = History::default();
        let empty = view(&[]);
        let one = view(&[("a", 1, false, Some(1))]);
        let two = view(&[("a", 1, false, Some(1)), ("b", 2, false, None)]);
        let leaving = view(&[("a", 1, true, Some(1)), ("b", 2, false, None)]);
        let moved = view(&[("b", 2, false, Some(2))]);
        let restarted = view(&[("b", 3, false, Some(3))]);
        history.record(1, &empty, &one);
        history.record(2, &one, &two);
        history.record(3, &two, &leaving);
        history.record(4, &leaving, &moved);
        history.record(5, &moved, &restarted);
        history.record(6, &restarted, &restarted);
        let seen: Vec<(u64, &str, String)> = history
            .entries()
            .into_iter()
            .map(|e| (e.at, e.kind, e.message))
            .collect();
        assert_eq!(
            seen,
            [
                (5, "master_moved", "the master runs on b (epoch 3)".into()),
                (
                    5,
                    "node_joined",
                    "node b restarted (a new generation)".into()
                ),
                (4, "master_moved", "the master runs on b (epoch 2)".into()),
                (4, "node_gone", "node a left the live set".into()),
                (3, "node_leaving", "node a is leaving".into()),
                (2, "node_joined", "node b joined".into()),
                (1, "master_moved", "the master runs on a (epoch 1)".into()),
                (1, "node_joined", "node a joined".into()),
            ]
        );
    }

    #[test]
    fn only_the_newest_entries_are_kept() {
        let history = History::default();
        let (a, b) = (view(&[]), view(&[("a", 1, false, None)]));
        for at in 0..CLUSTER_HISTORY_MAX as u64 {
            history.record(2 * at, &a, &b);
            history.record(2 * at + 1, &b, &a);
        }
        let entries = history.entries();
        assert_eq!(entries.len(), CLUSTER_HISTORY_MAX);
        assert_eq!(entries[0].at, 2 * CLUSTER_HISTORY_MAX as u64 - 1);
    }
}
