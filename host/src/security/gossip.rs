//! Gossip over UDP, sealed with the cluster key.
//!
//! chitchat hands its transport whole envelopes and keeps their byte
//! encoding to itself, so the bytes come from chitchat's own public UDP
//! socket: each node keeps a private *codec* pair on loopback, chitchat's
//! socket and a bridge socket. To send, the envelope goes through
//! chitchat's socket to the bridge, whose bytes are sealed
//! ([`super::seal`], purpose gossip) and sent from the public socket. On
//! receipt, a datagram is opened and checked (key, tag, freshness, replay)
//! and only then handed through the bridge to chitchat's decoder. Each side
//! of the codec accepts datagrams only from the other's address, which no
//! other process can send from. A datagram that fails any check is dropped
//! and counted, as UDP would lose it: gossip already tolerates loss, and
//! answering would tell a prober something. Without a key the public socket
//! is chitchat's plain UDP (allowed only on loopback or with `--insecure`).
//!
//! chitchat drops its pending `recv` at every gossip tick, so the sealed
//! path runs in a task of its own that chitchat's socket talks to through
//! channels; nothing is ever cut in half.
//!
//! The fault-injection partition ([`crate::fault`]) also lives here, so
//! there is one gossip socket type.

use super::counters;
use super::key::Purpose;
use super::seal::{Freshness, OVERHEAD, Sealer};
use crate::fault::{Partition, PartitionedSocket};
use crate::limits::{
    DATAGRAM_BYTES_MAX, GOSSIP_CODEC_WAIT, GOSSIP_RECEIVED_MAX, GOSSIP_RECV_ERROR_PAUSE,
    GOSSIP_SENDING_MAX,
};
use anyhow::Context;
use async_trait::async_trait;
use chitchat::ChitchatEnvelope;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport};
use std::net::SocketAddr;
use std::sync::Arc;

/// Whether a receive error is the report of an earlier send's ICMP
/// "unreachable": it comes once per report, not on every call.
fn is_icmp_report(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
    )
}

/// cohort's gossip transport: UDP, sealed when the node has a key, behind
/// a fault test's partition when it has one. One per membership, kept
/// across rejoins: a sealed socket's codec task owns the public port and
/// releases it only when the runtime next reaches the aborted task, so the
/// transport keeps the last one and a new open waits for it to end before
/// binding the port again.
#[derive(Debug, Clone, Default)]
pub struct GossipTransport {
    sealer: Option<Arc<Sealer>>,
    partition: Option<Partition>,
    /// The codec task of the sealed socket dropped last (aborted).
    ended: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl GossipTransport {
    /// Seals with `sealer`, or sends plain gossip with `None`; drops what
    /// `partition` cuts off.
    pub fn new(sealer: Option<Arc<Sealer>>, partition: Option<Partition>) -> Self {
        Self {
            sealer,
            partition,
            ended: Arc::default(),
        }
    }
}

#[async_trait]
impl Transport for GossipTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let socket = self.open_socket(listen_addr).await?;
        Ok(match &self.partition {
            Some(partition) => Box::new(PartitionedSocket::new(socket, partition.clone())),
            None => socket,
        })
    }
}

impl GossipTransport {
    async fn open_socket(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        match &self.sealer {
            None => Ok(Box::new(PlainSocket(
                chitchat::transport::UdpSocket::open(listen_addr).await?,
            ))),
            Some(sealer) => {
                let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(ended) = ended {
                    // Aborted: it ends at once, dropping the public port.
                    let _ = ended.await;
                }
                let socket = tokio::net::UdpSocket::bind(listen_addr)
                    .await
                    .with_context(|| format!("cannot bind {listen_addr}/UDP for gossip"))?;
                let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
                let chitchat = chitchat::transport::UdpSocket::open(loopback).await?;
                let bridge = tokio::net::UdpSocket::bind(loopback).await?;
                Ok(Box::new(SealedSocket::start(
                    Codec {
                        socket,
                        sealer: sealer.clone(),
                        chitchat_addr: chitchat.local_addr()?,
                        chitchat,
                        bridge_addr: bridge.local_addr()?,
                        bridge,
                        buf: vec![0; DATAGRAM_BYTES_MAX].into_boxed_slice(),
                    },
                    self.ended.clone(),
                )?))
            }
        }
    }
}

/// Plain gossip (no key): chitchat's socket.
struct PlainSocket(chitchat::transport::UdpSocket);

#[async_trait]
impl Socket for PlainSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.0.local_addr()
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        self.0.send(to, envelope).await
    }

    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        self.0.recv().await
    }
}

/// Sealed gossip: chitchat's side of a [`Codec`] task.
///
/// chitchat drops a pending `recv` whenever its gossip ticker fires, so
/// everything that must not be cut in half (a datagram between the public
/// socket, the opening and the loopback codec) happens in a task of its
/// own; the socket only exchanges envelopes with it through channels,
/// which are safe to drop mid-wait.
struct SealedSocket {
    local_addr: SocketAddr,
    send_tx: tokio::sync::mpsc::Sender<(SocketAddr, ChitchatEnvelope)>,
    received_rx: tokio::sync::mpsc::Receiver<RecvOutcome>,
    codec: Option<tokio::task::JoinHandle<()>>,
    /// Where the aborted codec task is left for the next open to await.
    ended: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Drop for SealedSocket {
    fn drop(&mut self) {
        if let Some(codec) = self.codec.take() {
            codec.abort();
            *self.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(codec);
        }
    }
}

impl SealedSocket {
    fn start(
        codec: Codec,
        ended: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    ) -> anyhow::Result<Self> {
        let local_addr = codec.socket.local_addr()?;
        let (send_tx, send_rx) = tokio::sync::mpsc::channel(GOSSIP_SENDING_MAX);
        let (received_tx, received_rx) = tokio::sync::mpsc::channel(GOSSIP_RECEIVED_MAX);
        let codec = tokio::spawn(codec.run(send_rx, received_tx));
        Ok(Self {
            local_addr,
            send_tx,
            received_rx,
            codec: Some(codec),
            ended,
        })
    }
}

/// The public socket and the loopback codec, owned by one task.
struct Codec {
    /// The public socket.
    socket: tokio::net::UdpSocket,
    sealer: Arc<Sealer>,
    /// chitchat's codec socket, on loopback.
    chitchat: chitchat::transport::UdpSocket,
    chitchat_addr: SocketAddr,
    /// Its partner, on loopback.
    bridge: tokio::net::UdpSocket,
    bridge_addr: SocketAddr,
    buf: Box<[u8]>,
}

impl Codec {
    async fn run(
        mut self,
        mut send_rx: tokio::sync::mpsc::Receiver<(SocketAddr, ChitchatEnvelope)>,
        received_tx: tokio::sync::mpsc::Sender<RecvOutcome>,
    ) {
        let mut datagram = vec![0u8; DATAGRAM_BYTES_MAX].into_boxed_slice();
        loop {
            // Both waits are safe to drop; the work after either is not
            // interrupted.
            tokio::select! {
                outgoing = send_rx.recv() => {
                    let Some((to, envelope)) = outgoing else { return };
                    if let Err(error) = self.send(to, envelope).await {
                        tracing::debug!("gossip to {to} not sent: {error:#}");
                    }
                }
                incoming = self.socket.recv_from(&mut datagram) => {
                    let (len, from_addr) = match incoming {
                        Ok(received) => received,
                        Err(error) if is_icmp_report(&error) => {
                            // An ICMP "unreachable" for an earlier send
                            // surfaces here, once per report.
                            tracing::debug!("gossip receive failed: {error}");
                            continue;
                        }
                        Err(error) => {
                            // Anything else may fail every call alike:
                            // pause rather than spin.
                            tracing::warn!("gossip receive failed: {error}");
                            tokio::time::sleep(GOSSIP_RECV_ERROR_PAUSE).await;
                            continue;
                        }
                    };
                    let opened = self
                        .sealer
                        .open(Purpose::Gossip, &[], &datagram[..len], Freshness::Once);
                    let decoded = match opened {
                        Ok(opened) => self.decode(&opened.plaintext).await,
                        Err(error) => Err(error.reason()),
                    };
                    let outcome = match decoded {
                        Ok(envelope) => RecvOutcome {
                            from_addr,
                            envelope,
                            num_bytes_received: len,
                        },
                        Err(reason) => {
                            counters::refused(counters::what::GOSSIP, reason);
                            tracing::debug!(%from_addr, len, reason, "gossip datagram dropped");
                            continue;
                        }
                    };
                    match received_tx.try_send(outcome) {
                        Ok(()) => {}
                        Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                            counters::refused(counters::what::GOSSIP, "backlog");
                        }
                        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
            }
        }
    }

    async fn send(&mut self, to: SocketAddr, envelope: ChitchatEnvelope) -> anyhow::Result<()> {
        let plaintext = self.encode(envelope).await?;
        let (sealed, _) = self.sealer.seal(Purpose::Gossip, &[], &plaintext);
        anyhow::ensure!(
            sealed.len() <= DATAGRAM_BYTES_MAX,
            "a gossip message of {} bytes (sealing adds {OVERHEAD}) does not fit a datagram",
            sealed.len()
        );
        self.socket
            .send_to(&sealed, to)
            .await
            .with_context(|| format!("cannot send gossip to {to}"))?;
        Ok(())
    }

    /// The bytes chitchat encodes `envelope` to.
    async fn encode(&mut self, envelope: ChitchatEnvelope) -> anyhow::Result<Vec<u8>> {
        self.chitchat.send(self.bridge_addr, envelope).await?;
        let wait = async {
            loop {
                let (len, from) = self.bridge.recv_from(&mut self.buf).await?;
                if from == self.chitchat_addr {
                    return anyhow::Ok(self.buf[..len].to_vec());
                }
            }
        };
        tokio::time::timeout(GOSSIP_CODEC_WAIT, wait)
            .await
            .map_err(|_| anyhow::anyhow!("the gossip codec did not answer"))?
    }

    /// The envelope chitchat decodes from `plaintext`.
    async fn decode(&mut self, plaintext: &[u8]) -> Result<ChitchatEnvelope, &'static str> {
        self.bridge
            .send_to(plaintext, self.chitchat_addr)
            .await
            .map_err(|_| "codec")?;
        let wait = async {
            loop {
                // chitchat's socket skips payloads it cannot decode, so an
                // undecodable one ends in the timeout below.
                let received = self.chitchat.recv().await.map_err(|_| "codec")?;
                if received.from_addr == self.bridge_addr {
                    return Ok(received.envelope);
                }
            }
        };
        tokio::time::timeout(GOSSIP_CODEC_WAIT, wait)
            .await
            .map_err(|_| "undecodable")?
    }
}

#[async_trait]
impl Socket for SealedSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        // Like a UDP send: queued, and lost if the queue is full.
        let _ = self.send_tx.try_send((to, envelope));
        Ok(SendOutcome { num_bytes_sent: 0 })
    }

    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        self.received_rx
            .recv()
            .await
            .ok_or_else(|| anyhow::anyhow!("the gossip codec stopped"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rejoin opens the sealed port again right after dropping the
    /// socket on it, whose codec task still holds the port: the open
    /// waits for that task, then binds.
    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_sealed_socket_port_is_opened_again_at_once() {
        let keyring = super::super::key::Keyring::from_secrets(&[[7u8; 32]]).unwrap();
        let sealer = Arc::new(Sealer::new(keyring, "gossip-test"));
        let transport = GossipTransport::new(Some(sealer), None);
        let addr = {
            let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        for _ in 0..3 {
            let socket = transport.open(addr).await.unwrap();
            assert_eq!(socket.local_addr().unwrap(), addr);
            // Dropped with its codec task not yet reached by the runtime.
            drop(socket);
        }
    }
}
