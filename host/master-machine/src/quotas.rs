//! Quotas: how much of the cluster one namespace may hold at once.
//!
//! A namespace (see [`crate::namespaces`]) may be given [`Quotas`] by a
//! cluster-wide admin ([`Command::SetQuotas`], journaled as `QuotasSet`,
//! in every snapshot from version 15): most jobs waiting, most attempts
//! running, most submissions a second, most bytes of results kept. None
//! set is no quota: the cluster's own bounds (`queue_max`, ...) still
//! hold for everyone.
//!
//! # Where each is enforced
//!
//! - **Waiting**, **submissions a second** and **result bytes** are
//!   checked as a submission (one job, or a DAG's jobs together) is
//!   decided: past one, it is refused with `quota_exceeded`, which the API
//!   answers `429` with `Retry-After`; nothing of it is kept, and the
//!   namespace's other jobs and every other namespace go on. A job fired
//!   by a schedule (schedules are cluster-wide) is not refused, but counts.
//! - **Running** is enforced where attempts start: a poll passes over a
//!   namespace at its quota, whose jobs wait in line (the index lines up
//!   each namespace's jobs apart, so passing over one costs nothing per
//!   job it holds; see `index`). Lowering the quota below what runs stops
//!   no attempt: the next start waits until enough ended.
//!
//! # Submissions a second
//!
//! A token bucket per namespace with that quota: it holds at most one
//! second's worth, refills continuously at the rate, and every job added
//! to the namespace (a submission's, a DAG's, a schedule's) takes one as
//! its `Submitted` event is applied, at the event's time. So the bucket is
//! state derived from the journal alone, identical on every replica and in
//! every snapshot: a take-over neither refills nor empties it. A
//! submission of `n` jobs is admitted when the bucket holds `n`, or holds
//! a whole second's worth (a DAG larger than a second's quota is admitted
//! into a full bucket, which it leaves in debt: the namespace then waits
//! until the debt is paid back). The bucket counts thousandths of a job,
//! so a rate of `r` a second refills `r` of them every millisecond.
//!
//! # Bounds
//!
//! Each quota is at least 1 and at most its bound
//! ([`QUOTA_JOBS_MAX`](crate::limits::QUOTA_JOBS_MAX),
//! [`QUOTA_RATE_MAX`](crate::limits::QUOTA_RATE_MAX),
//! [`QUOTA_BYTES_MAX`](crate::limits::QUOTA_BYTES_MAX)); anything else is
//! `invalid_quota`. A namespace given quotas is one the master knows (it
//! counts toward [`NAMESPACES_MAX`](crate::limits::NAMESPACES_MAX) and is
//! listed with its totals), even before its first job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limits::{NAMESPACES_MAX, QUOTA_BYTES_MAX, QUOTA_JOBS_MAX, QUOTA_RATE_MAX};
use crate::master::{Master, decided, reject};
use crate::namespaces::{canonical, check_name, name_of};
use crate::protocol::*;

/// Every namespace's quotas, by name (the default one's as `default`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaBook {
    /// The quotas set, none all `None`.
    pub(crate) set: BTreeMap<String, Quotas>,
    /// The bucket of each namespace with a quota of submissions a second.
    pub(crate) buckets: BTreeMap<String, Bucket>,
}

/// A token bucket of submissions, in thousandths of a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// What it held at `at` (below 0: in debt).
    pub(crate) milli: i64,
    /// When it was last drawn from or set.
    pub(crate) at: Millis,
}

impl Bucket {
    /// What it holds at `now` with a quota of `rate` a second: refilled by
    /// `rate` thousandths a millisecond since `at`, to at most a second's
    /// worth.
    fn level(self, rate: u32, now: Millis) -> i64 {
        let full = i64::from(rate) * 1000;
        let refill = (now.saturating_sub(self.at)).saturating_mul(u64::from(rate));
        let refill = i64::try_from(refill).unwrap_or(i64::MAX);
        self.milli.saturating_add(refill).min(full)
    }
}

/// Whether `quotas` may be set: each one given is at least 1 and at most
/// its bound; `Err` says which is not.
pub fn check(quotas: &Quotas) -> Result<(), String> {
    let bounds = [
        ("waiting_max", quotas.waiting_max, QUOTA_JOBS_MAX),
        (
            "running_max",
            quotas.running_max.map(u64::from),
            QUOTA_JOBS_MAX,
        ),
        (
            "submissions_per_second",
            quotas.submissions_per_second.map(u64::from),
            QUOTA_RATE_MAX,
        ),
        ("result_bytes_max", quotas.result_bytes_max, QUOTA_BYTES_MAX),
    ];
    for (name, value, max) in bounds {
        if let Some(value) = value
            && !(1..=max).contains(&value)
        {
            return Err(format!("{name}: {value} is not 1 to {max}"));
        }
    }
    Ok(())
}

impl Quotas {
    /// Whether no quota is set.
    pub fn is_none(&self) -> bool {
        *self == Quotas::default()
    }
}

impl QuotaBook {
    /// The quotas of the namespace the API names `name` (none set: all
    /// `None`).
    pub(crate) fn of(&self, name: &str) -> Quotas {
        self.set.get(name).copied().unwrap_or_default()
    }

    /// A namespace's most running attempts, if it has that quota.
    pub(crate) fn running_max(&self, namespace: Option<&str>) -> Option<u32> {
        if self.set.is_empty() {
            return None;
        }
        self.set.get(name_of(namespace))?.running_max
    }

    /// Takes one job from `namespace`'s bucket at `at` (a job added).
    pub(crate) fn draw(&mut self, namespace: Option<&str>, at: Millis) {
        if self.buckets.is_empty() {
            return;
        }
        let name = name_of(namespace);
        let rate = self.set.get(name).and_then(|q| q.submissions_per_second);
        if let (Some(bucket), Some(rate)) = (self.buckets.get_mut(name), rate) {
            let level = bucket.level(rate, at.max(bucket.at));
            *bucket = Bucket {
                milli: level.saturating_sub(1000),
                at: at.max(bucket.at),
            };
        }
    }

    /// Sets `name`'s quotas at `at`: a new quota of submissions starts
    /// with a full bucket; a changed one keeps what the bucket held, up to
    /// a second's worth of the new rate.
    fn set_quotas(&mut self, name: &str, quotas: Quotas, at: Millis) {
        match quotas.submissions_per_second {
            None => drop(self.buckets.remove(name)),
            Some(rate) => {
                let before = self.set.get(name).and_then(|q| q.submissions_per_second);
                let milli = match (self.buckets.get(name), before) {
                    (Some(bucket), Some(before)) => bucket.level(before, at.max(bucket.at)),
                    _ => i64::MAX,
                };
                let milli = milli.min(i64::from(rate) * 1000);
                self.buckets.insert(name.to_owned(), Bucket { milli, at });
            }
        }
        match quotas.is_none() {
            true => drop(self.set.remove(name)),
            false => drop(self.set.insert(name.to_owned(), quotas)),
        }
    }
}

/// Keeps what a restored snapshot holds within the master's bounds: the
/// quotas of namespaces it knows (`known`, at most [`NAMESPACES_MAX`]),
/// and a bucket only where a quota of submissions is.
pub(crate) fn bounded(mut book: QuotaBook, known: impl Fn(&str) -> bool) -> QuotaBook {
    (book.set).retain(|name, quotas| known(name) && !quotas.is_none());
    while book.set.len() > NAMESPACES_MAX {
        book.set.pop_last();
    }
    let set = &book.set;
    (book.buckets).retain(|name, _| {
        set.get(name)
            .is_some_and(|q| q.submissions_per_second.is_some())
    });
    book
}

/// The refusal of a submission past a quota.
fn exceeded<T>(name: &str, why: String) -> Result<T, Rejection> {
    reject(
        codes::QUOTA_EXCEEDED,
        format!("namespace {name:?} is at its quota: {why}; retry later"),
    )
}

impl Master {
    pub(crate) fn decide_set_quotas(
        &self,
        now: Millis,
        namespace: &str,
        quotas: &Quotas,
    ) -> Result<Decision, Rejection> {
        check(quotas).or_else(|why| reject(codes::INVALID_QUOTA, why))?;
        (self.namespaces).check_setting(namespace, !quotas.is_none())?;
        decided(
            now,
            vec![EventKind::QuotasSet {
                namespace: namespace.to_owned(),
                quotas: *quotas,
            }],
        )
    }

    pub(crate) fn apply_quotas_set(&mut self, namespace: &str, quotas: &Quotas, at: Millis) {
        // A journal is decoded, not trusted: a name that cannot be one, or
        // one past the bound, is dropped as every replica drops it.
        if check_name(namespace).is_err() {
            return;
        }
        if !quotas.is_none() && !self.namespaces.known(namespace) {
            return;
        }
        self.quotas.set_quotas(namespace, *quotas, at);
    }

    /// Whether `n` more jobs may be submitted in `namespace` at `now`:
    /// refused with `quota_exceeded` past its quota of jobs waiting,
    /// submissions a second or result bytes kept.
    pub(crate) fn check_quotas(
        &self,
        now: Millis,
        namespace: Option<&str>,
        n: u64,
    ) -> Result<(), Rejection> {
        if self.quotas.set.is_empty() {
            return Ok(());
        }
        let namespace = canonical(namespace);
        let name = name_of(namespace);
        let Some(quotas) = self.quotas.set.get(name) else {
            return Ok(());
        };
        if let Some(max) = quotas.waiting_max {
            let waiting = self.index.in_state(namespace, JobState::Queued);
            if waiting.saturating_add(n) > max {
                return exceeded(
                    name,
                    format!("{waiting} jobs are waiting of its most {max}, and this adds {n}"),
                );
            }
        }
        if let Some(rate) = quotas.submissions_per_second {
            let bucket = self.quotas.buckets.get(name).copied().unwrap_or_default();
            let level = bucket.level(rate, now.max(bucket.at));
            let wanted = i64::try_from(n.min(u64::from(rate))).unwrap_or(i64::MAX) * 1000;
            if level < wanted {
                let short = u64::try_from(wanted - level).unwrap_or(u64::MAX);
                let wait_ms = short.div_ceil(u64::from(rate));
                return exceeded(
                    name,
                    format!(
                        "this adds {n} to its most of {rate} submissions a second (room again in {wait_ms} ms)"
                    ),
                );
            }
        }
        if let Some(max) = quotas.result_bytes_max {
            let kept = self.index.result_bytes_in(namespace);
            if kept >= max {
                return exceeded(
                    name,
                    format!("its jobs keep {kept} bytes of results, its most is {max}"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "quotas_tests.rs"]
mod quotas_tests;
