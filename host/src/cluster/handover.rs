//! Graceful hand-over of the master between back-end nodes.
//!
//! When the node hosting the master leaves (SIGTERM) or stops being the
//! oldest back-end node, it stops taking commands (proxies everywhere hold
//! and retry requests meanwhile), flushes its journal, takes a snapshot and
//! sends it to the back-end node that should host the master next. That
//! node installs it in its replica (as its newest snapshot, with the
//! journal lined up behind it) and takes the master over from it with the
//! next epoch. Only then does the old node stop advertising the master.
//!
//! The next node waits for the hand-over at most [`HANDOVER_WAIT`] while
//! the old host is still in the view; if the old host vanishes (a crash) or
//! the wait runs out, it takes over from the replicated journal instead
//! (`cluster::takeover`): the hand-over only makes the move faster.

use super::replica::{Replica, ReplicaRequest, ReplicaResponse};
use crate::master::store::Snapshot;
use crate::peer::{Peer, TRANSFER_TIMEOUT};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The internal route that receives a hand-over.
pub const HANDOVER_PATH: &str = "/internal/v1/handover";
/// Largest hand-over accepted (the master's whole state).
pub const HANDOVER_BYTES_MAX: usize = 1 << 30;
/// Longest the next master waits for a hand-over from a live old host.
pub const HANDOVER_WAIT: Duration = Duration::from_secs(10);
/// Senders of hand-overs remembered (as leaving) at most.
const DEPARTED_KEPT_MAX: usize = 64;

/// What travels from the old master's node to the next one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Handover {
    /// The old master's epoch (the next one runs above it).
    pub epoch: u64,
    /// The old host's node id.
    pub from: String,
    /// The old host's generation (it is leaving: the next node treats it as
    /// gone at once, without waiting for gossip to say so).
    pub generation: u64,
    /// The master's last snapshot.
    pub snapshot: Snapshot,
}

/// Where this node receives hand-overs.
#[derive(Debug)]
pub struct Inbox {
    replica: Arc<Replica>,
    adopted: watch::Sender<u64>,
    departed: watch::Sender<BTreeSet<(String, u64)>>,
}

impl Inbox {
    /// An inbox installing into `replica`.
    pub fn new(replica: Arc<Replica>) -> Arc<Self> {
        Arc::new(Self {
            replica,
            adopted: watch::channel(0).0,
            departed: watch::channel(BTreeSet::new()).0,
        })
    }

    /// Stores a hand-over (postcard bytes); returns its epoch.
    pub async fn accept(&self, body: &[u8]) -> Result<u64, String> {
        let handover: Handover = cohort_master::decode(body).map_err(|r| r.to_string())?;
        let (epoch, from, generation) = (handover.epoch, handover.from, handover.generation);
        let index = handover.snapshot.index;
        let install = ReplicaRequest::Install {
            epoch,
            snapshot: handover.snapshot,
        };
        match self.replica.call_local(install).await {
            ReplicaResponse::Shape(_) => {}
            other => return Err(format!("cannot install the hand-over: {other:?}")),
        }
        eprintln!("received the master from {from} (epoch {epoch}, journal index {index})");
        self.departed.send_modify(|departed| {
            // A departed generation never comes back; old ones only matter
            // while their node is still leaving, so a few are enough.
            if departed.len() >= DEPARTED_KEPT_MAX {
                departed.pop_first();
            }
            departed.insert((from, generation));
        });
        self.adopted.send_replace(epoch);
        Ok(epoch)
    }

    /// Nodes (id, generation) that handed the master over here: they are
    /// leaving.
    pub fn departed(&self) -> watch::Receiver<BTreeSet<(String, u64)>> {
        self.departed.subscribe()
    }

    /// Changes when a hand-over has been stored.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.adopted.subscribe()
    }
}

/// Sends a hand-over to the node at `url`.
pub async fn send(peer: &Peer, url: &str, handover: &Handover) -> Result<(), String> {
    peer.post_postcard(&format!("{url}{HANDOVER_PATH}"), handover, TRANSFER_TIMEOUT)
        .await
        .map(|_| ())
        .map_err(|e| e.message)
}
