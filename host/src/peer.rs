//! HTTP exchanges with other cohort processes (node to node, and the CLI
//! to a node): one pooled keep-alive client, and every exchange bounded in
//! time, so a peer that stops answering never holds a caller forever.
//!
//! Node-to-node requests ([`Peer::post_internal`], [`Peer::post_postcard`])
//! are sealed with the cluster key when the node has one
//! ([`crate::security::seal`]): the body of the request is bound to its
//! method and path, the answer to the request's nonce and its status, so
//! neither can be read, altered, replayed or moved by anyone without the
//! key. Requests to the public API carry the caller's token and may use
//! TLS (`https://` URLs).

use crate::fault::Partition;
use crate::security::Sealer;
use crate::security::key::Purpose;
use crate::security::seal::Freshness;
use bytes::Bytes;
use cohort_client::transport::Transport;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// Content type of a sealed node-to-node body.
pub const SEALED_CONTENT_TYPE: &str = "application/x-cohort-sealed";

/// Content type of a framed blob stream (`cluster::blob_transfer`).
pub const FRAMES_CONTENT_TYPE: &str = "application/x-cohort-blob-frames";

/// The sealing context of a node-to-node request.
pub fn request_context<'a>(method: &'a [u8], path: &'a [u8]) -> [&'a [u8]; 3] {
    [b"request", method, path]
}

/// The sealing context of the answer to the request sealed with `nonce`.
pub fn answer_context<'a>(nonce: &'a [u8; 24], status: &'a [u8; 2]) -> [&'a [u8]; 3] {
    [b"answer", nonce, status]
}

/// A pooled HTTP client. Cheap to clone.
#[derive(Clone)]
pub struct Peer {
    transport: Transport,
    sealer: Option<Arc<Sealer>>,
    /// A fault test's partition: requests to an address it cuts off fail
    /// at once, as unreachable.
    partition: Option<Partition>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("sealed", &self.sealer.is_some())
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl Default for Peer {
    fn default() -> Self {
        Self::new(None, None, None).expect("a client without TLS roots or token")
    }
}

impl Peer {
    /// A client. `tls`: how to trust `https://` servers (`None`: trust
    /// none, for nodes, which talk plain HTTP with sealed bodies);
    /// `sealer`: seals node-to-node requests; `token`: sent as a bearer
    /// token with every public request.
    pub fn new(
        tls: Option<rustls::ClientConfig>,
        sealer: Option<Arc<Sealer>>,
        token: Option<&str>,
    ) -> anyhow::Result<Self> {
        let tls = tls.unwrap_or_else(crate::security::tls::trusting_nothing);
        Ok(Self {
            transport: Transport::new(tls, token).map_err(anyhow::Error::msg)?,
            sealer,
            partition: None,
        })
    }

    /// A node's client for other nodes.
    pub fn node(sealer: Option<Arc<Sealer>>) -> Self {
        Self::new(None, sealer, None).expect("a client without TLS roots or token")
    }

    /// This client, cut off from what `partition` lists (fault tests).
    pub fn partitioned(mut self, partition: Option<Partition>) -> Self {
        self.partition = partition;
        self
    }

    /// Posts `body` to a node-to-node route at `url`, sealed when this node
    /// has a cluster key, and returns the answer, opened. A `401` means the
    /// peer refused our key: it did not act.
    pub async fn post_internal(
        &self,
        url: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), PeerError> {
        let Some(sealer) = &self.sealer else {
            return self
                .exchange_once(Method::POST, url, "application/octet-stream", body, timeout)
                .await;
        };
        let (sealed, nonce) = seal_request(sealer, url, &body)?;
        let (status, answer) = self
            .exchange_once(Method::POST, url, SEALED_CONTENT_TYPE, sealed, timeout)
            .await?;
        if status == StatusCode::UNAUTHORIZED {
            return Err(PeerError {
                message: format!(
                    "{url} refused this node's cluster key: {}",
                    String::from_utf8_lossy(&answer)
                ),
                not_acted_on: true,
            });
        }
        open_answer(sealer, url, &nonce, status, &answer).map(|plain| (status, plain))
    }

    /// Posts a framed blob stream (`cluster::blob_transfer`) whose head was
    /// sealed with nonce `head_nonce` (zeros without a key) and returns
    /// the answer, opened: bound to that nonce. `timeout` bounds the wait
    /// for the answer's head; the stream itself is bounded by its reader.
    pub async fn post_frames(
        &self,
        url: &str,
        body: crate::blobs::ChannelBody,
        head_nonce: [u8; 24],
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), PeerError> {
        self.check_partition(url)?;
        let body = body.map_err(|never| match never {}).boxed();
        let response = self
            .post_streamed(url, FRAMES_CONTENT_TYPE, body, timeout)
            .await?;
        let status = response.status();
        let answer = read_answer(url, response.into_body(), timeout).await?;
        // A refused stream (401) is answered plain: the node opened nothing.
        match &self.sealer {
            Some(sealer) if status != StatusCode::UNAUTHORIZED => {
                open_answer(sealer, url, &head_nonce, status, &answer).map(|plain| (status, plain))
            }
            _ => Ok((status, answer)),
        }
    }

    /// Posts `body` (a blob's digest) to a route that answers a framed blob
    /// stream: the stream, unread, with the nonce its head is bound to, or
    /// any other answer whole and opened.
    pub async fn fetch_frames(
        &self,
        url: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Fetched, PeerError> {
        self.check_partition(url)?;
        let (body, nonce, content_type) = match &self.sealer {
            Some(sealer) => {
                let (sealed, nonce) = seal_request(sealer, url, &body)?;
                (sealed, nonce, SEALED_CONTENT_TYPE)
            }
            None => (body, [0; 24], "application/octet-stream"),
        };
        let body = cohort_client::transport::full(body);
        let response = self.post_streamed(url, content_type, body, timeout).await?;
        let status = response.status();
        let framed = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == FRAMES_CONTENT_TYPE.as_bytes());
        if status == StatusCode::OK && framed {
            return Ok(Fetched::Frames {
                nonce,
                body: response.into_body(),
            });
        }
        let answer = read_answer(url, response.into_body(), timeout).await?;
        let body = match &self.sealer {
            Some(sealer) if status != StatusCode::UNAUTHORIZED => {
                open_answer(sealer, url, &nonce, status, &answer)?
            }
            _ => answer,
        };
        Ok(Fetched::Answer { status, body })
    }

    /// Posts `body` to `url` and returns the answer with its body unread.
    async fn post_streamed(
        &self,
        url: &str,
        content_type: &'static str,
        body: cohort_client::transport::Body,
        timeout: Duration,
    ) -> Result<hyper::Response<hyper::body::Incoming>, PeerError> {
        self.transport
            .send(
                Method::POST,
                url,
                self::content_type(content_type),
                body,
                timeout.into(),
            )
            .await
            .map_err(|e| PeerError {
                message: e.message,
                not_acted_on: e.not_sent,
            })
    }

    fn check_partition(&self, url: &str) -> Result<(), PeerError> {
        if let Some(partition) = &self.partition
            && partition.blocks_url(url)
        {
            return Err(PeerError {
                message: format!("{url}: cut off by fault injection"),
                not_acted_on: true,
            });
        }
        Ok(())
    }

    /// Sends `body` with `method` to `url` and reads the whole answer,
    /// failing past `timeout`. Transport failures are messages that name
    /// the URL; any HTTP status is returned for the caller to judge.
    pub async fn exchange(
        &self,
        method: Method,
        url: &str,
        content_type: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), String> {
        self.exchange_once(method, url, content_type, body, timeout)
            .await
            .map_err(|e| e.message)
    }

    /// Posts `message` (postcard) to a cohort internal route at `url` and
    /// returns the answer's body; an HTTP error status is a failure the
    /// peer did not act on.
    pub async fn post_postcard<T: serde::Serialize>(
        &self,
        url: &str,
        message: &T,
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        let (status, body) = self
            .post_internal(url, Bytes::from(cohort_master::encode(message)), timeout)
            .await?;
        if !status.is_success() {
            return Err(PeerError {
                message: format!(
                    "{url} answered {status}: {}",
                    String::from_utf8_lossy(&body)
                ),
                not_acted_on: true,
            });
        }
        Ok(body)
    }

    /// [`exchange`](Self::exchange), telling a failure the peer cannot have
    /// acted on (safe to send again anywhere) from one after which it may
    /// have.
    pub async fn exchange_once(
        &self,
        method: Method,
        url: &str,
        content_type: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), PeerError> {
        self.check_partition(url)?;
        let answer = self
            .transport
            .exchange(method, url, content_type, body, timeout)
            .await
            .map_err(|e| PeerError {
                message: e.message,
                not_acted_on: e.not_sent,
            })?;
        Ok((answer.status, answer.body))
    }
}

/// `body` sealed as a POST to `url`'s path, and its nonce.
fn seal_request(sealer: &Sealer, url: &str, body: &[u8]) -> Result<(Bytes, [u8; 24]), PeerError> {
    let path = url
        .parse::<hyper::Uri>()
        .map(|uri| uri.path().to_string())
        .map_err(|e| PeerError {
            message: format!("{url}: {e}"),
            not_acted_on: true,
        })?;
    let (sealed, nonce) = sealer.seal(
        Purpose::Http,
        &request_context(b"POST", path.as_bytes()),
        body,
    );
    Ok((Bytes::from(sealed), nonce))
}

/// Opens the answer `answer` with `status` to the request (or stream)
/// sealed with `nonce`.
fn open_answer(
    sealer: &Sealer,
    url: &str,
    nonce: &[u8; 24],
    status: StatusCode,
    answer: &[u8],
) -> Result<Bytes, PeerError> {
    let code = status.as_u16().to_be_bytes();
    match sealer.open(
        Purpose::Http,
        &answer_context(nonce, &code),
        answer,
        Freshness::Bound,
    ) {
        Ok(opened) => Ok(Bytes::from(opened.plaintext)),
        Err(error) => {
            crate::security::counters::refused(
                crate::security::counters::what::ANSWER,
                error.reason(),
            );
            Err(PeerError {
                message: format!("the answer from {url} does not verify: {error}"),
                not_acted_on: false,
            })
        }
    }
}

/// The whole answer body from `url`, read within `timeout` and no further
/// than a node-to-node answer can be (answers to blob streams are small
/// JSON).
async fn read_answer(
    url: &str,
    body: hyper::body::Incoming,
    timeout: Duration,
) -> Result<Bytes, PeerError> {
    let bound = crate::limits::CONTROL_BODY_BYTES_MAX + crate::security::seal::OVERHEAD;
    let collected =
        tokio::time::timeout(timeout, http_body_util::Limited::new(body, bound).collect())
            .await
            .map_err(|_| PeerError {
                message: format!("{url} did not finish its answer within {timeout:?}"),
                not_acted_on: false,
            })?
            .map_err(|e| PeerError {
                message: format!("{url}: {e}"),
                not_acted_on: false,
            })?;
    Ok(collected.to_bytes())
}

/// Headers naming `value` as the content type.
fn content_type(value: &'static str) -> hyper::HeaderMap {
    let mut headers = hyper::HeaderMap::new();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(value),
    );
    headers
}

/// What a fetch of a framed stream got.
#[derive(Debug)]
pub enum Fetched {
    /// The stream, unread; its head is bound to `nonce`.
    Frames {
        nonce: [u8; 24],
        body: hyper::body::Incoming,
    },
    /// Any other answer, whole (opened when sealed).
    Answer { status: StatusCode, body: Bytes },
}

/// Why an exchange failed.
#[derive(Debug, Clone)]
pub struct PeerError {
    /// What happened, naming the URL.
    pub message: String,
    /// True if the peer cannot have acted on the request: it could not be
    /// reached, or it refused the request with an HTTP error status.
    pub not_acted_on: bool,
}
