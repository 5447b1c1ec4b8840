//! Blobs: large data read and written as streams.
//!
//! A job may be given blobs to read: its own input blob (named [`INPUT`]),
//! and the output blobs of its DAG parents (named `PARENT/OUTPUT`).
//! [`inputs`] lists them; [`open`] reads one as a [`std::io::Read`]. A job
//! also writes blobs of its own: [`create`] gives a [`std::io::Write`] for
//! a named output. Bytes come and go a piece at a time, so a job with a
//! small memory limit can process data of any size: wrap a reader in a
//! [`BufReader`](std::io::BufReader) and a writer in a
//! [`BufWriter`](std::io::BufWriter) and memory stays bounded by their
//! buffers.
//!
//! ```no_run
//! use cohort_guest::{JobError, blobs, job};
//! use std::io::{BufRead, BufReader, BufWriter, Write};
//!
//! /// Upper-cases the input blob's lines into the output blob `upper.txt`,
//! /// and returns how many lines there were.
//! #[job]
//! fn run(_inline: Vec<u8>) -> Result<String, JobError> {
//!     let reader = BufReader::new(blobs::open(blobs::INPUT)?);
//!     let mut writer = BufWriter::new(blobs::create("upper.txt")?);
//!     let mut lines = 0u64;
//!     for line in reader.lines() {
//!         writeln!(writer, "{}", line?.to_uppercase())?;
//!         lines += 1;
//!     }
//!     writer.flush()?;
//!     Ok(lines.to_string())
//! }
//! ```
//!
//! # Behaviour
//!
//! * An output is kept only if the attempt succeeds: then every byte
//!   written to it is stored as a blob (durable on a majority of the
//!   cluster's back-end nodes before the job is reported done) and listed
//!   with the job's result by name, digest and size. No explicit close is
//!   needed; dropping a [`BlobWriter`] flushes it. A failed attempt's
//!   outputs are discarded, and a retry writes them again.
//! * [`create`] of a name already created starts that output over. Output
//!   names are 1 to 128 bytes of ASCII letters, digits, `.`, `_` and `-`,
//!   not starting with `.`;
//!   the node bounds how many outputs a job has and how many bytes they
//!   hold together, and a write past that bound fails the job
//!   (`output_too_large`).
//! * A long job can checkpoint how far it has read
//!   ([`BlobReader::position`]) and, on a retry, continue from there with
//!   [`open_at`]; its outputs, though, start over with every attempt, so
//!   a resumed attempt writes them again from their start.
//! * Errors: [`open`] and [`create`] fail with a [`BlobError`]; reads and
//!   writes fail with a [`std::io::Error`]. Both convert into a
//!   [`JobError`] (codes `blob_open_failed`, `blob_create_failed`,
//!   `io_error`), so `?` works in a `#[job]` function.

use crate::JobError;
use crate::bindings::cohort::job::blobs as wit;
use std::fmt;
use std::io;
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

/// The name of the job's own input blob (its `input_blob`), when it was
/// given one.
pub const INPUT: &str = "input";

/// The most bytes one [`read`](std::io::Read::read) of a [`BlobReader`]
/// asks of the node: reads into a larger buffer return less, as
/// [`std::io::Read`] allows.
pub const READ_BYTES_MAX: usize = 64 << 10;

/// The most bytes one [`write`](std::io::Write::write) of a [`BlobWriter`]
/// hands to the node (less when the node's stream takes less at once).
pub const WRITE_BYTES_MAX: usize = 64 << 10;

/// A blob this job may read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Blob {
    /// Its name for this job: [`INPUT`] for the job's input blob,
    /// `PARENT/OUTPUT` for the output `OUTPUT` of DAG parent `PARENT`.
    pub name: String,
    /// Its sha256: 64 lowercase hex digits, as the HTTP API writes it.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
}

/// The blobs this job may read, in a stable order ([`INPUT`] first when
/// there is one). Empty when the job was given none.
pub fn inputs() -> Vec<Blob> {
    wit::inputs()
        .into_iter()
        .map(|blob| Blob {
            name: blob.name,
            digest: blob.digest,
            size: blob.size,
        })
        .collect()
}

/// The input blob `name`, if this job was given one of that name.
pub fn input(name: &str) -> Option<Blob> {
    inputs().into_iter().find(|blob| blob.name == name)
}

/// Opens the input blob `name` for reading from its start.
pub fn open(name: &str) -> Result<BlobReader, BlobError> {
    open_at(name, 0)
}

/// Opens the input blob `name` for reading from byte `offset` (its size:
/// nothing left to read). Fails if the job has no input of that name, or
/// if `offset` is past its end.
pub fn open_at(name: &str, offset: u64) -> Result<BlobReader, BlobError> {
    let stream = wit::open(name, offset)
        .map_err(|message| BlobError::new(BlobErrorKind::Open, name, message))?;
    Ok(BlobReader {
        stream,
        position: offset,
        ended: false,
    })
}

/// Creates the output blob `name` and returns the writer of its bytes.
/// Creating a name again starts that output over. Fails on a name the node
/// refuses, or past the number of outputs a job may have.
pub fn create(name: &str) -> Result<BlobWriter, BlobError> {
    let stream = wit::create(name)
        .map_err(|message| BlobError::new(BlobErrorKind::Create, name, message))?;
    Ok(BlobWriter { stream })
}

/// Reads an input blob: a [`std::io::Read`] over its stream, up to
/// [`READ_BYTES_MAX`] bytes a call. Reads block until the node has bytes;
/// the blob's end reads as `Ok(0)`. Unbuffered: wrap it in a
/// [`BufReader`](std::io::BufReader) for small reads.
#[derive(Debug)]
pub struct BlobReader {
    stream: InputStream,
    /// The blob's offset of the next byte [`read`](io::Read::read) returns.
    position: u64,
    /// Whether the stream said it has ended.
    ended: bool,
}

impl BlobReader {
    /// The blob's offset of the next byte this reader returns: where it was
    /// opened plus what was read since. Save it in a checkpoint and pass it
    /// to [`open_at`] to go on from there. (A `BufReader` around this reader
    /// reads ahead of what it returned.)
    pub fn position(&self) -> u64 {
        self.position
    }
}

impl io::Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || self.ended {
            return Ok(0);
        }
        let read = loop {
            match self.stream.blocking_read(read_len(buf.len())) {
                // A blocking read returns at least one byte unless the
                // stream ended; an empty one is not the end, so ask again.
                Ok(bytes) if bytes.is_empty() => continue,
                other => break other,
            }
        };
        match read {
            Ok(bytes) => {
                // The node never returns more than was asked; if it did,
                // those bytes would be lost, so say so rather than drop them.
                let Some(dest) = buf.get_mut(..bytes.len()) else {
                    return Err(io::Error::other(format!(
                        "the node returned {} bytes for a read of at most {}",
                        bytes.len(),
                        buf.len()
                    )));
                };
                dest.copy_from_slice(&bytes);
                self.position += bytes.len() as u64;
                Ok(bytes.len())
            }
            Err(StreamError::Closed) => {
                self.ended = true;
                Ok(0)
            }
            Err(StreamError::LastOperationFailed(error)) => Err(io::Error::other(format!(
                "reading the blob failed: {}",
                error.to_debug_string()
            ))),
        }
    }
}

/// Writes an output blob: a [`std::io::Write`] over its stream, in pieces
/// of at most [`WRITE_BYTES_MAX`] bytes and never more than the node's
/// stream says it takes at once.
///
/// Every byte written is kept when the attempt succeeds; there is no close.
/// [`flush`](io::Write::flush) waits until the node has taken what was
/// written, and dropping the writer flushes it. Unbuffered: wrap it in a
/// [`BufWriter`](std::io::BufWriter) for small writes (and flush that, or
/// let it drop, before the job returns).
#[derive(Debug)]
pub struct BlobWriter {
    stream: OutputStream,
}

impl io::Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let permitted = self.stream.check_write().map_err(write_error)?;
            let len = write_len(permitted, buf.len());
            if len == 0 {
                // No room yet: wait until the node takes more.
                self.stream.subscribe().block();
                continue;
            }
            self.stream.write(&buf[..len]).map_err(write_error)?;
            return Ok(len);
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.blocking_flush().map_err(write_error)
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        // Nothing to tell anyone of a failure here: a write that failed
        // failed the job already, or was reported by `write`.
        let _ = self.stream.blocking_flush();
    }
}

/// How many bytes to ask of the node for a buffer of `buf_len` bytes.
fn read_len(buf_len: usize) -> u64 {
    buf_len.min(READ_BYTES_MAX) as u64
}

/// How many of `remaining` bytes to write when the node permits
/// `permitted`: never more than permitted, nor [`WRITE_BYTES_MAX`].
fn write_len(permitted: u64, remaining: usize) -> usize {
    let permitted = usize::try_from(permitted).unwrap_or(usize::MAX);
    remaining.min(permitted).min(WRITE_BYTES_MAX)
}

/// A write's failure as an [`io::Error`].
fn write_error(error: StreamError) -> io::Error {
    match error {
        StreamError::Closed => io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the blob output is closed (it was created again, or the job is failing)",
        ),
        StreamError::LastOperationFailed(error) => io::Error::other(format!(
            "writing the blob failed: {}",
            error.to_debug_string()
        )),
    }
}

/// What failed about a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BlobErrorKind {
    /// An input could not be opened ([`open`], [`open_at`]): no input of
    /// that name, or an offset past its end. JobError code
    /// `blob_open_failed`.
    Open,
    /// An output could not be created ([`create`]): a bad name, or more
    /// outputs than a job may have. JobError code `blob_create_failed`.
    Create,
}

/// Why a blob could not be opened or created: a kind, the blob's name and
/// the node's explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobError {
    kind: BlobErrorKind,
    name: String,
    message: String,
}

impl BlobError {
    fn new(kind: BlobErrorKind, name: &str, message: String) -> Self {
        Self {
            kind,
            name: name.to_string(),
            message,
        }
    }

    /// What failed.
    pub fn kind(&self) -> BlobErrorKind {
        self.kind
    }

    /// The name of the blob that could not be opened or created.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's explanation.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The [`JobError`] code this error becomes: `blob_open_failed` or
    /// `blob_create_failed`.
    pub fn code(&self) -> &'static str {
        match self.kind {
            BlobErrorKind::Open => "blob_open_failed",
            BlobErrorKind::Create => "blob_create_failed",
        }
    }
}

impl fmt::Display for BlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.kind {
            BlobErrorKind::Open => "open the input",
            BlobErrorKind::Create => "create the output",
        };
        write!(f, "cannot {verb} blob {:?}: {}", self.name, self.message)
    }
}

impl std::error::Error for BlobError {}

impl From<BlobError> for JobError {
    fn from(error: BlobError) -> Self {
        JobError::new(error.code(), error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ask_for_at_most_the_buffer_and_the_maximum() {
        assert_eq!(read_len(1), 1);
        assert_eq!(read_len(8192), 8192);
        assert_eq!(read_len(READ_BYTES_MAX), READ_BYTES_MAX as u64);
        assert_eq!(read_len(10 << 20), READ_BYTES_MAX as u64);
    }

    #[test]
    fn writes_never_exceed_the_permit_or_the_maximum() {
        assert_eq!(write_len(0, 100), 0, "no permit: wait");
        assert_eq!(write_len(4096, 100), 100);
        assert_eq!(write_len(4096, 1 << 20), 4096);
        assert_eq!(write_len(1 << 20, 1 << 20), WRITE_BYTES_MAX);
        assert_eq!(write_len(u64::MAX, 3), 3);
    }

    #[test]
    fn errors_name_the_blob_and_become_job_errors() {
        let error = BlobError::new(BlobErrorKind::Open, "input", "no input of that name".into());
        assert_eq!(
            error.to_string(),
            r#"cannot open the input blob "input": no input of that name"#
        );
        let job_error: JobError = error.into();
        assert_eq!(job_error.code, "blob_open_failed");
        assert!(job_error.message.contains("no input of that name"));

        let error = BlobError::new(BlobErrorKind::Create, "a\nb", "bad name".into());
        assert_eq!(error.code(), "blob_create_failed");
        assert!(!error.to_string().contains('\n'), "{error}");

        fn job() -> Result<(), JobError> {
            Err(BlobError::new(
                BlobErrorKind::Create,
                "x",
                "too many".into(),
            ))?;
            Ok(())
        }
        assert_eq!(job().unwrap_err().code, "blob_create_failed");
    }

    #[test]
    fn write_failures_are_io_errors() {
        assert_eq!(
            write_error(StreamError::Closed).kind(),
            io::ErrorKind::BrokenPipe
        );
    }
}
