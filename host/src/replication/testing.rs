//! In-memory clusters for the tests of replication and of what runs on it
//! (the master's standby): real drivers and journals in temporary
//! directories, joined by a partitionable [`MemNetwork`].

use super::transport::MemNetwork;
use super::{Completion, Replication, Started, options};
use crate::contract::MasterError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Longest a test waits for a condition or a take-over.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// One node of a test cluster.
pub struct Node {
    pub replication: Replication,
    pub dir: tempfile::TempDir,
}

/// Node `id` on `network` (`n0` may start the voter set).
pub fn node(network: &Arc<MemNetwork>, id: &str) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let options = options(id, id == "n0", None);
    let replication =
        Replication::start(options, dir.path(), network.transport(id)).expect("starts");
    let target = replication.clone();
    network.attach(
        id,
        Arc::new(move |from, message| target.deliver(from, message)),
    );
    Node { replication, dir }
}

/// Nodes `ids` (the first `n0`) on `network`, each told of all: `n0`
/// takes the master over (what it starts from is returned) and every node
/// becomes a voter.
pub async fn cluster(network: &Arc<MemNetwork>, ids: &[&str]) -> (Vec<Node>, Started) {
    let nodes: Vec<Node> = ids.iter().map(|id| node(network, id)).collect();
    let members: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    for node in &nodes {
        node.replication.set_members(members.clone());
    }
    let started = nodes[0]
        .replication
        .take_over()
        .await
        .expect("n0 bootstraps");
    until("every node is a voter", || {
        nodes[0].replication.status().voters.len() == ids.len()
    })
    .await;
    (nodes, started)
}

/// Waits (bounded) until `condition` holds.
pub async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (bounded) until `node` takes the master over.
pub async fn taken_over(node: &Replication) -> Started {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        match node.take_over().await {
            Ok(started) => return started,
            Err(error) => {
                assert!(Instant::now() < deadline, "never took over: {error}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Proposes `events` as one batch on `node` and waits until it is
/// committed (or failed).
pub async fn commit(node: &Replication, events: Vec<Vec<u8>>) -> Result<(), MasterError> {
    let (tx, rx) = oneshot::channel();
    let done: Completion = Box::new(move |result| {
        let _ = tx.send(result);
    });
    let node = node.clone();
    tokio::task::spawn_blocking(move || node.propose(events, vec![done]))
        .await
        .unwrap();
    rx.await.unwrap()
}
