//! A network partition, injected into the node's transports for fault
//! tests.
//!
//! A node started with the hidden `--fault-partition FILE` flag follows
//! FILE ([`Partition::follow`], re-read every [`PARTITION_POLL`]): each line names an
//! address (`host:port`, the HTTP and gossip address of another node).
//! While an address is listed, the node's two transports behave as if the
//! network to it were cut: gossip to and from it is dropped by
//! [`PartitionedSocket`], which wraps the gossip socket as chitchat's own
//! tests wrap theirs, and the node's HTTP requests to it fail at once
//! (`crate::peer::Peer::partitioned`). Listing each side in the other's file
//! makes a symmetric partition; emptying the files heals it.
//!
//! Nothing here is global: a node without the flag has no [`Partition`],
//! its transports no wrapper and no check.
//!
//! [`PARTITION_POLL`]: crate::limits::PARTITION_POLL

use crate::limits::PARTITION_POLL;
use async_trait::async_trait;
use chitchat::ChitchatEnvelope;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

/// The addresses this node is cut off from. Cheap to clone: clones share
/// the set.
#[derive(Debug, Clone, Default)]
pub struct Partition {
    blocked: Arc<RwLock<BTreeSet<String>>>,
}

impl Partition {
    /// A partition following the file `file`. The file is read once before
    /// this returns, so a node started cut off never sends or accepts a
    /// datagram the file forbids (it would learn of the others through it).
    /// Call from within a tokio runtime.
    pub fn follow(file: PathBuf) -> Self {
        let partition = Self::default();
        partition.apply(&std::fs::read_to_string(&file).unwrap_or_default());
        let following = partition.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PARTITION_POLL).await;
                following.apply(&tokio::fs::read_to_string(&file).await.unwrap_or_default());
            }
        });
        partition
    }

    /// Makes the addresses listed in `text` (one a line) the blocked ones.
    fn apply(&self, text: &str) {
        let listed: BTreeSet<String> = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(String::from)
            .collect();
        let mut current = self.blocked.write().unwrap_or_else(|e| e.into_inner());
        if *current != listed {
            crate::events::emit!(
                warn,
                crate::events::PARTITION,
                cut_off = ?listed,
                "fault injection: cut off"
            );
            *current = listed;
        }
    }

    /// Whether traffic to and from `address` (`host:port`) is cut off.
    pub fn blocked(&self, address: &str) -> bool {
        self.blocked
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(address)
    }

    /// Whether requests to `url` (`http://host:port...`) are cut off.
    pub fn blocks_url(&self, url: &str) -> bool {
        let rest = url.strip_prefix("http://").unwrap_or(url);
        let authority = rest.split('/').next().unwrap_or(rest);
        self.blocked(authority)
    }
}

/// A gossip socket behind a [`Partition`]: datagrams to a blocked address
/// are dropped as sent, and those from one as received.
pub struct PartitionedSocket {
    inner: Box<dyn Socket>,
    partition: Partition,
}

impl PartitionedSocket {
    /// `inner`, cut off as `partition` says.
    pub fn new(inner: Box<dyn Socket>, partition: Partition) -> Self {
        Self { inner, partition }
    }
}

#[async_trait]
impl Socket for PartitionedSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.inner.local_addr()
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        if self.partition.blocked(&to.to_string()) {
            return Ok(SendOutcome { num_bytes_sent: 0 });
        }
        self.inner.send(to, envelope).await
    }

    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        loop {
            let received = self.inner.recv().await?;
            if !self.partition.blocked(&received.from_addr.to_string()) {
                return Ok(received);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_addresses_are_cut_off_and_an_empty_list_heals() {
        let partition = Partition::default();
        assert!(!partition.blocked("127.0.0.1:7001"));
        partition.apply("127.0.0.1:7001\n\n  127.0.0.1:7002  \n");
        assert!(partition.blocked("127.0.0.1:7001"));
        assert!(partition.blocked("127.0.0.1:7002"));
        assert!(partition.blocks_url("http://127.0.0.1:7002/internal/v1/master"));
        assert!(!partition.blocks_url("http://127.0.0.1:7003/internal/v1/master"));
        let clone = partition.clone();
        partition.apply("");
        assert!(!clone.blocked("127.0.0.1:7001"), "clones share the set");
    }
}
