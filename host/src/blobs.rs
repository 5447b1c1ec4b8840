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
//! read by an async task that takes a blocking thread only for each read:
//! a slow reader holds a few hundred KiB of the node's memory and no
//! thread. Ranges follow HTTP's `Range: bytes=` rules
//! ([`parse_range`]).
//!
//! Across nodes (replication on upload, fetching a blob this node lacks) see
//! `cluster::blob_transfer`.

use crate::limits::{
    BLOB_IDLE_TIMEOUT, BLOB_READ_AHEAD, BLOB_READ_BYTES, BLOB_SYNC_BYTES, BLOB_WRITE_BYTES,
};
use crate::runtime::Digest;
use crate::runtime::job_blobs::check_free;
use bytes::Bytes;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::{SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

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
        if !self.path(digest).exists() {
            index.remove(digest);
        }
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
        let mut name = [0u8; 12];
        getrandom::fill(&mut name).expect("the operating system's random source failed");
        let name: String = name.iter().map(|b| format!("{b:02x}")).collect();
        self.inner.partial.join(format!("attempt-{name}"))
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
            store.forget_if_gone(&expected);
            if store.size(&expected).is_some() {
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
            store.index().insert(expected, size);
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
            file: Some(file),
            hasher: Sha256::new(),
            buffer: Vec::with_capacity(BLOB_WRITE_BYTES),
            bytes: 0,
            unsynced: 0,
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
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
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
        tokio::spawn(async move {
            let _place = place;
            let mut file = tokio::fs::File::from_std(file);
            let mut left = end + 1 - start;
            if let Err(error) = file.seek(SeekFrom::Start(start)).await {
                tracing::warn!(%digest, %error, "cannot read a blob");
                return;
            }
            while left > 0 {
                let want = left.min(BLOB_READ_BYTES as u64) as usize;
                let mut chunk = vec![0; want];
                if let Err(error) = file.read_exact(&mut chunk).await {
                    tracing::warn!(%digest, %error, "cannot read a blob");
                    return;
                }
                left -= want as u64;
                let sent = tokio::time::timeout(BLOB_IDLE_TIMEOUT, tx.send(Bytes::from(chunk)));
                if !matches!(sent.await, Ok(Ok(()))) {
                    // The reader went away, or stopped reading.
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
    file: Option<tempfile::NamedTempFile>,
    hasher: Sha256,
    buffer: Vec<u8>,
    bytes: u64,
    /// Bytes written since the file was last synced.
    unsynced: u64,
}

impl Upload {
    /// Bytes taken so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes the next bytes; refuses those past the ceiling.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), BlobError> {
        let ceiling = self.store.ceiling();
        if self.bytes + chunk.len() as u64 > ceiling {
            return Err(BlobError::TooLarge { ceiling });
        }
        self.bytes += chunk.len() as u64;
        if self.buffer.len() + chunk.len() > BLOB_WRITE_BYTES {
            self.flush().await?;
        }
        self.buffer.extend_from_slice(chunk);
        if self.buffer.len() >= BLOB_WRITE_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes and hashes what is buffered, on a blocking thread.
    async fn flush(&mut self) -> Result<(), BlobError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let mut file = (self.file.take()).expect("an upload has its file until it ends");
        let mut hasher = std::mem::take(&mut self.hasher);
        let buffer = std::mem::take(&mut self.buffer);
        // Synced as it goes, so the sync at the end is short however large
        // the blob (a copy's sender waits for it).
        let sync = self.unsynced + buffer.len() as u64 >= BLOB_SYNC_BYTES;
        let dir = self.store.inner.dir.clone();
        let (file, hasher, mut buffer) = tokio::task::spawn_blocking(move || {
            check_free(&dir, buffer.len() as u64)?;
            file.as_file_mut().write_all(&buffer)?;
            hasher.update(&buffer);
            if sync {
                file.as_file().sync_data()?;
            }
            Ok::<_, std::io::Error>((file, hasher, buffer))
        })
        .await
        .map_err(|e| BlobError::Io(format!("the writer stopped: {e}")))?
        .map_err(BlobError::io)?;
        self.unsynced = if sync {
            0
        } else {
            self.unsynced + buffer.len() as u64
        };
        buffer.clear();
        self.file = Some(file);
        self.hasher = hasher;
        self.buffer = buffer;
        Ok(())
    }

    /// Ends the upload: syncs it and stores it under its digest, unless
    /// `expected` names another digest (then nothing is stored).
    pub async fn finish(mut self, expected: Option<Digest>) -> Result<Stored, BlobError> {
        self.flush().await?;
        let digest = Digest::from(<[u8; 32]>::from(
            std::mem::take(&mut self.hasher).finalize(),
        ));
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
        if self.store.size(&digest).is_some() {
            self.store.forget_if_gone(&digest);
        }
        if self.store.size(&digest).is_some() {
            return Ok(Stored { info, new: false });
        }
        let file = self
            .file
            .take()
            .expect("an upload has its file until it ends");
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
        self.store.index().insert(digest, self.bytes);
        Ok(Stored { info, new: true })
    }
}

/// An HTTP body fed by a channel of chunks (a blob being read): it ends
/// when the sender does. Its error type is the API's (none): a sender that
/// stops early leaves the receiver short of the length it was announced.
#[derive(Debug)]
pub struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
    left: Option<u64>,
}

impl ChannelBody {
    /// A body of the chunks `rx` receives; `length`, when known, is its
    /// exact size (HTTP's `Content-Length`).
    pub fn new(rx: mpsc::Receiver<Bytes>, length: Option<u64>) -> Self {
        Self { rx, left: length }
    }
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.rx.poll_recv(cx).map(|chunk| {
            chunk.map(|chunk| {
                if let Some(left) = &mut self.left {
                    *left = left.saturating_sub(chunk.len() as u64);
                }
                Ok(hyper::body::Frame::data(chunk))
            })
        })
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
            upload.write(chunk).await?;
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
        aborted.write(b"half").await.unwrap();
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
}
