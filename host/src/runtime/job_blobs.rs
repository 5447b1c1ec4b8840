//! A job's blobs: the inputs it may read and the outputs it writes, as the
//! `wasi:io` streams of the job world's `blobs` interface.
//!
//! # Design
//!
//! * **Files, not buffers.** The worker hands the attempt each input as a
//!   file of its node's blob store (fetched there first if need be), and a
//!   directory for outputs under the store's `partial/` (made at the first
//!   output). An input stream reads the file a piece at a time
//!   ([`INPUT_READ_BYTES_MAX`] at most per read, at the stream's own
//!   offset: an input is opened once per attempt, however many streams
//!   the job opens on it, so a job cannot spend the node's descriptors);
//!   an output stream writes through a small buffer
//!   ([`OUTPUT_BUFFER_BYTES`]) into a temporary file, hashing as it goes.
//!   However large the data, an attempt holds at most about 5 MiB of it
//!   (a read, and a buffer per output), and the guest only what it asks
//!   for.
//! * **Reads block the job's own thread.** A read is one `pread(2)` of a
//!   local file, shorter than an epoch tick; the job's thread is the job's
//!   (see `worker`), so nothing else waits on it, and the streams are always
//!   "ready" to `wasi:io`'s pollables.
//! * **The node's faults are not the job's.** An input file that cannot be
//!   read, or a disk that refuses an output, fails the attempt with a code
//!   that is retried (`blob_unavailable`, `blob_store_full`), whatever the
//!   job made of the error its stream returned ([`OutputFault`]).
//! * **Outputs become blobs only on success.** The attempt ends with each
//!   output's name, digest, size and temporary file ([`WrittenBlob`]); the
//!   worker stores and replicates them before it reports the job done. A
//!   failed attempt's files are removed when its report is dropped, and an
//!   output created twice starts over (its first file is removed).
//! * **Bounds.** At most [`OUTPUTS_MAX`] outputs, named as the master
//!   accepts them, and [`BlobSpace::bytes_max`] bytes over all of them: a
//!   write past it fails, and so does the attempt (`output_too_large`),
//!   whatever the job makes of the failed write. The node's disk reserve
//!   ([`BLOB_DISK_RESERVE_BYTES`]) is checked every [`BLOB_WRITE_BYTES`]
//!   written: a disk that fills fails the attempt (`blob_store_full`) and
//!   leaves every stored blob as it was.
//!
//! [`BLOB_DISK_RESERVE_BYTES`]: BLOB_DISK_RESERVE_BYTES

use crate::limits::{BLOB_DISK_RESERVE_BYTES, BLOB_WRITE_BYTES};
use bytes::Bytes;
use cohort_master::limits::{OUTPUT_NAME_BYTES_MAX, OUTPUTS_MAX};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError};

/// The most bytes one read of an input stream returns.
pub const INPUT_READ_BYTES_MAX: usize = 256 << 10;

/// How many bytes an output stream says it takes at once (`check-write`).
const OUTPUT_WRITE_BUDGET: usize = 1 << 20;

/// The buffer in front of each output's file: at most [`OUTPUTS_MAX`] of
/// them per attempt (4 MiB), so that an attempt's outputs hold little of
/// the node's memory however many it writes.
const OUTPUT_BUFFER_BYTES: usize = 64 << 10;

/// A blob an attempt may read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputBlob {
    /// Its name for the job (`input`, `PARENT/OUTPUT`).
    pub name: String,
    /// Its sha256.
    pub digest: [u8; 32],
    /// Its size in bytes.
    pub size: u64,
    /// Its file on this node.
    pub path: PathBuf,
}

/// Where an attempt's outputs are written, and how much it may write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobSpace {
    /// A directory on the blob store's file system (its `partial/`), so
    /// that storing an output is a rename.
    pub dir: PathBuf,
    /// Most bytes over all the attempt's outputs.
    pub bytes_max: u64,
}

/// An attempt's blobs: what it reads, and where it writes. None by default:
/// `inputs` answers nothing and `create` refuses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobBlobs {
    /// What the job may read, in the order `inputs` lists them.
    pub inputs: Vec<InputBlob>,
    /// Where its outputs go; `None`: this node keeps no blobs.
    pub space: Option<BlobSpace>,
}

/// An output an attempt wrote: its bytes are in `file` until the worker
/// stores them (a rename into the store); dropped, the file is removed.
#[derive(Debug)]
pub struct WrittenBlob {
    /// The job's name for it.
    pub name: String,
    /// The sha256 of its bytes.
    pub digest: [u8; 32],
    /// Its size.
    pub size: u64,
    /// Its bytes, in a temporary file under [`BlobSpace::dir`].
    pub file: tempfile::TempPath,
    /// Whether `digest` and `size` were computed by this process as the
    /// bytes were written; if not (a sandbox process's word), the store
    /// checks them before it keeps the file.
    pub verified: bool,
}

/// Why the attempt's blobs failed it, whatever the job made of the error
/// its stream returned: the node's fault, or a limit, never the job's own
/// failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputFault {
    /// A write went past [`BlobSpace::bytes_max`]: the total it would have
    /// made.
    TooLarge { wanted: u64, limit: u64 },
    /// The disk filled, or refused a write.
    Disk(String),
    /// An input's file on this node could not be read (removed by hand, a
    /// disk error): another attempt, maybe elsewhere, may read it.
    Input(String),
}

/// A running attempt's blobs, shared by its streams.
#[derive(Debug, Clone)]
pub(crate) struct Blobs {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    inputs: Vec<InputBlob>,
    /// Each input's file, opened at its first `open` and shared by every
    /// stream of it (each reads at its own offset), so that a job opening
    /// an input again and again holds one descriptor.
    files: Vec<Option<Arc<std::fs::File>>>,
    space: Option<BlobSpace>,
    /// Bytes written over all outputs.
    written: u64,
    /// Outputs by creation order; a name created again replaces its entry.
    outputs: Vec<(String, Arc<Mutex<Output>>)>,
    fault: Option<OutputFault>,
}

#[derive(Debug)]
struct Output {
    /// `None` once the output was replaced by a new one of its name.
    file: Option<std::io::BufWriter<tempfile::NamedTempFile>>,
    hasher: Sha256,
    size: u64,
    /// Bytes written since the disk's free space was last checked.
    unchecked: u64,
}

impl Blobs {
    pub(crate) fn new(blobs: JobBlobs) -> Self {
        Self {
            inner: Arc::new(Mutex::new(State {
                files: vec![None; blobs.inputs.len()],
                inputs: blobs.inputs,
                space: blobs.space,
                written: 0,
                outputs: Vec::new(),
                fault: None,
            })),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `(name, digest, size)` of every input, in order.
    pub(crate) fn inputs(&self) -> Vec<(String, [u8; 32], u64)> {
        (self.state().inputs.iter())
            .map(|blob| (blob.name.clone(), blob.digest, blob.size))
            .collect()
    }

    /// A stream of input `name` from `offset`.
    pub(crate) fn open(&self, name: &str, offset: u64) -> Result<BlobReader, String> {
        let mut state = self.state();
        let Some(at) = state.inputs.iter().position(|blob| blob.name == name) else {
            let names: Vec<&str> = state.inputs.iter().map(|b| b.name.as_str()).collect();
            return Err(format!(
                "this job has no input blob named {name:?} (it has: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        };
        let size = state.inputs[at].size;
        if offset > size {
            return Err(format!(
                "offset {offset} is past the end of input {name:?} ({size} bytes)"
            ));
        }
        let file = match &state.files[at] {
            Some(file) => file.clone(),
            None => match std::fs::File::open(&state.inputs[at].path) {
                Ok(file) => {
                    let file = Arc::new(file);
                    state.files[at] = Some(file.clone());
                    file
                }
                Err(error) => {
                    // The node's fault, not the job's: the attempt fails
                    // with a code that is retried.
                    let why = format!("cannot read input {name:?} on this node: {error}");
                    state.fault.get_or_insert(OutputFault::Input(why.clone()));
                    return Err(why);
                }
            },
        };
        Ok(BlobReader {
            blobs: self.clone(),
            file,
            offset,
            end: size,
        })
    }

    /// A new output `name`, replacing one of that name.
    pub(crate) fn create(&self, name: &str) -> Result<BlobWriter, String> {
        check_output_name(name)?;
        let mut state = self.state();
        let Some(space) = &state.space else {
            return Err("this node keeps no blobs, so a job here cannot write one".into());
        };
        let known = state.outputs.iter().position(|(held, _)| held == name);
        if known.is_none() && state.outputs.len() >= OUTPUTS_MAX {
            return Err(format!("a job may write at most {OUTPUTS_MAX} outputs"));
        }
        // The attempt's directory is made at its first output, so that
        // an attempt writing none needs nothing of the disk.
        let created = std::fs::create_dir_all(&space.dir)
            .and_then(|()| tempfile::NamedTempFile::new_in(&space.dir));
        let file = match created {
            Ok(file) => file,
            Err(error) => {
                let why = format!("cannot create output {name:?} on this node: {error}");
                state.fault.get_or_insert(OutputFault::Disk(why.clone()));
                return Err(why);
            }
        };
        let output = Arc::new(Mutex::new(Output {
            file: Some(std::io::BufWriter::with_capacity(OUTPUT_BUFFER_BYTES, file)),
            hasher: Sha256::new(),
            size: 0,
            unchecked: 0,
        }));
        match known {
            Some(at) => {
                let (_, old) =
                    std::mem::replace(&mut state.outputs[at], (name.into(), output.clone()));
                let mut old = lock(&old);
                state.written = state.written.saturating_sub(old.size);
                old.file = None;
            }
            None => state.outputs.push((name.into(), output.clone())),
        }
        Ok(BlobWriter {
            blobs: self.clone(),
            output,
        })
    }

    /// What failed the attempt's outputs, if anything did.
    pub(crate) fn fault(&self) -> Option<OutputFault> {
        self.state().fault.clone()
    }

    /// Ends the outputs: each one's file flushed, its digest and size, in
    /// creation order. Dropped (a failed attempt), their files go.
    pub(crate) fn finish(&self) -> Result<Vec<WrittenBlob>, OutputFault> {
        let mut state = self.state();
        if let Some(fault) = &state.fault {
            return Err(fault.clone());
        }
        let mut written = Vec::with_capacity(state.outputs.len());
        for (name, output) in std::mem::take(&mut state.outputs) {
            let mut output = lock(&output);
            let Some(file) = output.file.take() else {
                continue;
            };
            let file = file
                .into_inner()
                .map_err(|e| OutputFault::Disk(e.error().to_string()))?;
            let digest = <[u8; 32]>::from(std::mem::take(&mut output.hasher).finalize());
            written.push(WrittenBlob {
                name,
                digest,
                size: output.size,
                file: file.into_temp_path(),
                verified: true,
            });
        }
        Ok(written)
    }

    /// Takes `bytes` into `output`, or fails the attempt.
    fn write(&self, output: &Mutex<Output>, bytes: &[u8]) -> Result<(), StreamError> {
        let mut state = self.state();
        if state.fault.is_some() {
            return Err(StreamError::Closed);
        }
        let limit = state.space.as_ref().map_or(0, |space| space.bytes_max);
        let wanted = state.written.saturating_add(bytes.len() as u64);
        if wanted > limit {
            state.fault = Some(OutputFault::TooLarge { wanted, limit });
            return Err(StreamError::LastOperationFailed(wasmtime::format_err!(
                "the job's outputs would come to {wanted} bytes; the limit is {limit}"
            )));
        }
        let dir = state.space.as_ref().map(|space| space.dir.clone());
        let mut output = lock(output);
        let Some(file) = output.file.as_mut() else {
            // Replaced by an output of the same name: this stream is stale.
            return Err(StreamError::Closed);
        };
        let mut written = file.write_all(bytes);
        output.unchecked += bytes.len() as u64;
        if written.is_ok()
            && output.unchecked >= BLOB_WRITE_BYTES as u64
            && let Some(dir) = &dir
        {
            written = check_free(dir, output.unchecked);
            output.unchecked = 0;
        }
        if let Err(error) = written {
            let message = error.to_string();
            state.fault = Some(OutputFault::Disk(message.clone()));
            return Err(StreamError::LastOperationFailed(wasmtime::format_err!(
                "cannot write an output: {message}"
            )));
        }
        output.hasher.update(bytes);
        output.size += bytes.len() as u64;
        state.written = wanted;
        Ok(())
    }
}

fn lock(output: &Mutex<Output>) -> std::sync::MutexGuard<'_, Output> {
    output.lock().unwrap_or_else(|e| e.into_inner())
}

/// Refuses an output name the master would refuse
/// ([`cohort_master::valid_output_name`]).
pub(crate) fn check_output_name(name: &str) -> Result<(), String> {
    if !cohort_master::valid_output_name(name) {
        return Err(format!(
            "output names are 1 to {OUTPUT_NAME_BYTES_MAX} bytes of ASCII letters, digits, '.', '_' and '-', not starting with '.'; {:?} is not",
            crate::runtime::job::truncate_utf8(name.to_string(), OUTPUT_NAME_BYTES_MAX + 8)
        ));
    }
    Ok(())
}

/// An input blob's stream: positioned reads of its file (shared with the
/// input's other streams), up to its size.
pub(crate) struct BlobReader {
    blobs: Blobs,
    file: Arc<std::fs::File>,
    offset: u64,
    end: u64,
}

impl BlobReader {
    /// Fails the attempt with the node's fault, and the read with it.
    fn failed(&self, why: String) -> StreamError {
        let mut state = self.blobs.state();
        state.fault.get_or_insert(OutputFault::Input(why.clone()));
        StreamError::LastOperationFailed(wasmtime::format_err!("{why}"))
    }
}

#[async_trait::async_trait]
impl InputStream for BlobReader {
    fn read(&mut self, size: usize) -> Result<Bytes, StreamError> {
        use std::os::unix::fs::FileExt;
        let left = self.end - self.offset;
        if left == 0 {
            return Err(StreamError::Closed);
        }
        let want = (size.min(INPUT_READ_BYTES_MAX) as u64).min(left) as usize;
        if want == 0 {
            return Ok(Bytes::new());
        }
        let mut buffer = vec![0; want];
        let read = loop {
            match self.file.read_at(&mut buffer, self.offset) {
                Ok(read) => break read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(self.failed(format!("cannot read an input blob: {error}")));
                }
            }
        };
        if read == 0 {
            // The file is shorter than the blob: it was cut on this node.
            self.offset = self.end;
            return Err(self.failed("an input blob's file on this node ended early".into()));
        }
        buffer.truncate(read);
        self.offset += read as u64;
        Ok(Bytes::from(buffer))
    }

    fn skip(&mut self, nelem: usize) -> Result<usize, StreamError> {
        let left = self.end - self.offset;
        if left == 0 {
            return Err(StreamError::Closed);
        }
        let skip = (nelem as u64).min(left);
        self.offset += skip;
        Ok(skip as usize)
    }
}

#[async_trait::async_trait]
impl Pollable for BlobReader {
    async fn ready(&mut self) {}
}

/// An output blob's stream.
pub(crate) struct BlobWriter {
    blobs: Blobs,
    output: Arc<Mutex<Output>>,
}

#[async_trait::async_trait]
impl OutputStream for BlobWriter {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.blobs.write(&self.output, &bytes)
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        // Kept when the attempt ends (see `Blobs::finish`): nothing to do.
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        if self.blobs.state().fault.is_some() || lock(&self.output).file.is_none() {
            return Err(StreamError::Closed);
        }
        Ok(OUTPUT_WRITE_BUDGET)
    }
}

#[async_trait::async_trait]
impl Pollable for BlobWriter {
    async fn ready(&mut self) {}
}

/// Where a sandbox process's output file is, for the node to adopt: it
/// must be a file directly under `dir`.
pub(crate) fn adoptable(dir: &Path, file: &Path) -> bool {
    file.parent() == Some(dir) && file.file_name().is_some()
}

/// Refuses a write of `bytes` more to the disk holding `dir` when it would
/// leave less than [`BLOB_DISK_RESERVE_BYTES`] free: blobs share the disk
/// with the journal, which must always be able to grow.
pub(crate) fn check_free(dir: &Path, bytes: u64) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: all-zero bytes are a valid `statvfs` (plain integers).
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` a valid place for the
    // answer; statvfs writes nothing else.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let free = (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64);
    if free < bytes.saturating_add(BLOB_DISK_RESERVE_BYTES) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!(
                "{free} bytes free, and the node keeps {BLOB_DISK_RESERVE_BYTES} free for its journal"
            ),
        ));
    }
    Ok(())
}
