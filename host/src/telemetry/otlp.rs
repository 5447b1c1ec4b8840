//! The HTTP client the OTLP exporter sends spans with: hyper with rustls
//! (the system's roots), on the node's tokio runtime.
//!
//! The SDK's batch processor exports from a thread of its own, outside
//! any runtime; each request is spawned onto the runtime whose handle the
//! client keeps and awaited from there. Every exchange is bounded by
//! [`EXPORT_TIMEOUT`] and a response body by [`RESPONSE_BYTES_MAX`].

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use std::sync::Arc;
use std::time::Duration;

/// Longest one export request may take, answer included.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest collector answer read (OTLP answers are a few bytes; a partial
/// success names the spans it dropped).
pub const RESPONSE_BYTES_MAX: usize = 64 * 1024;

type Inner = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// An [`HttpClient`] over hyper and rustls.
#[derive(Clone)]
pub struct Client {
    runtime: tokio::runtime::Handle,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("otlp::Client")
    }
}

impl Client {
    /// A client sending on `runtime`; HTTPS trusts the system's roots.
    pub fn new(runtime: tokio::runtime::Handle) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let inner =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        Ok(Self {
            runtime,
            inner: Arc::new(inner),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let inner = self.inner.clone();
        let exchange = async move {
            let (parts, body) = request.into_parts();
            let response = inner
                .request(Request::from_parts(parts, Full::new(body)))
                .await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, RESPONSE_BYTES_MAX)
                .collect()
                .await?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        let bounded = async move {
            match tokio::time::timeout(EXPORT_TIMEOUT, exchange).await {
                Ok(result) => result,
                Err(_) => Err(format!("no answer within {EXPORT_TIMEOUT:?}").into()),
            }
        };
        self.runtime.spawn(bounded).await?
    }
}
