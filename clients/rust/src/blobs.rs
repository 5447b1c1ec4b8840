//! Blobs: data named by the sha256 of its bytes, streamed to and from the
//! nodes (`PUT /v1/blobs`, `GET`/`HEAD /v1/blobs/{digest}`) and never held
//! whole in memory unless the caller gives it whole ([`Node::put_blob`]).
//!
//! Every upload names the digest of its bytes, so a node refuses bytes
//! that changed on the way (`blob_digest_mismatch`): bytes given whole,
//! and a file (hashed first), in the `X-Cohort-Sha256` header; a stream,
//! hashed as it is sent, in the trailer of the same name. Every upload
//! also checks the digest and size the node answers against what it
//! sent. A download checks its length against the headers, and
//! [`Node::get_blob_to_file`] its digest too, before the file appears.
//!
//! [`Node`] talks to one node; [`Client`] fails over between nodes as
//! [`Client::call`] does, for every call that is safe to repeat: all of
//! them but [`Client::put_blob_stream`] once it has read from its reader.
//!
//! A node answers an upload only once the blob is durable on a majority of
//! the back-end nodes: after the last byte arrives it copies the whole blob
//! to others. So once an upload's body has all gone, its answer is waited
//! for the usual timeout (120 s) plus one second per
//! [`BLOB_COPY_BYTES_PER_SEC`] bytes sent (16 MiB/s: a 64 GiB blob gets
//! 4096 s more). A node without a copy of a blob copies it from another: it
//! answers a download of a blob of at most 1 MiB once the copy is checked
//! and stored, a larger one once the first MiB came, then sends the bytes
//! as they arrive (the last ones only once its copy has the digest), and a
//! range only once the copy also reaches the range's first byte. So the
//! answer's head is waited for the usual timeout plus [`BLOB_FETCH_WAIT`]
//! (10 minutes, for a slow copy or a range deep in a large blob: the client
//! does not know the blob's size beforehand); once the body flows,
//! [`BLOB_IDLE_TIMEOUT`] applies. While an upload's body is going, the
//! usual timeout runs from each chunk the connection takes.
//!
//! Digests are hex in any case: the caller's is lowercased before it is
//! used (in the path, and against the `ETag` and the bytes received).

use crate::client::Client;
use crate::node::{ClientError, Node};
use crate::transport::{Body, BoxError, HeadWait, full};
use crate::types::{BlobDeleted, BlobEntry, BlobInfo, BlobList, BlobPurged};
use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{
    CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, HeaderMap, HeaderValue, RANGE, TRAILER,
};
use hyper::{Method, Response, StatusCode};
use sha2::{Digest as _, Sha256};
use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Bytes read from a file or a reader at a time, to hash it or to send it.
pub const BLOB_CHUNK_BYTES: usize = 256 << 10;

/// How long a [`BlobReader`] waits for the next byte of a blob before it
/// fails, unless [`BlobReader::with_idle_timeout`] says otherwise.
pub const BLOB_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The slowest rate, in bytes a second, at which a node is taken to copy
/// an uploaded blob to the other back-end nodes before it answers (16
/// MiB/s): once an upload's body has all gone, its answer is waited for
/// the usual timeout plus one second per this many bytes sent.
pub const BLOB_COPY_BYTES_PER_SEC: u64 = 16 << 20;

/// How much longer than the usual timeout a download waits for its
/// answer's head (10 minutes): a node without a copy of the blob answers
/// once its copy from another is stored (a blob of at most 1 MiB) or has
/// its first MiB, a range once the copy also reaches the range's first
/// byte, and the client does not know the blob's size to allow
/// [`BLOB_COPY_BYTES_PER_SEC`] for it. Once the body flows,
/// [`BLOB_IDLE_TIMEOUT`] applies instead.
pub const BLOB_FETCH_WAIT: Duration = Duration::from_secs(600);

/// The request header naming the sha256 an upload's bytes must have.
pub const SHA256_HEADER: &str = "x-cohort-sha256";

/// Most bytes of the JSON answer to an upload read.
const ANSWER_MAX: usize = 64 << 10;

/// In-memory blobs past this size are hashed on a blocking thread.
const HASH_INLINE_MAX: usize = 1 << 20;

/// Where an upload names the sha256 its bytes must have.
enum Named<'a> {
    /// Known before the bytes are sent: the `X-Cohort-Sha256` header.
    Before(&'a str),
    /// Hashed as they are sent: the `X-Cohort-Sha256` trailer.
    After,
}

impl Node {
    /// Stores `bytes` as a blob; returns its digest and size. The bytes'
    /// sha256 is sent with them (`X-Cohort-Sha256`) and the answer checked
    /// against it.
    ///
    /// Every upload waits for its answer, once its body has all gone, the
    /// usual timeout plus one second per [`BLOB_COPY_BYTES_PER_SEC`] bytes
    /// sent: the node copies the blob to other nodes before it answers.
    ///
    /// The node's refusals keep their codes, for every upload:
    /// `blob_too_large` (413), `blob_digest_mismatch` (422),
    /// `request_timeout` (408), `blob_store_full` (507) and
    /// `replication_failed` (503), the last three retryable.
    pub async fn put_blob(&self, bytes: Bytes) -> Result<BlobInfo, ClientError> {
        let digest = sha256_of(bytes.clone()).await;
        self.put_bytes_hashed(bytes, &digest).await
    }

    /// [`put_blob`](Self::put_blob) of bytes whose sha256 is `digest`.
    pub(crate) async fn put_bytes_hashed(
        &self,
        bytes: Bytes,
        digest: &str,
    ) -> Result<BlobInfo, ClientError> {
        let sent = BlobInfo {
            digest: digest.to_owned(),
            bytes: bytes.len() as u64,
        };
        let answer = self.put(full(bytes), Named::Before(digest)).await?;
        self.check_stored(answer, &sent)
    }

    /// Stores the file at `path` as a blob, streamed in chunks of
    /// [`BLOB_CHUNK_BYTES`] (never whole in memory); returns its digest
    /// and size.
    ///
    /// Reads the file twice: first to hash it, so the node is told which
    /// bytes to expect (`X-Cohort-Sha256`) and refuses them if the file
    /// changed in between (`blob_digest_mismatch`), then to send it.
    pub async fn put_blob_file(&self, path: &Path) -> Result<BlobInfo, ClientError> {
        let hashed = hash_file(path).await?;
        self.put_file_hashed(path, &hashed).await
    }

    /// [`put_blob_file`](Self::put_blob_file) of a file already hashed.
    pub(crate) async fn put_file_hashed(
        &self,
        path: &Path,
        hashed: &BlobInfo,
    ) -> Result<BlobInfo, ClientError> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| unreadable(path, e))?;
        let len = file
            .metadata()
            .await
            .map_err(|e| unreadable(path, e))?
            .len();
        if len != hashed.bytes {
            return Err(ClientError::Protocol(format!(
                "{} changed while it was uploaded: {len} bytes, not the {} it was hashed with",
                path.display(),
                hashed.bytes
            )));
        }
        // Hashed already: the node checks the bytes against that digest.
        let upload = Upload::unhashed(file, len);
        let answer = self
            .put(upload.body(), Named::Before(&hashed.digest))
            .await?;
        self.check_stored(answer, hashed)
    }

    /// Stores what `reader` gives until its end as a blob, streamed as the
    /// connection takes it (sent chunked: its length is not known
    /// beforehand) and hashed as it is sent, its sha256 sent last as the
    /// `X-Cohort-Sha256` trailer for the node to check; returns the blob's
    /// digest and size, checked against the same sha256.
    ///
    /// The reader is read once: a failed upload cannot be resent (see
    /// [`Client::put_blob_stream`]).
    pub async fn put_blob_stream(
        &self,
        reader: impl AsyncRead + Send + Unpin + 'static,
    ) -> Result<BlobInfo, ClientError> {
        self.put_upload(&Upload::new(reader, None)).await
    }

    /// Sends `upload` (a new try of it) and checks the answer against what
    /// it read.
    async fn put_upload<R: AsyncRead + Send + Unpin + 'static>(
        &self,
        upload: &Upload<R>,
    ) -> Result<BlobInfo, ClientError> {
        let answer = self.put(upload.body(), Named::After).await?;
        match upload.sent() {
            Some(sent) => self.check_stored(answer, &sent),
            None => Err(ClientError::Protocol(format!(
                "{} stored a blob before it had the upload's whole body",
                self.server()
            ))),
        }
    }

    /// `PUT /v1/blobs` with `body`, naming its digest as `named` says.
    async fn put(&self, body: Body, named: Named<'_>) -> Result<BlobInfo, ClientError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        match named {
            Named::Before(digest) => {
                let value = HeaderValue::from_str(digest)
                    .map_err(|_| ClientError::Protocol(format!("{digest:?} is not a digest")))?;
                headers.insert(SHA256_HEADER, value);
            }
            Named::After => {
                headers.insert(TRAILER, HeaderValue::from_static(SHA256_HEADER));
            }
        }
        let timing = self.timing;
        // The node answers once it has copied the blob to others.
        let wait = HeadWait::new(timing.request).per_bytes_sent(timing.copy_bytes_per_sec);
        let response = self
            .open(Method::PUT, "/v1/blobs", headers, body, wait)
            .await?;
        let read = Limited::new(response.into_body(), ANSWER_MAX).collect();
        let body = match tokio::time::timeout(timing.request, read).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) => return Err(self.broke_off(format!("the upload's answer: {e}"))),
            Err(_) => {
                return Err(self.broke_off(format!(
                    "the upload's answer did not come within {:?}",
                    timing.request
                )));
            }
        };
        serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// The node's answer to an upload, if it is the blob that was sent.
    fn check_stored(&self, answer: BlobInfo, sent: &BlobInfo) -> Result<BlobInfo, ClientError> {
        if answer.bytes == sent.bytes && answer.digest.eq_ignore_ascii_case(&sent.digest) {
            return Ok(sent.clone());
        }
        Err(ClientError::Protocol(format!(
            "{} stored blob {} ({} bytes) for the {} bytes sent, whose sha256 is {}",
            self.server(),
            answer.digest,
            answer.bytes,
            sent.bytes,
            sent.digest
        )))
    }

    /// Blob `digest`'s size, or `None` if the node has no such blob.
    /// `digest` must be 64 hex digits (any case) or the call fails
    /// without asking.
    pub async fn head_blob(&self, digest: &str) -> Result<Option<BlobInfo>, ClientError> {
        let digest = blob_digest(digest)?;
        let path = format!("/v1/blobs/{digest}");
        // A node without a copy answers HEAD without fetching it.
        let response = self
            .open(
                Method::HEAD,
                &path,
                HeaderMap::new(),
                full(Bytes::new()),
                HeadWait::new(self.timing.request),
            )
            .await;
        let response = match response {
            Ok(response) => response,
            // HEAD answers carry no body, so no code: a 404 is the blob's.
            Err(ClientError::Api { status: 404, .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let headers = response.headers();
        check_etag(headers, &digest, self.server())?;
        let bytes = content_length(headers).ok_or_else(|| {
            ClientError::Protocol(format!(
                "{} answered HEAD of blob {digest} without a Content-Length",
                self.server()
            ))
        })?;
        Ok(Some(BlobInfo { digest, bytes }))
    }

    /// Stops the cluster keeping blob `digest` (`DELETE
    /// /v1/blobs/{digest}`): refused `blob_in_use` while a held job or a
    /// schedule names it, `blob_not_found` when the cluster keeps no such
    /// blob. The nodes delete their copies after their grace period.
    pub async fn delete_blob(&self, digest: &str) -> Result<BlobDeleted, ClientError> {
        let digest = blob_digest(digest)?;
        let path = format!("/v1/blobs/{digest}");
        self.json(Method::DELETE, &path, None).await
    }

    /// Stops the cluster keeping blob `digest` even though finished jobs
    /// name it (`POST /v1/blobs/{digest}/purge`, an admin token): those
    /// that read it are purged, those that wrote it forget it. Refused
    /// `blob_in_use` while an unfinished job reads it or a schedule gives
    /// it to its jobs, `blob_not_found` when the cluster keeps no such
    /// blob.
    pub async fn purge_blob(&self, digest: &str) -> Result<BlobPurged, ClientError> {
        let digest = blob_digest(digest)?;
        let path = format!("/v1/blobs/{digest}/purge");
        self.json(Method::POST, &path, None).await
    }

    /// Every blob the node lists, with whether the cluster keeps it.
    pub async fn list_blobs(&self) -> Result<Vec<BlobEntry>, ClientError> {
        let (_, body) = self
            .call(Method::GET, "/v1/blobs", "application/json", Bytes::new())
            .await?;
        let list: BlobList =
            serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(list.blobs)
    }

    /// A page of the blobs the cluster keeps, by digest, wherever their
    /// copies are (`GET /v1/blobs?scope=cluster`): the first `limit` (1
    /// to 1,000; the node's default 100 when `None`) after digest `after`.
    /// The list's `next` is the `after` of the next page.
    pub async fn kept_blobs(
        &self,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<BlobList, ClientError> {
        let mut path = "/v1/blobs?scope=cluster".to_string();
        if let Some(after) = after {
            path.push_str(&format!("&after={}", blob_digest(after)?));
        }
        if let Some(limit) = limit {
            path.push_str(&format!("&limit={limit}"));
        }
        self.json(Method::GET, &path, None).await
    }

    /// Blob `digest`'s bytes, streamed: all of them, or with `range`
    /// `(start, end)` the bytes `start..=end` (HTTP's `Range: bytes=A-B`,
    /// `end` inclusive and cut to the blob's end by the node), or with
    /// `(start, None)` from `start` to the blob's end.
    ///
    /// `digest` may be in either case; the reader's is lowercase.
    ///
    /// Returns once the answer's head has come (waited for up to the
    /// usual timeout plus [`BLOB_FETCH_WAIT`]: a node without a copy
    /// answers once its copy has the first MiB, or all of a smaller blob;
    /// a range, once the copy also reaches it); the [`BlobReader`] knows
    /// the blob's size and the range served (check
    /// [`range`](BlobReader::range): a node may serve the whole blob
    /// instead of a range), and fails if the body breaks off, stalls for
    /// [`BLOB_IDLE_TIMEOUT`] or is not as long as the headers said. It
    /// does not check the digest (a range cannot be checked): see
    /// [`get_blob_to_file`](Self::get_blob_to_file).
    ///
    /// Errors: `blob_not_found` (404), `range_not_satisfiable` (416: a
    /// range starting at or past the end), or a local
    /// [`ClientError::Protocol`] for a digest that is not 64 hex digits or
    /// an `end` before `start`.
    pub async fn get_blob(
        &self,
        digest: &str,
        range: Option<(u64, Option<u64>)>,
    ) -> Result<BlobReader, ClientError> {
        let digest = blob_digest(digest)?;
        let mut headers = HeaderMap::new();
        if let Some(range) = range {
            let value = HeaderValue::from_str(&range_header(range)?).expect("ASCII digits");
            headers.insert(RANGE, value);
        }
        let path = format!("/v1/blobs/{digest}");
        // A node without a copy answers once its copy has the first MiB, or
        // all of a smaller blob (a range: once the copy also reaches it).
        let wait = HeadWait::new(self.timing.request).with_extra(self.timing.fetch);
        let response = self
            .open(Method::GET, &path, headers, full(Bytes::new()), wait)
            .await?;
        BlobReader::new(
            response,
            digest,
            range.map(|(start, _)| start),
            self.server(),
        )
    }

    /// Downloads blob `digest` into the file at `path`: streams it into a
    /// new file beside `path` (`.<name>.<random>.partial`), checks that
    /// what arrived has the blob's size and sha256, then renames it to
    /// `path` (replacing a file there). Returns the blob's digest and size.
    ///
    /// Bytes that are not the blob's are refused with a
    /// [`ClientError::Protocol`] naming the sha256 that arrived, and, as
    /// on any failure, the partial file is removed and `path` left as it
    /// was.
    pub async fn get_blob_to_file(
        &self,
        digest: &str,
        path: &Path,
    ) -> Result<BlobInfo, ClientError> {
        let reader = self.get_blob(digest, None).await?;
        let expected = reader.info().clone();
        let source = format!("blob {} from {}", expected.digest, self.server());
        write_verified(reader, &expected, path, &source).await
    }

    /// A body that broke off (or never came) as a transport failure.
    fn broke_off(&self, reason: String) -> ClientError {
        ClientError::Transport {
            server: self.server().to_owned(),
            reason,
            not_sent: false,
        }
    }
}

impl Client {
    /// Stores `bytes` as a blob; returns its digest and size. Resent on
    /// another node (the same bytes name the same blob) as
    /// [`call`](Self::call) retries. See [`Node::put_blob`].
    pub async fn put_blob(&self, bytes: Bytes) -> Result<BlobInfo, ClientError> {
        let digest = sha256_of(bytes.clone()).await;
        self.call(|node| {
            let (bytes, digest) = (bytes.clone(), digest.clone());
            async move { node.put_bytes_hashed(bytes, &digest).await }
        })
        .await
    }

    /// Stores the file at `path` as a blob, streamed (never whole in
    /// memory); returns its digest and size.
    ///
    /// Reads the file once to hash it, then once more per try to send it:
    /// a failed try is resent, from the start of the file, to the next
    /// node as [`call`](Self::call) retries, and a file that changed since
    /// it was hashed is refused. See [`Node::put_blob_file`].
    pub async fn put_blob_file(&self, path: &Path) -> Result<BlobInfo, ClientError> {
        let hashed = hash_file(path).await?;
        self.call(|node| {
            let hashed = hashed.clone();
            async move { node.put_file_hashed(path, &hashed).await }
        })
        .await
    }

    /// Stores what `reader` gives until its end as a blob, streamed once;
    /// returns its digest and size. See [`Node::put_blob_stream`].
    ///
    /// Not resent once a byte has been read from `reader`: a failure then
    /// (a node lost mid-upload, a `503`) is returned as it is, and the
    /// caller must start again with a new reader. A try that read nothing
    /// (the node could not be reached, or refused before reading the body)
    /// is tried again, on the next node, as [`call`](Self::call) does.
    pub async fn put_blob_stream(
        &self,
        reader: impl AsyncRead + Send + Unpin + 'static,
    ) -> Result<BlobInfo, ClientError> {
        let upload = Upload::new(reader, None);
        self.call_while(
            |node| {
                let upload = upload.clone();
                async move { node.put_upload(&upload).await }
            },
            || !upload.touched(),
        )
        .await
    }

    /// Blob `digest`'s size, or `None` if the node asked has no such blob.
    /// See [`Node::head_blob`].
    pub async fn head_blob(&self, digest: &str) -> Result<Option<BlobInfo>, ClientError> {
        self.call(|node| async move { node.head_blob(digest).await })
            .await
    }

    /// Stops the cluster keeping blob `digest`. See [`Node::delete_blob`].
    pub async fn delete_blob(&self, digest: &str) -> Result<BlobDeleted, ClientError> {
        self.call(|node| async move { node.delete_blob(digest).await })
            .await
    }

    /// Purges blob `digest`. See [`Node::purge_blob`].
    pub async fn purge_blob(&self, digest: &str) -> Result<BlobPurged, ClientError> {
        self.call(|node| async move { node.purge_blob(digest).await })
            .await
    }

    /// Every blob the node asked lists.
    pub async fn list_blobs(&self) -> Result<Vec<BlobEntry>, ClientError> {
        self.call(|node| async move { node.list_blobs().await })
            .await
    }

    /// A page of the blobs the cluster keeps (see [`Node::kept_blobs`]).
    pub async fn kept_blobs(
        &self,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<BlobList, ClientError> {
        self.call(|node| async move { node.kept_blobs(after, limit).await })
            .await
    }

    /// Blob `digest`'s bytes (or the `range` of them), streamed. Asking is
    /// retried on the next node as [`call`](Self::call) does; once the
    /// answer's head has come, a body that breaks off fails the reader
    /// and is not resumed. See [`Node::get_blob`].
    pub async fn get_blob(
        &self,
        digest: &str,
        range: Option<(u64, Option<u64>)>,
    ) -> Result<BlobReader, ClientError> {
        self.call(|node| async move { node.get_blob(digest, range).await })
            .await
    }

    /// Downloads blob `digest` into the file at `path`, checking its size
    /// and sha256 before the file appears. A download that breaks off is
    /// started again from the beginning (on the next node) as
    /// [`call`](Self::call) retries; bytes that are not the blob's are not
    /// retried. See [`Node::get_blob_to_file`].
    pub async fn get_blob_to_file(
        &self,
        digest: &str,
        path: &Path,
    ) -> Result<BlobInfo, ClientError> {
        self.call(|node| async move { node.get_blob_to_file(digest, path).await })
            .await
    }
}

/// A blob's bytes as they arrive, from [`Node::get_blob`]: a [`Stream`] of
/// chunks, or the same bytes through [`AsyncRead`] (use one or the other,
/// or the stream after the reader: the reader's unread rest of a chunk
/// comes first).
///
/// The stream fails with [`ClientError::Transport`] if the body breaks
/// off, ends short of the length the headers gave, or no byte comes for
/// the idle timeout while it is polled (time the caller spends between
/// polls does not count); with [`ClientError::Protocol`] if it runs past
/// that length. [`AsyncRead`] reports those as [`std::io::Error`]s whose
/// inner error is the [`ClientError`].
pub struct BlobReader {
    info: BlobInfo,
    range: Range<u64>,
    server: String,
    body: Incoming,
    idle: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Whether the last poll found nothing (so the timer runs).
    waiting: bool,
    received: u64,
    /// The rest of a chunk [`AsyncRead`] did not hand out yet.
    unread: Bytes,
    done: bool,
}

impl std::fmt::Debug for BlobReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobReader")
            .field("info", &self.info)
            .field("range", &self.range)
            .field("server", &self.server)
            .field("received", &self.received)
            .finish_non_exhaustive()
    }
}

impl BlobReader {
    /// The reader of a successful answer to `GET /v1/blobs/{digest}`
    /// (`asked`: the start of the range asked for).
    fn new(
        response: Response<Incoming>,
        digest: String,
        asked: Option<u64>,
        server: &str,
    ) -> Result<Self, ClientError> {
        let protocol = |what: String| {
            ClientError::Protocol(format!("{server} answered GET of blob {digest} {what}"))
        };
        let headers = response.headers();
        check_etag(headers, &digest, server)?;
        let length = content_length(headers).or_else(|| response.body().size_hint().exact());
        let (range, size) = match response.status() {
            StatusCode::OK => {
                let size = length.ok_or_else(|| protocol("without a Content-Length".into()))?;
                (0..size, size)
            }
            StatusCode::PARTIAL_CONTENT => {
                let value = headers
                    .get(CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                let (range, size) = parse_content_range(value)
                    .ok_or_else(|| protocol(format!("with Content-Range {value:?}")))?;
                if asked.is_some_and(|start| start != range.start) {
                    return Err(protocol(format!(
                        "with bytes {range:?}, not from {} as asked",
                        asked.unwrap_or_default()
                    )));
                }
                if length.is_some_and(|n| n != range.end - range.start) {
                    return Err(protocol(format!(
                        "with {} bytes for the range {range:?}",
                        length.unwrap_or_default()
                    )));
                }
                (range, size)
            }
            status => return Err(protocol(format!("with status {status}"))),
        };
        Ok(Self {
            info: BlobInfo {
                digest,
                bytes: size,
            },
            range,
            server: server.to_owned(),
            body: response.into_body(),
            idle: BLOB_IDLE_TIMEOUT,
            timer: Box::pin(tokio::time::sleep(BLOB_IDLE_TIMEOUT)),
            waiting: false,
            received: 0,
            unread: Bytes::new(),
            done: false,
        })
    }

    /// The blob: its digest and whole size (not the range's).
    pub fn info(&self) -> &BlobInfo {
        &self.info
    }

    /// The bytes of the blob served, as offsets: `start..end` (`end`
    /// exclusive: `Content-Range: bytes 2-5/10` is `2..6`); `0..size` when
    /// the whole blob is.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }

    /// How many bytes the reader yields in all: the range's length.
    pub fn len(&self) -> u64 {
        self.range.end - self.range.start
    }

    /// True if the reader yields no byte (an empty blob).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fails a read that waits `idle` for the next byte (instead of
    /// [`BLOB_IDLE_TIMEOUT`]).
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    fn failed(&mut self, reason: String) -> ClientError {
        self.done = true;
        ClientError::Transport {
            server: self.server.clone(),
            reason: format!(
                "blob {} after {} of {} bytes: {reason}",
                self.info.digest,
                self.received,
                self.len()
            ),
            not_sent: false,
        }
    }
}

impl Stream for BlobReader {
    type Item = Result<Bytes, ClientError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if !this.unread.is_empty() {
            return Poll::Ready(Some(Ok(std::mem::take(&mut this.unread))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers, or an empty chunk: nothing for the caller.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if data.is_empty() {
                        continue;
                    }
                    this.waiting = false;
                    this.received += data.len() as u64;
                    if this.received > this.len() {
                        this.done = true;
                        return Poll::Ready(Some(Err(ClientError::Protocol(format!(
                            "{} sent more than the {} bytes of blob {} it announced",
                            this.server,
                            this.len(),
                            this.info.digest
                        )))));
                    }
                    return Poll::Ready(Some(Ok(data)));
                }
                Poll::Ready(Some(Err(error))) => {
                    let error = this.failed(format!("the body broke off: {error}"));
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    if this.received < this.len() {
                        let error = this.failed("the body ended short".into());
                        return Poll::Ready(Some(Err(error)));
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    if !this.waiting {
                        this.waiting = true;
                        let until = tokio::time::Instant::now() + this.idle;
                        this.timer.as_mut().reset(until);
                    }
                    if this.timer.as_mut().poll(cx).is_ready() {
                        let idle = this.idle;
                        let error = this.failed(format!("no byte came for {idle:?}"));
                        return Poll::Ready(Some(Err(error)));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl AsyncRead for BlobReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.unread.is_empty() {
            match self.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => self.unread = chunk,
                Poll::Ready(Some(Err(error))) => {
                    return Poll::Ready(Err(std::io::Error::other(error)));
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.unread.len().min(buf.remaining());
        let chunk = self.unread.split_to(n);
        buf.put_slice(&chunk);
        Poll::Ready(Ok(()))
    }
}

/// What an upload reads from, shared by the bodies of its tries: a try
/// that never read from the reader leaves it whole for the next, and only
/// the latest try's body may read it.
///
/// An upload whose digest is not known beforehand (a stream) hashes what
/// each try sends and ends it with that sha256 as its `X-Cohort-Sha256`
/// trailer (declared in the request's `Trailer` header): the node refuses
/// the upload if what it received has another digest
/// (`blob_digest_mismatch`), and the client checks the node's answer
/// against the same digest. The hash is taken on the thread that sends:
/// a thread of its own beside the sending gained nothing on 2 cores
/// (BENCHMARKS.md, "blob-upload").
struct Upload<R> {
    source: Arc<Mutex<Source<R>>>,
}

impl<R> Clone for Upload<R> {
    fn clone(&self) -> Self {
        Self {
            source: self.source.clone(),
        }
    }
}

struct Source<R> {
    reader: R,
    /// Exactly how many bytes the reader must give (a file's length).
    expected: Option<u64>,
    /// Whether each try hashes what it sends and ends with the trailer;
    /// `false` when the digest is known beforehand (a file hashed first,
    /// named in the header), and the body's length is then declared.
    hashes: bool,
    read: u64,
    /// Whether the reader was read from (or failed).
    touched: bool,
    ended: bool,
    /// What was read, once the reader ended (an upload that hashes).
    sent: Option<BlobInfo>,
    /// The latest try: only its body reads.
    tries: u64,
}

impl<R: AsyncRead + Send + Unpin + 'static> Upload<R> {
    /// An upload of what `reader` gives (exactly `expected` bytes, if
    /// given: a reader that gives more or fewer fails the body), hashed
    /// as it is sent, its digest sent last as the trailer.
    fn new(reader: R, expected: Option<u64>) -> Self {
        Self::with(reader, expected, true)
    }

    /// An upload of exactly `length` bytes from `reader` whose digest is
    /// known (and sent in the header): not hashed again as it is read,
    /// sent with its `Content-Length`, and [`sent`](Self::sent) is `None`.
    fn unhashed(reader: R, length: u64) -> Self {
        Self::with(reader, Some(length), false)
    }

    fn with(reader: R, expected: Option<u64>, hashes: bool) -> Self {
        Self {
            source: Arc::new(Mutex::new(Source {
                reader,
                expected,
                hashes,
                read: 0,
                touched: false,
                ended: false,
                sent: None,
                tries: 0,
            })),
        }
    }

    fn source(&self) -> std::sync::MutexGuard<'_, Source<R>> {
        self.source.lock().expect("not poisoned")
    }

    /// The body of a new try; an earlier try's body fails from now on.
    fn body(&self) -> Body {
        let mut source = self.source();
        source.tries += 1;
        let hasher = source.hashes.then(Sha256::new);
        UploadBody {
            source: self.source.clone(),
            try_number: source.tries,
            buffer: BytesMut::new(),
            size: source.expected.filter(|_| hasher.is_none()),
            hasher,
        }
        .boxed()
    }

    /// Whether a try has read from the reader: the upload cannot be sent
    /// again.
    fn touched(&self) -> bool {
        self.source().touched
    }

    /// What was read, once the reader ended (`None` before, and for an
    /// upload that does not hash).
    fn sent(&self) -> Option<BlobInfo> {
        self.source().sent.clone()
    }
}

/// One try's body of an [`Upload`]: its chunks, then (when it hashes) the
/// digest trailer.
struct UploadBody<R> {
    source: Arc<Mutex<Source<R>>>,
    try_number: u64,
    buffer: BytesMut,
    /// The declared length (an upload that does not hash: a trailer
    /// needs a chunked body).
    size: Option<u64>,
    /// The sha256 of what this try sent; `None` once its trailer went,
    /// and for an upload that does not hash.
    hasher: Option<Sha256>,
}

impl<R: AsyncRead + Send + Unpin + 'static> http_body::Body for UploadBody<R> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let mut source = this.source.lock().expect("not poisoned");
        if source.tries != this.try_number {
            return Poll::Ready(Some(Err(
                "a later try of the upload took its reader over".into()
            )));
        }
        if !source.ended {
            this.buffer.reserve(BLOB_CHUNK_BYTES);
            let read =
                tokio_util::io::poll_read_buf(Pin::new(&mut source.reader), cx, &mut this.buffer);
            let n = match std::task::ready!(read) {
                Err(error) => {
                    source.touched = true;
                    return Poll::Ready(Some(Err(Box::new(error))));
                }
                Ok(n) => n as u64,
            };
            source.touched = true;
            if n > 0 {
                if let Some(expected) = source.expected.filter(|&e| source.read + n > e) {
                    return Poll::Ready(Some(Err(format!(
                        "the source has more than the {expected} bytes it had"
                    )
                    .into())));
                }
                let chunk = this.buffer.split().freeze();
                if let Some(hasher) = &mut this.hasher {
                    hasher.update(&chunk);
                }
                source.read += n;
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if let Some(expected) = source.expected.filter(|&e| e != source.read) {
                let read = source.read;
                return Poll::Ready(Some(Err(format!(
                    "the source ended after {read} of its {expected} bytes"
                )
                .into())));
            }
            source.ended = true;
        }
        let Some(hasher) = this.hasher.take() else {
            return Poll::Ready(None);
        };
        let digest = hex(&hasher.finalize());
        let mut trailers = HeaderMap::new();
        trailers.insert(
            SHA256_HEADER,
            HeaderValue::from_str(&digest).expect("hex is a header value"),
        );
        source.sent = Some(BlobInfo {
            digest,
            bytes: source.read,
        });
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn size_hint(&self) -> SizeHint {
        match self.size {
            Some(size) => SizeHint::with_exact(size),
            None => SizeHint::default(),
        }
    }
}

/// Streams `chunks` (the blob `expected`) into a new file beside `path`,
/// then renames it to `path` if what arrived has the blob's size and
/// sha256. On any failure the new file is removed and `path` is left as
/// it was. `source` names where the chunks come from, for errors.
async fn write_verified<S>(
    mut chunks: S,
    expected: &BlobInfo,
    path: &Path,
    source: &str,
) -> Result<BlobInfo, ClientError>
where
    S: Stream<Item = Result<Bytes, ClientError>> + Unpin,
{
    let partial = Partial::beside(path)?;
    let unwritable = |e| unwritable(&partial.path, e);
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial.path)
        .await
        .map_err(unwritable)?;
    let mut spool = Spool::new(file.into_std().await);
    while let Some(chunk) = std::future::poll_fn(|cx| Pin::new(&mut chunks).poll_next(cx)).await {
        spool.push(chunk?).await.map_err(unwritable)?;
    }
    let SpoolFile {
        file,
        hasher,
        bytes,
    } = spool.finish().await.map_err(unwritable)?;
    tokio::task::spawn_blocking(move || file.sync_all())
        .await
        .map_err(std::io::Error::other)
        .and_then(|synced| synced)
        .map_err(unwritable)?;
    let digest = hex(&hasher.finalize());
    if bytes != expected.bytes || digest != expected.digest {
        return Err(ClientError::Protocol(format!(
            "{source}: the {bytes} bytes received have sha256 {digest}, not the blob's \
             ({} bytes); {} was left as it was",
            expected.bytes,
            path.display()
        )));
    }
    partial.keep_as(path).await?;
    Ok(BlobInfo { digest, bytes })
}

/// Bytes gathered from a download before one write to its file.
const SPOOL_BATCH_BYTES: usize = 1 << 20;

/// Writes a download's chunks to its file and hashes them, a batch of
/// [`SPOOL_BATCH_BYTES`] at a time, each on a blocking thread of its own,
/// while the next batch arrives: the network, the hash and the disk
/// overlap, and at most two batches are held.
struct Spool {
    /// The file and the hash, here between batches.
    file: Option<SpoolFile>,
    /// The batch before, being written and hashed; they hand the file and
    /// the hash back.
    writing: Option<(Blocking<std::fs::File>, Blocking<Sha256>)>,
    batch: Vec<Bytes>,
    batched: usize,
    bytes: u64,
}

type Blocking<T> = tokio::task::JoinHandle<std::io::Result<T>>;

/// A spool's file and the hash of what was written to it.
struct SpoolFile {
    file: std::fs::File,
    hasher: Sha256,
    bytes: u64,
}

impl Spool {
    fn new(file: std::fs::File) -> Self {
        Self {
            file: Some(SpoolFile {
                file,
                hasher: Sha256::new(),
                bytes: 0,
            }),
            writing: None,
            batch: Vec::new(),
            batched: 0,
            bytes: 0,
        }
    }

    /// Takes the next chunk.
    async fn push(&mut self, chunk: Bytes) -> std::io::Result<()> {
        self.batched += chunk.len();
        self.bytes += chunk.len() as u64;
        self.batch.push(chunk);
        if self.batched >= SPOOL_BATCH_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// The file and the hash, once the batch before is written and hashed.
    async fn file(&mut self) -> std::io::Result<SpoolFile> {
        let Some((file, hasher)) = self.writing.take() else {
            return Ok(self
                .file
                .take()
                .expect("a spool has its file until it ends"));
        };
        let file = file.await.map_err(std::io::Error::other)??;
        let hasher = hasher.await.map_err(std::io::Error::other)??;
        Ok(SpoolFile {
            file,
            hasher,
            bytes: self.bytes - self.batched as u64,
        })
    }

    /// Hands the batch to two blocking threads, one writing it and one
    /// hashing it, once the batch before is done.
    async fn flush(&mut self) -> std::io::Result<()> {
        let SpoolFile {
            mut file,
            mut hasher,
            ..
        } = self.file().await?;
        let batch = Arc::new(std::mem::take(&mut self.batch));
        self.batched = 0;
        let written = batch.clone();
        let write = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            for chunk in written.iter() {
                file.write_all(chunk)?;
            }
            Ok(file)
        });
        let hash = tokio::task::spawn_blocking(move || {
            batch.iter().for_each(|chunk| hasher.update(chunk));
            Ok(hasher)
        });
        self.writing = Some((write, hash));
        Ok(())
    }

    /// Writes what is left: the file, all written, and its hash.
    async fn finish(mut self) -> std::io::Result<SpoolFile> {
        self.flush().await?;
        self.file().await
    }
}

/// A file being downloaded beside its destination: removed when dropped
/// unless [`keep_as`](Self::keep_as) renamed it.
struct Partial {
    path: PathBuf,
    kept: bool,
}

impl Partial {
    /// `.<name>.<random>.partial` in `path`'s directory.
    fn beside(path: &Path) -> Result<Self, ClientError> {
        let name = path.file_name().ok_or_else(|| {
            ClientError::Protocol(format!("{} does not name a file", path.display()))
        })?;
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).expect("the OS has randomness");
        let mut partial = std::ffi::OsString::from(".");
        partial.push(name);
        partial.push(format!(".{}.partial", hex(&random)));
        Ok(Self {
            path: path.with_file_name(partial),
            kept: false,
        })
    }

    /// Renames the file to `path`.
    async fn keep_as(mut self, path: &Path) -> Result<(), ClientError> {
        tokio::fs::rename(&self.path, path)
            .await
            .map_err(|e| unwritable(path, e))?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The digest and size of the file at `path`, read in chunks of
/// [`BLOB_CHUNK_BYTES`].
async fn hash_file(path: &Path) -> Result<BlobInfo, ClientError> {
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| unreadable(path, e))?;
    let mut buffer = vec![0u8; BLOB_CHUNK_BYTES];
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .await
            .map_err(|e| unreadable(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok(BlobInfo {
        digest: hex(&hasher.finalize()),
        bytes,
    })
}

/// The sha256 of `bytes` in hex; off the async threads when it is long.
async fn sha256_of(bytes: Bytes) -> String {
    if bytes.len() <= HASH_INLINE_MAX {
        return hex(&Sha256::digest(&bytes));
    }
    tokio::task::spawn_blocking(move || hex(&Sha256::digest(&bytes)))
        .await
        .expect("hashing does not panic")
}

/// `digest` if it is a blob's (64 hex digits), in lowercase.
fn blob_digest(digest: &str) -> Result<String, ClientError> {
    if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(digest.to_ascii_lowercase());
    }
    Err(ClientError::Protocol(format!(
        "{digest:?} is not a blob's digest (the 64 hex digits of a sha256)"
    )))
}

/// The `Range` header value asking for bytes `start..=end`, or from
/// `start` to the end.
fn range_header((start, end): (u64, Option<u64>)) -> Result<String, ClientError> {
    match end {
        None => Ok(format!("bytes={start}-")),
        Some(end) if end >= start => Ok(format!("bytes={start}-{end}")),
        Some(end) => Err(ClientError::Protocol(format!(
            "the range {start}-{end} ends before it starts"
        ))),
    }
}

/// A `Content-Range: bytes A-B/SIZE` value as the bytes served (`A..B+1`)
/// and the whole size; `None` unless `A <= B < SIZE`.
fn parse_content_range(value: &str) -> Option<(Range<u64>, u64)> {
    let (unit, rest) = value.trim().split_once(' ')?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return None;
    }
    let (span, size) = rest.trim().split_once('/')?;
    let (start, end) = span.split_once('-')?;
    let (start, end, size) = (number(start)?, number(end)?, number(size)?);
    (start <= end && end < size).then(|| (start..end + 1, size))
}

/// A decimal number of digits only (no sign, no spaces).
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The `Content-Length` header, if it is a number.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    number(headers.get(CONTENT_LENGTH)?.to_str().ok()?)
}

/// Fails if the answer's `ETag` (`"<digest>"`) names another blob.
fn check_etag(headers: &HeaderMap, digest: &str, server: &str) -> Result<(), ClientError> {
    let Some(tag) = headers.get(ETAG) else {
        return Ok(());
    };
    let tag = tag.to_str().unwrap_or_default().trim();
    let bare = tag.trim_start_matches("W/").trim_matches('"');
    if bare.eq_ignore_ascii_case(digest) {
        return Ok(());
    }
    Err(ClientError::Protocol(format!(
        "{server} answered for blob {digest} with ETag {tag}"
    )))
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(DIGITS[usize::from(byte >> 4)] as char);
        text.push(DIGITS[usize::from(byte & 15)] as char);
    }
    text
}

fn unreadable(path: &Path, error: std::io::Error) -> ClientError {
    ClientError::Protocol(format!("cannot read {}: {error}", path.display()))
}

fn unwritable(path: &Path, error: std::io::Error) -> ClientError {
    ClientError::Protocol(format!("cannot write {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    fn sha256(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    /// A new empty directory under the system's temporary one.
    fn scratch_dir() -> PathBuf {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).unwrap();
        let dir = std::env::temp_dir().join(format!("cohort-blobs-{}", hex(&random)));
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The chunks of a download, as [`BlobReader`] yields them.
    struct Chunks(std::collections::VecDeque<Result<Bytes, ClientError>>);

    impl Chunks {
        fn of(chunks: Vec<Result<Bytes, ClientError>>) -> Self {
            Self(chunks.into())
        }
    }

    impl Stream for Chunks {
        type Item = Result<Bytes, ClientError>;
        fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    #[test]
    fn range_headers_are_inclusive_and_refuse_an_end_before_the_start() {
        assert_eq!(range_header((0, None)).unwrap(), "bytes=0-");
        assert_eq!(range_header((5, Some(9))).unwrap(), "bytes=5-9");
        assert_eq!(range_header((7, Some(7))).unwrap(), "bytes=7-7");
        let error = range_header((5, Some(4))).unwrap_err();
        assert_eq!(error.code(), "protocol");
        assert!(!error.retryable());
    }

    #[test]
    fn content_ranges_parse_only_when_they_fit_the_size() {
        assert_eq!(parse_content_range("bytes 0-9/10"), Some((0..10, 10)));
        assert_eq!(parse_content_range("bytes 2-5/10"), Some((2..6, 10)));
        assert_eq!(parse_content_range(" Bytes 9-9/10 "), Some((9..10, 10)));
        assert_eq!(
            parse_content_range("bytes 0-18446744073709551614/18446744073709551615"),
            Some((0..u64::MAX, u64::MAX))
        );
        for bad in [
            "bytes */10",
            "bytes 5-2/10",
            "bytes 0-10/10",
            "bytes 0-9/*",
            "bytes +1-2/10",
            "bytes 1 -2/10",
            "bytes -2/10",
            "items 0-1/2",
            "bytes=0-1/2",
            "",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad}");
        }
    }

    #[test]
    fn digests_are_64_hex_digits_sent_in_lowercase() {
        let upper = "AB".repeat(32);
        assert_eq!(blob_digest(&upper).unwrap(), "ab".repeat(32));
        for bad in [
            "ab".repeat(31),
            "ab".repeat(33),
            format!("../{}", "a".repeat(61)),
        ] {
            assert_eq!(blob_digest(&bad).unwrap_err().code(), "protocol", "{bad}");
        }
        assert_eq!(
            sha256(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[tokio::test]
    async fn an_upload_hashes_what_it_reads_and_holds_a_file_to_its_length() {
        let data = vec![7u8; BLOB_CHUNK_BYTES * 2 + 5];
        let upload = Upload::new(std::io::Cursor::new(data.clone()), Some(data.len() as u64));
        let body = upload.body();
        assert!(!upload.touched(), "nothing is read before the body is");
        assert_eq!(upload.sent(), None);
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned().expect("the digest trailer");
        assert_eq!(collected.to_bytes(), data);
        assert!(upload.touched());
        let sent = BlobInfo {
            digest: sha256(&data),
            bytes: data.len() as u64,
        };
        assert_eq!(trailers[SHA256_HEADER], sent.digest.as_str());
        assert_eq!(upload.sent(), Some(sent));

        // A file that shrank, or grew, since its length was taken.
        let short = Upload::new(std::io::Cursor::new(vec![1u8; 10]), Some(11));
        let error = short.body().collect().await.unwrap_err();
        assert!(
            error.to_string().contains("ended after 10 of its 11"),
            "{error}"
        );
        let long = Upload::new(std::io::Cursor::new(vec![1u8; 10]), Some(9));
        let error = long.body().collect().await.unwrap_err();
        assert!(error.to_string().contains("more than the 9"), "{error}");
        assert_eq!(long.sent(), None);
    }

    #[tokio::test]
    async fn only_the_latest_try_reads_an_upload() {
        let upload = Upload::new(std::io::Cursor::new(b"abc".to_vec()), None);
        let first = upload.body();
        let second = upload.body();
        let error = first.collect().await.unwrap_err();
        assert!(error.to_string().contains("later try"), "{error}");
        assert!(!upload.touched(), "the stale body read nothing");
        assert_eq!(second.collect().await.unwrap().to_bytes(), "abc");
        assert_eq!(upload.sent().unwrap().digest, sha256(b"abc"));
    }

    #[tokio::test]
    async fn a_download_lands_only_with_the_blobs_digest() {
        let dir = scratch_dir();
        let path = dir.join("out.bin");
        let blob = BlobInfo {
            digest: sha256(b"hello world"),
            bytes: 11,
        };
        let good = Chunks::of(vec![Ok(Bytes::from("hello ")), Ok(Bytes::from("world"))]);
        let stored = write_verified(good, &blob, &path, "test").await.unwrap();
        assert_eq!(stored, blob);
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world");
        assert_eq!(names_in(&dir), ["out.bin"]);

        // Other bytes of the same length: refused, the old file kept.
        let bad = Chunks::of(vec![Ok(Bytes::from("hello wOrld"))]);
        let error = write_verified(bad, &blob, &path, "blob x from y")
            .await
            .unwrap_err();
        assert_eq!(error.code(), "protocol");
        assert!(!error.retryable());
        let message = error.to_string();
        assert!(message.contains(&sha256(b"hello wOrld")), "{message}");
        assert!(message.contains("blob x from y"), "{message}");
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world");
        assert_eq!(names_in(&dir), ["out.bin"], "the partial file is gone");

        // A body that broke off: its error, and no file.
        let fresh = dir.join("fresh.bin");
        let broken = Chunks::of(vec![
            Ok(Bytes::from("hello")),
            Err(ClientError::Transport {
                server: "s".into(),
                reason: "reset".into(),
                not_sent: false,
            }),
        ]);
        let error = write_verified(broken, &blob, &fresh, "test")
            .await
            .unwrap_err();
        assert_eq!(error.code(), "unreachable");
        assert_eq!(names_in(&dir), ["out.bin"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Reads one HTTP/1.1 request: its head (lowercased) and its body
    /// (`Content-Length` or chunked, decoded).
    async fn read_request(socket: &mut TcpStream) -> (String, Vec<u8>) {
        let mut data = Vec::new();
        let mut buffer = vec![0u8; 64 << 10];
        let mut more = async |socket: &mut TcpStream, data: &mut Vec<u8>| {
            let n = socket.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the client hung up");
            data.extend_from_slice(&buffer[..n]);
        };
        let head_end = loop {
            if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            more(socket, &mut data).await;
        };
        let mut head = String::from_utf8(data[..head_end].to_vec())
            .unwrap()
            .to_ascii_lowercase();
        let mut body = data.split_off(head_end);
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse::<usize>().unwrap());
        if head.contains("transfer-encoding: chunked") {
            loop {
                if let Some((decoded, trailers)) = dechunk(&body) {
                    // The trailers read as more of the head.
                    head.push_str(&trailers.to_ascii_lowercase());
                    return (head, decoded);
                }
                more(socket, &mut body).await;
            }
        }
        while body.len() < length.unwrap_or(0) {
            more(socket, &mut body).await;
        }
        (head, body)
    }

    /// A chunked body's bytes and its trailer lines, once all of it is in
    /// `body` (`None` before).
    fn dechunk(body: &[u8]) -> Option<(Vec<u8>, String)> {
        let mut decoded = Vec::new();
        let mut rest = body;
        loop {
            let line = rest.windows(2).position(|w| w == b"\r\n")?;
            let size = std::str::from_utf8(&rest[..line]).unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            rest = &rest[line + 2..];
            if size == 0 {
                let end = rest.windows(2).position(|w| w == b"\r\n")?;
                if end == 0 {
                    return Some((decoded, String::new()));
                }
                let end = rest.windows(4).position(|w| w == b"\r\n\r\n")?;
                let trailers = String::from_utf8(rest[..end + 2].to_vec()).unwrap();
                return Some((decoded, trailers));
            }
            if rest.len() < size + 2 {
                return None;
            }
            decoded.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
    }

    /// A node on a local port that answers one request with `answer`
    /// (after reading all of it); the task returns the request.
    async fn answer_once(answer: String) -> (Node, tokio::task::JoinHandle<(String, Vec<u8>)>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = Node::new(&format!("http://{}", listener.local_addr().unwrap()));
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let request = read_request(&mut socket).await;
            socket.write_all(answer.as_bytes()).await.unwrap();
            socket.shutdown().await.unwrap();
            request
        });
        (node, served)
    }

    fn answer(status: &str, headers: &[String], body: &str) -> String {
        let mut text = format!("HTTP/1.1 {status}\r\nconnection: close\r\n");
        for header in headers {
            text.push_str(header);
            text.push_str("\r\n");
        }
        text.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        text
    }

    #[tokio::test]
    async fn a_range_is_asked_for_and_what_was_served_is_reported() {
        let digest = sha256(b"abcdefghij");
        let (node, served) = answer_once(answer(
            "206 Partial Content",
            &[
                "content-range: bytes 2-5/10".into(),
                format!("etag: \"{digest}\""),
            ],
            "cdef",
        ))
        .await;
        let mut reader = node
            .get_blob(&digest.to_ascii_uppercase(), Some((2, Some(5))))
            .await
            .unwrap();
        assert_eq!(
            reader.info(),
            &BlobInfo {
                digest: digest.clone(),
                bytes: 10
            }
        );
        assert_eq!(reader.range(), 2..6);
        assert_eq!(reader.len(), 4);
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "cdef");
        let (head, _) = served.await.unwrap();
        assert!(
            head.starts_with(&format!("get /v1/blobs/{digest} http/1.1\r\n")),
            "{head}"
        );
        assert!(head.contains("\r\nrange: bytes=2-5\r\n"), "{head}");
    }

    #[tokio::test]
    async fn a_range_past_the_end_is_the_servers_error_with_its_code() {
        let (node, _served) = answer_once(answer(
            "416 Range Not Satisfiable",
            &["content-range: bytes */10".into()],
            r#"{"code":"range_not_satisfiable","message":"past the end","retryable":false}"#,
        ))
        .await;
        let error = node
            .get_blob(&sha256(b"x"), Some((10, None)))
            .await
            .unwrap_err();
        match &error {
            ClientError::Api { status, code, .. } => {
                assert_eq!((*status, code.as_str()), (416, "range_not_satisfiable"));
            }
            other => panic!("{other:?}"),
        }
        assert!(!error.retryable());
    }

    #[tokio::test]
    async fn a_missing_blob_is_none_to_head_and_its_size_otherwise() {
        let (node, _served) = answer_once(answer("404 Not Found", &[], "")).await;
        assert_eq!(node.head_blob(&sha256(b"x")).await.unwrap(), None);
        let digest = sha256(b"x");
        // HEAD's Content-Length is the blob's; no body follows.
        let head = format!(
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1234\r\n\
             etag: \"{digest}\"\r\naccept-ranges: bytes\r\n\r\n"
        );
        let (node, served) = answer_once(head).await;
        let info = node.head_blob(&digest.to_ascii_uppercase()).await.unwrap();
        assert_eq!(
            info,
            Some(BlobInfo {
                digest,
                bytes: 1234
            })
        );
        assert!(served.await.unwrap().0.starts_with("head /v1/blobs/"));
    }

    #[tokio::test]
    async fn a_download_of_other_bytes_leaves_no_file() {
        let dir = scratch_dir();
        let path = dir.join("blob");
        let digest = sha256(b"the blob");
        let (node, _served) = answer_once(answer(
            "200 OK",
            &[format!("etag: \"{digest}\"")],
            "not theirs",
        ))
        .await;
        let error = node.get_blob_to_file(&digest, &path).await.unwrap_err();
        assert_eq!(error.code(), "protocol");
        assert!(
            error.to_string().contains(&sha256(b"not theirs")),
            "{error}"
        );
        assert!(names_in(&dir).is_empty(), "{:?}", names_in(&dir));

        let (node, _served) = answer_once(answer(
            "200 OK",
            &[format!("etag: \"{digest}\"")],
            "the blob",
        ))
        .await;
        // A digest in uppercase is the same blob's.
        let upper = digest.to_ascii_uppercase();
        let info = node.get_blob_to_file(&upper, &path).await.unwrap();
        assert_eq!(info, BlobInfo { digest, bytes: 8 });
        assert_eq!(std::fs::read(&path).unwrap(), b"the blob");
        assert_eq!(names_in(&dir), ["blob"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_download_that_stalls_fails_after_its_idle_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = Node::new(&format!("http://{}", listener.local_addr().unwrap()));
        let _server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_request(&mut socket).await;
            let head = "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabcd";
            socket.write_all(head.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let mut reader = node
            .get_blob(&sha256(b"x"), None)
            .await
            .unwrap()
            .with_idle_timeout(Duration::from_millis(300));
        let first = std::future::poll_fn(|cx| Pin::new(&mut reader).poll_next(cx)).await;
        assert_eq!(first.unwrap().unwrap(), "abcd");
        let started = tokio::time::Instant::now();
        let next = std::future::poll_fn(|cx| Pin::new(&mut reader).poll_next(cx)).await;
        let error = next.unwrap().unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(error.code(), "unreachable");
        assert!(error.to_string().contains("after 4 of 10 bytes"), "{error}");
        let end = std::future::poll_fn(|cx| Pin::new(&mut reader).poll_next(cx)).await;
        assert!(end.is_none(), "a failed reader ends");
    }

    #[tokio::test]
    async fn an_upload_names_its_digest_and_the_answer_is_checked() {
        let data = Bytes::from_static(b"some bytes");
        let digest = sha256(&data);
        let stored = format!(r#"{{"digest":"{digest}","bytes":10}}"#);
        let (node, served) = answer_once(answer("201 Created", &[], &stored)).await;
        let info = node.put_blob(data.clone()).await.unwrap();
        assert_eq!(
            info,
            BlobInfo {
                digest: digest.clone(),
                bytes: 10
            }
        );
        let (head, body) = served.await.unwrap();
        assert!(head.starts_with("put /v1/blobs http/1.1\r\n"), "{head}");
        assert!(
            head.contains(&format!("\r\nx-cohort-sha256: {digest}\r\n")),
            "{head}"
        );
        assert!(head.contains("\r\ncontent-length: 10\r\n"), "{head}");
        assert_eq!(body, data);

        // A node that stored something else.
        let other = format!(r#"{{"digest":"{}","bytes":10}}"#, sha256(b"other"));
        let (node, _served) = answer_once(answer("200 OK", &[], &other)).await;
        let error = node.put_blob(data).await.unwrap_err();
        assert_eq!(error.code(), "protocol");
    }

    #[tokio::test]
    async fn a_file_is_sent_with_its_length_and_digest() {
        let dir = scratch_dir();
        let path = dir.join("in.bin");
        let data: Vec<u8> = (0..BLOB_CHUNK_BYTES * 3 + 17).map(|i| i as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let digest = sha256(&data);
        let stored = format!(r#"{{"digest":"{digest}","bytes":{}}}"#, data.len());
        let (node, served) = answer_once(answer("201 Created", &[], &stored)).await;
        let info = node.put_blob_file(&path).await.unwrap();
        assert_eq!(info.digest, digest);
        let (head, body) = served.await.unwrap();
        assert!(
            head.contains(&format!("\r\ncontent-length: {}\r\n", data.len())),
            "{head}"
        );
        assert!(
            head.contains(&format!("\r\nx-cohort-sha256: {digest}\r\n")),
            "{head}"
        );
        assert!(!head.contains("trailer"), "hashed first: {head}");
        assert!(body == data, "the file's bytes");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_stream_goes_chunked_with_its_digest_last_and_is_checked_against_what_was_read() {
        let digest = sha256(b"streamed");
        let stored = format!(r#"{{"digest":"{digest}","bytes":8}}"#);
        let (node, served) = answer_once(answer("201 Created", &[], &stored)).await;
        let info = node
            .put_blob_stream(std::io::Cursor::new(b"streamed".to_vec()))
            .await
            .unwrap();
        assert_eq!(
            info,
            BlobInfo {
                digest: digest.clone(),
                bytes: 8
            }
        );
        let (head, body) = served.await.unwrap();
        assert!(
            head.contains("\r\ntransfer-encoding: chunked\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\ntrailer: x-cohort-sha256\r\n"), "{head}");
        // After the body: the trailer.
        assert!(
            head.ends_with(&format!("\r\n\r\nx-cohort-sha256: {digest}\r\n")),
            "{head}"
        );
        assert_eq!(body, b"streamed");

        // A node that stored something else.
        let other = format!(r#"{{"digest":"{}","bytes":8}}"#, sha256(b"other"));
        let (node, _served) = answer_once(answer("201 Created", &[], &other)).await;
        let reader = std::io::Cursor::new(b"streamed".to_vec());
        let error = node.put_blob_stream(reader).await.unwrap_err();
        assert_eq!(error.code(), "protocol");
    }

    /// The head's timeout runs from the body's last move: a slow upload
    /// that keeps moving is not cut, a server that never answers is.
    #[tokio::test]
    async fn a_send_waits_while_the_body_moves_and_no_longer() {
        let transport =
            crate::transport::Transport::new(crate::tls::trusting_nothing(), None).unwrap();
        let timeout = Duration::from_secs(1);

        // 8 chunks 200 ms apart: 1.6 s in all, never 1 s still.
        let (node, served) = answer_once(answer("201 Created", &[], "{}")).await;
        let (mut writer, reader) = tokio::io::duplex(64);
        tokio::spawn(async move {
            for i in 0..8u8 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                writer.write_all(&[b'0' + i]).await.unwrap();
            }
        });
        let url = format!("{}/v1/blobs", node.server());
        let started = tokio::time::Instant::now();
        let body = Upload::new(reader, None).body();
        let response = transport
            .send(Method::PUT, &url, HeaderMap::new(), body, timeout.into())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert!(started.elapsed() > timeout);
        assert_eq!(served.await.unwrap().1, b"01234567");

        // A server that reads the request and never answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/blobs", listener.local_addr().unwrap());
        let _silent = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_request(&mut socket).await;
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let started = tokio::time::Instant::now();
        let error = transport
            .send(
                Method::PUT,
                &url,
                HeaderMap::new(),
                full(Bytes::from("x")),
                timeout.into(),
            )
            .await
            .unwrap_err();
        assert!(started.elapsed() >= timeout);
        assert!(started.elapsed() < timeout * 4, "{:?}", started.elapsed());
        assert!(
            error.message.contains("did not answer within"),
            "{}",
            error.message
        );
        assert!(!error.not_sent);
    }

    /// A node that reads one request, waits `delay`, then answers with
    /// `answer`: its URL, and the request as [`answer_once`]'s.
    async fn answer_late(
        answer: String,
        delay: Duration,
    ) -> (String, tokio::task::JoinHandle<(String, Vec<u8>)>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let request = read_request(&mut socket).await;
            tokio::time::sleep(delay).await;
            // The client may have given up and gone.
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
            request
        });
        (url, served)
    }

    /// Once its body has gone, an upload's answer is waited for the usual
    /// timeout plus the bytes sent at the copy rate: here 300 ms plus
    /// 1,000 bytes at 1,000 bytes a second, so an answer 800 ms after the
    /// body comes in time (from bytes or from a stream of unknown length,
    /// counted as it goes), and one later than 1.3 s does not. An empty
    /// body has no allowance. (The four run at once.)
    #[tokio::test]
    async fn an_uploads_answer_is_waited_for_longer_the_larger_the_blob() {
        let data = Bytes::from(vec![b'x'; 1000]);
        let digest = sha256(&data);
        let stored = answer(
            "201 Created",
            &[],
            &format!(r#"{{"digest":"{digest}","bytes":1000}}"#),
        );
        let timing = crate::node::Timing {
            request: Duration::from_millis(300),
            copy_bytes_per_sec: 1000,
            fetch: Duration::ZERO,
        };
        let late = Duration::from_millis(800);
        let node = async |answer: String, delay: Duration| {
            let (url, served) = answer_late(answer, delay).await;
            (Node::new(&url).with_timing(timing), served)
        };
        let (bytes_node, bytes_served) = node(stored.clone(), late).await;
        let (stream_node, _stream_served) = node(stored.clone(), late).await;
        let (too_late_node, _too_late_served) = node(stored, Duration::from_secs(3)).await;
        let empty = format!(r#"{{"digest":"{}","bytes":0}}"#, sha256(b""));
        let (empty_node, _empty_served) = node(answer("201 Created", &[], &empty), late).await;

        let started = tokio::time::Instant::now();
        let timed = async |call: Pin<Box<dyn Future<Output = _> + Send + '_>>| {
            let outcome: Result<BlobInfo, ClientError> = call.await;
            (outcome, started.elapsed())
        };
        let reader = std::io::Cursor::new(data.to_vec());
        let (from_bytes, from_stream, too_late, from_empty) = tokio::join!(
            timed(Box::pin(bytes_node.put_blob(data.clone()))),
            timed(Box::pin(stream_node.put_blob_stream(reader))),
            timed(Box::pin(too_late_node.put_blob(data.clone()))),
            timed(Box::pin(empty_node.put_blob(Bytes::new()))),
        );

        let info = BlobInfo {
            digest,
            bytes: 1000,
        };
        assert_eq!(from_bytes.0.unwrap(), info);
        assert!(from_bytes.1 >= late, "{:?}", from_bytes.1);
        let (_, body) = bytes_served.await.unwrap();
        assert_eq!(body, data);
        assert_eq!(from_stream.0.unwrap(), info);

        let error = too_late.0.unwrap_err();
        assert_eq!(error.code(), "unreachable", "{error}");
        assert!(
            error.to_string().contains("did not answer within 1.3s"),
            "{error}"
        );
        assert!(
            too_late.1 >= Duration::from_millis(1300),
            "{:?}",
            too_late.1
        );
        assert!(too_late.1 < Duration::from_secs(3), "{:?}", too_late.1);

        let error = from_empty.0.unwrap_err();
        assert!(
            error.to_string().contains("did not answer within 300ms"),
            "{error}"
        );
        assert!(from_empty.1 < late, "{:?}", from_empty.1);
    }

    #[test]
    fn the_allowance_is_the_bytes_at_the_copy_rate() {
        let wait = HeadWait::new(Duration::from_secs(120)).per_bytes_sent(BLOB_COPY_BYTES_PER_SEC);
        assert_eq!(wait.after_body(0), Duration::from_secs(120));
        assert_eq!(wait.after_body(64 << 30), Duration::from_secs(120 + 4096));
        assert_eq!(wait.after_body(8 << 20), Duration::from_millis(120_500));
        // 2^64 - 1 bytes: 2^40 - 1 s and 1 - 2^-24 s, to the nanosecond.
        assert_eq!(
            wait.after_body(u64::MAX),
            Duration::new(120 + (u64::MAX >> 24), 999_999_940)
        );
        let plain = HeadWait::from(Duration::from_secs(5));
        assert_eq!(plain.after_body(1 << 40), Duration::from_secs(5));
        let fetch = plain.with_extra(BLOB_FETCH_WAIT);
        assert_eq!(fetch.after_body(0), Duration::from_secs(605));
    }

    /// A download's head may wait for the node to fetch the blob: the
    /// usual timeout plus the fetch wait (here 300 ms + 1 s).
    #[tokio::test]
    async fn a_downloads_head_may_come_after_the_node_fetched_the_blob() {
        let digest = sha256(b"fetched");
        let timing = crate::node::Timing {
            request: Duration::from_millis(300),
            copy_bytes_per_sec: 1,
            fetch: Duration::from_secs(1),
        };
        let ok = answer("200 OK", &[format!("etag: \"{digest}\"")], "fetched");
        let (url, _served) = answer_late(ok.clone(), Duration::from_millis(800)).await;
        let node = Node::new(&url).with_timing(timing);
        let mut reader = node.get_blob(&digest, None).await.unwrap();
        let mut text = String::new();
        reader.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "fetched");

        // HEAD fetches nothing: the usual timeout.
        let (url, _served) = answer_late(ok, Duration::from_millis(800)).await;
        let node = Node::new(&url).with_timing(timing);
        let error = node.head_blob(&digest).await.unwrap_err();
        assert!(
            error.to_string().contains("did not answer within 300ms"),
            "{error}"
        );
    }

    /// A port nothing listens on.
    async fn closed_port() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    }

    #[tokio::test]
    async fn a_stream_goes_to_the_next_node_while_nothing_was_read() {
        let digest = sha256(b"streamed");
        let stored = format!(r#"{{"digest":"{digest}","bytes":8}}"#);
        let (second, served) = answer_once(answer("201 Created", &[], &stored)).await;
        let urls = [closed_port().await, second.server().to_owned()];
        let client = Client::new(&urls, Default::default()).unwrap();
        let reader = std::io::Cursor::new(b"streamed".to_vec());
        let info = client.put_blob_stream(reader).await.unwrap();
        assert_eq!(info.digest, digest);
        assert_eq!(served.await.unwrap().1, b"streamed");
    }

    #[tokio::test]
    async fn a_stream_is_not_resent_once_read_from() {
        // The first node hangs up once it has some of the body.
        let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let first_url = format!("http://{}", first.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = first.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buffer = vec![0u8; 64 << 10];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") || seen.len() < 4096 {
                let n = socket.read(&mut buffer).await.unwrap();
                assert!(n > 0);
                seen.extend_from_slice(&buffer[..n]);
            }
        });
        let second = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let urls = [
            first_url,
            format!("http://{}", second.local_addr().unwrap()),
        ];
        let client = Client::new(&urls, Default::default()).unwrap();
        let reader = std::io::Cursor::new(vec![5u8; 4 << 20]);
        let error = tokio::time::timeout(Duration::from_secs(20), client.put_blob_stream(reader))
            .await
            .expect("not resent to the second node, which never answers")
            .unwrap_err();
        assert_eq!(error.code(), "unreachable", "{error}");
        let resent = tokio::time::timeout(Duration::from_millis(200), second.accept()).await;
        assert!(resent.is_err(), "the second node was asked");
    }

    #[test]
    fn the_clients_blob_calls_can_be_spawned() {
        fn spawnable<T: Send + 'static>(_: &T) {}
        fn sendable<T: Send>(_: &T) {}
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let client = Client::new(&["http://127.0.0.1:9"], Default::default()).unwrap();
        let path = Path::new("x");
        sendable(&client.put_blob(Bytes::new()));
        sendable(&client.put_blob_file(path));
        sendable(&client.put_blob_stream(tokio::io::empty()));
        sendable(&client.get_blob("x", None));
        sendable(&client.get_blob_to_file("x", path));
        sendable(&client.head_blob("x"));
        sendable(&client.list_blobs());
        fn readable<T: Send + Unpin + 'static>() {}
        readable::<BlobReader>();
        let stream = async move {
            client.put_blob_stream(tokio::io::empty()).await.ok();
        };
        spawnable(&stream);
    }
}
