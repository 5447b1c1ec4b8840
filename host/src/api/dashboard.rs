//! The web dashboard, and the routes made for it.
//!
//! * `GET /` is the page: one HTML file, one script and one stylesheet in
//!   `host/src/dashboard/`, compiled into the binary (no build step, no
//!   Node.js to build or run a node). They hold no data and need no token;
//!   the script asks the API for everything with the token the user types,
//!   kept in the browser's session storage.
//! * `GET /v1/overview` is the overview page's data in one request: the
//!   master's counters, the jobs finished lately and their latency
//!   ([`Query::Recent`]), the nodes and workers, how far each replica is
//!   behind (asked of the master's node, which leads replication), and
//!   what this node saw happen ([`crate::cluster::history`]).
//! * `GET /v1/events` streams the same overview as server-sent events,
//!   one every [`EVENTS_INTERVAL`], so every open page updates without
//!   polling each part. A token confined to a namespace gets its
//!   namespace's counts and costs instead (`namespaces` events, what
//!   `GET /v1/namespaces` answers it): nothing cluster-wide. A node serves at most [`EVENT_STREAMS_MAX`]
//!   streams at once (then `429`), and ends them when it stops.
//! * `POST /v1/jobs/bulk` cancels or retries every job a filter matches,
//!   as one master command ([`Command::Bulk`]): its events commit
//!   together. A `dry_run` asks the same question as a query and changes
//!   nothing: the page shows the count before the user confirms.
//! * `GET /v1/whoami` tells the page which buttons to show.
//!
//! [`EVENTS_INTERVAL`]: crate::limits::EVENTS_INTERVAL
//! [`EVENT_STREAMS_MAX`]: crate::limits::EVENT_STREAMS_MAX

use super::types::{
    BulkRequest, BulkResponse, HistoryBody, JobFilterBody, LatencyBody, MasterBody,
    OverviewResponse, ReplicaBody, WhoamiResponse,
};
use super::{Api, ApiError, ErrorCode, ModuleRef, Reply200, bytes, json, module_ref, number};
use crate::limits::{
    EVENT_STREAMS_MAX, EVENTS_BUFFERED, EVENTS_INTERVAL, FILTER_TEXT_CHARS_MAX, RECENT_MS,
};
use crate::security::token::{self, Holder, Scope, Scopes};
use bytes::Bytes;
use cohort_master::{BulkAction, Command, JobFilter, JobState, Reply};
use hyper::body::Frame;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

const INDEX_HTML: &str = include_str!("../dashboard/index.html");
const APP_JS: &str = include_str!("../dashboard/app.js");
const STYLE_CSS: &str = include_str!("../dashboard/style.css");

/// The dashboard's files, by path (`None`: not one of them).
pub(super) fn asset(path: &str) -> Option<Reply200> {
    let (content_type, body) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX_HTML),
        "/dashboard/app.js" => ("text/javascript; charset=utf-8", APP_JS),
        "/dashboard/style.css" => ("text/css; charset=utf-8", STYLE_CSS),
        _ => return None,
    };
    let mut response = bytes(content_type, Bytes::from_static(body.as_bytes()));
    let headers = response.headers_mut();
    // The files change with the binary only; a restarted node may be newer.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // The page runs its own script and talks to its own node, nothing
    // else: no inline script or style, no other origin, and no framing
    // (its buttons cancel jobs, so no other page may overlay them).
    headers.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    Some(response)
}

/// What the dashboard's page may load and do.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' blob: data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'none'";

/// A listing's filter from the query string (`state`, `module`,
/// `priority`, `from`, `to`, `error`, `namespace`).
pub(super) fn filter_from_params(params: &HashMap<String, String>) -> Result<JobFilter, ApiError> {
    let filter = filter_from_body(JobFilterBody {
        state: params.get("state").cloned(),
        module: params.get("module").cloned(),
        priority: number(params, "priority")?,
        from: number(params, "from")?,
        to: number(params, "to")?,
        error: params.get("error").cloned(),
        ids: None,
    })?;
    let namespace = params.get("namespace").cloned();
    if let Some(name) = &namespace {
        super::namespaces::check_namespace(name)?;
    }
    Ok(JobFilter {
        namespace,
        ..filter
    })
}

/// A filter as the master takes it, its fields checked.
fn filter_from_body(body: JobFilterBody) -> Result<JobFilter, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::BadRequest, message);
    let state = body
        .state
        .map(|name| {
            JobState::from_name(&name).ok_or_else(|| {
                bad(format!(
                    "state: unknown state {name:?}: use queued, running, succeeded, failed, cancelled or dead"
                ))
            })
        })
        .transpose()?;
    // A module is a digest (64 hex digits) or a deployment's name.
    let module = (body.module.as_deref())
        .map(|text| {
            module_ref(text, ErrorCode::BadRequest, ErrorCode::BadRequest)
                .map_err(|error| bad(format!("module: {}", error.body.message)))
        })
        .transpose()?;
    let (module, module_name) = match module {
        None => (None, None),
        Some(ModuleRef::Digest(digest)) => (Some(digest.to_bytes()), None),
        Some(ModuleRef::Name(name)) => (None, Some(name)),
    };
    let most = FILTER_TEXT_CHARS_MAX;
    if body
        .error
        .as_ref()
        .is_some_and(|text| text.chars().count() > most)
    {
        return Err(bad(format!("error: at most {most} characters")));
    }
    let most = cohort_master::limits::FILTER_IDS_MAX;
    if body.ids.as_ref().is_some_and(|ids| ids.len() > most) {
        return Err(bad(format!("ids: at most {most} ids")));
    }
    Ok(JobFilter {
        state,
        module,
        priority: body.priority,
        from: body.from,
        to: body.to,
        error: body.error,
        ids: body.ids,
        module_name,
        namespace: None,
    })
}

impl Api {
    /// `GET /v1/whoami`, given what the request's token was checked to
    /// hold (`None`: the node needs no tokens, so everything is allowed,
    /// cluster-wide).
    pub(super) fn whoami(&self, headers: &hyper::HeaderMap, holder: Option<Holder>) -> Reply200 {
        let scopes = holder.as_ref().map(|holder| holder.scopes);
        let token = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| token::bearer(Some(v)).ok())
            .and_then(token::token_id)
            .filter(|_| scopes.is_some())
            .map(String::from);
        json(
            StatusCode::OK,
            &WhoamiResponse {
                tokens_required: self.security.tokens.is_some(),
                token,
                scopes: scopes
                    .unwrap_or(Scopes::from_names(&[Scope::Admin.name()]))
                    .names()
                    .into_iter()
                    .map(String::from)
                    .collect(),
                namespace: holder.and_then(|holder| holder.namespace),
            },
        )
    }

    /// `POST /v1/jobs/bulk`, over namespace `within`'s jobs only if the
    /// caller is confined to one.
    pub(super) async fn bulk(
        &self,
        within: Option<&str>,
        request: BulkRequest,
    ) -> Result<Reply200, ApiError> {
        let action = match request.action.as_str() {
            // `attempts` is the retry's alone; a cancel ignores it.
            "cancel" => BulkAction::Cancel,
            "retry" => BulkAction::Retry {
                attempts: request.attempts.unwrap_or(self.defaults.max_attempts),
            },
            other => {
                return Err(ApiError::new(
                    ErrorCode::BadRequest,
                    format!("action: {other:?} is not cancel or retry"),
                ));
            }
        };
        let filter = JobFilter {
            namespace: within.map(str::to_owned),
            ..filter_from_body(request.filter)?
        };
        let answer = if request.dry_run {
            let matched = self.master.bulk_count(within, action, filter).await?;
            BulkResponse {
                matched: Some(matched),
                changed: None,
            }
        } else {
            let Reply::Bulk { changed } = self
                .master
                .command(Command::Bulk { action, filter })
                .await?
            else {
                return Err(ApiError::new(ErrorCode::Internal, "unexpected reply"));
            };
            BulkResponse {
                matched: None,
                changed: Some(changed),
            }
        };
        Ok(json(StatusCode::OK, &answer))
    }

    /// `GET /v1/jobs/{id}/input` (a job of namespace `within` only, if
    /// the caller is confined to one).
    pub(super) async fn input(&self, within: Option<&str>, id: u64) -> Result<Reply200, ApiError> {
        let input = self.master.input(within, id).await?;
        Ok(bytes("application/octet-stream", input))
    }

    /// `GET /v1/overview`, and each event of `GET /v1/events`.
    pub(super) async fn overview(&self) -> Result<OverviewResponse, ApiError> {
        let stats = self.master.stats().await?;
        let recent = self.master.recent(RECENT_MS).await?;
        let cluster = self.cluster_body().await?;
        let replicas = self
            .master
            .replicas()
            .await?
            .into_iter()
            .map(|(node, behind)| ReplicaBody { node, behind })
            .collect();
        Ok(OverviewResponse {
            at: crate::contract::now_ms(),
            node: self.node.id.clone(),
            master: MasterBody {
                node: cluster.master_node,
                epoch: cluster.master_epoch,
            },
            jobs: JobState::ALL
                .iter()
                .map(|&s| (s.name().to_string(), stats.jobs[s as usize]))
                .collect(),
            submitted_total: stats.submitted_total,
            attempts_total: stats.attempts_total,
            retries_total: stats.retries_total,
            finished_recent: recent.finished,
            recent_ms: RECENT_MS,
            latency_ms: recent
                .p50_ms
                .zip(recent.p99_ms)
                .map(|(p50, p99)| LatencyBody { p50, p99 }),
            replicas,
            nodes: cluster.nodes,
            workers: cluster.workers,
            history: self
                .history
                .entries()
                .into_iter()
                .map(|e| HistoryBody {
                    at: e.at,
                    kind: e.kind.into(),
                    message: e.message,
                })
                .collect(),
        })
    }

    /// `GET /v1/events`: an overview every [`EVENTS_INTERVAL`] until the
    /// client goes or the node stops.
    pub(super) fn events(
        self: &Arc<Self>,
        within: Option<String>,
    ) -> Result<Response<super::Body>, ApiError> {
        let Ok(permit) = self.event_streams.clone().try_acquire_owned() else {
            return Err(ApiError::new(
                ErrorCode::TooManyConnections,
                format!("this node serves at most {EVENT_STREAMS_MAX} event streams at once"),
            ));
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(EVENTS_BUFFERED);
        let api = self.clone();
        let mut closing = self.closing.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut tick = tokio::time::interval(EVENTS_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = closing.changed() => return,
                    _ = tx.closed() => return,
                }
                let event = match &within {
                    None => api
                        .overview()
                        .await
                        .map(|overview| sse("overview", &overview)),
                    Some(namespace) => (api.namespace_list(Some(namespace)).await)
                        .map(|list| sse("namespaces", &list)),
                };
                let event = event.unwrap_or_else(|error| sse("error", &error.body));
                if tx.send(event).await.is_err() {
                    return;
                }
            }
        });
        let mut response = Response::new(super::Body::new(EventStream(rx)));
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Ok(response)
    }
}

/// One server-sent event.
fn sse<T: serde::Serialize>(name: &str, value: &T) -> Bytes {
    let data = serde_json::to_string(value).expect("API types serialize");
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// A response body fed by a channel: ends when the sender is dropped.
struct EventStream(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|event| event.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn filters_are_read_from_the_query_string_and_checked() {
        let digest = "ab".repeat(32);
        let filter = filter_from_params(&params(&[
            ("state", "dead"),
            ("module", &digest),
            ("priority", "-3"),
            ("from", "5"),
            ("to", "9"),
            ("error", "trap"),
            ("namespace", "team-a"),
        ]))
        .unwrap();
        assert_eq!(
            filter,
            JobFilter {
                state: Some(JobState::Dead),
                module: Some([0xab; 32]),
                priority: Some(-3),
                from: Some(5),
                to: Some(9),
                error: Some("trap".into()),
                ids: None,
                module_name: None,
                namespace: Some("team-a".into()),
            }
        );
        let error = filter_from_params(&params(&[("namespace", "Team A")])).unwrap_err();
        assert_eq!(error.body.code, "invalid_namespace");
        // A deployment's name filters by the name jobs were submitted by.
        let named = filter_from_params(&params(&[("module", "send-email")])).unwrap();
        assert_eq!(
            (named.module, named.module_name.as_deref()),
            (None, Some("send-email"))
        );
        for (field, value) in [
            ("state", "lost"),
            ("module", "Not A Name"),
            ("priority", "high"),
            ("from", "-1"),
            ("error", &"é".repeat(FILTER_TEXT_CHARS_MAX + 1)),
        ] {
            let error = filter_from_params(&params(&[(field, value)])).unwrap_err();
            assert_eq!(error.body.code, "bad_request", "{field}");
            assert!(error.body.message.starts_with(field), "{field}: {error:?}");
        }
    }

    #[test]
    fn the_dashboard_files_are_served_and_nothing_else() {
        for path in ["/", "/dashboard/app.js", "/dashboard/style.css"] {
            let response = asset(path).unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            let policy = response.headers()["content-security-policy"]
                .to_str()
                .unwrap();
            assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        }
        assert!(asset("/dashboard/other.js").is_none());
        assert!(asset("/dashboard/../Cargo.toml").is_none());
    }
}
