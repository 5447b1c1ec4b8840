//! A node's garbage collection of blobs: it deletes its copies of the
//! blobs the cluster no longer keeps.
//!
//! Which blobs the cluster keeps is the master's decision, journaled and
//! taken over with it (`cohort_master`'s `blobs` notes): a blob is kept
//! while a held job or schedule names it, and for the retention time after
//! nothing does or its last upload. This module only acts on it. Every
//! sweep (a quarter of the grace period, between [`SWEEP_EVERY_MIN`] and
//! [`SWEEP_EVERY_MAX`]), the node lists the blobs it stores that no upload
//! or copy touched for the grace period (`--blob-grace`, see
//! [`crate::blobs`]), asks the master which of them it keeps
//! ([`BLOBS_ASKED_MAX`] at a time) and deletes the others, each unless
//! touched meanwhile.
//!
//! Why the grace period: an upload is stored on this node, copied to a
//! majority of the back-end nodes and only then registered with the
//! master (and an output likewise, then reported); until then the master
//! does not keep it, and a sweep in between must not delete it. The grace
//! outlasts that way (an upload's copies are bounded by its own timeouts),
//! and a blob found present by an upload or copy is touched under the
//! store's lock, so the sweep's check and its removal see the same state.
//! A node that cannot reach the master, or a master that cannot answer
//! (an older build), deletes nothing: the sweep errs on the side of
//! keeping bytes.

use crate::blobs::BlobStore;
use crate::cluster::link::MasterLink;
use crate::events::{self, emit};
use crate::runtime::Digest;
use cohort_master::limits::BLOBS_ASKED_MAX;
use std::time::Duration;

/// The shortest grace period a node takes (`--blob-grace`): a node that
/// received a copy of an upload leaves it alone at least this long, which
/// must outlast the way from its copy's answer to the master keeping the
/// blob (the uploading node's `KeepBlob`, or a worker's for an output).
pub const BLOB_GRACE_MIN: Duration = Duration::from_secs(10);

/// The shortest time between two sweeps.
pub const SWEEP_EVERY_MIN: Duration = Duration::from_millis(250);

/// The longest time between two sweeps.
pub const SWEEP_EVERY_MAX: Duration = Duration::from_secs(60);

/// How often a node with grace period `grace` sweeps.
pub fn sweep_every(grace: Duration) -> Duration {
    (grace / 4).clamp(SWEEP_EVERY_MIN, SWEEP_EVERY_MAX)
}

/// Sweeps `store` every [`sweep_every`] for as long as the node runs.
pub fn spawn(link: MasterLink, store: BlobStore, grace: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(sweep_every(grace)).await;
            match sweep(&link, &store, grace).await {
                Ok(Swept { count: 0, .. }) => {}
                Ok(Swept { count, bytes }) => emit!(
                    info,
                    events::BLOBS_DELETED,
                    count,
                    bytes,
                    "deleted copies of blobs the cluster no longer keeps"
                ),
                Err(error) => tracing::debug!("blob collection skipped: {error}"),
            }
        }
    });
}

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Blobs deleted.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Which of `digests` the master says the cluster does not keep, in
/// order (`BLOBS_ASKED_MAX` at most). An answer that does not match the
/// question is an error: nothing is deleted on it.
pub(crate) async fn unkept(link: &MasterLink, digests: &[Digest]) -> Result<Vec<bool>, String> {
    let asked = digests.iter().map(|digest| digest.to_bytes()).collect();
    let status = (link.blobs(asked).await).map_err(|e| e.to_string())?;
    if status.len() != digests.len() {
        return Err(format!(
            "the master answered {} statuses for {} blobs",
            status.len(),
            digests.len()
        ));
    }
    Ok((digests.iter().zip(&status))
        .map(|(digest, status)| status.digest == digest.to_bytes() && !status.kept)
        .collect())
}

/// One sweep: deletes the blobs of `store` untouched for `grace` that the
/// master says the cluster does not keep. Stops at the first answer it
/// cannot use, keeping what it did not ask about.
pub async fn sweep(link: &MasterLink, store: &BlobStore, grace: Duration) -> Result<Swept, String> {
    let idle = {
        let store = store.clone();
        (tokio::task::spawn_blocking(move || store.idle(grace)).await)
            .map_err(|e| format!("the sweep stopped: {e}"))?
    };
    let mut swept = Swept::default();
    for asked in idle.chunks(BLOBS_ASKED_MAX) {
        let unkept: Vec<Digest> = (asked.iter().zip(unkept(link, asked).await?))
            .filter(|(_, unkept)| *unkept)
            .map(|(digest, _)| *digest)
            .collect();
        if unkept.is_empty() {
            continue;
        }
        let store = store.clone();
        let deleted = tokio::task::spawn_blocking(move || {
            let mut deleted = Swept::default();
            for digest in unkept {
                let size = store.size(&digest).unwrap_or(0);
                match store.remove_idle(&digest, grace) {
                    Ok(true) => {
                        deleted.count += 1;
                        deleted.bytes += size;
                    }
                    Ok(false) => {}
                    Err(error) => tracing::warn!("cannot delete blob {digest}: {error}"),
                }
            }
            deleted
        })
        .await
        .map_err(|e| format!("the sweep stopped: {e}"))?;
        swept.count += deleted.count;
        swept.bytes += deleted.bytes;
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_come_a_quarter_of_the_grace_apart_within_bounds() {
        assert_eq!(sweep_every(Duration::from_secs(1)), SWEEP_EVERY_MIN);
        assert_eq!(sweep_every(Duration::from_secs(8)), Duration::from_secs(2));
        assert_eq!(sweep_every(Duration::from_secs(3600)), SWEEP_EVERY_MAX);
        assert_eq!(sweep_every(Duration::ZERO), SWEEP_EVERY_MIN);
    }
}
