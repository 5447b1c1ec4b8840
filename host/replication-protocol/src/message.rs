//! What back-end nodes say to each other about the journal.
//!
//! Every message carries the sender's epoch. Answers name the epoch of the
//! request they answer, so a late answer to an old request is recognized
//! and ignored. Postcard-encoded and sealed by the node's transport.

use crate::shape::Shape;
use crate::storage::{Entry, NodeId, Payload, Snapshot};
use serde::{Deserialize, Serialize};

/// One message between back-end nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// A node taking the master over asks for a promise: refuse every
    /// epoch below `epoch` from now on. `transfer` when the master's node
    /// hands the master over to the sender (followers grant it even while
    /// they hear from that master).
    Claim { epoch: u64, transfer: bool },
    /// The promise is made (durably); this is the journal.
    Claimed {
        epoch: u64,
        shape: Shape,
        voters: Vec<NodeId>,
    },
    /// Not granted: a master of epoch `leader_epoch` is alive (this node
    /// heard from it recently).
    Declined { epoch: u64, leader_epoch: u64 },
    /// The master's entries from index `first` on, each with the epoch
    /// that wrote it. `prev_epoch` is the epoch of entry `first - 1` in the
    /// master's journal, when it holds it. Entries below `commit` are
    /// committed. An empty append is a heartbeat.
    Append {
        epoch: u64,
        first: u64,
        prev_epoch: Option<u64>,
        entries: Vec<(u64, Payload)>,
        commit: u64,
    },
    /// Take this snapshot: the entries this replica lacks were compacted.
    Install { epoch: u64, snapshot: Snapshot },
    /// The replica's journal after an append or install, durable: the
    /// acknowledgement.
    Appended { epoch: u64, shape: Shape },
    /// A node taking over reads the most advanced journal from `from`.
    Read {
        epoch: u64,
        from: u64,
        bytes_max: u64,
    },
    /// Entries read.
    Entries {
        epoch: u64,
        from: u64,
        entries: Vec<Entry>,
    },
    /// The entries asked for were compacted: this is the snapshot.
    SnapshotIs { epoch: u64, snapshot: Snapshot },
    /// The sender's epoch is below the promise.
    Fenced { epoch: u64, promised: u64 },
    /// The request failed here (storage); the sender retries later.
    Refused { epoch: u64, reason: String },
    /// The master of `epoch` stepped down and hands the master over to the
    /// receiver, whose journal holds everything it wrote.
    HandOver { epoch: u64 },
    /// The master of `epoch` is alive: sent every heartbeat to a replica
    /// whose append is still unanswered (a large one being written, or an
    /// answer lost until the retry), so the replica's lease does not lapse
    /// while the master is fine. Not answered.
    Alive { epoch: u64 },
}

impl Message {
    /// The epoch the message was sent with, or that it answers.
    pub fn epoch(&self) -> u64 {
        match self {
            Self::Claim { epoch, .. }
            | Self::Claimed { epoch, .. }
            | Self::Declined { epoch, .. }
            | Self::Append { epoch, .. }
            | Self::Install { epoch, .. }
            | Self::Appended { epoch, .. }
            | Self::Read { epoch, .. }
            | Self::Entries { epoch, .. }
            | Self::SnapshotIs { epoch, .. }
            | Self::Fenced { epoch, .. }
            | Self::Refused { epoch, .. }
            | Self::HandOver { epoch }
            | Self::Alive { epoch } => *epoch,
        }
    }
}
