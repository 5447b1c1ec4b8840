//! JSON bodies for the errors hyper answers itself.
//!
//! A request hyper cannot parse (a request line or header that is not
//! HTTP, a path with bytes that are not ASCII, headers over its limits)
//! never reaches a handler: hyper answers `400` (or `431`, `505`) with an
//! empty body and closes. Every error of the API is JSON with a code, so
//! this adapter sits between hyper and the socket and gives exactly those
//! answers a body. It recognises them by their shape, which no handler's
//! answer has: an HTTP/1.1 status line of 4xx/5xx, `connection: close`,
//! `content-length: 0` and no `content-type`. Everything else passes
//! through untouched.

use super::error::ErrorCode;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose hyper-made error answers carry JSON bodies.
#[derive(Debug)]
pub struct JsonErrors<T> {
    inner: T,
    /// Bytes already accepted from hyper but not yet written.
    pending: Vec<u8>,
    written: usize,
}

impl<T> JsonErrors<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }
}

/// The answer with a JSON body, if `head` is one of hyper's own errors.
fn rewrite(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let status: u16 = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let lower = text.to_ascii_lowercase();
    if !(400..600).contains(&status)
        || !text.ends_with("\r\n\r\n")
        || !lower.contains("\r\nconnection: close\r\n")
        || !lower.contains("\r\ncontent-length: 0\r\n")
        || lower.contains("\r\ncontent-type:")
    {
        return None;
    }
    let (code, message) = match status {
        431 => (
            ErrorCode::HeadersTooLarge,
            "the request's headers are over the size limit",
        ),
        505 => (ErrorCode::BadRequest, "only HTTP/1.1 and HTTP/2 are served"),
        _ => (
            ErrorCode::BadRequest,
            "malformed HTTP request: the request line, a header, or a path that is not ASCII (percent-encode other bytes)",
        ),
    };
    let body = serde_json::to_string(&super::error::error_body(code, message))
        .expect("API types serialize");
    let start = lower.find("\r\ncontent-length: 0\r\n")?;
    let end = start + "\r\ncontent-length: 0\r\n".len();
    let mut out = Vec::with_capacity(head.len() + body.len() + 64);
    out.extend_from_slice(&head[..start]);
    out.extend_from_slice(
        format!(
            "\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&head[end..]);
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

impl<T: AsyncWrite + Unpin> JsonErrors<T> {
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonErrors<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonErrors<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        match rewrite(buf) {
            Some(answer) => {
                this.pending = answer;
                // Whatever cannot go now goes at the next write or flush.
                let _ = this.poll_pending(cx)?;
                Poll::Ready(Ok(buf.len()))
            }
            None => Pin::new(&mut this.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }

    // One write per answer, so a head is never split across calls.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_empty_errors_get_json_bodies() {
        let head = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Mon, 23 Nov 2026 10:10:41 GMT\r\n\r\n";
        let out = String::from_utf8(rewrite(head).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"));
        assert!(head.contains("content-type: application/json"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("date: Mon"));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["code"], "bad_request");
        assert_eq!(json["retryable"], false);
        let big = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert!(
            String::from_utf8(rewrite(big).unwrap())
                .unwrap()
                .contains("headers_too_large")
        );
    }

    #[test]
    fn every_other_answer_passes_untouched() {
        for head in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n{\"a\":\"b\"}",
            b"{\"code\":\"x\"}",
            b"",
        ] {
            assert!(rewrite(head).is_none(), "{}", String::from_utf8_lossy(head));
        }
    }

    #[tokio::test]
    async fn writes_reach_the_socket_whole() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(16);
        let mut wrapped = JsonErrors::new(server);
        let writer = tokio::spawn(async move {
            wrapped
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
                )
                .await
                .unwrap();
            wrapped.shutdown().await.unwrap();
        });
        let mut out = String::new();
        let mut client = client;
        client.read_to_string(&mut out).await.unwrap();
        writer.await.unwrap();
        assert!(out.ends_with('}'), "{out}");
        assert!(out.contains("\"code\":\"bad_request\""));
    }
}
