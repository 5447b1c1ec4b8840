//! Taking the master over: fence the replicas, adopt the most advanced
//! journal, then start.
//!
//! A node about to host the master (the old host crashed, left, or handed
//! it over) first runs [`prepare`]:
//!
//! 1. It picks an epoch above every epoch its own replica has promised and
//!    *claims* it on its own replica and on every other live back-end
//!    node's (`Fence { claim: true }`). A replica that promised that epoch
//!    or a higher one already refuses, and the node tries again above it.
//!    From then on the fenced replicas refuse the old master, so it can
//!    commit nothing more.
//! 2. It needs answers from at least `min_replicas` other nodes (if the
//!    view does not even list that many, it claims nothing). A batch
//!    the old master committed is on `min_replicas + 1` back-end nodes, so
//!    as long as there are at most `2 * min_replicas + 1` back-end nodes,
//!    the answering set includes at least one node holding every committed
//!    batch. With fewer answers it does not take over (and tries again).
//! 3. It adopts the most advanced journal among the answers (highest last
//!    epoch, then longest): it drops its own entries from where they
//!    diverge and copies the rest (or that node's snapshot, if the entries
//!    were compacted). Entries it adopts that were never committed become
//!    committed with its own first batch; entries no answering node has
//!    were never committed and are lost with the old master, which only
//!    ever told their callers `replicas_unavailable` or nothing.
//!
//! Then the master starts from the local journal with the claimed epoch,
//! and its replication brings every replica in line with it.

use super::membership::View;
use super::replica::{self, Replica, ReplicaRequest, ReplicaResponse};
use crate::journal::Shape;
use crate::peer::{Peer, TRANSFER_TIMEOUT};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Longest a replica may take to answer a fence.
pub const FENCE_TIMEOUT: Duration = Duration::from_secs(2);
/// Entry data per read.
const READ_BYTES_MAX: u64 = 8 << 20;
/// Claims tried before giving up for now (each above a refusal's promise).
const CLAIM_ROUNDS_MAX: usize = 5;

/// What [`prepare`] did.
#[derive(Debug)]
pub struct Prepared {
    /// The epoch claimed: the master runs with it.
    pub epoch: u64,
    /// Other back-end nodes that answered the fence.
    pub reached: Vec<String>,
    /// The node whose journal was adopted and how many entries were copied
    /// from it, if another node's was ahead.
    pub adopted: Option<(String, u64)>,
}

/// Claims an epoch of at least `floor` and adopts the most advanced
/// journal (see the module docs). `Ok(Err(reason))` means not now: too
/// few replicas answered.
pub async fn prepare(
    replica: &Arc<Replica>,
    peer: &Peer,
    view: &View,
    floor: u64,
    min_replicas: usize,
) -> anyhow::Result<Result<Prepared, String>> {
    let others: Vec<(String, String)> = view
        .back_ends()
        .filter(|m| m.node_id != view.me)
        .map(|m| (m.node_id.clone(), m.http.clone()))
        .collect();
    if others.len() < min_replicas {
        // Too few could answer even if all did: claim nothing. A claim
        // would still raise this node's own promise, and once this node
        // reaches the cluster again its replica would refuse the master
        // running there, which would step down for nothing.
        return Ok(Err(format!(
            "{} of the {min_replicas} other back-end nodes needed are live",
            others.len()
        )));
    }
    let mut epoch = floor.max(replica.promise() + 1);
    for _ in 0..CLAIM_ROUNDS_MAX {
        let claim = ReplicaRequest::Fence { epoch, claim: true };
        // Claimed here and elsewhere at once: each claim is an fsync.
        let local = {
            let (replica, claim) = (replica.clone(), claim.clone());
            tokio::spawn(async move { replica.call_local(claim).await })
        };
        let mut calls = JoinSet::new();
        for (node, url) in others.clone() {
            let (peer, claim) = (peer.clone(), claim.clone());
            calls.spawn(async move {
                let answer = replica::call(&peer, &url, &claim, FENCE_TIMEOUT).await;
                (node, url, answer)
            });
        }
        let mut shapes: Vec<(String, String, Shape)> = Vec::new();
        let mut higher = None;
        while let Some(joined) = calls.join_next().await {
            let Ok((node, url, answer)) = joined else {
                continue;
            };
            match answer {
                Ok(ReplicaResponse::Shape(shape)) => shapes.push((node, url, shape)),
                Ok(ReplicaResponse::Fenced { promised }) => {
                    higher = higher.max(Some(promised));
                }
                Ok(other) => tracing::info!("{node} did not take the fence: {other:?}"),
                Err(error) => tracing::info!("{node} did not answer the fence: {error}"),
            }
        }
        let mine = match local.await? {
            ReplicaResponse::Shape(shape) => shape,
            ReplicaResponse::Fenced { promised } => {
                higher = higher.max(Some(promised));
                Shape::default()
            }
            other => anyhow::bail!("this node's replica refused the claim: {other:?}"),
        };
        if let Some(promised) = higher {
            epoch = promised + 1;
            continue;
        }
        if shapes.len() < min_replicas {
            return Ok(Err(format!(
                "{} of the {min_replicas} other back-end nodes needed answered",
                shapes.len()
            )));
        }
        let reached = shapes.iter().map(|(node, ..)| node.clone()).collect();
        let best = shapes
            .into_iter()
            .max_by_key(|(_, _, shape)| (shape.last_epoch, shape.next));
        let mut adopted = None;
        if let Some((node, url, shape)) = best
            && (shape.last_epoch, shape.next) > (mine.last_epoch, mine.next)
        {
            let copied = copy(replica, peer, epoch, &url, &shape, &mine).await?;
            adopted = Some((node, copied));
        }
        return Ok(Ok(Prepared {
            epoch,
            reached,
            adopted,
        }));
    }
    Ok(Err(format!(
        "other nodes kept promising newer epochs ({CLAIM_ROUNDS_MAX} claims refused)"
    )))
}

/// Makes this node's journal equal to the one at `url` (shape `theirs`);
/// returns the number of entries copied.
async fn copy(
    replica: &Arc<Replica>,
    peer: &Peer,
    epoch: u64,
    url: &str,
    theirs: &Shape,
    mine: &Shape,
) -> anyhow::Result<u64> {
    let mut from = theirs.divergence(mine);
    let mut copied = 0;
    while from < theirs.next {
        let read = ReplicaRequest::Read {
            epoch,
            from,
            bytes_max: READ_BYTES_MAX,
        };
        let local = match replica::call(peer, url, &read, TRANSFER_TIMEOUT)
            .await
            .map_err(anyhow::Error::msg)?
        {
            ReplicaResponse::Entries(entries) if !entries.is_empty() => {
                copied += entries.len() as u64;
                ReplicaRequest::Append {
                    epoch,
                    first: from,
                    entries: entries.into_iter().map(|e| (e.epoch, e.data)).collect(),
                    commit: 0,
                }
            }
            ReplicaResponse::Snapshot(snapshot) => ReplicaRequest::Install { epoch, snapshot },
            other => anyhow::bail!("cannot read the journal at {url} from {from}: {other:?}"),
        };
        match replica.call_local(local).await {
            ReplicaResponse::Shape(shape) => {
                let next = theirs.divergence(&shape);
                anyhow::ensure!(next > from || shape.first > from, "no progress at {from}");
                from = next;
            }
            other => anyhow::bail!("cannot store the adopted journal: {other:?}"),
        }
    }
    Ok(copied)
}
