//! The bounded log of one job attempt.
//!
//! A job's log is everything it prints to stdout or stderr plus its `log`
//! lines, interleaved in the order they happened. It is capped at the job's
//! `log_bytes` limit: once full, further bytes are counted but dropped, and
//! the finished log ends with a marker saying how much was lost. The guest
//! never sees an error for writing too much; a job that prints gigabytes
//! costs the host nothing but the time to discard them.

use super::observer::JobObserver;
use crate::limits::WRITE_CHUNK_BYTES_MAX;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// A job's log: kept bytes, and how many were dropped past the cap.
#[derive(Debug)]
pub struct JobLog {
    kept: Vec<u8>,
    cap_bytes: usize,
    dropped_bytes: u64,
    observer: Option<Arc<dyn JobObserver>>,
}

impl JobLog {
    /// An empty log that keeps at most `cap_bytes`.
    pub fn new(cap_bytes: usize, observer: Option<Arc<dyn JobObserver>>) -> Self {
        Self {
            kept: Vec::new(),
            cap_bytes,
            dropped_bytes: 0,
            observer,
        }
    }

    /// Appends `bytes`, keeping what fits under the cap.
    pub fn append(&mut self, bytes: &[u8]) {
        let room = self.cap_bytes.saturating_sub(self.kept.len());
        let (keep, drop) = bytes.split_at(room.min(bytes.len()));
        if !keep.is_empty() {
            self.kept.extend_from_slice(keep);
            if let Some(observer) = &self.observer {
                observer.log(keep);
            }
        }
        self.dropped_bytes += drop.len() as u64;
    }

    /// Counts `bytes` dropped before they reached this log: a sandbox
    /// process relays only what its own log kept.
    pub fn count_dropped(&mut self, bytes: u64) {
        self.dropped_bytes = self.dropped_bytes.saturating_add(bytes);
    }

    /// Bytes dropped because the log was full.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped_bytes
    }

    /// The finished log, ending with a truncation marker if bytes were lost.
    pub fn finish(mut self) -> Vec<u8> {
        if self.dropped_bytes > 0 {
            if self.kept.last().is_some_and(|&b| b != b'\n') {
                self.kept.push(b'\n');
            }
            let marker = format!(
                "[cohort] log truncated: {} bytes dropped past the {}-byte limit\n",
                self.dropped_bytes, self.cap_bytes
            );
            self.kept.extend_from_slice(marker.as_bytes());
        }
        self.kept
    }
}

/// A handle on a [`JobLog`] shared by the job's stdout, stderr and host calls.
#[derive(Debug, Clone)]
pub struct SharedLog(Arc<Mutex<JobLog>>);

impl SharedLog {
    /// Wraps `log` for sharing.
    pub fn new(log: JobLog) -> Self {
        Self(Arc::new(Mutex::new(log)))
    }

    /// Appends `bytes` (see [`JobLog::append`]).
    pub fn append(&self, bytes: &[u8]) {
        self.lock().append(bytes);
    }

    /// Bytes dropped so far.
    pub fn dropped_bytes(&self) -> u64 {
        self.lock().dropped_bytes()
    }

    /// Takes the finished log out, leaving an empty one with the same cap.
    pub fn take(&self) -> Vec<u8> {
        let mut guard = self.lock();
        let empty = JobLog::new(guard.cap_bytes, None);
        std::mem::replace(&mut *guard, empty).finish()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JobLog> {
        // A panic while holding this lock cannot leave the log inconsistent
        // (appends are single `extend` calls), so recover from poisoning.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl IsTerminal for SharedLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for SharedLog {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for SharedLog {
    async fn ready(&mut self) {}
}

impl OutputStream for SharedLog {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always writable: bytes past the cap are dropped, never refused.
        Ok(WRITE_CHUNK_BYTES_MAX)
    }
}

impl AsyncWrite for SharedLog {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_under_the_cap() {
        let mut log = JobLog::new(100, None);
        log.append(b"hello\n");
        log.append(b"world\n");
        assert_eq!(log.dropped_bytes(), 0);
        assert_eq!(log.finish(), b"hello\nworld\n");
    }

    #[test]
    fn truncates_at_the_cap_with_a_marker() {
        let mut log = JobLog::new(8, None);
        log.append(b"0123456789");
        log.append(b"abc");
        assert_eq!(log.dropped_bytes(), 5);
        let text = String::from_utf8(log.finish()).unwrap();
        assert!(
            text.starts_with("01234567\n[cohort] log truncated: 5 bytes dropped"),
            "{text}"
        );
    }

    #[test]
    fn shared_log_take_resets() {
        let log = SharedLog::new(JobLog::new(4, None));
        log.append(b"abcdef");
        assert!(log.take().starts_with(b"abcd\n[cohort] log truncated"));
        assert_eq!(log.take(), b"");
    }
}
