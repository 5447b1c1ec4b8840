//! Uniqueness keys: a submission whose key a job submitted less than
//! `window_ms` earlier holds gets that job, not a new one.
//!
//! A hold is state, not index: it outlives its job (a purged job's key
//! still holds until its window ends) and is kept in snapshots with the
//! rest of [`Keyed`](crate::keys::Keyed). At most [`UNIQUE_KEYS_MAX`] keys
//! are held; a submission that would add one more is refused
//! (`unique_keys_full`) unless an ended hold can make room.
//!
//! Invariants: a key names at most one job; the event that adds a hold
//! forgets at most `FORGET_PER_EVENT` ended ones, so no `apply` does
//! unbounded work. This module does not check the key or the window (see
//! `validation`).

use crate::limits::{FORGET_PER_EVENT, UNIQUE_KEYS_MAX};
use serde::{Deserialize, Serialize};

use crate::master::{Master, reject};
use crate::protocol::*;

/// A uniqueness key's job and the end of its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hold {
    pub(crate) job: JobId,
    pub(crate) until: Millis,
}

impl Master {
    /// The job that answers a submission with `options` at `now`: the
    /// holder of its uniqueness key while the key holds; `None` if the
    /// submission makes a job.
    pub(crate) fn unique_holder(
        &self,
        now: Millis,
        options: &JobOptions,
    ) -> Result<Option<JobId>, Rejection> {
        let Some(unique) = &options.unique else {
            return Ok(None);
        };
        // A namespace's uniqueness keys are its own: another's job is
        // never the answer.
        let key = crate::namespaces::scoped_key(options.namespace.as_deref(), &unique.key);
        match self.keyed.uniques.get(&*key) {
            Some(hold) if hold.until > now => Ok(Some(hold.job)),
            // An ended hold is replaced; otherwise one more must fit,
            // or one must end now (and be forgotten on the way).
            Some(_) => Ok(None),
            None if self.keyed.uniques.len() < UNIQUE_KEYS_MAX => Ok(None),
            None if self
                .index
                .unique_until
                .first()
                .is_some_and(|(until, _)| *until <= now) =>
            {
                Ok(None)
            }
            None => reject(
                codes::UNIQUE_KEYS_FULL,
                format!(
                    "{UNIQUE_KEYS_MAX} uniqueness keys are held; they free up as their windows end"
                ),
            ),
        }
    }

    /// Gives uniqueness key `key` to `job` until `until`; forgets holds
    /// that ended by `at`.
    pub(crate) fn hold_unique(&mut self, key: &str, job: JobId, until: Millis, at: Millis) {
        for _ in 0..FORGET_PER_EVENT {
            match self.index.unique_until.first() {
                Some((end, _)) if *end <= at => {
                    let (_, ended) = self.index.unique_until.pop_first().expect("present");
                    self.keyed.uniques.remove(&ended);
                }
                _ => break,
            }
        }
        if let Some(old) = self
            .keyed
            .uniques
            .insert(key.to_owned(), Hold { job, until })
        {
            self.index.unique_until.remove(&(old.until, key.to_owned()));
        }
        self.index.unique_until.insert((until, key.to_owned()));
    }
}
