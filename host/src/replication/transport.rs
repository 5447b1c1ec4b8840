//! How replication messages travel between back-end nodes.
//!
//! [`Transport`] is one method: send these messages to that node, best
//! effort, without waiting. The protocol needs nothing more (a lost
//! message is resent on a timeout, a duplicate is harmless), so the same
//! core runs over the real network and over an in-memory one.
//!
//! * [`HttpTransport`]: one queue and one task per destination, which
//!   posts everything queued as one postcard [`Envelope`] to
//!   `POST /internal/v1/replication` (sealed with the cluster key by
//!   [`Peer`], so nobody without the key can read, forge or replay one).
//!   Messages to one node stay in order. A full queue drops new messages:
//!   a node that stopped reading must not grow this one's memory.
//! * [`MemNetwork`]: in-process delivery between drivers, with partitions,
//!   for the driver's tests.

use crate::limits::{
    MESSAGES_PER_POST_MAX, REPLICATION_POST_TIMEOUT, REPLICATION_QUEUE_MAX, TRANSFER_TIMEOUT,
};
use crate::membership::View;
use crate::peer::Peer;
use cohort_replication::{Message, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};

/// The internal route replication messages arrive on.
pub const REPLICATION_PATH: &str = "/internal/v1/replication";

/// Messages from one node, as posted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// The sender.
    pub from: NodeId,
    /// In the order sent.
    pub messages: Vec<Message>,
}

/// Decodes a posted envelope; the bytes are hostile until this accepts
/// them (postcard with a version byte, lengths checked against the body).
pub fn decode_envelope(body: &[u8]) -> Result<Envelope, cohort_master::Rejection> {
    cohort_master::decode(body)
}

/// Sends replication messages. See the module docs.
pub trait Transport: Send + Sync + 'static {
    /// Queues `message` for `to`; never blocks.
    fn send(&self, to: &NodeId, message: Message);
}

/// Where delivered messages go: the receiving node's driver.
pub type Deliver = Arc<dyn Fn(NodeId, Message) + Send + Sync>;

/// Replication over node-to-node HTTP.
pub struct HttpTransport {
    me: NodeId,
    peer: Peer,
    view: watch::Receiver<View>,
    runtime: tokio::runtime::Handle,
    queues: Mutex<HashMap<NodeId, mpsc::Sender<Message>>>,
}

impl HttpTransport {
    /// A transport for node `me`, finding other nodes' addresses in `view`.
    pub fn new(me: NodeId, peer: Peer, view: watch::Receiver<View>) -> Arc<Self> {
        Arc::new(Self {
            me,
            peer,
            view,
            runtime: tokio::runtime::Handle::current(),
            queues: Mutex::new(HashMap::new()),
        })
    }

    fn queue(&self, to: &NodeId) -> mpsc::Sender<Message> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queue) = queues.get(to)
            && !queue.is_closed()
        {
            return queue.clone();
        }
        let (tx, rx) = mpsc::channel(REPLICATION_QUEUE_MAX);
        queues.insert(to.clone(), tx.clone());
        let sender = Sender {
            me: self.me.clone(),
            to: to.clone(),
            peer: self.peer.clone(),
            view: self.view.clone(),
        };
        self.runtime.spawn(sender.run(rx));
        tx
    }
}

impl Transport for HttpTransport {
    fn send(&self, to: &NodeId, message: Message) {
        if self.queue(to).try_send(message).is_err() {
            tracing::debug!(to = %to, "replication queue full; message dropped");
        }
    }
}

struct Sender {
    me: NodeId,
    to: NodeId,
    peer: Peer,
    view: watch::Receiver<View>,
}

impl Sender {
    async fn run(self, mut rx: mpsc::Receiver<Message>) {
        let mut batch = Vec::new();
        while rx.recv_many(&mut batch, MESSAGES_PER_POST_MAX).await > 0 {
            let url = self.view.borrow().member(&self.to).map(|m| m.http.clone());
            let Some(url) = url else {
                // Not in the view: nowhere to send. The protocol resends.
                batch.clear();
                continue;
            };
            let bulky = batch.iter().any(|m| {
                matches!(
                    m,
                    Message::Install { .. } | Message::SnapshotIs { .. } | Message::Entries { .. }
                )
            });
            let envelope = Envelope {
                from: self.me.clone(),
                messages: std::mem::take(&mut batch),
            };
            let timeout = if bulky {
                TRANSFER_TIMEOUT
            } else {
                REPLICATION_POST_TIMEOUT
            };
            if let Err(error) = self
                .peer
                .post_postcard(&format!("{url}{REPLICATION_PATH}"), &envelope, timeout)
                .await
            {
                tracing::debug!(to = %self.to, %error.message, "replication post failed");
            }
        }
    }
}

/// An in-memory network between drivers, with partitions.
#[derive(Default)]
pub struct MemNetwork {
    nodes: Mutex<HashMap<NodeId, Deliver>>,
    cut: Mutex<BTreeSet<(NodeId, NodeId)>>,
}

impl MemNetwork {
    /// An empty network.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Attaches node `id`, whose messages go to `deliver`.
    pub fn attach(&self, id: &str, deliver: Deliver) {
        self.nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), deliver);
    }

    /// The transport node `id` sends with.
    pub fn transport(self: &Arc<Self>, id: &str) -> Arc<MemTransport> {
        Arc::new(MemTransport {
            me: id.to_string(),
            network: self.clone(),
        })
    }

    /// Cuts `a` and `b` apart (both ways) or heals the cut.
    pub fn cut(&self, a: &str, b: &str, cut: bool) {
        let pair = if a < b { (a, b) } else { (b, a) };
        let pair = (pair.0.to_string(), pair.1.to_string());
        let mut set = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        if cut {
            set.insert(pair);
        } else {
            set.remove(&pair);
        }
    }

    fn is_cut(&self, a: &str, b: &str) -> bool {
        let pair = if a < b { (a, b) } else { (b, a) };
        self.cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(pair.0.to_string(), pair.1.to_string()))
    }
}

/// One node's side of a [`MemNetwork`].
pub struct MemTransport {
    me: NodeId,
    network: Arc<MemNetwork>,
}

impl Transport for MemTransport {
    fn send(&self, to: &NodeId, message: Message) {
        if self.network.is_cut(&self.me, to) {
            return;
        }
        let deliver = self
            .network
            .nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(to)
            .cloned();
        if let Some(deliver) = deliver {
            deliver(self.me.clone(), message);
        }
    }
}

/// A transport to nowhere: a master on its own.
pub struct Nowhere;

impl Transport for Nowhere {
    fn send(&self, _to: &NodeId, _message: Message) {}
}
