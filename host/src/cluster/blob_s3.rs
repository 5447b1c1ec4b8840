//! The S3-compatible blob store (`--blob-store s3://bucket/prefix`): where
//! blobs live instead of on a majority of the back-end nodes.
//!
//! # What changes, and what does not
//!
//! A blob is still named by its sha256 and still passes through the local
//! store ([`crate::blobs`]) first: an upload is written, hashed and checked
//! on the disk of the node that takes it, so nothing half-written is ever
//! visible, in the bucket or anywhere else. Then, instead of being pushed
//! to the other back-end nodes, it is streamed from that file to the object
//! `<prefix>/sha256/<hex>` (one `PUT` up to [`S3_PART_BYTES`], a multipart
//! upload of parts of that size beyond, at most [`S3_PARTS_AHEAD`] parts in
//! flight: bounded memory whatever the size), and the upload is answered
//! only once the store has taken the whole object and the master keeps the
//! blob (`KeepBlob`, as without a store). A worker's outputs take the same
//! way before its outcome reaches the master.
//!
//! The local copy stays as a cache, collected by the node's own garbage
//! collection as before (`cluster::blob_gc`). A node that lacks a blob (a
//! download, a job's input) streams the object into its local store, which
//! checks its sha256 against the name: an object whose bytes are not the
//! blob's (changed or damaged in the bucket) is refused with
//! `blob_store_corrupt` and never served, and nothing of it is kept. The
//! store is trusted for availability, never for integrity.
//!
//! The client is Apache Arrow's `object_store` (S3 signing, retries,
//! multipart), configured by the standard `AWS_*` variables
//! (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP`, ...).
//! No credential is ever logged: errors carry the store's message and the
//! object's path only, and nothing here formats the client itself.
//!
//! # Deleting, and the race with an upload of the same bytes
//!
//! The master still decides which blobs the cluster keeps. The objects it
//! does not keep are deleted by one node, the one hosting the master
//! ([`spawn_sweeper`]), at most [`SWEEP_DELETES_MAX`] a sweep: it lists the
//! objects last modified more than the grace ago (`--blob-grace`), asks the
//! master which it keeps, and for each one it does not, `HEAD`s the object
//! right before deleting it and deletes it only if it is still last
//! modified more than the grace ago ([`decide`]).
//!
//! The danger is an upload of bytes already in the bucket (it deduplicates
//! nothing on the wire, but the object exists) meeting a sweep that has
//! just decided to delete that object: the sweep's `HEAD` sees the old
//! object, the upload's `PUT` lands, the upload's `KeepBlob` lands, and the
//! sweep's `DELETE` lands last, removing a blob the master keeps and the
//! uploader was told is stored. Three rules close it:
//!
//! 1. **Every upload `PUT`s**, even when the object exists, so its last
//!    modification is fresh: a sweep whose `HEAD` comes after the `PUT`
//!    skips the object (modified within the grace), and one whose master
//!    answer comes after the `KeepBlob` never picks it.
//! 2. **A sweep's `DELETE` follows its `HEAD` closely**: it is sent within
//!    [`SWEEP_HEAD_TO_DELETE_MAX`] of the `HEAD`'s start, or not at all,
//!    and it is one try bounded by [`SWEEP_DELETE_TIMEOUT`] (no retries).
//!    So a `DELETE` that lands after an upload's `PUT` came from a `HEAD`
//!    before it, and is over (done or given up) by the `PUT`'s end plus
//!    [`RACE_SETTLED`].
//! 3. **An upload that found the object already there** (its `HEAD` before
//!    its `PUT`) re-checks it after its `KeepBlob`, once [`RACE_SETTLED`]
//!    has passed since its `PUT` ended, and `PUT`s it again if it is gone;
//!    only then is the upload answered ([`S3Store::confirm`]). Any sweep
//!    that could have raced is over by then, and any later one asks the
//!    master after the `KeepBlob`, which keeps the blob.
//!
//! An upload of bytes not in the bucket needs no re-check: a sweep can only
//! delete an object its `HEAD` found, and one found before the upload's own
//! `HEAD` (which saw none) was deleted before it, by that same sweep (there
//! is one sweeper at a time). A node starts sweeping only after it has
//! hosted the master for [`RACE_SETTLED`], so the previous host's last
//! `DELETE` is over first. What bounds all of this is the timeouts of
//! requests: a `DELETE` a store takes long after the client gave up on it
//! is outside the guarantee, as it is for any client of such a store.
//!
//! Caveats: the grace is compared with the store's `Last-Modified`, so the
//! nodes' clocks must agree with the store's to well within the grace (NTP
//! does); a duplicate upload is answered [`RACE_SETTLED`] later than a new
//! one; and the sweeper lists the whole prefix each sweep.

use crate::blobs::{BlobError, BlobInfo, BlobStore, Relay};
use crate::cluster::blob_gc::{Swept, sweep_every, unkept};
use crate::cluster::link::MasterLink;
use crate::events::{self, emit};
use crate::limits::BLOB_IDLE_TIMEOUT;
use crate::runtime::Digest;
use bytes::{Bytes, BytesMut};
use cohort_master::limits::BLOBS_ASKED_MAX;
use futures_util::StreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, PutPayload, RetryConfig, WriteMultipart,
};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::AsyncReadExt;

/// The size of one part of a multipart upload, and the largest object sent
/// in one `PUT` (S3's least part is 5 MiB).
pub const S3_PART_BYTES: usize = 8 << 20;
/// Parts of one upload in flight at once: an upload holds at most
/// `(S3_PARTS_AHEAD + 1) * S3_PART_BYTES` of memory.
pub const S3_PARTS_AHEAD: usize = 2;
/// How much of the local file one read takes.
const S3_READ_BYTES: usize = 1 << 20;
/// Longest wait for a connection to the store.
pub const S3_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest one request to the store takes (a part of [`S3_PART_BYTES`]).
pub const S3_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Tries of a failed request after the first.
pub const S3_RETRIES_MAX: usize = 3;
/// No retry starts later than this after the first try.
pub const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(15);
/// Most objects one sweep deletes.
pub const SWEEP_DELETES_MAX: u64 = 256;
/// A sweep's `DELETE` is sent within this of the start of its `HEAD`, or
/// not at all (module notes, rule 2).
pub const SWEEP_HEAD_TO_DELETE_MAX: Duration = Duration::from_secs(1);
/// A sweep's `DELETE` is one try of at most this.
pub const SWEEP_DELETE_TIMEOUT: Duration = Duration::from_secs(2);
/// After this from the end of an upload's `PUT`, every sweep that could
/// have raced it is over (module notes, rule 3).
pub const RACE_SETTLED: Duration = Duration::from_millis(
    (SWEEP_HEAD_TO_DELETE_MAX.as_millis() + SWEEP_DELETE_TIMEOUT.as_millis() + 500) as u64,
);

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    /// Unreachable, credentials refused, no such bucket, or any other
    /// failure of the store: retry later.
    #[error("the blob store {store} is unavailable: {message}")]
    Unavailable { store: String, message: String },
    /// The object's bytes are not the blob's.
    #[error(
        "the object for blob {digest} in the blob store {store} does not hold its bytes \
         (sha256 {actual}): it is not served; upload the blob again to repair it"
    )]
    Corrupt {
        store: String,
        digest: Digest,
        actual: Digest,
    },
    /// The local store failed (its disk full, the blob over the ceiling).
    #[error("{0}")]
    Local(#[from] BlobError),
}

/// Where `--blob-store` puts blobs: a bucket and a key prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    /// The bucket's name.
    pub bucket: String,
    /// The prefix of every key, without slashes at its ends (may be empty).
    pub prefix: String,
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

impl StoreUrl {
    /// Parses `s3://bucket/prefix` (the prefix optional): the bucket by
    /// S3's naming rules (3 to 63 lowercase letters, digits, dots and
    /// dashes, beginning and ending with a letter or digit), the prefix as
    /// segments of printable characters, none empty, `.` or `..`.
    pub fn parse(text: &str) -> Result<StoreUrl, String> {
        let malformed =
            |why: &str| format!("--blob-store {text:?} is not s3://bucket/prefix: {why}");
        let rest = text
            .strip_prefix("s3://")
            .ok_or_else(|| malformed("it must start with s3://"))?;
        if rest.contains(['?', '#']) {
            return Err(malformed("it has a query or fragment"));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && (bucket.bytes())
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
            && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !bucket_ok {
            return Err(malformed(
                "the bucket must be 3 to 63 lowercase letters, digits, dots or dashes, \
                 beginning and ending with a letter or digit",
            ));
        }
        let prefix = prefix.trim_end_matches('/');
        for segment in prefix.split('/').filter(|_| !prefix.is_empty()) {
            if segment.is_empty() || segment == "." || segment == ".." {
                return Err(malformed("the prefix has an empty, `.` or `..` segment"));
            }
            if segment.chars().any(|c| c.is_control() || c == '\\') {
                return Err(malformed("the prefix has a control character or backslash"));
            }
        }
        Ok(StoreUrl {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The folder of the objects: `<prefix>/sha256`.
    fn folder(&self) -> String {
        match self.prefix.is_empty() {
            true => "sha256".to_string(),
            false => format!("{}/sha256", self.prefix),
        }
    }

    /// The key of blob `digest`: `<prefix>/sha256/<hex>`.
    pub fn key(&self, digest: &Digest) -> String {
        format!("{}/{digest}", self.folder())
    }

    /// The blob a key names, if it is one of this store's.
    pub fn digest_of(&self, key: &str) -> Option<Digest> {
        let name = key.strip_prefix(&self.folder())?.strip_prefix('/')?;
        let digest: Digest = name.parse().ok()?;
        (digest.to_string() == name).then_some(digest)
    }
}

/// What a sweep does with an object the master does not keep, from its
/// `HEAD` taken right before (module notes, rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Delete it.
    Delete,
    /// It is gone already.
    Gone,
    /// Modified within the grace (an upload just `PUT` it): keep it.
    Recent,
    /// The `HEAD` took too long: the `DELETE` would no longer follow it
    /// closely, so it waits for the next sweep.
    Late,
}

/// Decides from a `HEAD` started at `head_started` (now is `now`) that
/// found the object last modified at `modified_ms` (ms since the epoch;
/// `None`: no object), with `now_ms` the time now and `grace` the
/// grace period.
pub fn decide(
    modified_ms: Option<i64>,
    now_ms: i64,
    grace: Duration,
    head_started: Instant,
    now: Instant,
) -> Decision {
    let Some(modified_ms) = modified_ms else {
        return Decision::Gone;
    };
    if !older_than(modified_ms, now_ms, grace) {
        return Decision::Recent;
    }
    if now.duration_since(head_started) > SWEEP_HEAD_TO_DELETE_MAX {
        return Decision::Late;
    }
    Decision::Delete
}

/// Whether something modified at `modified_ms` is older than `grace` at
/// `now_ms` (a time in the future counts as new).
pub fn older_than(modified_ms: i64, now_ms: i64, grace: Duration) -> bool {
    now_ms.saturating_sub(modified_ms) > grace.as_millis().min(i64::MAX as u128) as i64
}

/// When an upload re-checks its object (module notes, rule 3): `None`
/// when it found none before its `PUT`.
pub fn recheck_at(stored: &S3Put) -> Option<Instant> {
    stored.present_before.then(|| stored.done_at + RACE_SETTLED)
}

fn now_ms() -> i64 {
    (SystemTime::now().duration_since(SystemTime::UNIX_EPOCH))
        .map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64)
}

/// An object stored by an upload, for [`S3Store::confirm`].
#[derive(Debug, Clone, Copy)]
pub struct S3Put {
    /// The blob.
    pub info: BlobInfo,
    /// Whether the object was there before the `PUT`.
    pub present_before: bool,
    /// When the `PUT` ended.
    pub done_at: Instant,
}

/// The S3-compatible store. Cheap to clone.
#[derive(Clone)]
pub struct S3Store {
    url: StoreUrl,
    /// With retries: uploads, downloads, listings.
    store: Arc<dyn ObjectStore>,
    /// One try each, bounded by [`SWEEP_DELETE_TIMEOUT`]: a sweep's deletes.
    deleter: Arc<dyn ObjectStore>,
}

impl std::fmt::Debug for S3Store {
    // Never the clients: their configuration holds the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("url", &self.url.to_string())
            .finish()
    }
}

/// A client of `url` configured from the `AWS_*` variables, over the
/// node's defaults for timeouts and retries (which the variables may
/// override, e.g. `AWS_TIMEOUT`).
fn client(
    url: &StoreUrl,
    retries: usize,
    timeout: Duration,
) -> Result<Arc<dyn ObjectStore>, String> {
    let options = ClientOptions::new()
        .with_connect_timeout(S3_CONNECT_TIMEOUT)
        .with_timeout(timeout);
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: retries,
        retry_timeout: S3_RETRY_TIMEOUT,
    };
    let mut builder = AmazonS3Builder::new()
        .with_client_options(options)
        .with_retry(retry);
    // As `AmazonS3Builder::from_env`, over the defaults above.
    for (key, value) in std::env::vars_os() {
        if let (Some(key), Some(value)) = (key.to_str(), value.to_str())
            && key.starts_with("AWS_")
            && let Ok(config) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
        {
            builder = builder.with_config(config, value);
        }
    }
    let built = builder.with_bucket_name(&url.bucket).build();
    // The builder's errors name settings, never their values.
    built
        .map(|store| Arc::new(store) as Arc<dyn ObjectStore>)
        .map_err(|e| format!("cannot configure the blob store {url}: {e}"))
}

impl S3Store {
    /// A store at `url`, configured from the `AWS_*` variables, checked by
    /// listing its prefix: an unreachable store, refused credentials or a
    /// missing bucket fail here, with the store's answer.
    pub async fn connect(url: StoreUrl) -> Result<S3Store, String> {
        let store = S3Store {
            store: client(&url, S3_RETRIES_MAX, S3_REQUEST_TIMEOUT)?,
            deleter: client(&url, 0, SWEEP_DELETE_TIMEOUT)?,
            url,
        };
        let folder = ObjectPath::from(store.url.folder());
        (store.store.list_with_delimiter(Some(&folder)).await).map_err(|e| {
            format!(
                "the blob store {} cannot be listed (is the bucket there, are AWS_ENDPOINT_URL, \
                 AWS_REGION and the credentials right?): {e}",
                store.url
            )
        })?;
        Ok(store)
    }

    /// Where it is.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    fn path(&self, digest: &Digest) -> ObjectPath {
        ObjectPath::from(self.url.key(digest))
    }

    fn unavailable(&self, error: impl std::fmt::Display) -> S3Error {
        S3Error::Unavailable {
            store: self.url.to_string(),
            message: error.to_string(),
        }
    }

    /// The size and last modification (ms since the epoch) of blob
    /// `digest`'s object, if there is one.
    async fn head(&self, digest: &Digest) -> Result<Option<(u64, i64)>, S3Error> {
        match self.store.head(&self.path(digest)).await {
            Ok(meta) => Ok(Some((meta.size, meta.last_modified.timestamp_millis()))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(self.unavailable(error)),
        }
    }

    /// The size of blob `digest`: this node's copy's, or else its object's
    /// (nothing is copied). `Ok(None)`: neither exists.
    pub async fn locate(&self, local: &BlobStore, digest: &Digest) -> Result<Option<u64>, S3Error> {
        if let Some(size) = local.size(digest) {
            return Ok(Some(size));
        }
        Ok(self.head(digest).await?.map(|(size, _)| size))
    }

    /// Makes sure blob `digest` is in `local`, streaming its object into it
    /// (sha256 checked) when it is not. `Ok(None)`: no such object.
    pub async fn ensure(&self, local: &BlobStore, digest: &Digest) -> Result<Option<u64>, S3Error> {
        self.ensure_relayed(local, digest, None).await
    }

    /// The same, serving the copy to `relay` as it is made (see
    /// [`crate::blobs::Relay`]).
    pub async fn ensure_relayed(
        &self,
        local: &BlobStore,
        digest: &Digest,
        relay: Option<Relay>,
    ) -> Result<Option<u64>, S3Error> {
        if let Some(size) = local.size(digest) {
            return Ok(Some(size));
        }
        let got = match self.store.get(&self.path(digest)).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(self.unavailable(error)),
        };
        let ceiling = local.ceiling();
        if got.meta.size > ceiling {
            return Err(BlobError::TooLarge { ceiling }.into());
        }
        let mut upload = local.upload()?;
        if let Some(relay) = relay {
            upload.relay(relay, got.meta.size);
        }
        let mut chunks = got.into_stream();
        loop {
            let next = tokio::time::timeout(BLOB_IDLE_TIMEOUT, chunks.next()).await;
            match next {
                Err(_) => {
                    return Err(self.unavailable(format!(
                        "no bytes of blob {digest} came for {BLOB_IDLE_TIMEOUT:?}"
                    )));
                }
                Ok(None) => break,
                Ok(Some(Err(error))) => return Err(self.unavailable(error)),
                Ok(Some(Ok(chunk))) => upload.write(chunk).await?,
            }
        }
        match upload.finish(Some(*digest)).await {
            Ok(stored) => Ok(Some(stored.info.bytes)),
            Err(BlobError::DigestMismatch { expected, actual }) => {
                tracing::warn!(digest = %expected, %actual, store = %self.url, "an object in the blob store does not hold its blob's bytes; it is not served");
                Err(S3Error::Corrupt {
                    store: self.url.to_string(),
                    digest: expected,
                    actual,
                })
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Streams blob `info` from `local` (which holds it; the caller pins
    /// it) to its object, always, even if the object exists (module notes,
    /// rule 1). Follow with [`confirm`](Self::confirm) once the master
    /// keeps the blob.
    pub async fn put(&self, local: &BlobStore, info: BlobInfo) -> Result<S3Put, S3Error> {
        let present_before = self.head(&info.digest).await?.is_some();
        self.upload(local, info).await?;
        Ok(S3Put {
            info,
            present_before,
            done_at: Instant::now(),
        })
    }

    /// After the master keeps the blob `put` stored: if the object was
    /// there before the `PUT`, waits until any sweep that could have
    /// raced is over, and stores it again if such a sweep deleted it
    /// (module notes, rule 3).
    pub async fn confirm(&self, local: &BlobStore, put: S3Put) -> Result<(), S3Error> {
        let Some(at) = recheck_at(&put) else {
            return Ok(());
        };
        tokio::time::sleep_until(at.into()).await;
        if self.head(&put.info.digest).await?.is_none() {
            tracing::info!(digest = %put.info.digest, store = %self.url, "a sweep deleted an object as it was uploaded again; stored it again");
            self.upload(local, put.info).await?;
        }
        Ok(())
    }

    /// Streams the local file of blob `info` to its object: one `PUT` up to
    /// [`S3_PART_BYTES`], a multipart upload beyond (aborted if anything
    /// fails, so no part is left behind to pay for).
    async fn upload(&self, local: &BlobStore, info: BlobInfo) -> Result<(), S3Error> {
        let path = self.path(&info.digest);
        let file = local
            .file(&info.digest)
            .ok_or(BlobError::NotFound(info.digest))?;
        let mut file = tokio::fs::File::open(&file)
            .await
            .map_err(|e| BlobError::Io(format!("cannot read blob {}: {e}", info.digest)))?;
        let mut read = async |limit: usize| -> Result<Bytes, S3Error> {
            let mut buffer = BytesMut::with_capacity(limit);
            while buffer.len() < limit {
                let n = (&mut file)
                    .take((limit - buffer.len()) as u64)
                    .read_buf(&mut buffer)
                    .await
                    .map_err(|e| BlobError::Io(format!("cannot read blob {}: {e}", info.digest)))?;
                if n == 0 {
                    break;
                }
            }
            Ok(buffer.freeze())
        };
        let short = |sent: u64| {
            S3Error::Local(BlobError::Io(format!(
                "blob {} has {sent} bytes on this node's disk, not {}",
                info.digest, info.bytes
            )))
        };
        if info.bytes <= S3_PART_BYTES as u64 {
            let bytes = read(info.bytes as usize).await?;
            if bytes.len() as u64 != info.bytes {
                return Err(short(bytes.len() as u64));
            }
            (self.store.put(&path, PutPayload::from(bytes)).await)
                .map_err(|e| self.unavailable(e))?;
            return Ok(());
        }
        let multipart = (self.store.put_multipart(&path).await).map_err(|e| self.unavailable(e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(multipart, S3_PART_BYTES);
        let mut sent = 0u64;
        let failed = loop {
            if let Err(error) = writer.wait_for_capacity(S3_PARTS_AHEAD).await {
                break self.unavailable(error);
            }
            let chunk = match read(S3_READ_BYTES).await {
                Ok(chunk) => chunk,
                Err(error) => break error,
            };
            if chunk.is_empty() {
                if sent != info.bytes {
                    break short(sent);
                }
                return (writer.finish().await)
                    .map(|_| ())
                    .map_err(|e| self.unavailable(e));
            }
            sent += chunk.len() as u64;
            writer.put(chunk);
        };
        if let Err(error) = writer.abort().await {
            tracing::warn!(digest = %info.digest, store = %self.url, %error, "cannot abort a multipart upload; the store's lifecycle rules remove its parts");
        }
        Err(failed)
    }

    /// One sweep (module notes): deletes at most [`SWEEP_DELETES_MAX`]
    /// objects last modified more than `grace` ago that the master does
    /// not keep. Stops at the first answer it cannot use, keeping what it
    /// did not ask about.
    pub async fn sweep(&self, link: &MasterLink, grace: Duration) -> Result<Swept, String> {
        let folder = ObjectPath::from(self.url.folder());
        let mut listing = self.store.list(Some(&folder));
        let mut swept = Swept::default();
        let mut asked: Vec<(Digest, u64)> = Vec::new();
        loop {
            let next = listing.next().await;
            let done = next.is_none();
            if let Some(meta) = next {
                let meta = meta.map_err(|e| self.unavailable(e).to_string())?;
                let digest = self.url.digest_of(meta.location.as_ref());
                let old = older_than(meta.last_modified.timestamp_millis(), now_ms(), grace);
                if let Some(digest) = digest.filter(|_| old) {
                    asked.push((digest, meta.size));
                }
            }
            if asked.len() >= BLOBS_ASKED_MAX || (done && !asked.is_empty()) {
                self.delete_unkept(link, std::mem::take(&mut asked), grace, &mut swept)
                    .await?;
                if swept.count >= SWEEP_DELETES_MAX {
                    break;
                }
            }
            if done {
                break;
            }
        }
        Ok(swept)
    }

    /// Deletes those of `asked` the master does not keep, each only as
    /// [`decide`] says, until the sweep has deleted its most.
    async fn delete_unkept(
        &self,
        link: &MasterLink,
        asked: Vec<(Digest, u64)>,
        grace: Duration,
        swept: &mut Swept,
    ) -> Result<(), String> {
        let digests: Vec<Digest> = asked.iter().map(|(digest, _)| *digest).collect();
        let unkept = (asked.iter().zip(unkept(link, &digests).await?))
            .filter(|(_, unkept)| *unkept)
            .map(|(blob, _)| *blob);
        for (digest, size) in unkept {
            if swept.count >= SWEEP_DELETES_MAX {
                break;
            }
            let started = Instant::now();
            let head = self.head(&digest).await.map_err(|e| e.to_string())?;
            let modified = head.map(|(_, modified)| modified);
            if decide(modified, now_ms(), grace, started, Instant::now()) != Decision::Delete {
                continue;
            }
            let path = self.path(&digest);
            let deleted = tokio::time::timeout(SWEEP_DELETE_TIMEOUT, self.deleter.delete(&path));
            match deleted.await {
                Ok(Ok(())) | Ok(Err(object_store::Error::NotFound { .. })) => {
                    swept.count += 1;
                    swept.bytes += size;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%digest, %error, "cannot delete an object; the next sweep tries again")
                }
                Err(_) => {
                    tracing::debug!(%digest, "a delete took too long; the next sweep tries again")
                }
            }
        }
        Ok(())
    }
}

/// Sweeps `store` every [`sweep_every`] while this node hosts the master
/// and has for [`RACE_SETTLED`] (module notes): one sweeper at a time.
pub fn spawn_sweeper(link: MasterLink, store: S3Store, grace: Duration) {
    tokio::spawn(async move {
        let mut hosting_since: Option<Instant> = None;
        loop {
            tokio::time::sleep(sweep_every(grace)).await;
            hosting_since = match (link.local().is_some(), hosting_since) {
                (false, _) => None,
                (true, since) => Some(since.unwrap_or_else(Instant::now)),
            };
            if hosting_since.is_none_or(|since| since.elapsed() < RACE_SETTLED) {
                continue;
            }
            match store.sweep(&link, grace).await {
                Ok(Swept { count: 0, .. }) => {}
                Ok(Swept { count, bytes }) => emit!(
                    info,
                    events::BLOBS_DELETED,
                    count,
                    bytes,
                    store = "s3",
                    "deleted objects of blobs the cluster no longer keeps from the blob store"
                ),
                Err(error) => tracing::debug!("blob store collection skipped: {error}"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_are_a_bucket_and_a_prefix_or_refused() {
        let url = StoreUrl::parse("s3://my-bucket.data/cohort/blobs/").unwrap();
        assert_eq!(url.bucket, "my-bucket.data");
        assert_eq!(url.prefix, "cohort/blobs");
        assert_eq!(url.to_string(), "s3://my-bucket.data/cohort/blobs");
        let digest = Digest::of(b"x");
        let key = url.key(&digest);
        assert_eq!(key, format!("cohort/blobs/sha256/{digest}"));
        assert_eq!(url.digest_of(&key), Some(digest));
        assert_eq!(url.digest_of(&format!("cohort/sha256/{digest}")), None);
        assert_eq!(url.digest_of("cohort/blobs/sha256/not-hex"), None);
        let upper = format!("cohort/blobs/sha256/{}", digest.to_string().to_uppercase());
        assert_eq!(url.digest_of(&upper), None, "one key per blob");
        let bare = StoreUrl::parse("s3://bkt").unwrap();
        assert_eq!(bare.prefix, "");
        assert_eq!(bare.key(&digest), format!("sha256/{digest}"));
        assert_eq!(StoreUrl::parse("s3://bkt/").unwrap(), bare);
        for bad in [
            "bkt/prefix",
            "https://bkt/prefix",
            "s3://",
            "s3://ab",
            "s3://Bucket/x",
            "s3://-bucket/x",
            "s3://bucket_/x",
            "s3://bucket/a//b",
            "s3://bucket/a/../b",
            "s3://bucket/a?x=1",
            "s3://bucket/a\tb",
        ] {
            let error = StoreUrl::parse(bad).unwrap_err();
            assert!(error.contains("s3://bucket/prefix"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_sweep_deletes_only_an_old_object_right_after_its_head() {
        let grace = Duration::from_secs(60);
        let now_ms = 1_000_000_000;
        let started = Instant::now();
        let old = Some(now_ms - 61_000);
        assert_eq!(
            decide(old, now_ms, grace, started, started),
            Decision::Delete
        );
        assert_eq!(
            decide(None, now_ms, grace, started, started),
            Decision::Gone
        );
        // PUT again by an upload since the listing: kept.
        let fresh = Some(now_ms - 1_000);
        assert_eq!(
            decide(fresh, now_ms, grace, started, started),
            Decision::Recent
        );
        // In the future (a clock ahead of this node's): kept.
        let ahead = Some(now_ms + 5_000);
        assert_eq!(
            decide(ahead, now_ms, grace, started, started),
            Decision::Recent
        );
        // The HEAD answered too late for the DELETE to follow it closely.
        let late = started + SWEEP_HEAD_TO_DELETE_MAX + Duration::from_millis(1);
        assert_eq!(decide(old, now_ms, grace, started, late), Decision::Late);
        assert!(
            !older_than(now_ms - 60_000, now_ms, grace),
            "exactly the grace"
        );
    }

    #[test]
    fn an_upload_rechecks_only_an_object_that_was_there_once_every_racing_delete_is_over() {
        let info = BlobInfo {
            digest: Digest::of(b"x"),
            bytes: 1,
        };
        let done_at = Instant::now();
        let new = S3Put {
            info,
            present_before: false,
            done_at,
        };
        assert_eq!(recheck_at(&new), None);
        let again = S3Put {
            present_before: true,
            ..new
        };
        assert_eq!(recheck_at(&again), Some(done_at + RACE_SETTLED));
        // A delete sent at the latest moment a HEAD before the PUT allows,
        // and given up at the latest, is over before the re-check.
        assert!(SWEEP_HEAD_TO_DELETE_MAX + SWEEP_DELETE_TIMEOUT < RACE_SETTLED);
    }
}
