//! Blobs across nodes: an upload is acknowledged once it is durable on a
//! majority of the back-end nodes, and a node that lacks a blob fetches it
//! from a back-end node that has it, checking its digest.
//!
//! # Frames
//!
//! A blob crosses between nodes as a stream of frames, never whole:
//!
//! ```text
//! frame  = length u32 BE (of what follows) | flags u8 (bit 0: last) | payload
//! stream = head frame (postcard BlobHead: digest, size) | chunk frame ... | last chunk frame
//! ```
//!
//! With a cluster key every payload is sealed (`crate::security::seal`):
//! the head like any node-to-node body (a pushed blob's head bound to the
//! method and path and accepted once, a fetched blob's head bound to the
//! nonce of the request it answers), and each chunk bound to the head's
//! nonce, its index and its flags, so chunks cannot be reordered, dropped,
//! moved to another stream or cut short unseen. Without a key (a loopback
//! cluster) payloads travel plain. Either way the receiver writes the
//! chunks to a partial file and keeps the blob only if its sha256 is the
//! head's digest and its size the head's.
//!
//! # Majority
//!
//! The node that takes an upload stores it, then pushes it to the other
//! live back-end nodes at once. It answers once a majority of the back-end
//! nodes hold it (itself counted when it is one): a majority of the
//! replication voters (a node without the back-end role asks a back-end
//! node how many there are), and never fewer than a majority of the live
//! back-end nodes. The remaining pushes go on after the answer; their
//! failures are logged, and a node left without a copy fetches the blob
//! when it needs it.
//!
//! With an S3-compatible store (`--blob-store`), neither happens: the store
//! holds the blobs, and uploads go to it and fetches come from it
//! (`cluster::blob_s3`); [`BlobTransfer::remote`] says which.

use crate::blobs::{BlobError, BlobInfo, BlobStore, ChannelBody, Relay, Stored};
use crate::limits::{
    BLOB_FRAME_BYTES, BLOB_FRAMES_AHEAD, BLOB_IDLE_TIMEOUT, BLOB_PUSHES_MAX, BLOB_STREAMS_MAX,
    TRANSFER_TIMEOUT,
};
use crate::membership::View;
use crate::peer::Peer;
use crate::runtime::Digest;
use crate::security::Sealer;
use crate::security::key::Purpose;
use crate::security::seal::{Freshness, OVERHEAD};
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// The internal route that stores a pushed blob on this node (body: frames).
pub const BLOBS_PATH: &str = "/internal/v1/blobs";
/// The internal route that sends a stored blob as frames (body: its
/// digest), or only its size as JSON (body: the digest and [`SIZE_ONLY`]).
pub const BLOB_FETCH_PATH: &str = "/internal/v1/blobs/fetch";
/// What follows a digest asked for its size only.
pub const SIZE_ONLY: &str = " size";
/// The body that asks a back-end node for the number of voters (JSON
/// `{"voters": N}`), which a node without the back-end role needs to know
/// what a majority is.
pub const VOTERS: &str = "voters";

const LAST: u8 = 1;

/// What a stream carries, sent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlobHead {
    /// The blob's sha256.
    pub digest: [u8; 32],
    /// Its size in bytes.
    pub bytes: u64,
}

/// Why a stream was refused.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// Not frames of this format, or cut short.
    #[error("not a blob stream: {0}")]
    Malformed(String),
    /// A seal did not verify.
    #[error("a frame does not verify: {0}")]
    Forged(String),
    /// The bytes are not the head's.
    #[error("{0}")]
    Store(#[from] BlobError),
    /// Nothing arrived for too long (or the head not in time).
    #[error("the stream stalled (no bytes for {BLOB_IDLE_TIMEOUT:?}, or no head in time)")]
    Idle,
    /// The node takes its most blobs at once.
    #[error("the node takes its most blobs at once")]
    Busy,
}

/// Seals (or, without a key, only frames) the frames of one stream.
pub struct FrameWriter {
    sealer: Option<Arc<Sealer>>,
    head_nonce: [u8; 24],
    index: u64,
}

impl FrameWriter {
    /// A writer; its first frame must be [`head`](Self::head).
    pub fn new(sealer: Option<Arc<Sealer>>) -> Self {
        Self {
            sealer,
            head_nonce: [0; 24],
            index: 0,
        }
    }

    /// The head frame, sealed with `context`.
    pub fn head(&mut self, context: &[&[u8]], head: &BlobHead) -> Bytes {
        let plain = postcard::to_allocvec(head).expect("a head serializes");
        let payload = match &self.sealer {
            Some(sealer) => {
                let (sealed, nonce) = sealer.seal(Purpose::Http, context, &plain);
                self.head_nonce = nonce;
                sealed
            }
            None => plain,
        };
        self.index = 1;
        frame(0, &payload)
    }

    /// A chunk frame (`last` ends the stream).
    pub fn chunk(&mut self, data: &[u8], last: bool) -> Bytes {
        let flags = if last { LAST } else { 0 };
        let index = self.index.to_be_bytes();
        self.index += 1;
        match &self.sealer {
            Some(sealer) => {
                let flags = [flags];
                let context = chunk_context(&self.head_nonce, &index, &flags);
                let (sealed, _) = sealer.seal(Purpose::Http, &context, data);
                frame(flags[0], &sealed)
            }
            None => frame(flags, data),
        }
    }
}

fn chunk_context<'a>(
    head_nonce: &'a [u8; 24],
    index: &'a [u8; 8],
    flags: &'a [u8; 1],
) -> [&'a [u8]; 4] {
    [b"blob-chunk", head_nonce, index, flags]
}

fn frame(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + payload.len());
    out.extend_from_slice(&((payload.len() + 1) as u32).to_be_bytes());
    out.extend_from_slice(&[flags]);
    out.extend_from_slice(payload);
    out.freeze()
}

/// Reads and opens the frames of one stream from bytes as they arrive.
pub struct FrameReader {
    sealer: Option<Arc<Sealer>>,
    buffer: BytesMut,
    head_nonce: [u8; 24],
    index: u64,
    ended: bool,
}

/// The largest head a postcard encoding makes: the digest and the size as
/// a varint (at most 10 bytes).
const HEAD_PLAIN_BYTES_MAX: usize = 32 + 10;
/// The largest head payload a reader accepts: a head, sealed.
const HEAD_BYTES_MAX: usize = HEAD_PLAIN_BYTES_MAX + OVERHEAD;

/// The largest frame a reader accepts.
const FRAME_BYTES_MAX: usize = 1 + BLOB_FRAME_BYTES + OVERHEAD;

impl FrameReader {
    /// A reader; opens with `sealer` when the cluster has a key.
    pub fn new(sealer: Option<Arc<Sealer>>) -> Self {
        Self {
            sealer,
            buffer: BytesMut::new(),
            head_nonce: [0; 24],
            index: 0,
            ended: false,
        }
    }

    /// Takes bytes as they arrived.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame buffered: its flags and payload.
    fn frame(&mut self) -> Result<Option<(u8, Bytes)>, TransferError> {
        if self.buffer.len() < 4 {
            return Ok(None);
        }
        let length = u32::from_be_bytes(self.buffer[..4].try_into().expect("4 bytes")) as usize;
        // A head is small: a stream cannot make a node wait for a large one
        // before anything is authenticated.
        let max = if self.index == 0 {
            1 + HEAD_BYTES_MAX
        } else {
            FRAME_BYTES_MAX
        };
        if length == 0 || length > max {
            return Err(TransferError::Malformed(format!(
                "a frame of {length} bytes"
            )));
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        self.buffer.advance(4);
        let mut frame = self.buffer.split_to(length).freeze();
        let flags = frame.get_u8();
        Ok(Some((flags, frame)))
    }

    /// The head, once its frame is buffered, opened with `context` and
    /// `freshness`.
    pub fn head(
        &mut self,
        context: &[&[u8]],
        freshness: Freshness,
    ) -> Result<Option<BlobHead>, TransferError> {
        let Some((flags, payload)) = self.frame()? else {
            return Ok(None);
        };
        if self.index != 0 || flags != 0 || payload.len() > HEAD_BYTES_MAX {
            return Err(TransferError::Malformed(
                "the first frame is not a head".into(),
            ));
        }
        let plain = match &self.sealer {
            Some(sealer) => {
                let opened = sealer
                    .open(Purpose::Http, context, &payload, freshness)
                    .map_err(|e| TransferError::Forged(e.to_string()))?;
                self.head_nonce = opened.nonce;
                Bytes::from(opened.plaintext)
            }
            None => payload,
        };
        self.index = 1;
        match postcard::take_from_bytes::<BlobHead>(&plain) {
            Ok((head, [])) => Ok(Some(head)),
            Ok(_) => Err(TransferError::Malformed(
                "the head has bytes after it (sealed, to a node without the key?)".into(),
            )),
            Err(e) => Err(TransferError::Malformed(format!("the head: {e}"))),
        }
    }

    /// The next chunk buffered, and whether it is the last.
    pub fn chunk(&mut self) -> Result<Option<(Bytes, bool)>, TransferError> {
        if self.ended {
            return Err(TransferError::Malformed(
                "bytes after the last frame".into(),
            ));
        }
        let Some((flags, payload)) = self.frame()? else {
            return Ok(None);
        };
        if flags & !LAST != 0 {
            return Err(TransferError::Malformed(format!(
                "unknown flags {flags:#x}"
            )));
        }
        let index = self.index.to_be_bytes();
        self.index += 1;
        let data = match &self.sealer {
            Some(sealer) => {
                let flags = [flags];
                let context = chunk_context(&self.head_nonce, &index, &flags);
                let opened = sealer
                    .open(Purpose::Http, &context, &payload, Freshness::Bound)
                    .map_err(|e| TransferError::Forged(e.to_string()))?;
                Bytes::from(opened.plaintext)
            }
            None => payload,
        };
        let last = flags & LAST != 0;
        self.ended = last;
        Ok(Some((data, last)))
    }

    /// Whether the last frame was read and nothing follows it.
    fn finished(&self) -> bool {
        self.ended && self.buffer.is_empty()
    }
}

/// The seal context of a blob pushed to node `to`: bound to the route and
/// to the node, so a stream redirected to another node is refused there
/// (and cannot be counted as the copy the pusher meant).
pub fn push_context(to: &str) -> [&[u8]; 4] {
    [b"request", b"POST", BLOBS_PATH.as_bytes(), to.as_bytes()]
}

/// What a receiver asks of a stream besides its seals.
pub struct Expect<'a> {
    /// The head's seal context.
    pub context: &'a [&'a [u8]],
    /// How the head is opened: `Once` for a pushed stream, `Bound` for an
    /// answer.
    pub freshness: Freshness,
    /// The blob asked for, when the receiver asked for one (a fetch).
    pub digest: Option<Digest>,
    /// Takes a place among the node's incoming blobs once the head is
    /// opened (so nobody without the key holds one); `None` from it
    /// refuses the stream as busy.
    pub admit: &'a (dyn Fn() -> Option<tokio::sync::OwnedSemaphorePermit> + Sync),
    /// The download to serve the copy to as it is made, if any
    /// ([`crate::blobs::Relay`]).
    pub relay: Option<Relay>,
}

/// Why a stream was refused, with the head's nonce once the head was
/// opened (an answer can then be sealed to it).
#[derive(Debug)]
pub struct Refused {
    /// Why.
    pub error: TransferError,
    /// The head's nonce, if it was opened.
    pub nonce: Option<[u8; 24]>,
}

/// Reads a framed stream from `body` into `store`: its head within
/// [`BODY_READ_BASE`] (opened as `expect` says), then its chunks, each
/// within [`BLOB_IDLE_TIMEOUT`]. Keeps the blob only if it is whole and has
/// the head's digest and size. Returns it and the head's nonce. A blob
/// already stored here is answered as soon as the head is read.
///
/// [`BODY_READ_BASE`]: crate::limits::BODY_READ_BASE
pub async fn receive<B>(
    mut body: B,
    mut reader: FrameReader,
    store: &BlobStore,
    expect: Expect<'_>,
) -> Result<(Stored, [u8; 24]), Refused>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut next = async || -> Result<Option<Bytes>, TransferError> {
        loop {
            let frame = tokio::time::timeout(BLOB_IDLE_TIMEOUT, body.frame())
                .await
                .map_err(|_| TransferError::Idle)?;
            match frame {
                None => return Ok(None),
                Some(Err(error)) => {
                    return Err(TransferError::Malformed(format!(
                        "the body broke off: {error}"
                    )));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    };
    let unopened = |error: TransferError| Refused { error, nonce: None };
    let head = async {
        loop {
            if let Some(head) = reader.head(expect.context, expect.freshness)? {
                return Ok(head);
            }
            let Some(bytes) = next().await? else {
                return Err(TransferError::Malformed(
                    "the stream ended before its head".into(),
                ));
            };
            reader.push(&bytes);
        }
    };
    let head = tokio::time::timeout(crate::limits::BODY_READ_BASE, head)
        .await
        .map_err(|_| unopened(TransferError::Idle))?
        .map_err(unopened)?;
    let nonce = reader.head_nonce;
    let refused = |error: TransferError| Refused {
        error,
        nonce: Some(nonce),
    };
    let digest = Digest::from(head.digest);
    if expect.digest.is_some_and(|asked| asked != digest) {
        return Err(refused(TransferError::Malformed(format!(
            "sent blob {digest} when asked for another"
        ))));
    }
    let ceiling = store.ceiling();
    if head.bytes > ceiling {
        return Err(refused(BlobError::TooLarge { ceiling }.into()));
    }
    if store.keep_if_present(&digest) == Some(head.bytes) {
        let info = BlobInfo {
            digest,
            bytes: head.bytes,
        };
        return Ok((Stored { info, new: false }, nonce));
    }
    let Some(_place) = (expect.admit)() else {
        return Err(refused(TransferError::Busy));
    };
    let mut upload = store.upload().map_err(|e| refused(e.into()))?;
    if let Some(relay) = expect.relay {
        upload.relay(relay, head.bytes);
    }
    loop {
        match reader.chunk().map_err(refused)? {
            Some((data, last)) => {
                if upload.bytes() + data.len() as u64 > head.bytes {
                    return Err(refused(TransferError::Malformed(format!(
                        "more bytes than the head's {}",
                        head.bytes
                    ))));
                }
                upload.write(data).await.map_err(|e| refused(e.into()))?;
                if last {
                    break;
                }
            }
            None => {
                let Some(bytes) = next().await.map_err(refused)? else {
                    return Err(refused(TransferError::Malformed(
                        "the stream ended before its last frame".into(),
                    )));
                };
                reader.push(&bytes);
            }
        }
    }
    // Nothing may follow the last frame.
    if let Some(bytes) = next().await.map_err(refused)? {
        reader.push(&bytes);
    }
    if !reader.finished() {
        return Err(refused(TransferError::Malformed(
            "bytes after the last frame".into(),
        )));
    }
    if upload.bytes() != head.bytes {
        return Err(refused(TransferError::Malformed(format!(
            "{} bytes arrived, the head said {}",
            upload.bytes(),
            head.bytes
        ))));
    }
    let stored = upload
        .finish(Some(digest))
        .await
        .map_err(|e| refused(e.into()))?;
    Ok((stored, nonce))
}

/// A body streaming blob `info` from `store` as frames: the head sealed
/// with `context`, then its chunks.
/// Returns the body and the nonce the head was sealed with (zeros without a
/// key), which the answer to a pushed stream is bound to.
pub fn send(
    store: &BlobStore,
    info: BlobInfo,
    mut writer: FrameWriter,
    context: &[&[u8]],
    place: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Result<(ChannelBody, [u8; 24]), BlobError> {
    let head = BlobHead {
        digest: info.digest.to_bytes(),
        bytes: info.bytes,
    };
    let first = writer.head(context, &head);
    let nonce = writer.head_nonce;
    let mut chunks = store.reader(&info.digest, None, place)?;
    let (tx, rx) = mpsc::channel(BLOB_FRAMES_AHEAD);
    tokio::spawn(async move {
        if tx.send(first).await.is_err() {
            return;
        }
        let mut pending = BytesMut::new();
        let mut sent = 0u64;
        while let Some(chunk) = chunks.recv().await {
            pending.extend_from_slice(&chunk);
            while pending.len() >= BLOB_FRAME_BYTES {
                let data = pending.split_to(BLOB_FRAME_BYTES);
                sent += data.len() as u64;
                let last = sent == info.bytes;
                if tx.send(writer.chunk(&data, last)).await.is_err() {
                    return;
                }
                if last {
                    return;
                }
            }
        }
        sent += pending.len() as u64;
        if sent == info.bytes {
            let _ = tx.send(writer.chunk(&pending, true)).await;
        }
        // Short of the size (the file could not be read): the stream ends
        // without its last frame, and the receiver keeps nothing.
    });
    Ok((ChannelBody::new(rx, None), nonce))
}

/// Pushes and fetches blobs between nodes.
#[derive(Clone)]
pub struct BlobTransfer {
    view: watch::Receiver<View>,
    peer: Peer,
    sealer: Option<Arc<Sealer>>,
    store: BlobStore,
    /// Places for the blobs this node takes at once (uploads, pushes).
    incoming: Arc<tokio::sync::Semaphore>,
    /// Places for the blobs this node sends at once (downloads, fetches).
    outgoing: Arc<tokio::sync::Semaphore>,
    /// The S3-compatible store (`--blob-store`), which then holds the blobs
    /// instead of a majority of the back-end nodes (`cluster::blob_s3`).
    remote: Option<crate::cluster::blob_s3::S3Store>,
}

impl std::fmt::Debug for BlobTransfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobTransfer").finish_non_exhaustive()
    }
}

impl BlobTransfer {
    /// Transfers for `store`, reaching the back-end nodes of `view` through
    /// `peer` and sealing with `sealer`.
    pub fn new(
        view: watch::Receiver<View>,
        peer: Peer,
        sealer: Option<Arc<Sealer>>,
        store: BlobStore,
    ) -> Self {
        Self {
            view,
            peer,
            sealer,
            store,
            incoming: Arc::new(tokio::sync::Semaphore::new(BLOB_STREAMS_MAX)),
            outgoing: Arc::new(tokio::sync::Semaphore::new(BLOB_STREAMS_MAX)),
            remote: None,
        }
    }

    /// The same, with blobs kept in the S3-compatible store `remote`.
    pub fn with_remote(mut self, remote: Option<crate::cluster::blob_s3::S3Store>) -> Self {
        self.remote = remote;
        self
    }

    /// The S3-compatible store, if the node has one (`--blob-store`): then
    /// uploads go to it instead of to the other back-end nodes, and a blob
    /// this node lacks comes from it.
    pub fn remote(&self) -> Option<&crate::cluster::blob_s3::S3Store> {
        self.remote.as_ref()
    }

    /// A place among the blobs this node takes at once
    /// ([`BLOB_STREAMS_MAX`]: uploads and copies pushed here), held until
    /// dropped; `None` when all are taken.
    pub fn admit_incoming(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.incoming.clone().try_acquire_owned().ok()
    }

    /// A place among the blobs this node sends at once
    /// ([`BLOB_STREAMS_MAX`]: downloads and copies fetched from here), so
    /// readers, however many or slow, never take the places uploads and
    /// copies need.
    pub fn admit_outgoing(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.outgoing.clone().try_acquire_owned().ok()
    }

    /// This node's id.
    pub fn me(&self) -> String {
        self.view.borrow().me.clone()
    }

    /// The store.
    pub fn store(&self) -> &BlobStore {
        &self.store
    }

    /// The other live back-end nodes (id, HTTP address), oldest first, and
    /// whether this node is a back-end node.
    fn back_ends(&self) -> (Vec<(String, String)>, bool) {
        let view = self.view.borrow();
        let me = view.back_ends().any(|m| m.node_id == view.me);
        let others = (view.back_ends())
            .filter(|m| m.node_id != view.me)
            .map(|m| (m.node_id.clone(), m.http.clone()))
            .collect();
        (others, me)
    }

    /// Makes blob `info` (stored here) durable on a majority of the back-end
    /// nodes: `voters` is the number of replication voters when this node
    /// knows it. Pushes go to every other live back-end node at once; the
    /// answer comes once a majority holds it, and the rest go on.
    pub async fn replicate(&self, info: BlobInfo, voters: Option<usize>) -> Result<(), String> {
        let (others, me) = self.back_ends();
        let voters = match voters {
            Some(voters) => voters,
            // Not a back-end node: a back-end node says how many voters
            // there are, so the majority is of them, not of those live.
            None => self.voters(&others).await?,
        };
        let live = others.len() + usize::from(me);
        let needed = voters.max(live) / 2 + 1;
        let mut held = usize::from(me);
        let (tx, mut rx) = mpsc::channel(others.len().max(1));
        let pushes = Arc::new(tokio::sync::Semaphore::new(BLOB_PUSHES_MAX));
        for (node, url) in others {
            let (transfer, tx, pushes) = (self.clone(), tx.clone(), pushes.clone());
            tokio::spawn(async move {
                let _permit = pushes.acquire_owned().await;
                let pushed = transfer.push(&node, &url, info).await;
                let _ = tx.send((node, pushed)).await;
            });
        }
        drop(tx);
        let mut errors = Vec::new();
        while held < needed {
            let Some((node, pushed)) = rx.recv().await else {
                break;
            };
            match pushed {
                Ok(()) => held += 1,
                Err(error) => errors.push(format!("{node}: {error}")),
            }
        }
        // The pushes still going on after the answer: their failures are
        // logged (those nodes fetch the blob when they need it).
        let digest = info.digest;
        tokio::spawn(async move {
            while let Some((node, pushed)) = rx.recv().await {
                if let Err(error) = pushed {
                    tracing::warn!(%node, %digest, %error, "a blob was not copied to a back-end node; it fetches it when it needs it");
                }
            }
        });
        if held >= needed {
            return Ok(());
        }
        errors.sort();
        Err(format!(
            "the blob is on {held} of the {needed} back-end nodes a majority needs: {}",
            if errors.is_empty() {
                "too few are live".to_string()
            } else {
                errors.join("; ")
            }
        ))
    }

    /// The number of voters, from the first of `back_ends` that answers.
    async fn voters(&self, back_ends: &[(String, String)]) -> Result<usize, String> {
        match self.first_answer(back_ends, VOTERS, "voters").await {
            Ok(Some(voters)) => Ok(voters as usize),
            Ok(None) => Err("no back-end node said how many voters hold the journal".into()),
            Err(errors) => Err(format!(
                "no back-end node said how many voters hold the journal: {errors}"
            )),
        }
    }

    /// Pushes blob `info` to the node at `url`.
    async fn push(&self, node: &str, url: &str, info: BlobInfo) -> Result<(), String> {
        let writer = FrameWriter::new(self.sealer.clone());
        let context = push_context(node);
        let (body, nonce) =
            send(&self.store, info, writer, &context, None).map_err(|e| e.to_string())?;
        let (status, answer) = self
            .peer
            .post_frames(&format!("{url}{BLOBS_PATH}"), body, nonce, TRANSFER_TIMEOUT)
            .await
            .map_err(|e| e.message)?;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&answer)
            ))
        }
    }

    /// Makes sure blob `digest` is stored here, fetching it from the first
    /// other live back-end node that has it. `Ok(None)`: none has it.
    pub async fn ensure(&self, digest: &Digest) -> Result<Option<u64>, String> {
        self.ensure_relayed(digest, None).await
    }

    /// The same, serving the copy to `relay` as it is made (when a node
    /// that has the blob starts sending it; see [`crate::blobs::Relay`]).
    pub async fn ensure_relayed(
        &self,
        digest: &Digest,
        mut relay: Option<Relay>,
    ) -> Result<Option<u64>, String> {
        if let Some(size) = self.store.size(digest) {
            return Ok(Some(size));
        }
        let (others, _) = self.back_ends();
        let mut errors = Vec::new();
        for (node, url) in others {
            match self.fetch(&url, digest, &mut relay).await {
                Ok(Some(size)) => return Ok(Some(size)),
                Ok(None) => {}
                Err(error) => errors.push(format!("{node}: {error}")),
            }
        }
        if errors.is_empty() {
            Ok(None)
        } else {
            Err(format!(
                "blob {digest} could not be fetched: {}",
                errors.join("; ")
            ))
        }
    }

    /// The size of blob `digest`, from this node's copy or else from the
    /// first other live back-end node that has one (nothing is copied).
    pub async fn locate(&self, digest: &Digest) -> Result<Option<u64>, String> {
        if let Some(size) = self.store.size(digest) {
            return Ok(Some(size));
        }
        let (others, _) = self.back_ends();
        let body = format!("{digest}{SIZE_ONLY}");
        self.first_answer(&others, &body, "bytes")
            .await
            .map_err(|errors| format!("blob {digest} could not be located: {errors}"))
    }

    /// The number `field` of the first JSON answer to `body` on the fetch
    /// route, asking `back_ends` in turn. `Ok(None)`: each answered that it
    /// has nothing (404); `Err`: the others' failures, when none answered.
    async fn first_answer(
        &self,
        back_ends: &[(String, String)],
        body: &str,
        field: &str,
    ) -> Result<Option<u64>, String> {
        let mut errors = Vec::new();
        for (node, url) in back_ends {
            let asked = self
                .peer
                .post_internal(
                    &format!("{url}{BLOB_FETCH_PATH}"),
                    Bytes::from(body.to_owned()),
                    TRANSFER_TIMEOUT,
                )
                .await;
            match asked {
                Ok((status, answer)) if status.is_success() => {
                    let value = serde_json::from_slice::<serde_json::Value>(&answer)
                        .ok()
                        .and_then(|v| v.get(field)?.as_u64());
                    match value {
                        Some(value) => return Ok(Some(value)),
                        None => errors.push(format!("{node} answered no {field}")),
                    }
                }
                Ok((status, _)) if status == hyper::StatusCode::NOT_FOUND => {}
                Ok((status, answer)) => errors.push(format!(
                    "{node} answered {status}: {}",
                    String::from_utf8_lossy(&answer)
                )),
                Err(error) => errors.push(format!("{node}: {}", error.message)),
            }
        }
        if errors.is_empty() {
            Ok(None)
        } else {
            Err(errors.join("; "))
        }
    }

    /// Fetches blob `digest` from the node at `url` into the store,
    /// serving it to `relay` (taken once the node answers with the blob).
    async fn fetch(
        &self,
        url: &str,
        digest: &Digest,
        relay: &mut Option<Relay>,
    ) -> Result<Option<u64>, String> {
        let fetched = self
            .peer
            .fetch_frames(
                &format!("{url}{BLOB_FETCH_PATH}"),
                Bytes::from(digest.to_string()),
                TRANSFER_TIMEOUT,
            )
            .await
            .map_err(|e| e.message)?;
        let (status, nonce, body) = match fetched {
            crate::peer::Fetched::Frames { nonce, body } => (hyper::StatusCode::OK, nonce, body),
            crate::peer::Fetched::Answer { status, .. }
                if status == hyper::StatusCode::NOT_FOUND =>
            {
                return Ok(None);
            }
            crate::peer::Fetched::Answer { status, body } => {
                return Err(format!(
                    "answered {status}: {}",
                    String::from_utf8_lossy(&body)
                ));
            }
        };
        let code = status.as_u16().to_be_bytes();
        let context = crate::peer::answer_context(&nonce, &code);
        let reader = FrameReader::new(self.sealer.clone());
        let expect = Expect {
            context: &context,
            freshness: Freshness::Bound,
            digest: Some(*digest),
            admit: &|| self.admit_incoming(),
            relay: relay.take(),
        };
        let (stored, _) = receive(body, reader, &self.store, expect)
            .await
            .map_err(|refused| refused.error.to_string())?;
        Ok(Some(stored.info.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::key::Keyring;

    fn sealer() -> Arc<Sealer> {
        let keyring = Keyring::from_secrets(&[[9u8; 32]]).unwrap();
        Arc::new(Sealer::new(keyring, "test-cluster"))
    }

    fn stream(sealer: Option<Arc<Sealer>>, bytes: &[u8], chunk: usize) -> Vec<Bytes> {
        let mut writer = FrameWriter::new(sealer);
        let head = BlobHead {
            digest: Digest::of(bytes).to_bytes(),
            bytes: bytes.len() as u64,
        };
        let mut frames = vec![writer.head(&[b"ctx"], &head)];
        let chunks: Vec<&[u8]> = bytes.chunks(chunk).collect();
        for (i, c) in chunks.iter().enumerate() {
            frames.push(writer.chunk(c, i + 1 == chunks.len()));
        }
        frames
    }

    fn expect(freshness: Freshness) -> Expect<'static> {
        Expect {
            context: &[b"ctx"],
            freshness,
            digest: None,
            admit: &|| {
                let places = Arc::new(tokio::sync::Semaphore::new(1));
                places.try_acquire_owned().ok()
            },
            relay: None,
        }
    }

    fn body(frames: Vec<Bytes>) -> http_body_util::Full<Bytes> {
        let all: Vec<u8> = frames.concat();
        http_body_util::Full::new(Bytes::from(all))
    }

    async fn take(
        sealer: Option<Arc<Sealer>>,
        frames: Vec<Bytes>,
    ) -> Result<Stored, TransferError> {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path(), 1 << 30).unwrap();
        let reader = FrameReader::new(sealer);
        let taken = receive(body(frames), reader, &store, expect(Freshness::Once)).await;
        if taken.is_err() {
            assert!(
                store.list().is_empty(),
                "nothing is kept of a refused stream"
            );
        }
        taken
            .map(|(stored, _)| stored)
            .map_err(|refused| refused.error)
    }

    #[tokio::test]
    async fn a_stream_carries_a_blob_sealed_or_plain() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        for sealer in [None, Some(sealer())] {
            let stored = take(sealer.clone(), stream(sealer.clone(), &bytes, 65_536))
                .await
                .unwrap();
            assert_eq!(stored.info.digest, Digest::of(&bytes));
        }
    }

    #[tokio::test]
    async fn a_stream_cut_reordered_or_altered_keeps_nothing() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        let s = sealer();
        // Each case has a stream of its own: a head is accepted once.
        let fresh = || stream(Some(s.clone()), &bytes, 65_536);
        // Cut before its last frame.
        let frames = fresh();
        let cut = frames[..frames.len() - 1].to_vec();
        assert!(matches!(
            take(Some(s.clone()), cut).await,
            Err(TransferError::Malformed(_))
        ));
        // Two chunks swapped.
        let mut swapped = fresh();
        swapped.swap(1, 2);
        let taken = take(Some(s.clone()), swapped).await;
        assert!(
            matches!(&taken, Err(TransferError::Forged(m)) if !m.contains("replayed")),
            "{taken:?}"
        );
        // A byte flipped in a chunk.
        let mut flipped = fresh();
        let mut chunk = flipped[2].to_vec();
        let at = chunk.len() - 20;
        chunk[at] ^= 1;
        flipped[2] = Bytes::from(chunk);
        let taken = take(Some(s.clone()), flipped).await;
        assert!(
            matches!(&taken, Err(TransferError::Forged(m)) if !m.contains("replayed")),
            "{taken:?}"
        );
        // Plain frames whose bytes are not the head's digest.
        let mut plain = stream(None, &bytes, 65_536);
        let mut chunk = plain[1].to_vec();
        chunk[10] ^= 1;
        plain[1] = Bytes::from(chunk);
        assert!(matches!(
            take(None, plain).await,
            Err(TransferError::Store(BlobError::DigestMismatch { .. }))
        ));
        // A frame longer than any a writer makes.
        let huge = vec![Bytes::from((u32::MAX).to_be_bytes().to_vec())];
        assert!(matches!(
            take(None, huge).await,
            Err(TransferError::Malformed(_))
        ));
        // A stream replayed is refused the second time (its head is
        // accepted once).
        let frames = fresh();
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path(), 1 << 30).unwrap();
        for expect_ok in [true, false] {
            let reader = FrameReader::new(Some(s.clone()));
            let taken = receive(
                body(frames.clone()),
                reader,
                &store,
                expect(Freshness::Once),
            )
            .await;
            assert_eq!(taken.is_ok(), expect_ok, "{taken:?}");
        }
    }

    #[tokio::test]
    async fn a_pushed_stream_opens_only_at_its_node_and_a_fetch_only_as_the_blob_asked() {
        let s = sealer();
        let bytes = b"to one node".to_vec();
        let head = BlobHead {
            digest: Digest::of(&bytes).to_bytes(),
            bytes: bytes.len() as u64,
        };
        let mut writer = FrameWriter::new(Some(s.clone()));
        let frames = vec![
            writer.head(&push_context("n2"), &head),
            writer.chunk(&bytes, true),
        ];
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path(), 1 << 30).unwrap();
        let admit = || {
            Arc::new(tokio::sync::Semaphore::new(1))
                .try_acquire_owned()
                .ok()
        };
        // Redirected to n3, refused there; then taken by n2.
        for (at, asked, taken) in [
            ("n3", None, false),
            ("n2", Some(Digest::of(b"another blob")), false),
            ("n2", None, true),
        ] {
            let context = push_context(at);
            let expect = Expect {
                context: &context,
                freshness: Freshness::Bound,
                digest: asked,
                admit: &admit,
                relay: None,
            };
            let reader = FrameReader::new(Some(s.clone()));
            let got = receive(body(frames.clone()), reader, &store, expect).await;
            assert_eq!(got.is_ok(), taken, "{at} {asked:?}: {got:?}");
        }
        assert_eq!(store.list().len(), 1);
    }
}
