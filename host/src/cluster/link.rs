//! The singleton proxy: how any node reaches the master without knowing
//! where it runs.
//!
//! [`MasterLink`] offers the master's operations (command, query, poll,
//! wait). If this node hosts the master, a call goes straight to the local
//! [`MasterHandle`]; otherwise it is sent to the node that membership says
//! hosts it, as one postcard-encoded request over HTTP/1.1 keep-alive
//! (`POST /internal/v1/master`).
//!
//! While no master is reachable (none elected yet, a move in progress, the
//! host just died), a call waits and retries as the view changes, for at
//! most [`PROXY_WAIT`]; at most [`PROXY_WAITING_MAX`] calls wait at once.
//! Beyond either bound the call fails with `master_unavailable`, which the
//! API answers as `503` with `Retry-After`: requests never hang and never
//! pile up without bound.

use super::membership::View;
use crate::master::service::{Poll, PollResult, ProgressReport};
use crate::master::{MasterError, MasterHandle};
use crate::peer::Peer;
use cohort_master::{Answer, Command, JobId, Query, Reply, decode, encode};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

/// Longest a call waits for a reachable master.
pub const PROXY_WAIT: Duration = Duration::from_secs(10);
/// Most calls waiting for a master at once.
pub const PROXY_WAITING_MAX: usize = 1024;
/// Pause between attempts while no master answers.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// Extra time allowed on the wire beyond a call's own wait.
const WIRE_SLACK: Duration = Duration::from_secs(10);
/// The internal route.
pub const MASTER_PATH: &str = "/internal/v1/master";

/// A master operation on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireRequest {
    /// `MasterHandle::command`.
    Command(Command),
    /// `MasterHandle::query`.
    Query(Query),
    /// `MasterHandle::poll`.
    Poll(Poll),
    /// `MasterHandle::progress`.
    Progress {
        /// The job.
        id: JobId,
    },
    /// `MasterHandle::wait_settled`.
    Wait {
        /// The job.
        id: JobId,
        /// Longest wait.
        wait_ms: u64,
    },
}

impl WireRequest {
    /// Whether sending it twice has the effect of sending it once: every
    /// request but a submission without an idempotency key (reports of a
    /// finished attempt count once, cancels and reads repeat freely).
    fn repeatable(&self) -> bool {
        match self {
            WireRequest::Command(Command::Submit { spec, .. }) => spec.idempotency_key.is_some(),
            _ => true,
        }
    }

    fn wait(&self) -> Duration {
        match self {
            WireRequest::Poll(Poll { wait_ms, .. }) | WireRequest::Wait { wait_ms, .. } => {
                Duration::from_millis(*wait_ms)
            }
            _ => Duration::ZERO,
        }
    }
}

/// A master operation's result on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireResponse {
    /// For a command.
    Reply(Reply),
    /// For a query.
    Answer(Answer),
    /// For a poll.
    Poll(PollResult),
    /// For a wait: whether the job settled.
    Settled(bool),
    /// For a progress request.
    Progress(Option<ProgressReport>),
}

/// Serves a wire request with the local master.
pub async fn serve_local(
    master: &MasterHandle,
    request: WireRequest,
) -> Result<WireResponse, MasterError> {
    Ok(match request {
        WireRequest::Command(command) => WireResponse::Reply(master.command(command).await?),
        WireRequest::Query(query) => WireResponse::Answer(master.query(query).await?),
        WireRequest::Poll(poll) => WireResponse::Poll(master.poll(poll).await?),
        WireRequest::Progress { id } => WireResponse::Progress(master.progress(id).await?),
        WireRequest::Wait { id, wait_ms } => WireResponse::Settled(
            master
                .wait_settled(id, Duration::from_millis(wait_ms))
                .await?,
        ),
    })
}

/// The answer to `POST /internal/v1/master`: postcard of
/// `Result<WireResponse, MasterError>`. A node that just handed the master
/// over answers `Moved` with where to, so proxies need not wait for gossip
/// to tell them.
pub async fn serve_wire(link: &MasterLink, body: &[u8]) -> Vec<u8> {
    let result = match (link.local(), decode::<WireRequest>(body)) {
        (_, Err(rejection)) => Err(MasterError::Rejected(rejection)),
        (None, Ok(_)) => Err(match link.moved() {
            Some(url) => MasterError::Moved(url),
            None => MasterError::Unavailable("this node does not host the master".into()),
        }),
        (Some(master), Ok(request)) => serve_local(&master, request).await,
    };
    encode(&result)
}

/// Reaches the master wherever it runs. Cheap to clone.
#[derive(Clone)]
pub struct MasterLink {
    inner: Arc<Inner>,
}

struct Inner {
    local: watch::Receiver<Option<MasterHandle>>,
    view: watch::Receiver<View>,
    peer: Peer,
    waiting: Semaphore,
    /// Where this node handed the master over to, until it hosts again.
    moved: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for MasterLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterLink").finish_non_exhaustive()
    }
}

impl MasterLink {
    /// A link that uses `local` when this node hosts the master and the
    /// node named by `view` otherwise, reached through `peer`.
    pub fn new(
        local: watch::Receiver<Option<MasterHandle>>,
        view: watch::Receiver<View>,
        peer: Peer,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                local,
                view,
                peer,
                waiting: Semaphore::new(PROXY_WAITING_MAX),
                moved: std::sync::Mutex::new(None),
            }),
        }
    }

    /// Records where this node handed the master over to (`None` once it
    /// hosts it again).
    pub fn set_moved(&self, url: Option<String>) {
        *self.inner.moved.lock().unwrap_or_else(|e| e.into_inner()) = url;
    }

    fn moved(&self) -> Option<String> {
        self.inner
            .moved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The master hosted on this node, if it is.
    pub fn local(&self) -> Option<MasterHandle> {
        self.inner.local.borrow().clone()
    }

    /// The node hosting the master and its epoch, as this node sees it.
    pub fn host(&self) -> Option<(String, u64)> {
        if let Some(local) = self.local() {
            return Some((self.inner.view.borrow().me.clone(), local.epoch()));
        }
        let view = self.inner.view.borrow();
        view.master_host()
            .map(|m| (m.node_id.clone(), m.master_epoch.unwrap_or(0)))
    }

    /// Runs a command.
    pub async fn command(&self, command: Command) -> Result<Reply, MasterError> {
        match self.call(WireRequest::Command(command)).await? {
            WireResponse::Reply(reply) => Ok(reply),
            other => Err(unexpected(other)),
        }
    }

    /// Answers a query.
    pub async fn query(&self, query: Query) -> Result<Answer, MasterError> {
        match self.call(WireRequest::Query(query)).await? {
            WireResponse::Answer(answer) => Ok(answer),
            other => Err(unexpected(other)),
        }
    }

    /// A worker's poll (see [`MasterHandle::poll`]).
    pub async fn poll(&self, poll: Poll) -> Result<PollResult, MasterError> {
        match self.call(WireRequest::Poll(poll)).await? {
            WireResponse::Poll(result) => Ok(result),
            other => Err(unexpected(other)),
        }
    }

    /// The latest progress of a running job, wherever it runs.
    pub async fn progress(&self, id: JobId) -> Result<Option<ProgressReport>, MasterError> {
        match self.call(WireRequest::Progress { id }).await? {
            WireResponse::Progress(progress) => Ok(progress),
            other => Err(unexpected(other)),
        }
    }

    /// Waits for a job to settle (see [`MasterHandle::wait_settled`]).
    pub async fn wait_settled(&self, id: JobId, wait: Duration) -> Result<bool, MasterError> {
        let request = WireRequest::Wait {
            id,
            wait_ms: wait.as_millis() as u64,
        };
        match self.call(request).await? {
            WireResponse::Settled(settled) => Ok(settled),
            other => Err(unexpected(other)),
        }
    }

    async fn call(&self, request: WireRequest) -> Result<WireResponse, MasterError> {
        let deadline = Instant::now() + PROXY_WAIT;
        let mut local = self.inner.local.clone();
        let mut view = self.inner.view.clone();
        let mut _waiting = None;
        let mut last_error = String::from("no node hosts the master yet");
        let started = Instant::now();
        let mut tries = 0u32;
        let mut redirect: Option<String> = None;
        loop {
            tries += 1;
            let here = local.borrow_and_update().clone();
            let there = redirect.take().or_else(|| {
                let view = view.borrow_and_update();
                view.master_host()
                    .filter(|host| host.node_id != view.me)
                    .map(|host| host.http.clone())
            });
            let tried = there.clone();
            let result = match (here, there) {
                (Some(master), _) => Some(serve_local(&master, request.clone()).await),
                (None, Some(url)) => Some(self.remote(&url, &request).await),
                (None, None) => None,
            };
            match result {
                Some(Err(MasterError::Moved(url))) => {
                    last_error = format!("the master moved to {url}");
                    if tried.as_ref() != Some(&url) && Instant::now() < deadline {
                        // Follow the hint at once instead of waiting for gossip.
                        redirect = Some(url);
                        continue;
                    }
                }
                Some(Err(MasterError::Unavailable(reason))) => last_error = reason,
                Some(done) => {
                    if tries > 1 {
                        tracing::info!(
                            "reached the master after {tries} tries in {:.1?}",
                            started.elapsed()
                        );
                    }
                    return done;
                }
                None => {}
            }
            tracing::debug!("master not reachable (try {tries}): {last_error}");
            if Instant::now() >= deadline {
                return Err(MasterError::Unavailable(format!(
                    "no master reachable within {PROXY_WAIT:?}: {last_error}"
                )));
            }
            if _waiting.is_none() {
                _waiting = Some(self.inner.waiting.try_acquire().map_err(|_| {
                    MasterError::Unavailable(format!(
                        "{PROXY_WAITING_MAX} requests are already waiting for the master"
                    ))
                })?);
            }
            // A closed channel (the node is stopping) must not wake the loop
            // at once, or it would spin: only real changes and the pause do.
            tokio::select! {
                Ok(()) = local.changed() => {}
                Ok(()) = view.changed() => {}
                _ = tokio::time::sleep(RETRY_PAUSE) => {}
            }
        }
    }

    /// One request to the master on another node; transport failures come
    /// back as `Unavailable` so the caller retries.
    async fn remote(&self, url: &str, request: &WireRequest) -> Result<WireResponse, MasterError> {
        let body = self
            .inner
            .peer
            .post_postcard(
                &format!("{url}{MASTER_PATH}"),
                request,
                request.wait() + WIRE_SLACK,
            )
            .await
            .map_err(|error| {
                if error.not_acted_on || request.repeatable() {
                    MasterError::Unavailable(error.message)
                } else {
                    // It may have been decided: sending it again could
                    // create a second job. The client decides (with an
                    // idempotency key, a retry is safe).
                    MasterError::Indeterminate(error.message)
                }
            })?;
        decode::<Result<WireResponse, MasterError>>(&body)
            .map_err(|r| MasterError::Unavailable(format!("{url}: {r}")))?
    }
}

fn unexpected(response: WireResponse) -> MasterError {
    MasterError::Unavailable(format!("unexpected answer from the master: {response:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_master::JobSpec;

    #[test]
    fn only_a_submission_without_a_key_is_not_sent_twice() {
        let spec = |key: Option<&str>| JobSpec {
            module: [0; 32],
            input: Vec::new(),
            timeout_ms: 1000,
            memory_bytes: None,
            max_attempts: 1,
            priority: 0,
            idempotency_key: key.map(String::from),
        };
        let submit = |key| {
            let request = cohort_master::RequestId { origin: 1, seq: 1 };
            WireRequest::Command(Command::Submit {
                spec: spec(key),
                request,
            })
        };
        assert!(!submit(None).repeatable());
        assert!(submit(Some("k")).repeatable());
        assert!(WireRequest::Command(Command::Cancel { id: 1 }).repeatable());
        assert!(WireRequest::Query(Query::Stats).repeatable());
    }
}
