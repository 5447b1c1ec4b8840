//! One pooled HTTP/1.1 and HTTP/2 client (plain or TLS) and the bounded
//! exchanges every call goes through: a peer that stops answering never
//! holds a caller forever.
//!
//! [`Transport::exchange`] sends whole bytes and reads the whole answer;
//! [`Transport::send`] sends a streamed [`Body`] and hands back the answer
//! with its body still to be read (blobs), waiting for its head as a
//! [`HeadWait`] says.

use bytes::Bytes;
use http_body::Body as _;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, HeaderMap, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Why a request body's stream failed (a file that could not be read, say).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body: whole bytes ([`full`]) or chunks produced as the
/// connection takes them (any [`http_body::Body`] of [`Bytes`], boxed with
/// [`BodyExt::boxed`]).
pub type Body = BoxBody<Bytes, BoxError>;

/// `bytes` as a request [`Body`].
pub fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// An answer, whatever its status.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// The `Retry-After` header, in seconds, if the server sent one.
    pub retry_after: Option<Duration>,
    /// The whole body.
    pub body: Bytes,
}

/// Why an exchange failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    /// What happened, naming the URL.
    pub message: String,
    /// True if the request never reached the server (the connection could
    /// not be made), so the server cannot have acted on it.
    pub not_sent: bool,
}

/// A pooled HTTP client. Cheap to clone.
#[derive(Clone)]
pub struct Transport {
    http: HttpClient<HttpsConnector<HttpConnector>, Body>,
    token: Option<HeaderValue>,
    /// The caller's W3C `traceparent`, sent with every request: the
    /// node's spans for it join the caller's trace.
    traceparent: Option<HeaderValue>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("token", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// This transport sending `traceparent` (a W3C trace context, e.g.
    /// `00-<trace id>-<span id>-01`) with every request; a value a header
    /// cannot carry is refused (a malformed one is ignored by the nodes).
    pub fn with_traceparent(mut self, traceparent: &str) -> Result<Self, String> {
        let value = HeaderValue::from_str(traceparent)
            .map_err(|_| "the traceparent has characters a header cannot carry".to_string())?;
        self.traceparent = Some(value);
        Ok(self)
    }

    /// A client trusting `tls` for `https://` URLs (see [`crate::tls`]) and
    /// sending `token` as a bearer token with every request.
    pub fn new(tls: rustls::ClientConfig, token: Option<&str>) -> Result<Self, String> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(connector);
        let token = token
            .map(|t| {
                HeaderValue::from_str(&format!("Bearer {t}"))
                    .map_err(|_| "the token has characters a header cannot carry".to_string())
            })
            .transpose()?;
        Ok(Self {
            http: HttpClient::builder(TokioExecutor::new()).build(https),
            token,
            traceparent: None,
        })
    }

    /// Sends `body` with `method` to `url` and reads the whole answer,
    /// failing past `timeout`. Any HTTP status is returned for the caller
    /// to judge.
    pub async fn exchange(
        &self,
        method: Method,
        url: &str,
        content_type: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Answer, TransportError> {
        let unsent = |message: String| TransportError {
            message,
            not_sent: true,
        };
        let mut request = Request::builder()
            .method(method)
            .uri(url)
            .header(hyper::header::CONTENT_TYPE, content_type);
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, token.clone());
        }
        if let Some(traceparent) = &self.traceparent {
            request = request.header("traceparent", traceparent.clone());
        }
        let request = request
            .body(full(body))
            .map_err(|e| unsent(format!("{url}: {e}")))?;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| TransportError {
                    message: format!("{url}: {}", with_causes(&e)),
                    not_sent: e.is_connect(),
                })?;
            let status = response.status();
            let retry_after = retry_after(response.headers());
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| TransportError {
                    message: format!("{url}: {e}"),
                    not_sent: false,
                })?
                .to_bytes();
            Ok(Answer {
                status,
                retry_after,
                body,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| TransportError {
                message: format!("{url} did not answer within {timeout:?}"),
                not_sent: false,
            })?
    }

    /// Sends `body` with `method` and `headers` (the token is added) to
    /// `url`, and returns the answer's head with its body still to be
    /// read, whatever the status: the caller reads the body with its own
    /// idle timeout.
    ///
    /// Fails if the answer's head has not come within `wait.timeout` of
    /// the request's start or of the last chunk of `body` the connection
    /// took: an upload that keeps moving is never cut, however long it
    /// takes, but one that stalls is. Once the connection has taken the
    /// whole body, the head is waited for [`HeadWait::after_body`] of the
    /// bytes sent: `wait.timeout` plus the allowances of `wait` (a node
    /// that copies an upload, or fetches a blob, before it answers). (For
    /// an empty body that is from the start.) A body sent without a
    /// `Content-Length` header goes chunked unless its size hint is exact.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Body,
        wait: HeadWait,
    ) -> Result<Response<Incoming>, TransportError> {
        let started = Instant::now();
        let moves = Arc::new(Moves {
            at: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            ended: AtomicBool::new(body.is_end_stream()),
        });
        let body = Progress {
            exact: body.size_hint().exact(),
            inner: body,
            started,
            moves: moves.clone(),
        }
        .boxed();
        let mut request = Request::builder().method(method).uri(url);
        if let Some(map) = request.headers_mut() {
            map.extend(headers);
            if let Some(token) = &self.token {
                map.insert(AUTHORIZATION, token.clone());
            }
            if let Some(traceparent) = &self.traceparent {
                map.insert("traceparent", traceparent.clone());
            }
        }
        let request = request.body(body).map_err(|e| TransportError {
            message: format!("{url}: {e}"),
            not_sent: true,
        })?;
        let mut response = std::pin::pin!(self.http.request(request));
        // When the head is due, as the body last stood: from its last move,
        // `wait.timeout` while it is going, more once it has all gone.
        let due = || {
            let moved = moves.at.load(Ordering::Relaxed);
            let last = started + Duration::from_nanos(moved);
            let ended = moves.ended.load(Ordering::Relaxed);
            let sent = moves.bytes.load(Ordering::Relaxed);
            let waited = if ended {
                wait.after_body(sent)
            } else {
                wait.timeout
            };
            (
                last.checked_add(waited).unwrap_or(last + FAR),
                waited,
                moved,
                ended,
                sent,
            )
        };
        let mut deadline = due().0;
        loop {
            tokio::select! {
                response = &mut response => {
                    return response.map_err(|e| TransportError {
                        message: format!("{url}: {}", with_causes(&e)),
                        not_sent: e.is_connect(),
                    });
                }
                () = tokio::time::sleep_until(deadline) => {
                    let (due, waited, moved, ended, sent) = due();
                    if due <= Instant::now() {
                        let since = match (moved, ended) {
                            (0, _) => String::new(),
                            (_, true) => format!(" of the end of the body ({sent} bytes)"),
                            (_, false) => " of the last chunk of the body it took".into(),
                        };
                        return Err(TransportError {
                            message: format!("{url} did not answer within {waited:?}{since}"),
                            not_sent: false,
                        });
                    }
                    deadline = due;
                }
            }
        }
    }
}

/// A wait no deadline passes (about 30 years: `Instant` cannot hold all).
const FAR: Duration = Duration::from_secs(1 << 30);

/// How long [`Transport::send`] waits for an answer's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadWait {
    /// From the request's start, and again from each chunk of the body
    /// the connection takes.
    pub timeout: Duration,
    /// Once the whole body has been sent: this much more, whatever its
    /// size (a download through a node without a copy, which copies
    /// the first MiB of the blob, or up to the range asked, before it
    /// answers).
    pub extra: Duration,
    /// Once the whole body has been sent: one second more per this many
    /// bytes of it (an upload the node copies to other nodes before it
    /// answers); `None` for no more.
    pub bytes_per_sec: Option<u64>,
}

impl HeadWait {
    /// `timeout`, with nothing more once the body has gone.
    pub const fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            extra: Duration::ZERO,
            bytes_per_sec: None,
        }
    }

    /// This wait, with `extra` more once the body has gone.
    pub const fn with_extra(mut self, extra: Duration) -> Self {
        self.extra = extra;
        self
    }

    /// This wait, with one second more per `bytes_per_sec` bytes sent once
    /// the body has gone (none for a rate of 0).
    pub const fn per_bytes_sent(mut self, bytes_per_sec: u64) -> Self {
        self.bytes_per_sec = Some(bytes_per_sec);
        self
    }

    /// The wait for the head from the end of a body of `sent` bytes:
    /// `timeout + extra + sent / bytes_per_sec` seconds (saturating).
    pub fn after_body(&self, sent: u64) -> Duration {
        let per_bytes = match self.bytes_per_sec {
            Some(rate) if rate > 0 => {
                let nanos = u128::from(sent % rate) * 1_000_000_000 / u128::from(rate);
                let nanos = u32::try_from(nanos).expect("below a second");
                Duration::new(sent / rate, nanos)
            }
            _ => Duration::ZERO,
        };
        self.timeout
            .saturating_add(self.extra)
            .saturating_add(per_bytes)
    }
}

impl From<Duration> for HeadWait {
    fn from(timeout: Duration) -> Self {
        Self::new(timeout)
    }
}

/// A [`Transport`] is shared by the clients of several nodes and by tasks
/// on any thread.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Transport>()
};

/// The `Retry-After` header of an answer, in seconds, if it has one.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// How a request's body has gone, as [`Progress`] notes it.
struct Moves {
    /// When the connection last took a frame (nanoseconds after the
    /// request's start).
    at: AtomicU64,
    /// Bytes of data taken.
    bytes: AtomicU64,
    /// Whether the body has all gone (it ended, or the connection has
    /// taken as many bytes as its exact size, or let go of it).
    ended: AtomicBool,
}

/// A body that notes when, and how much of it, the connection took.
struct Progress {
    inner: Body,
    started: Instant,
    /// The body's exact size, if known.
    exact: Option<u64>,
    moves: Arc<Moves>,
}

impl http_body::Body for Progress {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |data| data.len() as u64);
                let bytes = self.moves.bytes.fetch_add(len, Ordering::Relaxed) + len;
                self.moves
                    .at
                    .store(nanos_since(self.started), Ordering::Relaxed);
                if self.inner.is_end_stream() || self.exact.is_some_and(|size| bytes >= size) {
                    self.moves.ended.store(true, Ordering::Relaxed);
                }
            }
            std::task::Poll::Ready(None) => self.moves.ended.store(true, Ordering::Relaxed),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Progress {
    /// The connection let go of the body: whatever it took is all it
    /// sends (hyper drops a body once it has its `Content-Length`).
    fn drop(&mut self) {
        self.moves.ended.store(true, Ordering::Relaxed);
    }
}

/// Nanoseconds from `base` to now.
fn nanos_since(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// An error and its causes, so "client error (Connect)" says why (refused,
/// an untrusted certificate, ...).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}
