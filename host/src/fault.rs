//! A network partition seam, for fault tests.
//!
//! A node started with the hidden `--fault-partition FILE` flag reads FILE
//! every [`POLL`]: each line names an address (`host:port`, the HTTP and
//! gossip address of another node). While an address is listed, this node
//! drops gossip to and from it and fails its own node-to-node HTTP requests
//! to it at once, as if the network between them were cut. Listing each
//! side in the other's file makes a symmetric partition; emptying the files
//! heals it. Without the flag nothing is ever blocked and the check is one
//! atomic load.

use async_trait::async_trait;
use chitchat::ChitchatEnvelope;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport, UdpTransport};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

/// How often the partition file is read.
pub const POLL: Duration = Duration::from_millis(100);

static BLOCKED: OnceLock<RwLock<BTreeSet<String>>> = OnceLock::new();

/// Starts following the partition file `file`.
pub fn install(file: PathBuf) {
    let blocked = BLOCKED.get_or_init(Default::default);
    tokio::spawn(async move {
        loop {
            let listed: BTreeSet<String> = tokio::fs::read_to_string(&file)
                .await
                .unwrap_or_default()
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(String::from)
                .collect();
            {
                let mut current = blocked.write().unwrap_or_else(|e| e.into_inner());
                if *current != listed {
                    eprintln!("fault injection: cut off from {listed:?}");
                    *current = listed;
                }
            }
            tokio::time::sleep(POLL).await;
        }
    });
}

fn blocked(address: &str) -> bool {
    BLOCKED.get().is_some_and(|blocked| {
        blocked
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(address)
    })
}

/// Whether requests to `url` (`http://host:port...`) are cut off.
pub fn blocks_url(url: &str) -> bool {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or(rest);
    blocked(authority)
}

/// UDP gossip that drops datagrams to and from cut-off addresses.
#[derive(Debug, Default)]
pub struct PartitionTransport;

struct PartitionSocket(Box<dyn Socket>);

#[async_trait]
impl Transport for PartitionTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        Ok(Box::new(PartitionSocket(
            UdpTransport.open(listen_addr).await?,
        )))
    }
}

#[async_trait]
impl Socket for PartitionSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.0.local_addr()
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        if blocked(&to.to_string()) {
            return Ok(SendOutcome { num_bytes_sent: 0 });
        }
        self.0.send(to, envelope).await
    }

    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        loop {
            let received = self.0.recv().await?;
            if !blocked(&received.from_addr.to_string()) {
                return Ok(received);
            }
        }
    }
}
