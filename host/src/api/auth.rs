//! Who may call what.
//!
//! * `GET /healthz` is open to anyone: load balancers probe it, and it says
//!   nothing but "up".
//! * Every other public route needs a token once the node has a cluster key
//!   (see [`crate::security::token`]): `read` for every `GET` (jobs,
//!   results, modules, the cluster, `/metrics`, which names nodes and
//!   load), `submit` for `POST /v1/jobs` and `/v1/jobs/batch`, `admin`
//!   for everything else (module uploads, cancels, `leave`, removing a
//!   voter, listing and managing tokens).
//!   Unknown routes need a token too, so probing without one learns
//!   nothing about which routes exist.
//! * `/internal/...` routes are for nodes: their bodies are sealed with the
//!   cluster key ([`crate::security::seal`]), no token involved.
//!
//! A missing, malformed, unknown or revoked token is `401 unauthorized`; a
//! valid token without the scope is `403 forbidden`. Both are counted.

use crate::security::token::Scope;
use hyper::Method;
use serde::{Deserialize, Serialize};

/// The scope a public route needs (`None`: open to anyone).
pub fn needed_scope(method: &Method, segments: &[&str]) -> Option<Scope> {
    match (method, segments) {
        (&Method::GET, ["healthz" | "openapi.json"]) => None,
        // The dashboard's files hold no data (served before this is asked).
        (&Method::GET, [""] | ["index.html"] | ["dashboard", "app.js" | "style.css"]) => None,
        (&Method::POST, ["v1", "jobs"] | ["v1", "jobs", "batch"] | ["v1", "dags"]) => {
            Some(Scope::Submit)
        }
        (&Method::POST, ["v1", "jobs", "wait"]) => Some(Scope::Read),
        // A schedule submits jobs: managing one is submitting.
        (&Method::POST | &Method::DELETE, ["v1", "schedules", ..]) => Some(Scope::Submit),
        (_, ["v1", "tokens", ..]) => Some(Scope::Admin),
        (&Method::GET | &Method::HEAD, _) => Some(Scope::Read),
        _ => Some(Scope::Admin),
    }
}

/// The methods a known public route allows (for `405` and its `Allow`
/// header), or `None` for an unknown route (the internal routes, all
/// `POST`, are listed once with their body limits in `api`).
pub fn allowed_methods(segments: &[&str]) -> Option<&'static str> {
    Some(match segments {
        ["healthz"] | ["metrics"] | ["openapi.json"] => "GET",
        [""] | ["index.html"] | ["dashboard", "app.js" | "style.css"] => "GET",
        [
            "v1",
            "cluster" | "overview" | "events" | "whoami" | "master",
        ] => "GET",
        ["v1", "master", "upgrade" | "rollback"] => "POST",
        ["v1", "modules"] | ["v1", "jobs"] | ["v1", "tokens"] | ["v1", "schedules"] => "GET, POST",
        ["v1", "schedules", _] => "GET, DELETE",
        ["v1", "dags"] => "POST",
        ["v1", "dags", _] => "GET",
        ["v1", "schedules", _, "pause" | "resume" | "backfill"] => "POST",
        ["v1", "modules", _] | ["v1", "jobs", _, "result" | "input"] => "GET",
        ["v1", "jobs", "batch" | "wait" | "bulk"] | ["v1", "node", "leave"] => "POST",
        ["v1", "jobs", _] => "GET, DELETE",
        ["v1", "tokens", _] | ["v1", "cluster", "voters", _] => "DELETE",
        _ => return None,
    })
}

/// `POST /v1/tokens`: a token made by the caller (`cohort token create`),
/// of which the node sees only the hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCreateRequest {
    /// The token's id (its second part; `cohort token create` makes 12
    /// hex digits).
    #[schema(pattern = "^[A-Za-z0-9-]{1,64}$")]
    pub id: String,
    /// What it is for.
    #[serde(default)]
    #[schema(max_length = 64)]
    pub name: String,
    /// `read`, `submit`, `admin`: at least one, each once.
    #[schema(value_type = Vec<ScopeName>, min_items = 1)]
    pub scopes: Vec<String>,
    /// SHA-256 of the token's secret part, hex.
    #[schema(pattern = "^(sha256:)?[0-9a-fA-F]{64}$")]
    pub sha256: String,
}

/// Longest token name, in characters (within the master's limit in bytes).
pub const TOKEN_NAME_CHARS_MAX: usize = 64;
const _: () = assert!(TOKEN_NAME_CHARS_MAX * 4 <= cohort_master::master::TOKEN_NAME_BYTES_MAX);

/// A scope's name, as tokens carry it (in the OpenAPI document; the
/// master checks the names, [`Scope`] is what a node enforces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScopeName {
    /// Reads: jobs, results, modules, the cluster, metrics.
    Read,
    /// Submissions.
    Submit,
    /// Everything else: uploads, cancels, tokens, the cluster's voters.
    Admin,
}

/// A token as listed (never its secret or hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenBody {
    /// Id.
    pub id: String,
    /// What it is for.
    pub name: String,
    /// Scopes.
    pub scopes: Vec<String>,
    /// When it was made (ms since the Unix epoch).
    pub created_at: u64,
}

/// `GET /v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenListResponse {
    /// Every token, by id.
    pub tokens: Vec<TokenBody>,
}

/// What `POST /internal/v1/tokens` asks (postcard): the same operations
/// for a caller that proves the cluster key instead of an admin token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenOp {
    /// Create a token.
    Create(TokenCreateRequest),
    /// Revoke a token by id.
    Revoke(String),
    /// List tokens.
    List,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_of_routes() {
        let scope = |m: Method, path: &str| {
            let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
            needed_scope(&m, &segments)
        };
        assert_eq!(scope(Method::GET, "/healthz"), None);
        assert_eq!(scope(Method::GET, "/openapi.json"), None);
        assert_eq!(scope(Method::POST, "/v1/jobs/wait"), Some(Scope::Read));
        assert_eq!(scope(Method::GET, "/metrics"), Some(Scope::Read));
        assert_eq!(scope(Method::GET, "/v1/jobs/3/result"), Some(Scope::Read));
        assert_eq!(scope(Method::GET, "/v1/tokens"), Some(Scope::Admin));
        assert_eq!(scope(Method::POST, "/v1/jobs"), Some(Scope::Submit));
        assert_eq!(scope(Method::POST, "/v1/jobs/batch"), Some(Scope::Submit));
        for (m, p) in [
            (Method::POST, "/v1/modules"),
            (Method::DELETE, "/v1/jobs/3"),
            (Method::POST, "/v1/node/leave"),
            (Method::POST, "/v1/tokens"),
            (Method::DELETE, "/v1/tokens/abc"),
            (Method::PUT, "/no/such/route"),
            (Method::POST, "/healthz"),
        ] {
            assert_eq!(scope(m.clone(), p), Some(Scope::Admin), "{m} {p}");
        }
    }
}
