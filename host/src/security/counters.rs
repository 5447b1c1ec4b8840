//! Counts of everything security refused, for `/metrics`
//! (`cohort_security_refused_total{what, reason}`).
//!
//! Process-wide: refusals happen in the gossip socket, the HTTP accept loop
//! and the request handlers, which share nothing else, and one process is
//! one node.

use std::collections::BTreeMap;
use std::sync::Mutex;

static REFUSED: Mutex<BTreeMap<(&'static str, &'static str), u64>> = Mutex::new(BTreeMap::new());

/// What was refused.
pub mod what {
    /// A gossip datagram (dropped silently).
    pub const GOSSIP: &str = "gossip";
    /// A node-to-node HTTP request (`401`).
    pub const INTERNAL: &str = "internal_request";
    /// An answer from another node that did not verify.
    pub const ANSWER: &str = "internal_answer";
    /// A public API request without a valid token (`401`) or scope (`403`).
    pub const TOKEN: &str = "token";
    /// A connection (TLS handshake, plain HTTP on a TLS port, too many from
    /// one address, too slow).
    pub const CONNECTION: &str = "connection";
}

/// Counts one refusal of `what` for `reason`.
pub fn refused(what: &'static str, reason: &'static str) {
    *REFUSED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((what, reason))
        .or_default() += 1;
}

/// Every count so far, in a stable order.
pub fn snapshot() -> Vec<((&'static str, &'static str), u64)> {
    REFUSED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(k, v)| (*k, *v))
        .collect()
}
