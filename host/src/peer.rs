//! HTTP/1.1 exchanges with other cohort processes (node to node, and the
//! CLI to a node): one pooled keep-alive client, and every exchange bounded
//! in time, so a peer that stops answering never holds a caller forever.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// Longest a bulk transfer between nodes may take: a module, a snapshot
/// of the master's state, a hand-over, a page of journal entries.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(60);

/// A pooled HTTP client. Cheap to clone.
#[derive(Clone)]
pub struct Peer {
    http: HttpClient<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").finish_non_exhaustive()
    }
}

impl Default for Peer {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self {
            http: HttpClient::builder(TokioExecutor::new()).build(connector),
        }
    }
}

impl Peer {
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
            .exchange_once(
                Method::POST,
                url,
                "application/x-postcard",
                Bytes::from(cohort_master::encode(message)),
                timeout,
            )
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
        let unsent = |message: String| PeerError {
            message,
            not_acted_on: true,
        };
        if crate::fault::blocks_url(url) {
            return Err(unsent(format!("{url}: cut off by fault injection")));
        }
        let request = Request::builder()
            .method(method)
            .uri(url)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(Full::new(body))
            .map_err(|e| unsent(format!("{url}: {e}")))?;
        let exchange = async {
            let response = self.http.request(request).await.map_err(|e| PeerError {
                message: format!("{url}: {e}"),
                not_acted_on: e.is_connect(),
            })?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| PeerError {
                    message: format!("{url}: {e}"),
                    not_acted_on: false,
                })?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| PeerError {
                message: format!("{url} did not answer within {timeout:?}"),
                not_acted_on: false,
            })?
    }
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
