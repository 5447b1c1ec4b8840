//! The one table of routes: every route the node's listener serves, public
//! and node-to-node, written once.
//!
//! An entry says how a route is called (method and path), who may call it
//! (no token, a token scope, or a body sealed with the cluster key), whether
//! a token confined to a namespace may call it (`in_namespace`: the routes
//! of a namespace's own jobs, DAGs and schedules, its counts and their
//! event stream, and blobs by digest; every other route is cluster-wide),
//! which
//! nodes serve it (any node, or front-end nodes only), the largest body it
//! reads and the code of one over it, and which handler answers it.
//! Everything else is derived from the table: authentication and scope
//! checks and the front-end check (`Api::admit`), `404`/`405` with its
//! `Allow` header ([`find`]), body limits (read once, before the handler),
//! dispatch (an exhaustive `match` over [`Handler`] in `api` and
//! `api::internal`) and the OpenAPI document (`openapi::operation`, also an
//! exhaustive `match` over [`Handler`]). Adding a route is one entry here
//! plus its handler; the compiler then asks for its dispatch and its
//! documentation.
//!
//! # Matching
//!
//! A path is split at `/` (leading and trailing ones ignored) and compared
//! with each entry's pattern segment by segment; `{name}` matches any one
//! segment. Where several patterns match, the one with the most literal
//! segments is the resource (`/v1/jobs/batch` over `/v1/jobs/{id}`), and
//! the method is then looked up among that resource's entries only: a
//! known resource with another method is `405` with the resource's methods
//! in `Allow`, an unknown one `404`.
//!
//! # What a request that matches nothing needs
//!
//! A token, like any route's: `read` for `GET`/`HEAD`, `admin` otherwise,
//! so that probing without one learns nothing about which routes exist;
//! and a front-end node, unless the resource is served by every node.
//! Paths under `/internal/` never need a token: their routes are sealed.

use super::error::ErrorCode;
use crate::limits::{
    BATCH_BODY_BYTES_MAX, CONTROL_BODY_BYTES_MAX, ENVELOPE_BYTES_MAX, JOB_BODY_BYTES_MAX,
    MASTER_BYTES_MAX, MODULE_BYTES_MAX, WAIT_BODY_BYTES_MAX,
};
use crate::security::token::Scope;
use hyper::Method;

/// The methods routes use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Head,
    Put,
    Post,
    Delete,
}

impl Verb {
    /// The method's name, upper case.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Head => "HEAD",
            Verb::Put => "PUT",
            Verb::Post => "POST",
            Verb::Delete => "DELETE",
        }
    }

    fn of(method: &Method) -> Option<Self> {
        match *method {
            Method::GET => Some(Verb::Get),
            Method::HEAD => Some(Verb::Head),
            Method::PUT => Some(Verb::Put),
            Method::POST => Some(Verb::Post),
            Method::DELETE => Some(Verb::Delete),
            _ => None,
        }
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: load balancers' probes, the document, the dashboard's files
    /// (which hold no data).
    Open,
    /// A token with this scope, once the node has tokens.
    Token(Scope),
    /// Another node: the body is sealed with the cluster key when the node
    /// has one (`api::internal`); no token.
    Sealed,
}

/// Which nodes serve a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// Every node, whatever its roles.
    AnyNode,
    /// Front-end nodes; others answer `not_front_end`.
    FrontEnd,
}

/// What answers a route: one variant per entry of [`ROUTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    Healthz,
    OpenApi,
    Metrics,
    NodeLeave,
    DashboardPage,
    DashboardIndex,
    DashboardScript,
    DashboardStyle,
    ModuleUpload,
    ModuleList,
    ModuleGet,
    DeploymentList,
    DeploymentGet,
    Deploy,
    DeploymentRollback,
    Undeploy,
    GrantAdd,
    GrantRevoke,
    GrantRevokeAll,
    SecretList,
    SecretSet,
    SecretDelete,
    BlobPut,
    BlobList,
    BlobGet,
    BlobHead,
    BlobDelete,
    BlobPurge,
    JobSubmit,
    JobBatch,
    JobWait,
    JobList,
    JobBulk,
    JobGet,
    JobCancel,
    JobResult,
    JobInput,
    DagSubmit,
    DagGet,
    ScheduleList,
    ScheduleCreate,
    ScheduleGet,
    ScheduleDelete,
    SchedulePause,
    ScheduleResume,
    ScheduleBackfill,
    Overview,
    Events,
    Whoami,
    Namespaces,
    NamespaceQuotas,
    NamespaceWeight,
    Cluster,
    VoterRemove,
    MasterBuild,
    MasterUpgrade,
    MasterRollback,
    TokenList,
    TokenCreate,
    TokenRevoke,
    InternalMaster,
    InternalReplication,
    InternalVoters,
    InternalModules,
    InternalModuleFetch,
    InternalMasters,
    InternalMasterFetch,
    InternalTokens,
    InternalBlobPut,
    InternalBlobFetch,
}

/// One route.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub verb: Verb,
    /// The path pattern: literal segments and at most one `{name}`.
    pub path: &'static str,
    pub access: Access,
    pub serves: Serves,
    /// The largest body read, in bytes (0: the body is not read).
    pub body_bytes_max: usize,
    /// The code of a body over [`Self::body_bytes_max`].
    pub too_large: ErrorCode,
    /// Whether a token confined to a namespace may call it (its handler
    /// then sees that namespace's jobs only); otherwise the route is
    /// cluster-wide, for cluster-wide tokens only.
    pub in_namespace: bool,
    pub handler: Handler,
}

const fn route(
    verb: Verb,
    path: &'static str,
    access: Access,
    serves: Serves,
    handler: Handler,
) -> Route {
    Route {
        verb,
        path,
        access,
        serves,
        body_bytes_max: 0,
        too_large: ErrorCode::BodyTooLarge,
        in_namespace: false,
        handler,
    }
}

impl Route {
    /// The route reads a body of at most `bytes`.
    const fn body(mut self, bytes: usize) -> Self {
        self.body_bytes_max = bytes;
        self
    }

    /// A body over the bound is `code` rather than `body_too_large`.
    const fn too_large(mut self, code: ErrorCode) -> Self {
        self.too_large = code;
        self
    }

    /// A token confined to a namespace may call the route.
    const fn in_namespace(mut self) -> Self {
        self.in_namespace = true;
        self
    }
}

use Access::{Open, Sealed, Token};
use Handler as H;
use Scope::{Admin, Read, Submit};
use Serves::{AnyNode, FrontEnd};
use Verb::{Delete, Get, Head, Post, Put};

/// Every route, public ones first, then the node-to-node ones.
#[rustfmt::skip]
pub const ROUTES: &[Route] = &[
    route(Get,    "/healthz",                          Open,          AnyNode,  H::Healthz),
    route(Get,    "/openapi.json",                     Open,          AnyNode,  H::OpenApi),
    route(Get,    "/metrics",                          Token(Read),   AnyNode,  H::Metrics),
    route(Post,   "/v1/node/leave",                    Token(Admin),  AnyNode,  H::NodeLeave),
    route(Get,    "/",                                 Open,          AnyNode,  H::DashboardPage),
    route(Get,    "/index.html",                       Open,          AnyNode,  H::DashboardIndex),
    route(Get,    "/dashboard/app.js",                 Open,          AnyNode,  H::DashboardScript),
    route(Get,    "/dashboard/style.css",              Open,          AnyNode,  H::DashboardStyle),
    route(Post,   "/v1/modules",                       Token(Admin),  FrontEnd, H::ModuleUpload).body(MODULE_BYTES_MAX).too_large(ErrorCode::ModuleTooLarge),
    route(Get,    "/v1/modules",                       Token(Read),   FrontEnd, H::ModuleList),
    // Any node serves a module's bytes: workers fetch them.
    route(Get,    "/v1/modules/{digest}",              Token(Read),   AnyNode,  H::ModuleGet),
    route(Get,    "/v1/deployments",                   Token(Read),   FrontEnd, H::DeploymentList),
    route(Get,    "/v1/deployments/{name}",            Token(Read),   FrontEnd, H::DeploymentGet),
    // Pointing a name at a module is uploading it: admin.
    route(Post,   "/v1/deployments/{name}",            Token(Admin),  FrontEnd, H::Deploy).body(CONTROL_BODY_BYTES_MAX),
    route(Delete, "/v1/deployments/{name}",            Token(Admin),  FrontEnd, H::Undeploy),
    route(Post,   "/v1/deployments/{name}/rollback",   Token(Admin),  FrontEnd, H::DeploymentRollback).body(CONTROL_BODY_BYTES_MAX),
    // What a name's jobs may reach: admin, as deploying is.
    route(Post,   "/v1/deployments/{name}/grants",     Token(Admin),  FrontEnd, H::GrantAdd).body(CONTROL_BODY_BYTES_MAX),
    route(Delete, "/v1/deployments/{name}/grants",     Token(Admin),  FrontEnd, H::GrantRevokeAll),
    route(Post,   "/v1/deployments/{name}/grants/revoke", Token(Admin), FrontEnd, H::GrantRevoke).body(CONTROL_BODY_BYTES_MAX),
    // Secrets: admin only, and no route answers a value.
    route(Get,    "/v1/secrets",                       Token(Admin),  FrontEnd, H::SecretList),
    route(Post,   "/v1/secrets/{name}",                Token(Admin),  FrontEnd, H::SecretSet).body(CONTROL_BODY_BYTES_MAX),
    route(Delete, "/v1/secrets/{name}",                Token(Admin),  FrontEnd, H::SecretDelete),
    // Blobs: streamed both ways (their handlers read and write the bodies
    // themselves, bounded by the blob ceiling and an idle timeout).
    // Uploading data for jobs is part of submitting them.
    route(Put,    "/v1/blobs",                         Token(Submit), FrontEnd, H::BlobPut).in_namespace(),
    route(Get,    "/v1/blobs",                         Token(Read),   FrontEnd, H::BlobList),
    route(Get,    "/v1/blobs/{digest}",                Token(Read),   FrontEnd, H::BlobGet).in_namespace(),
    route(Head,   "/v1/blobs/{digest}",                Token(Read),   FrontEnd, H::BlobHead).in_namespace(),
    // Whoever may upload may stop the cluster keeping what nothing names.
    route(Delete, "/v1/blobs/{digest}",                Token(Submit), FrontEnd, H::BlobDelete),
    // Taking a blob from finished jobs' records: admin, as cancelling is.
    route(Post,   "/v1/blobs/{digest}/purge",          Token(Admin),  FrontEnd, H::BlobPurge),
    route(Post,   "/v1/jobs",                          Token(Submit), FrontEnd, H::JobSubmit).body(JOB_BODY_BYTES_MAX).in_namespace(),
    route(Post,   "/v1/jobs/batch",                    Token(Submit), FrontEnd, H::JobBatch).body(BATCH_BODY_BYTES_MAX).in_namespace(),
    route(Post,   "/v1/jobs/wait",                     Token(Read),   FrontEnd, H::JobWait).body(WAIT_BODY_BYTES_MAX).in_namespace(),
    route(Get,    "/v1/jobs",                          Token(Read),   FrontEnd, H::JobList).in_namespace(),
    route(Post,   "/v1/jobs/bulk",                     Token(Admin),  FrontEnd, H::JobBulk).body(CONTROL_BODY_BYTES_MAX).in_namespace(),
    route(Get,    "/v1/jobs/{id}",                     Token(Read),   FrontEnd, H::JobGet).in_namespace(),
    route(Delete, "/v1/jobs/{id}",                     Token(Admin),  FrontEnd, H::JobCancel).in_namespace(),
    route(Get,    "/v1/jobs/{id}/result",              Token(Read),   FrontEnd, H::JobResult).in_namespace(),
    route(Get,    "/v1/jobs/{id}/input",               Token(Read),   FrontEnd, H::JobInput).in_namespace(),
    route(Post,   "/v1/dags",                          Token(Submit), FrontEnd, H::DagSubmit).body(BATCH_BODY_BYTES_MAX).in_namespace(),
    route(Get,    "/v1/dags/{id}",                     Token(Read),   FrontEnd, H::DagGet).in_namespace(),
    // A schedule submits jobs: managing one is submitting. A confined
    // token's schedules are its namespace's (see `api::schedules`).
    route(Get,    "/v1/schedules",                     Token(Read),   FrontEnd, H::ScheduleList).in_namespace(),
    route(Post,   "/v1/schedules",                     Token(Submit), FrontEnd, H::ScheduleCreate).body(JOB_BODY_BYTES_MAX).in_namespace(),
    route(Get,    "/v1/schedules/{name}",              Token(Read),   FrontEnd, H::ScheduleGet).in_namespace(),
    route(Delete, "/v1/schedules/{name}",              Token(Submit), FrontEnd, H::ScheduleDelete).in_namespace(),
    route(Post,   "/v1/schedules/{name}/pause",        Token(Submit), FrontEnd, H::SchedulePause).in_namespace(),
    route(Post,   "/v1/schedules/{name}/resume",       Token(Submit), FrontEnd, H::ScheduleResume).in_namespace(),
    route(Post,   "/v1/schedules/{name}/backfill",     Token(Submit), FrontEnd, H::ScheduleBackfill).body(CONTROL_BODY_BYTES_MAX).in_namespace(),
    route(Get,    "/v1/overview",                      Token(Read),   AnyNode,  H::Overview),
    route(Get,    "/v1/events",                        Token(Read),   AnyNode,  H::Events).in_namespace(),
    route(Get,    "/v1/whoami",                        Token(Read),   AnyNode,  H::Whoami).in_namespace(),
    // Each namespace's jobs and costs; a confined token sees its own.
    route(Get,    "/v1/namespaces",                    Token(Read),   FrontEnd, H::Namespaces).in_namespace(),
    // Quotas are the cluster's to give: no namespace's token sets its own.
    route(Post,   "/v1/namespaces/{name}/quotas",      Token(Admin),  FrontEnd, H::NamespaceQuotas).body(CONTROL_BODY_BYTES_MAX),
    route(Post,   "/v1/namespaces/{name}/weight",      Token(Admin),  FrontEnd, H::NamespaceWeight).body(CONTROL_BODY_BYTES_MAX),
    route(Get,    "/v1/cluster",                       Token(Read),   AnyNode,  H::Cluster),
    route(Delete, "/v1/cluster/voters/{node}",         Token(Admin),  FrontEnd, H::VoterRemove),
    route(Get,    "/v1/master",                        Token(Read),   FrontEnd, H::MasterBuild),
    route(Post,   "/v1/master/upgrade",                Token(Admin),  FrontEnd, H::MasterUpgrade).body(MASTER_BYTES_MAX),
    route(Post,   "/v1/master/rollback",               Token(Admin),  FrontEnd, H::MasterRollback),
    route(Get,    "/v1/tokens",                        Token(Admin),  FrontEnd, H::TokenList),
    route(Post,   "/v1/tokens",                        Token(Admin),  FrontEnd, H::TokenCreate).body(CONTROL_BODY_BYTES_MAX),
    route(Delete, "/v1/tokens/{id}",                   Token(Admin),  FrontEnd, H::TokenRevoke),
    // Node to node (`api::internal`).
    route(Post,   "/internal/v1/master",               Sealed,        AnyNode,  H::InternalMaster).body(BATCH_BODY_BYTES_MAX),
    route(Post,   "/internal/v1/replication",          Sealed,        AnyNode,  H::InternalReplication).body(ENVELOPE_BYTES_MAX),
    route(Post,   "/internal/v1/voters",               Sealed,        AnyNode,  H::InternalVoters).body(CONTROL_BODY_BYTES_MAX),
    route(Post,   "/internal/v1/modules",              Sealed,        AnyNode,  H::InternalModules).body(MODULE_BYTES_MAX),
    route(Post,   "/internal/v1/modules/fetch",        Sealed,        AnyNode,  H::InternalModuleFetch).body(CONTROL_BODY_BYTES_MAX),
    route(Post,   "/internal/v1/masters",              Sealed,        AnyNode,  H::InternalMasters).body(MASTER_BYTES_MAX),
    route(Post,   "/internal/v1/masters/fetch",        Sealed,        AnyNode,  H::InternalMasterFetch).body(CONTROL_BODY_BYTES_MAX),
    route(Post,   "/internal/v1/tokens",               Sealed,        AnyNode,  H::InternalTokens).body(CONTROL_BODY_BYTES_MAX),
    // A pushed blob: framed and streamed (`cluster::blob_transfer`).
    route(Post,   "/internal/v1/blobs",                Sealed,        AnyNode,  H::InternalBlobPut),
    route(Post,   "/internal/v1/blobs/fetch",          Sealed,        AnyNode,  H::InternalBlobFetch).body(CONTROL_BODY_BYTES_MAX),
];

/// A request's route, with the value of its pattern's `{name}` segment.
#[derive(Debug, Clone, Copy)]
pub struct Found<'a> {
    pub route: &'static Route,
    /// The path segment in the pattern's `{...}` place, if it has one.
    pub param: Option<&'a str>,
}

/// Why a request has no route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// No resource has that path.
    NotFound,
    /// The resource exists with other methods.
    MethodNotAllowed {
        /// The `Allow` header's value.
        allow: &'static str,
        /// Which nodes serve the resource.
        serves: Serves,
    },
}

impl Miss {
    /// The scope a request without a route needs (see the module's notes).
    pub fn scope(self, method: &Method) -> Scope {
        if *method == Method::GET || *method == Method::HEAD {
            Scope::Read
        } else {
            Scope::Admin
        }
    }

    /// Which nodes answer a request without a route with `404`/`405`
    /// rather than `not_front_end`.
    pub fn serves(self) -> Serves {
        match self {
            Miss::NotFound => Serves::FrontEnd,
            Miss::MethodNotAllowed { serves, .. } => serves,
        }
    }
}

/// The scope a request needs (`None`: no token), from its route or, for a
/// request without one, from its method. Sealed routes need none: their
/// bodies prove the caller.
pub fn scope(method: &Method, found: &Result<Found<'_>, Miss>) -> Option<Scope> {
    match found {
        Ok(found) => match found.route.access {
            Access::Token(scope) => Some(scope),
            Access::Open | Access::Sealed => None,
        },
        Err(miss) => Some(miss.scope(method)),
    }
}

/// A path's segments, as routes are matched on them.
pub fn segments(path: &str) -> Vec<&str> {
    path.trim_matches('/').split('/').collect()
}

/// How many literal segments `pattern` has if it matches `segments`.
/// Allocates nothing: it runs for every route on every request.
fn literals(pattern: &str, segments: &[&str]) -> Option<usize> {
    let mut parts = pattern.trim_matches('/').split('/');
    let mut count = 0;
    for segment in segments {
        let part = parts.next()?;
        if part.starts_with('{') {
            continue;
        }
        if part != *segment {
            return None;
        }
        count += 1;
    }
    parts.next().is_none().then_some(count)
}

/// The route `method` and `segments` ask for.
pub fn find<'a>(method: &Method, segments: &[&'a str]) -> Result<Found<'a>, Miss> {
    let mut resource: Option<(usize, &'static str)> = None;
    for route in ROUTES {
        if let Some(n) = literals(route.path, segments)
            && resource.is_none_or(|(best, _)| n > best)
        {
            resource = Some((n, route.path));
        }
    }
    let (_, resource) = resource.ok_or(Miss::NotFound)?;
    let verb = Verb::of(method);
    if let Some(route) = ROUTES
        .iter()
        .find(|r| r.path == resource && Some(r.verb) == verb)
    {
        let param = route
            .path
            .trim_matches('/')
            .split('/')
            .position(|part| part.starts_with('{'))
            .map(|at| segments[at]);
        return Ok(Found { route, param });
    }
    let first = (ROUTES.iter().find(|r| r.path == resource)).expect("the resource has routes");
    Err(Miss::MethodNotAllowed {
        allow: allow(resource),
        serves: first.serves,
    })
}

/// The `Allow` header of `resource`: its methods, in the table's order of
/// verbs. Written once per resource, on first use.
fn allow(resource: &'static str) -> &'static str {
    static ALLOW: std::sync::OnceLock<std::collections::HashMap<&'static str, &'static str>> =
        std::sync::OnceLock::new();
    let table = ALLOW.get_or_init(|| {
        let mut table = std::collections::HashMap::new();
        for route in ROUTES {
            table.entry(route.path).or_insert_with(|| {
                let verbs = [Get, Head, Put, Post, Delete];
                let names: Vec<&str> = (verbs.iter())
                    .filter(|v| ROUTES.iter().any(|r| r.path == route.path && r.verb == **v))
                    .map(|v| v.as_str())
                    .collect();
                &*Box::leak(names.join(", ").into_boxed_str())
            });
        }
        table
    });
    table.get(resource).copied().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(method: Method, path: &str) -> Result<(Handler, Option<String>), Miss> {
        find(&method, &segments(path)).map(|f| (f.route.handler, f.param.map(String::from)))
    }

    #[test]
    fn routes_are_found_with_their_parameter() {
        assert_eq!(found(Method::GET, "/healthz"), Ok((H::Healthz, None)));
        assert_eq!(found(Method::GET, "/"), Ok((H::DashboardPage, None)));
        assert_eq!(
            found(Method::GET, "/v1/jobs/17/result"),
            Ok((H::JobResult, Some("17".into())))
        );
        assert_eq!(
            found(Method::DELETE, "/v1/jobs/17/"),
            Ok((H::JobCancel, Some("17".into())))
        );
        assert_eq!(
            found(Method::POST, "/v1/schedules/nightly/pause"),
            Ok((H::SchedulePause, Some("nightly".into())))
        );
    }

    #[test]
    fn a_literal_segment_wins_over_a_parameter() {
        assert_eq!(
            found(Method::POST, "/v1/jobs/batch"),
            Ok((H::JobBatch, None))
        );
        let miss = found(Method::GET, "/v1/jobs/batch").unwrap_err();
        assert!(
            matches!(miss, Miss::MethodNotAllowed { allow: "POST", .. }),
            "{miss:?}"
        );
    }

    #[test]
    fn misses_say_what_is_allowed() {
        assert_eq!(found(Method::GET, "/v1/nothing"), Err(Miss::NotFound));
        assert_eq!(found(Method::GET, "/v1/jobs/1/2/3"), Err(Miss::NotFound));
        let allow = |method, path| match found(method, path) {
            Err(Miss::MethodNotAllowed { allow, .. }) => allow,
            other => panic!("{other:?}"),
        };
        assert_eq!(allow(Method::PUT, "/v1/jobs"), "GET, POST");
        assert_eq!(allow(Method::POST, "/v1/jobs/7"), "GET, DELETE");
        assert_eq!(allow(Method::HEAD, "/"), "GET");
        assert_eq!(allow(Method::GET, "/internal/v1/master"), "POST");
        assert_eq!(allow(Method::GET, "/v1/tokens/x"), "DELETE");
        assert_eq!(allow(Method::POST, "/v1/blobs"), "GET, PUT");
        assert_eq!(allow(Method::PUT, "/v1/blobs/ab"), "GET, HEAD, DELETE");
    }

    #[test]
    fn a_confined_token_reaches_its_namespaces_jobs_dags_schedules_and_blobs_by_digest_only() {
        let mut reached: Vec<String> = (ROUTES.iter())
            .filter(|route| route.in_namespace)
            .map(|route| format!("{} {}", route.verb.as_str(), route.path))
            .collect();
        reached.sort();
        assert_eq!(
            reached,
            [
                "DELETE /v1/jobs/{id}",
                "DELETE /v1/schedules/{name}",
                "GET /v1/blobs/{digest}",
                "GET /v1/dags/{id}",
                "GET /v1/events",
                "GET /v1/jobs",
                "GET /v1/jobs/{id}",
                "GET /v1/jobs/{id}/input",
                "GET /v1/jobs/{id}/result",
                "GET /v1/namespaces",
                "GET /v1/schedules",
                "GET /v1/schedules/{name}",
                "GET /v1/whoami",
                "HEAD /v1/blobs/{digest}",
                "POST /v1/dags",
                "POST /v1/jobs",
                "POST /v1/jobs/batch",
                "POST /v1/jobs/bulk",
                "POST /v1/jobs/wait",
                "POST /v1/schedules",
                "POST /v1/schedules/{name}/backfill",
                "POST /v1/schedules/{name}/pause",
                "POST /v1/schedules/{name}/resume",
                "PUT /v1/blobs",
            ]
        );
        // Every one needs a token: none is open or sealed.
        for route in ROUTES.iter().filter(|route| route.in_namespace) {
            assert!(matches!(route.access, Access::Token(_)), "{}", route.path);
        }
    }

    #[test]
    fn scopes_of_routes() {
        let scope = |m: Method, path: &str| {
            let segments = segments(path);
            super::scope(&m, &find(&m, &segments))
        };
        assert_eq!(scope(Method::GET, "/healthz"), None);
        assert_eq!(scope(Method::GET, "/openapi.json"), None);
        assert_eq!(scope(Method::GET, "/dashboard/app.js"), None);
        assert_eq!(scope(Method::POST, "/internal/v1/master"), None);
        assert_eq!(scope(Method::POST, "/v1/jobs/wait"), Some(Scope::Read));
        assert_eq!(scope(Method::GET, "/metrics"), Some(Scope::Read));
        assert_eq!(scope(Method::GET, "/v1/jobs/3/result"), Some(Scope::Read));
        assert_eq!(scope(Method::GET, "/no/such/route"), Some(Scope::Read));
        assert_eq!(scope(Method::GET, "/v1/tokens"), Some(Scope::Admin));
        assert_eq!(scope(Method::POST, "/v1/jobs"), Some(Scope::Submit));
        assert_eq!(scope(Method::POST, "/v1/jobs/batch"), Some(Scope::Submit));
        assert_eq!(scope(Method::POST, "/v1/dags"), Some(Scope::Submit));
        assert_eq!(
            scope(Method::DELETE, "/v1/schedules/x"),
            Some(Scope::Submit)
        );
        for (m, p) in [
            (Method::POST, "/v1/modules"),
            (Method::DELETE, "/v1/jobs/3"),
            (Method::POST, "/v1/jobs/bulk"),
            (Method::POST, "/v1/blobs/ab/purge"),
            (Method::POST, "/v1/node/leave"),
            (Method::POST, "/v1/tokens"),
            (Method::DELETE, "/v1/tokens/abc"),
            (Method::PUT, "/no/such/route"),
            (Method::POST, "/healthz"),
        ] {
            assert_eq!(scope(m.clone(), p), Some(Scope::Admin), "{m} {p}");
        }
    }

    #[test]
    fn the_table_is_consistent() {
        for (i, a) in ROUTES.iter().enumerate() {
            let params = segments(a.path)
                .iter()
                .filter(|s| s.starts_with('{'))
                .count();
            assert!(params <= 1, "{}: at most one parameter", a.path);
            assert_eq!(
                a.access == Access::Sealed,
                a.path.starts_with("/internal/"),
                "{}: sealed exactly under /internal/",
                a.path
            );
            assert_eq!(
                a.body_bytes_max > 0,
                a.verb == Verb::Post
                    && !matches!(
                        a.handler,
                        H::NodeLeave
                            | H::SchedulePause
                            | H::ScheduleResume
                            | H::MasterRollback
                            | H::BlobPurge
                            | H::InternalBlobPut
                    ),
                "{}: POST routes read bodies, others none (but the bodiless POSTs and the \
                 streamed ones, whose handlers read their bodies)",
                a.path
            );
            for b in &ROUTES[i + 1..] {
                assert!(a.handler != b.handler, "{:?} answers two routes", a.handler);
                if a.path == b.path {
                    assert!(a.verb != b.verb, "{} {} twice", a.verb.as_str(), a.path);
                    assert_eq!(
                        a.serves, b.serves,
                        "{}: one resource, one set of nodes",
                        a.path
                    );
                    assert_eq!(a.access == Sealed, b.access == Sealed, "{}", a.path);
                }
            }
        }
    }
}
