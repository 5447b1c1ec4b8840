//! The Rust client of cohort's HTTP API.
//!
//! [`Client`] is what a program uses: `submit` returns at once, and the
//! submissions made within a millisecond go out as one batch request with
//! idempotency keys; `result` waits through one long-poll per client, and
//! a list of nodes gives failover. [`Node`] is one node's API call by
//! call. The `cohort` CLI uses both; the rules the three clients (Rust,
//! Python, TypeScript) share are in `clients/PROTOCOL.md`.
//!
//! ```no_run
//! # async fn example() -> Result<(), cohort_client::ClientError> {
//! use cohort_client::{Client, Options, SubmitRequest};
//! let client = Client::new(&["http://127.0.0.1:7070"], Options::default())?;
//! let module = client.upload_file("wordcount.wasm".as_ref()).await?;
//! let jobs: Vec<_> = (0..1000)
//!     .map(|i| client.submit(SubmitRequest::new(&module).text(format!("job {i}"))))
//!     .collect();
//! for job in &jobs {
//!     println!("{:?}", job.result(None).await?);
//! }
//! # Ok(()) }
//! ```
//!
//! Blobs, data named by the sha256 of its bytes, are streamed both ways
//! and never held whole in memory: [`Client::put_blob_file`] and
//! [`Client::put_blob_stream`] upload, [`Client::get_blob`] reads (a
//! [`BlobReader`]: a `Stream` of chunks or an `AsyncRead`, of the whole
//! blob or a range) and [`Client::get_blob_to_file`] downloads, checking
//! the digest before the file appears. [`Client::put_blob`],
//! [`Client::head_blob`] and [`Client::list_blobs`] complete the set.
//! A node answers an upload once the blob is copied to a majority of the
//! back-end nodes, so the wait for that answer grows with the blob's size
//! ([`BLOB_COPY_BYTES_PER_SEC`]), and a download's head may wait for the
//! node to fetch the blob ([`BLOB_FETCH_WAIT`]). A digest may be given in
//! either case.
//!
//! ```no_run
//! # async fn example(client: cohort_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use tokio::io::AsyncReadExt;
//! let blob = client.put_blob_file("frames.tar".as_ref()).await?;
//! let mut reader = client.get_blob(&blob.digest, Some((0, Some(1023)))).await?;
//! let mut first_kib = Vec::new();
//! reader.read_to_end(&mut first_kib).await?;
//! client.get_blob_to_file(&blob.digest, "copy.tar".as_ref()).await?;
//! # Ok(()) }
//! ```

mod blobs;
mod client;
mod codes;
mod node;
pub mod tls;
pub mod transport;
pub mod types;

pub use blobs::{
    BLOB_CHUNK_BYTES, BLOB_COPY_BYTES_PER_SEC, BLOB_FETCH_WAIT, BLOB_IDLE_TIMEOUT, BlobReader,
    SHA256_HEADER,
};
pub use client::{
    BATCH_BYTES_MAX, BATCHES_IN_FLIGHT, Client, Job, LONG_WAIT_MS, Options, SHORT_WAIT_MS,
    WAIT_IDS_MAX, WAITS_IN_FLIGHT,
};
pub use codes::ERROR_CODES;
pub use node::{ClientError, JobQuery, Node, UNKNOWN_CODE_STATUS, status_of_code};
pub use types::*;
