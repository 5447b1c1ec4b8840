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
//!
//! When to try again, follow a redirect or give up is decided by the
//! sans-IO [`proxy::Call`], which the replication simulator drives through
//! the same faults as the journal. **Every request is safe to send
//! again**, so a call is retried after any
//! failure, even one after which the master may have acted (a timeout, a
//! connection dropped mid-answer, an answer that does not verify). Reports
//! of an attempt count once, cancels and reads repeat freely, and a
//! submission carries the request id its node drew when the client's
//! request arrived ([`cohort_master::RequestId`]): a master that sees it
//! twice, or the next master that adopted the journal holding it, answers
//! with the job the first one created. An exchange with a node the view no
//! longer names as the master's host is abandoned at once, so a call does
//! not wait out a timeout on a master that died or was replaced.
//!
//! **Commands to a remote master are coalesced.** Commands (submissions,
//! outcome reports, cancels, checkpoints) to one node travel as one
//! `Batch` request when several are waiting: at most [`PROXY_BATCHES_IN_FLIGHT`]
//! batches per destination are on the wire, and whatever arrives meanwhile
//! goes in the next one, so a lone command leaves at once and a stream of
//! them shares requests and the master's journal syncs (group commit across
//! the proxy hop). The serving node queues a batch's commands to its master
//! in order before awaiting any reply. A failed batch fails each of its
//! commands, which their callers retry one by one as above.
//!
//! Only when the wait runs out after such a failure is a submission's fate
//! unknown: the call then fails with `Indeterminate` (`503
//! outcome_unknown`), because the client, retrying without an idempotency
//! key, would be sending a new request.
//!
//! [`PROXY_WAIT`]: crate::limits::PROXY_WAIT
//! [`PROXY_WAITING_MAX`]: crate::limits::PROXY_WAITING_MAX
//! [`PROXY_BATCHES_IN_FLIGHT`]: crate::limits::PROXY_BATCHES_IN_FLIGHT

use crate::contract::{MasterError, Poll, PollResult, ProgressReport};
use crate::limits::{
    BATCH_BYTES_MAX, BATCH_COMMANDS_MAX, PROXY_BATCHES_IN_FLIGHT, PROXY_RETRY_PAUSE, PROXY_WAIT,
    PROXY_WAITING_MAX, UPGRADE_WAIT, WIRE_SLACK,
};
use crate::master::MasterHandle;
use crate::master::service::SwitchReport;
use crate::master::upgrade::{Build, Builds};
use crate::membership::View;
use crate::peer::Peer;
use crate::replication::Leader;
use cohort_master::{Answer, Command, JobId, Query, Reply, decode, encode};
use cohort_replication::proxy;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::time::Instant;

/// The internal route.
pub const MASTER_PATH: &str = "/internal/v1/master";

/// A master operation on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireRequest {
    /// `MasterHandle::command` (boxed: a submission is far larger than
    /// the other requests; postcard writes a box as what it holds).
    Command(Box<Command>),
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
    /// `MasterHandle::commands`: at most [`BATCH_COMMANDS_MAX`].
    Batch(Vec<Command>),
    /// `MasterHandle::wait_finished`.
    WaitFinished {
        /// A [`Query::Finished`].
        query: Query,
        /// Longest wait.
        wait_ms: u64,
    },
    /// How far each replica's journal is behind the master's.
    Replicas,
    /// `MasterHandle::upgrade`: switch to a build already stored on the
    /// master's node (safe to repeat: a build already running is left).
    Upgrade {
        /// The build to run.
        to: Build,
    },
    /// `MasterHandle::builds`.
    Builds,
}

impl WireRequest {
    /// Whether its caller must learn that the master may have acted on it
    /// though no answer came: a submission, whose client would otherwise
    /// send it again as a new request. Every other request is harmless to
    /// repeat or repeated by its sender anyway (reports, polls).
    fn outcome_matters(&self) -> bool {
        matches!(self, WireRequest::Command(command) if matches!(**command, Command::Submit { .. }))
    }

    fn wait(&self) -> Duration {
        match self {
            WireRequest::Poll(Poll { wait_ms, .. })
            | WireRequest::Wait { wait_ms, .. }
            | WireRequest::WaitFinished { wait_ms, .. } => Duration::from_millis(*wait_ms),
            // Compiling and checking a master takes a while.
            WireRequest::Upgrade { .. } => UPGRADE_WAIT,
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
    /// For a batch: each command's result, in order.
    Batch(Vec<Result<Reply, MasterError>>),
    /// For a replicas request: (node, entries it lacks).
    Replicas(Vec<(String, u64)>),
    /// For an upgrade.
    Switched(SwitchReport),
    /// For a builds request.
    Builds(Builds),
}

/// Serves a wire request with the local master.
pub async fn serve_local(
    master: &MasterHandle,
    request: WireRequest,
) -> Result<WireResponse, MasterError> {
    Ok(match request {
        WireRequest::Command(command) => WireResponse::Reply(master.command(*command).await?),
        WireRequest::Query(query) => WireResponse::Answer(master.query(query).await?),
        WireRequest::Poll(poll) => WireResponse::Poll(master.poll(poll).await?),
        WireRequest::Progress { id } => WireResponse::Progress(master.progress(id).await?),
        WireRequest::Wait { id, wait_ms } => WireResponse::Settled(
            master
                .wait_settled(id, Duration::from_millis(wait_ms))
                .await?,
        ),
        WireRequest::WaitFinished { query, wait_ms } => WireResponse::Answer(
            master
                .wait_finished(query, Duration::from_millis(wait_ms))
                .await?,
        ),
        WireRequest::Batch(commands) => {
            if commands.len() > BATCH_COMMANDS_MAX {
                return Err(MasterError::Rejected(cohort_master::Rejection::new(
                    cohort_master::codes::UNDECODABLE,
                    format!(
                        "a batch of {} commands; at most {BATCH_COMMANDS_MAX}",
                        commands.len()
                    ),
                )));
            }
            WireResponse::Batch(master.commands(commands).await)
        }
        WireRequest::Upgrade { to } => WireResponse::Switched(master.upgrade(to).await?),
        WireRequest::Builds => WireResponse::Builds(master.builds()),
        WireRequest::Replicas => WireResponse::Replicas(
            master
                .replication_status()
                .map(|status| status.behind)
                .unwrap_or_default(),
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
    /// How long a call waits for an answer: [`PROXY_WAIT`] (shorter in
    /// tests).
    wait: Duration,
    waiting: Semaphore,
    /// Where this node handed the master over to, until it hosts again.
    moved: std::sync::Mutex<Option<String>>,
    /// Commands waiting to be sent, per destination URL.
    lanes: std::sync::Mutex<HashMap<String, Lane>>,
    /// This node's replication's view of the master (back-end nodes).
    leader: std::sync::OnceLock<watch::Receiver<Leader>>,
}

/// Commands waiting for one destination, and how many batches to it are on
/// the wire. The queue needs no bound of its own: each entry is a caller
/// awaiting its answer (an HTTP request, a worker's report), so callers'
/// own limits bound it.
#[derive(Default)]
struct Lane {
    waiting: VecDeque<Waiting>,
    in_flight: usize,
}

struct Waiting {
    command: Command,
    bytes: usize,
    respond: oneshot::Sender<Result<WireResponse, MasterError>>,
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
        Self::with_wait(local, view, peer, PROXY_WAIT)
    }

    fn with_wait(
        local: watch::Receiver<Option<MasterHandle>>,
        view: watch::Receiver<View>,
        peer: Peer,
        wait: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                local,
                view,
                peer,
                wait,
                waiting: Semaphore::new(PROXY_WAITING_MAX),
                moved: std::sync::Mutex::new(None),
                lanes: std::sync::Mutex::default(),
                leader: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Follows this node's replication too: a master whose claim reached
    /// this node is known here before gossip spreads its epoch, and one
    /// whose heartbeats stopped is not waited for (see [`Self::target`]).
    pub fn follow_replication(&self, leader: watch::Receiver<Leader>) {
        let _ = self.inner.leader.set(leader);
    }

    /// Where a call goes when no redirect says otherwise: the URL of the
    /// master's host, and whether it came from the gossip view (an exchange
    /// with it is abandoned when the view stops naming it). Replication
    /// knows a new master first (its claim reached this node before it
    /// serves): a higher epoch than the view's wins, and a host that
    /// replication finds silent is passed over.
    fn target(&self, view: &View) -> Option<(String, bool)> {
        let from_view = view.master_host().filter(|host| host.node_id != view.me);
        let newer = self
            .newer_than_view(from_view.map(|host| host.master_epoch.unwrap_or(0)))
            .filter(|(node, _)| *node != view.me);
        if let Some(url) = newer.and_then(|(node, _)| view.member(&node).map(|m| m.http.clone())) {
            return Some((url, false));
        }
        let silent = self
            .inner
            .leader
            .get()
            .and_then(|rx| rx.borrow().silent.clone());
        from_view
            .filter(|host| silent.as_ref() != Some(&host.node_id))
            .map(|host| (host.http.clone(), true))
    }

    /// Replication's leader when its epoch is above `seen`, the one the
    /// gossip view shows (`None`: the view shows no host): replication
    /// hears of a new master before gossip spreads it.
    fn newer_than_view(&self, seen: Option<u64>) -> Option<(String, u64)> {
        let (node, epoch) = self.inner.leader.get()?.borrow().node.clone()?;
        seen.is_none_or(|seen| epoch > seen)
            .then_some((node, epoch))
    }

    /// The node-to-node client (sealed with the cluster key).
    pub fn peer(&self) -> &Peer {
        &self.inner.peer
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
        let from_view = view
            .master_host()
            .map(|m| (m.node_id.clone(), m.master_epoch.unwrap_or(0)));
        self.newer_than_view(from_view.as_ref().map(|(_, epoch)| *epoch))
            .filter(|(node, _)| from_view.is_some() || *node != view.me)
            .or(from_view)
    }

    /// Runs a command.
    pub async fn command(&self, command: Command) -> Result<Reply, MasterError> {
        match self.call(WireRequest::Command(Box::new(command))).await? {
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

    /// How far each replica's journal is behind the master's: (node,
    /// entries it lacks).
    pub async fn replicas(&self) -> Result<Vec<(String, u64)>, MasterError> {
        match self.call(WireRequest::Replicas).await? {
            WireResponse::Replicas(behind) => Ok(behind),
            other => Err(unexpected(other)),
        }
    }

    /// Switches the master to `to` (see [`MasterHandle::upgrade`]).
    pub async fn upgrade(&self, to: Build) -> Result<SwitchReport, MasterError> {
        match self.call(WireRequest::Upgrade { to }).await? {
            WireResponse::Switched(report) => Ok(report),
            other => Err(unexpected(other)),
        }
    }

    /// The master build running and the one a rollback returns to.
    pub async fn builds(&self) -> Result<Builds, MasterError> {
        match self.call(WireRequest::Builds).await? {
            WireResponse::Builds(builds) => Ok(builds),
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

    /// The finished jobs of a [`Query::Finished`], waiting for the first
    /// (see [`MasterHandle::wait_finished`]).
    pub async fn wait_finished(&self, query: Query, wait: Duration) -> Result<Answer, MasterError> {
        let request = WireRequest::WaitFinished {
            query,
            wait_ms: wait.as_millis() as u64,
        };
        match self.call(request).await? {
            WireResponse::Answer(answer) => Ok(answer),
            other => Err(unexpected(other)),
        }
    }

    /// Tries `request` until a master answers, as [`proxy::Call`] decides
    /// (see the module docs).
    async fn call(&self, request: WireRequest) -> Result<WireResponse, MasterError> {
        let wait = self.inner.wait;
        let started = Instant::now();
        let now = || started.elapsed().as_millis() as u64;
        let mut call = proxy::Call::new(0, wait.as_millis() as u64, request.outcome_matters());
        let mut local = self.inner.local.clone();
        let mut view = self.inner.view.clone();
        let mut _waiting = None;
        loop {
            let here = local.borrow_and_update().clone();
            // A redirect to follow, or the host the view names (whose
            // exchange is abandoned if the view stops naming it).
            let named = self.target(&view.borrow_and_update());
            let there = call.target(named.as_ref().map(|(url, _)| url.clone()));
            let from_view = named.is_some_and(|(url, from_view)| {
                from_view && there.as_ref() == Some(&url) && !call.redirected()
            });
            let failure = match self.try_once(&request, here, there, from_view, &view).await {
                None => proxy::Failure::NoMaster,
                Some(Err(MasterError::Moved(url))) => proxy::Failure::Moved(url),
                Some(Err(MasterError::Unavailable(reason))) => proxy::Failure::NotActed(reason),
                Some(Err(MasterError::Indeterminate(reason))) => {
                    proxy::Failure::MayHaveActed(reason)
                }
                Some(done) => {
                    if call.tries() > 1 {
                        tracing::info!(
                            "reached the master after {} tries in {:.1?}",
                            call.tries(),
                            started.elapsed()
                        );
                    }
                    return done;
                }
            };
            let next = call.failed(now(), failure);
            tracing::debug!(
                "master not reachable (try {}): {}",
                call.tries(),
                call.last_error()
            );
            match next {
                proxy::Next::Now => continue,
                proxy::Next::Stop(stop) => return Err(stopped(stop)),
                proxy::Next::Wait => {}
            }
            if _waiting.is_none() {
                let permit = self.inner.waiting.try_acquire().map_err(|_| {
                    stopped(call.stop(format!(
                        "{PROXY_WAITING_MAX} requests are already waiting for the master"
                    )))
                })?;
                _waiting = Some(permit);
            }
            // A closed channel (the node is stopping) must not wake the loop
            // at once, or it would spin: only real changes and the pause do.
            tokio::select! {
                Ok(()) = local.changed() => {}
                Ok(()) = view.changed() => {}
                _ = tokio::time::sleep(PROXY_RETRY_PAUSE) => {}
            }
        }
    }

    /// One try: the local master if this node hosts it, else the node at
    /// `there` (an exchange abandoned if the view stops naming it, when
    /// the view named it); `None` when no master is known.
    async fn try_once(
        &self,
        request: &WireRequest,
        here: Option<MasterHandle>,
        there: Option<String>,
        from_view: bool,
        view: &watch::Receiver<View>,
    ) -> Option<Result<WireResponse, MasterError>> {
        match (here, there) {
            (Some(master), _) => Some(serve_local(&master, request.clone()).await),
            (None, Some(url)) => {
                let exchange = self.remote(&url, request);
                Some(if from_view {
                    tokio::select! {
                        result = exchange => result,
                        () = host_changes(view.clone(), &url) => Err(MasterError::Indeterminate(
                            format!("{url} stopped hosting the master mid-request"),
                        )),
                    }
                } else {
                    exchange.await
                })
            }
            (None, None) => None,
        }
    }

    /// One request to the master on another node. A transport failure
    /// comes back as `Unavailable` if the master cannot have acted on the
    /// request and as `Indeterminate` if it may have; the caller retries
    /// both.
    async fn remote(&self, url: &str, request: &WireRequest) -> Result<WireResponse, MasterError> {
        match request {
            WireRequest::Command(command) => self.coalesced(url, (**command).clone()).await,
            _ => self.exchange(url, request).await,
        }
    }

    /// Sends `command` to `url` in the next batch (see the module docs).
    async fn coalesced(&self, url: &str, command: Command) -> Result<WireResponse, MasterError> {
        let (respond, answer) = oneshot::channel();
        // Counted, not encoded: it is encoded once, in its batch.
        let bytes =
            postcard::serialize_with_flavor(&command, postcard::ser_flavors::Size::default())
                .unwrap_or(usize::MAX);
        let flush = {
            let mut lanes = self.lanes();
            let lane = lanes.entry(url.to_string()).or_default();
            lane.waiting.push_back(Waiting {
                command,
                bytes,
                respond,
            });
            let flush = lane.in_flight < PROXY_BATCHES_IN_FLIGHT;
            if flush {
                lane.in_flight += 1;
            }
            flush
        };
        if flush {
            let link = self.clone();
            let url = url.to_string();
            tokio::spawn(async move { link.flush(url).await });
        }
        answer.await.map_err(|_| {
            MasterError::Indeterminate(format!("the batch to {url} was dropped unanswered"))
        })?
    }

    /// Sends batches of the commands waiting for `url` until none is left.
    async fn flush(&self, url: String) {
        loop {
            let mut batch = {
                let mut lanes = self.lanes();
                let Some(lane) = lanes.get_mut(&url) else {
                    return;
                };
                if lane.waiting.is_empty() {
                    lane.in_flight -= 1;
                    if lane.in_flight == 0 {
                        lanes.remove(&url);
                    }
                    return;
                }
                let mut batch = Vec::new();
                let mut bytes = 0;
                while let Some(next) = lane.waiting.front() {
                    let full = batch.len() == BATCH_COMMANDS_MAX
                        || (!batch.is_empty() && bytes + next.bytes > BATCH_BYTES_MAX);
                    if full {
                        break;
                    }
                    bytes += next.bytes;
                    batch.extend(lane.waiting.pop_front());
                }
                batch
            };
            if batch.len() == 1 {
                let Some(Waiting {
                    command, respond, ..
                }) = batch.pop()
                else {
                    continue;
                };
                let _ = respond.send(
                    self.exchange(&url, &WireRequest::Command(Box::new(command)))
                        .await,
                );
                continue;
            }
            let (commands, responders): (Vec<Command>, Vec<_>) =
                batch.into_iter().map(|w| (w.command, w.respond)).unzip();
            let count = commands.len();
            match self.exchange(&url, &WireRequest::Batch(commands)).await {
                Ok(WireResponse::Batch(replies)) if replies.len() == count => {
                    for (respond, reply) in responders.into_iter().zip(replies) {
                        let _ = respond.send(reply.map(WireResponse::Reply));
                    }
                }
                Ok(other) => {
                    let error = MasterError::Indeterminate(format!(
                        "{url} answered a batch of {count} with {}",
                        unexpected(other)
                    ));
                    for respond in responders {
                        let _ = respond.send(Err(error.clone()));
                    }
                }
                Err(error) => {
                    for respond in responders {
                        let _ = respond.send(Err(error.clone()));
                    }
                }
            }
        }
    }

    fn lanes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lane>> {
        self.inner.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One request on the wire.
    async fn exchange(
        &self,
        url: &str,
        request: &WireRequest,
    ) -> Result<WireResponse, MasterError> {
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
                if error.not_acted_on {
                    MasterError::Unavailable(error.message)
                } else {
                    MasterError::Indeterminate(error.message)
                }
            })?;
        decode::<Result<WireResponse, MasterError>>(&body)
            .map_err(|r| MasterError::Indeterminate(format!("{url} answered undecodably: {r}")))?
    }
}

/// Returns once `view` stops naming the node at `url` as the master's host
/// (it names another, or none because that node was declared dead); never
/// if the view's sender is gone.
async fn host_changes(mut view: watch::Receiver<View>, url: &str) {
    loop {
        if view.changed().await.is_err() {
            return std::future::pending().await;
        }
        let named = view
            .borrow_and_update()
            .master_host()
            .is_some_and(|host| host.http == url);
        if !named {
            return;
        }
    }
}

/// A call given up, as the API reports it.
fn stopped(stop: proxy::Stop) -> MasterError {
    match stop {
        proxy::Stop::Unavailable(why) => MasterError::Unavailable(why),
        proxy::Stop::Indeterminate(why) => MasterError::Indeterminate(why),
    }
}

fn unexpected(response: WireResponse) -> MasterError {
    MasterError::Unavailable(format!("unexpected answer from the master: {response:?}"))
}

#[cfg(test)]
mod tests {
    //! The proxy against a master on "another node": a local HTTP server
    //! that serves `/internal/v1/master` with a real master and can lose
    //! its first answer after the master acted on the request.
    use super::*;
    use crate::master::{CoreKind, MasterOptions};
    use crate::membership::tests::member;
    use bytes::Bytes;
    use cohort_master::{Config, JobSpec, RequestId};
    use http_body_util::{BodyExt, Full};
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A node that answers every master request with `Moved` to `next`,
    /// counting them in `served`; returns its URL.
    async fn mover(next: Arc<Mutex<String>>, served: Arc<AtomicUsize>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (next, served) = (next.clone(), served.clone());
                let service = hyper::service::service_fn(move |_| {
                    served.fetch_add(1, Ordering::Relaxed);
                    let moved = next.lock().unwrap().clone();
                    let answer: Result<WireResponse, MasterError> = Err(MasterError::Moved(moved));
                    let body = Full::new(Bytes::from(encode(&answer)));
                    async move { Ok::<_, std::convert::Infallible>(hyper::Response::new(body)) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        url
    }

    #[tokio::test]
    async fn two_nodes_naming_each_other_are_not_asked_back_to_back() {
        let served = Arc::new(AtomicUsize::new(0));
        let (to_b, to_a) = (Arc::default(), Arc::default());
        let a = mover(Arc::clone(&to_b), served.clone()).await;
        let b = mover(Arc::clone(&to_a), served.clone()).await;
        *to_b.lock().unwrap() = b;
        *to_a.lock().unwrap() = a.clone();
        // The view says a hosts the master; a says it moved to b, b to a.
        let mut host = member("a", 1, "back-end");
        (host.http, host.master_epoch) = (a, Some(1));
        let view = View {
            me: "me".into(),
            members: vec![host],
            dead: Vec::new(),
        };
        let (_local, local) = watch::channel(None);
        let (_view, view) = watch::channel(view);
        let link = MasterLink::new(local, view, Peer::default());
        let window = Duration::from_millis(500);
        let answer = tokio::time::timeout(window, link.query(Query::Stats)).await;
        assert!(answer.is_err(), "no master, no answer: {answer:?}");
        // Each hint is followed at once only after a pause: about one
        // request per pause (back to back, they would be hundreds).
        let asked = served.load(Ordering::Relaxed);
        let bound = 2 * window.as_millis() / PROXY_RETRY_PAUSE.as_millis();
        assert!((asked as u128) < bound, "{asked} requests in {window:?}");
    }

    /// Longest any of these tests waits for something it expects.
    const BOUND: Duration = Duration::from_secs(5);

    /// What the fake host does with its answers, after the master acted
    /// on the request.
    #[derive(Clone, Copy)]
    enum Fault {
        /// Closes the connection instead of sending the first answer.
        DropFirst,
        /// Never sends the first answer.
        WithholdFirst,
        /// Closes the connection instead of sending any answer.
        DropAll,
    }

    async fn master(dir: &std::path::Path) -> MasterHandle {
        let options = MasterOptions {
            data_dir: dir.to_path_buf(),
            cache_dir: dir.to_path_buf(),
            config: Config::default(),
            core: CoreKind::Native,
            snapshot_every: crate::limits::SNAPSHOT_EVERY_DEFAULT,
            live_workers: Vec::new(),
            component: None,
            shadow: true,
        };
        let (replication, begun) = crate::replication::Replication::solo(dir).await.unwrap();
        let started =
            tokio::task::spawn_blocking(move || crate::master::start(options, replication, begun));
        started.await.unwrap().unwrap().0
    }

    /// Serves `master` on the internal route at a new local address
    /// (returned as a URL), losing answers as `fault` says.
    async fn host(master: MasterHandle, fault: Option<Fault>) -> String {
        host_counting(master, fault).await.0
    }

    /// [`host`], with the count of requests it answered or lost.
    async fn host_counting(
        master: MasterHandle,
        fault: Option<Fault>,
    ) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let answered = Arc::new(AtomicUsize::new(0));
        let counted = answered.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (master, answered) = (master.clone(), answered.clone());
                let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
                    let (master, answered) = (master.clone(), answered.clone());
                    async move {
                        let body: hyper::body::Incoming = request.into_body();
                        let body = body.collect().await?.to_bytes();
                        let request = decode::<WireRequest>(&body).expect("a wire request");
                        let result = serve_local(&master, request).await;
                        let first = answered.fetch_add(1, Ordering::SeqCst) == 0;
                        match fault {
                            Some(Fault::DropFirst) if first => return Err("answer lost".into()),
                            Some(Fault::WithholdFirst) if first => {
                                std::future::pending::<()>().await
                            }
                            Some(Fault::DropAll) => return Err("answer lost".into()),
                            _ => {}
                        }
                        let answer = Full::new(Bytes::from(encode(&result)));
                        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(hyper::Response::new(
                            answer,
                        ))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new().serve_connection(io, service),
                );
            }
        });
        (url, counted)
    }

    /// A view from a proxy node in which `node` at `url` hosts the master
    /// with `epoch`.
    fn view(node: &str, url: &str, epoch: u64) -> View {
        let mut host = member(node, epoch, "back-end");
        host.http = url.into();
        host.master_epoch = Some(epoch);
        View {
            me: "proxy".into(),
            members: vec![host],
            dead: Vec::new(),
        }
    }

    fn submit(seq: u64) -> Command {
        Command::Submit {
            spec: JobSpec {
                module: [0; 32],
                input: b"once".to_vec(),
                timeout_ms: 1000,
                memory_bytes: None,
                max_attempts: 1,
                priority: 0,
                idempotency_key: None,
            },
            request: RequestId { origin: 9, seq },
            options: Default::default(),
        }
    }

    async fn submitted_total(master: &MasterHandle) -> u64 {
        match master.query(Query::Stats).await.unwrap() {
            Answer::Stats(stats) => stats.submitted_total,
            other => panic!("{other:?}"),
        }
    }

    fn link(view: watch::Receiver<View>, wait: Duration) -> MasterLink {
        let (_, local) = watch::channel(None);
        MasterLink::with_wait(local, view, Peer::default(), wait)
    }

    /// The master created the job, then its answer was lost: the proxy
    /// sends the submission again, and the master answers with the same
    /// job instead of creating a second.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_submission_whose_answer_was_lost_is_sent_again_and_is_one_job() {
        let dir = tempfile::tempdir().unwrap();
        let master = master(dir.path()).await;
        let url = host(master.clone(), Some(Fault::DropFirst)).await;
        let (_view_tx, view) = watch::channel(view("a", &url, 1));
        let link = link(view, PROXY_WAIT);
        let reply = tokio::time::timeout(BOUND, link.command(submit(1))).await;
        assert_eq!(
            reply.expect("answered within the bound").unwrap(),
            Reply::Submitted {
                id: 1,
                existing: false
            }
        );
        assert_eq!(submitted_total(&master).await, 1);
        // A new request is a new job.
        let reply = link.command(submit(2)).await.unwrap();
        assert!(matches!(reply, Reply::Submitted { id: 2, .. }), "{reply:?}");
        master.shutdown().await;
    }

    /// The master created the job and then fell silent; the view names a
    /// new host (holding the same journal, here the same master): the proxy
    /// abandons the silent exchange at once and gets the job from the new
    /// host, without waiting for the exchange's timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_submission_follows_the_master_to_its_new_host_and_is_one_job() {
        let dir = tempfile::tempdir().unwrap();
        let master = master(dir.path()).await;
        let silent = host(master.clone(), Some(Fault::WithholdFirst)).await;
        let next = host(master.clone(), None).await;
        let (view_tx, view_rx) = watch::channel(view("a", &silent, 1));
        let link = link(view_rx, PROXY_WAIT);
        let call = tokio::spawn(async move { link.command(submit(1)).await });
        let started = Instant::now();
        while submitted_total(&master).await == 0 {
            assert!(
                started.elapsed() < BOUND,
                "the master never got the submission"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        view_tx.send(view("b", &next, 2)).unwrap();
        let reply = tokio::time::timeout(BOUND, call).await;
        assert_eq!(
            reply.expect("answered within the bound").unwrap().unwrap(),
            Reply::Submitted {
                id: 1,
                existing: false
            }
        );
        assert_eq!(submitted_total(&master).await, 1);
        master.shutdown().await;
    }

    /// When no answer comes at all after the master may have acted, the
    /// caller of a submission is told the outcome is unknown (the proxy
    /// sent it again and again: still one job); other requests are told
    /// that no master answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_any_answer_a_submission_is_of_unknown_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let master = master(dir.path()).await;
        let url = host(master.clone(), Some(Fault::DropAll)).await;
        let (_view_tx, view) = watch::channel(view("a", &url, 1));
        let link = link(view, Duration::from_millis(300));
        let error = link.command(submit(1)).await.unwrap_err();
        assert!(matches!(error, MasterError::Indeterminate(_)), "{error:?}");
        assert_eq!(submitted_total(&master).await, 1);
        let error = link.query(Query::Stats).await.unwrap_err();
        assert!(matches!(error, MasterError::Unavailable(_)), "{error:?}");
        master.shutdown().await;
    }

    /// Many commands at once through the proxy share requests, and when
    /// the answer to a whole batch is lost after the master acted, each
    /// command sent again is still one job: as many jobs as submissions.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commands_share_requests_and_a_lost_batch_answer_creates_no_job_twice() {
        const SUBMISSIONS: u64 = 500;
        let dir = tempfile::tempdir().unwrap();
        let master = master(dir.path()).await;
        let (url, requests) = host_counting(master.clone(), Some(Fault::DropFirst)).await;
        let (_view_tx, view) = watch::channel(view("a", &url, 1));
        let link = link(view, PROXY_WAIT);
        let calls: Vec<_> = (1..=SUBMISSIONS)
            .map(|seq| {
                let link = link.clone();
                tokio::spawn(async move { link.command(submit(seq)).await })
            })
            .collect();
        let mut ids = HashSet::new();
        for call in calls {
            let reply = tokio::time::timeout(BOUND, call).await;
            match reply.expect("answered within the bound").unwrap() {
                Ok(Reply::Submitted { id, .. }) => assert!(ids.insert(id), "job {id} twice"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ids.len() as u64, SUBMISSIONS);
        assert_eq!(submitted_total(&master).await, SUBMISSIONS);
        let requests = requests.load(Ordering::SeqCst) as u64;
        assert!(
            requests < SUBMISSIONS / 2,
            "{requests} requests for {SUBMISSIONS} commands"
        );
        master.shutdown().await;
    }

    /// A batch over the limit is refused whole, by code.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_over_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let master = master(dir.path()).await;
        let batch = (0..=BATCH_COMMANDS_MAX as u64).map(submit).collect();
        let error = serve_local(&master, WireRequest::Batch(batch))
            .await
            .unwrap_err();
        assert!(matches!(error, MasterError::Rejected(_)), "{error:?}");
        assert_eq!(submitted_total(&master).await, 0);
        master.shutdown().await;
    }
}
