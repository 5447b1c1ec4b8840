//! An attempt's blobs on its worker: its inputs made local before it runs,
//! its outputs stored and made durable before its outcome is reported.
//!
//! * **Inputs** are the assignment's blobs (its `input_blob`, and its DAG
//!   parents' outputs when it asked for them), by digest. Each one this
//!   node lacks is fetched from a back-end node that holds it (digest
//!   checked) into this node's store, and the attempt reads the stored
//!   file. One that cannot be had fails the attempt with
//!   `blob_unavailable`, which is retried (another worker, or later, may
//!   reach a node that holds it). Each input is pinned in the store while
//!   the attempt may read it, marked used (the cache keeps what was used
//!   last), and counted as found here or fetched
//!   (`cohort_worker_inputs_total`). On a node that is not a back-end
//!   node the store is a cache bounded by `--blob-cache-bytes`: after an
//!   attempt's inputs are fetched and after its outputs are copied, the
//!   least recently used unpinned blobs go until it is within the bound
//!   (see `crate::blobs`).
//! * **Outputs** are written into a directory of the store's `partial/`
//!   owned by the attempt (removed with whatever is left in it when the
//!   attempt is over, even if a sandbox process was killed mid-write). On
//!   success each one is stored under its digest (copied and hashed by the node when a
//!   sandbox process wrote it) and replicated to a majority of the back-end
//!   nodes, as an upload is (or put in the S3-compatible store,
//!   `cluster::blob_s3`), before the outcome, which names them by digest,
//!   goes to the master. A disk that fills fails the attempt with
//!   `blob_store_full`, a majority out of reach with `replication_failed`:
//!   both retried. The master's journal holds their digests and sizes only.
//!   Each output is registered with the master as soon as it is copied
//!   (`KeepBlob`, as an upload is), so the other nodes' copies of the
//!   first outputs do not depend on their grace period while the later
//!   ones are copied; a registration the master refuses or cannot take
//!   is left to the report, which names the outputs anyway.

use crate::blobs::BlobError;
use crate::blobs::counts::{CACHE_EVICTED, CACHE_EVICTED_BYTES, INPUTS_FETCHED, INPUTS_LOCAL};
use crate::cluster::blob_transfer::BlobTransfer;
use crate::cluster::link::MasterLink;
use crate::runtime::Digest;
use crate::runtime::job_blobs::{BlobSpace, InputBlob, JobBlobs, WrittenBlob};
use cohort_master::{Blob, Command, Failure, NamedBlob};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The number of replication voters, when this node knows it.
pub type Voters = Arc<dyn Fn() -> Option<usize> + Send + Sync>;

/// This node's blobs, as its worker uses them.
#[derive(Clone)]
pub struct WorkerBlobs {
    /// The store, and how blobs move between nodes.
    pub transfer: BlobTransfer,
    /// The replication voters (`None`: not a back-end node, which asks one).
    pub voters: Voters,
    /// The bound of this node's store as a cache (`--blob-cache-bytes`),
    /// on a node that is not a back-end node; `None`: not a cache.
    pub cache_bytes: Option<u64>,
}

impl std::fmt::Debug for WorkerBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBlobs").finish_non_exhaustive()
    }
}

/// An attempt's blobs, ready: what it reads, where it writes. Dropped, its
/// output directory is removed (on a blocking thread: it may hold
/// gigabytes a killed sandbox process left).
pub(super) struct Prepared {
    pub(super) blobs: JobBlobs,
    space: std::path::PathBuf,
    /// The inputs, kept from the cache's eviction while the attempt runs.
    _pins: Vec<crate::blobs::BlobPin>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let space = std::mem::take(&mut self.space);
        // Most attempts write no output, so their directory was never made
        // (`JobBlobs::create`, or a sandbox process, makes it at the first):
        // one `lstat` here instead of a blocking thread's wake-up per
        // attempt, on the hot path of trivial jobs (BENCHMARKS.md,
        // "ci-guard").
        if std::fs::symlink_metadata(&space)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            return;
        }
        let remove = move || match std::fs::remove_dir_all(&space) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(space = %space.display(), %error, "cannot remove an attempt's output files")
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

impl WorkerBlobs {
    /// Makes every blob of `wanted` local and opens the attempt's output
    /// directory.
    pub(super) async fn prepare(&self, wanted: &[NamedBlob]) -> Result<Prepared, Failure> {
        let store = self.transfer.store();
        let mut inputs = Vec::with_capacity(wanted.len());
        let mut pins = Vec::with_capacity(wanted.len());
        for blob in wanted {
            let digest = Digest::from(blob.digest);
            let unavailable = |why: String| Failure {
                code: "blob_unavailable".into(),
                message: format!("input blob {:?} ({digest}): {why}", blob.name),
            };
            // A copy removed by hand is fetched again, not read as gone.
            store.forget_if_gone(&digest);
            // Pinned before it is fetched, so no eviction takes it between.
            pins.push(store.pin(digest));
            let local = store.size(&digest).is_some();
            let ensured = match self.transfer.remote() {
                Some(remote) => (remote.ensure(store, &digest).await).map_err(|e| e.to_string()),
                None => self.transfer.ensure(&digest).await,
            };
            match ensured {
                Ok(Some(size)) if size == blob.size => {}
                Ok(Some(size)) => {
                    return Err(unavailable(format!(
                        "this node holds {size} bytes of it, the job was given {}",
                        blob.size
                    )));
                }
                Ok(None) => {
                    let holder = match self.transfer.remote() {
                        Some(_) => "the blob store has no object for it",
                        None => "no live back-end node holds it",
                    };
                    return Err(unavailable(holder.to_string()));
                }
                Err(error) => return Err(unavailable(error)),
            }
            let path = store
                .file(&digest)
                .ok_or_else(|| unavailable("it went from this node's store".to_string()))?;
            store.used(&digest);
            let counted = if local {
                &INPUTS_LOCAL
            } else {
                &INPUTS_FETCHED
            };
            counted.fetch_add(1, Ordering::Relaxed);
            inputs.push(InputBlob {
                name: blob.name.clone(),
                digest: digest.to_bytes(),
                size: blob.size,
                path,
            });
        }
        self.trim().await;
        let space = store.attempt_space();
        Ok(Prepared {
            blobs: JobBlobs {
                inputs,
                space: Some(BlobSpace {
                    dir: space.clone(),
                    bytes_max: store.ceiling(),
                }),
            },
            space,
            _pins: pins,
        })
    }

    /// Evicts the least recently used blobs this node's cache holds beyond
    /// its bound, if it is a cache (see the module notes).
    async fn trim(&self) {
        let Some(bound) = self.cache_bytes else {
            return;
        };
        let store = self.transfer.store().clone();
        match tokio::task::spawn_blocking(move || store.evict_over(bound)).await {
            Ok(Ok((0, _))) => {}
            Ok(Ok((count, bytes))) => {
                CACHE_EVICTED.fetch_add(count, Ordering::Relaxed);
                CACHE_EVICTED_BYTES.fetch_add(bytes, Ordering::Relaxed);
                tracing::debug!(count, bytes, "evicted blobs from the cache");
            }
            Ok(Err(error)) => tracing::warn!("cannot evict from the blob cache: {error}"),
            Err(error) => tracing::warn!("the blob cache's eviction stopped: {error}"),
        }
    }

    /// Stores the outputs of a successful attempt and makes each durable on
    /// a majority of the back-end nodes: what the outcome names.
    pub(super) async fn keep(
        &self,
        master: &MasterLink,
        written: Vec<WrittenBlob>,
    ) -> Result<Vec<NamedBlob>, Failure> {
        let mut written = written.into_iter();
        let kept = self.keep_each(master, written.by_ref()).await;
        self.trim().await;
        // On a failure the outputs not yet stored are left to `Prepared`,
        // which removes the attempt's directory on a blocking thread (an
        // unlink of gigabytes here would hold an async thread).
        for rest in written {
            let _ = rest.file.keep();
        }
        kept
    }

    async fn keep_each(
        &self,
        master: &MasterLink,
        written: impl Iterator<Item = WrittenBlob>,
    ) -> Result<Vec<NamedBlob>, Failure> {
        let store = self.transfer.store();
        let mut kept = Vec::new();
        // Every output stays pinned until all are copied (this node's
        // garbage collection counts them as stored when the pins go, just
        // before the report that has the master keep them).
        let mut pins = Vec::new();
        for blob in written {
            let digest = Digest::from(blob.digest);
            let stored = store
                .adopt(blob.file, digest, blob.size, blob.verified)
                .await
                .map_err(|error| Failure {
                    code: match error {
                        BlobError::Full(_) => "blob_store_full",
                        _ => "internal",
                    }
                    .into(),
                    message: format!("output blob {:?}: {error}", blob.name),
                })?;
            pins.push(store.pin(digest));
            let not_durable = |error: String| Failure {
                code: "replication_failed".into(),
                message: format!("output blob {:?} ({digest}): {error}", blob.name),
            };
            // With an S3-compatible store, durable once the store has it.
            let put = match self.transfer.remote() {
                Some(remote) => Some(
                    (remote.put(store, stored.info).await)
                        .map_err(|e| not_durable(e.to_string()))?,
                ),
                None => {
                    (self.transfer.replicate(stored.info, (self.voters)()))
                        .await
                        .map_err(not_durable)?;
                    None
                }
            };
            let keep = Command::KeepBlob {
                blob: Blob {
                    digest: blob.digest,
                    size: blob.size,
                },
            };
            if let Err(error) = master.command(keep).await {
                tracing::debug!("output blob {digest} left to the report: {error}");
            }
            if let (Some(remote), Some(put)) = (self.transfer.remote(), put) {
                (remote.confirm(store, put).await).map_err(|e| not_durable(e.to_string()))?;
            }
            kept.push(NamedBlob {
                name: blob.name,
                digest: blob.digest,
                size: blob.size,
            });
        }
        Ok(kept)
    }
}
