//! One pooled HTTP/1.1 and HTTP/2 client (plain or TLS) and the bounded
//! exchanges every call goes through: a peer that stops answering never
//! holds a caller forever.
//!
//! [`Transport::exchange`] sends whole bytes and reads the whole answer;
//! [`Transport::send`] sends a streamed [`Body`] and hands back the answer
//! with its body still to be read (blobs).

use bytes::Bytes;
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
use std::sync::atomic::{AtomicU64, Ordering};
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
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("token", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

impl Transport {
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
    /// Fails if the answer's head has not come within `timeout` of the
    /// request's start or of the last chunk of `body` the connection took:
    /// an upload that keeps moving is never cut, however long it takes,
    /// but one that stalls, or a server that does not answer once it has
    /// the whole body, is. (For a small or empty body that is `timeout`
    /// from the start.) A body sent without a `Content-Length` header goes
    /// chunked unless its size hint is exact.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Body,
        timeout: Duration,
    ) -> Result<Response<Incoming>, TransportError> {
        let started = Instant::now();
        // When the connection last took a chunk of the body (nanoseconds
        // after `started`).
        let moved = Arc::new(AtomicU64::new(0));
        let body = Progress {
            inner: body,
            started,
            moved: moved.clone(),
        }
        .boxed();
        let mut request = Request::builder().method(method).uri(url);
        if let Some(map) = request.headers_mut() {
            map.extend(headers);
            if let Some(token) = &self.token {
                map.insert(AUTHORIZATION, token.clone());
            }
        }
        let request = request.body(body).map_err(|e| TransportError {
            message: format!("{url}: {e}"),
            not_sent: true,
        })?;
        let mut response = std::pin::pin!(self.http.request(request));
        let mut deadline = started + timeout;
        loop {
            tokio::select! {
                response = &mut response => {
                    return response.map_err(|e| TransportError {
                        message: format!("{url}: {}", with_causes(&e)),
                        not_sent: e.is_connect(),
                    });
                }
                () = tokio::time::sleep_until(deadline) => {
                    let moved = moved.load(Ordering::Relaxed);
                    let last = started + Duration::from_nanos(moved);
                    if last + timeout <= Instant::now() {
                        let since = match moved {
                            0 => "",
                            _ => " of the last chunk of the body it took",
                        };
                        return Err(TransportError {
                            message: format!("{url} did not answer within {timeout:?}{since}"),
                            not_sent: false,
                        });
                    }
                    deadline = last + timeout;
                }
            }
        }
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

/// A body that notes when the connection last took a frame of it.
struct Progress {
    inner: Body,
    started: Instant,
    /// Nanoseconds after `started`.
    moved: Arc<AtomicU64>,
}

impl http_body::Body for Progress {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(_))) = &polled {
            self.moved
                .store(nanos_since(self.started), Ordering::Relaxed);
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
