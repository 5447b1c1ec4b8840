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

mod client;
mod codes;
mod node;
pub mod tls;
pub mod transport;
pub mod types;

pub use client::{
    BATCH_BYTES_MAX, BATCHES_IN_FLIGHT, Client, Job, LONG_WAIT_MS, Options, SHORT_WAIT_MS,
    WAIT_IDS_MAX, WAITS_IN_FLIGHT,
};
pub use codes::ERROR_CODES;
pub use node::{ClientError, JobQuery, Node, UNKNOWN_CODE_STATUS, status_of_code};
pub use types::*;
