//! How a request from any node reaches the master: the proxy's decisions,
//! sans IO.
//!
//! A node that does not host the master forwards each request to the node
//! it believes does. Hosts change (elections, hand-overs, crashes), so one
//! call may take several tries; [`Call`] decides, after each, whether to
//! try again at once (a node answered "moved to X"), wait for the view to
//! change, or give up, and *how* to give up:
//!
//! * **Every request is safe to send again** (a submission carries the
//!   request id its node drew, which the master and its successors
//!   deduplicate on), so a call is retried after any failure, even one
//!   after which the master may have acted.
//! * A redirect is followed at once, unless the try that earned it already
//!   followed one: two nodes naming each other must not bounce a call
//!   between them without a pause.
//! * When the wait runs out, a call whose every failure left the master
//!   certainly untouched gives up as [`Stop::Unavailable`] (the client may
//!   send it again as a new request). If any failure may have reached the
//!   master and the caller's outcome matters (a submission), it gives up as
//!   [`Stop::Indeterminate`]: the job may or may not exist.
//!
//! The node's `cluster::link` runs this machine over HTTP; the simulator
//! ([`crate::sim`]) runs the same machine over its faulty network and
//! checks that a call given up as unavailable never made a job.

use std::fmt::Display;

/// How one try failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure<T> {
    /// No node is known to host the master.
    NoMaster,
    /// The node tried does not host the master, and says who does.
    Moved(T),
    /// The master cannot have acted on the request (refused before it was
    /// sent, or answered "not here").
    NotActed(String),
    /// The master may have acted: the request left, but no answer that
    /// says otherwise came back (a timeout, a dropped connection, an
    /// answer that does not decode, a host replaced mid-request).
    MayHaveActed(String),
}

/// What the caller does after a failed try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Try again now ([`Call::target`] gives the redirect).
    Now,
    /// Wait for a change of view or a short pause, then try again.
    Wait,
    /// The call failed.
    Stop(Stop),
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// No master acted on it: sending it again is a new request.
    Unavailable(String),
    /// A master may have acted on it (only for calls whose outcome
    /// matters).
    Indeterminate(String),
}

/// One call's retry state.
#[derive(Debug, Clone)]
pub struct Call<T> {
    deadline: u64,
    wait_ms: u64,
    outcome_matters: bool,
    tries: u32,
    redirect: Option<T>,
    /// The target of the try in progress, and whether a redirect chose it.
    tried: Option<T>,
    hinted: bool,
    unanswered: Option<String>,
    last_error: String,
}

impl<T: Clone + PartialEq + Display> Call<T> {
    /// A call started at `now` (ms) that may retry for `wait_ms`.
    /// `outcome_matters`: whether its caller must learn that a master may
    /// have acted though no answer came (a submission).
    pub fn new(now: u64, wait_ms: u64, outcome_matters: bool) -> Self {
        Self {
            deadline: now.saturating_add(wait_ms),
            wait_ms,
            outcome_matters,
            tries: 0,
            redirect: None,
            tried: None,
            hinted: false,
            unanswered: None,
            last_error: String::from("no node hosts the master yet"),
        }
    }

    /// Starts a try: where it goes. A pending redirect wins over `view`,
    /// the host the caller's view names (`None`: none is known).
    pub fn target(&mut self, view: Option<T>) -> Option<T> {
        self.tries += 1;
        let redirect = self.redirect.take();
        self.hinted = redirect.is_some();
        self.tried = redirect.or(view);
        self.tried.clone()
    }

    /// Whether the try in progress follows a redirect.
    pub fn redirected(&self) -> bool {
        self.hinted
    }

    /// Tries so far (including the one in progress).
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// The try in progress failed at `now`.
    pub fn failed(&mut self, now: u64, failure: Failure<T>) -> Next {
        match failure {
            Failure::NoMaster => {}
            Failure::Moved(to) => {
                self.last_error = format!("the master moved to {to}");
                if self.tried.as_ref() != Some(&to) && now < self.deadline {
                    self.redirect = Some(to);
                    if !self.hinted {
                        return Next::Now;
                    }
                }
            }
            Failure::NotActed(reason) => self.last_error = reason,
            Failure::MayHaveActed(reason) => {
                self.unanswered.get_or_insert_with(|| reason.clone());
                self.last_error = reason;
            }
        }
        if now >= self.deadline {
            let within = format!("no master answered within {} ms", self.wait_ms);
            return Next::Stop(self.stop(within));
        }
        Next::Wait
    }

    /// Gives up for `why` (also when too many calls already wait).
    pub fn stop(&self, why: String) -> Stop {
        let last = &self.last_error;
        match &self.unanswered {
            Some(first) if self.outcome_matters => {
                Stop::Indeterminate(format!("{why}, after {first} (last: {last})"))
            }
            _ => Stop::Unavailable(format!("{why}: {last}")),
        }
    }

    /// The last failure's reason.
    pub fn last_error(&self) -> &str {
        &self.last_error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(outcome_matters: bool) -> Call<&'static str> {
        Call::new(1_000, 10_000, outcome_matters)
    }

    #[test]
    fn a_redirect_is_followed_at_once_then_wins_over_the_view() {
        let mut call = call(true);
        assert_eq!(call.target(Some("a")), Some("a"));
        assert_eq!(call.failed(1_001, Failure::Moved("b")), Next::Now);
        assert_eq!(call.target(Some("a")), Some("b"));
        assert_eq!(call.tries(), 2);
        // Then the view again.
        assert_eq!(
            call.failed(1_002, Failure::NotActed("x".into())),
            Next::Wait
        );
        assert_eq!(call.target(Some("a")), Some("a"));
    }

    #[test]
    fn two_nodes_naming_each_other_do_not_bounce_without_a_pause() {
        let mut call = call(true);
        call.target(Some("a"));
        assert_eq!(call.failed(1_001, Failure::Moved("b")), Next::Now);
        call.target(None);
        // b names a: followed, but only after a wait.
        assert_eq!(call.failed(1_002, Failure::Moved("a")), Next::Wait);
        assert_eq!(call.target(Some("c")), Some("a"));
    }

    #[test]
    fn a_redirect_to_the_node_just_tried_is_not_followed() {
        let mut call = call(false);
        call.target(Some("a"));
        assert_eq!(call.failed(1_001, Failure::Moved("a")), Next::Wait);
        assert_eq!(call.target(None), None);
    }

    #[test]
    fn only_a_failure_that_may_have_reached_the_master_makes_it_indeterminate() {
        let mut call = call(true);
        call.target(Some("a"));
        assert_eq!(
            call.failed(2_000, Failure::NotActed("refused".into())),
            Next::Wait
        );
        call.target(Some("a"));
        let next = call.failed(11_000, Failure::NoMaster);
        let Next::Stop(Stop::Unavailable(why)) = next else {
            panic!("{next:?}");
        };
        assert_eq!(why, "no master answered within 10000 ms: refused");

        let mut call = self::call(true);
        call.target(Some("a"));
        call.failed(2_000, Failure::MayHaveActed("timed out".into()));
        call.target(Some("a"));
        let next = call.failed(11_000, Failure::NotActed("refused".into()));
        let Next::Stop(Stop::Indeterminate(why)) = next else {
            panic!("{next:?}");
        };
        assert!(why.contains("after timed out (last: refused)"), "{why}");
    }

    #[test]
    fn a_call_whose_outcome_does_not_matter_is_only_ever_unavailable() {
        let mut call = call(false);
        call.target(Some("a"));
        call.failed(2_000, Failure::MayHaveActed("timed out".into()));
        assert!(matches!(call.stop("crowded".into()), Stop::Unavailable(_)));
        call.target(Some("a"));
        assert!(matches!(
            call.failed(11_000, Failure::NoMaster),
            Next::Stop(Stop::Unavailable(_))
        ));
    }

    #[test]
    fn no_redirect_is_followed_past_the_deadline() {
        let mut call = call(true);
        call.target(Some("a"));
        assert!(matches!(
            call.failed(11_000, Failure::Moved("b")),
            Next::Stop(Stop::Unavailable(_))
        ));
    }
}
