//! The client a program uses: `submit` in a loop, `result` when needed.
//!
//! Three background tasks do the work behind those calls (the rules are
//! `clients/PROTOCOL.md`, shared with the Python and TypeScript clients):
//!
//! * the **batcher** gathers the submissions made within the linger window
//!   into one `POST /v1/jobs/batch` (at most [`Options::batch_max`] jobs or
//!   [`BATCH_BYTES_MAX`] of body; up to [`BATCHES_IN_FLIGHT`] batches at
//!   once), and resends what did not land;
//! * the **waiter** watches every job from the moment it is accepted (so a
//!   loop that awaits results one by one finds them already there) with
//!   at most [`WAITS_IN_FLIGHT`] `POST /v1/jobs/wait` long-polls, whatever
//!   the number of jobs; a job whose every handle was dropped is
//!   forgotten;
//! * every request picks its node from [`Nodes`], which skips a node that
//!   stopped answering for a while.
//!
//! Every submission carries an idempotency key, so a resend after a
//! timeout, a reset or a `503` finds the job its first try created.

use crate::node::{ClientError, Node};
use crate::transport::Transport;
use crate::types::*;
use base64::Engine as _;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OnceCell, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Most body bytes one batch request carries; a batch that would pass it
/// goes out at once.
pub const BATCH_BYTES_MAX: usize = 8 << 20;
/// Batches sent at once; the batcher waits for one to finish beyond.
pub const BATCHES_IN_FLIGHT: usize = 8;
/// Wait requests in flight at once.
pub const WAITS_IN_FLIGHT: usize = 4;
/// Most ids in one wait request (the server's limit).
pub const WAIT_IDS_MAX: usize = 10_000;
/// How long a wait request asks the server to wait; the last free slot's
/// request waits [`SHORT_WAIT_MS`], so a job awaited while the others wait
/// on long jobs is seen within about that long.
pub const LONG_WAIT_MS: u64 = 25_000;
/// See [`LONG_WAIT_MS`].
pub const SHORT_WAIT_MS: u64 = 1_000;
/// Longest a batch request may take before it is resent (the server
/// answers once the batch is durable on a majority of the voters).
const BATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// What a wait request may take beyond its `wait_ms`.
const WAIT_SLACK: Duration = Duration::from_secs(15);
/// First retry pause; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest retry pause (before `Retry-After`).
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long a node that failed is skipped at first; doubles per failure.
const SKIP_MIN: Duration = Duration::from_secs(2);
/// Longest a failing node is skipped.
const SKIP_MAX: Duration = Duration::from_secs(30);

/// How a [`Client`] behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// API token, sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// PEM CA certificate to trust for `https://` nodes (default: the
    /// system's roots).
    pub ca_cert: Option<PathBuf>,
    /// How long a submission waits for others to share its batch request.
    pub linger: Duration,
    /// Most jobs per batch request (the server takes up to 10,000).
    pub batch_max: usize,
    /// How long a submission, or any other call, keeps retrying before it
    /// fails with the last error.
    pub retry_deadline: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            token: None,
            ca_cert: None,
            linger: Duration::from_millis(1),
            batch_max: 1000,
            retry_deadline: Duration::from_secs(60),
        }
    }
}

/// A client of a cohort cluster. Cheap to clone; the background tasks stop
/// when the last clone (and the last [`Job`]) is dropped. Must be made
/// inside a tokio runtime.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    batcher: mpsc::UnboundedSender<Queued>,
    waiter: mpsc::UnboundedSender<Watch>,
    uploaded: Arc<Mutex<HashMap<PathBuf, String>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("nodes", &self.shared.nodes.urls())
            .finish_non_exhaustive()
    }
}

/// What the background tasks share with the client.
struct Shared {
    nodes: Nodes,
    options: Options,
}

type Answer<T> = oneshot::Sender<Result<T, ClientError>>;

/// A submission waiting for its batch.
struct Queued {
    request: SubmitRequest,
    bytes: usize,
    respond: Answer<SubmitResponse>,
    /// Where the waiter reports the job's end, once it is accepted.
    finished: Answer<FinishedBody>,
}

/// A job to watch until it finishes.
struct Watch {
    id: JobId,
    respond: Answer<FinishedBody>,
}

impl Client {
    /// A client of the nodes at `urls` (e.g. `["http://10.0.0.1:7070"]`),
    /// tried in order.
    pub fn new<S: AsRef<str>>(urls: &[S], options: Options) -> Result<Self, ClientError> {
        if urls.is_empty() {
            return Err(ClientError::Protocol("no node URL given".into()));
        }
        let invalid = |reason: String| ClientError::Protocol(reason);
        let https = urls.iter().any(|u| u.as_ref().starts_with("https://"));
        let tls = if https {
            crate::tls::client_config(options.ca_cert.as_deref()).map_err(invalid)?
        } else {
            crate::tls::trusting_nothing()
        };
        let transport = Transport::new(tls, options.token.as_deref()).map_err(invalid)?;
        let nodes = urls
            .iter()
            .map(|url| Node::with_transport(url.as_ref(), transport.clone()))
            .collect();
        let shared = Arc::new(Shared {
            nodes: Nodes::new(nodes),
            options,
        });
        let (batcher, queued) = mpsc::unbounded_channel();
        let (waiter, watches) = mpsc::unbounded_channel();
        tokio::spawn(batch_loop(shared.clone(), queued, waiter.clone()));
        tokio::spawn(wait_loop(shared.clone(), watches));
        Ok(Self {
            shared,
            batcher,
            waiter,
            uploaded: Default::default(),
        })
    }

    /// Submits a job; returns at once. The request's `idempotency_key` is
    /// kept if set, else the client makes one.
    pub fn submit(&self, mut request: SubmitRequest) -> Job {
        let key = request
            .idempotency_key
            .get_or_insert_with(idempotency_key)
            .clone();
        let (respond, accepted) = oneshot::channel();
        let (finished, ended) = oneshot::channel();
        let bytes = serde_json::to_vec(&request).map_or(0, |b| b.len());
        let queued = Queued {
            request,
            bytes,
            respond,
            finished,
        };
        if let Err(mpsc::error::SendError(queued)) = self.batcher.send(queued) {
            let _ = queued.respond.send(Err(stopped("batcher")));
        }
        Job {
            client: self.clone(),
            key: Some(key),
            accepted: Arc::new(Later::pending(accepted)),
            finished: Arc::new(Later::pending(ended)),
        }
    }

    /// The job with id `id` (submitted by anyone).
    pub fn get(&self, id: JobId) -> Job {
        Job {
            client: self.clone(),
            key: None,
            accepted: Arc::new(Later::ready(Ok(SubmitResponse { id, existing: true }))),
            finished: Arc::new(Later::unasked()),
        }
    }

    /// Submits a job per input (each `template` with that input), waits
    /// for all, and returns their outputs in order; the first job that did
    /// not succeed fails the call.
    pub async fn map(
        &self,
        template: &SubmitRequest,
        inputs: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<Vec<Bytes>, ClientError> {
        let jobs: Vec<Job> = inputs
            .into_iter()
            .map(|input| self.submit(template.clone().bytes(input)))
            .collect();
        let mut outputs = Vec::with_capacity(jobs.len());
        for job in &jobs {
            outputs.push(job.result(None).await?);
        }
        Ok(outputs)
    }

    /// Uploads a module; returns its digest.
    pub async fn upload(&self, wasm: Vec<u8>) -> Result<String, ClientError> {
        self.call(|node| {
            let wasm = wasm.clone();
            async move { node.upload(wasm).await }
        })
        .await
    }

    /// Uploads the module at `path` once per client; returns its digest.
    pub async fn upload_file(&self, path: &Path) -> Result<String, ClientError> {
        if let Some(digest) = self.uploaded.lock().expect("not poisoned").get(path) {
            return Ok(digest.clone());
        }
        let wasm = std::fs::read(path)
            .map_err(|e| ClientError::Protocol(format!("cannot read {}: {e}", path.display())))?;
        let digest = self.upload(wasm).await?;
        self.uploaded
            .lock()
            .expect("not poisoned")
            .insert(path.to_path_buf(), digest.clone());
        Ok(digest)
    }

    /// Uploads the module at `path` and points deployment `name` at it:
    /// jobs may then name their module `name`. Safe to repeat (the same
    /// module again makes no new version).
    pub async fn deploy_file(
        &self,
        name: &str,
        path: &Path,
    ) -> Result<DeployResponse, ClientError> {
        let digest = self.upload_file(path).await?;
        self.call(|node| {
            let digest = digest.clone();
            async move { node.deploy(name, &digest).await }
        })
        .await
    }

    /// The node URLs, in the order they are tried.
    pub fn urls(&self) -> Vec<String> {
        self.shared.nodes.urls()
    }

    /// Runs `call` on a node, retrying (on the next node when one fails)
    /// what may succeed again, until the retry deadline: for calls that
    /// are safe to repeat.
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        F: Fn(Node) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        self.call_while(call, || true).await
    }

    /// [`call`](Self::call), retrying only while `again()` says the call
    /// may still be repeated (an upload from a reader, until it has read a
    /// byte).
    pub(crate) async fn call_while<T, F, Fut>(
        &self,
        call: F,
        again: impl Fn() -> bool,
    ) -> Result<T, ClientError>
    where
        F: Fn(Node) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let shared = &self.shared;
        let deadline = Instant::now() + shared.options.retry_deadline;
        let mut retry = Retry::default();
        loop {
            let (index, node) = shared.nodes.pick();
            match call(node).await {
                Ok(value) => {
                    shared.nodes.answered(index);
                    return Ok(value);
                }
                Err(error) if error.retryable() && Instant::now() < deadline && again() => {
                    retry.pause(&shared.nodes, index, &error, deadline).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Has the waiter watch job `id`; the receiver gets its end.
    fn watch(&self, id: JobId) -> oneshot::Receiver<Result<FinishedBody, ClientError>> {
        let (respond, finished) = oneshot::channel();
        if let Err(mpsc::error::SendError(watch)) = self.waiter.send(Watch { id, respond }) {
            let _ = watch.respond.send(Err(stopped("waiter")));
        }
        finished
    }
}

fn stopped(task: &str) -> ClientError {
    ClientError::Protocol(format!("the client's {task} stopped"))
}

/// A value that arrives later through a channel, awaited by any number of
/// callers, any of whom may give up (a timeout) without losing it for the
/// others.
struct Later<T> {
    value: OnceCell<Result<T, ClientError>>,
    pending: tokio::sync::Mutex<Option<oneshot::Receiver<Result<T, ClientError>>>>,
}

impl<T: Clone> Later<T> {
    fn ready(value: Result<T, ClientError>) -> Self {
        Self {
            value: OnceCell::new_with(Some(value)),
            pending: Default::default(),
        }
    }

    fn pending(receiver: oneshot::Receiver<Result<T, ClientError>>) -> Self {
        Self {
            value: OnceCell::new(),
            pending: tokio::sync::Mutex::new(Some(receiver)),
        }
    }

    /// Nothing asked for yet: the first [`get`](Self::get) asks.
    fn unasked() -> Self {
        Self {
            value: OnceCell::new(),
            pending: Default::default(),
        }
    }

    fn peek(&self) -> Option<&Result<T, ClientError>> {
        self.value.get()
    }

    /// The value; `ask` makes the receiver if nobody has yet.
    async fn get<F, Fut>(&self, ask: F) -> Result<T, ClientError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<
                Output = Result<oneshot::Receiver<Result<T, ClientError>>, ClientError>,
            >,
    {
        if let Some(value) = self.value.get() {
            return value.clone();
        }
        let mut pending = self.pending.lock().await;
        if let Some(value) = self.value.get() {
            return value.clone();
        }
        if pending.is_none() {
            *pending = Some(ask().await?);
        }
        let receiver = pending.as_mut().expect("just made");
        // Cancellation-safe: a caller that stops waiting leaves the
        // receiver in place for the next.
        let value = receiver
            .await
            .unwrap_or_else(|_| Err(stopped("background task")));
        let _ = self.value.set(value.clone());
        *pending = None;
        value
    }
}

/// A submitted job. Cheap to clone.
#[derive(Clone)]
pub struct Job {
    client: Client,
    key: Option<String>,
    accepted: Arc<Later<SubmitResponse>>,
    finished: Arc<Later<FinishedBody>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("key", &self.key)
            .field("accepted", &self.accepted.peek())
            .finish_non_exhaustive()
    }
}

impl Job {
    /// The submission's idempotency key (`None` for [`Client::get`]).
    pub fn idempotency_key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// How the submission landed: the job's id, and whether its key found
    /// an existing job. Fails with the server's error if it was refused.
    pub async fn accepted(&self) -> Result<SubmitResponse, ClientError> {
        self.accepted
            .get(|| async { Err(ClientError::Protocol("the submission was lost".into())) })
            .await
    }

    /// The job's id, once its batch landed.
    pub async fn id(&self) -> Result<JobId, ClientError> {
        Ok(self.accepted().await?.id)
    }

    /// Waits until the job finishes (at most `timeout`, if given) and
    /// returns how it ended, whatever the state.
    pub async fn finished(&self, timeout: Option<Duration>) -> Result<FinishedBody, ClientError> {
        let started = Instant::now();
        let wait = async {
            let id = self.id().await?;
            self.finished
                .get(|| async move { Ok(self.client.watch(id)) })
                .await
        };
        match timeout {
            None => wait.await,
            Some(limit) => match tokio::time::timeout(limit, wait).await {
                Ok(finished) => finished,
                Err(_) => Err(ClientError::WaitTimeout {
                    id: self
                        .accepted
                        .peek()
                        .and_then(|a| a.as_ref().ok())
                        .map(|a| a.id),
                    waited: started.elapsed(),
                }),
            },
        }
    }

    /// Waits until the job finishes (at most `timeout`, if given) and
    /// returns its output; a job that did not succeed fails with its own
    /// error code ([`ClientError::Job`]).
    pub async fn result(&self, timeout: Option<Duration>) -> Result<Bytes, ClientError> {
        let finished = self.finished(timeout).await?;
        if finished.state != "succeeded" {
            let error = finished.error.unwrap_or(ErrorBody {
                code: finished.state.clone(),
                message: String::new(),
                retryable: None,
            });
            return Err(ClientError::Job {
                id: finished.id,
                state: finished.state,
                code: error.code,
                message: error.message,
            });
        }
        match finished.output_base64 {
            Some(encoded) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map(Bytes::from)
                .map_err(|e| ClientError::Protocol(format!("output_base64: {e}"))),
            None => {
                let id = finished.id;
                self.client
                    .call(|node| async move { node.result(id).await })
                    .await
            }
        }
    }

    /// The job's whole record.
    pub async fn status(&self) -> Result<JobResponse, ClientError> {
        let id = self.id().await?;
        self.client
            .call(|node| async move { node.job(id, 0).await })
            .await
    }

    /// Cancels the job (if it has not finished); returns its record.
    pub async fn cancel(&self) -> Result<JobResponse, ClientError> {
        let id = self.id().await?;
        self.client
            .call(|node| async move { node.cancel(id).await })
            .await
    }
}

/// A new idempotency key: `rs-` and 128 random bits in hex.
fn idempotency_key() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS has randomness");
    let mut key = String::with_capacity(35);
    key.push_str("rs-");
    for byte in bytes {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

/// Gathers submissions into batch requests until the client is dropped.
async fn batch_loop(
    shared: Arc<Shared>,
    mut queued: mpsc::UnboundedReceiver<Queued>,
    waiter: mpsc::UnboundedSender<Watch>,
) {
    let in_flight = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    while let Some(first) = queued.recv().await {
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        let closes = Instant::now() + shared.options.linger;
        while batch.len() < shared.options.batch_max && bytes < BATCH_BYTES_MAX {
            let next = match queued.try_recv() {
                Ok(next) => Some(next),
                Err(_) => tokio::time::timeout_at(closes, queued.recv())
                    .await
                    .ok()
                    .flatten(),
            };
            let Some(next) = next else { break };
            bytes += next.bytes;
            batch.push(next);
        }
        let permit = in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        let shared = shared.clone();
        let waiter = waiter.clone();
        tokio::spawn(async move {
            send_batch(&shared, batch, &waiter).await;
            drop(permit);
        });
    }
}

/// Sends a batch, resending what did not land (with the same keys) until
/// the retry deadline; answers every submission.
async fn send_batch(
    shared: &Shared,
    mut batch: Vec<Queued>,
    waiter: &mpsc::UnboundedSender<Watch>,
) {
    let deadline = Instant::now() + shared.options.retry_deadline;
    let mut retry = Retry::default();
    while !batch.is_empty() {
        let (index, node) = shared.nodes.pick();
        let request = BatchRequest {
            jobs: batch.iter().map(|q| q.request.clone()).collect(),
        };
        // The error to pause after, and whether the node answered (its
        // items were refused: the node is not at fault).
        let (error, answered) = match node.submit_batch_within(&request, BATCH_TIMEOUT).await {
            Ok(answer) if answer.results.len() != batch.len() => (
                ClientError::Protocol(format!(
                    "{} answers to a batch of {}",
                    answer.results.len(),
                    batch.len()
                )),
                false,
            ),
            Ok(answer) => {
                shared.nodes.answered(index);
                let mut again = Vec::new();
                let mut last = None;
                for (queued, result) in batch.into_iter().zip(answer.results) {
                    match result {
                        BatchItem::Accepted(accepted) => {
                            let watch = Watch {
                                id: accepted.id,
                                respond: queued.finished,
                            };
                            if let Err(mpsc::error::SendError(watch)) = waiter.send(watch) {
                                let _ = watch.respond.send(Err(stopped("waiter")));
                            }
                            let _ = queued.respond.send(Ok(accepted));
                        }
                        BatchItem::Refused(error) => {
                            let error = ClientError::refused(error);
                            if error.retryable() && Instant::now() < deadline {
                                again.push(queued);
                                last = Some(error);
                            } else {
                                let _ = queued.respond.send(Err(error));
                            }
                        }
                    }
                }
                batch = again;
                match last {
                    Some(error) => (error, true),
                    None => return,
                }
            }
            Err(error) => (error, false),
        };
        if !error.retryable() || Instant::now() >= deadline {
            for queued in batch {
                let _ = queued.respond.send(Err(error.clone()));
            }
            return;
        }
        if answered {
            retry.backoff(&error, deadline).await;
        } else {
            retry.pause(&shared.nodes, index, &error, deadline).await;
        }
    }
}

/// Watches the awaited jobs with at most [`WAITS_IN_FLIGHT`] wait requests
/// until the client is dropped and nothing is awaited.
async fn wait_loop(shared: Arc<Shared>, mut watches: mpsc::UnboundedReceiver<Watch>) {
    let mut waiting: HashMap<JobId, Vec<oneshot::Sender<Result<FinishedBody, ClientError>>>> =
        HashMap::new();
    // Awaited jobs no request in flight asks about.
    let mut unwatched: VecDeque<JobId> = VecDeque::new();
    let mut polls: JoinSet<(Vec<JobId>, Result<WaitResponse, ClientError>)> = JoinSet::new();
    let mut open = true;
    loop {
        while polls.len() < WAITS_IN_FLIGHT && !unwatched.is_empty() {
            let mut ids = Vec::new();
            while ids.len() < WAIT_IDS_MAX {
                let Some(id) = unwatched.pop_front() else {
                    break;
                };
                // Forget jobs nobody awaits any more (a timed-out result()).
                let awaited = waiting.get_mut(&id).is_some_and(|senders| {
                    senders.retain(|s| !s.is_closed());
                    !senders.is_empty()
                });
                if awaited {
                    ids.push(id);
                } else {
                    waiting.remove(&id);
                }
            }
            if ids.is_empty() {
                break;
            }
            let wait_ms = if polls.len() + 1 == WAITS_IN_FLIGHT {
                SHORT_WAIT_MS
            } else {
                LONG_WAIT_MS
            };
            let shared = shared.clone();
            polls.spawn(async move {
                let result = poll(&shared, &ids, wait_ms).await;
                (ids, result)
            });
        }
        if !open && polls.is_empty() && unwatched.is_empty() {
            return;
        }
        tokio::select! {
            watch = watches.recv(), if open => match watch {
                Some(Watch { id, respond }) => {
                    let senders = waiting.entry(id).or_default();
                    if senders.is_empty() {
                        unwatched.push_back(id);
                    }
                    senders.push(respond);
                }
                None => open = false,
            },
            Some(joined) = polls.join_next() => {
                let Ok((ids, result)) = joined else { continue };
                match result {
                    Ok(answer) => {
                        for job in answer.jobs {
                            for sender in waiting.remove(&job.id).unwrap_or_default() {
                                let _ = sender.send(Ok(job.clone()));
                            }
                        }
                        unwatched.extend(ids.into_iter().filter(|id| waiting.contains_key(id)));
                    }
                    Err(error) => {
                        for id in ids {
                            for sender in waiting.remove(&id).unwrap_or_default() {
                                let _ = sender.send(Err(error.clone()));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One wait request, retried (on the next node when one fails) while the
/// errors may pass: a waiting caller gives up by its own timeout, not on a
/// node's loss. Fails only on an error that will not pass (a bad token,
/// say).
async fn poll(shared: &Shared, ids: &[JobId], wait_ms: u64) -> Result<WaitResponse, ClientError> {
    let mut retry = Retry::default();
    loop {
        let (index, node) = shared.nodes.pick();
        let within = Duration::from_millis(wait_ms) + WAIT_SLACK;
        match node.wait_within(ids, wait_ms, within).await {
            Ok(answer) => {
                shared.nodes.answered(index);
                return Ok(answer);
            }
            Err(error) if error.retryable() => {
                let forever = Instant::now() + Duration::from_secs(3600);
                retry.pause(&shared.nodes, index, &error, forever).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Exponential backoff with full jitter between tries of one request.
#[derive(Default)]
struct Retry {
    tries: u32,
}

impl Retry {
    /// After `error` from node `index`: marks the node as failing if the
    /// error says it is (unreachable, `503`), then pauses — not at all if
    /// another node may answer, else as [`backoff`](Self::backoff).
    async fn pause(&mut self, nodes: &Nodes, index: usize, error: &ClientError, deadline: Instant) {
        let node_failed = matches!(
            error,
            ClientError::Transport { .. } | ClientError::Api { status: 503, .. }
        );
        if node_failed && nodes.failed(index) {
            return;
        }
        self.backoff(error, deadline).await;
    }

    /// Pauses a random time up to the backoff (at least the server's
    /// `Retry-After`), never past `deadline`: after a node that answered.
    async fn backoff(&mut self, error: &ClientError, deadline: Instant) {
        let ceiling = BACKOFF_MIN
            .saturating_mul(1 << self.tries.min(16))
            .min(BACKOFF_MAX);
        self.tries += 1;
        let mut pause = ceiling.mul_f64(random_fraction());
        if let ClientError::Api {
            retry_after: Some(after),
            ..
        } = error
        {
            pause = pause.max(*after);
        }
        let until = (Instant::now() + pause).min(deadline);
        tokio::time::sleep_until(until).await;
    }
}

/// A uniform number in [0, 1).
fn random_fraction() -> f64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the OS has randomness");
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

/// The nodes a client talks to, and which of them are being skipped.
struct Nodes {
    nodes: Vec<Node>,
    health: Mutex<Vec<Health>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Health {
    failures: u32,
    skip_until: Option<Instant>,
}

impl Nodes {
    fn new(nodes: Vec<Node>) -> Self {
        let health = Mutex::new(vec![Health::default(); nodes.len()]);
        Self { nodes, health }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.server().to_string()).collect()
    }

    /// The first node not being skipped; if all are, the one whose skip
    /// ends first.
    fn pick(&self) -> (usize, Node) {
        let now = Instant::now();
        let health = self.health.lock().expect("not poisoned");
        let index = health
            .iter()
            .position(|h| h.skip_until.is_none_or(|until| until <= now))
            .unwrap_or_else(|| {
                (0..health.len())
                    .min_by_key(|&i| health[i].skip_until)
                    .expect("at least one node")
            });
        (index, self.nodes[index].clone())
    }

    /// Node `index` failed: skip it for a while (longer each time it
    /// fails in a row). Returns whether another node may be tried now.
    fn failed(&self, index: usize) -> bool {
        let now = Instant::now();
        let mut health = self.health.lock().expect("not poisoned");
        let node = &mut health[index];
        let skip = SKIP_MIN
            .saturating_mul(1 << node.failures.min(8))
            .min(SKIP_MAX);
        node.failures += 1;
        node.skip_until = Some(now + skip);
        health
            .iter()
            .any(|h| h.skip_until.is_none_or(|until| until <= now))
    }

    /// Node `index` answered: stop skipping it.
    fn answered(&self, index: usize) {
        self.health.lock().expect("not poisoned")[index] = Health::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Nodes {
        Nodes::new(
            (0..n)
                .map(|i| Node::new(&format!("http://127.0.0.1:{}", 1000 + i)))
                .collect(),
        )
    }

    #[test]
    fn a_failed_node_is_skipped_until_it_answers_or_its_time_passes() {
        let nodes = nodes(3);
        assert_eq!(nodes.pick().0, 0);
        assert!(nodes.failed(0), "two others may answer");
        assert_eq!(nodes.pick().0, 1);
        assert!(nodes.failed(1));
        assert!(!nodes.failed(2), "none left");
        // All skipped: the one whose skip ends first (node 0's, 2 s).
        assert_eq!(nodes.pick().0, 0);
        nodes.answered(1);
        assert_eq!(nodes.pick().0, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn skips_end_and_grow_with_failures_in_a_row() {
        let nodes = nodes(2);
        nodes.failed(0);
        assert_eq!(nodes.pick().0, 1);
        tokio::time::advance(SKIP_MIN).await;
        assert_eq!(nodes.pick().0, 0, "the skip ended");
        nodes.failed(0);
        tokio::time::advance(SKIP_MIN).await;
        assert_eq!(nodes.pick().0, 1, "the second skip is twice as long");
        tokio::time::advance(SKIP_MIN).await;
        assert_eq!(nodes.pick().0, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_honours_retry_after_and_the_deadline() {
        let nodes = nodes(1);
        let mut retry = Retry::default();
        let busy = ClientError::Api {
            status: 429,
            code: "queue_full".into(),
            message: String::new(),
            retryable: true,
            retry_after: Some(Duration::from_secs(1)),
        };
        let started = Instant::now();
        retry
            .pause(&nodes, 0, &busy, started + Duration::from_secs(60))
            .await;
        assert!(started.elapsed() >= Duration::from_secs(1));
        let started = Instant::now();
        retry
            .pause(&nodes, 0, &busy, started + Duration::from_millis(10))
            .await;
        assert!(started.elapsed() <= Duration::from_millis(10));
    }

    #[test]
    fn keys_are_distinct_and_fit_the_servers_limit() {
        let a = idempotency_key();
        let b = idempotency_key();
        assert_ne!(a, b);
        assert_eq!(a.len(), 35);
        assert!(a.starts_with("rs-"));
    }

    #[test]
    fn fractions_stay_in_range() {
        for _ in 0..1000 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f));
        }
    }
}
