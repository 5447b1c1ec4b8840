//! One pooled HTTP/1.1 and HTTP/2 client (plain or TLS) and the bounded
//! exchange every call goes through: a peer that stops answering never
//! holds a caller forever.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

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
    http: HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
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
            .body(Full::new(body))
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
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
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
