//! Modules across nodes: every upload is stored on every live back-end node
//! before it is acknowledged; any other node fetches a module by digest
//! from a back-end node when it first needs it, checks its sha256, and keeps
//! it in its own store (and compile cache) from then on.

use super::membership::View;
use crate::modules::ModuleStore;
use crate::peer::{Peer, TRANSFER_TIMEOUT};
use crate::runtime::{Digest, Module, ModuleError};
use bytes::Bytes;
use tokio::sync::watch;

/// The internal route that stores a module on this node only.
pub const MODULES_PATH: &str = "/internal/v1/modules";
/// The internal route that sends a stored module (body: its digest).
pub const MODULE_FETCH_PATH: &str = "/internal/v1/modules/fetch";

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
        let mut errors = Vec::new();
        for (node, url) in self.other_back_ends() {
            let fetched = self
                .peer
                .post_internal(
                    &format!("{url}{MODULE_FETCH_PATH}"),
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
                    store.put(&body).await?;
                    return Ok(true);
                }
                Ok((status, _)) if status == hyper::StatusCode::NOT_FOUND => {}
                Ok((status, _)) => errors.push(format!("{node} answered {status}")),
                Err(error) => errors.push(format!("{node}: {error}")),
            }
        }
        if errors.is_empty() {
            Ok(false)
        } else {
            Err(internal(format!(
                "module {digest} could not be fetched: {}",
                errors.join("; ")
            )))
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
        let mut errors = Vec::new();
        for (node, url) in self.other_back_ends() {
            let stored = self
                .peer
                .post_internal(
                    &format!("{url}{MODULES_PATH}"),
                    wasm.clone(),
                    TRANSFER_TIMEOUT,
                )
                .await
                .map_err(|e| e.message);
            match stored {
                Ok((status, _)) if status.is_success() => {}
                Ok((status, body)) => errors.push(format!(
                    "{node} answered {status}: {}",
                    String::from_utf8_lossy(&body)
                )),
                Err(error) => errors.push(format!("{node}: {error}")),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(internal(format!(
                "the module was not stored on every back-end node: {}",
                errors.join("; ")
            )))
        }
    }
}
