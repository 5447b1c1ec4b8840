//! Modules across nodes: every upload is checked (without compiling it)
//! and stored durably on every live back-end node before it is
//! acknowledged; after the acknowledgement it is also sent to every live
//! node that runs jobs without being a back-end node
//! ([`push_to_workers`](ModuleFetcher::push_to_workers)). Each node that
//! stores a module and runs jobs compiles it in the background (see
//! `modules.rs`), so its first job finds it compiled. A node that was not
//! sent it (it joined later, or the send failed) fetches it by digest from
//! a back-end node when a job first needs it, checks its sha256, and keeps
//! it in its own store (and compile cache) from then on. Uploaded master
//! components travel the same way (`crate::master::upgrade`).

use crate::limits::TRANSFER_TIMEOUT;
use crate::membership::View;
use crate::modules::ModuleStore;
use crate::peer::Peer;
use crate::runtime::{Digest, Module, ModuleError};
use bytes::Bytes;
use tokio::sync::watch;

/// The internal route that stores a module on this node only.
pub const MODULES_PATH: &str = "/internal/v1/modules";
/// The internal route that sends a stored module (body: its digest).
pub const MODULE_FETCH_PATH: &str = "/internal/v1/modules/fetch";
/// The internal route that checks and stores an uploaded master component
/// on this node only.
pub const MASTERS_PATH: &str = "/internal/v1/masters";
/// The internal route that sends a stored master component (body: its
/// digest).
pub const MASTER_FETCH_PATH: &str = "/internal/v1/masters/fetch";

/// Fetches and replicates modules between nodes.
#[derive(Clone)]
pub struct ModuleFetcher {
    view: watch::Receiver<View>,
    peer: Peer,
}

impl std::fmt::Debug for ModuleFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleFetcher").finish_non_exhaustive()
    }
}

fn internal(message: String) -> ModuleError {
    ModuleError::Internal(message)
}

impl ModuleFetcher {
    /// A fetcher that finds back-end nodes in `view` and reaches them
    /// through `peer`.
    pub fn new(view: watch::Receiver<View>, peer: Peer) -> Self {
        Self { view, peer }
    }

    /// HTTP addresses of the other live back-end nodes, oldest first.
    fn other_back_ends(&self) -> Vec<(String, String)> {
        let view = self.view.borrow();
        view.back_ends()
            .filter(|m| m.node_id != view.me)
            .map(|m| (m.node_id.clone(), m.http.clone()))
            .collect()
    }

    /// Makes sure `digest` is in the local store, fetching it if needed.
    /// `Ok(false)`: no live back-end node has it.
    pub async fn ensure(&self, store: &ModuleStore, digest: &Digest) -> Result<bool, ModuleError> {
        if store.contains(digest) {
            return Ok(true);
        }
        let fetched = self.fetch(MODULE_FETCH_PATH, digest).await;
        match fetched.map_err(|e| internal(format!("module {e}")))? {
            Some(body) => {
                store.put(&body).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The bytes named `digest` from the first other live back-end node
    /// that has them at `path` (checked against the digest); `Ok(None)`:
    /// none has them.
    pub async fn fetch(&self, path: &str, digest: &Digest) -> Result<Option<Bytes>, String> {
        let mut errors = Vec::new();
        for (node, url) in self.other_back_ends() {
            let fetched = self
                .peer
                .post_internal(
                    &format!("{url}{path}"),
                    Bytes::from(digest.to_string()),
                    TRANSFER_TIMEOUT,
                )
                .await
                .map_err(|e| e.message);
            match fetched {
                Ok((status, body)) if status.is_success() => {
                    if Digest::of(&body) != *digest {
                        errors.push(format!("{node} sent bytes with another sha256"));
                        continue;
                    }
                    return Ok(Some(body));
                }
                Ok((status, _)) if status == hyper::StatusCode::NOT_FOUND => {}
                Ok((status, _)) => errors.push(format!("{node} answered {status}")),
                Err(error) => errors.push(format!("{node}: {error}")),
            }
        }
        if errors.is_empty() {
            Ok(None)
        } else {
            Err(format!(
                "{digest} could not be fetched: {}",
                errors.join("; ")
            ))
        }
    }

    /// The module compiled and ready, fetched first if needed.
    pub async fn get(&self, store: &ModuleStore, digest: &Digest) -> Result<Module, ModuleError> {
        if !self.ensure(store, digest).await? {
            return Err(internal(format!(
                "module {digest} is not stored on any live back-end node"
            )));
        }
        store.get(digest).await
    }

    /// Stores `wasm` (already stored and validated here) on every other live
    /// back-end node; fails if any of them did not store it.
    pub async fn replicate(&self, wasm: &Bytes) -> Result<(), ModuleError> {
        self.replicate_to(MODULES_PATH, wasm).await.map_err(|e| {
            internal(format!(
                "the module was not stored on every back-end node: {e}"
            ))
        })
    }

    /// Sends `wasm` (stored here) to every other live node that runs jobs
    /// and is not a back-end node, in the background: each stores it and
    /// compiles it ahead of its first job there. One that does not take it
    /// fetches it at that job.
    pub fn push_to_workers(&self, wasm: Bytes) {
        let workers: Vec<(String, String)> = {
            let view = self.view.borrow();
            (view.members.iter())
                .filter(|m| m.slots > 0 && !m.roles.back_end && !m.leaving)
                .filter(|m| m.node_id != view.me)
                .map(|m| (m.node_id.clone(), m.http.clone()))
                .collect()
        };
        if workers.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(error) = this.send_to(workers, MODULES_PATH, &wasm).await {
                tracing::warn!(
                    "a module was not sent to every worker (they fetch it at its first job): {error}"
                );
            }
        });
    }

    /// Posts `body` to `path` on every other live back-end node, to all at
    /// once (each checks and stores it); fails, naming each node that
    /// did not take it, unless all answered 2xx.
    pub async fn replicate_to(&self, path: &str, body: &Bytes) -> Result<(), String> {
        self.send_to(self.other_back_ends(), path, body).await
    }

    /// Posts `body` to `path` on each of `nodes` (id, HTTP address) at once.
    async fn send_to(
        &self,
        nodes: Vec<(String, String)>,
        path: &str,
        body: &Bytes,
    ) -> Result<(), String> {
        let mut sends = tokio::task::JoinSet::new();
        for (node, url) in nodes {
            let (peer, url, body) = (self.peer.clone(), format!("{url}{path}"), body.clone());
            sends.spawn(async move {
                let stored = peer.post_internal(&url, body, TRANSFER_TIMEOUT).await;
                match stored.map_err(|e| e.message) {
                    Ok((status, _)) if status.is_success() => None,
                    Ok((status, body)) => Some(format!(
                        "{node} answered {status}: {}",
                        String::from_utf8_lossy(&body)
                    )),
                    Err(error) => Some(format!("{node}: {error}")),
                }
            });
        }
        let mut errors = Vec::new();
        while let Some(sent) = sends.join_next().await {
            match sent {
                Ok(None) => {}
                Ok(Some(error)) => errors.push(error),
                Err(error) => errors.push(format!("the send failed: {error}")),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            errors.sort();
            Err(errors.join("; "))
        }
    }
}
