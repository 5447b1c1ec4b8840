//! The bounded log of one job attempt.
//!
//! A job's log is everything it prints to stdout or stderr plus its `log`
//! lines, interleaved in the order they happened. It is capped at the job's
//! `log_bytes` limit: once full, further bytes are counted but dropped, and
//! the finished log ends with a marker saying how much was lost. The guest
//! never sees an error for writing too much; a job that prints gigabytes
//! costs the host nothing but the time to discard them.
//!
//! # Masking secrets
//!
//! An attempt whose grants fill headers from secrets ([`Secrets`]) logs
//! through a [`Mask`]: each occurrence of a secret's value (one of at least
//! [`SECRET_MASKED_BYTES_MIN`] bytes) becomes `[secret:NAME]` before a byte
//! is kept or shown to the observer. The job never holds a secret (the
//! host adds the header), but a server may echo it back and the job print
//! the answer. The log is one stream of bytes (stdout, stderr, log lines
//! and the host's own lines, in order), and a value may be split across two
//! writes: the log holds back the end of a write that could be the start
//! of a value (at most the longest value's length less one byte) until
//! the next write or the end of the attempt decides it. Bytes that cannot
//! begin a value are never held, so a live log lags only while it ends in
//! what looks like the start of one. Matches are leftmost, the longest
//! value first; a value transformed (encoded, reversed, cut in pieces by
//! the job itself) is not recognized.
//!
//! [`SECRET_MASKED_BYTES_MIN`]: crate::limits::SECRET_MASKED_BYTES_MIN

use super::job::Secrets;
use super::observer::JobObserver;
use crate::limits::{SECRET_MASKED_BYTES_MIN, WRITE_CHUNK_BYTES_MAX};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Replaces the values of an attempt's secrets with `[secret:NAME]` in
/// what it reports (see the module's note). Its `Debug` names the secrets
/// only.
pub struct Mask {
    /// The values masked, longest first.
    needles: Vec<Needle>,
}

/// One value to find, with its prefix function (Knuth-Morris-Pratt): each
/// search is linear in the text, whatever the value.
struct Needle {
    name: String,
    value: Vec<u8>,
    /// `fail[i]`: the longest proper prefix of `value[..=i]` that is also
    /// its suffix.
    fail: Vec<usize>,
}

impl Needle {
    fn new(name: &str, value: &str) -> Self {
        let value = value.as_bytes().to_vec();
        let mut fail = vec![0; value.len()];
        let mut k = 0;
        for i in 1..value.len() {
            while k > 0 && value[i] != value[k] {
                k = fail[k - 1];
            }
            if value[i] == value[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Self {
            name: name.to_owned(),
            value,
            fail,
        }
    }

    /// Pushes the start of each occurrence of the value in `data` (this
    /// needle's index with it); returns the length of the longest end of
    /// `data` that is a proper beginning of the value.
    fn search(&self, index: usize, data: &[u8], found: &mut Vec<(usize, usize)>) -> usize {
        let value = &self.value;
        let mut q = 0;
        for (i, &byte) in data.iter().enumerate() {
            while q > 0 && value[q] != byte {
                q = self.fail[q - 1];
            }
            if value[q] == byte {
                q += 1;
            }
            if q == value.len() {
                found.push((i + 1 - q, index));
                q = self.fail[q - 1];
            }
        }
        q
    }
}

impl std::fmt::Debug for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.needles.iter().map(|n| n.name.as_str()).collect();
        f.debug_struct("Mask").field("secrets", &names).finish()
    }
}

impl Mask {
    /// The mask of `secrets`, `None` if none is long enough to mask
    /// ([`SECRET_MASKED_BYTES_MIN`]).
    pub fn new(secrets: &Secrets) -> Option<Arc<Self>> {
        let mut needles: Vec<Needle> = secrets
            .iter()
            .filter(|(_, value)| value.len() >= SECRET_MASKED_BYTES_MIN)
            .map(|(name, value)| Needle::new(name, value))
            .collect();
        // Longest first: a value inside a longer one yields to it.
        needles.sort_by(|a, b| (b.value.len(), &a.name).cmp(&(a.value.len(), &b.name)));
        if needles.is_empty() {
            return None;
        }
        Some(Arc::new(Self { needles }))
    }

    /// `text` with every secret value in it masked.
    pub fn text(&self, text: &str) -> String {
        let mut out = Vec::with_capacity(text.len());
        self.scan(text.as_bytes(), true, &mut out);
        // A value is whole UTF-8 text, so a match begins and ends on
        // character boundaries and the result is UTF-8 too.
        String::from_utf8(out)
            .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
    }

    /// Writes `data` to `out` masked, as far as it is decided: unless `end`,
    /// bytes from the first that could begin a value running past `data`
    /// are left; returns how many bytes of `data` were written.
    fn scan(&self, data: &[u8], end: bool, out: &mut Vec<u8>) -> usize {
        let mut found = Vec::new();
        let mut held = 0;
        for (index, needle) in self.needles.iter().enumerate() {
            held = held.max(needle.search(index, data, &mut found));
        }
        let decided = if end { data.len() } else { data.len() - held };
        // Leftmost first; at one place the longest (the needles' order).
        found.sort_unstable();
        let mut at = 0;
        for (start, index) in found {
            if start < at || start >= decided {
                continue;
            }
            let needle = &self.needles[index];
            out.extend_from_slice(&data[at..start]);
            out.extend_from_slice(b"[secret:");
            out.extend_from_slice(needle.name.as_bytes());
            out.push(b']');
            at = start + needle.value.len();
        }
        let written = decided.max(at);
        out.extend_from_slice(&data[at..written]);
        written
    }
}

/// A job's log: kept bytes, and how many were dropped past the cap.
#[derive(Debug)]
pub struct JobLog {
    kept: Vec<u8>,
    cap_bytes: usize,
    dropped_bytes: u64,
    observer: Option<Arc<dyn JobObserver>>,
    mask: Option<Arc<Mask>>,
    /// Bytes that may begin a secret value, waiting for the next write.
    pending: Vec<u8>,
}

impl JobLog {
    /// An empty log that keeps at most `cap_bytes`.
    pub fn new(cap_bytes: usize, observer: Option<Arc<dyn JobObserver>>) -> Self {
        Self {
            kept: Vec::new(),
            cap_bytes,
            dropped_bytes: 0,
            observer,
            mask: None,
            pending: Vec::new(),
        }
    }

    /// This log masking the secret values of `mask` (see the module's note).
    pub fn masking(mut self, mask: Option<Arc<Mask>>) -> Self {
        self.mask = mask;
        self
    }

    /// Appends `bytes`, masked, keeping what fits under the cap.
    pub fn append(&mut self, bytes: &[u8]) {
        let Some(mask) = self.mask.clone() else {
            self.keep(bytes);
            return;
        };
        if self.kept.len() >= self.cap_bytes {
            // Full: nothing more is shown, so nothing needs masking.
            let waiting = std::mem::take(&mut self.pending);
            self.dropped_bytes += (waiting.len() + bytes.len()) as u64;
            return;
        }
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(data.len());
        let written = mask.scan(&data, false, &mut out);
        data.drain(..written);
        self.pending = data;
        self.keep(&out);
    }

    /// Appends the bytes held back as the possible start of a secret value:
    /// nothing more follows them.
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let Some(mask) = self.mask.clone() else {
            return;
        };
        let data = std::mem::take(&mut self.pending);
        let mut out = Vec::with_capacity(data.len());
        mask.scan(&data, true, &mut out);
        self.keep(&out);
    }

    /// Keeps what fits of `bytes` under the cap and counts the rest.
    fn keep(&mut self, bytes: &[u8]) {
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

    /// Bytes dropped because the log was full (those held back for masking
    /// count once [flushed](Self::flush)).
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped_bytes
    }

    /// The finished log, ending with a truncation marker if bytes were lost
    /// (held-back bytes [flushed](Self::flush) first).
    pub fn finish(mut self) -> Vec<u8> {
        self.flush();
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

    /// Appends what was held back for masking (see [`JobLog::flush`]).
    pub fn flush(&self) {
        self.lock().flush();
    }

    /// Bytes dropped so far.
    pub fn dropped_bytes(&self) -> u64 {
        self.lock().dropped_bytes()
    }

    /// Bytes the log has room for before it is full.
    pub fn room(&self) -> usize {
        let log = self.lock();
        log.cap_bytes.saturating_sub(log.kept.len())
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

    /// Keeps what the log showed its observer.
    #[derive(Debug, Default)]
    struct Shown(Mutex<Vec<u8>>);

    impl JobObserver for Shown {
        fn log(&self, bytes: &[u8]) {
            self.0.lock().unwrap().extend_from_slice(bytes);
        }
    }

    impl Shown {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn mask(pairs: &[(&str, &str)]) -> Option<Arc<Mask>> {
        Mask::new(&Secrets::new(
            (pairs.iter())
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
        ))
    }

    #[test]
    fn secret_values_are_masked_even_split_across_writes() {
        let shown = Arc::new(Shown::default());
        let mut log = JobLog::new(1000, Some(shown.clone())).masking(mask(&[
            ("API_KEY", "s3cr3t-value"),
            ("TOKEN", "tok-1234"),
            ("SHORT", "abc"),
        ]));
        log.append(b"hello ");
        assert_eq!(
            shown.text(),
            "hello ",
            "nothing that can begin a value waits"
        );
        log.append(b"auth: Bearer s3cr");
        assert_eq!(
            shown.text(),
            "hello auth: Bearer ",
            "the start of a value waits"
        );
        log.append(b"3t-value ok\n");
        assert_eq!(shown.text(), "hello auth: Bearer [secret:API_KEY] ok\n");
        // A start that turns out to be no value comes out as it was.
        log.append(b"abc is short; s3cr3t-valu");
        log.append(b"E\n");
        log.append(b"tok-1234tok-1234\n");
        // One byte at a time.
        for byte in b"<s3cr3t-value>\n" {
            log.append(&[*byte]);
        }
        // Still waiting at the end: no more is coming.
        log.append(b"s3c");
        let expected = "hello auth: Bearer [secret:API_KEY] ok\n\
            abc is short; s3cr3t-valuE\n\
            [secret:TOKEN][secret:TOKEN]\n\
            <[secret:API_KEY]>\n\
            s3c";
        assert_eq!(String::from_utf8(log.finish()).unwrap(), expected);
        assert_eq!(shown.text(), expected, "the observer saw the same bytes");
    }

    #[test]
    fn the_longest_value_wins_and_values_repeating_themselves_are_found() {
        let mask = mask(&[
            ("SHORT", "abcd-1234"),
            ("LONG", "abcd-1234-long"),
            ("RUN", "aaaa-b"),
            ("EMPTY", ""),
        ])
        .unwrap();
        assert_eq!(
            mask.text("abcd-1234-long abcd-1234 aaaaaaa-b é"),
            "[secret:LONG] [secret:SHORT] aaa[secret:RUN] é"
        );
        assert_eq!(
            format!("{mask:?}"),
            r#"Mask { secrets: ["LONG", "SHORT", "RUN"] }"#
        );
        assert!(Mask::new(&Secrets::new(vec![("A".into(), "abc".into())])).is_none());
        // Split after the shorter value: the longer one is still awaited.
        let mut log = JobLog::new(100, None).masking(Some(mask));
        log.append(b"abcd-1234");
        log.append(b"-long.");
        assert_eq!(log.finish(), b"[secret:LONG].");
    }

    #[test]
    fn a_value_is_masked_before_the_cap_cuts_the_log() {
        let mut log = JobLog::new(12, None).masking(mask(&[("API_KEY", "s3cr3t-value")]));
        log.append(b"x s3cr3t-value and more");
        log.append(b"s3cr3t-value, dropped whole");
        let text = String::from_utf8(log.finish()).unwrap();
        assert!(
            text.starts_with("x [secret:AP\n[cohort] log truncated"),
            "{text}"
        );
        assert!(!text.contains("s3cr"), "{text}");
    }

    #[test]
    fn shared_log_take_resets() {
        let log = SharedLog::new(JobLog::new(4, None));
        log.append(b"abcdef");
        assert!(log.take().starts_with(b"abcd\n[cohort] log truncated"));
        assert_eq!(log.take(), b"");
    }
}
