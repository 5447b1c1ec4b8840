//! Fair shares: when namespaces compete for workers, each gets running
//! capacity in proportion to its weight, measured in the CPU time its
//! attempts really used (metered in the sandbox, [`Usage::cpu_us`]), not
//! in job counts.
//!
//! # The algorithm
//!
//! Start-time fair queuing over measured CPU. Every namespace has a
//! *virtual time*: the CPU its attempts used, divided by its weight
//! (`Shares::vtime`, in [`SCALE`]ths of a microsecond per unit of
//! weight). A poll hands out its free slots one job at a time, each time
//! to the namespace with the smallest *key*:
//!
//! ```text
//! key(n) = vtime(n) + (running(n) + started(n)) × mean(n) / weight(n)
//! ```
//!
//! where `running(n)` is its attempts running, `started(n)` those this
//! poll already started, and `mean(n)` what one of its attempts cost on
//! average so far ([`ESTIMATE_US`] before its first metered one): an
//! attempt is charged its expected cost while it runs and its measured
//! cost once it ends (`Finished` adds `cpu_us / weight` to the virtual
//! time). Within a namespace, jobs keep their order (priority, then first
//! come). Ties go to line order.
//!
//! A namespace that had nothing queued or running and submits again
//! starts at the *clock* (the virtual time of the namespace whose attempt
//! started last, the smallest among those competing then), not at its old
//! virtual time: an idle namespace keeps no credit, so its share went to
//! the busy ones and is not paid back to it later. A namespace alone on
//! the cluster takes every slot.
//!
//! # Bounds
//!
//! Between two namespaces `a` and `b` that stay backlogged over an
//! interval (each always has a runnable job a free worker fits), the CPU
//! each receives, divided by its weight, differs by at most the cost of
//! one attempt of each divided by its weight, plus what the estimates of
//! their running attempts are off by: `|S_a/w_a - S_b/w_b| <= C_a/w_a +
//! C_b/w_b + slots × |mean - actual| / w`, whatever the length of the
//! interval (standard for start-time fair queuing, with `C` the largest
//! attempt's CPU and `slots` the cluster's). So over a long run the shares
//! converge on the weights; over a short one, a namespace of long
//! attempts is ahead or behind by about one attempt per slot. What a
//! namespace cannot use (no worker fits its jobs, it is at a quota, its
//! keys are at their limits) goes to the others.
//!
//! # Where it lives
//!
//! Weights, virtual times and the clock are state: changed only as
//! `WeightSet`, `Submitted`, `Assigned` and `Finished` are applied (each
//! at its own time, from its own fields), journaled through those
//! events, in every snapshot from version 15. So a master that takes over
//! hands out slots exactly as the one before would have: fair shares
//! survive fail-over. The per-poll arithmetic is in
//! [`Master::startable`] (`keys`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::limits::{NAMESPACES_MAX, WEIGHT_MAX};
use crate::master::{Master, decided, reject};
use crate::namespaces::{check_name, name_of};
use crate::protocol::*;

/// Virtual time per microsecond of CPU at weight 1.
pub const SCALE: u128 = 1_000_000;

/// What an attempt of a namespace none of whose attempts was metered yet
/// is expected to cost, in microseconds of CPU.
pub const ESTIMATE_US: u64 = 10_000;

/// Weights and virtual times of the namespaces (see the module notes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shares {
    /// Weights other than 1, by namespace (`default` for the default one).
    pub(crate) weights: BTreeMap<String, u32>,
    /// Each namespace's virtual time, once it submitted a job.
    pub(crate) vtime: BTreeMap<String, u128>,
    /// The virtual time of the namespace whose attempt started last.
    pub(crate) clock: u128,
}

impl Shares {
    /// The weight of the namespace the API names `name`.
    pub(crate) fn weight(&self, name: &str) -> u32 {
        self.weights.get(name).copied().unwrap_or(1).max(1)
    }

    /// The virtual time of the namespace the API names `name` (0 before
    /// its first job: only a snapshot older than shares holds such a
    /// namespace's jobs).
    fn vtime(&self, name: &str) -> u128 {
        self.vtime.get(name).copied().unwrap_or(0)
    }

    /// Namespace `name` had nothing queued or running and gets a job: it
    /// starts at the clock if it is behind it (no credit for being idle).
    pub(crate) fn woken(&mut self, name: &str) {
        let clock = self.clock;
        match self.vtime.get_mut(name) {
            Some(vtime) => *vtime = (*vtime).max(clock),
            None => self.account(name, clock),
        }
    }

    /// Opens namespace `name`'s account at virtual time `vtime`, within the
    /// bound of namespaces (a decision never makes more; a hostile journal
    /// might).
    fn account(&mut self, name: &str, vtime: u128) {
        if self.vtime.len() < NAMESPACES_MAX {
            self.vtime.insert(name.to_owned(), vtime);
        }
    }

    /// An attempt of namespace `name` started: the clock moves to its
    /// virtual time.
    pub(crate) fn started(&mut self, name: &str) {
        self.clock = self.clock.max(self.vtime(name));
    }

    /// An attempt of namespace `name` used `cpu_us` of CPU.
    pub(crate) fn charge(&mut self, name: &str, cpu_us: u64) {
        let cost = u128::from(cpu_us) * SCALE / u128::from(self.weight(name));
        match self.vtime.get_mut(name) {
            Some(vtime) => *vtime = vtime.saturating_add(cost),
            None => self.account(name, self.clock.saturating_add(cost)),
        }
    }
}

/// Whether `weight` may be given: 1 to [`WEIGHT_MAX`].
pub fn check_weight(weight: u32) -> Result<(), String> {
    match (1..=WEIGHT_MAX).contains(&weight) {
        true => Ok(()),
        false => Err(format!("weight: {weight} is not 1 to {WEIGHT_MAX}")),
    }
}

/// Keeps what a restored snapshot holds within the master's bounds: the
/// weights and virtual times of namespaces it knows (`known`, at most
/// [`NAMESPACES_MAX`]), weights within theirs.
pub(crate) fn bounded(mut shares: Shares, known: impl Fn(&str) -> bool) -> Shares {
    (shares.weights).retain(|name, weight| known(name) && check_weight(*weight).is_ok());
    shares.vtime.retain(|name, _| known(name));
    while shares.vtime.len() > NAMESPACES_MAX {
        shares.vtime.pop_last();
    }
    shares
}

impl Master {
    pub(crate) fn decide_set_weight(
        &self,
        now: Millis,
        namespace: &str,
        weight: u32,
    ) -> Result<Decision, Rejection> {
        check_weight(weight).or_else(|why| reject(codes::INVALID_WEIGHT, why))?;
        (self.namespaces).check_setting(namespace, weight != 1)?;
        decided(
            now,
            vec![EventKind::WeightSet {
                namespace: namespace.to_owned(),
                weight,
            }],
        )
    }

    pub(crate) fn apply_weight_set(&mut self, namespace: &str, weight: u32) {
        // A journal is decoded, not trusted (see `quotas`).
        if check_name(namespace).is_err() || check_weight(weight).is_err() {
            return;
        }
        if weight == 1 {
            self.shares.weights.remove(namespace);
        } else if self.namespaces.known(namespace) {
            self.shares.weights.insert(namespace.to_owned(), weight);
        }
        self.index
            .touch(crate::namespaces::canonical(Some(namespace)));
    }

    /// What one attempt of `namespace` is expected to cost, in
    /// microseconds of CPU: its attempts' mean so far.
    pub(crate) fn expected_cpu_us(&self, namespace: Option<&str>) -> u64 {
        let totals = self.namespaces.totals.get(name_of(namespace));
        match totals {
            Some(totals) if totals.attempts_metered > 0 => {
                (totals.cpu_us / totals.attempts_metered).max(1)
            }
            _ => ESTIMATE_US,
        }
    }

    /// What starting one more attempt of `namespace` adds to its key.
    pub(crate) fn share_step(&self, namespace: Option<&str>) -> u128 {
        let weight = self.shares.weight(name_of(namespace));
        u128::from(self.expected_cpu_us(namespace)) * SCALE / u128::from(weight)
    }

    /// The key `namespace` competes with for the next slot (see the
    /// module notes): its virtual time and its running attempts at their
    /// expected cost.
    pub(crate) fn share_key(&self, namespace: Option<&str>) -> u128 {
        let running = self.index.in_state(namespace, JobState::Running);
        let vtime = self.shares.vtime(name_of(namespace));
        vtime.saturating_add(u128::from(running) * self.share_step(namespace))
    }

    /// Brings the index's share keys up to date for the namespaces the
    /// last `apply` touched: a poll reads them, not the accounts, so its
    /// cost does not grow with the namespaces it does not start a job of.
    pub(crate) fn rekey(&mut self) {
        for namespace in std::mem::take(&mut self.index.dirty) {
            let name = namespace.as_deref();
            let key = (self.index.first_in_line(name)).map(|first| (self.share_key(name), first));
            self.index.set_share_key(namespace, key);
        }
    }

    /// The share keys of every namespace with a job in line, computed
    /// afresh (a rebuilt index).
    pub(crate) fn rekey_all(&mut self) {
        self.index.share_keys.clear();
        self.index.by_key.clear();
        let mut dirty: BTreeSet<Option<String>> = (self.index.lines.keys())
            .map(|line| line.namespace.clone())
            .collect();
        dirty.insert(None);
        self.index.dirty = dirty;
        self.rekey();
    }
}

#[cfg(test)]
#[path = "shares_tests.rs"]
mod shares_tests;
