//! Blobs: large data, named by the sha256 of its bytes, stored on the
//! node's disk and streamed in and out, never held whole in memory.
//!
//! # On disk
//!
//! `<data>/blobs/<sha256>` holds each blob once, whatever number of times
//! it was uploaded. An upload is written to `<data>/blobs/partial/` as it
//! arrives, hashed as it is written, counted against the node's ceiling
//! (`--blob-bytes-max`), synced, and renamed under its digest only once it
//! is whole and its digest is the one the uploader expected (if it named
//! one): a crash, an aborted or refused upload, or a disk that fills leaves
//! nothing under a digest, and `partial/` is emptied when the store opens.
//! A blob is never rewritten in place, so a reader never sees a change.
//!
//! # Reading
//!
//! [`BlobStore::reader`] streams a byte range of a blob through a small
//! bounded channel ([`BLOB_READ_AHEAD`] chunks of [`BLOB_READ_BYTES`]),
//! read by an async task that takes a blocking thread only for each read
//! (the next chunk is read while one waits for room in the channel): a
//! slow reader holds at most a MiB of the node's memory and no thread. Ranges follow HTTP's `Range: bytes=` rules
//! ([`parse_range`]).
//!
//! # Writing
//!
//! An [`Upload`] gathers the chunks it is given, without copying them,
//! into batches of [`BLOB_WRITE_BYTES`], and writes and hashes each batch
//! on a blocking thread while the next one gathers: receiving, writing
//! and hashing overlap, and an upload holds at most two batches of memory
//! and a thread only while a batch is written. Every [`BLOB_SYNC_BYTES`]
//! the bytes written since are handed to the disk (Linux's
//! `sync_file_range`) and the window before waited for, so the sync that
//! makes the blob durable before it is kept stays short however large
//! the blob, and the upload does not stop at each window for the disk.
//!
//! Across nodes (replication on upload, fetching a blob this node lacks) see
//! `cluster::blob_transfer`.
//!
//! # Relaying a copy
//!
//! A download from a node that has no copy of the blob is served while
//! the node copies it ([`Relay`]): once more than [`RELAY_AFTER_BYTES`]
//! of the copy came, each chunk the copy writes is passed on to the
//! download, but the last one only once the whole copy has the digest it
//! should and is stored. (A smaller blob is served from the stored copy,
//! so its errors keep their codes.) A download of the whole blob therefore
//! never ends with bytes that fail their digest: a copy that breaks off or
//! does not match ends it short of its length, which the client sees as an
//! error. A range ends as soon as its bytes came (a client cannot check a
//! range's digest either way). A download that stops reading for
//! [`BLOB_IDLE_TIMEOUT`] is let go and the copy goes on at its own pace.
//!
//! # Deleting
//!
//! A blob leaves this store only through [`BlobStore::remove_idle`], which
//! the node's garbage collection (`cluster::blob_gc`) calls for blobs the
//! cluster no longer keeps. The store remembers when each blob was last
//! stored or found present by an upload or a copy (`touched`; every blob
//! counts as touched when the store opens), and removes none touched
//! within the grace period it is given, nor any *pinned* one
//! ([`BlobStore::pin`]: an upload while it is copied to the other nodes
//! and registered with the master, an output while it is copied; the pin
//! touches the blob again when it ends): an upload the master has not yet
//! registered is never deleted under it, however long its copies take.
//! The check and the removal hold
//! the index's lock, as does the presence check of an upload or a copy
//! ([`BlobStore::keep_if_present`]), so a blob found present is present.
//!
//! # A worker's cache
//!
//! On a node that is a worker but not a back-end node, the store is a
//! cache of the inputs its attempts fetched (and the outputs they wrote):
//! [`BlobStore::evict_over`] removes the least recently used blobs (by
//! the last time one was stored, found present, or read by an attempt:
//! [`BlobStore::used`]) until the store is within `--blob-cache-bytes`,
//! never a pinned one (an attempt's inputs are pinned while it runs, its
//! outputs until copied). A back-end node's store is the cluster's
//! replicated copy and is never evicted; only the master's collection
//! deletes from it.
//!
//! # What the node says it holds
//!
//! [`BlobStore::holds`] is what the node's worker tells the master with
//! every poll: the [`BlobPrefix`](cohort_master::BlobPrefix)es of the
//! blobs it used last, at most [`HOLDS_MAX`], computed again only when a
//! blob is stored or removed (so with more blobs than that, the list is
//! of the most recently used when the set last changed).

use crate::limits::{
    BLOB_IDLE_TIMEOUT, BLOB_READ_AHEAD, BLOB_READ_BYTES, BLOB_SYNC_BYTES, BLOB_WRITE_BYTES,
    RELAY_AFTER_BYTES,
};
use crate::runtime::Digest;
use crate::runtime::job_blobs::check_free;
use bytes::Bytes;
use cohort_master::BlobPrefix;
use cohort_master::limits::HOLDS_MAX;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::{IoSlice, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Why a blob could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// Over the node's ceiling of one blob.
    #[error("the blob is over this cluster's ceiling of {ceiling} bytes")]
    TooLarge { ceiling: u64 },
    /// The bytes are not the ones the uploader named.
    #[error("the bytes uploaded have sha256 {actual}, not {expected} as the upload said")]
    DigestMismatch { expected: Digest, actual: Digest },
    /// The disk filled during the upload.
    #[error("the node's disk is full: the blob was not stored ({0})")]
    Full(String),
    /// No such blob here.
    #[error("no blob {0} is stored here")]
    NotFound(Digest),
    /// Any other failure of the disk.
    #[error("the blob store failed: {0}")]
    Io(String),
}

impl BlobError {
    fn io(error: std::io::Error) -> Self {
        // By kind, not by errno: the temporary file's errors come wrapped
        // with its path, which hides the errno.
        match error.kind() {
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                BlobError::Full(error.to_string())
            }
            _ => BlobError::Io(error.to_string()),
        }
    }
}

/// A blob as listed: its digest and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobInfo {
    /// The sha256 of its bytes.
    pub digest: Digest,
    /// Its size in bytes.
    pub bytes: u64,
}

/// A stored upload: what it was, and whether this node had it before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// The blob.
    pub info: BlobInfo,
    /// False if the same bytes were already stored here.
    pub new: bool,
}

/// 24 random hex digits: a name no other file under `partial/` has.
fn random_name() -> String {
    let mut name = [0u8; 12];
    getrandom::fill(&mut name).expect("the operating system's random source failed");
    name.iter().map(|b| format!("{b:02x}")).collect()
}

/// When blobs were last touched, and which are pinned (see the module
/// notes).
#[derive(Debug, Default)]
struct Touched {
    at: BTreeMap<Digest, Instant>,
    pinned: BTreeMap<Digest, u32>,
}

/// A blob kept from this node's garbage collection while it lives
/// ([`BlobStore::pin`]); when it goes, the blob counts as touched then.
#[derive(Debug)]
pub struct BlobPin {
    store: BlobStore,
    digest: Digest,
}

impl Drop for BlobPin {
    fn drop(&mut self) {
        let index = self.store.index();
        let mut touched = self.store.touched();
        if let Some(count) = touched.pinned.get_mut(&self.digest) {
            *count -= 1;
            if *count == 0 {
                touched.pinned.remove(&self.digest);
            }
        }
        // A pin taken before a fetch that failed leaves nothing behind.
        if index.contains_key(&self.digest) {
            touched.at.insert(self.digest, Instant::now());
        }
    }
}

/// The node's blobs. Cheap to clone.
#[derive(Debug, Clone)]
pub struct BlobStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    partial: PathBuf,
    ceiling: u64,
    index: Mutex<BTreeMap<Digest, u64>>,
    /// When each blob was last stored or found present by an upload or a
    /// copy, and the pinned ones (only ever locked while `index` is).
    touched: Mutex<Touched>,
    /// When the store opened: every blob counts as touched then.
    opened: Instant,
    /// What [`BlobStore::holds`] answers, until a blob is stored or
    /// removed (only ever locked while `index` is).
    holds: Mutex<Option<Vec<BlobPrefix>>>,
}

impl BlobStore {
    /// Opens (creating) `<data_dir>/blobs`, indexes the blobs there and
    /// removes uploads a crash left unfinished. `ceiling` bounds one blob.
    pub fn open(data_dir: &Path, ceiling: u64) -> std::io::Result<Self> {
        let dir = data_dir.join("blobs");
        let partial = dir.join("partial");
        if partial.exists() {
            std::fs::remove_dir_all(&partial)?;
        }
        std::fs::create_dir_all(&partial)?;
        let mut index = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let Some(digest) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            index.insert(digest, entry.metadata()?.len());
        }
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                partial,
                ceiling,
                index: Mutex::new(index),
                touched: Mutex::default(),
                opened: Instant::now(),
                holds: Mutex::default(),
            }),
        })
    }

    /// The ceiling of one blob, in bytes.
    pub fn ceiling(&self) -> u64 {
        self.inner.ceiling
    }

    /// The size of blob `digest`, if it is stored here. A blob whose file
    /// went away (removed by hand) is forgotten when a read finds it gone,
    /// and stored again by an upload or copy that finds it gone, rather
    /// than counted as here.
    pub fn size(&self, digest: &Digest) -> Option<u64> {
        self.index().get(digest).copied()
    }

    /// Forgets blob `digest` if its file is gone (removed by hand).
    pub fn forget_if_gone(&self, digest: &Digest) {
        let mut index = self.index();
        if !self.path(digest).exists() && index.remove(digest).is_some() {
            self.changed();
        }
    }

    /// Notes that the set of blobs changed (the caller holds the index's
    /// lock): [`holds`](Self::holds) is computed again.
    fn changed(&self) {
        *self.inner.holds.lock().expect("never poisoned") = None;
    }

    /// What this node tells the master it holds: the prefixes of the
    /// blobs it used last, at most [`HOLDS_MAX`] (see the module notes).
    pub fn holds(&self) -> Vec<BlobPrefix> {
        let index = self.index();
        let mut holds = self.inner.holds.lock().expect("never poisoned");
        if let Some(holds) = holds.as_ref() {
            return holds.clone();
        }
        let touched = self.touched();
        let mut recent: Vec<(Instant, &Digest)> = (index.keys())
            .map(|digest| {
                let at = touched.at.get(digest).copied();
                (at.unwrap_or(self.inner.opened), digest)
            })
            .collect();
        drop(touched);
        recent.sort_unstable_by(|a, b| b.cmp(a));
        let digests: Vec<[u8; 32]> = (recent.iter().take(HOLDS_MAX))
            .map(|(_, digest)| digest.to_bytes())
            .collect();
        let computed = cohort_master::locality::holds_of(&digests);
        *holds = Some(computed.clone());
        computed
    }

    /// Marks blob `digest` as used now (an attempt reads it): the cache
    /// keeps the blobs used last.
    pub fn used(&self, digest: &Digest) {
        let index = self.index();
        if index.contains_key(digest) {
            self.touch(digest);
        }
    }

    /// The bytes of every blob stored here.
    pub fn bytes(&self) -> u64 {
        self.index().values().sum()
    }

    /// Removes the least recently used blobs that are not pinned until
    /// this store holds at most `bound` bytes (or only pinned ones are
    /// left): how many it removed, and their bytes. Blocks on the file
    /// system, like [`remove_idle`](Self::remove_idle).
    pub fn evict_over(&self, bound: u64) -> Result<(u64, u64), BlobError> {
        let mut aside = Vec::new();
        {
            let mut index = self.index();
            let mut total: u64 = index.values().sum();
            if total <= bound {
                return Ok((0, 0));
            }
            let touched = self.touched();
            let mut oldest: Vec<(Instant, Digest, u64)> = (index.iter())
                .filter(|(digest, _)| !touched.pinned.contains_key(digest))
                .map(|(digest, size)| {
                    let at = touched.at.get(digest).copied();
                    (at.unwrap_or(self.inner.opened), *digest, *size)
                })
                .collect();
            drop(touched);
            oldest.sort_unstable();
            for (_, digest, size) in oldest {
                if total <= bound {
                    break;
                }
                let to = (self.inner.partial).join(format!("evicted-{digest}-{}", random_name()));
                match std::fs::rename(self.path(&digest), &to) {
                    Ok(()) => aside.push(to),
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(BlobError::io(error)),
                }
                index.remove(&digest);
                self.touched().at.remove(&digest);
                self.changed();
                total -= size;
            }
        }
        let mut removed = (0, 0);
        for path in aside {
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            match std::fs::remove_file(&path) {
                Ok(()) => removed = (removed.0 + 1, removed.1 + size),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(BlobError::io(error)),
            }
        }
        Ok(removed)
    }

    /// Every blob stored here, by digest.
    pub fn list(&self) -> Vec<BlobInfo> {
        (self.index().iter())
            .map(|(digest, bytes)| BlobInfo {
                digest: *digest,
                bytes: *bytes,
            })
            .collect()
    }

    /// The size of blob `digest` if it is stored here (its file still
    /// there; one removed by hand is forgotten), and if so, marks it
    /// touched now, under the index's lock: what an upload or a copy that
    /// finds the blob here calls, so that the node's garbage collection
    /// leaves it alone for its grace period.
    pub fn keep_if_present(&self, digest: &Digest) -> Option<u64> {
        let mut index = self.index();
        if index.contains_key(digest) && !self.path(digest).exists() {
            index.remove(digest);
            self.changed();
        }
        let size = index.get(digest).copied();
        if size.is_some() {
            self.touch(digest);
        }
        size
    }

    /// Records `size` bytes of blob `digest` as stored here now.
    fn stored(&self, digest: Digest, size: u64) {
        let mut index = self.index();
        index.insert(digest, size);
        self.touch(&digest);
        self.changed();
    }

    /// Keeps blob `digest` from this node's garbage collection until the
    /// pin is dropped (then it counts as touched): an upload while it is
    /// copied and registered, an output while it is copied.
    pub fn pin(&self, digest: Digest) -> BlobPin {
        let _index = self.index();
        *self.touched().pinned.entry(digest).or_insert(0) += 1;
        BlobPin {
            store: self.clone(),
            digest,
        }
    }

    fn touched(&self) -> std::sync::MutexGuard<'_, Touched> {
        (self.inner.touched.lock()).expect("the touch lock is never poisoned")
    }

    /// Marks `digest` touched now (the caller holds the index's lock).
    fn touch(&self, digest: &Digest) {
        self.touched().at.insert(*digest, Instant::now());
    }

    /// Whether nothing touched blob `digest` for `grace` and it is not
    /// pinned (see the module notes).
    fn untouched_for(&self, digest: &Digest, grace: Duration) -> bool {
        let touched = self.touched();
        let at = touched.at.get(digest).copied().unwrap_or(self.inner.opened);
        !touched.pinned.contains_key(digest) && at.elapsed() >= grace
    }

    /// The blobs stored here that nothing touched for `grace`: what the
    /// node's garbage collection asks the master about.
    pub fn idle(&self, grace: Duration) -> Vec<Digest> {
        let index = self.index();
        (index.keys())
            .filter(|digest| self.untouched_for(digest, grace))
            .copied()
            .collect()
    }

    /// Removes blob `digest` unless something touched it within `grace`:
    /// whether it was removed. Blocks on the file system (a caller on an
    /// async thread uses a blocking one). A reader that opened the file
    /// before keeps reading it to its end.
    pub fn remove_idle(&self, digest: &Digest, grace: Duration) -> Result<bool, BlobError> {
        // Under the lock, the file only moves aside (into `partial/`,
        // emptied at start); the unlink, which may take a while for a
        // large file, comes after, so no upload waits on it.
        let aside = self
            .inner
            .partial
            .join(format!("removed-{digest}-{}", random_name()));
        {
            let mut index = self.index();
            if !index.contains_key(digest) || !self.untouched_for(digest, grace) {
                return Ok(false);
            }
            match std::fs::rename(self.path(digest), &aside) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(BlobError::io(error)),
            }
            index.remove(digest);
            self.touched().at.remove(digest);
            self.changed();
        }
        match std::fs::remove_file(&aside) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(error) => Err(BlobError::io(error)),
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, BTreeMap<Digest, u64>> {
        self.inner
            .index
            .lock()
            .expect("the blob index lock is never poisoned")
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        self.inner.dir.join(digest.to_string())
    }

    /// The file of blob `digest`, if it is stored here: what a job on this
    /// node reads. A blob is never rewritten in place.
    pub fn file(&self, digest: &Digest) -> Option<PathBuf> {
        self.size(digest).map(|_| self.path(digest))
    }

    /// A new directory's path under `partial/` for one attempt's output
    /// files, made by the attempt at its first output; the caller removes
    /// it, with whatever is in it, when the attempt is over (`partial/` is
    /// also emptied at start, after a crash).
    pub fn attempt_space(&self) -> PathBuf {
        self.inner
            .partial
            .join(format!("attempt-{}", random_name()))
    }

    /// Stores `file` (under this store's `partial/`), whose bytes have sha256
    /// `digest` and `size` bytes, under its digest. With `verified` false
    /// (the word of a sandbox process, which may have lied) the node does
    /// not keep that file: it opens it without following a link and
    /// without blocking (a regular file, or nothing), copies at most
    /// `size + 1` bytes of it into a file of its own while hashing them,
    /// and keeps its copy only if the size and sha256 are the ones said,
    /// so nothing the process does to its file afterwards reaches the
    /// store.
    pub async fn adopt(
        &self,
        file: tempfile::TempPath,
        digest: Digest,
        size: u64,
        verified: bool,
    ) -> Result<Stored, BlobError> {
        let info = BlobInfo {
            digest,
            bytes: size,
        };
        let (store, expected) = (self.clone(), digest);
        tokio::task::spawn_blocking(move || -> Result<bool, BlobError> {
            let file = match verified {
                true => file,
                false => store.copy_checked(&file, expected, size)?,
            };
            if store.keep_if_present(&expected).is_some() {
                return Ok(false);
            }
            std::fs::File::open(&file)
                .and_then(|f| f.sync_all())
                .map_err(BlobError::io)?;
            file.persist(store.path(&expected))
                .map_err(|e| BlobError::io(e.error))?;
            std::fs::File::open(&store.inner.dir)
                .and_then(|dir| dir.sync_all())
                .map_err(BlobError::io)?;
            store.stored(expected, size);
            Ok(true)
        })
        .await
        .map_err(|e| BlobError::Io(format!("the writer stopped: {e}")))?
        .map(|new| Stored { info, new })
    }

    /// Starts an upload of at most the ceiling.
    pub fn upload(&self) -> Result<Upload, BlobError> {
        let file = tempfile::NamedTempFile::new_in(&self.inner.partial).map_err(BlobError::io)?;
        Ok(Upload {
            store: self.clone(),
            writer: Some(Writer {
                file,
                hasher: Sha256::new(),
                dir: self.inner.dir.clone(),
                written: 0,
                window: 0,
                flushing: None,
            }),
            writing: None,
            batch: Vec::new(),
            batched: 0,
            bytes: 0,
            relay: None,
        })
    }

    /// A copy of `untrusted`, made by this node in `partial/`, if it is a
    /// regular file (not a link, a pipe or a device) of `size` bytes with
    /// sha256 `expected`. Blocks: call on a blocking thread.
    fn copy_checked(
        &self,
        untrusted: &Path,
        expected: Digest,
        size: u64,
    ) -> Result<tempfile::TempPath, BlobError> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let source = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(untrusted)
            .map_err(BlobError::io)?;
        let meta = source.metadata().map_err(BlobError::io)?;
        if !meta.file_type().is_file() {
            return Err(BlobError::Io(format!(
                "{} is not a regular file",
                untrusted.display()
            )));
        }
        let mut copy =
            tempfile::NamedTempFile::new_in(&self.inner.partial).map_err(BlobError::io)?;
        let mut hasher = Sha256::new();
        let mut reader = source.take(size.saturating_add(1));
        let mut buffer = vec![0; BLOB_WRITE_BYTES];
        let mut copied = 0u64;
        loop {
            let read = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(BlobError::io(error)),
            };
            check_free(&self.inner.dir, read as u64).map_err(BlobError::io)?;
            copy.write_all(&buffer[..read]).map_err(BlobError::io)?;
            hasher.update(&buffer[..read]);
            copied += read as u64;
        }
        let actual = Digest::from(<[u8; 32]>::from(hasher.finalize()));
        if actual != expected || copied != size {
            return Err(BlobError::DigestMismatch { expected, actual });
        }
        Ok(copy.into_temp_path())
    }

    /// Streams bytes `range` (inclusive; the whole blob when `None`) of blob
    /// `digest`, in chunks read by an async task (each read on a blocking
    /// thread only while it reads, so a slow receiver holds no thread). A
    /// read that fails part way ends the stream early, so the receiver sees
    /// fewer bytes than it was told to expect.
    ///
    /// The task holds `place` (the stream's place among the node's) until
    /// it ends, which it does, dropping the rest, when the receiver takes
    /// nothing for [`BLOB_IDLE_TIMEOUT`]: a reader that stops reading
    /// does not keep the place.
    pub fn reader(
        &self,
        digest: &Digest,
        range: Option<(u64, u64)>,
        place: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<mpsc::Receiver<Bytes>, BlobError> {
        let size = self.size(digest).ok_or(BlobError::NotFound(*digest))?;
        let (start, end) = range.unwrap_or((0, size.saturating_sub(1)));
        let file = match std::fs::File::open(self.path(digest)) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                self.forget_if_gone(digest);
                return Err(BlobError::NotFound(*digest));
            }
            Err(error) => return Err(BlobError::io(error)),
        };
        let (tx, rx) = mpsc::channel(BLOB_READ_AHEAD);
        if size == 0 {
            return Ok(rx);
        }
        let digest = *digest;
        let file = Arc::new(file);
        // One chunk, read at `offset` on a blocking thread straight into
        // its own buffer.
        let read = move |offset: u64, length: usize| {
            let file = file.clone();
            tokio::task::spawn_blocking(move || -> std::io::Result<Bytes> {
                use std::os::unix::fs::FileExt;
                let mut chunk = vec![0; length];
                file.read_exact_at(&mut chunk, offset)?;
                Ok(Bytes::from(chunk))
            })
        };
        tokio::spawn(async move {
            let _place = place;
            let (mut offset, end) = (start, end + 1);
            let mut next = Some(read(
                offset,
                (end - offset).min(BLOB_READ_BYTES as u64) as usize,
            ));
            while let Some(reading) = next.take() {
                let chunk = match reading.await {
                    Ok(Ok(chunk)) => chunk,
                    Ok(Err(error)) => {
                        tracing::warn!(%digest, %error, "cannot read a blob");
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(%digest, %error, "the reader of a blob stopped");
                        return;
                    }
                };
                offset += chunk.len() as u64;
                // The next chunk is read while this one waits for room.
                if offset < end {
                    let length = (end - offset).min(BLOB_READ_BYTES as u64) as usize;
                    next = Some(read(offset, length));
                }
                if !send_or_let_go(&tx, chunk).await {
                    return;
                }
            }
        });
        Ok(rx)
    }
}

/// An upload in progress: bytes go to a file under `partial/`, hashed as
/// they are written. Dropped unfinished, the file is removed.
#[derive(Debug)]
pub struct Upload {
    store: BlobStore,
    /// The file and its hash, here between writes.
    writer: Option<Writer>,
    /// The batch before this one, being written and hashed on a blocking
    /// thread while this one gathers; it hands the writer back.
    writing: Option<tokio::task::JoinHandle<std::io::Result<Writer>>>,
    /// Chunks gathered for the next write, as they came (not copied).
    batch: Vec<Bytes>,
    /// Bytes in `batch`.
    batched: usize,
    bytes: u64,
    /// The download served from this copy as it is made, if any.
    relay: Option<Relay>,
}

/// The download a copy into the store passes its chunks on to (see
/// "Relaying a copy" above). It is told the blob's size once more than
/// [`RELAY_AFTER_BYTES`] of the copy came, then given every chunk as it is
/// written, the latest held back until the copy is stored. A copy no
/// larger never tells it: the download is answered from the stored copy,
/// or with the copy's own error.
#[derive(Debug)]
pub struct Relay {
    size: Option<oneshot::Sender<u64>>,
    blob: u64,
    chunks: Option<mpsc::Sender<Bytes>>,
    /// What came and was not passed on yet: until the size is told, all
    /// of it; then the latest chunk.
    held: Vec<Bytes>,
    /// Bytes that came before the size was told.
    held_bytes: u64,
}

impl Relay {
    /// A relay, the blob's size once it is told (never if the relay is
    /// dropped first), and the chunks.
    pub fn new() -> (Self, oneshot::Receiver<u64>, mpsc::Receiver<Bytes>) {
        let (size, told) = oneshot::channel();
        let (chunks, rx) = mpsc::channel(BLOB_READ_AHEAD);
        let relay = Self {
            size: Some(size),
            blob: 0,
            chunks: Some(chunks),
            held: Vec::new(),
            held_bytes: 0,
        };
        (relay, told, rx)
    }

    /// Passes on what was held back but `chunk`, once the size is told,
    /// and holds `chunk` back.
    async fn pass(&mut self, chunk: Bytes) {
        if self.chunks.is_none() {
            return;
        }
        self.held_bytes += chunk.len() as u64;
        self.held.push(chunk);
        if let Some(size) = self.size.take_if(|_| self.held_bytes > RELAY_AFTER_BYTES) {
            let _ = size.send(self.blob);
        }
        if self.size.is_some() {
            return;
        }
        let last = self.held.pop().expect("a chunk was just held");
        for chunk in std::mem::take(&mut self.held) {
            self.send(chunk).await;
        }
        self.held.push(last);
    }

    /// Sends `chunk` ([`send_or_let_go`]).
    async fn send(&mut self, chunk: Bytes) {
        if let Some(chunks) = &self.chunks
            && !send_or_let_go(chunks, chunk).await
        {
            self.chunks = None;
        }
    }

    /// The copy is stored: what was held back goes too, if the size was
    /// told (if not, the download reads the stored copy).
    async fn release(mut self) {
        if self.size.is_none() {
            for chunk in std::mem::take(&mut self.held) {
                self.send(chunk).await;
            }
        }
    }
}

/// Sends `chunk` to a download's channel: `false` once the download is
/// gone, or has taken nothing for [`BLOB_IDLE_TIMEOUT`] (a reader that
/// stopped reading is let go).
async fn send_or_let_go(tx: &mpsc::Sender<Bytes>, chunk: Bytes) -> bool {
    matches!(
        tokio::time::timeout(BLOB_IDLE_TIMEOUT, tx.send(chunk)).await,
        Ok(Ok(()))
    )
}

/// What writes an upload's file: moved to a blocking thread for each
/// batch and back.
#[derive(Debug)]
struct Writer {
    file: tempfile::NamedTempFile,
    hasher: Sha256,
    /// The store's directory, whose disk's free space each write checks.
    dir: PathBuf,
    /// Bytes written to the file.
    written: u64,
    /// Where the window of bytes not yet handed to the disk starts.
    window: u64,
    /// The window handed to the disk last (start, length), not yet waited
    /// for.
    flushing: Option<(u64, u64)>,
}

impl Writer {
    /// Writes `batch` (one `writev` per call, never copied first), hashes
    /// it and, every [`BLOB_SYNC_BYTES`], hands the bytes written since to
    /// the disk. Blocks: call on a blocking thread.
    fn write(mut self, batch: Vec<Bytes>) -> std::io::Result<Self> {
        let length: usize = batch.iter().map(Bytes::len).sum();
        check_free(&self.dir, length as u64)?;
        let mut slices: Vec<IoSlice<'_>> = batch.iter().map(|chunk| IoSlice::new(chunk)).collect();
        let mut left = &mut slices[..];
        while !left.is_empty() {
            match self.file.as_file_mut().write_vectored(left) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut left, n),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        for chunk in &batch {
            self.hasher.update(chunk);
        }
        self.written += length as u64;
        if self.written - self.window >= BLOB_SYNC_BYTES {
            self.write_behind()?;
        }
        Ok(self)
    }

    /// Keeps the final sync short however large the blob, without making
    /// the upload wait for the disk at each window: starts the writeback
    /// of the window just written and waits for the window before it, so
    /// at most two windows are left to sync at the end. (`sync_all` at
    /// the end makes the blob durable; this only spreads its work.)
    #[cfg(target_os = "linux")]
    fn write_behind(&mut self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.file.as_file().as_raw_fd();
        let sync_range = |start: u64, length: u64, flags: libc::c_uint| {
            let (start, length) = (start as libc::off64_t, length as libc::off64_t);
            // SAFETY: a plain system call on a descriptor this writer owns.
            match unsafe { libc::sync_file_range(fd, start, length, flags) } {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        };
        let window = (self.window, self.written - self.window);
        sync_range(window.0, window.1, libc::SYNC_FILE_RANGE_WRITE)?;
        if let Some((start, length)) = self.flushing.replace(window) {
            let wait = libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            sync_range(start, length, wait)?;
        }
        self.window = self.written;
        Ok(())
    }

    /// Elsewhere, the window is synced as it ends.
    #[cfg(not(target_os = "linux"))]
    fn write_behind(&mut self) -> std::io::Result<()> {
        self.file.as_file().sync_data()?;
        self.window = self.written;
        self.flushing = None;
        Ok(())
    }
}

impl Upload {
    /// Serves the copy of a blob of `size` bytes this upload makes to
    /// `relay` as it is made.
    pub fn relay(&mut self, mut relay: Relay, size: u64) {
        relay.blob = size;
        self.relay = Some(relay);
    }

    /// Bytes taken so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes the next bytes; refuses those past the ceiling. Chunks are
    /// gathered into batches of [`BLOB_WRITE_BYTES`] (or one larger
    /// chunk), and a batch is written while the next gathers, so the
    /// upload holds at most two batches.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), BlobError> {
        let ceiling = self.store.ceiling();
        if self.bytes + chunk.len() as u64 > ceiling {
            return Err(BlobError::TooLarge { ceiling });
        }
        self.bytes += chunk.len() as u64;
        if chunk.is_empty() {
            return Ok(());
        }
        if let Some(relay) = &mut self.relay {
            relay.pass(chunk.clone()).await;
        }
        if self.batched + chunk.len() > BLOB_WRITE_BYTES {
            self.flush().await?;
        }
        self.batched += chunk.len();
        self.batch.push(chunk);
        if self.batched >= BLOB_WRITE_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// The writer, once the batch before is written.
    async fn writer(&mut self) -> Result<Writer, BlobError> {
        match self.writing.take() {
            Some(writing) => writing
                .await
                .map_err(|e| BlobError::Io(format!("the writer stopped: {e}")))?
                .map_err(BlobError::io),
            None => Ok(self
                .writer
                .take()
                .expect("an upload has its writer until it ends")),
        }
    }

    /// Hands the batch to a blocking thread, once the batch before is
    /// written: it is written and hashed while the next one gathers.
    async fn flush(&mut self) -> Result<(), BlobError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let writer = self.writer().await?;
        let batch = std::mem::take(&mut self.batch);
        self.batched = 0;
        self.writing = Some(tokio::task::spawn_blocking(move || writer.write(batch)));
        Ok(())
    }

    /// Writes what is gathered and waits for it: the writer, all written.
    async fn drain(&mut self) -> Result<Writer, BlobError> {
        self.flush().await?;
        self.writer().await
    }

    /// Ends the upload: syncs it and stores it under its digest, unless
    /// `expected` names another digest (then nothing is stored).
    pub async fn finish(mut self, expected: Option<Digest>) -> Result<Stored, BlobError> {
        let Writer { file, hasher, .. } = self.drain().await?;
        let digest = Digest::from(<[u8; 32]>::from(hasher.finalize()));
        if let Some(expected) = expected
            && expected != digest
        {
            return Err(BlobError::DigestMismatch {
                expected,
                actual: digest,
            });
        }
        let info = BlobInfo {
            digest,
            bytes: self.bytes,
        };
        let relay = self.relay.take();
        if self.store.keep_if_present(&digest).is_some() {
            if let Some(relay) = relay {
                relay.release().await;
            }
            return Ok(Stored { info, new: false });
        }
        let (path, dir) = (self.store.path(&digest), self.store.inner.dir.clone());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            file.as_file().sync_all()?;
            // Another upload of the same bytes may have won the race: both
            // hold the same bytes, so either one is the blob.
            file.persist(&path).map_err(|e| e.error)?;
            std::fs::File::open(dir)?.sync_all()
        })
        .await
        .map_err(|e| BlobError::Io(format!("the writer stopped: {e}")))?
        .map_err(BlobError::io)?;
        self.store.stored(digest, self.bytes);
        if let Some(relay) = relay {
            relay.release().await;
        }
        Ok(Stored { info, new: true })
    }
}

/// An HTTP body fed by a channel of chunks (a blob being read): it ends
/// when the sender does. Its error type is the API's (none): a sender that
/// stops early leaves the receiver short of the length it was announced.
#[derive(Debug)]
pub struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
    /// A first chunk, taken before the body was made.
    first: Option<Bytes>,
    left: Option<u64>,
}

impl ChannelBody {
    /// A body of the chunks `rx` receives; `length`, when known, is its
    /// exact size (HTTP's `Content-Length`).
    pub fn new(rx: mpsc::Receiver<Bytes>, length: Option<u64>) -> Self {
        Self {
            rx,
            first: None,
            left: length,
        }
    }

    /// A body of bytes `start..=end` of the chunks `rx` receives (a blob
    /// relayed whole), made once its first bytes have come, so that the
    /// wait for them is a wait for the answer, not a gap in a flowing
    /// body; it ends once it has them. `None`: the chunks ended first.
    pub async fn window(mut rx: mpsc::Receiver<Bytes>, (start, end): (u64, u64)) -> Option<Self> {
        let mut skip = start;
        let first = loop {
            let chunk = rx.recv().await?;
            if skip < chunk.len() as u64 {
                break chunk.slice(skip as usize..);
            }
            skip -= chunk.len() as u64;
        };
        Some(Self {
            rx,
            first: Some(first),
            left: Some(end + 1 - start),
        })
    }
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        loop {
            if self.left == Some(0) {
                return Poll::Ready(None);
            }
            let mut chunk = match self.first.take() {
                Some(first) => first,
                None => match std::task::ready!(self.rx.poll_recv(cx)) {
                    Some(chunk) => chunk,
                    None => return Poll::Ready(None),
                },
            };
            if let Some(left) = &mut self.left {
                chunk.truncate((*left).min(chunk.len() as u64) as usize);
                *left -= chunk.len() as u64;
            }
            if !chunk.is_empty() {
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == Some(0)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.left.map_or_else(
            hyper::body::SizeHint::default,
            hyper::body::SizeHint::with_exact,
        )
    }
}

/// Why a `Range` header cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the range is past the blob's end ({size} bytes)")]
pub struct Unsatisfiable {
    /// The blob's size, for `Content-Range: bytes */size`.
    pub size: u64,
}

/// The inclusive byte range a `Range` header asks of a blob of `size`
/// bytes, as HTTP has it (RFC 9110 §14): `bytes=a-b`, `bytes=a-` or
/// `bytes=-n` (the last `n`). `Ok(None)`: serve the whole blob (no header,
/// a header that is not one valid byte range, or several ranges, which
/// the server may ignore).
pub fn parse_range(header: Option<&str>, size: u64) -> Result<Option<(u64, u64)>, Unsatisfiable> {
    let Some(spec) = header.and_then(|h| {
        let h = h.trim();
        (h.len() > 6 && h[..6].eq_ignore_ascii_case("bytes=")).then(|| &h[6..])
    }) else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Ok(None);
    };
    let number = |text: &str| -> Option<u64> {
        let text = text.trim();
        (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse().ok())
            .flatten()
    };
    let unsatisfiable = Unsatisfiable { size };
    let open_ended = last.trim().is_empty();
    match (first.trim().is_empty(), number(first), number(last)) {
        // `bytes=-n`: the last n bytes.
        (true, _, Some(suffix)) => {
            if suffix == 0 || size == 0 {
                return Err(unsatisfiable);
            }
            Ok(Some((size - suffix.min(size), size - 1)))
        }
        (false, Some(start), end) if end.is_some() || open_ended => {
            if let Some(end) = end
                && end < start
            {
                return Ok(None);
            }
            if start >= size {
                return Err(unsatisfiable);
            }
            let end = end.map_or(size - 1, |end| end.min(size - 1));
            Ok(Some((start, end)))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_as_http_has_them() {
        let r = |h: &str, size| parse_range(Some(h), size);
        assert_eq!(r("bytes=0-9", 100), Ok(Some((0, 9))));
        assert_eq!(r("bytes=90-200", 100), Ok(Some((90, 99))));
        assert_eq!(r("bytes=90-", 100), Ok(Some((90, 99))));
        assert_eq!(r("bytes=-10", 100), Ok(Some((90, 99))));
        assert_eq!(r("bytes=-1000", 100), Ok(Some((0, 99))));
        assert_eq!(r("bytes=100-", 100), Err(Unsatisfiable { size: 100 }));
        assert_eq!(r("bytes=-0", 100), Err(Unsatisfiable { size: 100 }));
        assert_eq!(r("bytes=0-", 0), Err(Unsatisfiable { size: 0 }));
        // Not one valid range: the whole blob.
        for ignored in [
            "bytes=5-1",
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=a-b",
            "bytes=-",
            "bytes=+1-2",
        ] {
            assert_eq!(r(ignored, 100), Ok(None), "{ignored}");
        }
        assert_eq!(parse_range(None, 100), Ok(None));
    }

    fn store(ceiling: u64) -> (tempfile::TempDir, BlobStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path(), ceiling).unwrap();
        (dir, store)
    }

    async fn put(
        store: &BlobStore,
        bytes: &[u8],
        expected: Option<Digest>,
    ) -> Result<Stored, BlobError> {
        let mut upload = store.upload()?;
        for chunk in bytes.chunks(7000) {
            upload.write(Bytes::copy_from_slice(chunk)).await?;
        }
        upload.finish(expected).await
    }

    async fn read(store: &BlobStore, digest: &Digest, range: Option<(u64, u64)>) -> Vec<u8> {
        let mut rx = store.reader(digest, range, None).unwrap();
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            out.extend_from_slice(&chunk);
        }
        out
    }

    #[tokio::test]
    async fn a_blob_is_stored_once_under_its_digest_and_read_back_by_range() {
        let (dir, store) = store(1 << 30);
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let digest = Digest::of(&bytes);
        let first = put(&store, &bytes, Some(digest)).await.unwrap();
        assert_eq!(
            first.info,
            BlobInfo {
                digest,
                bytes: bytes.len() as u64
            }
        );
        assert!(first.new);
        assert!(!put(&store, &bytes, None).await.unwrap().new);
        assert_eq!(read(&store, &digest, None).await, bytes);
        assert_eq!(
            read(&store, &digest, Some((10, 300_009))).await,
            bytes[10..300_010]
        );
        // Reopened: the index is the disk's, and no partial file is left.
        let reopened = BlobStore::open(dir.path(), 1 << 30).unwrap();
        assert_eq!(reopened.list(), store.list());
        assert_eq!(
            std::fs::read_dir(dir.path().join("blobs/partial"))
                .unwrap()
                .count(),
            0
        );
        // An empty blob is a blob.
        let empty = put(&store, b"", None).await.unwrap();
        assert_eq!(empty.info.bytes, 0);
        assert!(read(&store, &empty.info.digest, None).await.is_empty());
    }

    /// Copies `bytes` in chunks of 100,000 with a relay, into `store`
    /// (checked against `expected`), reading the relay as it goes: the
    /// size told (if it was) and the bytes relayed, and the copy's result.
    async fn relayed(
        store: &BlobStore,
        bytes: &[u8],
        expected: Digest,
    ) -> (Option<u64>, Vec<u8>, Result<Stored, BlobError>) {
        let (relay, size, mut rx) = Relay::new();
        let copy = async {
            let mut upload = store.upload()?;
            upload.relay(relay, bytes.len() as u64);
            for chunk in bytes.chunks(100_000) {
                upload.write(Bytes::copy_from_slice(chunk)).await?;
            }
            upload.finish(Some(expected)).await
        };
        let read = async {
            let mut out = Vec::new();
            while let Some(chunk) = rx.recv().await {
                out.extend_from_slice(&chunk);
            }
            (size.await.ok(), out)
        };
        let (copied, (size, out)) = tokio::join!(copy, read);
        (size, out, copied)
    }

    #[tokio::test]
    async fn a_relay_serves_a_copy_past_its_first_mib_and_its_last_chunk_once_stored() {
        let (_dir, store) = store(1 << 30);
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 241) as u8).collect();
        let (size, out, copied) = relayed(&store, &big, Digest::of(&big)).await;
        assert_eq!(size, Some(big.len() as u64));
        assert!(out == big, "relayed {} bytes of {}", out.len(), big.len());
        assert!(copied.unwrap().new);
        // A copy that fails its digest relays all but its last chunk.
        let other: Vec<u8> = big.iter().map(|b| b ^ 1).collect();
        let (size, out, copied) = relayed(&store, &other, Digest::of(&big)).await;
        assert_eq!(size, Some(big.len() as u64));
        assert_eq!(out.len(), big.len() - 100_000);
        assert!(matches!(copied, Err(BlobError::DigestMismatch { .. })));
        // A blob of at most RELAY_AFTER_BYTES is never relayed: its
        // download reads the stored copy, or gets the copy's error.
        let small = vec![7u8; RELAY_AFTER_BYTES as usize];
        let (size, out, copied) = relayed(&store, &small, Digest::of(&small)).await;
        assert_eq!((size, out.len()), (None, 0));
        assert!(copied.is_ok());
        let (size, out, copied) = relayed(&store, &small, Digest::of(b"other")).await;
        assert_eq!((size, out.len()), (None, 0));
        assert!(copied.is_err());
    }

    #[tokio::test]
    async fn a_window_of_relayed_chunks_starts_and_ends_where_its_range_does() {
        use http_body_util::BodyExt;
        let chunks = || {
            let (tx, rx) = mpsc::channel(8);
            for chunk in [&b"abcd"[..], b"efgh", b"ijkl"] {
                tx.try_send(Bytes::from_static(chunk)).unwrap();
            }
            (tx, rx)
        };
        for ((start, end), want) in [
            ((0, 11), "abcdefghijkl"),
            ((5, 9), "fghij"),
            ((11, 11), "l"),
        ] {
            let (_tx, rx) = chunks();
            let body = ChannelBody::window(rx, (start, end)).await.unwrap();
            // It ends with its range, though the sender is still there.
            let got = body.collect().await.unwrap().to_bytes();
            assert_eq!(got, want.as_bytes());
        }
        let (tx, rx) = chunks();
        drop(tx);
        assert!(ChannelBody::window(rx, (12, 20)).await.is_none());
    }

    #[tokio::test]
    async fn an_upload_past_several_sync_windows_is_stored_whole() {
        let (_dir, store) = store(1 << 30);
        // Chunks as the network gives them: of all sizes, shared, never
        // copied by the upload.
        let pattern: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
        let pattern = Bytes::from(pattern);
        let mut upload = store.upload().unwrap();
        let mut hasher = Sha256::new();
        let total = 2 * BLOB_SYNC_BYTES + 3 * BLOB_WRITE_BYTES as u64 + 5;
        let mut sizes = [pattern.len(), 4096, 300_000, 1].into_iter().cycle();
        let (mut sent, mut last) = (0u64, Vec::new());
        while sent < total {
            let size = sizes.next().unwrap().min((total - sent) as usize);
            let chunk = pattern.slice(..size);
            hasher.update(&chunk);
            last.extend_from_slice(&chunk[size.saturating_sub(10)..]);
            last.drain(..last.len().saturating_sub(10));
            upload.write(chunk).await.unwrap();
            sent += size as u64;
        }
        let digest = Digest::from(<[u8; 32]>::from(hasher.finalize()));
        let stored = upload.finish(Some(digest)).await.unwrap();
        assert_eq!(
            stored.info,
            BlobInfo {
                digest,
                bytes: total
            }
        );
        let file = store.file(&digest).unwrap();
        assert_eq!(std::fs::metadata(file).unwrap().len(), total);
        // The last bytes, read back across a chunk of the reader.
        let tail = read(&store, &digest, Some((total - 10, total - 1))).await;
        assert_eq!(tail, last);
    }

    #[tokio::test]
    async fn refused_uploads_leave_nothing_behind() {
        let (dir, store) = store(10_000);
        let mismatch = put(&store, b"some bytes", Some(Digest::of(b"other bytes"))).await;
        assert!(
            matches!(mismatch, Err(BlobError::DigestMismatch { .. })),
            "{mismatch:?}"
        );
        let over = put(&store, &[0; 10_001], None).await;
        assert!(
            matches!(over, Err(BlobError::TooLarge { ceiling: 10_000 })),
            "{over:?}"
        );
        // An upload dropped part way (the client went away).
        let mut aborted = store.upload().unwrap();
        aborted.write(Bytes::from_static(b"half")).await.unwrap();
        drop(aborted);
        assert!(store.list().is_empty());
        let left: Vec<_> = std::fs::read_dir(dir.path().join("blobs"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1, "only partial/ remains: {left:?}");
        assert_eq!(
            std::fs::read_dir(dir.path().join("blobs/partial"))
                .unwrap()
                .count(),
            0
        );
        // At the ceiling exactly is allowed.
        assert!(put(&store, &[1; 10_000], None).await.is_ok());
    }

    #[tokio::test]
    async fn a_blob_is_removed_only_once_untouched_for_the_grace() {
        let (_dir, store) = store(1 << 20);
        let stored = put(&store, b"kept a while", None).await.unwrap();
        let digest = stored.info.digest;
        let hour = Duration::from_secs(3600);
        // Just stored: touched, so neither idle nor removed.
        assert_eq!(store.idle(hour), []);
        assert!(!store.remove_idle(&digest, hour).unwrap());
        assert_eq!(store.size(&digest), Some(12));
        // With no grace, it goes, file and all; once.
        assert_eq!(store.idle(Duration::ZERO), [digest]);
        assert!(store.remove_idle(&digest, Duration::ZERO).unwrap());
        assert!(!store.remove_idle(&digest, Duration::ZERO).unwrap());
        assert_eq!(store.size(&digest), None);
        assert!(store.file(&digest).is_none());
        assert_eq!(store.keep_if_present(&digest), None);
        // Stored again, it is new, and touched again.
        let again = put(&store, b"kept a while", None).await.unwrap();
        assert!(again.new);
        assert!(!store.remove_idle(&digest, hour).unwrap());
        // An upload of the same bytes finds it present and touches it.
        assert!(!put(&store, b"kept a while", None).await.unwrap().new);
        assert_eq!(store.keep_if_present(&digest), Some(12));
        assert_eq!(store.idle(hour), []);
        // Pinned (twice), it stays whatever the grace, until both pins go.
        let (first, second) = (store.pin(digest), store.pin(digest));
        assert_eq!(store.idle(Duration::ZERO), []);
        assert!(!store.remove_idle(&digest, Duration::ZERO).unwrap());
        drop(first);
        assert!(!store.remove_idle(&digest, Duration::ZERO).unwrap());
        drop(second);
        assert!(
            !store.remove_idle(&digest, hour).unwrap(),
            "touched as the pin went"
        );
        assert!(store.remove_idle(&digest, Duration::ZERO).unwrap());
    }

    #[tokio::test]
    async fn a_cache_over_its_bound_evicts_the_least_recently_used_never_a_pinned_one() {
        let (_dir, store) = store(1 << 20);
        let mut digests = Vec::new();
        for byte in [1u8, 2, 3, 4] {
            digests.push(put(&store, &[byte; 100], None).await.unwrap().info.digest);
        }
        let [a, b, c, d] = digests[..] else {
            unreachable!()
        };
        assert_eq!(store.bytes(), 400);
        // Within the bound, nothing goes.
        assert_eq!(store.evict_over(400).unwrap(), (0, 0));
        // An attempt reads `a`, the oldest stored: now `b` is the least
        // recently used, then `c`; `c` is pinned (an attempt runs on it).
        store.used(&a);
        let pin = store.pin(c);
        assert_eq!(store.evict_over(250).unwrap(), (2, 200));
        assert_eq!(store.size(&b), None, "least recently used");
        assert_eq!(store.size(&d), None, "next, passing the pinned one");
        assert!(store.file(&b).is_none());
        assert_eq!((store.size(&a), store.size(&c)), (Some(100), Some(100)));
        // Only pinned blobs left beyond the bound: they stay.
        assert_eq!(store.evict_over(0).unwrap(), (1, 100));
        assert_eq!(store.size(&c), Some(100));
        drop(pin);
        assert_eq!(store.evict_over(0).unwrap(), (1, 100));
        assert_eq!(store.bytes(), 0);
        assert!(store.holds().is_empty());
    }

    #[tokio::test]
    async fn a_node_says_it_holds_what_it_stores_by_prefix() {
        let (_dir, store) = store(1 << 20);
        assert!(store.holds().is_empty());
        let one = put(&store, b"one", None).await.unwrap().info.digest;
        let two = put(&store, b"two", None).await.unwrap().info.digest;
        let prefixes = |digests: &[Digest]| {
            let bytes: Vec<[u8; 32]> = digests.iter().map(|d| d.to_bytes()).collect();
            cohort_master::locality::holds_of(&bytes)
        };
        assert_eq!(store.holds(), prefixes(&[one, two]));
        assert!(store.remove_idle(&one, Duration::ZERO).unwrap());
        assert_eq!(store.holds(), prefixes(&[two]));
    }
}

/// What this node's worker did with blobs, for `/metrics` (here, below
/// the worker and the metrics, so both can reach them).
pub mod counts {
    use std::sync::atomic::AtomicU64;

    /// Input blobs this node's attempts found in its store.
    pub static INPUTS_LOCAL: AtomicU64 = AtomicU64::new(0);
    /// Input blobs this node's attempts fetched from another node (or the
    /// blob store).
    pub static INPUTS_FETCHED: AtomicU64 = AtomicU64::new(0);
    /// Blobs this node's cache evicted, and their bytes.
    pub static CACHE_EVICTED: AtomicU64 = AtomicU64::new(0);
    /// Bytes of the blobs this node's cache evicted.
    pub static CACHE_EVICTED_BYTES: AtomicU64 = AtomicU64::new(0);
}
