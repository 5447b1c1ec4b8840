//! The public API's OpenAPI 3.1 document, served at `GET /openapi.json`
//! and committed as `clients/openapi.json` (for client generators, and so
//! that a change of the contract shows in review).
//!
//! It is built from the code, not written beside it:
//!
//! * the schemas are derived (utoipa's `ToSchema`) from the very types the
//!   node parses and answers with (`cohort_client::types`, the token
//!   bodies of [`super::auth`]);
//! * each route's error responses come from the [`ErrorCode`]s it may
//!   answer, grouped by the status the code itself decides, with one
//!   example per code, so a status, a code and its `retryable` cannot
//!   disagree between the document and the node;
//! * the routes, their methods and paths and which need no token come from
//!   the one route table ([`super::routes`]); what is said of each is one
//!   arm of [`operation`], an exhaustive `match` over the table's handlers;
//! * a test checks that the committed copy is current (`COHORT_BLESS=1`
//!   rewrites it).

use super::auth::{
    ScopeName, TokenBody, TokenCreateRequest, TokenCreatedResponse, TokenListResponse,
};
use super::error::{ErrorCode, error_body};
use super::routes::{Access, Handler, ROUTES, Verb};
use super::types::*;
use crate::limits::FILTER_TEXT_CHARS_MAX;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use utoipa::ToSchema;
use utoipa::openapi::path::{
    HttpMethod, Operation, OperationBuilder, ParameterBuilder, ParameterIn, PathItem,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, ObjectBuilder, OpenApi, OpenApiBuilder,
    PathsBuilder, Ref, RefOr, Required, ResponseBuilder, Schema, Type,
};

use ErrorCode::*;

/// Codes any route may answer: the transport's limits, TLS, tokens and
/// scopes, the front-end role, and the unexpected.
const ANY_ROUTE: &[ErrorCode] = &[
    TlsRequired,
    InvalidToken,
    Unauthorized,
    Forbidden,
    NotFrontEnd,
    RequestTimeout,
    TooManyConnections,
    HeadersTooLarge,
    Internal,
];
/// Codes of every route that asks the master.
const MASTER: &[ErrorCode] = &[MasterUnavailable, UnknownVersion];
/// The job states' names.
const STATES: &[&str] = &[
    "queued",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "dead",
];
/// A module as a filter names it: its sha256 or a deployment's name.
const MODULE_REF: &str = "^([0-9a-fA-F]{64}|[a-z0-9][a-z0-9._-]{0,62})$";

/// The document, as served (pretty JSON, built once).
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut document = serde_json::to_value(build()).expect("the document serializes");
        refine(&mut document);
        let mut text = serde_json::to_string_pretty(&document).expect("a JSON value serializes");
        text.push('\n');
        text
    })
}

/// What utoipa's attributes cannot say.
fn refine(document: &mut Value) {
    bound_unsigned(document);
    let schemas = &mut document["components"]["schemas"];
    // A submission names at most one input (a `null` one is absent).
    let both = |a: &str, b: &str| {
        let given = json!({"not": {"type": "null"}});
        json!({"required": [a, b], "properties": {a: given, b: given}})
    };
    schemas["SubmitRequest"]["not"] = json!({"anyOf": [
        both("input", "input_base64"),
        both("input", "input_json"),
        both("input_base64", "input_json"),
    ]});
    // A batch's jobs must have a submission's shape (fields and types), but
    // values out of range or pattern are refused job by job, in the
    // answer's `results`, not as the batch's error.
    let mut shape = schemas["SubmitRequest"].clone();
    // Its grants too, which the document otherwise names by reference.
    let mut grant = schemas["HttpGrantBody"].clone();
    strip_value_rules(&mut grant);
    shape["properties"]["egress"]["items"] = grant;
    strip_value_rules(&mut shape);
    bound_unsigned(&mut shape);
    let jobs = &mut schemas["BatchRequest"]["properties"]["jobs"];
    jobs["items"] = shape;
    jobs["maxItems"] = 10_000.into();
    schemas["TokenCreateRequest"]["properties"]["scopes"]["uniqueItems"] = true.into();
    // A bulk request's filter and action, as the node checks them.
    let filter = &mut schemas["JobFilterBody"]["properties"];
    filter["state"]["enum"] = json!(STATES);
    filter["module"]["pattern"] = MODULE_REF.into();
    filter["error"]["maxLength"] = FILTER_TEXT_CHARS_MAX.into();
    filter["ids"]["maxItems"] = cohort_master::limits::FILTER_IDS_MAX.into();
    let bulk = &mut schemas["BulkRequest"]["properties"];
    bulk["action"]["enum"] = json!(["cancel", "retry"]);
    bulk["attempts"]["minimum"] = 1.into();
    // Links: what a created job or token is then used by (schemathesis'
    // stateful phase follows them).
    let link = |operation: &str| json!({"operationId": operation, "parameters": {"id": "$response.body#/id"}});
    let paths = &mut document["paths"];
    paths["/v1/jobs"]["post"]["responses"]["202"]["links"] = json!({
        "job": link("getV1JobsId"),
        "result": link("getV1JobsIdResult"),
        "cancel": link("deleteV1JobsId"),
    });
    paths["/v1/tokens"]["post"]["responses"]["201"]["links"] =
        json!({"revoke": link("deleteV1TokensId")});
}

/// Unsigned integers get their bounds (what the node parses), and
/// the format names of OpenAPI's registry (`uint64`, not utoipa's
/// `u-int64`).
fn bound_unsigned(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            let upper = match fields.get("format").and_then(Value::as_str) {
                Some("u-int64" | "uint64") => Some(("uint64", Value::from(u64::MAX))),
                Some("u-int32" | "uint32") => Some(("uint32", Value::from(u32::MAX))),
                Some("u-int16" | "uint16") => Some(("uint16", Value::from(u16::MAX))),
                Some("u-int8" | "uint8") => Some(("uint8", Value::from(u8::MAX))),
                _ => None,
            };
            if let Some((format, max)) = upper {
                fields.insert("format".into(), format.into());
                fields.entry("minimum").or_insert(0.into());
                fields.entry("maximum").or_insert(max);
            }
            fields.values_mut().for_each(bound_unsigned);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_unsigned),
        _ => {}
    }
}

/// Removes what constrains values rather than shape: ranges, patterns,
/// lengths, exclusions.
fn strip_value_rules(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for rule in [
                "minimum",
                "maximum",
                "pattern",
                "minLength",
                "maxLength",
                "minItems",
                "maxItems",
                "not",
            ] {
                fields.remove(rule);
            }
            fields.values_mut().for_each(strip_value_rules);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_value_rules),
        _ => {}
    }
}

/// What the document says of one route: how it is called beyond its
/// method and path (which the route table gives) and what it answers.
struct Doc {
    operation: OperationBuilder,
}

fn doc(tag: &str, summary: &str) -> Doc {
    Doc {
        operation: OperationBuilder::new().tag(tag).summary(Some(summary)),
    }
}

/// The route's operation id: its method and path in camel case
/// (`getV1JobsIdResult`).
fn operation_id(verb: Verb, path: &str) -> String {
    let words = path
        .split(['/', '{', '}'])
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mut chars = s.chars();
            chars.next().map_or(String::new(), |c| {
                c.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<String>();
    format!("{}{words}", verb.as_str().to_ascii_lowercase())
}

fn schema_ref<T: ToSchema>() -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(T::name()))
}

impl Doc {
    fn describe(mut self, text: &str) -> Self {
        self.operation = self.operation.description(Some(text));
        self
    }

    /// A JSON request body of type `T`, with `example`.
    fn body<T: ToSchema>(mut self, example: serde_json::Value) -> Self {
        let content = ContentBuilder::new()
            .schema(Some(schema_ref::<T>()))
            .example(Some(example))
            .build();
        self.operation = self.operation.request_body(Some(
            RequestBodyBuilder::new()
                .content("application/json", content)
                .required(Some(Required::True))
                .build(),
        ));
        self
    }

    /// A raw request body of `content_type`.
    fn raw_body(mut self, content_type: &str, description: &str) -> Self {
        let binary = ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/octet-stream")
            .build();
        self.operation = self.operation.request_body(Some(
            RequestBodyBuilder::new()
                .description(Some(description))
                .content(
                    content_type,
                    ContentBuilder::new().schema(Some(binary)).build(),
                )
                .required(Some(Required::True))
                .build(),
        ));
        self
    }

    /// A parameter in the path (`{name}`, required) or the query.
    fn param(
        mut self,
        name: &str,
        location: ParameterIn,
        schema: ObjectBuilder,
        description: &str,
    ) -> Self {
        let required = match location {
            ParameterIn::Path => Required::True,
            _ => Required::False,
        };
        self.operation = self.operation.parameter(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(location)
                .required(required)
                .description(Some(description))
                .schema(Some(schema.build())),
        );
        self
    }

    /// A JSON answer of type `T`.
    fn answers<T: ToSchema>(mut self, status: u16, description: &str) -> Self {
        let content = ContentBuilder::new()
            .schema(Some(schema_ref::<T>()))
            .build();
        self.operation = self.operation.response(
            status.to_string(),
            ResponseBuilder::new()
                .description(description)
                .content("application/json", content)
                .build(),
        );
        self
    }

    /// An answer without a body (`HEAD`).
    fn answers_empty(mut self, status: u16, description: &str) -> Self {
        self.operation = self.operation.response(
            status.to_string(),
            ResponseBuilder::new().description(description).build(),
        );
        self
    }

    /// A non-JSON answer (`content_type`, a string schema).
    fn answers_raw(mut self, status: u16, content_type: &str, description: &str) -> Self {
        let text = ObjectBuilder::new().schema_type(Type::String).build();
        self.operation = self.operation.response(
            status.to_string(),
            ResponseBuilder::new()
                .description(description)
                .content(
                    content_type,
                    ContentBuilder::new().schema(Some(text)).build(),
                )
                .build(),
        );
        self
    }

    /// The errors it may answer besides [`ANY_ROUTE`]'s.
    fn errors(mut self, codes: &[&[ErrorCode]]) -> Self {
        let mut by_status: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
        for &code in codes.iter().copied().flatten().chain(ANY_ROUTE) {
            let same = by_status.entry(code.status().as_u16()).or_default();
            if !same.contains(&code) {
                same.push(code);
            }
        }
        for (status, codes) in by_status {
            let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
            let mut content = ContentBuilder::new().schema(Some(schema_ref::<ErrorBody>()));
            for code in &codes {
                let example = serde_json::to_value(error_body(*code, example_message(*code)))
                    .expect("serializes");
                content = content.examples_from_iter([(
                    code.as_str(),
                    utoipa::openapi::example::ExampleBuilder::new()
                        .value(Some(example))
                        .build(),
                )]);
            }
            self.operation = self.operation.response(
                status.to_string(),
                ResponseBuilder::new()
                    .description(format!("`{}`", names.join("`, `")))
                    .content("application/json", content.build())
                    .build(),
            );
        }
        self
    }

    fn public(mut self) -> Self {
        // `/healthz` needs no token even on a node that has tokens.
        self.operation = self
            .operation
            .securities(Some([SecurityRequirement::default()]));
        self
    }

    fn build(self, verb: Verb, path: &'static str) -> (HttpMethod, &'static str, Operation) {
        let method = match verb {
            Verb::Get => HttpMethod::Get,
            Verb::Head => HttpMethod::Head,
            Verb::Put => HttpMethod::Put,
            Verb::Post => HttpMethod::Post,
            Verb::Delete => HttpMethod::Delete,
        };
        let id = operation_id(verb, path);
        (method, path, self.operation.operation_id(Some(id)).build())
    }
}

/// An integer parameter from `min` to `max`.
fn integer(min: u64, max: u64) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
            utoipa::openapi::KnownFormat::UInt64,
        )))
        .minimum(Some(min))
        .maximum(Some(max))
}

/// A text parameter.
fn text() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

/// A text parameter that is one of `values`.
fn one_of(values: &[&str]) -> ObjectBuilder {
    text().enum_values(Some(values.iter().copied()))
}

/// A message for people, for the examples.
fn example_message(code: ErrorCode) -> String {
    format!(
        "{} (see \"Error codes\" in docs/http-api.md)",
        code.as_str().replace('_', " ")
    )
}

/// How the route `handler` answers is documented (`None`: it is not in the
/// document: the node-to-node routes, and `/index.html`, which is `/`).
/// One arm per handler, so a new route cannot go undocumented by accident.
fn operation(handler: Handler) -> Option<Doc> {
    use Handler as H;
    use ParameterIn::{Header, Path, Query};
    let blob = |r: Doc| r.param("digest", Path, text(), "The blob's sha256 (64 hex digits).");
    let id = |r: Doc| r.param("id", Path, integer(0, u64::MAX), "The job's id.");
    let name = |r: Doc| {
        r.param(
            "name",
            Path,
            text().pattern(Some("^[A-Za-z0-9._-]{1,128}$")),
            "The schedule's name.",
        )
    };
    let deployment = |r: Doc| {
        r.param(
            "name",
            Path,
            text().pattern(Some("^[a-z0-9][a-z0-9._-]{0,62}$")),
            "The deployment's name.",
        )
    };
    let secret = |r: Doc| {
        r.param(
            "name",
            Path,
            text().pattern(Some("^[A-Z_][A-Z0-9_]{0,63}$")),
            "The secret's name.",
        )
    };
    let wait_ms = |r: Doc| {
        r.param(
            "wait_ms",
            Query,
            integer(0, u64::MAX),
            "Wait up to this long (ms; more than 60,000 waits 60,000) for the job to finish first.",
        )
    };
    Some(match handler {
        H::Healthz => doc("node", "Whether the node serves")
            .answers::<HealthResponse>(200, "It serves.")
            .errors(&[&[MasterUnavailable]]),
        H::Metrics => doc("node", "OpenMetrics text")
            .answers_raw(200, "application/openmetrics-text", "Jobs by state, journal, replication, HTTP, security counters.")
            .errors(&[]),
        H::NodeLeave => doc("node", "The node leaves gracefully (as on SIGTERM)")
            .answers::<LeavingResponse>(202, "It is leaving.")
            .errors(&[]),
        H::MasterBuild => doc("master", "Which master build runs")
            .answers::<MasterBuildResponse>(200, "The build running (`built-in` or `sha256:<hex>`) and the one a rollback returns to.")
            .errors(&[MASTER]),
        H::MasterUpgrade => doc("master", "Check a master component and switch the running cluster to it")
            .raw_body("application/wasm", "The master component's bytes (at most 64 MiB), world `cohort:master/master`.")
            .answers::<MasterSwitchResponse>(200, "Switched once durable (or `switched: false` if it already ran).")
            .errors(&[
                &[
                    BodyTooLarge,
                    InvalidMaster,
                    MasterWrongWorld,
                    MasterNondeterministicImport,
                    MasterTraps,
                    MasterSnapshotUnreadable,
                    MasterReplayDiverged,
                    UpgradeBusy,
                    UpgradeUnsupported,
                    ReplicationFailed,
                ],
                MASTER,
            ]),
        H::MasterRollback => doc("master", "Switch back to the master build before the last switch")
            .answers::<MasterSwitchResponse>(200, "Switched once durable.")
            .errors(&[
                &[
                    NothingToRollBack,
                    MasterSnapshotUnreadable,
                    MasterReplayDiverged,
                    UpgradeBusy,
                    UpgradeUnsupported,
                ],
                MASTER,
            ]),
        H::Cluster => doc("cluster", "The nodes, the master, the workers and the voters")
            .answers::<ClusterResponse>(200, "The cluster as the answering node sees it.")
            .errors(&[]),
        H::VoterRemove => doc("cluster", "Remove a back-end node from the voter set")
            .param("node", Path, text(), "The node's id.")
            .answers::<RemovingResponse>(202, "Removed once earlier voter changes commit.")
            .errors(&[MASTER, &[NotFound, BadRequest, ReplicasUnavailable]]),
        H::ModuleUpload => doc("modules", "Upload a job module (a WebAssembly component)")
            .raw_body("application/wasm", "The component's bytes (at most 64 MiB); validated against the job world.")
            .answers::<ModuleBody>(201, "Stored (new).")
            .answers::<ModuleBody>(200, "Already stored.")
            .errors(&[&[
                BodyTooLarge,
                ModuleTooLarge,
                ModuleInvalid,
                ModuleWrongWorld,
                ModuleJobVersion,
                ModuleUnsupportedImport,
                ReplicationFailed,
            ]]),
        H::ModuleList => doc("modules", "The stored modules")
            .answers::<ModuleListResponse>(200, "Every module this node stores.")
            .errors(&[]),
        H::ModuleGet => doc("modules", "A module's bytes")
            .param("digest", Path, text(), "The module's sha256 (64 hex digits).")
            .answers_raw(200, "application/wasm", "The component.")
            .errors(&[&[ModuleNotStored]]),
        H::BlobPut => doc("blobs", "Upload a blob (any bytes), streamed")
            .describe("Streams the body to the node's disk, hashing it as it arrives, and answers once the blob is durable on a majority of the back-end nodes (or, with `--blob-store`, in the S3-compatible store: `blob_store_unavailable` when it cannot take it) and the master keeps it: for the retention time (`--retention`) from this upload at least, and as long as a held job (its input or an output) or a schedule names it; then the nodes delete their copies. Identical bytes are stored once; uploading them again keeps them for another retention time. A body may be any size up to the cluster's ceiling (`--blob-bytes-max`, 64 GiB by default), sent with `Content-Length` or chunked; it must keep arriving (30 s without a byte, or an average under 1 MiB/s after the first 10 s, is `request_timeout`). An upload refused or cut short leaves nothing stored.")
            .param("X-Cohort-Sha256", Header, text().pattern(Some("^[0-9a-fA-F]{64}$")), "The sha256 the bytes must have (64 hex digits; anything else is `bad_request`); bytes with another sha256 are `blob_digest_mismatch`, and nothing is stored. It may come instead, or as well, as a trailer field of the same name after a chunked body (declared with `Trailer: X-Cohort-Sha256`), for a client that hashes the bytes as it sends them; a trailer that names another digest than the header is `bad_request`.")
            .raw_body("application/octet-stream", "The blob's bytes.")
            .answers::<BlobInfo>(201, "Stored (new on the answering node).")
            .answers::<BlobInfo>(200, "Already stored.")
            .errors(&[MASTER, &[BadRequest, BlobTooLarge, BlobDigestMismatch, RequestTimeout, BlobStoreFull, BlobsBusy, ReplicationFailed, BlobStoreUnavailable, BlobsFull]]),
        H::BlobList => doc("blobs", "The blobs the answering node holds, or the cluster keeps")
            .describe("`scope=node` (the default): every blob stored on the answering node. `scope=cluster`: a page of the blobs the cluster keeps, from the master's registry, wherever their copies are; `next` is the `after` of the next page.")
            .param("scope", Query, one_of(&["node", "cluster"]), "`node` (the default) or `cluster`.")
            .param("after", Query, text().pattern(Some("^[0-9a-fA-F]{64}$")), "The `next` of the page before (`scope=cluster`; a node's listing is whole).")
            .param("limit", Query, integer(1, 1000), "Most blobs (`scope=cluster`; default 100).")
            .answers::<BlobList>(200, "By digest, each with whether the cluster keeps it and what names it (left out, for a node's listing, when the master cannot answer).")
            .errors(&[MASTER, &[BadRequest]]),
        H::BlobDelete => blob(doc("blobs", "Stop keeping a blob"))
            .describe("The cluster stops keeping the blob at once; every node deletes its copy once its grace period (`--blob-grace`) has passed since it last stored the blob. Refused while a held job (its input, or an output it wrote) or a schedule names the blob: those keep it until the retention time after they are gone.")
            .answers::<BlobDeleted>(200, "No longer kept.")
            .errors(&[MASTER, &[BlobNotFound, BlobInUse]]),
        H::BlobPurge => blob(doc("blobs", "Purge a blob that finished jobs name"))
            .describe("As `DELETE /v1/blobs/{digest}`, for a blob that finished jobs still name: the finished jobs that read it as their input are purged (as at retention: their records, results and output blobs go), and those that wrote it no longer list it among their outputs. Refused while a job that has not finished reads it as its input, or reads the outputs of a job that names it (a DAG's child), or a schedule gives it to its jobs: cancel or delete those first; the message names the first.")
            .answers::<BlobPurged>(200, "No longer kept; `jobs` finished jobs forgot it.")
            .errors(&[MASTER, &[BlobNotFound, BlobInUse]]),
        H::BlobGet => blob(doc("blobs", "A blob's bytes, streamed"))
            .describe("The whole blob, or the one byte range `Range: bytes=a-b`, `bytes=a-` or `bytes=-n` asks for (`206` with `Content-Range`); a header that is not one valid range is ignored. A node without a copy fetches it from a back-end node (or the S3-compatible store) first, checking its digest: an object in the store that does not hold the blob is `blob_store_corrupt`, never served. `ETag` is the quoted digest.")
            .param("Range", Header, text(), "One byte range (RFC 9110).")
            .answers_raw(200, "application/octet-stream", "The blob.")
            .answers_raw(206, "application/octet-stream", "The range asked for.")
            .errors(&[&[BlobNotFound, RangeNotSatisfiable, BlobsBusy, ReplicationFailed, BlobStoreUnavailable, BlobStoreCorrupt, BlobStoreFull]]),
        H::BlobHead => blob(doc("blobs", "Whether a blob is stored, and its size"))
            .answers_empty(200, "Stored: `Content-Length` is its size, `ETag` its quoted digest.")
            .answers_empty(404, "No such blob (no body: a `HEAD` answer has none).")
            .errors(&[&[ReplicationFailed, BlobStoreUnavailable]]),
        H::DeploymentList => doc("deployments", "Every deployment (a name pointing at a module)")
            .answers::<DeploymentListResponse>(200, "Every name with its current version, by name (versions listed by `GET /v1/deployments/{name}`).")
            .errors(&[MASTER]),
        H::DeploymentGet => deployment(doc("deployments", "A deployment with its kept versions"))
            .answers::<DeploymentResponse>(200, "Its current version and its kept versions, newest first.")
            .errors(&[MASTER, &[ModuleNameNotFound]]),
        H::Deploy => deployment(doc("deployments", "Point a name at a stored module"))
            .describe("A new version of the name, unless it already points at this module (`existing`). Jobs, DAG jobs and schedules that name their module by this name run it from then on; jobs already accepted keep the module they were accepted with.")
            .body::<DeployRequest>(serde_json::json!({"digest": "ab".repeat(32)}))
            .answers::<DeployResponse>(200, "The version now current.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge, InvalidModuleName, ModuleNotFound, ModuleNamesFull]]),
        H::DeploymentRollback => deployment(doc("deployments", "Point a name back at an earlier version's module"))
            .describe("A new version whose module is that of `to` (default: the version current before the current one). Two rollbacks in a row return to where the first started.")
            .body::<RollbackRequest>(serde_json::json!({"to": 3}))
            .answers::<DeployResponse>(200, "The version now current.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge, InvalidModuleName, ModuleNameNotFound, ModuleVersionNotFound, NothingToRollBack]]),
        H::GrantAdd => deployment(doc("deployments", "Grant a name's jobs outbound HTTP(S)"))
            .describe("Adds grants to the name (a grant it holds already is not added twice). A job submitted by the name may then call what a grant allows: the node resolves the host itself and connects only to an address that passes (loopback, private, link-local and metadata addresses only when a grant names the address, or says `private` for a name). Attempts assigned from now on run with the name's grants; an undeploy takes them away. `secrets` names secrets the jobs may read themselves (the job SDKs' `secret(name)`), their values masked in the jobs' logs.")
            .body::<GrantRequest>(serde_json::json!({"http": [{"url": "https://api.example.com/v1/", "methods": ["POST"]}], "secrets": ["SMTP_PASSWORD"]}))
            .answers::<GrantsResponse>(200, "Every grant of the name now.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge, InvalidModuleName, InvalidGrant, InvalidSecret, ModuleNameNotFound, SecretNotFound, TooManyGrants]]),
        H::GrantRevoke => deployment(doc("deployments", "Take grants from a name"))
            .describe("Removes the grants and readable secrets listed (grants as they were granted); one the name does not hold changes nothing.")
            .body::<GrantRequest>(serde_json::json!({"http": [{"url": "https://api.example.com/v1/", "methods": ["POST"]}]}))
            .answers::<GrantsResponse>(200, "Every grant of the name now.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge, InvalidModuleName, InvalidGrant, InvalidSecret, ModuleNameNotFound, TooManyGrants]]),
        H::GrantRevokeAll => deployment(doc("deployments", "Take every grant and readable secret from a name"))
            .answers::<GrantsResponse>(200, "The name, with no grant left.")
            .errors(&[MASTER, &[InvalidModuleName, ModuleNameNotFound]]),
        H::SecretList => doc("secrets", "Every secret's name (never a value)")
            .answers::<SecretListResponse>(200, "Each secret's name, when it was last set and the deployments whose grants name it.")
            .errors(&[MASTER]),
        H::SecretSet => secret(doc("secrets", "Set a secret"))
            .describe("The node seals the value with the cluster key before the master sees it; the master keeps only the sealed bytes, journaled and replicated. A grant's header then names it (`{secret:NAME}`) and the node sending a granted request fills it in: the job never holds the value. Refused on a node without a cluster key.")
            .body::<SecretRequest>(serde_json::json!({"value": "sk_test_4eC39HqLyjWDarjtT1zdp7dc"}))
            .answers::<SecretResponse>(200, "Set; `created` if it is new.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge, InvalidSecret, SecretsFull, SecretsUnavailable]]),
        H::SecretDelete => secret(doc("secrets", "Delete a secret"))
            .answers::<SecretDeletedResponse>(200, "Deleted.")
            .errors(&[MASTER, &[InvalidSecret, SecretNotFound, SecretInUse]]),
        H::Undeploy => deployment(doc("deployments", "Remove a deployment"))
            .answers::<UndeployResponse>(200, "Removed, with its versions; jobs keep the module they resolved to.")
            .errors(&[MASTER, &[InvalidModuleName, ModuleNameNotFound, ModuleNameInUse]]),
        H::JobSubmit => doc("jobs", "Submit a job")
            .describe("Answered once the job is durable on a majority of the voters. The same `idempotency_key` gives the same job; so does the same `unique_key` within its window. Jobs sharing a `concurrency_key` run at most `concurrency_limit` at once and start at most `rate_limit` a second.")
            .body::<SubmitRequest>(serde_json::json!({"module": "ab".repeat(32), "input": "a b a", "idempotency_key": "order-17"}))
            .answers::<SubmitResponse>(202, "Accepted, durable.")
            .errors(&[MASTER, &[
                BadJson,
                BadRequest,
                BodyTooLarge,
                InputTooLarge,
                ModuleNotFound,
                InvalidModuleName,
                ModuleNameNotFound,
                InvalidGrant,
                InvalidJob,
                InvalidNamespace,
                NamespacesFull,
                IdempotencyConflict,
                QueueFull,
                QuotaExceeded,
                UniqueKeysFull,
                InvalidDag,
                OutcomeUnknown,
                ReplicasUnavailable,
                BlobNotFound,
                ReplicationFailed,
                BlobStoreUnavailable,
            ]]),
        H::JobBatch => doc("jobs", "Submit many jobs (at most 10,000)")
            .describe("Each job is a submission of its own: `results[i]` is its id or its error.")
            .body::<BatchRequest>(serde_json::json!({"jobs": [{"module": "ab".repeat(32), "input": "one"}, {"module": "ab".repeat(32), "input_json": {"n": 2}}]}))
            .answers::<BatchResponse>(202, "One result per job, in order.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge]]),
        H::JobWait => doc("jobs", "Wait for the first of many jobs to finish")
            .describe("Answers the finished ones among `ids` as soon as one has finished (gathering 10 ms more), or none after `wait_ms`. Outputs up to 64 KiB come inline, within 4 MiB per answer.")
            .body::<WaitRequest>(serde_json::json!({"ids": [1, 2, 3], "wait_ms": 25000}))
            .answers::<WaitResponse>(200, "The finished jobs among those asked about.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge]]),
        H::JobGet => wait_ms(doc("jobs", "A job's record"))
            .param("id", Path, integer(0, u64::MAX), "The job's id.")
            .answers::<JobResponse>(200, "Its state, attempts, error, sizes and progress.")
            .errors(&[MASTER, &[BadRequest, JobNotFound, JobExpired]]),
        H::JobCancel => id(doc("jobs", "Cancel a job"))
            .answers::<JobResponse>(200, "The cancelled job.")
            .errors(&[MASTER, &[BadRequest, JobNotFound, JobExpired, JobFinished]]),
        H::JobResult => wait_ms(id(doc("jobs", "A succeeded job's output")))
            .answers_raw(200, "application/octet-stream", "The output bytes.")
            .errors(&[MASTER, &[BadRequest, JobNotFound, JobExpired, JobNotFinished, JobNotSucceeded]]),
        H::JobList => doc("jobs", "Jobs by id, a page at a time")
            .describe("Every filter given must hold. A page may be shorter than `limit` and still have a `next_cursor`: one request looks at most at 100,000 jobs.")
            .param("state", Query, one_of(STATES), "Only jobs in this state.")
            .param("module", Query, text().pattern(Some(MODULE_REF)), "Only jobs running this module (its sha256), or submitted by this deployment name.")
            .param("priority", Query, ObjectBuilder::new().schema_type(Type::Integer).format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Int32))), "Only jobs of this priority.")
            .param("from", Query, integer(0, u64::MAX), "Only jobs submitted at or after (ms since the Unix epoch).")
            .param("to", Query, integer(0, u64::MAX), "Only jobs submitted at or before.")
            .param("error", Query, text().max_length(Some(FILTER_TEXT_CHARS_MAX)), "Only jobs whose error code or message holds this text (ASCII case ignored).")
            .param("namespace", Query, text().pattern(Some("^[a-z0-9][a-z0-9-]{0,62}$")), "Only jobs of this namespace (a token confined to one lists its own only, whatever this says).")
            .param("order", Query, one_of(&["oldest", "newest"]), "`oldest` first (by id, the default) or `newest` first.")
            .param("limit", Query, integer(1, 1000), "Most jobs (default 100).")
            .param("cursor", Query, integer(0, u64::MAX), "The `next_cursor` of the previous page.")
            .answers::<JobListResponse>(200, "A page, and the cursor of the next.")
            .errors(&[MASTER, &[BadRequest, InvalidNamespace]]),
        H::JobBulk => doc("jobs", "Cancel or retry every job a filter matches")
            .describe("One master command: the changes commit together (at most 10,000 jobs per request; send it again for the rest). `cancel` changes jobs not finished; `retry` queues failed, dead and cancelled jobs again with `attempts` more attempts. With `dry_run`, only counts.")
            .body::<BulkRequest>(serde_json::json!({"action": "retry", "filter": {"state": "dead", "error": "timeout"}, "dry_run": true}))
            .answers::<BulkResponse>(200, "`matched` (dry run) or `changed`.")
            .errors(&[MASTER, &[BadJson, BadRequest, InvalidFilter, ReplicasUnavailable]]),
        H::JobInput => id(doc("jobs", "A job's input"))
            .answers_raw(200, "application/octet-stream", "The input bytes.")
            .errors(&[MASTER, &[BadRequest, JobNotFound, JobExpired]]),
        H::DagSubmit => doc("dags", "Submit a DAG of jobs")
            .describe("All or nothing: every job is checked as a submission, then the graph (names, cycles, parents that exist and have not failed; at most 10,000 jobs, 100 parents each). A job starts once all its parents succeeded and, unless `parent_outputs` is false, gets `{\"input\", \"parents\": [{\"id\", \"name\", \"output\", \"blobs\"}]}` as its input (`blobs`: the parent's output blobs, which it may read as `PARENT/OUTPUT`). A failure cancels the failed job's descendants (`skip_descendants`) or the whole DAG (`cancel_dag`).")
            .body::<DagRequest>(serde_json::json!({"jobs": [{"name": "fetch", "job": {"module": "ab".repeat(32), "input": "https://example.com"}}, {"name": "count", "job": {"module": "cd".repeat(32)}, "after": ["fetch"]}], "on_failure": "skip_descendants"}))
            .answers::<DagSubmitResponse>(202, "Accepted, durable: the DAG's id and its jobs' ids in order.")
            .errors(&[MASTER, &[BadJson, BadRequest, BodyTooLarge, InputTooLarge, ModuleNotFound, InvalidModuleName, ModuleNameNotFound, InvalidGrant, InvalidJob, InvalidNamespace, NamespacesFull, InvalidDag, QueueFull, QuotaExceeded, OutcomeUnknown, BlobNotFound, ReplicationFailed, BlobStoreUnavailable]]),
        H::DagGet => doc("dags", "A DAG's status")
            .param("id", Path, integer(0, u64::MAX), "The DAG's id.")
            .answers::<DagResponse>(200, "Its state, counts per state, waiting jobs and every job with its parents.")
            .errors(&[MASTER, &[BadRequest, DagNotFound]]),
        H::ScheduleCreate => doc("schedules", "Create a schedule")
            .describe("A job fired at every tick of `cron` (read in `timezone`) or of `every_ms`. Each tick fires exactly once across master hand-overs and crashes; ticks missed by more than `catch_up_ms` are recorded for a backfill. The job template is checked as a submission is.")
            .body::<ScheduleRequest>(serde_json::json!({"name": "nightly-report", "cron": "0 30 2 * * *", "timezone": "Europe/Paris", "overlap": "skip", "job": {"module": "ab".repeat(32), "input": "report"}}))
            .answers::<ScheduleResponse>(201, "Created, with its next ticks.")
            .errors(&[MASTER, &[BadJson, BadRequest, BodyTooLarge, InputTooLarge, ModuleNotFound, InvalidModuleName, ModuleNameNotFound, InvalidGrant, InvalidJob, InvalidNamespace, InvalidSchedule, ScheduleExists, BlobNotFound, ReplicationFailed, BlobStoreUnavailable]]),
        H::ScheduleList => doc("schedules", "Every schedule")
            .answers::<ScheduleListResponse>(200, "By name.")
            .errors(&[MASTER]),
        H::ScheduleGet => name(doc("schedules", "A schedule"))
            .answers::<ScheduleResponse>(200, "Its timing, next ticks, unfinished jobs, counters and missed ranges.")
            .errors(&[MASTER, &[ScheduleNotFound]]),
        H::ScheduleDelete => name(doc("schedules", "Delete a schedule"))
            .describe("The jobs it fired stay.")
            .answers::<ScheduleDeletedResponse>(200, "Deleted.")
            .errors(&[MASTER, &[ScheduleNotFound]]),
        H::SchedulePause => name(doc("schedules", "Pause a schedule"))
            .describe("Its ticks neither fire nor count as missed until it is resumed.")
            .answers::<ScheduleResponse>(200, "Paused.")
            .errors(&[MASTER, &[ScheduleNotFound]]),
        H::ScheduleResume => name(doc("schedules", "Resume a schedule"))
            .describe("It goes on from its first tick after now.")
            .answers::<ScheduleResponse>(200, "Resumed, with its next ticks.")
            .errors(&[MASTER, &[ScheduleNotFound]]),
        H::ScheduleBackfill => name(doc("schedules", "Fire missed ticks"))
            .describe("Fires each missed tick in `from..to` (at most 1,000 per request), once: a tick backfilled is no longer missed.")
            .body::<BackfillRequest>(serde_json::json!({"from": 1_767_225_600_000_u64, "to": 1_767_229_200_000_u64}))
            .answers::<BackfillResponse>(202, "The jobs, one per tick, in tick order.")
            .errors(&[MASTER, &[BadJson, ScheduleNotFound, InvalidSchedule, QueueFull]]),
        H::Overview => doc("cluster", "The dashboard's overview")
            .answers::<OverviewResponse>(200, "Jobs by state, counters, recent latency, nodes, workers, replica lag and what the answering node saw happen.")
            .errors(&[MASTER]),
        H::Events => doc("cluster", "The overview as server-sent events")
            .describe("An `overview` event (an OverviewResponse) every second, or an `error` event (an ErrorBody) when the master cannot answer, until the client goes or the node stops. A token confined to a namespace gets a `namespaces` event (a NamespaceListResponse: its namespace's counts and costs, as `GET /v1/namespaces` answers it) instead, nothing cluster-wide. At most 64 streams per node.")
            .answers_raw(200, "text/event-stream", "`event: overview` (a confined token: `event: namespaces`) lines, each with its `data:`.")
            .errors(&[&[TooManyConnections]]),
        H::Namespaces => doc("namespaces", "Each namespace's jobs and what they cost")
            .describe("Every namespace that held a job since the cluster counts them: the jobs it holds by state, and, since its first job, what it submitted and what its attempts cost as their workers metered them (CPU, outbound bytes). A token confined to a namespace sees that one alone.")
            .answers::<NamespaceListResponse>(200, "By name.")
            .errors(&[MASTER]),
        H::NamespaceQuotas => doc("namespaces", "Set a namespace's quotas")
            .describe("Sets all four at once; each one left out is no quota (`{}`: none). Past `waiting_max`, `submissions_per_second` or `result_bytes_max`, a submission in the namespace is `429 quota_exceeded` with `Retry-After`; past `running_max`, its jobs wait in line. A namespace given quotas is listed before its first job. Cluster-wide: a token confined to a namespace cannot set quotas, not even its own.")
            .param("name", Path, text().pattern(Some("^[a-z0-9][a-z0-9-]{0,62}$")), "The namespace (`default` for the default one).")
            .body::<QuotasBody>(serde_json::json!({"waiting_max": 10000, "running_max": 8, "submissions_per_second": 100, "result_bytes_max": 1_073_741_824_u64}))
            .answers::<QuotasResponse>(200, "The quotas it has now.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge, InvalidNamespace, InvalidQuota, NamespacesFull]]),
        H::NamespaceWeight => doc("namespaces", "Set a namespace's weight")
            .describe("When namespaces compete for workers, each gets running capacity in proportion to its weight, measured in the CPU time its attempts use as their sandboxes meter it (start-time fair queuing; see ARCHITECTURE.md, \"Fair shares\"). 1 unless set; a namespace alone takes every slot. Cluster-wide: a token confined to a namespace cannot set weights.")
            .param("name", Path, text().pattern(Some("^[a-z0-9][a-z0-9-]{0,62}$")), "The namespace (`default` for the default one).")
            .body::<WeightBody>(serde_json::json!({"weight": 2}))
            .answers::<WeightResponse>(200, "The weight it has now.")
            .errors(&[MASTER, &[BadJson, BodyTooLarge, InvalidNamespace, InvalidWeight, NamespacesFull]]),
        H::Whoami => doc("tokens", "What the caller's token may do")
            .answers::<WhoamiResponse>(200, "Whether tokens are needed, the token's id, its scopes and the namespace it is confined to.")
            .errors(&[]),
        H::DashboardPage => doc("dashboard", "The dashboard (HTML)")
            .answers_raw(200, "text/html", "The page; it asks the API for its data.")
            .errors(&[]),
        H::DashboardScript => doc("dashboard", "The dashboard's script")
            .answers_raw(200, "text/javascript", "The script.")
            .errors(&[]),
        H::DashboardStyle => doc("dashboard", "The dashboard's stylesheet")
            .answers_raw(200, "text/css", "The stylesheet.")
            .errors(&[]),
        H::TokenList => doc("tokens", "The API tokens (never their secrets)")
            .answers::<TokenListResponse>(200, "Every token, by id.")
            .errors(&[MASTER]),
        H::TokenCreate => doc("tokens", "Add a token made by the caller")
            .describe("`cohort token create` makes the token and sends its id, scopes and the SHA-256 of its secret; the node never sees the secret.")
            .body::<TokenCreateRequest>(serde_json::json!({"id": "3f9c01d2a4b7", "name": "ci", "scopes": ["submit"], "sha256": "0".repeat(64)}))
            .answers::<TokenCreatedResponse>(201, "Created.")
            .errors(&[MASTER, &[BadJson, InvalidToken, InvalidNamespace, TokenExists]]),
        H::TokenRevoke => doc("tokens", "Revoke a token")
            .param("id", Path, text(), "The token's id.")
            .answers::<RevokedResponse>(200, "Revoked.")
            .errors(&[MASTER, &[TokenNotFound]]),
        H::OpenApi => doc("node", "This document")
            .answers_raw(200, "application/json", "The OpenAPI 3.1 document of the API.")
            .errors(&[]),
        H::DashboardIndex
        | H::InternalMaster
        | H::InternalReplication
        | H::InternalVoters
        | H::InternalModules
        | H::InternalModuleFetch
        | H::InternalMasters
        | H::InternalMasterFetch
        | H::InternalTokens
        | H::InternalBlobPut
        | H::InternalBlobFetch => return None,
    })
}

/// Every documented route of the table ([`ROUTES`]): its method and path
/// as the table has them, what the document says of it, and no token for
/// the open ones.
fn routes() -> Vec<(HttpMethod, &'static str, Operation)> {
    ROUTES
        .iter()
        .filter_map(|route| {
            let doc = operation(route.handler)?;
            let doc = if route.access == Access::Open {
                doc.public()
            } else {
                doc
            };
            Some(doc.build(route.verb, route.path))
        })
        .collect()
}

fn build() -> OpenApi {
    let mut paths: BTreeMap<&str, PathItem> = BTreeMap::new();
    for (method, path, operation) in routes() {
        match paths.get_mut(path) {
            Some(item) => item.merge_operations(PathItem::new(method, operation)),
            None => {
                paths.insert(path, PathItem::new(method, operation));
            }
        }
    }
    let mut builder = PathsBuilder::new();
    for (path, item) in paths {
        builder = builder.path(path, item);
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("cohort")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "The HTTP API of a cohort node: upload WebAssembly job modules, submit jobs, wait for them, read the cluster. Every node serves it; errors are `{code, message, retryable}` with a stable code.",
                ))
                .build(),
        )
        .paths(builder.build())
        .components(Some(components()))
        // A token is needed only once the cluster has a key.
        .security(Some([
            SecurityRequirement::new("token", Vec::<String>::new()),
            SecurityRequirement::default(),
        ]))
        .build()
}

/// The security scheme and every schema the routes refer to.
fn components() -> utoipa::openapi::Components {
    let mut components = ComponentsBuilder::new().security_scheme(
        "token",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "A token from `cohort token create`, needed once the cluster has a key; its scopes (read, submit, admin) decide the routes it may use.",
                ))
                .build(),
        ),
    );
    macro_rules! schemas {
        ($($t:ty),*) => { $( components = components.schema_from::<$t>(); )* };
    }
    schemas!(
        ErrorBody,
        SubmitRequest,
        SubmitResponse,
        BatchRequest,
        BatchItem,
        BatchResponse,
        WaitRequest,
        WaitResponse,
        FinishedBody,
        JobResponse,
        Attempt,
        ProgressBody,
        JobListResponse,
        JobSummaryBody,
        ModuleBody,
        ModuleListResponse,
        BlobInfo,
        OutputBlob,
        BlobEntry,
        BlobList,
        BlobDeleted,
        BlobPurged,
        ClusterResponse,
        NodeBody,
        WorkerBody,
        SecurityBody,
        TokenCreateRequest,
        TokenBody,
        TokenCreatedResponse,
        TokenListResponse,
        ScopeName,
        HealthResponse,
        LeavingResponse,
        MasterBuildResponse,
        MasterSwitchResponse,
        RemovingResponse,
        RevokedResponse,
        JobFilterBody,
        BulkRequest,
        BulkResponse,
        WhoamiResponse,
        OverviewResponse,
        NamespaceListResponse,
        NamespaceBody,
        QuotasBody,
        QuotasResponse,
        WeightBody,
        WeightResponse,
        MasterBody,
        LatencyBody,
        ReplicaBody,
        HistoryBody,
        ScheduleRequest,
        ScheduleResponse,
        ScheduleListResponse,
        MissedRange,
        BackfillRequest,
        BackfillResponse,
        ScheduleDeletedResponse,
        DeployRequest,
        RollbackRequest,
        DeploymentVersion,
        DeploymentResponse,
        DeploymentListResponse,
        DeployResponse,
        UndeployResponse,
        GrantRequest,
        GrantsResponse,
        HttpGrantBody,
        CallRecord,
        Usage,
        SecretRequest,
        SecretResponse,
        SecretBody,
        SecretListResponse,
        SecretDeletedResponse,
        DagRequest,
        DagJobRequest,
        DagSubmitResponse,
        DagResponse,
        DagJobBody
    );
    components.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn every_public_route_is_documented_once() {
        let documented: Vec<(String, &str)> = routes()
            .into_iter()
            .map(|(method, path, _)| {
                let method = serde_json::to_value(&method).expect("a method serializes");
                (method.as_str().unwrap_or_default().to_string(), path)
            })
            .collect();
        for route in ROUTES {
            let listed = documented
                .iter()
                .filter(|(method, path)| {
                    *path == route.path && method.eq_ignore_ascii_case(route.verb.as_str())
                })
                .count();
            let expected = usize::from(
                route.access != Access::Sealed && route.handler != Handler::DashboardIndex,
            );
            assert_eq!(listed, expected, "{} {}", route.verb.as_str(), route.path);
        }
    }

    #[test]
    fn every_error_code_is_documented_with_its_status() {
        let document: serde_json::Value = serde_json::from_str(document()).unwrap();
        let text = document.to_string();
        for code in ErrorCode::ALL {
            assert!(
                text.contains(&format!("\"{}\"", code.as_str()))
                    || [
                        Undecodable,
                        MethodNotAllowed,
                        NotFound,
                        CheckpointTooLarge,
                        RecordTooLarge
                    ]
                    .contains(code),
                "{} is in no route's errors",
                code.as_str()
            );
        }
    }

    #[test]
    fn every_schema_referenced_is_in_the_document() {
        let document: serde_json::Value = serde_json::from_str(document()).unwrap();
        let schemas = &document["components"]["schemas"];
        let text = document.to_string();
        let prefix = "\"#/components/schemas/";
        let mut missing = Vec::new();
        for (at, _) in text.match_indices(prefix) {
            let rest = &text[at + prefix.len()..];
            let name = &rest[..rest.find('"').unwrap()];
            if schemas.get(name).is_none() {
                missing.push(name.to_string());
            }
        }
        missing.sort();
        missing.dedup();
        assert!(missing.is_empty(), "referenced but not listed: {missing:?}");
    }

    #[test]
    fn the_committed_copy_is_current() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/openapi.json");
        if std::env::var_os("COHORT_BLESS").is_some() {
            std::fs::write(&path, document()).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == document(),
            "clients/openapi.json is not the node's document: run COHORT_BLESS=1 cargo test -p cohort --lib openapi"
        );
    }
}
