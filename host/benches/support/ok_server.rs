//! The local HTTP server both benches' `egress` sections call.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A hyper HTTP/1.1 server on 127.0.0.1 answering every request `200 ok`,
/// counting them in `served`; its address.
pub async fn ok_server(served: Arc<AtomicU64>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let served = served.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request| {
                    served.fetch_add(1, Ordering::Relaxed);
                    let ok = http_body_util::Full::new(bytes::Bytes::from_static(b"ok"));
                    async move { Ok::<_, std::convert::Infallible>(hyper::Response::new(ok)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}
