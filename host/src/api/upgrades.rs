//! `/v1/master`: which master build runs, and switching it on a running
//! cluster (see `crate::master::upgrade` for the checks and the switch).
//!
//! An upload is checked and stored here first, then on every other live
//! back-end node (each checks it again, compiling it into its own cache),
//! and only then does the master's node switch: a node that takes the
//! master over later finds the build on its own disk.

use super::types::{MasterBuildResponse, MasterSwitchResponse};
use super::{Api, ApiError, ErrorCode, Reply200, json};
use crate::cluster::module_fetch::MASTERS_PATH;
use crate::master::service::SwitchReport;
use crate::master::upgrade::{Build, Builds};
use bytes::Bytes;
use hyper::StatusCode;

fn switch_body(report: SwitchReport) -> MasterSwitchResponse {
    MasterSwitchResponse {
        from: report.from.name(),
        to: report.to.name(),
        switched: report.switched,
        replayed_events: report.replayed_events,
        pause_ms: report.pause_ms,
    }
}

impl Api {
    /// `GET /v1/master`.
    pub(super) async fn master_build(&self) -> Result<Reply200, ApiError> {
        let builds = self.master.builds().await?;
        let (node, epoch) = self.master.host().unwrap_or_default();
        Ok(json(
            StatusCode::OK,
            &MasterBuildResponse {
                node,
                epoch,
                build: builds.active.name(),
                previous: builds.previous.name(),
            },
        ))
    }

    /// `POST /v1/master/upgrade`: the body is the component.
    pub(super) async fn master_upgrade(&self, wasm: Bytes) -> Result<Reply200, ApiError> {
        let digest = super::internal::store_master(&self.internal.masters, wasm.clone()).await?;
        self.fetcher
            .replicate_to(MASTERS_PATH, &wasm)
            .await
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::ReplicationFailed,
                    format!("the master was not stored on every back-end node, so nothing was switched: {e}"),
                )
            })?;
        let report = self.master.upgrade(Build::Uploaded(digest)).await?;
        Ok(json(StatusCode::OK, &switch_body(report)))
    }

    /// `POST /v1/master/rollback`.
    pub(super) async fn master_rollback(&self) -> Result<Reply200, ApiError> {
        let builds = self.master.builds().await?;
        if builds == Builds::default() {
            return Err(ApiError::new(
                ErrorCode::NothingToRollBack,
                "the built-in master runs and always did: there is nothing to roll back to",
            ));
        }
        let report = self.master.upgrade(builds.previous).await?;
        Ok(json(StatusCode::OK, &switch_body(report)))
    }
}
